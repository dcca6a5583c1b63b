/*  srv_planner.c: profiles, link probes and (re-)planning. See
    srv_planner.h. */
#include "srv_planner.h"
#include "srv_planner_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_calibrate.h"
#include "nn_estimate.h"
#include "nn_profile.h"
#include "pl_hostcopy.h"
#include "pl_log.h"
#include "pl_timeline.h"
#include "srv_linkrate.h"

double
srv_planner_mbps (double Bps)
{
    return Bps * 8.0 / 1e6;
}

bool
srv_planner_auto (const srv_planner_t *self)
{
    return self->auto_split || self->auto_micro || self->auto_codec;
}

bool
srv_planner_auto_micro (const srv_planner_t *self)
{
    return self->auto_micro;
}

static bool
s_pipelearn (const srv_planner_t *self)
{
    return self->args.mode == PL_MODE_PIPELEARN;
}

//  ---------------------------------------------------------------------
//  Plans from the current knowledge

//  The planner's input for every device slot: its profile (or this host's
//  until it sent one) and its measured link (or the configured one).
void
srv_planner_input (const srv_planner_t *self, nn_estimate_input_t *in,
                   nn_estimate_device_t *devs)
{
    const pl_config_t *cfg = self->args.cfg;
    memset (in, 0, sizeof *in);
    in->model = self->model;
    in->server = self->server;
    in->server_workers = self->args.workers;
    in->batch_size = self->args.batch;
    in->iterations = self->iterations;
    in->aggregation_frequency = cfg->aggregation_frequency;
    in->min_micro_batch = nn_estimate_min_micro_batch (self->args.spec, cfg->min_micro_batch);
    in->devices_count = self->args.devices;
    in->devices = devs;
    in->host_cores = cfg->host_cores;
    in->host_copy_Bps = self->host_copy_Bps;
    in->micro_batches = s_pipelearn (self) && self->auto_micro ? 0
                      : s_pipelearn (self) ? self->fixed_micro : 1;
    in->codecs = self->codecs_set ? self->codecs : NULL;
    in->server_codec = self->server_codec;
    for (int i = 0; i < self->args.devices; i++) {
        const srv_planner_slot_t *s = &self->slot[i];
        devs[i].costs = s->profiled ? s->costs : self->server;
        if (srv_planner_slot_scale (s) != 1.0)
            nn_calibrate_scale (&devs[i].costs, srv_planner_slot_scale (s));
        if (s->measured) {
            double up = s->up_Bps > s->traffic_up_Bps ? s->up_Bps : s->traffic_up_Bps;
            devs[i].uplink_Bps = up;
            devs[i].downlink_Bps = s->down_Bps;
            devs[i].rtt_s = s->rtt_s;
        }
        else {
            devs[i].uplink_Bps = nn_estimate_link_payload_Bps (cfg->uplink_mbps);
            devs[i].downlink_Bps = nn_estimate_link_payload_Bps (cfg->downlink_mbps);
            devs[i].rtt_s = cfg->rtt_ms / 1000.0;
        }
    }
}

//  A plan for the current input with P pinned (0 = free). NULL logged.
nn_estimate_t *
srv_planner_plan_at (const srv_planner_t *self, int split_point)
{
    nn_estimate_input_t in;
    nn_estimate_device_t devs[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, devs);
    in.split_point = split_point;
    char err[NN_ERR_SIZE];
    nn_estimate_t *plan = nn_estimate_new (&in, err, sizeof err);
    if (!plan)
        pl_log_error ("server: planner: %s", err);
    return plan;
}

//  The run's epoch estimate when device i runs (p[i], n[i]): rounds are
//  barriers, so the slowest device's epoch.
static double
s_epoch_each (const nn_estimate_t *plan, int devices, const int *p, const int *n)
{
    double worst = 0.0;
    for (int i = 0; i < devices; i++) {
        const nn_estimate_candidate_t *c = nn_estimate_find (plan, i, p[i], n[i]);
        if (c && c->epoch_s > worst)
            worst = c->epoch_s;
    }
    return worst;
}

//  The same with every device at split_point.
double
srv_planner_epoch_of (const nn_estimate_t *plan, int devices, int split_point, const int *n)
{
    int p[SRV_MAX_DEVICES];
    for (int i = 0; i < devices; i++)
        p[i] = split_point;
    return s_epoch_each (plan, devices, p, n);
}

//  The device's best candidate at each split point the estimate weighed
//  (the N with the shortest estimated epoch there, the chooser's measure:
//  iterations plus the epoch's aggregation, which grows with the device's
//  part) among those the pins allow, or NULL where it weighed none: what
//  the choice was made against, for the log and summary.json (a plan that
//  measures slower than estimated says which split point to try instead).
static const nn_estimate_candidate_t *
s_best_at (const nn_estimate_t *plan, int device, int split_point)
{
    const nn_estimate_candidate_t *best = NULL;
    int count = nn_estimate_candidates_count (plan, device);
    for (int k = 0; k < count; k++) {
        const nn_estimate_candidate_t *c = nn_estimate_candidate (plan, device, k);
        if (c->split_point == split_point && nn_estimate_allowed (plan, c)
        &&  (!best || c->epoch_s < best->epoch_s))
            best = c;
    }
    return best;
}

