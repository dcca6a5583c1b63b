/*  BN running statistics for the calibration after FedAvg
    (server/srv_calib.h): a momentum of 1/k before the k-th forward makes
    them the plain mean over the forwards, and nn_bn_pool gives the
    statistics of the devices' data taken together. */
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_model.h"
#include "nn_optim.h"

static void
s_fill (float *x, size_t count, float scale, float shift, nn_rng_t *rng)
{
    for (size_t i = 0; i < count; i++)
        x[i] = scale * (2.0f * nn_rng_uniform (rng) - 1.0f) + shift;
}

//  Population mean and variance of column i of rows (n, c).
static void
s_moments (double *mean, double *var, const float *rows, int n, int c, int i)
{
    double s = 0.0, sq = 0.0;
    for (int r = 0; r < n; r++)
        s += rows[(size_t) r * c + i];
    s /= n;
    for (int r = 0; r < n; r++) {
        double d = rows[(size_t) r * c + i] - s;
        sq += d * d;
    }
    *mean = s;
    *var = sq / n;
}

//  Two devices' data, 30 and 70 rows of 5 channels with different means:
//  pooling their (population) moments, weighted by rows, gives the moments
//  of all 100 rows, the spread between the two means included; the plain
//  average of the variances does not.
Test (bnstats, pool_is_the_mixture_of_the_parts)
{
    enum { C = 5, NA = 30, NB = 70 };
    nn_rng_t rng;
    nn_rng_seed (&rng, 3);
    float all[(NA + NB) * C];
    s_fill (all, (size_t) NA * C, 1.0f, -2.0f, &rng);
    s_fill (all + NA * C, (size_t) NB * C, 0.5f, 3.0f, &rng);
    float ma[C], va[C], mb[C], vb[C], mean[C], var[C];
    for (int i = 0; i < C; i++) {
        double m, v;
        s_moments (&m, &v, all, NA, C, i);
        ma[i] = (float) m;
        va[i] = (float) v;
        s_moments (&m, &v, all + NA * C, NB, C, i);
        mb[i] = (float) m;
        vb[i] = (float) v;
    }
    const float *means[2] = { ma, mb }, *vars[2] = { va, vb };
    double w[2] = { NA, NB };
    nn_bn_pool (mean, var, means, vars, w, 2, C);
    for (int i = 0; i < C; i++) {
        double m, v;
        s_moments (&m, &v, all, NA + NB, C, i);
        cr_assert_float_eq (mean[i], m, 1e-5, "channel %d mean %g, want %g", i, mean[i], m);
        cr_assert_float_eq (var[i], v, 1e-4, "channel %d var %g, want %g", i, var[i], v);
        //  The means differ by ~5: the plain average is far below.
        cr_assert_gt (v, 0.3 * va[i] + 0.7 * vb[i] + 1.0);
    }
    //  In place over the first device's arrays, as the server may call it.
    nn_bn_pool (ma, va, means, vars, w, 2, C);
    cr_assert_eq (memcmp (ma, mean, sizeof mean), 0);
    cr_assert_eq (memcmp (va, var, sizeof var), 0);
}

//  VGG5's first unit (conv, BN, ReLU, max-pool). K batches forwarded with
//  momentum 1/k leave the running mean of the K batches together (each
//  batch's mean weighs the same; the conv output does not depend on the
//  grouping) and the running variance the mean of the batches' unbiased
//  variances, whatever the statistics were before. Then the default
//  momentum is back: one more forward moves them by a tenth.
Test (bnstats, one_over_k_momentum_makes_the_plain_mean)
{
    enum { K = 4, B = 8 };
    nn_model_spec_t spec;
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, NULL, 0), 0);
    nn_model_t *m = nn_model_new (&spec, 0, 1, K * B, NULL, 0);
    cr_assert_not_null (m);
    cr_assert (nn_model_has_bn (m));
    nn_rng_t rng;
    nn_rng_seed (&rng, 7);
    nn_model_init (m, &rng);
    size_t sample = nn_shape_size (nn_model_input_shape (m));
    float *x = nn_malloc (sizeof (float) * sample * K * B);
    s_fill (x, sample * K * B, 1.0f, 0.2f, &rng);
    size_t params = nn_model_params_count (m), buffers = nn_model_weights_count (m) - params;
    cr_assert_gt (buffers, 0);
    float *w = nn_model_weights (m);
    //  Running statistics far from anything the data gives.
    for (size_t i = 0; i < buffers; i++)
        w[params + i] = 100.0f;
    //  What each batch alone gives (momentum 1), averaged.
    double *var_mean = nn_calloc (buffers, sizeof (double));
    for (int k = 0; k < K; k++) {
        nn_model_set_bn_momentum (m, 1.0f);
        nn_model_forward (m, x + (size_t) k * B * sample, B, true, NULL);
        for (size_t i = 0; i < buffers; i++)
            var_mean[i] += w[params + i] / K;
    }
    //  All K batches as one: its mean is the mean of the batch means.
    nn_model_forward (m, x, K * B, true, NULL);
    float *whole = nn_malloc (sizeof (float) * buffers);
    memcpy (whole, w + params, sizeof (float) * buffers);

    for (size_t i = 0; i < buffers; i++)
        w[params + i] = 100.0f;
    for (int k = 0; k < K; k++) {
        nn_model_set_bn_momentum (m, 1.0f / (float) (k + 1));
        nn_model_forward (m, x + (size_t) k * B * sample, B, true, NULL);
    }
    //  The buffers: running_mean (c), then running_var (c).
    size_t c = buffers / 2;
    for (size_t i = 0; i < c; i++) {
        float got = w[params + i], want = whole[i];
        cr_assert (fabsf (got - want) <= 1e-4f * (1.0f + fabsf (want)),
                   "running_mean[%zu] %g, want %g", i, got, want);
        got = w[params + c + i];
        cr_assert (fabs (got - var_mean[c + i]) <= 1e-4 * (1.0 + fabs (var_mean[c + i])),
                   "running_var[%zu] %g, want %g", i, got, var_mean[c + i]);
    }
    float before = w[params];
    nn_model_set_bn_momentum (m, NN_BN_MOMENTUM);
    nn_model_forward (m, x, B, true, NULL);
    float after = w[params];
    nn_model_set_bn_momentum (m, 1.0f);
    nn_model_forward (m, x, B, true, NULL);
    float first = w[params];            //  the first batch's own mean
    float want = 0.9f * before + 0.1f * first;
    cr_assert (fabsf (after - want) <= 1e-4f * (1.0f + fabsf (want)),
               "default momentum: running_mean[0] %g, want %g", after, want);
    nn_free (whole);
    nn_free (var_mean);
    nn_free (x);
    nn_model_destroy (&m);
}
