/*  srv_plan.c: profiles, link probes and (re-)planning. See srv_plan.h. */
#include "srv_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_profile.h"
#include "pl_hostcopy.h"
#include "pl_log.h"

#define S_PROBE_PINGS    3
#define S_PROBE_FIRST    ((size_t) 256 << 10)
#define S_PROBE_MAX      ((size_t) 4 << 20)
#define S_PROBE_TARGET_S 0.2            //  a timed transfer should take this long
#define S_MAX_BPS        12.5e9         //  100 Gbit/s: loopback timing noise above it
#define S_RATES          64             //  srv_slot_t.rates

enum {
    S_PROBE_IDLE = 0,
    S_PROBE_PING,
    S_PROBE_DOWN,
    S_PROBE_UP,
    S_PROBE_DONE
};

static bool
s_auto (const srv_t *self)
{
    return self->plan.auto_split || self->plan.auto_micro;
}

static int
s_id (const srv_t *self, const srv_device_t *d)
{
    return (int) (d - self->dev);
}

static double
s_mbps (double Bps)
{
    return Bps * 8.0 / 1e6;
}

//  ---------------------------------------------------------------------
//  Plans from the current knowledge

//  The planner's input for every device slot: its profile (or this host's
//  until it sent one) and its measured link (or the configured one).
static void
s_input (const srv_t *self, nn_plan_input_t *in, nn_plan_device_t *devs)
{
    const srv_planner_t *pl = &self->plan;
    const pl_config_t *cfg = &self->cfg;
    memset (in, 0, sizeof *in);
    in->model = pl->model;
    in->server = pl->server;
    in->server_workers = srv_workers_for (self);
    in->batch_size = self->batch;
    in->iterations = pl->iterations;
    in->aggregation_frequency = cfg->aggregation_frequency;
    in->devices_count = self->devices;
    in->devices = devs;
    in->host_cores = cfg->host_cores;
    in->host_copy_Bps = pl->host_copy_Bps;
    in->micro_batches = self->mode == PROTO_MODE_PIPELEARN && pl->auto_micro ? 0
                      : self->mode == PROTO_MODE_PIPELEARN ? self->micro : 1;
    for (int i = 0; i < self->devices; i++) {
        const srv_slot_t *s = &pl->slot[i];
        devs[i].costs = s->profiled ? s->costs : pl->server;
        if (s->measured) {
            double up = s->up_Bps > s->traffic_up_Bps ? s->up_Bps : s->traffic_up_Bps;
            devs[i].uplink_Bps = up;
            devs[i].downlink_Bps = s->down_Bps;
            devs[i].rtt_s = s->rtt_s;
        }
        else {
            devs[i].uplink_Bps = nn_plan_link_payload_Bps (cfg->uplink_mbps);
            devs[i].downlink_Bps = nn_plan_link_payload_Bps (cfg->downlink_mbps);
            devs[i].rtt_s = cfg->rtt_ms / 1000.0;
        }
    }
}

//  A plan for the current input with P pinned (0 = free). NULL logged.
static nn_plan_t *
s_plan_at (const srv_t *self, int split_point)
{
    nn_plan_input_t in;
    nn_plan_device_t devs[SRV_MAX_DEVICES];
    s_input (self, &in, devs);
    in.split_point = split_point;
    char err[NN_ERR_SIZE];
    nn_plan_t *plan = nn_plan_new (&in, err, sizeof err);
    if (!plan)
        pl_log_error ("server: planner: %s", err);
    return plan;
}

//  The run's epoch estimate when device i runs (P, n[i]): rounds are
//  barriers, so the slowest device's epoch.
static double
s_epoch_of (const nn_plan_t *plan, int devices, int split_point, const int *n)
{
    double worst = 0.0;
    for (int i = 0; i < devices; i++) {
        const nn_plan_candidate_t *c = nn_plan_find (plan, i, split_point, n[i]);
        if (c && c->epoch_s > worst)
            worst = c->epoch_s;
    }
    return worst;
}