static void
s_best_by_split_json (const nn_estimate_t *plan, int device, cJSON *o)
{
    cJSON *arr = cJSON_AddArrayToObject (o, "best_by_split");
    for (int p = 1; p < NN_MAX_UNITS; p++) {
        const nn_estimate_candidate_t *c = s_best_at (plan, device, p);
        if (!c)
            continue;
        cJSON *e = cJSON_CreateObject ();
        cJSON_AddNumberToObject (e, "split_point", p);
        cJSON_AddNumberToObject (e, "micro_batches", c->micro_batches);
        cJSON_AddNumberToObject (e, "estimated_iteration_s", c->iteration_s);
        cJSON_AddNumberToObject (e, "estimated_epoch_s", c->epoch_s);
        cJSON_AddItemToArray (arr, e);
    }
}

//  One log line per device: its best candidate at each split point.
static void
s_best_by_split_log (const nn_estimate_t *plan, int device)
{
    char line[512];
    size_t at = 0;
    line[0] = '\0';
    for (int p = 1; p < NN_MAX_UNITS && at < sizeof line; p++) {
        const nn_estimate_candidate_t *c = s_best_at (plan, device, p);
        if (c)
            at += (size_t) snprintf (line + at, sizeof line - at,
                                     "%sP %d N %d %.3f s (epoch %.1f s)", at ? ", " : "", p,
                                     c->micro_batches, c->iteration_s, c->epoch_s);
    }
    if (at)
        pl_log_info ("server: planner: device %d: best by split point (iteration, epoch): %s",
                     device, line);
}

//  summary.json "plan": what was chosen (a) from what.
static void
s_plan_json (const srv_planner_t *self, const nn_estimate_t *plan, const srv_assign_t *a,
             double epoch_s, cJSON *root)
{
    const pl_config_t *cfg = self->args.cfg;
    int devices = self->args.devices;
    cJSON_DeleteItemFromObjectCaseSensitive (root, "plan");
    cJSON *pj = cJSON_AddObjectToObject (root, "plan");
    int common = a->micro[0];
    for (int i = 1; i < devices; i++)
        if (a->micro[i] != common)
            common = 0;
    //  A number when every device has it, else one per device.
    if (srv_assign_mixed (a))
        cJSON_AddItemToObject (pj, "split_point", cJSON_CreateIntArray (a->split, devices));
    else
        cJSON_AddNumberToObject (pj, "split_point", srv_assign_split (a));
    cJSON_AddNumberToObject (pj, "micro_batches", common);
    cJSON_AddNumberToObject (pj, "estimated_epoch_s", epoch_s);
    cJSON_AddBoolToObject (pj, "measured_links", self->measure);
    cJSON_AddNumberToObject (pj, "host_cores", cfg->host_cores);
    if (cfg->host_cores > 0)
        cJSON_AddNumberToObject (pj, "host_copy_mbps", srv_planner_mbps (self->host_copy_Bps));
    cJSON *devs = cJSON_AddArrayToObject (pj, "devices");
    nn_estimate_input_t in;
    nn_estimate_device_t dv[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, dv);
    for (int i = 0; i < devices; i++) {
        const srv_planner_slot_t *s = &self->slot[i];
        cJSON *o = cJSON_CreateObject ();
        double fwd = 0.0, bwd = 0.0;
        for (int u = 0; u < dv[i].costs.units_count; u++) {
            fwd += dv[i].costs.unit[u].fwd_s;
            bwd += dv[i].costs.unit[u].bwd_s;
        }
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddNumberToObject (o, "split_point", a->split[i]);
        cJSON_AddNumberToObject (o, "micro_batches", a->micro[i]);
        cJSON_AddBoolToObject (o, "profiled", s->profiled);
        cJSON_AddNumberToObject (o, "model_forward_s", fwd);
        cJSON_AddNumberToObject (o, "model_backward_s", bwd);
        //  Probed rates are TCP payload; configured ones are the wire's.
        cJSON_AddNumberToObject (o, "uplink_mbps", s->measured
                                 ? srv_planner_mbps (dv[i].uplink_Bps) : cfg->uplink_mbps);
        cJSON_AddNumberToObject (o, "downlink_mbps", s->measured
                                 ? srv_planner_mbps (dv[i].downlink_Bps) : cfg->downlink_mbps);
        cJSON_AddNumberToObject (o, "rtt_ms", dv[i].rtt_s * 1000.0);
        cJSON_AddNumberToObject (o, "estimated_iteration_s", s->est_iteration_s);
        srv_planner_codecs_json (self->args.cfg, i, self->chosen[i], o);
        //  zstd's ratios the estimate took at the device's split point (its
        //  measurement; absent when none was measured or applies).
        const nn_squeeze_t *q = &self->codecs[i].squeeze;
        int at = a->split[i] - 1;
        int ku = nn_squeeze_kind (self->chosen[i].up, true);
        int kd = nn_squeeze_kind (self->chosen[i].down, false);
        if (cfg->codec_zstd && at >= 0 && at < q->boundaries) {
            if (ku >= 0)
                cJSON_AddNumberToObject (o, "zstd_ratio_up", q->ratio[at][ku]);
            if (kd >= 0)
                cJSON_AddNumberToObject (o, "zstd_ratio_down", q->ratio[at][kd]);
        }
        s_best_by_split_json (plan, i, o);
        cJSON_AddItemToArray (devs, o);
    }
    cJSON *modes = cJSON_AddObjectToObject (pj, "modes");
    for (pl_mode_t m = PL_MODE_FL; m <= PL_MODE_PIPELEARN; m++)
        cJSON_AddNumberToObject (modes, pl_mode_name (m), nn_estimate_mode (plan, m)->epoch_s);
}

