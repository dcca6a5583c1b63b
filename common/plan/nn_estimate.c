/*  nn_estimate.c: the planner's estimator, its event-simulation check, and
    the choice of (P, N) per device. See nn_estimate.h for the model.
*/
#include "nn_estimate.h"

#include "nn_alloc.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#define S_DEFAULT_MAX_MICRO 100
#define S_DEFAULT_MIN_MICRO 2
#define S_DEFAULT_NEAR_BEST 0.01
//  Two estimates this close (relative) are equal (floating-point noise):
//  the smaller P wins.
#define S_TIE 1e-9
//  codec auto keeps a less lossy pair only where it stays near the best
//  with either link at this share of its measured rate too: a probe's
//  short transfers can read a lossy link faster than a stream of training
//  messages gets through it (the lab's 4g downlink: 22 Mbit/s probed,
//  about 10 sustained by TCP at 0.1% loss; docs/codecs.md "auto").
#define S_LINK_MARGIN 0.5

struct _nn_estimate_t {
    nn_estimate_input_t in;                             //  devices points at our copy
    nn_estimate_device_t *devices;
    nn_estimate_codec_t *codecs;                        //  in.codecs points here (NULL: none)
    int per_device;                                     //  candidates per device
    nn_estimate_candidate_t *cand;                      //  devices_count * per_device
    int *chosen;                                        //  index into a device's candidates
    nn_estimate_mode_t modes[PL_MODE_PIPELEARN + 1];    //  by pl_mode_t; [0] unused
};

//  ---------------------------------------------------------------------
//  Input

static bool
s_time_ok (double t)
{
    return isfinite (t) && t >= 0.0;
}

static int
s_check_costs (const nn_estimate_costs_t *c, int units, const char *who,
               char *err, size_t err_size)
{
    if (c->units_count != units)
        return nn_errf (err, err_size, "plan: %s: costs for %d units, the model has %d", who,
                        c->units_count, units);
    for (int u = 0; u < units; u++) {
        const nn_estimate_unit_cost_t *k = &c->unit[u];
        if (!s_time_ok (k->fwd_s) || !s_time_ok (k->bwd_s) || !s_time_ok (k->upd_s)
        ||  !s_time_ok (k->fwd_fixed_s) || !s_time_ok (k->bwd_fixed_s))
            return nn_errf (err, err_size, "plan: %s: unit %d: times must be finite and "
                            ">= 0 seconds", who, u);
        if (k->fwd_fixed_s > k->fwd_s || k->bwd_fixed_s > k->bwd_s)
            return nn_errf (err, err_size, "plan: %s: unit %d: a per-call (fixed) time "
                            "exceeds the whole batch's time", who, u);
    }
    return 0;
}

static int
s_check_speed (const nn_estimate_codec_speed_t *sp, const char *who, char *err, size_t err_size)
{
    for (int c = 0; c < NN_CODEC_COUNT; c++)
        if (!s_time_ok (sp->encode_Bps[c]) || !s_time_ok (sp->decode_Bps[c]))
            return nn_errf (err, err_size, "plan: %s: %s codec speeds must be finite and >= 0 "
                            "bytes/s (0 = not measured)", who, nn_codec_name (c));
    return 0;
}

//  auto weighs a codec's bytes against its CPU: without measured speeds
//  int8 would always look free and win.
static int
s_check_auto_speeds (const nn_estimate_codec_speed_t *sp, const char *who, char *err,
                     size_t err_size)
{
    for (int c = NN_CODEC_FP16; c <= NN_CODEC_INT8; c++)
        if (!(sp->encode_Bps[c] > 0.0 && sp->decode_Bps[c] > 0.0))
            return nn_errf (err, err_size, "plan: %s: codec auto needs measured %s encode and "
                            "decode speeds (nn_profile_codecs)", who, nn_codec_name (c));
    return 0;
}

//  zstd's ratios: none measured, or one row per boundary, each in
//  (0, NN_SQUEEZE_RATIO_MAX].
static int
s_check_squeeze (const nn_squeeze_t *q, int units, const char *who, char *err,
                 size_t err_size)
{
    if (q->boundaries == 0)
        return 0;
    if (q->boundaries != units - 1)
        return nn_errf (err, err_size, "plan: %s: zstd ratios for %d split points, the model "
                        "has %d", who, q->boundaries, units - 1);
    for (int b = 0; b < q->boundaries; b++)
        for (int k = 0; k < NN_SQUEEZE_KINDS; k++)
            if (!(q->ratio[b][k] > 0.0 && q->ratio[b][k] <= NN_SQUEEZE_RATIO_MAX))
                return nn_errf (err, err_size, "plan: %s: zstd ratio %g at split point %d, "
                                "must be in (0, %g]", who, q->ratio[b][k], b + 1,
                                NN_SQUEEZE_RATIO_MAX);
    return 0;
}

static int
s_check_codecs (const nn_estimate_input_t *in, char *err, size_t err_size)
{
    if (s_check_speed (&in->server_codec, "server", err, err_size))
        return -1;
    if (!in->codecs)
        return 0;
    bool any_auto = false;
    for (int d = 0; d < in->devices_count; d++) {
        const nn_estimate_codec_t *k = &in->codecs[d];
        char who[32];
        snprintf (who, sizeof who, "device %d", d);
        if (k->up != NN_ESTIMATE_CODEC_AUTO && (k->up < NN_CODEC_NONE || k->up > NN_CODEC_INT8))
            return nn_errf (err, err_size, "plan: %s: codec up must be none, fp16, int8 or "
                            "auto (topk is for gradients), got id %d", who, k->up);
        if (k->down != NN_ESTIMATE_CODEC_AUTO
        &&  (k->down < NN_CODEC_NONE || k->down >= NN_CODEC_COUNT))
            return nn_errf (err, err_size, "plan: %s: unknown codec id %d down", who, k->down);
        if (k->down == NN_CODEC_TOPK
        &&  !(k->topk_fraction > 0.0 && k->topk_fraction <= 1.0))
            return nn_errf (err, err_size, "plan: %s: topk fraction must be in (0, 1], got %g",
                            who, k->topk_fraction);
        if (s_check_speed (&k->speed, who, err, err_size))
            return -1;
        if (s_check_squeeze (&k->squeeze, in->model.units_count, who, err, err_size))
            return -1;
        if (k->up == NN_ESTIMATE_CODEC_AUTO || k->down == NN_ESTIMATE_CODEC_AUTO) {
            if (s_check_auto_speeds (&k->speed, who, err, err_size))
                return -1;
            any_auto = true;
        }
    }
    if (any_auto && s_check_auto_speeds (&in->server_codec, "server", err, err_size))
        return -1;
    return 0;
}

