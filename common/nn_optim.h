/*  nn_optim.h: SGD with momentum and weight decay (PyTorch semantics,
    dampening 0, not Nesterov): d = g + wd * p; v = mu * v + d; p -= lr * v.
    A zeroed v equals PyTorch's first-step initialisation v = d. */
#ifndef NN_OPTIM_H_INCLUDED
#define NN_OPTIM_H_INCLUDED

#include <stddef.h>

typedef struct {
    float learning_rate;
    float momentum;
    float weight_decay;
} nn_sgd_t;

//  params, velocity (count) updated in place from grads (count).
void nn_sgd_step (float *params, float *velocity, const float *grads, size_t count,
                  const nn_sgd_t *hp);

//  dst (count) = sum_k weights[k] * srcs[k][i] / sum_k weights[k]:
//  FedAvg of k slabs, weighted by sample count (weights > 0).
void nn_fedavg (float *dst, const float *const *srcs, const double *weights,
                int k, size_t count);

#endif