static void
s_send_plan (srv_t *self, int id)
{
    srv_device_t *d = &self->dev[id];
    if (!d->joined)
        return;
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
    proto_plan_t plan = { .device_id = (uint32_t) id, .split_point = (uint32_t) self->split,
                          .micro_batches = (uint32_t) self->plan.slot[id].micro,
                          .batch_size = (uint32_t) self->batch,
                          .devices = (uint32_t) self->devices, .mode = (uint32_t) self->mode,
                          .seed = self->cfg.seed, .origin_s = self->origin };
    proto_msg_set_route (m, (uint32_t) id, (uint32_t) self->epoch, 0, 0);
    proto_msg_set_plan (m, &plan);
    d->micro = self->plan.slot[id].micro;
    srv_send (self, d, &m);
}

//  summary.json "plan": what was chosen from what.
static void
s_plan_json (srv_t *self, const nn_plan_t *plan, double epoch_s)
{
    const srv_planner_t *pl = &self->plan;
    cJSON *root = pl_summary_root (self->summary);
    cJSON_DeleteItemFromObjectCaseSensitive (root, "plan");
    cJSON *pj = cJSON_AddObjectToObject (root, "plan");
    int common = pl->slot[0].micro;
    for (int i = 1; i < self->devices; i++)
        if (pl->slot[i].micro != common)
            common = 0;
    cJSON_AddNumberToObject (pj, "split_point", self->split);
    cJSON_AddNumberToObject (pj, "micro_batches", common);
    cJSON_AddNumberToObject (pj, "estimated_epoch_s", epoch_s);
    cJSON_AddBoolToObject (pj, "measured_links", pl->measure);
    cJSON_AddNumberToObject (pj, "host_cores", self->cfg.host_cores);
    if (self->cfg.host_cores > 0)
        cJSON_AddNumberToObject (pj, "host_copy_mbps", s_mbps (pl->host_copy_Bps));
    cJSON *devs = cJSON_AddArrayToObject (pj, "devices");
    nn_plan_input_t in;
    nn_plan_device_t dv[SRV_MAX_DEVICES];
    s_input (self, &in, dv);
    for (int i = 0; i < self->devices; i++) {
        const srv_slot_t *s = &pl->slot[i];
        cJSON *o = cJSON_CreateObject ();
        double fwd = 0.0, bwd = 0.0;
        for (int u = 0; u < dv[i].costs.units_count; u++) {
            fwd += dv[i].costs.unit[u].fwd_s;
            bwd += dv[i].costs.unit[u].bwd_s;
        }
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddNumberToObject (o, "micro_batches", s->micro);
        cJSON_AddBoolToObject (o, "profiled", s->profiled);
        cJSON_AddNumberToObject (o, "model_forward_s", fwd);
        cJSON_AddNumberToObject (o, "model_backward_s", bwd);
        //  Probed rates are TCP payload; configured ones are the wire's.
        cJSON_AddNumberToObject (o, "uplink_mbps", s->measured ? s_mbps (dv[i].uplink_Bps)
                                                               : self->cfg.uplink_mbps);
        cJSON_AddNumberToObject (o, "downlink_mbps", s->measured ? s_mbps (dv[i].downlink_Bps)
                                                                 : self->cfg.downlink_mbps);
        cJSON_AddNumberToObject (o, "rtt_ms", dv[i].rtt_s * 1000.0);
        cJSON_AddNumberToObject (o, "estimated_iteration_s", s->est_iteration_s);
        cJSON_AddItemToArray (devs, o);
    }
    cJSON *modes = cJSON_AddObjectToObject (pj, "modes");
    for (int m = 0; m < NN_PLAN_MODES_COUNT; m++)
        cJSON_AddNumberToObject (modes, nn_plan_mode_name ((nn_plan_mode_kind_t) m),
                                 nn_plan_mode (plan, (nn_plan_mode_kind_t) m)->epoch_s);
}

//  ---------------------------------------------------------------------
//  Setup: this host's profile and the provisional plan