int
nn_estimate_check (const nn_estimate_input_t *in, char *err, size_t err_size)
{
    assert (in);
    const nn_estimate_model_t *m = &in->model;
    int units = m->units_count;
    if (units < 2 || units > NN_MAX_UNITS)
        return nn_errf (err, err_size, "plan: model: %d units; need 2..%d to split", units,
                        NN_MAX_UNITS);
    for (int u = 0; u < units; u++)
        if (!s_time_ok (m->out_bytes[u]) || !s_time_ok (m->param_bytes[u]))
            return nn_errf (err, err_size, "plan: model: unit %d: byte counts must be "
                            "finite and >= 0", u);
    if (!s_time_ok (m->input_bytes) || !s_time_ok (m->label_bytes))
        return nn_errf (err, err_size, "plan: model: input/label bytes must be finite "
                        "and >= 0");
    if (in->batch_size < 1)
        return nn_errf (err, err_size, "plan: batch_size must be >= 1, got %d",
                        in->batch_size);
    if (in->iterations < 1)
        return nn_errf (err, err_size, "plan: iterations must be >= 1, got %d",
                        in->iterations);
    if (in->server_workers < 1)
        return nn_errf (err, err_size, "plan: server_workers must be >= 1, got %d",
                        in->server_workers);
    if (!(isfinite (in->near_best) && in->near_best >= 0.0 && in->near_best < 1.0))
        return nn_errf (err, err_size, "plan: near_best must be in [0, 1) (0 = default), "
                        "got %g", in->near_best);
    if (in->max_micro_batches < 0 || in->min_micro_batch < 0)
        return nn_errf (err, err_size, "plan: max_micro_batches and min_micro_batch must "
                        "be >= 0 (0 = default)");
    if (in->devices_count < 1 || in->devices_count > NN_ESTIMATE_MAX_DEVICES || !in->devices)
        return nn_errf (err, err_size, "plan: devices: need 1..%d, got %d",
                        NN_ESTIMATE_MAX_DEVICES, in->devices_count);
    if (in->split_point != 0 && (in->split_point < 1 || in->split_point > units - 1))
        return nn_errf (err, err_size, "plan: split_point %d is not in 1..%d (0 = choose)",
                        in->split_point, units - 1);
    if (in->micro_batches != 0
    &&  (in->micro_batches < 1 || in->batch_size % in->micro_batches != 0))
        return nn_errf (err, err_size, "plan: micro_batches %d must divide batch_size %d "
                        "(0 = choose)", in->micro_batches, in->batch_size);
    if (s_check_costs (&in->server, units, "server", err, err_size))
        return -1;
    for (int d = 0; d < in->devices_count; d++) {
        const nn_estimate_device_t *dv = &in->devices[d];
        char who[32];
        snprintf (who, sizeof who, "device %d", d);
        if (s_check_costs (&dv->costs, units, who, err, err_size))
            return -1;
        if (!(isfinite (dv->uplink_Bps) && dv->uplink_Bps > 0.0)
        ||  !(isfinite (dv->downlink_Bps) && dv->downlink_Bps > 0.0))
            return nn_errf (err, err_size, "plan: %s: link rates must be > 0 bytes/s", who);
        if (!s_time_ok (dv->rtt_s))
            return nn_errf (err, err_size, "plan: %s: rtt must be finite and >= 0", who);
    }
    if (s_check_codecs (in, err, err_size))
        return -1;
    if (in->host_cores < 0)
        return nn_errf (err, err_size, "plan: host_cores must be >= 0 (0 = devices on "
                        "their own hardware), got %d", in->host_cores);
    if (!s_time_ok (in->host_copy_Bps))
        return nn_errf (err, err_size, "plan: host_copy_Bps must be finite and >= 0 "
                        "(0 = moving bytes costs no CPU)");
    return 0;
}

double
nn_estimate_server_share (const nn_estimate_input_t *in)
{
    double share = (double) in->devices_count / (double) in->server_workers;
    return share > 1.0 ? share : 1.0;
}

double
nn_estimate_link_payload_Bps (double mbps)
{
    return mbps * 1e6 / 8.0 * (1448.0 / 1514.0);
}

int
nn_estimate_rounds (const nn_estimate_input_t *in)
{
    int agg = in->aggregation_frequency;
    if (agg <= 0 || agg >= in->iterations)
        return 1;
    return (in->iterations + agg - 1) / agg;
}

int
nn_estimate_min_micro_batch (const nn_model_spec_t *spec, int configured)
{
    if (configured > 0)
        return configured;
    const nn_model_entry_t *e = nn_model_registry_find (spec->name);
    return e && e->min_micro_batch > S_DEFAULT_MIN_MICRO ? e->min_micro_batch
                                                         : S_DEFAULT_MIN_MICRO;
}

int
nn_estimate_micro_batch_set (const nn_estimate_input_t *in, int *ns, int cap)
{
    int max_n = in->max_micro_batches > 0 ? in->max_micro_batches : S_DEFAULT_MAX_MICRO;
    int min_mb = in->min_micro_batch > 0 ? in->min_micro_batch : S_DEFAULT_MIN_MICRO;
    int count = 0;
    for (int n = 1; n <= in->batch_size && count < cap; n++) {
        if (in->batch_size % n)
            continue;
        //  N = 1 is always a plan (it is SFL), even for a batch smaller
        //  than the smallest micro-batch.
        if (n > 1 && (n > max_n || in->batch_size / n < min_mb))
            continue;
        ns[count++] = n;
    }
    return count;
}

//  ---------------------------------------------------------------------
//  Durations of one micro-batch

//  Time of a unit's call on B/N samples (see nn_estimate.h).
static double
s_part (double total, double fixed, int n)
{
    return fixed + (total - fixed) / (double) n;
}

typedef struct {
    double fwd, bwd, dev_upd;       //  device
    double srv, srv_upd;            //  server, share applied
    double up_tx, down_tx, lat;     //  links
    double bytes_up, bytes_down;    //  per micro-batch
    double codec;                   //  codec CPU in the above, per micro-batch
} s_micro_t;

//  The device's pinned codecs (none for auto).
static void
s_pinned (const nn_estimate_input_t *in, int device, int *up, int *down)
{
    *up = *down = NN_CODEC_NONE;
    if (in->codecs) {
        if (in->codecs[device].up != NN_ESTIMATE_CODEC_AUTO)
            *up = in->codecs[device].up;
        if (in->codecs[device].down != NN_ESTIMATE_CODEC_AUTO)
            *down = in->codecs[device].down;
    }
}

