/*  nn_loss.c: softmax cross-entropy. */
#include "nn_kernels.h"

#include <assert.h>
#include <math.h>

float
nn_softmax_xent (float *dlogits, const float *logits, const int *labels, int n,
                 int classes, float scale, int *correct)
{
    double total = 0.0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t) i * classes;
        int y = labels[i];
        //  Labels are validated where they enter (dataset reader, decoder).
        assert (y >= 0 && y < classes);
        int best = 0;
        float zmax = z[0];
        for (int k = 1; k < classes; k++)
            if (z[k] > zmax) {
                zmax = z[k];
                best = k;
            }
        hits += best == y;
        double sum = 0.0;
        for (int k = 0; k < classes; k++)
            sum += exp ((double) z[k] - zmax);
        double log_sum = log (sum);
        total += log_sum - ((double) z[y] - zmax);
        if (dlogits) {
            float *d = dlogits + (size_t) i * classes;
            float g = scale / n;
            for (int k = 0; k < classes; k++) {
                double prob = exp ((double) z[k] - zmax - log_sum);
                d[k] = (float) (g * (prob - (k == y)));
            }
        }
    }
    if (correct)
        *correct += hits;
    return (float) (scale * total / n);
}