//  ---------------------------------------------------------------------
//  Setup: this host's profile and the provisional plan

//  The configured codecs for the estimates and, if any is not none, this
//  host's codec speeds (one thread) on the first boundary's tensor at
//  batch B: the bytes the codecs send and the server's CPU they cost are
//  then in every plan. 0 or -1 (logged).
static int
s_codecs (srv_planner_t *self, const nn_profile_args_t *pa)
{
    const pl_config_t *cfg = self->args.cfg;
    for (int i = 0; i < self->args.devices && i < SRV_MAX_DEVICES; i++) {
        pl_codecs_t c = pl_config_codecs (cfg, i);
        self->codecs[i] = (nn_estimate_codec_t) {
            .up = c.auto_up ? NN_ESTIMATE_CODEC_AUTO : (int) c.up,
            .down = c.auto_down ? NN_ESTIMATE_CODEC_AUTO : (int) c.down,
            .topk_fraction = cfg->topk_fraction, .zstd = cfg->codec_zstd };
        self->codecs_set |= c.up != NN_CODEC_NONE || c.down != NN_CODEC_NONE || c.auto_up
                         || c.auto_down;
    }
    if (!self->codecs_set)
        return 0;
    nn_shape_t s = nn_model_spec_unit_output (self->args.spec, 0);
    nn_codec_shape_t shape = { (uint32_t) self->args.batch, (uint32_t) s.h, (uint32_t) s.w,
                               (uint32_t) s.c };
    char err[NN_ERR_SIZE];
    if (nn_profile_codecs (&shape, pa, &self->server_codec, err, sizeof err)) {
        pl_log_error ("server: planner: codec speeds: %s", err);
        return -1;
    }
    //  Until a device's PROFILE says otherwise, it codes as fast as this host.
    for (int i = 0; i < self->args.devices && i < SRV_MAX_DEVICES; i++)
        self->codecs[i].speed = self->server_codec;
    pl_log_info ("server: planner: codec speeds of this host (MB/s of float32, encode / "
                 "decode): fp16 %.0f / %.0f, int8 %.0f / %.0f, topk %.0f / %.0f; each "
                 "device's come in its PROFILE", self->server_codec.encode_Bps[NN_CODEC_FP16] / 1e6,
                 self->server_codec.decode_Bps[NN_CODEC_FP16] / 1e6,
                 self->server_codec.encode_Bps[NN_CODEC_INT8] / 1e6,
                 self->server_codec.decode_Bps[NN_CODEC_INT8] / 1e6,
                 self->server_codec.encode_Bps[NN_CODEC_TOPK] / 1e6,
                 self->server_codec.decode_Bps[NN_CODEC_TOPK] / 1e6);
    return 0;
}