//  Wire bytes of f32 tensor bytes under a codec at split point p, up or
//  down: none is the f32 tensor itself (proto's data frame, no codec
//  header); with zstd the body shrinks by the ratio the device measured
//  there (1 when it measured none).
static double
s_wire (const nn_estimate_input_t *in, int device, int codec, double f32_bytes, int channels,
        int p, bool up)
{
    if (codec == NN_CODEC_NONE)
        return f32_bytes;
    uint64_t count = (uint64_t) ceil (f32_bytes / 4.0);
    if (count < 1)
        count = 1;
    uint32_t c = channels > 0 ? (uint32_t) channels : 1;
    uint32_t k = 0;
    const nn_estimate_codec_t *dc = &in->codecs[device];
    if (codec == NN_CODEC_TOPK)
        k = nn_codec_topk_k (count > UINT32_MAX ? UINT32_MAX : count, dc->topk_fraction);
    double bytes = (double) nn_codec_wire_bytes ((nn_codec_id_t) codec, count, c, k);
    int kind = nn_squeeze_kind (codec, up);
    if (dc->zstd && kind >= 0 && p - 1 < dc->squeeze.boundaries)
        bytes = NN_CODEC_HEADER_BYTES
              + (bytes - NN_CODEC_HEADER_BYTES) * dc->squeeze.ratio[p - 1][kind];
    return bytes;
}

//  Seconds to encode or decode f32_bytes at a speed (0: not measured, free).
static double
s_codec_s (int codec, double f32_bytes, double Bps)
{
    return codec == NN_CODEC_NONE || Bps <= 0.0 ? 0.0 : f32_bytes / Bps;
}

//  up_scale, down_scale: the share of each link's measured rate it
//  delivers (1 but for codec auto's margin).
static void
s_micro (const nn_estimate_input_t *in, int device, int p, int n, double share, int up,
         int down, double up_scale, double down_scale, s_micro_t *m)
{
    const nn_estimate_device_t *dv = &in->devices[device];
    int units = in->model.units_count;
    assert (p >= 1 && p < units && n >= 1);
    assert (up >= NN_CODEC_NONE && up <= NN_CODEC_INT8);
    assert (down >= NN_CODEC_NONE && down < NN_CODEC_COUNT);
    assert ((up == NN_CODEC_NONE && down == NN_CODEC_NONE) || in->codecs);
    memset (m, 0, sizeof *m);
    for (int u = 0; u < p; u++) {
        const nn_estimate_unit_cost_t *k = &dv->costs.unit[u];
        m->fwd += s_part (k->fwd_s, k->fwd_fixed_s, n);
        m->bwd += s_part (k->bwd_s, k->bwd_fixed_s, n);
        m->dev_upd += k->upd_s;
    }
    for (int u = p; u < units; u++) {
        const nn_estimate_unit_cost_t *k = &in->server.unit[u];
        m->srv += s_part (k->fwd_s, k->fwd_fixed_s, n) + s_part (k->bwd_s, k->bwd_fixed_s, n);
        m->srv_upd += k->upd_s;
    }
    double f32 = in->model.out_bytes[p - 1] / (double) n;
    int channels = in->model.out_channels[p - 1];
    if (in->codecs) {
        const nn_estimate_codec_speed_t *ds = &in->codecs[device].speed, *ss = &in->server_codec;
        double enc_up = s_codec_s (up, f32, ds->encode_Bps[up]);
        double dec_down = s_codec_s (down, f32, ds->decode_Bps[down]);
        double srv = s_codec_s (up, f32, ss->decode_Bps[up])
                   + s_codec_s (down, f32, ss->encode_Bps[down]);
        m->fwd += enc_up;
        m->bwd += dec_down;
        m->srv += srv;      //  shared below with the rest of the step
        m->codec = enc_up + dec_down + srv * share;
    }
    m->srv *= share;
    m->srv_upd *= share;
    m->bytes_up = s_wire (in, device, up, f32, channels, p, true)
                + in->model.label_bytes / (double) n;
    m->bytes_down = s_wire (in, device, down, f32, channels, p, false);
    m->up_tx = m->bytes_up / (dv->uplink_Bps * up_scale);
    m->down_tx = m->bytes_down / (dv->downlink_Bps * down_scale);
    m->lat = dv->rtt_s / 2.0;
}

//  ---------------------------------------------------------------------
//  The estimator: one pass over the micro-batches in order

double
nn_estimate_iteration (const nn_estimate_input_t *in, int device, int split_point,
                  int micro_batches, double server_share, nn_estimate_stages_t *stages)
{
    assert (in && device >= 0 && device < in->devices_count);
    int up, down;
    s_pinned (in, device, &up, &down);
    return nn_estimate_iteration_codecs (in, device, split_point, micro_batches, server_share,
                                    up, down, stages);
}

static double
s_iteration (const nn_estimate_input_t *in, int device, int split_point, int micro_batches,
             double server_share, int codec_up, int codec_down, double up_scale,
             double down_scale, nn_estimate_stages_t *stages);

double
nn_estimate_iteration_codecs (const nn_estimate_input_t *in, int device, int split_point,
                         int micro_batches, double server_share, int codec_up,
                         int codec_down, nn_estimate_stages_t *stages)
{
    assert (in && device >= 0 && device < in->devices_count);
    return s_iteration (in, device, split_point, micro_batches, server_share, codec_up,
                        codec_down, 1.0, 1.0, stages);
}

