/*  nn_profile.c: per-unit compute costs measured on this host. */
#include "nn_profile.h"

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_optim.h"
#include "nn_rng.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int
nn_profile_model_bytes (const nn_model_spec_t *spec, int batch_size,
                        nn_estimate_model_t *model, char *err, size_t err_size)
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
        nn_shape_t out = nn_model_spec_unit_output (spec, u);
        model->out_bytes[u] = f32 * (double) nn_shape_size (out);
        model->out_channels[u] = out.c;
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

//  One unit (or, for the report, the whole model) at a time: its model,
//  synthetic input of its input shape and, unless it ends the model (where
//  the loss makes it), a synthetic gradient of its output shape. Only one
//  is alive at once, so profiling costs about one unit's memory, not the
//  whole model's twice.
typedef struct {
    const nn_profile_args_t *args;
    int classes;
    bool last;                      //  the part ends the model: loss here
    bool need_dx;                   //  backward computes the input gradient
    nn_model_t *model;
    float *x;                       //  (B, input)
    float *dout;                    //  (B, output), or the loss gradient
    float *dx;                      //  (B, input) if need_dx
    int *y;                         //  (B) labels if last
    nn_rng_t rng;
} s_prof_t;

static double
s_now (const s_prof_t *p)
{
    return p->args->now (p->args->now_arg);
}

static void
s_free (s_prof_t *p)
{
    nn_model_destroy (&p->model);
    nn_free (p->x);
    nn_free (p->dout);
    nn_free (p->dx);
    nn_free (p->y);
    memset (p, 0, sizeof *p);
}

//  Build units [begin, end) at batch b with weights as the full model's
//  (nn_model_init draws each layer from its own stream) and its synthetic
//  data. -1 with a message.
static int
s_prepare (s_prof_t *p, const nn_model_spec_t *spec, int begin, int end, int b,
           char *err, size_t err_size)
{
    const nn_profile_args_t *args = p->args;
    p->classes = spec->classes;
    p->last = end == spec->units_count;
    //  Every unit of a split model but the device's first computes its
    //  input gradient; the whole model does not.
    p->need_dx = begin > 0;
    p->model = nn_model_new (spec, begin, end, b, err, err_size);
    if (!p->model)
        return -1;
    nn_rng_t seeded;
    nn_rng_seed (&seeded, args->seed);
    nn_model_init (p->model, &seeded);
    nn_model_set_threads (p->model, args->threads > 0 ? args->threads : 1);
    p->rng = nn_rng_split (&seeded, 1 + (uint64_t) begin);
    size_t in = (size_t) b * nn_shape_size (nn_model_input_shape (p->model));
    size_t out = (size_t) b * nn_shape_size (nn_model_output_shape (p->model));
    p->x = nn_alloc_aligned (sizeof (float) * in);
    p->dout = nn_alloc_aligned (sizeof (float) * out);
    if (p->need_dx)
        p->dx = nn_alloc_aligned (sizeof (float) * in);
    //  Normalised inputs and gradients look like noise; the work does not
    //  depend on the values.
    for (size_t i = 0; i < in; i++)
        p->x[i] = (float) nn_rng_normal (&p->rng);
    for (size_t i = 0; i < out; i++)
        p->dout[i] = (float) (0.01 * nn_rng_normal (&p->rng));
    if (p->last) {
        p->y = nn_malloc (sizeof (int) * (size_t) b);
        for (int i = 0; i < b; i++)
            p->y[i] = (int) nn_rng_below (&p->rng, (uint32_t) spec->classes);
    }
    return 0;
}

//  One iteration on n samples: forward (and the loss, which belongs to the
//  last unit's step, as on the server), backward, an SGD step. t[0..3]:
//  the clock before forward, after forward, after backward, after the step.
static double
s_cpu (const s_prof_t *p)
{
    return p->args->cpu_now ? p->args->cpu_now (p->args->cpu_now_arg) : 0.0;
}