//  Profiles this host and fills *assign with the provisional plan. 0 or -1.
static int
s_provisional (srv_planner_t *self, srv_assign_t *assign, cJSON *summary_root)
{
    const pl_config_t *cfg = self->args.cfg;
    pl_mode_t mode = self->args.mode;
    int batch = self->args.batch;
    char err[NN_ERR_SIZE];
    nn_profile_args_t pa = { .batch_size = batch, .threads = 1, .seed = cfg->seed,
                             .small_batch = nn_profile_fit_batch (self->args.spec, batch,
                                                                  cfg->min_micro_batch),
                             .now = pl_monotonic_clock,
                             .int8_stochastic = cfg->int8_stochastic, .zstd = cfg->codec_zstd };
    double t0 = pl_monotonic ();
    if (nn_profile_run (self->args.spec, &pa, &self->server, &self->model, NULL, err,
                        sizeof err)) {
        pl_log_error ("server: planner: %s", err);
        return -1;
    }
    if (s_codecs (self, &pa))
        return -1;
    if (cfg->host_cores > 0) {
        self->host_copy_Bps = pl_hostcopy_rate (cfg->host_copy_mbps, self->model.out_bytes[0],
                                                err, sizeof err);
        if (self->host_copy_Bps < 0.0) {
            pl_log_error ("server: planner: %s", err);
            return -1;
        }
        pl_log_info ("server: planner: one host: the server and the devices share %d "
                     "core(s); moving bytes costs a core %.0f Mbit/s%s", cfg->host_cores,
                     self->host_copy_Bps * 8e-6,
                     cfg->host_copy_mbps > 0.0 ? "" : " (measured)");
    }
    double profile_s = pl_monotonic () - t0;
    //  The training set is not loaded here; with samples 0 (all) the
    //  epoch estimates assume 10000 samples per device.
    int per_device = cfg->samples > 0 ? cfg->samples / self->args.devices : 10000;
    self->iterations = per_device > batch ? (per_device + batch - 1) / batch : 1;
    //  A per-device split_point list is pinned per device, not for all.
    nn_estimate_t *plan = srv_planner_plan_at (self, self->auto_split || cfg->split_point < 1
                                                     ? 0 : cfg->split_point);
    if (!plan)
        return -1;
    if (!self->auto_split && !self->auto_micro) {
        //  Only a codec is "auto": the configured (P, N) stand; the codecs
        //  are chosen once the devices' profiles are in.
        double epoch_s = s_epoch_each (plan, self->args.devices, assign->split, assign->micro);
        s_plan_json (self, plan, assign, epoch_s, summary_root);
        cJSON_AddNumberToObject (cJSON_GetObjectItemCaseSensitive (summary_root, "plan"),
                                 "profile_s", pl_monotonic () - t0);
        pl_log_info ("server: planner: codec \"auto\": codecs none until the devices' "
                     "profiles%s are in (estimated epoch %.1f s without codecs)",
                     self->measure ? " and links" : "", epoch_s);
        nn_estimate_destroy (&plan);
        return 0;
    }
    int p = 0, n = 1;
    double epoch_s;
    if (mode == PL_MODE_SL) {
        const nn_estimate_mode_t *sl = nn_estimate_mode (plan, PL_MODE_SL);
        p = sl->split_point;
        epoch_s = sl->epoch_s;
    }
    else
        epoch_s = nn_estimate_common (plan, &p, &n);
    srv_assign_uniform (assign, self->args.devices, p, s_pipelearn (self) ? n : 1);
    s_plan_json (self, plan, assign, epoch_s, summary_root);
    cJSON *pj = cJSON_GetObjectItemCaseSensitive (summary_root, "plan");
    cJSON_AddNumberToObject (pj, "profile_s", profile_s);
    pl_log_info ("server: planner: split point %d, %d micro-batch(es); estimated epoch %.1f s "
                 "(fl %.1f, sl %.1f, sfl %.1f, pipelearn %.1f) for %d device(s) on the "
                 "configured %g/%g Mbit/s, %g ms link, devices as fast as this host (profiled "
                 "in %.1f s)%s", p, s_pipelearn (self) ? n : 1, epoch_s,
                 nn_estimate_mode (plan, PL_MODE_FL)->epoch_s,
                 nn_estimate_mode (plan, PL_MODE_SL)->epoch_s,
                 nn_estimate_mode (plan, PL_MODE_SFL)->epoch_s,
                 nn_estimate_mode (plan, PL_MODE_PIPELEARN)->epoch_s, self->args.devices,
                 cfg->uplink_mbps, cfg->downlink_mbps, cfg->rtt_ms, profile_s,
                 mode == PL_MODE_FL ? ""
                 : self->measure ? "; provisional until the devices' profiles and links are in"
                 : "; provisional until the devices' profiles are in");
    nn_estimate_destroy (&plan);
    return 0;
}

srv_planner_t *
srv_planner_new (const srv_planner_args_t *args, srv_assign_t *assign, cJSON *summary_root)
{
    srv_planner_t *self = nn_calloc (1, sizeof *self);
    self->args = *args;
    const pl_config_t *cfg = args->cfg;
    bool pipelearn = s_pipelearn (self);
    int units = args->spec->units_count;
    bool per_device = args->mode != PL_MODE_FL && cfg->split_point == PL_PER_DEVICE;
    srv_assign_uniform (assign, args->devices,
                        args->mode == PL_MODE_FL ? units
                        : per_device ? cfg->split_points[0] : cfg->split_point,
                        pipelearn ? cfg->micro_batches : 1);
    //  A checked config lists one per device (pl_config_check), and never
    //  with "auto" micro-batches: such a run is not planned.
    for (int i = 0; per_device && i < args->devices; i++)
        assign->split[i] = cfg->split_points[i];
    self->fixed_micro = pipelearn ? cfg->micro_batches : 1;
    for (int i = 0; i < args->devices && i < SRV_MAX_DEVICES; i++)
        self->chosen[i] = pl_config_codecs (cfg, i);
    self->auto_codec = args->mode != PL_MODE_FL && pl_config_codec_auto (cfg);
    if (args->mode == PL_MODE_FL
    ||  !(cfg->split_point == PL_AUTO || (pipelearn && cfg->micro_batches == PL_AUTO)
          || self->auto_codec))
        return self;
    self->auto_split = cfg->split_point == PL_AUTO;
    self->auto_micro = pipelearn && cfg->micro_batches == PL_AUTO;
    self->per_device = self->auto_split && args->mode != PL_MODE_SL;
    self->measure = cfg->measure_link;
    if (s_provisional (self, assign, summary_root)) {
        srv_planner_destroy (&self);
        return NULL;
    }
    return self;
}