static double
s_iteration (const nn_estimate_input_t *in, int device, int split_point, int micro_batches,
             double server_share, int codec_up, int codec_down, double up_scale,
             double down_scale, nn_estimate_stages_t *stages)
{
    int n = micro_batches;
    s_micro_t m;
    s_micro (in, device, split_point, n, server_share, codec_up, codec_down, up_scale,
             down_scale, &m);
    //  Every chain after the device is FIFO and starts in index order, so
    //  gradients come back in index order and micro-batch i's arrival is
    //  known as soon as its forward ends: a running max per resource.
    double *grad = nn_malloc (sizeof (double) * (size_t) n);
    double dev = 0.0, up_free = 0.0, srv_free = 0.0, down_free = 0.0;
    int forwards = 0, backwards = 0;
    while (backwards < n) {
        bool waiting = backwards < forwards && grad[backwards] <= dev;
        if (waiting && (!in->forward_first || forwards == n)) {
            //  A gradient is waiting: pipelearn-client runs it before the
            //  next forward.
            dev = dev + m.bwd;
            backwards++;
        }
        else
        if (forwards < n) {
            dev = dev + m.fwd;
            double up = (dev > up_free ? dev : up_free) + m.up_tx;
            up_free = up;
            double arrive = up + m.lat;
            double step = (arrive > srv_free ? arrive : srv_free) + m.srv;
            srv_free = step;
            double down = (step > down_free ? step : down_free) + m.down_tx;
            down_free = down;
            grad[forwards++] = down + m.lat;
        }
        else
            dev = dev > grad[backwards] ? dev : grad[backwards];
    }
    nn_free (grad);
    double dev_end = dev + m.dev_upd;
    double srv_end = srv_free + m.srv_upd;
    if (stages) {
        stages->device_forward_s = m.fwd * n;
        stages->upload_s = m.up_tx * n;
        stages->server_s = m.srv * n;
        stages->download_s = m.down_tx * n;
        stages->device_backward_s = m.bwd * n;
        stages->device_update_s = m.dev_upd;
        stages->server_update_s = m.srv_upd;
        stages->latency_s = 2.0 * m.lat;
        stages->bytes_up = m.bytes_up * n;
        stages->bytes_down = m.bytes_down * n;
        stages->codec_s = m.codec * n;
    }
    return dev_end > srv_end ? dev_end : srv_end;
}

double
nn_estimate_iteration_fl (const nn_estimate_input_t *in, int device)
{
    const nn_estimate_costs_t *c = &in->devices[device].costs;
    double t = 0.0;
    for (int u = 0; u < c->units_count; u++)
        t += c->unit[u].fwd_s + c->unit[u].bwd_s + c->unit[u].upd_s;
    return t;
}

//  The host floor with the devices' pinned codecs; an auto direction
//  takes up/down (a candidate's pair is taken as every auto device's, as
//  its (P, N) is), or none when up is -1.
static double
s_host_floor (const nn_estimate_input_t *in, int split_point, int micro_batches, int up,
              int down);

double
nn_estimate_host_floor (const nn_estimate_input_t *in, int split_point, int micro_batches)
{
    return s_host_floor (in, split_point, micro_batches, -1, -1);
}

static double
s_host_floor (const nn_estimate_input_t *in, int split_point, int micro_batches, int up,
              int down)
{
    assert (in && micro_batches >= 1);
    if (in->host_cores <= 0)
        return 0.0;
    int units = in->model.units_count, n = micro_batches;
    double work = 0.0;
    for (int d = 0; d < in->devices_count; d++) {
        if (split_point >= units) {
            work += nn_estimate_iteration_fl (in, d);
            continue;
        }
        int u, w;
        s_pinned (in, d, &u, &w);
        if (in->codecs && in->codecs[d].up == NN_ESTIMATE_CODEC_AUTO && up >= 0)
            u = up;
        if (in->codecs && in->codecs[d].down == NN_ESTIMATE_CODEC_AUTO && down >= 0)
            w = down;
        s_micro_t m;
        s_micro (in, d, split_point, n, 1.0, u, w, 1.0, 1.0, &m);
        work += n * (m.fwd + m.bwd) + m.dev_upd + n * m.srv + m.srv_upd;
        if (in->host_copy_Bps > 0.0)
            work += n * (m.bytes_up + m.bytes_down) / in->host_copy_Bps;
    }
    return work / (double) in->host_cores;
}

double
nn_estimate_aggregation_s (const nn_estimate_input_t *in, int device, int units)
{
    const nn_estimate_device_t *dv = &in->devices[device];
    double bytes = 0.0;
    for (int u = 0; u < units; u++)
        bytes += in->model.param_bytes[u];
    return bytes / dv->uplink_Bps + bytes / dv->downlink_Bps + dv->rtt_s;
}

//  ---------------------------------------------------------------------
//  The brute-force check: a discrete-event simulation with explicit
//  resources and queues, written without the estimator's shortcuts.

typedef enum {
    S_EV_GRAD_ARRIVE,       //  arrivals first at equal times, so a device
    S_EV_ACT_ARRIVE,        //  that frees at t sees a gradient that lands at t
    S_EV_DEV_DONE,
    S_EV_UP_DONE,
    S_EV_DOWN_DONE,
    S_EV_SRV_DONE,
    S_EV_WORKER_FREE
} s_ev_kind_t;

typedef struct {
    double t;
    int prio;
    uint64_t seq;
    s_ev_kind_t kind;
    int dev, index, worker;
} s_event_t;

typedef struct {
    s_event_t *heap;
    int count, size;
    uint64_t seq;
} s_queue_t;

static bool
s_before (const s_event_t *a, const s_event_t *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    if (a->prio != b->prio)
        return a->prio < b->prio;
    return a->seq < b->seq;
}

static void
s_push (s_queue_t *q, double t, s_ev_kind_t kind, int dev, int index, int worker)
{
    if (q->count == q->size) {
        q->size = q->size ? 2 * q->size : 64;
        q->heap = nn_realloc (q->heap, sizeof (s_event_t) * (size_t) q->size);
    }
    s_event_t e = { t, kind <= S_EV_ACT_ARRIVE ? 0 : 1, q->seq++, kind, dev, index, worker };
    int i = q->count++;
    while (i > 0 && s_before (&e, &q->heap[(i - 1) / 2])) {
        q->heap[i] = q->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->heap[i] = e;
}

static s_event_t
s_pop (s_queue_t *q)
{
    s_event_t top = q->heap[0], last = q->heap[--q->count];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= q->count)
            break;
        if (c + 1 < q->count && s_before (&q->heap[c + 1], &q->heap[c]))
            c++;
        if (!s_before (&q->heap[c], &last))
            break;
        q->heap[i] = q->heap[c];
        i = c;
    }
    q->heap[i] = last;
    return top;
}

//  A FIFO of micro-batch indices (each index enters once).
typedef struct {
    int *items;
    int head, tail;
} s_fifo_t;

typedef struct {
    s_micro_t m;
    int n;
    //  device compute
    bool dev_busy;
    int forwards;               //  issued
    int backwards;              //  finished
    bool *grad_here;            //  gradient i arrived, backward not yet run
    int next_bwd;               //  the next backward to run (index order)
    bool updating, updated;
    double dev_end;
    //  links and replica
    s_fifo_t up, down, acts;
    bool up_busy, down_busy, replica_busy;
    int steps_done;
    double srv_end;
} s_simdev_t;

typedef struct {
    const nn_estimate_input_t *in;
    s_simdev_t *dev;
    int devs;
    int *dev_index;             //  simulated device -> input device
    bool *worker_busy;
    int workers;
    int rr;
    s_queue_t q;
} s_sim_t;

