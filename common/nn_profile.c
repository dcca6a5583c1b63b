/*  nn_profile.c: per-unit compute costs measured on this host. */
#include "nn_profile.h"

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_optim.h"
#include "nn_rng.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int
nn_profile_model_bytes (const nn_model_spec_t *spec, int batch_size,
                        nn_plan_model_t *model, char *err, size_t err_size)
{
    assert (spec && model);
    if (batch_size < 1)
        return nn_errf (err, err_size, "profile: batch_size must be >= 1, got %d",
                        batch_size);
    if (nn_model_spec_check (spec, err, err_size))
        return -1;
    if (spec->units_count > NN_MAX_UNITS)
        return nn_errf (err, err_size, "profile: %d units exceed %d", spec->units_count,
                        NN_MAX_UNITS);
    memset (model, 0, sizeof *model);
    model->units_count = spec->units_count;
    const double f32 = (double) sizeof (float) * batch_size;
    for (int u = 0; u < spec->units_count; u++) {
        model->out_bytes[u] = f32 * (double) nn_shape_size (nn_model_spec_unit_output (spec, u));
        //  A batch-1 model of the unit is enough to count its weights.
        nn_model_t *m = nn_model_new (spec, u, u + 1, 1, err, err_size);
        if (!m)
            return -1;
        model->param_bytes[u] = (double) sizeof (float) * (double) nn_model_weights_count (m);
        nn_model_destroy (&m);
    }
    model->input_bytes = f32 * (double) nn_shape_size (nn_model_spec_input (spec));
    model->label_bytes = (double) sizeof (int32_t) * batch_size;
    return 0;
}

static int
s_cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

//  The fastest of the measured iterations: other work on the host only
//  ever adds time, so the minimum is the figure it moves least. (The
//  fixed part is a difference of two such figures, and noise in it turns
//  into a different N.)
static double
s_fastest (double *v, int n)
{
    qsort (v, (size_t) n, sizeof (double), s_cmp_double);
    return v[0];
}

typedef struct {
    const nn_profile_args_t *args;
    int units;
    int classes;
    nn_model_t *full;
    nn_model_t *unit[NN_MAX_UNITS];
    float *dx[NN_MAX_UNITS];        //  gradient w.r.t. unit u's input (u >= 1)
    float *x;                       //  (B, input)
    int *y;                         //  (B)
    float *dlogits;                 //  (B, classes)
    nn_rng_t rng;
    //  samples[kind][u][iteration]: kind 0 fwd, 1 bwd, 2 update
    double *samples[3][NN_MAX_UNITS];
    double *whole[2];
} s_prof_t;

static double
s_now (const s_prof_t *p)
{
    return p->args->now (p->args->now_arg);
}

//  One chained iteration of every unit on n samples; times go to slot it.
static void
s_units_iteration (s_prof_t *p, int n, int it, bool record)
{
    const float *in = p->x;
    for (int u = 0; u < p->units; u++) {
        nn_model_zero_grad (p->unit[u]);
        double t0 = s_now (p);
        in = nn_model_forward (p->unit[u], in, n, true, &p->rng);
        //  The loss belongs to the last unit's step, as on the server.
        if (u == p->units - 1)
            nn_softmax_xent (p->dlogits, in, p->y, n, p->classes, 1.0f, NULL);
        if (record)
            p->samples[0][u][it] = s_now (p) - t0;
    }
    const float *dout = p->dlogits;
    for (int u = p->units - 1; u >= 0; u--) {
        double t0 = s_now (p);
        nn_model_backward (p->unit[u], dout, u > 0 ? p->dx[u] : NULL);
        if (record)
            p->samples[1][u][it] = s_now (p) - t0;
        dout = p->dx[u];
    }
    //  lr 0 keeps the weights (and so the work) the same every iteration.
    nn_sgd_t sgd = { 0.0f, 0.9f, 0.0f };
    for (int u = 0; u < p->units; u++) {
        double t0 = s_now (p);
        nn_sgd_step (nn_model_weights (p->unit[u]), nn_model_optim_state (p->unit[u]),
                     nn_model_grads (p->unit[u]), nn_model_params_count (p->unit[u]), &sgd);
        if (record)
            p->samples[2][u][it] = s_now (p) - t0;
    }
}

static void
s_whole_iteration (s_prof_t *p, int n, int it, bool record)
{
    nn_model_zero_grad (p->full);
    double t0 = s_now (p);
    const float *out = nn_model_forward (p->full, p->x, n, true, &p->rng);
    nn_softmax_xent (p->dlogits, out, p->y, n, p->classes, 1.0f, NULL);
    double t1 = s_now (p);
    nn_model_backward (p->full, p->dlogits, NULL);
    double t2 = s_now (p);
    if (record) {
        p->whole[0][it] = t1 - t0;
        p->whole[1][it] = t2 - t1;
    }
}

//  The fastest per unit and kind over `iters` measured iterations at n
//  samples.
static void
s_measure (s_prof_t *p, int n, int iters, double med[3][NN_MAX_UNITS], bool whole,
           double wmed[2])
{
    int warm = p->args->warmup > 0 ? p->args->warmup : 1;
    for (int i = 0; i < warm; i++)
        s_units_iteration (p, n, 0, false);
    for (int i = 0; i < iters; i++)
        s_units_iteration (p, n, i, true);
    for (int k = 0; k < 3; k++)
        for (int u = 0; u < p->units; u++)
            med[k][u] = s_fastest (p->samples[k][u], iters);
    if (whole) {
        for (int i = 0; i < warm; i++)
            s_whole_iteration (p, n, 0, false);
        for (int i = 0; i < iters; i++)
            s_whole_iteration (p, n, i, true);
        wmed[0] = s_fastest (p->whole[0], iters);
        wmed[1] = s_fastest (p->whole[1], iters);
    }
}