void
srv_planner_destroy (srv_planner_t **self_p)
{
    srv_planner_t *self = *self_p;
    if (!self)
        return;
    cJSON_Delete (self->replans);
    nn_free (self);
    *self_p = NULL;
}

bool
srv_planner_profile_wanted (const srv_planner_t *self, bool started)
{
    return srv_planner_auto (self) && self->args.mode != PL_MODE_FL && !started;
}

void
srv_planner_set_frame_limit (srv_planner_t *self, size_t max_frame_bytes)
{
    self->frame_limit = max_frame_bytes;
}

//  ---------------------------------------------------------------------
//  Probes

bool
srv_planner_settled (const srv_planner_t *self, const bool *joined)
{
    for (int i = 0; i < self->args.devices; i++)
        if (joined[i] && srv_linkrate_busy (&self->slot[i].link))
            return false;
    return true;
}

int
srv_planner_on_probe (srv_planner_t *self, int id, const proto_msg_t *msg, int epoch,
                      proto_msg_t **send_p, char *why, size_t why_size)
{
    srv_planner_slot_t *s = &self->slot[id];
    if (srv_linkrate_answer (&s->link, msg, id, epoch, self->frame_limit, send_p, why,
                             why_size))
        return -1;
    if (!srv_linkrate_done (&s->link))
        return 0;
    s->measured = true;
    s->rtt_s = s->link.rtt_s;
    s->up_Bps = s->link.up_Bps;
    s->down_Bps = s->link.down_Bps;
    pl_log_info ("server: device %d link: uplink %.1f Mbit/s, downlink %.1f Mbit/s, RTT %.1f "
                 "ms (probed)", id, srv_planner_mbps (s->up_Bps), srv_planner_mbps (s->down_Bps),
                 s->rtt_s * 1000.0);
    return 0;
}