static void
s_device_next (s_sim_t *s, int d, double t)
{
    s_simdev_t *v = &s->dev[d];
    if (v->dev_busy || v->updated)
        return;
    bool forward_waits = s->in->forward_first && v->forwards < v->n;
    if (!forward_waits && v->next_bwd < v->n && v->grad_here[v->next_bwd]) {
        v->dev_busy = true;
        s_push (&s->q, t + v->m.bwd, S_EV_DEV_DONE, d, v->next_bwd, -1);
        v->grad_here[v->next_bwd] = false;
        v->next_bwd++;
    }
    else
    if (v->forwards < v->n) {
        v->dev_busy = true;
        s_push (&s->q, t + v->m.fwd, S_EV_DEV_DONE, d, -1 - v->forwards, -1);
        v->forwards++;
    }
    else
    if (v->backwards == v->n && !v->updating) {
        v->dev_busy = true;
        v->updating = true;
        s_push (&s->q, t + v->m.dev_upd, S_EV_DEV_DONE, d, v->n, -1);
    }
}

static void
s_link_next (s_sim_t *s, int d, double t, bool up)
{
    s_simdev_t *v = &s->dev[d];
    s_fifo_t *f = up ? &v->up : &v->down;
    bool *busy = up ? &v->up_busy : &v->down_busy;
    if (*busy || f->head == f->tail)
        return;
    int i = f->items[f->head++];
    *busy = true;
    s_push (&s->q, t + (up ? v->m.up_tx : v->m.down_tx),
            up ? S_EV_UP_DONE : S_EV_DOWN_DONE, d, i, -1);
}

//  Idle workers take replicas with queued activations, round-robin from
//  rr, a replica on one worker at a time (srv_main's s_dispatch).
static void
s_dispatch (s_sim_t *s, double t)
{
    for (int w = 0; w < s->workers; w++) {
        if (s->worker_busy[w])
            continue;
        int pick = -1;
        for (int k = 0; k < s->devs && pick < 0; k++) {
            int r = (s->rr + k) % s->devs;
            if (!s->dev[r].replica_busy && s->dev[r].acts.head != s->dev[r].acts.tail)
                pick = r;
        }
        if (pick < 0)
            return;
        s->rr = (pick + 1) % s->devs;
        s_simdev_t *v = &s->dev[pick];
        int i = v->acts.items[v->acts.head++];
        v->replica_busy = true;
        s->worker_busy[w] = true;
        s_push (&s->q, t + v->m.srv, S_EV_SRV_DONE, pick, i, w);
    }
}

static void
s_sim_run (s_sim_t *s)
{
    while (s->q.count > 0) {
        s_event_t e = s_pop (&s->q);
        s_simdev_t *v = &s->dev[e.dev];
        switch (e.kind) {
            case S_EV_DEV_DONE:
                v->dev_busy = false;
                if (e.index < 0) {              //  forward -(i+1) done
                    v->up.items[v->up.tail++] = -1 - e.index;
                    s_link_next (s, e.dev, e.t, true);
                }
                else
                if (e.index < v->n)
                    v->backwards++;
                else {
                    v->updated = true;
                    v->dev_end = e.t;
                }
                s_device_next (s, e.dev, e.t);
                break;
            case S_EV_UP_DONE:
                v->up_busy = false;
                s_push (&s->q, e.t + v->m.lat, S_EV_ACT_ARRIVE, e.dev, e.index, -1);
                s_link_next (s, e.dev, e.t, true);
                break;
            case S_EV_ACT_ARRIVE:
                v->acts.items[v->acts.tail++] = e.index;
                s_dispatch (s, e.t);
                break;
            case S_EV_SRV_DONE:
                v->replica_busy = false;
                v->steps_done++;
                v->down.items[v->down.tail++] = e.index;
                s_link_next (s, e.dev, e.t, false);
                if (v->steps_done == v->n) {
                    //  The worker steps SGD on the replica after the last
                    //  micro-batch's reply.
                    v->replica_busy = true;
                    s_push (&s->q, e.t + v->m.srv_upd, S_EV_WORKER_FREE, e.dev, -1, e.worker);
                }
                else
                    s->worker_busy[e.worker] = false;
                s_dispatch (s, e.t);
                break;
            case S_EV_WORKER_FREE:
                v->replica_busy = false;
                v->srv_end = e.t;
                s->worker_busy[e.worker] = false;
                s_dispatch (s, e.t);
                break;
            case S_EV_DOWN_DONE:
                v->down_busy = false;
                s_push (&s->q, e.t + v->m.lat, S_EV_GRAD_ARRIVE, e.dev, e.index, -1);
                s_link_next (s, e.dev, e.t, false);
                break;
            case S_EV_GRAD_ARRIVE:
                v->grad_here[e.index] = true;
                s_device_next (s, e.dev, e.t);
                break;
        }
    }
}

//  Simulate devices dev_index[0..devs) together against `workers` workers
//  with server durations times share; writes their iteration times.
static void
s_simulate (const nn_estimate_input_t *in, const int *dev_index, int devs, int workers,
            double share, const int *split_points, const int *micro_batches, double *out)
{
    s_sim_t s = { .in = in, .devs = devs, .workers = workers };
    s.dev = nn_calloc ((size_t) devs, sizeof (s_simdev_t));
    s.worker_busy = nn_calloc ((size_t) workers, sizeof (bool));
    for (int k = 0; k < devs; k++) {
        int d = dev_index[k];
        s_simdev_t *v = &s.dev[k];
        v->n = micro_batches[d];
        int up, down;
        s_pinned (in, d, &up, &down);
        s_micro (in, d, split_points[d], v->n, share, up, down, 1.0, 1.0, &v->m);
        v->grad_here = nn_calloc ((size_t) v->n, sizeof (bool));
        v->up.items = nn_calloc ((size_t) v->n, sizeof (int));
        v->down.items = nn_calloc ((size_t) v->n, sizeof (int));
        v->acts.items = nn_calloc ((size_t) v->n, sizeof (int));
    }
    for (int k = 0; k < devs; k++)
        s_device_next (&s, k, 0.0);
    s_sim_run (&s);
    for (int k = 0; k < devs; k++) {
        s_simdev_t *v = &s.dev[k];
        assert (v->updated && v->steps_done == v->n);
        out[dev_index[k]] = v->dev_end > v->srv_end ? v->dev_end : v->srv_end;
        nn_free (v->grad_here);
        nn_free (v->up.items);
        nn_free (v->down.items);
        nn_free (v->acts.items);
    }
    nn_free (s.q.heap);
    nn_free (s.worker_busy);
    nn_free (s.dev);
}