//  c[0..3]: the same on the CPU clock (zeros without one).
static void
s_iteration (s_prof_t *p, int n, double t[4], double c[4])
{
    nn_model_zero_grad (p->model);
    c[0] = s_cpu (p);
    t[0] = s_now (p);
    const float *out = nn_model_forward (p->model, p->x, n, true, &p->rng);
    if (p->last)
        nn_softmax_xent (p->dout, out, p->y, n, p->classes, 1.0f, NULL);
    t[1] = s_now (p);
    c[1] = s_cpu (p);
    nn_model_backward (p->model, p->dout, p->need_dx ? p->dx : NULL);
    t[2] = s_now (p);
    c[2] = s_cpu (p);
    //  lr 0 keeps the weights (and so the work) the same every iteration.
    nn_sgd_t sgd = { 0.0f, 0.9f, 0.0f };
    nn_sgd_step (nn_model_weights (p->model), nn_model_optim_state (p->model),
                 nn_model_grads (p->model), nn_model_params_count (p->model), &sgd);
    t[3] = s_now (p);
    c[3] = s_cpu (p);
}

//  The parts of an iteration that took `mean` on average, in the
//  proportions of the fastest parts: out[k] = fastest[k] * mean / sum. A
//  clock too coarse to see the iteration leaves the fastest as they are.
static void
s_sustained (double *out, const double *fastest, int parts, double mean)
{
    double sum = 0.0;
    for (int k = 0; k < parts; k++)
        sum += fastest[k];
    double scale = sum > 0.0 ? mean / sum : 1.0;
    for (int k = 0; k < parts; k++)
        out[k] = fastest[k] * scale;
}

//  One window of n samples: iterations until at least `iters` are done
//  and they span the window; their count, wall time (busy), each kind's
//  fastest (0 forward, 1 backward, 2 update) and CPU time (with a CPU
//  clock).
typedef struct {
    int count;
    double busy, fastest[3], cpu[3];
} s_window_t;

//  What n samples sustain, per kind: without a CPU clock, the window's
//  average iteration (busy / count) split among the kinds in the
//  proportions of the fastest iteration's.
//
//  Why not the fastest alone: a device under a CPU quota (cgroup cpu.max,
//  a container's limit, a throttled phone) runs at full speed for its
//  slice of every period (10 ms of 100 ms at 10%) and not at all for the
//  rest, so an iteration short enough to fit in a slice reads the
//  unthrottled speed, ten times what the device sustains. An average over
//  a window of several periods reads the quota, and also thermal
//  throttling and a shared host. Why the fastest's proportions: the pauses
//  fall on whichever kind is running, a handful per window, so each kind's
//  own average is noisy; their sum is not.
//
//  With a CPU clock (the client's, one thread): the kinds' CPU time per
//  iteration, scaled by the wall time over the CPU time of every unit's
//  window at the run's batch (s_profile_factor). A part that always
//  crosses a pause never showed its fastest: two identical 10% devices in
//  one lab run read VGG5's forward at 0.073 and 0.101 s a batch, and one
//  read 0.025 s forward and 0.324 s backward (docs/headline.md, "After the
//  faster kernels"). A pause stops the CPU clock, so each kind's CPU time
//  is its own; the factor over all the windows (30 periods and more) reads
//  the quota where one window's (3 periods) read it anywhere from 7x to 13x.
static void
s_measure (s_prof_t *p, int n, int iters, s_window_t *w)
{
    int warm = p->args->warmup > 0 ? p->args->warmup : 1;
    double window = p->args->window_s > 0.0 ? p->args->window_s : NN_PROFILE_WINDOW_S;
    double t[4], c[4];
    for (int i = 0; i < warm; i++)
        s_iteration (p, n, t, c);
    memset (w, 0, sizeof *w);
    for (int k = 0; k < 3; k++)
        w->fastest[k] = INFINITY;
    double first = 0.0;
    do {
        s_iteration (p, n, t, c);
        if (w->count == 0)
            first = t[0];
        for (int k = 0; k < 3; k++) {
            w->fastest[k] = fmin (w->fastest[k], t[k + 1] - t[k]);
            w->cpu[k] += c[k + 1] - c[k];
        }
        w->busy += t[3] - t[0];
        w->count++;
    } while (w->count < iters || t[3] - first < window);
}

//  Wall time over CPU time of the windows, or 0 where the CPU clock saw
//  nothing (none given, or too coarse).
static double
s_profile_factor (const s_window_t *w, int count)
{
    double busy = 0.0, cpu = 0.0;
    for (int i = 0; i < count; i++) {
        busy += w[i].busy;
        cpu += w[i].cpu[0] + w[i].cpu[1] + w[i].cpu[2];
    }
    return cpu > 0.0 ? busy / cpu : 0.0;
}