int
srv_planner_on_profile (srv_planner_t *self, int id, const proto_msg_t *msg, bool started,
                        int epoch, proto_msg_t **send_p, char *why, size_t why_size)
{
    *send_p = NULL;
    srv_planner_slot_t *s = &self->slot[id];
    const proto_profile_t *p = proto_msg_profile (msg);
    int units = self->args.spec->units_count;
    if (!srv_planner_profile_wanted (self, started) || s->profiled || (int) p->units != units) {
        snprintf (why, why_size, "PROFILE of %u units not asked for (model has %d, "
                  "profile %s)", p->units, units, s->profiled ? "already in" : "not due");
        return -1;
    }
    s->costs.units_count = (int) p->units;
    double fwd = 0.0, bwd = 0.0;
    for (uint32_t u = 0; u < p->units; u++) {
        const proto_unit_cost_t *c = &p->unit[u];
        s->costs.unit[u] = (nn_estimate_unit_cost_t) { c->fwd_s, c->bwd_s, c->fwd_fixed_s,
                                                   c->bwd_fixed_s, c->upd_s };
        fwd += c->fwd_s;
        bwd += c->bwd_s;
    }
    nn_estimate_codec_t *k = &self->codecs[id];
    bool wants_auto = k->up == NN_ESTIMATE_CODEC_AUTO || k->down == NN_ESTIMATE_CODEC_AUTO;
    for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
        if (wants_auto && c + NN_CODEC_FP16 <= NN_CODEC_INT8
        &&  (p->encode_Bps[c] <= 0.0 || p->decode_Bps[c] <= 0.0)) {
            snprintf (why, why_size, "PROFILE: codec auto needs measured %s encode and decode "
                      "speeds; the device sent %g / %g bytes/s",
                      nn_codec_name ((nn_codec_id_t) (c + NN_CODEC_FP16)), p->encode_Bps[c],
                      p->decode_Bps[c]);
            return -1;
        }
    }
    for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
        k->speed.encode_Bps[NN_CODEC_FP16 + c] = p->encode_Bps[c];
        k->speed.decode_Bps[NN_CODEC_FP16 + c] = p->decode_Bps[c];
    }
    //  zstd's ratios (proto checked rows == units - 1 and each ratio):
    //  the bytes the planner expects at every split point.
    _Static_assert (PROTO_ZSTD_RATIOS == NN_SQUEEZE_KINDS, "one ratio per squeeze kind");
    memset (&k->squeeze, 0, sizeof k->squeeze);
    if (p->zstd_rows && (int) p->zstd_rows <= NN_MAX_UNITS) {
        k->squeeze.boundaries = (int) p->zstd_rows;
        for (uint32_t r = 0; r < p->zstd_rows; r++)
            for (int q = 0; q < NN_SQUEEZE_KINDS; q++)
                k->squeeze.ratio[r][q] = p->zstd_ratio[r][q];
        char list[NN_MAX_UNITS * 24] = "";
        size_t used = 0;
        for (int r = 0; r < k->squeeze.boundaries && used < sizeof list; r++) {
            int w = snprintf (list + used, sizeof list - used, "%s%d %.2f/%.2f", r ? ", " : "",
                              r + 1, k->squeeze.ratio[r][NN_SQUEEZE_INT8_UP],
                              k->squeeze.ratio[r][NN_SQUEEZE_INT8_DOWN]);
            used += w > 0 ? (size_t) w : 0;
        }
        pl_log_info ("server: device %d zstd ratios (body after / before), int8 up/down by "
                     "split point: %s", id, list);
    }
    s->profiled = true;
    s->compute_scale = 1.0;     //  a new profile: no calibration yet
    pl_log_info ("server: device %d profile: whole model forward %.3f s, backward %.3f s "
                 "per batch of %d (%u thread(s)); codecs (MB/s of float32, encode / decode): "
                 "fp16 %.0f / %.0f, int8 %.0f / %.0f, topk %.0f / %.0f", id, fwd, bwd,
                 self->args.batch, p->threads, p->encode_Bps[0] / 1e6, p->decode_Bps[0] / 1e6,
                 p->encode_Bps[1] / 1e6, p->decode_Bps[1] / 1e6, p->encode_Bps[2] / 1e6,
                 p->decode_Bps[2] / 1e6);
    if (self->measure)
        *send_p = srv_linkrate_probe (&s->link, id, epoch);
    return 0;
}

void
srv_planner_on_join (srv_planner_t *self, int id, bool started)
{
    srv_planner_slot_t *s = &self->slot[id];
    if (!started) {
        //  A new device in the slot: what the last one measured is not its.
        srv_linkrate_t link = s->link;
        memset (s, 0, sizeof *s);
        s->link = link;
        srv_linkrate_reset (&s->link);
        self->codecs[id].speed = self->server_codec;
        memset (&self->codecs[id].squeeze, 0, sizeof self->codecs[id].squeeze);
    }
    else
        srv_linkrate_abandon (&s->link);
}

void
srv_planner_on_drop (srv_planner_t *self, int id)
{
    srv_linkrate_abandon (&self->slot[id].link);
}

bool
srv_planner_overdue (const srv_planner_t *self, int id, double timeout, char *why,
                     size_t why_size)
{
    return srv_linkrate_overdue (&self->slot[id].link, timeout, why, why_size);
}

bool
srv_planner_probing (const srv_planner_t *self)
{
    return self->probing;
}

//  ---------------------------------------------------------------------
//  Training traffic

void
srv_planner_on_activations (srv_planner_t *self, int id, const proto_msg_t *msg)
{
    srv_linkrate_on_activations (&self->slot[id].link, msg, pl_monotonic ());
}

void
srv_planner_epoch_json (srv_planner_t *self, int id, int micro, cJSON *device)
{
    srv_planner_slot_t *s = &self->slot[id];
    double traffic = srv_linkrate_traffic (&s->link);
    if (traffic > 0.0) {
        s->traffic_up_Bps = traffic;
        cJSON_AddNumberToObject (device, "uplink_mbps_traffic", srv_planner_mbps (traffic));
    }
    //  The iteration period the server saw, beside the plan's estimate
    //  and the calibration in force (docs/planner.md, "Calibration").
    s->period_s = srv_linkrate_period (&s->link);
    if (s->period_s > 0.0)
        cJSON_AddNumberToObject (device, "iteration_s_measured", s->period_s);
    if (s->est_iteration_s > 0.0)
        cJSON_AddNumberToObject (device, "iteration_s_estimated", s->est_iteration_s);
    if (srv_planner_slot_scale (s) != 1.0)
        cJSON_AddNumberToObject (device, "compute_scale", srv_planner_slot_scale (s));
    if (s->measured) {
        cJSON_AddNumberToObject (device, "uplink_mbps_probe", srv_planner_mbps (s->up_Bps));
        cJSON_AddNumberToObject (device, "downlink_mbps_probe", srv_planner_mbps (s->down_Bps));
        cJSON_AddNumberToObject (device, "rtt_ms_probe", s->rtt_s * 1000.0);
    }
    if (s_pipelearn (self))
        cJSON_AddNumberToObject (device, "micro_batches", micro);
}