void
nn_estimate_simulate_events (const nn_estimate_input_t *in, const int *split_points,
                         const int *micro_batches, bool pooled, double *iteration_s)
{
    assert (in && split_points && micro_batches && iteration_s);
    if (pooled) {
        int *all = nn_malloc (sizeof (int) * (size_t) in->devices_count);
        for (int d = 0; d < in->devices_count; d++)
            all[d] = d;
        s_simulate (in, all, in->devices_count, in->server_workers, 1.0, split_points,
                    micro_batches, iteration_s);
        nn_free (all);
    }
    else {
        double share = nn_estimate_server_share (in);
        for (int d = 0; d < in->devices_count; d++)
            s_simulate (in, &d, 1, 1, share, split_points, micro_batches, iteration_s);
    }
}

//  ---------------------------------------------------------------------
//  The reference's formula

int
nn_estimate_reference_micro_batches (double d_fwd_s, double d_bwd_s, double s_fwd_s,
                                 double s_bwd_s, double up_s, double down_s,
                                 int batch_size)
{
    assert (batch_size >= 1);
    double dmin = d_fwd_s < d_bwd_s ? d_fwd_s : d_bwd_s;
    double cap = batch_size / 2 < 100 ? batch_size / 2 : 100;
    if (cap < 1)
        cap = 1;
    double n = dmin > 0.0 ? ceil ((up_s + s_fwd_s + s_bwd_s + down_s) / dmin) + 1.0 : cap;
    if (!(n < cap))     //  also catches a NaN from 0/0
        n = cap;
    int ni = (int) n;
    return batch_size / (batch_size / ni);
}

//  ---------------------------------------------------------------------
//  The plan

//  a better than b at the same N: smaller epoch estimate, ties to the
//  smaller P.
static bool
s_better (const nn_estimate_candidate_t *a, const nn_estimate_candidate_t *b)
{
    double scale = fabs (a->epoch_s) > fabs (b->epoch_s) ? fabs (a->epoch_s) : fabs (b->epoch_s);
    if (fabs (a->epoch_s - b->epoch_s) > S_TIE * scale)
        return a->epoch_s < b->epoch_s;
    return a->split_point < b->split_point;
}

//  Among candidates within near_best of the fastest: a before b when it
//  splits earlier (less of the model on the device, whose cost in a run
//  the estimate underrates most: a 10% lab device's P 4 measured 21-43%
//  over its estimate where P 2's held within 11%, and pinned P 2 N 25 beat
//  P 4 N 4 by 24% when the estimate had P 4 1% ahead; docs/headline.md),
//  then fewer micro-batches (messages, memory, BN on tiny batches the
//  estimate leaves out), then the smaller estimate. Both choosers use it:
//  per device on its epoch, nn_estimate_common on the parallel epoch.
static bool
s_preferred_order (int pa, int na, double ea, int pb, int nb, double eb)
{
    if (pa != pb)
        return pa < pb;
    if (na != nb)
        return na < nb;
    return ea < eb * (1.0 - S_TIE);
}

static bool
s_preferred (const nn_estimate_candidate_t *a, const nn_estimate_candidate_t *b)
{
    return s_preferred_order (a->split_point, a->micro_batches, a->epoch_s,
                              b->split_point, b->micro_batches, b->epoch_s);
}

//  with_floor: apply the one-host floor (not for SL, which runs one device at
//  a time).
static void
s_fill_pair (const nn_estimate_input_t *in, int device, int p, int n, double share, int up,
             int down, bool with_floor, nn_estimate_candidate_t *c)
{
    c->split_point = p;
    c->micro_batches = n;
    c->codec_up = up;
    c->codec_down = down;
    c->iteration_s = nn_estimate_iteration_codecs (in, device, p, n, share, up, down, &c->stages);
    c->host_floor_s = with_floor ? s_host_floor (in, p, n, up, down) : 0.0;
    if (c->host_floor_s > c->iteration_s)
        c->iteration_s = c->host_floor_s;
    c->aggregation_s = nn_estimate_aggregation_s (in, device, p);
    c->epoch_s = in->iterations * c->iteration_s + nn_estimate_rounds (in) * c->aggregation_s;
}

//  Lossiness of a pair, for auto's tie-break: the worse direction first,
//  then the sum (ids are in lossiness order).
static int
s_lossiness (const nn_estimate_candidate_t *c)
{
    int worst = c->codec_up > c->codec_down ? c->codec_up : c->codec_down;
    return worst * NN_CODEC_COUNT * 2 + c->codec_up + c->codec_down;
}

//  The device's candidate at (P, N): its pinned codecs, or for an auto
//  direction every codec auto may choose (none, fp16, int8), keeping the
//  least lossy pair within near_best of the fastest.
static void
s_fill (const nn_estimate_input_t *in, int device, int p, int n, double share, bool with_floor,
        nn_estimate_candidate_t *c)
{
    int up, down;
    s_pinned (in, device, &up, &down);
    bool auto_up = in->codecs && in->codecs[device].up == NN_ESTIMATE_CODEC_AUTO;
    bool auto_down = in->codecs && in->codecs[device].down == NN_ESTIMATE_CODEC_AUTO;
    if (!auto_up && !auto_down) {
        s_fill_pair (in, device, p, n, share, up, down, with_floor, c);
        return;
    }
    enum { S_PAIRS = (NN_CODEC_INT8 + 1) * (NN_CODEC_INT8 + 1) };
    nn_estimate_candidate_t pairs[S_PAIRS];
    //  Each pair's iteration with the uplink, then the downlink, at
    //  S_LINK_MARGIN of its rate.
    double slow[2][S_PAIRS];
    int count = 0;
    double fastest = INFINITY;
    for (int u = auto_up ? NN_CODEC_NONE : up; u <= (auto_up ? NN_CODEC_INT8 : up); u++)
        for (int w = auto_down ? NN_CODEC_NONE : down; w <= (auto_down ? NN_CODEC_INT8 : down);
             w++) {
            s_fill_pair (in, device, p, n, share, u, w, with_floor, &pairs[count]);
            if (pairs[count].epoch_s < fastest)
                fastest = pairs[count].epoch_s;
            slow[0][count] = s_iteration (in, device, p, n, share, u, w, S_LINK_MARGIN, 1.0,
                                          NULL);
            slow[1][count] = s_iteration (in, device, p, n, share, u, w, 1.0, S_LINK_MARGIN,
                                          NULL);
            count++;
        }
    //  The pairs near the fastest; of those, the ones whose worse slowdown
    //  (against the best of them with that link slow) is near the
    //  smallest; of those, the least lossy.
    double near = in->near_best > 0.0 ? in->near_best : S_DEFAULT_NEAR_BEST;
    double slow_best[2] = { INFINITY, INFINITY };
    for (int i = 0; i < count; i++)
        for (int k = 0; k < 2; k++)
            if (pairs[i].epoch_s <= fastest * (1.0 + near) && slow[k][i] < slow_best[k])
                slow_best[k] = slow[k][i];
    double score[S_PAIRS], score_best = INFINITY;
    for (int i = 0; i < count; i++) {
        score[i] = fmax (slow[0][i] / slow_best[0], slow[1][i] / slow_best[1]);
        if (pairs[i].epoch_s <= fastest * (1.0 + near) && score[i] < score_best)
            score_best = score[i];
    }
    int best = -1;
    for (int i = 0; i < count; i++) {
        if (pairs[i].epoch_s > fastest * (1.0 + near) || score[i] > score_best * (1.0 + near))
            continue;
        if (best < 0 || s_lossiness (&pairs[i]) < s_lossiness (&pairs[best]))
            best = i;
    }
    *c = pairs[best];
}

