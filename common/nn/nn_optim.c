/*  nn_optim.c: SGD step, FedAvg and the robust aggregation rules. */
#include "nn_optim.h"

#include <assert.h>
#include <math.h>

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

void
nn_bn_pool (float *mean, float *var, const float *const *means, const float *const *vars,
            const double *weights, int k, size_t c)
{
    double total = 0.0;
    for (int j = 0; j < k; j++)
        total += weights[j];
    assert (k > 0 && total > 0.0);
    for (size_t i = 0; i < c; i++) {
        double m = 0.0, sq = 0.0;
        for (int j = 0; j < k; j++) {
            double mj = means[j][i];
            m += weights[j] * mj;
            sq += weights[j] * ((double) vars[j][i] + mj * mj);
        }
        m /= total;
        double v = sq / total - m * m;
        mean[i] = (float) m;
        var[i] = (float) (v > 0.0 ? v : 0.0);
    }
}

//  The k values of coordinate i, sorted ascending into out (insertion sort:
//  k is the number of devices, at most a few dozen).
static void
s_sorted_column (float *out, const float *const *srcs, int k, size_t i)
{
    for (int j = 0; j < k; j++) {
        float v = srcs[j][i];
        int at = j;
        while (at > 0 && out[at - 1] > v) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = v;
    }
}

void
nn_trimmed_mean (float *dst, const float *const *srcs, int k, int trim, size_t count,
                 float *scratch)
{
    assert (k > 0 && trim >= 0 && 2 * trim < k);
    for (size_t i = 0; i < count; i++) {
        s_sorted_column (scratch, srcs, k, i);
        double acc = 0.0;
        for (int j = trim; j < k - trim; j++)
            acc += scratch[j];
        dst[i] = (float) (acc / (k - 2 * trim));
    }
}

void
nn_median (float *dst, const float *const *srcs, int k, size_t count, float *scratch)
{
    assert (k > 0);
    for (size_t i = 0; i < count; i++) {
        s_sorted_column (scratch, srcs, k, i);
        dst[i] = k % 2 ? scratch[k / 2]
                       : (float) (0.5 * ((double) scratch[k / 2 - 1] + scratch[k / 2]));
    }
}

double
nn_clip_update (float *w, const float *ref, size_t count, double max_norm)
{
    assert (max_norm > 0.0);
    double sq = 0.0;
    for (size_t i = 0; i < count; i++) {
        double d = (double) w[i] - ref[i];
        sq += d * d;
    }
    double norm = sqrt (sq);
    if (norm > max_norm) {
        double scale = max_norm / norm;
        for (size_t i = 0; i < count; i++)
            w[i] = (float) (ref[i] + ((double) w[i] - ref[i]) * scale);
    }
    return norm;
}