//  fixed from t(B) = total and t(m): the intercept of the line through
//  both, clamped to [0, total] (noise can put it outside).
static double
s_fixed (double total, double small, int b, int m)
{
    double fixed = (small * b - total * m) / (double) (b - m);
    return fixed < 0.0 ? 0.0 : fixed > total ? total : fixed;
}

static void
s_free (s_prof_t *p)
{
    for (int u = 0; u < NN_MAX_UNITS; u++) {
        nn_model_destroy (&p->unit[u]);
        nn_free (p->dx[u]);
        for (int k = 0; k < 3; k++)
            nn_free (p->samples[k][u]);
    }
    nn_free (p->whole[0]);
    nn_free (p->whole[1]);
    nn_model_destroy (&p->full);
    nn_free (p->x);
    nn_free (p->y);
    nn_free (p->dlogits);
}

int
nn_profile_run (const nn_model_spec_t *spec, const nn_profile_args_t *args,
                nn_plan_costs_t *costs, nn_plan_model_t *model,
                nn_profile_report_t *report, char *err, size_t err_size)
{
    assert (spec && args && costs);
    int b = args->batch_size;
    if (!args->now)
        return nn_errf (err, err_size, "profile: no clock given");
    if (b < 1 || args->small_batch < 0 || args->small_batch > b || args->threads < 0
    ||  args->warmup < 0 || args->iterations < 0)
        return nn_errf (err, err_size, "profile: batch %d, small batch %d, threads %d, "
                        "warm-up %d, iterations %d: need batch >= 1, 0 <= small <= batch "
                        "and the rest >= 0", b, args->small_batch, args->threads,
                        args->warmup, args->iterations);
    nn_plan_model_t bytes;
    if (nn_profile_model_bytes (spec, b, &bytes, err, err_size))
        return -1;
    if (model)
        *model = bytes;

    s_prof_t p = { .args = args, .units = spec->units_count, .classes = spec->classes };
    int iters = args->iterations > 0 ? args->iterations : 5;
    int samples = 3 * iters;            //  room for the small batch's runs
    int threads = args->threads > 0 ? args->threads : 1;
    p.full = nn_model_new (spec, 0, p.units, b, err, err_size);
    if (!p.full)
        return -1;
    nn_rng_seed (&p.rng, args->seed);
    nn_model_init (p.full, &p.rng);
    nn_model_set_threads (p.full, threads);
    for (int u = 0; u < p.units; u++) {
        p.unit[u] = nn_model_new (spec, u, u + 1, b, err, err_size);
        if (!p.unit[u]) {
            s_free (&p);
            return -1;
        }
        nn_model_copy_tensors (p.unit[u], p.full);
        nn_model_set_threads (p.unit[u], threads);
        if (u > 0)
            p.dx[u] = nn_alloc_aligned (sizeof (float) * (size_t) b
                                        * nn_shape_size (nn_model_input_shape (p.unit[u])));
        for (int k = 0; k < 3; k++)
            p.samples[k][u] = nn_calloc ((size_t) samples, sizeof (double));
    }
    p.whole[0] = nn_calloc ((size_t) iters, sizeof (double));
    p.whole[1] = nn_calloc ((size_t) iters, sizeof (double));
    size_t sample = nn_shape_size (nn_model_spec_input (spec));
    p.x = nn_alloc_aligned (sizeof (float) * sample * (size_t) b);
    p.y = nn_malloc (sizeof (int) * (size_t) b);
    p.dlogits = nn_malloc (sizeof (float) * (size_t) b * (size_t) spec->classes);
    //  Normalised inputs look like unit-variance noise; the work does not
    //  depend on the values.
    for (size_t i = 0; i < sample * (size_t) b; i++)
        p.x[i] = (float) nn_rng_normal (&p.rng);
    for (int i = 0; i < b; i++)
        p.y[i] = (int) nn_rng_below (&p.rng, (uint32_t) spec->classes);

    double big[3][NN_MAX_UNITS], whole[2];
    s_measure (&p, b, iters, big, true, whole);
    int m = args->small_batch ? args->small_batch : (b / 10 > 0 ? b / 10 : 1);
    double small[3][NN_MAX_UNITS];
    bool fit = m < b;
    //  The small batch is cheap: measure it more, its noise is amplified
    //  by the extrapolation to the fixed part.
    if (fit)
        s_measure (&p, m, 3 * iters, small, false, NULL);

    memset (costs, 0, sizeof *costs);
    costs->units_count = p.units;
    for (int u = 0; u < p.units; u++) {
        nn_plan_unit_cost_t *c = &costs->unit[u];
        c->fwd_s = big[0][u];
        c->bwd_s = big[1][u];
        c->upd_s = big[2][u];
        if (fit) {
            c->fwd_fixed_s = s_fixed (c->fwd_s, small[0][u], b, m);
            c->bwd_fixed_s = s_fixed (c->bwd_s, small[1][u], b, m);
        }
    }
    if (report) {
        memset (report, 0, sizeof *report);
        report->whole_fwd_s = whole[0];
        report->whole_bwd_s = whole[1];
        for (int u = 0; u < p.units; u++) {
            report->units_fwd_s += costs->unit[u].fwd_s;
            report->units_bwd_s += costs->unit[u].bwd_s;
        }
    }
    s_free (&p);
    return 0;
}
