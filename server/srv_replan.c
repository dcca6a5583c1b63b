/*  srv_replan.c: the planner's re-planning at epoch ends: the links
    probed again, a drifted device's plan re-made, the config's
    split_point_moves applied (srv_planner.h, srv_planner_next). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_calibrate.h"
#include "nn_estimate.h"
#include "pl_log.h"
#include "srv_planner_internal.h"

//  ---------------------------------------------------------------------
//  Adaptive re-planning at epoch ends

//  A re-plan's reason: a drifted link and a calibration, each with figures.
#define S_REASON 480

bool
srv_planner_epoch_end (srv_planner_t *self, const bool *active, int epoch,
                       proto_msg_t **probes)
{
    for (int i = 0; i < self->args.devices; i++)
        probes[i] = NULL;
    const pl_config_t *cfg = self->args.cfg;
    pl_mode_t mode = self->args.mode;
    if (!srv_planner_auto (self) || !self->measure || !cfg->adaptive || mode == PL_MODE_FL
    ||  mode == PL_MODE_SL)
        return false;
    bool any = false;
    for (int i = 0; i < self->args.devices; i++)
        if (active[i]) {
            probes[i] = srv_linkrate_probe (&self->slot[i].link, i, epoch);
            any = true;
        }
    self->probing = any;
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

//  A new split point, if it gains more than replan_gain over split point p
//  with the micro-batch counts n: 1 with out filled (every active device
//  told), 0 if not.
static int
s_replan_split (srv_planner_t *self, const srv_assign_t *cur, const bool *active, int epoch,
                const nn_estimate_t *plan, int p, const int *n, srv_planner_decision_t *out)
{
    const pl_config_t *cfg = self->args.cfg;
    int devices = self->args.devices;
    double now_s = srv_planner_epoch_of (plan, devices, p, n);
    nn_estimate_t *free_plan = srv_planner_plan_at (self, 0);
    int p2 = p, n2 = 1;
    if (free_plan)
        nn_estimate_common (free_plan, &p2, &n2);
    nn_estimate_destroy (&free_plan);
    nn_estimate_t *at2 = p2 != p ? srv_planner_plan_at (self, p2) : NULL;
    if (!at2)
        return 0;
    int m[SRV_MAX_DEVICES];
    double e2[SRV_MAX_DEVICES];
    srv_planner_choose_micro (self, at2, cur, p2, m, e2);
    double next = srv_planner_epoch_of (at2, devices, p2, m);
    nn_estimate_destroy (&at2);
    double gain = now_s > 0 ? (now_s - next) / now_s : 0.0;
    if (gain <= cfg->replan_gain)
        return 0;
    pl_log_info ("server: re-plan at epoch %d: split point %d -> %d (estimated "
                 "epoch %.1f -> %.1f s, gain %.0f%% beyond replan_gain %.0f%%)",
                 epoch, p, p2, now_s, next, 100.0 * gain, 100.0 * cfg->replan_gain);
    cJSON *r = s_replan_record (-1, "split_point", p, p2);
    cJSON_AddNumberToObject (r, "estimated_epoch_s_before", now_s);
    cJSON_AddNumberToObject (r, "estimated_epoch_s_after", next);
    cJSON_AddItemToArray (self->replans, r);
    out->next = *cur;
    for (int i = 0; i < devices; i++) {
        out->next.split[i] = p2;
        out->next.micro[i] = m[i];
        out->tell[i] = active[i];
        self->slot[i].est_iteration_s = e2[i];
    }
    return 1;
}

//  Per-device re-plan (pipelearn, sfl): each drifted device's own choice
//  under its new link. Its split point moves only if that gains more than
//  replan_gain on its estimated iteration; otherwise its N is re-chosen at
//  the split point it has. 1 with out filled (the changed devices told),
//  0 if no plan could be made.
static int
s_replan_each (srv_planner_t *self, const srv_assign_t *cur, const bool *drifted,
               char (*reason)[S_REASON], const nn_estimate_device_t *dv, int epoch,
               srv_planner_decision_t *out)
{
    const pl_config_t *cfg = self->args.cfg;
    nn_estimate_t *free_plan = srv_planner_plan_at (self, 0);
    if (!free_plan)
        return 0;
    out->next = *cur;
    for (int i = 0; i < self->args.devices; i++) {
        if (!drifted[i])
            continue;
        srv_planner_slot_t *s = &self->slot[i];
        const nn_estimate_candidate_t *c = nn_estimate_chosen (free_plan, i);
        const nn_estimate_candidate_t *old = nn_estimate_find (free_plan, i, cur->split[i],
                                                       cur->micro[i]);
        double before = old ? old->iteration_s : s->est_iteration_s;
        int p2 = c->split_point, n2 = self->auto_micro ? c->micro_batches : cur->micro[i];
        const nn_estimate_candidate_t *f = nn_estimate_find (free_plan, i, p2, n2);
        double after = f ? f->iteration_s : c->iteration_s;
        double gain = before > 0 ? (before - after) / before : 0.0;
        if (p2 != cur->split[i] && gain <= cfg->replan_gain) {
            //  Not worth a move: the best N at the split point it has.
            p2 = cur->split[i];
            nn_estimate_t *at = srv_planner_plan_at (self, p2);
            n2 = at && self->auto_micro ? nn_estimate_chosen (at, i)->micro_batches
                                        : cur->micro[i];
            f = at ? nn_estimate_find (at, i, p2, n2) : NULL;
            after = f ? f->iteration_s : before;
            nn_estimate_destroy (&at);
        }
        pl_log_info ("server: re-plan at epoch %d: device %d: %s: split point %d -> %d, "
                     "micro-batches %d -> %d (estimated iteration %.3f -> %.3f s)", epoch, i,
                     reason[i], cur->split[i], p2, cur->micro[i], n2, before, after);
        if (p2 != cur->split[i]) {
            cJSON *r = s_replan_record (i, "split_point", cur->split[i], p2);
            cJSON_AddStringToObject (r, "reason", reason[i]);
            cJSON_AddNumberToObject (r, "estimated_iteration_s_before", before);
            cJSON_AddNumberToObject (r, "estimated_iteration_s_after", after);
            cJSON_AddItemToArray (self->replans, r);
        }
        cJSON *r = s_replan_record (i, "micro_batches", cur->micro[i], n2);
        cJSON_AddStringToObject (r, "reason", reason[i]);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_before", before);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_after", after);
        cJSON_AddItemToArray (self->replans, r);
        out->next.split[i] = p2;
        out->next.micro[i] = n2;
        out->tell[i] = p2 != cur->split[i] || n2 != cur->micro[i];
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        s->est_iteration_s = after;
    }
    nn_estimate_destroy (&free_plan);
    return 1;
}

//  Compute drift: each device's iteration period as the server measured
//  it against the estimate of the plan it ran (under the links just
//  probed, its codecs as they ran). Beyond replan_compute_drift its
//  compute costs are scaled to what it measured (nn_calibrate_compute)
//  and it is re-planned like a device whose link drifted; a period that
//  no compute factor explains (its link, the server) leaves it as it was.
static void
s_calibrate (srv_planner_t *self, const srv_assign_t *cur, const bool *active, bool *drifted,
             char (*reason)[S_REASON], bool *any)
{
    const pl_config_t *cfg = self->args.cfg;
    if (!(cfg->replan_compute_drift > 0.0))
        return;
    int devices = self->args.devices;
    nn_estimate_input_t in;
    nn_estimate_device_t dv[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, dv);
    nn_estimate_codec_t codecs[SRV_MAX_DEVICES];
    if (in.codecs) {
        memcpy (codecs, in.codecs, sizeof codecs[0] * (size_t) devices);
        for (int i = 0; i < devices; i++) {
            codecs[i].up = self->chosen[i].up;
            codecs[i].down = self->chosen[i].down;
        }
        in.codecs = codecs;
    }
    for (int i = 0; i < devices; i++) {
        srv_planner_slot_t *s = &self->slot[i];
        if (!active[i] || !s->profiled || !(s->period_s > 0.0))
            continue;
        int p = cur->split[i], n = cur->micro[i];
        char err[NN_ERR_SIZE] = "";
        double est = nn_calibrate_period_at (&in, i, p, n, err, sizeof err);
        if (!(est > 0.0)) {
            pl_log_error ("server: calibration: device %d: %s", i, err);
            continue;
        }
        double drift = s->period_s / est - 1.0;
        if (fabs (drift) <= cfg->replan_compute_drift)
            continue;
        double f = 0.0;
        int rc = nn_calibrate_compute (&in, i, p, n, s->period_s, &f, err, sizeof err);
        if (rc < 0) {
            pl_log_error ("server: calibration: device %d: %s", i, err);
            continue;
        }
        if (rc == 1) {
            pl_log_info ("server: calibration: device %d: iteration measured %.3f s against "
                         "the estimate's %.3f s (%+.0f%%), which no compute factor in "
                         "[1/%g, %g] explains (its link or the server bound it); its costs "
                         "stay", i, s->period_s, est, 100.0 * drift,
                         1.0 / NN_CALIBRATE_MIN_FACTOR, NN_CALIBRATE_MAX_FACTOR);
            continue;
        }
        double scale = srv_planner_slot_scale (s) * f;
        size_t used = drifted[i] ? strlen (reason[i]) : 0;
        snprintf (reason[i] + used, sizeof reason[i] - used, "%siteration measured %.3f s "
                  "against the estimate's %.3f s (%+.0f%%), beyond replan_compute_drift "
                  "%.0f%%: compute %.2fx its profile", used ? "; " : "", s->period_s, est,
                  100.0 * drift, 100.0 * cfg->replan_compute_drift, scale);
        s->compute_scale = scale;
        drifted[i] = *any = true;
        self->drifted[i] = true;
    }
}

//  The probes of an epoch end are in: 1 with *out the new assignment
//  (the changed devices told), 0 when nothing changes (out->next unset).
static int
s_replan_probed (srv_planner_t *self, const srv_assign_t *cur, const bool *active, int epoch,
                 srv_planner_decision_t *out)
{
    self->probing = false;
    const pl_config_t *cfg = self->args.cfg;
    int devices = self->args.devices;
    memset (out->tell, 0, sizeof out->tell);
    nn_estimate_input_t in;
    nn_estimate_device_t dv[SRV_MAX_DEVICES];
    srv_planner_input (self, &in, dv);
    bool drifted[SRV_MAX_DEVICES] = { false };
    char reason[SRV_MAX_DEVICES][S_REASON];
    bool any = false;
    for (int i = 0; i < devices; i++) {
        srv_planner_slot_t *s = &self->slot[i];
        if (!active[i] || !s->measured || s->plan_up_Bps <= 0 || s->plan_down_Bps <= 0)
            continue;
        double du = dv[i].uplink_Bps / s->plan_up_Bps - 1.0;
        double dd = dv[i].downlink_Bps / s->plan_down_Bps - 1.0;
        if (fabs (du) <= cfg->replan_drift && fabs (dd) <= cfg->replan_drift)
            continue;
        drifted[i] = any = true;
        self->drifted[i] = true;    //  its codecs are chosen again (srv_planner_choose_codecs)
        snprintf (reason[i], sizeof reason[i], "uplink %.1f -> %.1f Mbit/s (%+.0f%%), "
                  "downlink %.1f -> %.1f Mbit/s (%+.0f%%), beyond replan_drift %.0f%%",
                  srv_planner_mbps (s->plan_up_Bps), srv_planner_mbps (dv[i].uplink_Bps),
                  100.0 * du, srv_planner_mbps (s->plan_down_Bps),
                  srv_planner_mbps (dv[i].downlink_Bps), 100.0 * dd, 100.0 * cfg->replan_drift);
    }
    s_calibrate (self, cur, active, drifted, reason, &any);
    if (!any)
        return 0;
    if (!self->replans)
        self->replans = cJSON_CreateArray ();
    if (self->per_device)
        return s_replan_each (self, cur, drifted, reason, dv, epoch, out);
    int p = srv_assign_split (cur);
    nn_estimate_t *plan = srv_planner_plan_at (self, p);
    if (!plan)
        return 0;
    int n[SRV_MAX_DEVICES];
    double est[SRV_MAX_DEVICES];
    srv_planner_choose_micro (self, plan, cur, p, n, est);
    for (int i = 0; i < devices; i++) {
        srv_planner_slot_t *s = &self->slot[i];
        if (!drifted[i]) {
            n[i] = cur->micro[i];       //  only a drifted device is re-planned
            continue;
        }
        const nn_estimate_candidate_t *old = nn_estimate_find (plan, i, p, cur->micro[i]);
        double old_est = old ? old->iteration_s : s->est_iteration_s;
        if (n[i] != cur->micro[i])
            pl_log_info ("server: re-plan at epoch %d: device %d: %s: micro-batches %d -> %d "
                         "(estimated iteration %.3f -> %.3f s)", epoch, i, reason[i],
                         cur->micro[i], n[i], old_est, est[i]);
        else
            pl_log_info ("server: re-plan at epoch %d: device %d: %s: micro-batches stay %d "
                         "(estimated iteration %.3f s)", epoch, i, reason[i], cur->micro[i],
                         est[i]);
        cJSON *r = s_replan_record (i, "micro_batches", cur->micro[i], n[i]);
        cJSON_AddStringToObject (r, "reason", reason[i]);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_before", old_est);
        cJSON_AddNumberToObject (r, "estimated_iteration_s_after", est[i]);
        cJSON_AddItemToArray (self->replans, r);
        s->plan_up_Bps = dv[i].uplink_Bps;
        s->plan_down_Bps = dv[i].downlink_Bps;
        s->est_iteration_s = est[i];
    }
    int moved = self->auto_split
              ? s_replan_split (self, cur, active, epoch, plan, p, n, out) : 0;
    nn_estimate_destroy (&plan);
    if (moved)
        return 1;
    out->next = *cur;
    for (int i = 0; i < devices; i++)
        if (drifted[i] && n[i] != cur->micro[i]) {
            out->next.micro[i] = n[i];
            out->tell[i] = true;
        }
    return 1;
}

//  ---------------------------------------------------------------------
//  Scheduled moves ("split_point_moves")

//  The config's split_point_moves for epoch, applied on top of dec (the
//  probes' re-plan, or the assignment in force with no device told): a
//  moved device is told when active; each move recorded as a re-plan with
//  its reason. 1 when a split point moved, else 0 (dec unchanged).
static int
s_moves (srv_planner_t *self, const bool *active, int epoch, srv_planner_decision_t *dec)
{
    const pl_config_t *cfg = self->args.cfg;
    int moved = 0;
    for (int k = 0; k < cfg->moves_count; k++) {
        const pl_move_t *m = &cfg->moves[k];
        int i = m->device;
        if (m->epoch != epoch || dec->next.split[i] == m->split_point)
            continue;
        pl_log_info ("server: re-plan at epoch %d: device %d: split_point_moves in the "
                     "config: split point %d -> %d, micro-batches stay %d", epoch, i,
                     dec->next.split[i], m->split_point, dec->next.micro[i]);
        if (!self->replans)
            self->replans = cJSON_CreateArray ();
        cJSON *r = s_replan_record (i, "split_point", dec->next.split[i], m->split_point);
        cJSON_AddStringToObject (r, "reason", "split_point_moves in the config");
        cJSON_AddItemToArray (self->replans, r);
        dec->next.split[i] = m->split_point;
        //  A device away now learns its split point when it joins again
        //  (WELCOME carries the assignment).
        dec->tell[i] = active[i];
        moved = 1;
    }
    return moved;
}

//  ---------------------------------------------------------------------
//  The plan for the next epoch

int
srv_planner_next (srv_planner_t *self, const srv_assign_t *cur, const bool *active,
                  bool probed, int epoch, srv_planner_decision_t *out)
{
    int rc = probed ? s_replan_probed (self, cur, active, epoch, out) : 0;
    if (rc != 1) {
        out->next = *cur;
        memset (out->tell, 0, sizeof out->tell);
    }
    if (s_moves (self, active, epoch, out))
        rc = 1;
    if (rc != 1)
        return 0;
    //  The codecs of the plan that holds now (a moved device's "auto"
    //  directions are chosen again at its new split point).
    srv_planner_choose_codecs (self, false, epoch, out);
    return 1;
}
