/*  nn_optim.c: SGD step and FedAvg. */
#include "nn_optim.h"

#include <assert.h>

void
nn_sgd_step (float *params, float *velocity, const float *grads, size_t count,
             const nn_sgd_t *hp)
{
    float lr = hp->learning_rate, mu = hp->momentum, wd = hp->weight_decay;
    for (size_t i = 0; i < count; i++) {
        float d = grads[i] + wd * params[i];
        float v = mu * velocity[i] + d;
        velocity[i] = v;
        params[i] -= lr * v;
    }
}

void
nn_fedavg (float *dst, const float *const *srcs, const double *weights, int k,
           size_t count)
{
    double total = 0.0;
    for (int j = 0; j < k; j++)
        total += weights[j];
    assert (k > 0 && total > 0.0);
    for (size_t i = 0; i < count; i++) {
        double acc = 0.0;
        for (int j = 0; j < k; j++)
            acc += weights[j] * srcs[j][i];
        dst[i] = (float) (acc / total);
    }
}
