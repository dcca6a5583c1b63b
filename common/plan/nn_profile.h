/*  nn_profile.h: measure a model's per-unit compute costs on this host,
    for the planner (nn_estimate.h).

    The core has no clock (it stays pure): the caller passes one. The
    profile runs the model the way the daemons split it: one nn_model per
    split unit (u, u+1), forward then backward (each unit but the first
    also computes its input gradient, as every unit of a split model does
    except the device's first), plus an SGD step per unit. Units are
    profiled one after the other, each on synthetic input of its input
    shape and a synthetic output gradient (the last: the loss's), and freed
    before the next: the profile needs one unit's memory at batch B, not
    the model's. Each unit's time is what the host sustains: the average
    over iterations that span a window of several CPU-quota periods (a
    device under a quota runs at full speed for a slice of each period,
    and an iteration that fits in the slice would read ten times its
    sustained speed at 10% of a core), split among forward, backward and
    update as the fastest iteration splits. A second, smaller batch gives
    each unit's per-call (fixed) cost: t(m) = fixed + (t(B) - fixed) * m /
    B fitted through both sizes.

    Run time: per unit, max(warmup + iterations iterations, the window) at
    B and max(warmup + 3 * iterations, the window) at the small batch; 10
    windows (3 s at the default) for a 5-unit model on a fast host.
*/
#ifndef NN_PROFILE_H_INCLUDED
#define NN_PROFILE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn_model.h"
#include "nn_estimate.h"

//  The default window: three periods of the kernel's default CFS period
//  (100 ms), so a quota's pauses are averaged in.
#define NN_PROFILE_WINDOW_S 0.3

//  Seconds from any fixed origin (e.g. CLOCK_MONOTONIC).
typedef double (*nn_profile_now_fn) (void *arg);

typedef struct {
    int batch_size;         //  B (>= 1)
    int small_batch;        //  the fit's second size; 0 = B/10 (at least 1);
                            //  B (or B = 1) skips the fit: fixed parts are 0;
                            //  the daemons and pipelearn-plan pass
                            //  nn_profile_fit_batch
    int threads;            //  nn_model_set_threads; 0 = 1 (the daemons' workers)
    int warmup;             //  iterations not measured; 0 = 1
    int iterations;         //  measured iterations at B (3x as many at the
                            //  small batch) at least; 0 = 5
    double window_s;        //  and at least this long, in the clock's
                            //  seconds; 0 = NN_PROFILE_WINDOW_S (<= 60)
    uint64_t seed;          //  weights and synthetic data
    nn_profile_now_fn now;  //  required
    void *now_arg;
    //  nn_profile_codecs: the codecs as the run uses them (pl_config's
    //  int8_stochastic and codec_zstd): int8 with stochastic rounding, and
    //  every codec's body through zstd, whose CPU then counts in the speeds.
    bool int8_stochastic;
    bool zstd;
    //  Optional, with threads <= 1: the profiling thread's CPU clock. Then
    //  each unit's forward, backward and update are their CPU time, all
    //  scaled by one factor, the units' windows' wall time over their CPU
    //  time (a quota's pauses stop the CPU clock, not the wall), instead of
    //  each window's fastest iteration scaled by that window's average.
    nn_profile_now_fn cpu_now;
    void *cpu_now_arg;
} nn_profile_args_t;

//  What the whole (unsplit) model took, for comparison with the sum of
//  the units (the split's own overhead shows as the difference). The whole
//  model is built (after the units are freed) only when a report is asked
//  for.
typedef struct {
    double whole_fwd_s;     //  forward + loss of the full model, batch B
    double whole_bwd_s;     //  backward of the full model, batch B
    double units_fwd_s;     //  sum of the units' fwd_s
    double units_bwd_s;
} nn_profile_report_t;

//  Fill model with spec's transfer sizes for batch B: out_bytes from
//  nn_model_spec_unit_output (float32), out_channels its last axis, param_bytes from each unit's
//  weights slab (what aggregation sends), input and label (int32) bytes.
//  -1 with a message if the spec or B is invalid.
int nn_profile_model_bytes (const nn_model_spec_t *spec, int batch_size,
                            nn_estimate_model_t *model, char *err, size_t err_size);

//  The fit's second size for a run at batch B whose plans cut micro-batches
//  no smaller than nn_estimate_min_micro_batch (spec, configured): that
//  smallest micro-batch (at most B), so the per-call (fixed) part is fitted
//  across every size the planner may choose rather than extrapolated below
//  B/10. Why: VGG5's units 0-1 (the device's part at split point 2) cost
//  152 us of CPU a sample at 10 and at 100 samples (Intel Xeon, one
//  thread), so the fit through those read no per-call part, and 195 us a
//  sample at 2 (a per-call part of about 0.09 ms); a 10% device planned at
//  micro-batches of 2 ran 25% over its estimate in the lab
//  (docs/headline.md, "With the near-best rule").
int nn_profile_fit_batch (const nn_model_spec_t *spec, int batch_size, int configured);

//  Profile spec (see above) into costs; model and report may be NULL.
//  -1 with a message if the spec or arguments are invalid.
int nn_profile_run (const nn_model_spec_t *spec, const nn_profile_args_t *args,
                    nn_estimate_costs_t *costs, nn_estimate_model_t *model,
                    nn_profile_report_t *report, char *err, size_t err_size);

//  Measure this host's codec speeds (one thread) on a tensor of shape
//  (activations as a ReLU leaves them): for fp16, int8 and topk, what
//  the host sustains over at least args->iterations encodes and decodes
//  (after args->warmup) and the window, as for the units, as float32
//  bytes per second. none is left 0 (not a codec's work). Uses args->now,
//  seed, warmup, iterations, window_s, int8_stochastic and zstd only. -1 with a message if the
//  shape is empty or larger than 2^28 elements.
int nn_profile_codecs (const nn_codec_shape_t *shape, const nn_profile_args_t *args,
                       nn_estimate_codec_speed_t *speed, char *err, size_t err_size);

#endif