//  Per kind, what window w sustains: its CPU time per iteration x factor,
//  or (factor 0) its average split as its fastest iteration.
static void
s_window_costs (double out[3], const s_window_t *w, double factor)
{
    if (factor > 0.0)
        for (int k = 0; k < 3; k++)
            out[k] = w->cpu[k] / w->count * factor;
    else
        s_sustained (out, w->fastest, 3, w->busy / w->count);
}

//  fixed from t(B) = total and t(m): the intercept of the line through
//  both, clamped to [0, total] (noise can put it outside).
static double
s_fixed (double total, double small, int b, int m)
{
    double fixed = (small * b - total * m) / (double) (b - m);
    return fixed < 0.0 ? 0.0 : fixed > total ? total : fixed;
}

int
nn_profile_fit_batch (const nn_model_spec_t *spec, int batch_size, int configured)
{
    int m = nn_estimate_min_micro_batch (spec, configured);
    return m < batch_size ? m : batch_size;
}

int
nn_profile_run (const nn_model_spec_t *spec, const nn_profile_args_t *args,
                nn_estimate_costs_t *costs, nn_estimate_model_t *model,
                nn_profile_report_t *report, char *err, size_t err_size)
{
    assert (spec && args && costs);
    int b = args->batch_size;
    if (!args->now)
        return nn_errf (err, err_size, "profile: no clock given");
    if (b < 1 || args->small_batch < 0 || args->small_batch > b || args->threads < 0
    ||  args->warmup < 0 || args->iterations < 0 || !(args->window_s >= 0.0)
    ||  args->window_s > 60.0)
        return nn_errf (err, err_size, "profile: batch %d, small batch %d, threads %d, "
                        "warm-up %d, iterations %d, window %g s: need batch >= 1, 0 <= "
                        "small <= batch, the counts >= 0 and the window in [0, 60] s", b,
                        args->small_batch, args->threads, args->warmup, args->iterations,
                        args->window_s);
    if (args->cpu_now && args->threads > 1)
        return nn_errf (err, err_size, "profile: a CPU clock is one thread's; threads %d",
                        args->threads);
    nn_estimate_model_t bytes;
    if (nn_profile_model_bytes (spec, b, &bytes, err, err_size))
        return -1;
    if (model)
        *model = bytes;

    int iters = args->iterations > 0 ? args->iterations : 5;
    int m = args->small_batch ? args->small_batch : (b / 10 > 0 ? b / 10 : 1);
    bool fit = m < b;
    memset (costs, 0, sizeof *costs);
    costs->units_count = spec->units_count;
    s_window_t big[NN_MAX_UNITS], small[NN_MAX_UNITS];
    for (int u = 0; u < spec->units_count; u++) {
        s_prof_t p = { .args = args };
        if (s_prepare (&p, spec, u, u + 1, b, err, err_size)) {
            s_free (&p);
            return -1;
        }
        s_measure (&p, b, iters, &big[u]);
        //  The small batch is cheap: measure it more, its noise is
        //  amplified by the extrapolation to the fixed part.
        if (fit)
            s_measure (&p, m, 3 * iters, &small[u]);
        s_free (&p);
    }
    //  The windows at the run's batch set the factor (the small ones'
    //  short iterations would weigh little, and the fit wants both sizes
    //  on one scale).
    double factor = args->cpu_now ? s_profile_factor (big, spec->units_count) : 0.0;
    for (int u = 0; u < spec->units_count; u++) {
        double bg[3], sm[3];
        s_window_costs (bg, &big[u], factor);
        nn_estimate_unit_cost_t *c = &costs->unit[u];
        c->fwd_s = bg[0];
        c->bwd_s = bg[1];
        c->upd_s = bg[2];
        if (fit) {
            s_window_costs (sm, &small[u], factor);
            c->fwd_fixed_s = s_fixed (c->fwd_s, sm[0], b, m);
            c->bwd_fixed_s = s_fixed (c->bwd_s, sm[1], b, m);
        }
    }
    if (report) {
        //  The whole model, for comparison: built only when asked for.
        s_prof_t p = { .args = args };
        if (s_prepare (&p, spec, 0, spec->units_count, b, err, err_size)) {
            s_free (&p);
            return -1;
        }
        s_window_t w;
        double whole[3];
        s_measure (&p, b, iters, &w);
        s_window_costs (whole, &w, args->cpu_now ? s_profile_factor (&w, 1) : 0.0);
        s_free (&p);
        memset (report, 0, sizeof *report);
        report->whole_fwd_s = whole[0];
        report->whole_bwd_s = whole[1];
        for (int u = 0; u < spec->units_count; u++) {
            report->units_fwd_s += costs->unit[u].fwd_s;
            report->units_bwd_s += costs->unit[u].bwd_s;
        }
    }
    return 0;
}