//  Epoch of devices that train in parallel with aggregation barriers: the
//  sum over rounds of the slowest device's round.
static double
s_parallel_epoch (const nn_estimate_input_t *in, const double *iter_s, const double *agg_s)
{
    int agg = in->aggregation_frequency;
    if (agg <= 0 || agg > in->iterations)
        agg = in->iterations;
    double epoch = 0.0;
    for (int done = 0; done < in->iterations; done += agg) {
        int k = in->iterations - done < agg ? in->iterations - done : agg;
        double slowest = 0.0;
        for (int d = 0; d < in->devices_count; d++) {
            double r = k * iter_s[d] + agg_s[d];
            if (r > slowest)
                slowest = r;
        }
        epoch += slowest;
    }
    return epoch;
}

static void
s_modes (nn_estimate_t *self)
{
    const nn_estimate_input_t *in = &self->in;
    int devs = in->devices_count, units = in->model.units_count;
    double *iter = nn_calloc ((size_t) devs, sizeof (double));
    double *agg = nn_calloc ((size_t) devs, sizeof (double));
    double share = nn_estimate_server_share (in);

    //  FL: the whole model on every device, the whole model averaged.
    nn_estimate_mode_t *fl = &self->modes[PL_MODE_FL];
    double fl_floor = nn_estimate_host_floor (in, units, 1);
    for (int d = 0; d < devs; d++) {
        iter[d] = nn_estimate_iteration_fl (in, d);
        if (fl_floor > iter[d])
            iter[d] = fl_floor;
        agg[d] = nn_estimate_aggregation_s (in, d, units);
        if (iter[d] > fl->iteration_s)
            fl->iteration_s = iter[d];
    }
    fl->epoch_s = s_parallel_epoch (in, iter, agg);
    fl->split_point = units;
    fl->micro_batches = 1;

    //  SFL: N = 1, devices in parallel, each at its own best P (or the pin).
    nn_estimate_mode_t *sfl = &self->modes[PL_MODE_SFL];
    for (int d = 0; d < devs; d++) {
        nn_estimate_candidate_t best = { 0 }, c;
        for (int p = 1; p < units; p++) {
            if (in->split_point && p != in->split_point)
                continue;
            s_fill (in, d, p, 1, share, true, &c);
            if (best.split_point == 0 || s_better (&c, &best))
                best = c;
        }
        iter[d] = best.iteration_s;
        agg[d] = best.aggregation_s;
        if (d == 0)
            sfl->split_point = best.split_point;
        else
        if (sfl->split_point != best.split_point)
            sfl->split_point = 0;
        if (iter[d] > sfl->iteration_s)
            sfl->iteration_s = iter[d];
    }
    sfl->epoch_s = s_parallel_epoch (in, iter, agg);
    sfl->micro_batches = 1;

    //  SL: one server model, so one P for all; devices take turns for a
    //  whole epoch each, the server unshared; each turn fetches and returns
    //  the device part once.
    nn_estimate_mode_t *sl = &self->modes[PL_MODE_SL];
    for (int p = 1; p < units; p++) {
        if (in->split_point && p != in->split_point)
            continue;
        double total = 0.0, slowest = 0.0;
        for (int d = 0; d < devs; d++) {
            nn_estimate_candidate_t c;
            s_fill (in, d, p, 1, 1.0, false, &c);
            double it = c.iteration_s;
            total += in->iterations * it + nn_estimate_aggregation_s (in, d, p);
            if (it > slowest)
                slowest = it;
        }
        if (sl->split_point == 0 || total < sl->epoch_s * (1.0 - S_TIE)) {
            sl->epoch_s = total;
            sl->iteration_s = slowest;
            sl->split_point = p;
        }
    }
    sl->micro_batches = 1;

    //  PipeLearn: every device on its chosen plan.
    nn_estimate_mode_t *pl = &self->modes[PL_MODE_PIPELEARN];
    for (int d = 0; d < devs; d++) {
        const nn_estimate_candidate_t *c = nn_estimate_chosen (self, d);
        iter[d] = c->iteration_s;
        agg[d] = c->aggregation_s;
        if (iter[d] > pl->iteration_s)
            pl->iteration_s = iter[d];
    }
    pl->epoch_s = s_parallel_epoch (in, iter, agg);
    pl->split_point = nn_estimate_chosen (self, 0)->split_point;
    pl->micro_batches = nn_estimate_chosen (self, 0)->micro_batches;
    for (int d = 1; d < devs; d++) {
        if (nn_estimate_chosen (self, d)->split_point != pl->split_point)
            pl->split_point = 0;
        if (nn_estimate_chosen (self, d)->micro_batches != pl->micro_batches)
            pl->micro_batches = 0;
    }
    nn_free (iter);
    nn_free (agg);
}

//  The pins allow c.
static bool
s_allowed (const nn_estimate_input_t *in, const nn_estimate_candidate_t *c)
{
    return (!in->split_point || c->split_point == in->split_point)
        && (!in->micro_batches || c->micro_batches == in->micro_batches);
}