int
srv_plan_setup (srv_t *self)
{
    srv_planner_t *pl = &self->plan;
    pl_config_t *cfg = &self->cfg;
    pl->auto_split = cfg->split_point == PL_AUTO;
    pl->auto_micro = self->mode == PROTO_MODE_PIPELEARN && cfg->micro_batches == PL_AUTO;
    pl->measure = cfg->measure_link;
    char err[NN_ERR_SIZE];
    nn_profile_args_t pa = { .batch_size = self->batch, .threads = 1, .seed = cfg->seed,
                             .now = pl_monotonic_clock };
    double t0 = pl_monotonic ();
    if (nn_profile_run (&self->spec, &pa, &pl->server, &pl->model, NULL, err, sizeof err)) {
        pl_log_error ("server: planner: %s", err);
        return -1;
    }
    if (cfg->host_cores > 0) {
        pl->host_copy_Bps = pl_hostcopy_rate (cfg->host_copy_mbps, pl->model.out_bytes[0],
                                              err, sizeof err);
        if (pl->host_copy_Bps < 0.0) {
            pl_log_error ("server: planner: %s", err);
            return -1;
        }
        pl_log_info ("server: planner: one host: the server and the devices share %d "
                     "core(s); moving bytes costs a core %.0f Mbit/s%s", cfg->host_cores,
                     pl->host_copy_Bps * 8e-6, cfg->host_copy_mbps > 0.0 ? "" : " (measured)");
    }
    double profile_s = pl_monotonic () - t0;
    //  The training set is not loaded here; with samples 0 (all) the
    //  epoch estimates assume 10000 samples per device.
    int per_device = cfg->samples > 0 ? cfg->samples / self->devices : 10000;
    pl->iterations = per_device > self->batch ? (per_device + self->batch - 1) / self->batch
                                              : 1;
    self->micro = cfg->micro_batches == PL_AUTO ? 1 : cfg->micro_batches;
    nn_plan_t *plan = s_plan_at (self, pl->auto_split ? 0 : cfg->split_point);
    if (!plan)
        return -1;
    int p = 0, n = 1;
    double epoch_s;
    if (self->mode == PROTO_MODE_SL) {
        const nn_plan_mode_t *sl = nn_plan_mode (plan, NN_PLAN_SL);
        p = sl->split_point;
        epoch_s = sl->epoch_s;
    }
    else
        epoch_s = nn_plan_common (plan, &p, &n);
    cfg->split_point = p;
    if (self->mode == PROTO_MODE_PIPELEARN)
        cfg->micro_batches = n;
    self->split = p;
    for (int i = 0; i < SRV_MAX_DEVICES; i++)
        pl->slot[i].micro = self->mode == PROTO_MODE_PIPELEARN ? n : 1;
    s_plan_json (self, plan, epoch_s);
    cJSON *pj = cJSON_GetObjectItemCaseSensitive (pl_summary_root (self->summary), "plan");
    cJSON_AddNumberToObject (pj, "profile_s", profile_s);
    pl_log_info ("server: planner: split point %d, %d micro-batch(es); estimated epoch %.1f s "
                 "(fl %.1f, sl %.1f, sfl %.1f, pipelearn %.1f) for %d device(s) on the "
                 "configured %g/%g Mbit/s, %g ms link, devices as fast as this host (profiled "
                 "in %.1f s)%s", p, self->mode == PROTO_MODE_PIPELEARN ? n : 1, epoch_s,
                 nn_plan_mode (plan, NN_PLAN_FL)->epoch_s,
                 nn_plan_mode (plan, NN_PLAN_SL)->epoch_s,
                 nn_plan_mode (plan, NN_PLAN_SFL)->epoch_s,
                 nn_plan_mode (plan, NN_PLAN_PIPELEARN)->epoch_s, self->devices,
                 cfg->uplink_mbps, cfg->downlink_mbps, cfg->rtt_ms, profile_s,
                 self->mode == PROTO_MODE_FL ? ""
                 : pl->measure ? "; provisional until the devices' profiles and links are in"
                 : "; provisional until the devices' profiles are in");
    nn_plan_destroy (&plan);
    return 0;
}

bool
srv_plan_profile_wanted (const srv_t *self)
{
    return s_auto (self) && self->mode != PROTO_MODE_FL && !self->started;
}

