/*  gradcheck.c: see gradcheck.h. Part of the tests' support library. */
#include <criterion/criterion.h>

#include "gradcheck.h"

#include "nn_alloc.h"
#include "nn_kernels.h"

#include <math.h>
#include <string.h>

#define S_EPS 1e-3
#define S_SAMPLES 40

nn_model_spec_t
gradcheck_spec (int h, int w, int c, const nn_layer_spec_t *layers, int count)
{
    nn_model_spec_t spec;
    memset (&spec, 0, sizeof spec);
    strcpy (spec.name, "gradcheck");
    spec.in_h = h, spec.in_w = w, spec.in_c = c;
    spec.units_count = 1;
    spec.units[0].layers_count = count;
    memcpy (spec.units[0].layers, layers, sizeof (nn_layer_spec_t) * count);
    spec.classes = 2;
    spec.classes = (int) nn_shape_size (nn_model_spec_unit_output (&spec, 0));
    return spec;
}

typedef struct {
    nn_model_t *model;
    const float *x;
    const float *r;
    const int *labels;
    int n;
    nn_rng_t rng;           //  reset before every forward: same dropout mask
    bool with_loss;
} s_ctx_t;

static double
s_f (s_ctx_t *c)
{
    nn_rng_t rng = c->rng;
    const float *out = nn_model_forward (c->model, c->x, c->n, true, &rng);
    size_t count = (size_t) c->n * nn_shape_size (nn_model_output_shape (c->model));
    if (c->with_loss)
        return nn_softmax_xent (NULL, out, c->labels, c->n,
                                nn_model_spec (c->model)->classes, 1.0f, NULL);
    double f = 0.0;
    for (size_t i = 0; i < count; i++)
        f += (double) out[i] * c->r[i];
    return f;
}

static double
s_numeric (s_ctx_t *c, float *p, double eps)
{
    float keep = *p;
    *p = keep + (float) eps;
    double fp = s_f (c);
    *p = keep - (float) eps;
    double fm = s_f (c);
    *p = keep;
    return (fp - fm) / (2.0 * eps);
}

static bool
s_close (double analytic, double numeric)
{
    return fabs (analytic - numeric) <= 3e-3 + 3e-2 * fmax (fabs (analytic), fabs (numeric));
}

//  A ReLU or max-pool kink within a step of the point spoils a central
//  difference. Where the difference at step e misses, it is redone at e/5:
//  if the two differences agree with each other the function is smooth
//  there and the analytic gradient must match; if they disagree, a kink
//  was crossed and the point is skipped. Skips are counted and bounded, so
//  a wrong gradient cannot hide behind them.
static void
s_check (s_ctx_t *c, const char *what, size_t index, double analytic, float *p,
         int *skips)
{
    double numeric = s_numeric (c, p, S_EPS);
    if (s_close (analytic, numeric))
        return;
    double finer = s_numeric (c, p, S_EPS / 5.0);
    if (s_close (analytic, finer))
        return;
    if (!s_close (numeric, finer)) {
        (*skips)++;
        return;
    }
    cr_assert_fail ("%s[%zu]: analytic %.6g numeric %.6g (step %g), %.6g (step %g)",
                    what, index, analytic, numeric, S_EPS, finer, S_EPS / 5.0);
}

void
gradcheck_run (const nn_model_spec_t *spec, int n, uint64_t seed, bool with_loss)
{
    char err[256];
    nn_model_t *m = nn_model_new (spec, 0, spec->units_count, n, err, sizeof err);
    cr_assert_not_null (m, "%s", err);
    nn_rng_t rng;
    nn_rng_seed (&rng, seed);
    nn_model_init (m, &rng);
    //  Perturb every parameter so biases and BN affine terms are non-trivial.
    float *w = nn_model_weights (m);
    for (size_t i = 0; i < nn_model_params_count (m); i++)
        w[i] += 0.2f * (nn_rng_uniform (&rng) - 0.5f);
    size_t in_count = (size_t) n * nn_shape_size (nn_model_input_shape (m));
    size_t out_count = (size_t) n * nn_shape_size (nn_model_output_shape (m));
    float *x = nn_malloc (sizeof (float) * in_count);
    float *r = nn_malloc (sizeof (float) * out_count);
    float *dx = nn_calloc (in_count, sizeof (float));
    float *dout = nn_malloc (sizeof (float) * out_count);
    int *labels = nn_calloc ((size_t) n, sizeof (int));
    for (size_t i = 0; i < in_count; i++)
        x[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    for (size_t i = 0; i < out_count; i++)
        r[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    for (int i = 0; i < n; i++)
        labels[i] = (int) nn_rng_below (&rng, (uint32_t) spec->classes);
    s_ctx_t c = { m, x, r, labels, n, nn_rng_split (&rng, 99), with_loss };

    //  Analytic gradients.
    nn_model_zero_grad (m);
    nn_rng_t fr = c.rng;
    const float *out = nn_model_forward (m, x, n, true, &fr);
    if (with_loss)
        nn_softmax_xent (dout, out, labels, n, spec->classes, 1.0f, NULL);
    else
        memcpy (dout, r, sizeof (float) * out_count);
    nn_model_backward (m, dout, dx);
    size_t pc = nn_model_params_count (m);
    float *grads = nn_malloc (sizeof (float) * (pc + 1));
    memcpy (grads, nn_model_grads (m), sizeof (float) * pc);

    double max_dx = 0.0, max_dp = 0.0;
    for (size_t i = 0; i < in_count; i++)
        max_dx = fmax (max_dx, fabs (dx[i]));
    for (size_t i = 0; i < pc; i++)
        max_dp = fmax (max_dp, fabs (grads[i]));
    cr_assert_gt (max_dx, 1e-6, "input gradient is all zero");
    if (pc)
        cr_assert_gt (max_dp, 1e-6, "parameter gradient is all zero");

    int skips = 0, checked = 0;
    for (int k = 0; k < S_SAMPLES; k++) {
        size_t i = k < 4 ? (size_t) k % in_count : nn_rng_below (&rng, (uint32_t) in_count);
        s_check (&c, "dx", i, dx[i], &x[i], &skips);
        checked++;
    }
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        if (!info.trainable)
            continue;
        for (int k = 0; k < S_SAMPLES && k < (int) info.count; k++) {
            size_t i = info.offset + (k < 4 ? (size_t) k
                                            : nn_rng_below (&rng, (uint32_t) info.count));
            s_check (&c, info.name, i - info.offset, grads[i], &w[i], &skips);
            checked++;
        }
    }
    cr_assert_leq (skips * 10, checked, "%d of %d checks skipped at kinks", skips, checked);
    nn_free (x), nn_free (r), nn_free (dx), nn_free (dout), nn_free (labels), nn_free (grads);
    nn_model_destroy (&m);
}