nn_estimate_t *
nn_estimate_new (const nn_estimate_input_t *in, char *err, size_t err_size)
{
    if (nn_estimate_check (in, err, err_size))
        return NULL;
    nn_estimate_t *self = nn_calloc (1, sizeof *self);
    self->in = *in;
    self->devices = nn_malloc (sizeof (nn_estimate_device_t) * (size_t) in->devices_count);
    memcpy (self->devices, in->devices, sizeof (nn_estimate_device_t) * (size_t) in->devices_count);
    self->in.devices = self->devices;
    if (in->codecs) {
        self->codecs = nn_malloc (sizeof (nn_estimate_codec_t) * (size_t) in->devices_count);
        memcpy (self->codecs, in->codecs, sizeof (nn_estimate_codec_t) * (size_t) in->devices_count);
        self->in.codecs = self->codecs;
    }

    int units = in->model.units_count;
    int *ns = nn_malloc (sizeof (int) * (size_t) in->batch_size);
    int ncount = nn_estimate_micro_batch_set (&self->in, ns, in->batch_size);
    //  A pinned N outside the default set (e.g. 1-sample micro-batches)
    //  is still evaluated: the user asked for it.
    if (in->micro_batches) {
        bool found = false;
        for (int k = 0; k < ncount; k++)
            found |= ns[k] == in->micro_batches;
        if (!found) {
            int k = ncount++;
            while (k > 0 && ns[k - 1] > in->micro_batches) {
                ns[k] = ns[k - 1];
                k--;
            }
            ns[k] = in->micro_batches;
        }
    }
    self->per_device = (units - 1) * ncount;
    self->cand = nn_calloc ((size_t) (in->devices_count * self->per_device),
                            sizeof (nn_estimate_candidate_t));
    self->chosen = nn_calloc ((size_t) in->devices_count, sizeof (int));
    double share = nn_estimate_server_share (&self->in);
    double near = in->near_best > 0.0 ? in->near_best : S_DEFAULT_NEAR_BEST;
    for (int d = 0; d < in->devices_count; d++) {
        nn_estimate_candidate_t *c = self->cand + (size_t) d * (size_t) self->per_device;
        double fastest = INFINITY;
        for (int p = 1; p < units; p++)
            for (int k = 0; k < ncount; k++) {
                int i = (p - 1) * ncount + k;
                s_fill (&self->in, d, p, ns[k], share, true, &c[i]);
                if (s_allowed (in, &c[i]) && c[i].epoch_s < fastest)
                    fastest = c[i].epoch_s;
            }
        int best = -1;
        for (int i = 0; i < self->per_device; i++) {
            if (!s_allowed (in, &c[i]) || c[i].epoch_s > fastest * (1.0 + near))
                continue;
            if (best < 0 || s_preferred (&c[i], &c[best]))
                best = i;
        }
        assert (best >= 0);     //  nn_estimate_check made the pins fit
        self->chosen[d] = best;
    }
    nn_free (ns);
    s_modes (self);
    return self;
}

void
nn_estimate_destroy (nn_estimate_t **self_p)
{
    assert (self_p);
    nn_estimate_t *self = *self_p;
    if (!self)
        return;
    nn_free (self->devices);
    nn_free (self->codecs);
    nn_free (self->cand);
    nn_free (self->chosen);
    nn_free (self);
    *self_p = NULL;
}

int
nn_estimate_candidates_count (const nn_estimate_t *self, int device)
{
    assert (self && device >= 0 && device < self->in.devices_count);
    return self->per_device;
}

const nn_estimate_candidate_t *
nn_estimate_candidate (const nn_estimate_t *self, int device, int index)
{
    assert (self && device >= 0 && device < self->in.devices_count);
    assert (index >= 0 && index < self->per_device);
    return &self->cand[(size_t) device * (size_t) self->per_device + (size_t) index];
}

const nn_estimate_candidate_t *
nn_estimate_chosen (const nn_estimate_t *self, int device)
{
    return nn_estimate_candidate (self, device, self->chosen[device]);
}

const nn_estimate_candidate_t *
nn_estimate_find (const nn_estimate_t *self, int device, int split_point, int micro_batches)
{
    for (int i = 0; i < nn_estimate_candidates_count (self, device); i++) {
        const nn_estimate_candidate_t *c = nn_estimate_candidate (self, device, i);
        if (c->split_point == split_point && c->micro_batches == micro_batches)
            return c;
    }
    return NULL;
}

bool
nn_estimate_allowed (const nn_estimate_t *self, const nn_estimate_candidate_t *c)
{
    assert (self && c);
    return s_allowed (&self->in, c);
}

double
nn_estimate_common (const nn_estimate_t *self, int *split_point, int *micro_batches)
{
    assert (self && split_point && micro_batches);
    const nn_estimate_input_t *in = &self->in;
    int devs = in->devices_count;
    double *iter = nn_calloc ((size_t) devs, sizeof (double));
    double *agg = nn_calloc ((size_t) devs, sizeof (double));
    double *epoch = nn_calloc ((size_t) self->per_device, sizeof (double));
    double fastest = INFINITY;
    //  Every device has the same candidate list, in the same order.
    for (int i = 0; i < self->per_device; i++) {
        for (int d = 0; d < devs; d++) {
            iter[d] = nn_estimate_candidate (self, d, i)->iteration_s;
            agg[d] = nn_estimate_candidate (self, d, i)->aggregation_s;
        }
        epoch[i] = s_parallel_epoch (in, iter, agg);
        if (s_allowed (in, nn_estimate_candidate (self, 0, i)) && epoch[i] < fastest)
            fastest = epoch[i];
    }
    double near = in->near_best > 0.0 ? in->near_best : S_DEFAULT_NEAR_BEST;
    int best = -1;
    for (int i = 0; i < self->per_device; i++) {
        const nn_estimate_candidate_t *c = nn_estimate_candidate (self, 0, i);
        if (!s_allowed (in, c) || epoch[i] > fastest * (1.0 + near))
            continue;
        const nn_estimate_candidate_t *b = best < 0 ? NULL : nn_estimate_candidate (self, 0, best);
        if (!b || s_preferred_order (c->split_point, c->micro_batches, epoch[i],
                                     b->split_point, b->micro_batches, epoch[best]))
            best = i;
    }
    assert (best >= 0);
    *split_point = nn_estimate_candidate (self, 0, best)->split_point;
    *micro_batches = nn_estimate_candidate (self, 0, best)->micro_batches;
    double result = epoch[best];
    nn_free (iter);
    nn_free (agg);
    nn_free (epoch);
    return result;
}

const nn_estimate_mode_t *
nn_estimate_mode (const nn_estimate_t *self, pl_mode_t mode)
{
    assert (self && mode >= PL_MODE_FL && mode <= PL_MODE_PIPELEARN);
    return &self->modes[mode];
}