//  ---------------------------------------------------------------------
//  Probes

static void
s_probe_send (srv_t *self, srv_device_t *d)
{
    srv_probe_t *p = &self->plan.slot[s_id (self, d)].probe;
    proto_probe_t pr = { .probe_id = p->id + 1,
                         .reply_bytes = p->step == S_PROBE_UP ? (uint32_t) p->size : 0 };
    size_t payload = p->step == S_PROBE_DOWN ? p->size : 0;
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_route (m, (uint32_t) s_id (self, d), (uint32_t) self->epoch, 0, 0);
    proto_msg_set_probe (m, &pr, payload);
    p->id = pr.probe_id;
    p->expect = pr.reply_bytes;
    p->sent = pl_monotonic ();
    srv_send (self, d, &m);
}

static void
s_probe_start (srv_t *self, srv_device_t *d)
{
    srv_probe_t *p = &self->plan.slot[s_id (self, d)].probe;
    uint32_t id = p->id;
    memset (p, 0, sizeof *p);
    p->id = id;
    p->step = S_PROBE_PING;
    p->rtt_s = INFINITY;
    s_probe_send (self, d);
}

//  The largest timed transfer: the uplink one must fit this server's own
//  frame limit.
static size_t
s_probe_cap (const srv_t *self)
{
    size_t cap = S_PROBE_MAX;
    if (self->limits.max_frame_bytes && self->limits.max_frame_bytes < cap)
        cap = self->limits.max_frame_bytes;
    return cap;
}

static bool
s_probe_busy (const srv_t *self, int i)
{
    int step = self->plan.slot[i].probe.step;
    return step != S_PROBE_IDLE && step != S_PROBE_DONE;
}

static void s_replan (srv_t *self);

//  A device's measurement finished (or was abandoned): go on if nobody
//  else is still being measured.
static void
s_probes_settled (srv_t *self)
{
    srv_planner_t *pl = &self->plan;
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined && s_probe_busy (self, i))
            return;
    if (!self->started) {
        srv_plan_maybe_start (self);
        return;
    }
    if (pl->probing) {
        pl->probing = false;
        s_replan (self);
        if (!self->done)
            srv_epoch_continue (self);
    }
}