int
nn_profile_codecs (const nn_codec_shape_t *shape, const nn_profile_args_t *args,
                   nn_estimate_codec_speed_t *speed, char *err, size_t err_size)
{
    assert (shape && args && speed);
    if (!args->now)
        return nn_errf (err, err_size, "profile: a clock is required");
    uint64_t count = nn_codec_shape_count (shape);
    if (count == 0 || count > (1u << 28))
        return nn_errf (err, err_size, "profile: codec tensor of %llu elements; need "
                        "1..2^28", (unsigned long long) count);
    int iterations = args->iterations > 0 ? args->iterations : 5;
    int warmup = args->warmup > 0 ? args->warmup : 1;
    double window = args->window_s > 0.0 ? args->window_s : NN_PROFILE_WINDOW_S;
    //  Activations as a ReLU leaves them: half zeros, half in (0, 2).
    nn_rng_t rng;
    nn_rng_seed (&rng, args->seed);
    float *x = nn_malloc (sizeof (float) * count), *y = nn_malloc (sizeof (float) * count);
    for (uint64_t i = 0; i < count; i++)
        x[i] = nn_rng_below (&rng, 2) ? 2.0f * nn_rng_uniform (&rng) : 0.0f;
    memset (speed, 0, sizeof *speed);
    int rc = 0;
    for (int c = NN_CODEC_FP16; c < NN_CODEC_COUNT && rc == 0; c++) {
        //  topk at the fraction a gradient codec would use; the selection
        //  dominates and barely depends on it.
        nn_codec_params_t params = { .id = (nn_codec_id_t) c, .topk_fraction = 0.01,
                                     .stochastic = c == NN_CODEC_INT8 && args->int8_stochastic,
                                     .zstd = args->zstd };
        nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, shape, err, err_size);
        if (!enc) {
            rc = -1;
            break;
        }
        size_t bytes = nn_codec_encoder_bytes (enc);
        uint8_t *wire = nn_malloc (bytes);
        //  As for the units (s_measure): at least `iterations` and the
        //  window, the average split as the fastest encode and decode split.
        double best[2] = { INFINITY, INFINITY }, first = 0.0, busy = 0.0, t2 = 0.0;
        int done = 0;
        for (int i = 0; rc == 0 && (i < warmup + iterations || t2 - first < window); i++) {
            double t0 = args->now (args->now_arg);
            rc = nn_codec_encode (enc, wire, bytes, x, &rng, err, err_size);
            double t1 = args->now (args->now_arg);
            if (rc == 0)
                rc = nn_codec_decode (y, wire, nn_codec_encoder_last_bytes (enc),
                                      (nn_codec_id_t) c, shape, err, err_size);
            t2 = args->now (args->now_arg);
            if (i < warmup)
                continue;
            if (done++ == 0)
                first = t0;
            best[0] = fmin (best[0], t1 - t0);
            best[1] = fmin (best[1], t2 - t1);
            busy += t2 - t0;
        }
        double sustained[2] = { 0.0, 0.0 };
        if (done > 0)
            s_sustained (sustained, best, 2, busy / done);
        double best_enc = sustained[0], best_dec = sustained[1];
        //  A clock too coarse to see it gives 0 (not measured) rather than
        //  infinity.
        double f32 = 4.0 * (double) count;
        speed->encode_Bps[c] = best_enc > 0.0 && isfinite (best_enc) ? f32 / best_enc : 0.0;
        speed->decode_Bps[c] = best_dec > 0.0 && isfinite (best_dec) ? f32 / best_dec : 0.0;
        nn_free (wire);
        nn_codec_encoder_destroy (&enc);
    }
    nn_free (x);
    nn_free (y);
    return rc;
}