cJSON *
srv_planner_take_replans (srv_planner_t *self)
{
    cJSON *r = self->replans;
    self->replans = NULL;
    return r;
}

//  ---------------------------------------------------------------------
//  Planning from measurements

//  Each device's best N at split point P (cur's N if pinned), and its
//  estimate.
void
srv_planner_choose_micro (const srv_planner_t *self, const nn_estimate_t *plan,
                          const srv_assign_t *cur, int split_point, int *n, double *est)
{
    for (int i = 0; i < self->args.devices; i++) {
        const nn_estimate_candidate_t *c = nn_estimate_chosen (plan, i);
        n[i] = self->auto_micro ? c->micro_batches : cur->micro[i];
        const nn_estimate_candidate_t *f = nn_estimate_find (plan, i, split_point, n[i]);
        est[i] = f ? f->iteration_s : c->iteration_s;
    }
}

//  Each device's own choice (pipelearn, sfl): its (P, N) from a plan with
//  P free (N pinned unless "auto"); with keep (only codecs are "auto") the
//  (P, N) it has. Its codecs at that (P, N). 1 with out filled, -1 on
//  failure.
static int
s_start_each (srv_planner_t *self, const srv_assign_t *cur, bool keep, cJSON *summary_root,
              srv_planner_decision_t *out)
{
    int devices = self->args.devices;
    nn_estimate_t *plan = srv_planner_plan_at (self, 0);
    if (!plan)
        return -1;
    nn_estimate_input_t in;
    nn_estimate_device_t dv[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, dv);
    out->next = *cur;
    for (int i = 0; i < devices; i++) {
        srv_planner_slot_t *s = &self->slot[i];
        const nn_estimate_candidate_t *c = nn_estimate_chosen (plan, i);
        out->next.split[i] = keep ? cur->split[i] : c->split_point;
        out->next.micro[i] = self->auto_micro ? c->micro_batches : cur->micro[i];
        const nn_estimate_candidate_t *f = nn_estimate_find (plan, i, out->next.split[i],
                                                     out->next.micro[i]);
        double est = f ? f->iteration_s : c->iteration_s;
        out->tell[i] = true;
        s->est_iteration_s = est;
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        pl_log_info ("server: planner: device %d: split point %d, %d micro-batch(es), "
                     "estimated iteration %.3f s (uplink %.1f, downlink %.1f Mbit/s, RTT %.1f "
                     "ms; %s)", i, out->next.split[i], out->next.micro[i], est,
                     srv_planner_mbps (dv[i].uplink_Bps), srv_planner_mbps (dv[i].downlink_Bps),
                     dv[i].rtt_s * 1000.0, keep ? "as configured" : "its own choice");
        if (!keep)
            s_best_by_split_log (plan, i);
    }
    for (int i = devices; i < SRV_MAX_DEVICES; i++)
        out->tell[i] = false;
    srv_planner_choose_codecs (self, true, 0, out);
    double epoch_s = s_epoch_each (plan, devices, out->next.split, out->next.micro);
    s_plan_json (self, plan, &out->next, epoch_s, summary_root);
    nn_estimate_destroy (&plan);
    return 1;
}

//  A direction's choice, for the log and the re-plan record.
static void
s_codec_changed (srv_planner_t *self, int id, const char *what, nn_codec_id_t before,
                 nn_codec_id_t after, bool start, int epoch)
{
    if (start)
        return;
    pl_log_info ("server: re-plan at epoch %d: device %d: %s %s -> %s (codec \"auto\": the "
                 "estimate's choice at its split point and micro-batches)", epoch, id, what,
                 nn_codec_name (before), nn_codec_name (after));
    if (!self->replans)
        self->replans = cJSON_CreateArray ();
    cJSON *r = cJSON_CreateObject ();
    cJSON_AddNumberToObject (r, "device", id);
    cJSON_AddStringToObject (r, "what", what);
    cJSON_AddStringToObject (r, "before", nn_codec_name (before));
    cJSON_AddStringToObject (r, "after", nn_codec_name (after));
    cJSON_AddStringToObject (r, "reason", "codec auto: the planner's choice for the new "
                             "estimate");
    cJSON_AddItemToArray (self->replans, r);
}