void
srv_plan_on_probe (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    int id = s_id (self, d);
    srv_slot_t *s = &self->plan.slot[id];
    srv_probe_t *p = &s->probe;
    const proto_probe_t *pr = proto_msg_probe (msg);
    size_t bytes = proto_msg_probe_payload_bytes (msg);
    if (!s_probe_busy (self, id) || pr->probe_id != p->id || pr->reply_bytes != 0
    ||  bytes != p->expect) {
        char why[160];
        snprintf (why, sizeof why, "PROBE answer (id %u, %zu bytes) for no probe out "
                  "(id %u, %u bytes)", pr->probe_id, bytes, p->id, p->expect);
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    double t = pl_monotonic () - p->sent;
    if (p->step == S_PROBE_PING) {
        p->rtt_s = t < p->rtt_s ? t : p->rtt_s;
        if (++p->pings >= S_PROBE_PINGS) {
            p->step = S_PROBE_DOWN;
            p->size = S_PROBE_FIRST < s_probe_cap (self) ? S_PROBE_FIRST : s_probe_cap (self);
        }
        s_probe_send (self, d);
        return;
    }
    size_t cap = s_probe_cap (self);
    if (t < S_PROBE_TARGET_S && p->size < cap) {
        p->size = p->size * 4 < cap ? p->size * 4 : cap;
        s_probe_send (self, d);
        return;
    }
    //  The transfer's time is its round trip less the RTT of an empty probe.
    double xfer = t - p->rtt_s;
    double rate = (double) p->size / (xfer > 1e-6 ? xfer : 1e-6);
    rate = rate < S_MAX_BPS ? rate : S_MAX_BPS;
    if (p->step == S_PROBE_DOWN) {
        p->down_Bps = rate;
        p->step = S_PROBE_UP;
        p->size = S_PROBE_FIRST < cap ? S_PROBE_FIRST : cap;
        s_probe_send (self, d);
        return;
    }
    p->up_Bps = rate;
    p->step = S_PROBE_DONE;
    s->measured = true;
    s->rtt_s = p->rtt_s;
    s->up_Bps = p->up_Bps;
    s->down_Bps = p->down_Bps;
    pl_log_info ("server: device %d link: uplink %.1f Mbit/s, downlink %.1f Mbit/s, RTT %.1f "
                 "ms (probed)", id, s_mbps (s->up_Bps), s_mbps (s->down_Bps),
                 s->rtt_s * 1000.0);
    s_probes_settled (self);
}

void
srv_plan_on_profile (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    int id = s_id (self, d);
    srv_slot_t *s = &self->plan.slot[id];
    const proto_profile_t *p = proto_msg_profile (msg);
    if (!srv_plan_profile_wanted (self) || s->profiled || (int) p->units != self->units) {
        char why[160];
        snprintf (why, sizeof why, "PROFILE of %u units not asked for (model has %d, "
                  "profile %s)", p->units, self->units, s->profiled ? "already in" : "not due");
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    s->costs.units_count = (int) p->units;
    double fwd = 0.0, bwd = 0.0;
    for (uint32_t u = 0; u < p->units; u++) {
        const proto_unit_cost_t *c = &p->unit[u];
        s->costs.unit[u] = (nn_plan_unit_cost_t) { c->fwd_s, c->bwd_s, c->fwd_fixed_s,
                                                   c->bwd_fixed_s, c->upd_s };
        fwd += c->fwd_s;
        bwd += c->bwd_s;
    }
    s->profiled = true;
    pl_log_info ("server: device %d profile: whole model forward %.3f s, backward %.3f s "
                 "per batch of %d (%u thread(s))", id, fwd, bwd, self->batch, p->threads);
    if (self->plan.measure)
        s_probe_start (self, d);
    else
        srv_plan_maybe_start (self);
}

void
srv_plan_on_join (srv_t *self, srv_device_t *d)
{
    srv_slot_t *s = &self->plan.slot[s_id (self, d)];
    if (!self->started) {
        //  A new device in the slot: what the last one measured is not its.
        uint32_t id = s->probe.id;
        int micro = s->micro;
        memset (s, 0, sizeof *s);
        s->probe.id = id;
        s->micro = micro;
    }
    else
        s->probe.step = S_PROBE_IDLE;
    d->micro = s->micro;
}

void
srv_plan_on_drop (srv_t *self, srv_device_t *d)
{
    srv_slot_t *s = &self->plan.slot[s_id (self, d)];
    bool busy = s_probe_busy (self, s_id (self, d));
    s->probe.step = S_PROBE_IDLE;
    if (busy && self->plan.probing && !self->done)
        s_probes_settled (self);
}

void
srv_plan_check_deadlines (srv_t *self)
{
    double now = pl_monotonic ();
    for (int i = 0; i < self->devices && !self->done; i++) {
        srv_device_t *d = &self->dev[i];
        const srv_probe_t *p = &self->plan.slot[i].probe;
        if (d->joined && s_probe_busy (self, i)
        &&  now - p->sent > self->cfg.device_timeout_s) {
            char why[128];
            snprintf (why, sizeof why, "no answer to a PROBE in %.1f s (device_timeout_s %g)",
                      now - p->sent, self->cfg.device_timeout_s);
            srv_drop (self, d, PROTO_ERR_TIMEOUT, why);
        }
    }
}

bool
srv_plan_probing (const srv_t *self)
{
    return self->plan.probing;
}

//  ---------------------------------------------------------------------
//  Training traffic

void
srv_plan_on_activations (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    srv_slot_t *s = &self->plan.slot[s_id (self, d)];
    const proto_header_t *h = proto_msg_header (msg);
    double now = pl_monotonic ();
    //  Back-to-back micro-batches of one iteration: when the uplink is the
    //  bottleneck their spacing is its transfer time; otherwise it is
    //  longer, so the rate is a floor for the link's.
    if (s->act_valid && h->epoch == s->act_epoch && h->iteration == s->act_iter
    &&  h->micro_batch == s->act_mb + 1 && now > s->act_t) {
        double bytes = PROTO_HEADER_SIZE + 4.0 * (double) proto_msg_tensor_count (msg)
                     + 4.0 * (double) proto_msg_labels_count (msg);
        s->rates[s->rates_count % S_RATES] = bytes / (now - s->act_t);
        s->rates_count++;
    }
    s->act_t = now;
    s->act_epoch = h->epoch;
    s->act_iter = h->iteration;
    s->act_mb = h->micro_batch;
    s->act_valid = true;
}

static int
s_cmp_double (const void *a_, const void *b_)
{
    double a = *(const double *) a_, b = *(const double *) b_;
    return (a > b) - (a < b);
}

void
srv_plan_epoch_json (srv_t *self, int id, cJSON *device)
{
    srv_slot_t *s = &self->plan.slot[id];
    int n = s->rates_count < S_RATES ? s->rates_count : S_RATES;
    if (n >= 3) {
        double r[S_RATES];
        memcpy (r, s->rates, sizeof (double) * (size_t) n);
        qsort (r, (size_t) n, sizeof r[0], s_cmp_double);
        s->traffic_up_Bps = r[n / 2];
    }
    s->rates_count = 0;
    s->act_valid = false;
    if (n >= 3)
        cJSON_AddNumberToObject (device, "uplink_mbps_traffic", s_mbps (s->traffic_up_Bps));
    if (s->measured) {
        cJSON_AddNumberToObject (device, "uplink_mbps_probe", s_mbps (s->up_Bps));
        cJSON_AddNumberToObject (device, "downlink_mbps_probe", s_mbps (s->down_Bps));
        cJSON_AddNumberToObject (device, "rtt_ms_probe", s->rtt_s * 1000.0);
    }
    if (self->mode == PROTO_MODE_PIPELEARN)
        cJSON_AddNumberToObject (device, "micro_batches", s->micro);
}

cJSON *
srv_plan_take_replans (srv_t *self)
{
    cJSON *r = self->plan.replans;
    self->plan.replans = NULL;
    return r;
}

//  ---------------------------------------------------------------------
//  Planning from measurements

//  Each device's best N at split point P (the config's N if pinned), and
//  its estimate. -1 if the planner failed.
static int
s_choose_micro (srv_t *self, const nn_plan_t *plan, int split_point, int *n, double *est)
{
    for (int i = 0; i < self->devices; i++) {
        const nn_plan_candidate_t *c = nn_plan_chosen (plan, i);
        n[i] = self->plan.auto_micro ? c->micro_batches : self->plan.slot[i].micro;
        const nn_plan_candidate_t *f = nn_plan_find (plan, i, split_point, n[i]);
        est[i] = f ? f->iteration_s : c->iteration_s;
    }
    return 0;
}

void
srv_plan_maybe_start (srv_t *self)
{
    if (self->started || self->done || self->joined < self->devices)
        return;
    if (!srv_plan_profile_wanted (self)) {
        srv_start (self);
        return;
    }
    for (int i = 0; i < self->devices; i++) {
        const srv_slot_t *s = &self->plan.slot[i];
        if (!s->profiled || (self->plan.measure && s->probe.step != S_PROBE_DONE))
            return;
    }
    srv_planner_t *pl = &self->plan;
    int p = self->split;
    if (pl->auto_split) {
        nn_plan_t *free_plan = s_plan_at (self, 0);
        if (!free_plan) {
            self->rc = 1;
            self->done = true;
            return;
        }
        int n_common;
        if (self->mode == PROTO_MODE_SL)
            p = nn_plan_mode (free_plan, NN_PLAN_SL)->split_point;
        else
            nn_plan_common (free_plan, &p, &n_common);
        nn_plan_destroy (&free_plan);
    }
    nn_plan_t *plan = s_plan_at (self, p);
    if (!plan) {
        self->rc = 1;
        self->done = true;
        return;
    }
    int n[SRV_MAX_DEVICES];
    double est[SRV_MAX_DEVICES];
    s_choose_micro (self, plan, p, n, est);
    if (p != self->split) {
        pl_log_info ("server: planner: split point %d -> %d from the devices' profiles%s",
                     self->split, p, pl->measure ? " and links" : "");
        for (int i = 0; i < self->devices; i++)
            pl->slot[i].micro = n[i];
        if (srv_resplit (self, p)) {
            nn_plan_destroy (&plan);
            self->rc = 1;
            self->done = true;
            return;
        }
    }
    for (int i = 0; i < self->devices; i++) {
        srv_slot_t *s = &pl->slot[i];
        s->micro = n[i];
        s->est_iteration_s = est[i];
        nn_plan_input_t in;
        nn_plan_device_t dv[SRV_MAX_DEVICES];
        s_input (self, &in, dv);
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        pl_log_info ("server: planner: device %d: split point %d, %d micro-batch(es), "
                     "estimated iteration %.3f s (uplink %.1f, downlink %.1f Mbit/s, RTT %.1f ms)",
                     i, p, n[i], est[i], s_mbps (dv[i].uplink_Bps), s_mbps (dv[i].downlink_Bps),
                     dv[i].rtt_s * 1000.0);
        s_send_plan (self, i);
    }
    double epoch_s = s_epoch_of (plan, self->devices, p, n);
    s_plan_json (self, plan, epoch_s);
    nn_plan_destroy (&plan);
    self->cfg.split_point = self->split;
    if (srv_workers_restart (self)) {
        self->rc = 1;
        self->done = true;
        return;
    }
    srv_start (self);
}

//  ---------------------------------------------------------------------
//  Adaptive re-planning at epoch ends

bool
srv_plan_epoch_end (srv_t *self)
{
    srv_planner_t *pl = &self->plan;
    if (!s_auto (self) || !pl->measure || !self->cfg.adaptive || self->mode == PROTO_MODE_FL
    ||  self->mode == PROTO_MODE_SL)
        return false;
    bool any = false;
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].active && self->dev[i].joined) {
            s_probe_start (self, &self->dev[i]);
            any = true;
        }
    pl->probing = any;
    return any;
}

