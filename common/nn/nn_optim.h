/*  nn_optim.h: SGD with momentum and weight decay (PyTorch semantics,
    dampening 0, not Nesterov): d = g + wd * p; v = mu * v + d; p -= lr * v.
    A zeroed v equals PyTorch's first-step initialisation v = d.
    Aggregation of the devices' slabs: FedAvg, and the robust rules
    (coordinate-wise trimmed mean and median, update-norm clipping). */
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

//  BN running statistics pooled over k parts of the data (devices), each
//  estimated on its own part for the same weights: mean (c) and var (c)
//  are those of the mixture, weighted by sample count (weights > 0):
//  mean = sum w_j m_j / W, var = sum w_j (v_j + m_j^2) / W - mean^2 (at
//  least 0), so the spread between the parts' means counts as FedAvg's
//  plain average of the variances would not. mean and var may alias
//  means[0] and vars[0].
void nn_bn_pool (float *mean, float *var, const float *const *means,
                 const float *const *vars, const double *weights, int k, size_t c);

//  dst (count) = per coordinate, the mean of the k values srcs[j][i] left
//  after dropping the `trim` smallest and the `trim` largest (unweighted:
//  a device's claimed sample count cannot pull it). 0 <= 2 * trim < k.
//  scratch holds k floats.
void nn_trimmed_mean (float *dst, const float *const *srcs, int k, int trim,
                      size_t count, float *scratch);

//  dst (count) = per coordinate, the median of the k values (the mean of
//  the two middle ones when k is even). k >= 1; scratch holds k floats.
void nn_median (float *dst, const float *const *srcs, int k, size_t count,
                float *scratch);

//  Clip an update to an L2 norm of at most max_norm (> 0): w (count) =
//  ref + (w - ref) * min (1, max_norm / |w - ref|). Returns |w - ref|
//  before clipping.
double nn_clip_update (float *w, const float *ref, size_t count, double max_norm);

#endif