void
srv_planner_choose_codecs (srv_planner_t *self, bool start, int epoch,
                           srv_planner_decision_t *out)
{
    int devices = self->args.devices;
    nn_estimate_t *plan = self->auto_codec ? srv_planner_plan_at (self, 0) : NULL;
    for (int i = 0; i < devices; i++) {
        pl_codecs_t c = self->chosen[i];
        const nn_estimate_candidate_t *k = NULL;
        if (plan && (c.auto_up || c.auto_down) && (start || self->drifted[i] || out->tell[i]))
            k = nn_estimate_find (plan, i, out->next.split[i], out->next.micro[i]);
        if (k) {
            pl_codecs_t next = c;
            if (c.auto_up)
                next.up = (nn_codec_id_t) k->codec_up;
            if (c.auto_down)
                next.down = (nn_codec_id_t) k->codec_down;
            if (next.up != c.up)
                s_codec_changed (self, i, "codec_up", c.up, next.up, start, epoch);
            if (next.down != c.down)
                s_codec_changed (self, i, "codec_down", c.down, next.down, start, epoch);
            if (next.up != c.up || next.down != c.down)
                out->tell[i] = true;
            if (start)
                pl_log_info ("server: planner: device %d: codecs up %s%s, down %s%s "
                             "(estimated iteration %.3f s at split point %d, %d "
                             "micro-batch(es))", i, nn_codec_name (next.up),
                             c.auto_up ? " (auto)" : "", nn_codec_name (next.down),
                             c.auto_down ? " (auto)" : "", k->iteration_s, k->split_point,
                             k->micro_batches);
            self->chosen[i] = next;
        }
        out->codecs[i] = self->chosen[i];
        self->drifted[i] = false;
    }
    nn_estimate_destroy (&plan);
}

void
srv_planner_codecs_json (const pl_config_t *cfg, int id, pl_codecs_t codecs, cJSON *o)
{
    pl_codecs_t configured = pl_config_codecs (cfg, id);
    cJSON_AddStringToObject (o, "codec_up", nn_codec_name (codecs.up));
    cJSON_AddStringToObject (o, "codec_down", nn_codec_name (codecs.down));
    cJSON_AddStringToObject (o, "codec_up_by", configured.auto_up ? "planner" : "config");
    cJSON_AddStringToObject (o, "codec_down_by", configured.auto_down ? "planner" : "config");
    //  What srv_wire_assign puts in the PLAN: zstd over a codec payload.
    cJSON_AddBoolToObject (o, "codec_up_zstd", cfg->codec_zstd && codecs.up != NN_CODEC_NONE);
    cJSON_AddBoolToObject (o, "codec_down_zstd",
                           cfg->codec_zstd && codecs.down != NN_CODEC_NONE);
}

int
srv_planner_start (srv_planner_t *self, const srv_assign_t *cur, cJSON *summary_root,
                   srv_planner_decision_t *out)
{
    int devices = self->args.devices;
    for (int i = 0; i < devices; i++) {
        const srv_planner_slot_t *s = &self->slot[i];
        if (!s->profiled || (self->measure && !srv_linkrate_done (&s->link)))
            return 0;
    }
    if (self->per_device || (!self->auto_split && !self->auto_micro))
        return s_start_each (self, cur, !self->per_device, summary_root, out);
    int split = srv_assign_split (cur);
    int p = split;
    if (self->auto_split) {
        nn_estimate_t *free_plan = srv_planner_plan_at (self, 0);
        if (!free_plan)
            return -1;
        int n_common;
        if (self->args.mode == PL_MODE_SL)
            p = nn_estimate_mode (free_plan, PL_MODE_SL)->split_point;
        else
            nn_estimate_common (free_plan, &p, &n_common);
        nn_estimate_destroy (&free_plan);
    }
    nn_estimate_t *plan = srv_planner_plan_at (self, p);
    if (!plan)
        return -1;
    int n[SRV_MAX_DEVICES];
    double est[SRV_MAX_DEVICES];
    srv_planner_choose_micro (self, plan, cur, p, n, est);
    if (p != split)
        pl_log_info ("server: planner: split point %d -> %d from the devices' profiles%s",
                     split, p, self->measure ? " and links" : "");
    out->next = *cur;
    nn_estimate_input_t in;
    nn_estimate_device_t dv[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, dv);
    for (int i = 0; i < devices; i++) {
        srv_planner_slot_t *s = &self->slot[i];
        out->next.split[i] = p;
        out->next.micro[i] = n[i];
        out->tell[i] = true;
        s->est_iteration_s = est[i];
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        pl_log_info ("server: planner: device %d: split point %d, %d micro-batch(es), "
                     "estimated iteration %.3f s (uplink %.1f, downlink %.1f Mbit/s, RTT %.1f ms)",
                     i, p, n[i], est[i], srv_planner_mbps (dv[i].uplink_Bps),
                     srv_planner_mbps (dv[i].downlink_Bps), dv[i].rtt_s * 1000.0);
    }
    for (int i = devices; i < SRV_MAX_DEVICES; i++)
        out->tell[i] = false;
    srv_planner_choose_codecs (self, true, 0, out);
    double epoch_s = srv_planner_epoch_of (plan, devices, p, n);
    s_plan_json (self, plan, &out->next, epoch_s, summary_root);
    nn_estimate_destroy (&plan);
    return 1;
}