static cJSON *
s_replan_record (int id, const char *what, double before, double after)
{
    cJSON *o = cJSON_CreateObject ();
    if (id >= 0)
        cJSON_AddNumberToObject (o, "device", id);
    cJSON_AddStringToObject (o, "what", what);
    cJSON_AddNumberToObject (o, "before", before);
    cJSON_AddNumberToObject (o, "after", after);
    return o;
}

static void
s_replan (srv_t *self)
{
    srv_planner_t *pl = &self->plan;
    const pl_config_t *cfg = &self->cfg;
    nn_plan_input_t in;
    nn_plan_device_t dv[SRV_MAX_DEVICES];
    s_input (self, &in, dv);
    bool drifted[SRV_MAX_DEVICES] = { false };
    char reason[SRV_MAX_DEVICES][200];
    bool any = false;
    for (int i = 0; i < self->devices; i++) {
        srv_slot_t *s = &pl->slot[i];
        if (!self->dev[i].active || !s->measured || s->plan_up_Bps <= 0
        ||  s->plan_down_Bps <= 0)
            continue;
        double du = dv[i].uplink_Bps / s->plan_up_Bps - 1.0;
        double dd = dv[i].downlink_Bps / s->plan_down_Bps - 1.0;
        if (fabs (du) <= cfg->replan_drift && fabs (dd) <= cfg->replan_drift)
            continue;
        drifted[i] = any = true;
        snprintf (reason[i], sizeof reason[i], "uplink %.1f -> %.1f Mbit/s (%+.0f%%), "
                  "downlink %.1f -> %.1f Mbit/s (%+.0f%%), beyond replan_drift %.0f%%",
                  s_mbps (s->plan_up_Bps), s_mbps (dv[i].uplink_Bps), 100.0 * du,
                  s_mbps (s->plan_down_Bps), s_mbps (dv[i].downlink_Bps), 100.0 * dd,
                  100.0 * cfg->replan_drift);
    }
    if (!any)
        return;
    if (!pl->replans)
        pl->replans = cJSON_CreateArray ();
    int p = self->split;
    nn_plan_t *plan = s_plan_at (self, p);
    if (!plan)
        return;
    int n[SRV_MAX_DEVICES];
    double est[SRV_MAX_DEVICES];
    s_choose_micro (self, plan, p, n, est);
    for (int i = 0; i < self->devices; i++) {
        srv_slot_t *s = &pl->slot[i];
        if (!drifted[i]) {
            n[i] = s->micro;        //  only a drifted device is re-planned
            continue;
        }
        const nn_plan_candidate_t *old = nn_plan_find (plan, i, p, s->micro);
        double old_est = old ? old->iteration_s : s->est_iteration_s;
        if (n[i] != s->micro)
            pl_log_info ("server: re-plan at epoch %d: device %d: %s: micro-batches %d -> %d "
                         "(estimated iteration %.3f -> %.3f s)", self->epoch, i, reason[i],
                         s->micro, n[i], old_est, est[i]);
        else
            pl_log_info ("server: re-plan at epoch %d: device %d: %s: micro-batches stay %d "
                         "(estimated iteration %.3f s)", self->epoch, i, reason[i], s->micro,
                         est[i]);
        cJSON *r = s_replan_record (i, "micro_batches", s->micro, n[i]);
        cJSON_AddStringToObject (r, "reason", reason[i]);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_before", old_est);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_after", est[i]);
        cJSON_AddItemToArray (pl->replans, r);
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        s->est_iteration_s = est[i];
    }
    //  A new split point only if it gains more than replan_gain over the
    //  current one with the re-planned micro-batch counts.
    if (pl->auto_split) {
        double cur = s_epoch_of (plan, self->devices, p, n);
        nn_plan_t *free_plan = s_plan_at (self, 0);
        int p2 = p, n2 = 1;
        if (free_plan)
            nn_plan_common (free_plan, &p2, &n2);
        nn_plan_destroy (&free_plan);
        nn_plan_t *at2 = p2 != p ? s_plan_at (self, p2) : NULL;
        if (at2) {
            int m[SRV_MAX_DEVICES];
            double e2[SRV_MAX_DEVICES];
            s_choose_micro (self, at2, p2, m, e2);
            double next = s_epoch_of (at2, self->devices, p2, m);
            double gain = cur > 0 ? (cur - next) / cur : 0.0;
            if (gain > cfg->replan_gain) {
                pl_log_info ("server: re-plan at epoch %d: split point %d -> %d (estimated "
                             "epoch %.1f -> %.1f s, gain %.0f%% beyond replan_gain %.0f%%)",
                             self->epoch, p, p2, cur, next, 100.0 * gain,
                             100.0 * cfg->replan_gain);
                cJSON *r = s_replan_record (-1, "split_point", p, p2);
                cJSON_AddNumberToObject (r, "estimated_epoch_s_before", cur);
                cJSON_AddNumberToObject (r, "estimated_epoch_s_after", next);
                cJSON_AddItemToArray (pl->replans, r);
                for (int i = 0; i < self->devices; i++) {
                    n[i] = m[i];
                    pl->slot[i].est_iteration_s = e2[i];
                    pl->slot[i].micro = m[i];
                }
                if (srv_resplit (self, p2))
                    self->done = true, self->rc = 1;
                for (int i = 0; i < self->devices && !self->done; i++)
                    if (self->dev[i].active)
                        s_send_plan (self, i);
                nn_plan_destroy (&at2);
                nn_plan_destroy (&plan);
                if (!self->done && srv_workers_restart (self))
                    self->done = true, self->rc = 1;
                return;
            }
            nn_plan_destroy (&at2);
        }
    }
    nn_plan_destroy (&plan);
    for (int i = 0; i < self->devices; i++)
        if (drifted[i] && n[i] != pl->slot[i].micro) {
            pl->slot[i].micro = n[i];
            s_send_plan (self, i);
        }
    if (srv_workers_restart (self))
        self->done = true, self->rc = 1;
}
