/*  srv_step.c: what follows an event: start, rounds, FedAvg, epochs,
    re-plans, the end. See srv_step.h. */
#include "srv_step.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_optim.h"
#include "pl_log.h"
#include "srv_epoch.h"
#include "srv_metrics.h"
#include "srv_calib.h"
#include "srv_parts.h"
#include "srv_round.h"
#include "srv_session.h"

//  MODEL to d: its part of the merged model, for the round about to begin,
//  or with CALIBRATE for the epoch's BN calibration (srv_calib.h).
static void
s_send_model (srv_t *self, srv_device_t *d, bool calibrate)
{
    int id = (int) (d - self->dev);
    const nn_model_t *part = srv_parts_device (self, id);
    //  After a calibration at its split point the device holds the weights:
    //  the buffers (the pooled statistics) alone, with CALIBRATE. Not in
    //  sl, where a turn's MODEL is what the device before trained.
    bool buffers = !calibrate && self->mode != PL_MODE_SL
                && d->cal_split == srv_parts_split (self, id)
                && nn_model_weights_count (part) > nn_model_params_count (part);
    size_t skip = buffers ? nn_model_params_count (part) : 0;
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_MODEL);
    proto_slab_t slab = { .unit_begin = 0, .unit_end = (uint32_t) nn_model_unit_end (part),
                          .count = nn_model_weights_count (part) - skip, .sample_count = 0 };
    memcpy (slab.spec_hash, self->spec_hash, PROTO_SPEC_HASH_SIZE);
    //  The header's iteration is where the round starts, so that a device
    //  joining a running run knows where to pick up.
    proto_msg_set_route (msg, (uint32_t) id, (uint32_t) self->epoch,
                         calibrate ? 0 : self->round_iter, 0);
    proto_msg_set_calibrate (msg, calibrate || buffers);
    proto_msg_set_slab_copy (msg, &slab, nn_model_weights_const (part) + skip);
    d->cal_split = calibrate ? d->cal_split : 0;
    d->last_seen = pl_monotonic ();
    srv_send (self, d, &msg);
}

//  A round begins: its deadline starts now.
static void
s_round_begin (srv_t *self)
{
    self->round_start = pl_monotonic ();
    if (self->mode == PL_MODE_SL) {
        s_send_model (self, &self->dev[self->sl_turn], false);
        return;
    }
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].active)
            s_send_model (self, &self->dev[i], false);
}

//  Devices that joined a running run take part from this aggregation point
//  on: their replica gets the current server part (weights and optimiser
//  state of an active replica at the same split point; gradients zeroed;
//  with none at its split point, the merged model's weights and momentum
//  from zero). A replica still lent to a worker (a dropped session's last
//  step) waits for the next point.
static void
s_activate_pending (srv_t *self)
{
    bool any_active = false;
    for (int i = 0; i < self->devices; i++)
        any_active = any_active || self->dev[i].active;
    bool merged = false;
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined || d->active)
            continue;
        if (self->mode != PL_MODE_FL && self->mode != PL_MODE_SL && any_active) {
            if (srv_pool_busy (self->pool, d->replica))
                continue;
            int from = -1;
            for (int k = 0; k < self->devices && from < 0; k++)
                if (self->dev[k].active && self->assign.split[k] == self->assign.split[i])
                    from = k;
            nn_model_t *r = srv_pool_model (self->pool, d->replica);
            if (from >= 0) {
                const nn_model_t *src = srv_pool_model (self->pool, self->dev[from].replica);
                memcpy (nn_model_weights (r), nn_model_weights_const (src),
                        sizeof (float) * nn_model_weights_count (r));
                memcpy (nn_model_optim_state (r), nn_model_optim_state_const (src),
                        sizeof (float) * nn_model_params_count (r));
            }
            else {
                if (!merged)
                    srv_parts_merge (self);
                merged = true;
                nn_model_copy_tensors (r, self->full);
                memset (nn_model_optim_state (r), 0, sizeof (float) * nn_model_params_count (r));
            }
            nn_model_zero_grad (r);
        }
        d->active = true;
        pl_log_info ("server: device %d rejoins at epoch %d, iteration %u", i, self->epoch,
                     self->round_iter);
        srv_metrics_note_rejoin (self->metrics, i);
    }
}

//  The rest of an epoch's start once any re-plan is done: pending devices,
//  checkpoint, first round.
static void
s_epoch_begin (srv_t *self)
{
    self->epoch_start = pl_monotonic ();
    s_activate_pending (self);
    if (self->mode == PL_MODE_SL) {
        bool active[SRV_MAX_DEVICES];
        for (int i = 0; i < self->devices; i++)
            active[i] = self->dev[i].active;
        self->sl_turn = srv_round_next_turn (active, self->devices, -1);
    }
    srv_parts_checkpoint (self);
    s_round_begin (self);
}

//  summary.json "assignment": per device, the split point and N in force.
static void
s_record_assignment (srv_t *self)
{
    cJSON *root = pl_summary_root (self->summary);
    cJSON_DeleteItemFromObjectCaseSensitive (root, "assignment");
    cJSON *a = cJSON_AddObjectToObject (root, "assignment");
    cJSON_AddItemToObject (a, "split_point",
                           cJSON_CreateIntArray (self->assign.split, self->devices));
    cJSON_AddItemToObject (a, "micro_batches",
                           cJSON_CreateIntArray (self->assign.micro, self->devices));
}

//  The one place the assignment changes: apply the planner's decision,
//  re-split if the split point moved, tell the devices, resize the
//  workers. 0, or -1 (the run fails).
static int
s_apply (srv_t *self, const srv_planner_decision_t *dec)
{
    bool moved = false;
    for (int i = 0; i < self->devices; i++) {
        moved = moved || dec->next.split[i] != self->assign.split[i];
        srv_wire_set_codecs (self->wire, i, dec->codecs[i]);
    }
    self->assign = dec->next;
    if (moved && srv_parts_resplit (self))
        return -1;
    for (int i = 0; i < self->devices; i++)
        if (dec->tell[i])
            srv_session_send_plan (self, i);
    s_record_assignment (self);
    return srv_parts_resize (self);
}

static void
s_fail (srv_t *self)
{
    self->rc = 1;
    self->done = true;
}

static void
s_start (srv_t *self)
{
    self->started = true;
    if (!self->resumed) {
        self->epoch = 1;
        self->round_iter = 0;
    }
    //  The clock starts at the first ready device: now, if one said so
    //  while the others were joining (or the start settled).
    self->epoch_start = pl_monotonic ();
    self->clock_wait = true;
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined && self->dev[i].ready)
            self->clock_wait = false;
    int lo, hi, plo, phi;
    srv_assign_micro_range (&self->assign, &lo, &hi);
    srv_assign_split_range (&self->assign, &plo, &phi);
    char micro[32], split[32];
    if (lo == hi)
        snprintf (micro, sizeof micro, "%d", lo);
    else
        snprintf (micro, sizeof micro, "%d..%d", lo, hi);
    if (self->mode == PL_MODE_FL)
        snprintf (split, sizeof split, "%d", self->units);
    else
    if (plo == phi)
        snprintf (split, sizeof split, "%d", plo);
    else
        snprintf (split, sizeof split, "%d..%d", plo, phi);
    pl_log_info ("server: all %d device(s) joined; training (%s, split %s, %s "
                 "micro-batch(es), batch %d)", self->devices, pl_mode_name (self->mode),
                 split, micro, self->batch);
    for (int i = 0; i < self->devices; i++)
        self->dev[i].active = true;
    s_record_assignment (self);
    self->sl_turn = 0;
    if (!self->resumed)
        srv_parts_checkpoint (self);
    s_round_begin (self);
}

//  Every slot must still hold a live connection when the run starts. A
//  HELLO that libzmq had queued from a connection that died before it was
//  read (a device killed while a resumed server was starting) took the
//  last slot: its WELCOME failed, or the end of its connection was still
//  in libzmq's queue. Started, the run's MODEL found it gone and the
//  server, short of devices, aborted before training. Freed, the slot
//  waits for the device's next connection. true either way (the state
//  changed).
static bool
s_start_if_all_there (srv_t *self)
{
    //  Every connection end libzmq reported up to now, then the sessions.
    srv_session_transport_synced (self);
    if (srv_session_drop_gone (self) == 0)
        s_start (self);
    return true;
}

//  Before the start: every device in (and, when planning, profiled and
//  probed) starts the run. true when it started or freed a dead slot.
static bool
s_maybe_start (srv_t *self)
{
    if (self->joined < self->devices || srv_round_start_due (self) > 0)
        return false;
    if (!srv_planner_profile_wanted (self->planner, false))
        return s_start_if_all_there (self);
    srv_planner_decision_t dec;
    int rc = srv_planner_start (self->planner, &self->assign,
                                pl_summary_root (self->summary), &dec);
    if (rc == 0)
        return false;
    if (rc < 0 || s_apply (self, &dec)) {
        s_fail (self);
        return false;
    }
    return s_start_if_all_there (self);
}

//  clip_update_norm: each device's update to its device part (its PARAMS
//  less the model it was sent, which its part still holds) is scaled to
//  that L2 norm at most, so no single device can move the model further.
//  With devices at different split points the norm is over each one's own
//  part.
static void
s_clip_updates (srv_t *self)
{
    double max_norm = self->cfg->clip_update_norm;
    if (max_norm <= 0.0 || self->mode == PL_MODE_SL)
        return;
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->active)
            continue;
        const nn_model_t *part = srv_parts_device (self, i);
        double norm = nn_clip_update (d->params, nn_model_weights_const (part),
                                      nn_model_weights_count (part), max_norm);
        if (norm > max_norm)
            pl_log_info ("server: device %d's update clipped from norm %.4g to %.4g "
                         "(clip_update_norm)", i, norm, max_norm);
    }
}

//  Where each tensor of the full model sits in m's weights slab, or
//  SIZE_MAX where m does not hold it (off[tensors of full]).
static void
s_offsets (size_t *off, const nn_model_t *full, const nn_model_t *m)
{
    int tf = nn_model_tensors_count (full), tm = nn_model_tensors_count (m);
    for (int t = 0; t < tf; t++) {
        nn_tensor_info_t a;
        nn_model_tensor (full, t, &a);
        off[t] = SIZE_MAX;
        for (int k = 0; k < tm && off[t] == SIZE_MAX; k++) {
            nn_tensor_info_t b;
            nn_model_tensor (m, k, &b);
            if (b.count == a.count && strcmp (a.name, b.name) == 0)
                off[t] = b.offset;
        }
    }
}

//  Every active device sent PARAMS for this round: aggregate over the
//  devices that finished it (a dropped device's weight goes to the
//  others), per unit over every holder of it: unit u of device i is in its
//  PARAMS when u < P_i, in its server replica when u >= P_i. Each device
//  holds every unit once, so each tensor (BN statistics included) is the
//  devices' sample-weighted average; the result goes to the merged model
//  and from there to every device part and active replica. Returns whether
//  the round closed its devices' epoch (every one also sent its STATS);
//  *next_iter is where the next round starts.
static bool
s_aggregate (srv_t *self, uint32_t *next_iter)
{
    double weights[SRV_MAX_DEVICES];
    bool epoch_end = true;
    int n = 0, act[SRV_MAX_DEVICES];
    *next_iter = 0;
    for (int i = 0; i < self->devices; i++) {
        if (!self->dev[i].active)
            continue;
        act[n] = i;
        weights[n] = (double) self->dev[i].samples;
        n++;
        self->dev[i].params_in = false;
        *next_iter = self->dev[i].params_iter;
        epoch_end = epoch_end && self->dev[i].stats_in;
    }
    s_clip_updates (self);
    //  Tensor offsets in each split point's part and replica, once per
    //  split point in use.
    int tensors = nn_model_tensors_count (self->full);
    size_t *part_off[NN_MAX_UNITS + 1] = { NULL }, *rep_off[NN_MAX_UNITS + 1] = { NULL };
    for (int k = 0; k < n; k++) {
        int i = act[k], p = srv_parts_split (self, i);
        if (part_off[p])
            continue;
        part_off[p] = nn_malloc (sizeof (size_t) * (size_t) tensors);
        rep_off[p] = nn_malloc (sizeof (size_t) * (size_t) tensors);
        s_offsets (part_off[p], self->full, srv_parts_device (self, i));
        if (self->pool)
            s_offsets (rep_off[p], self->full, srv_pool_model (self->pool, self->dev[i].replica));
        else
            for (int t = 0; t < tensors; t++)
                rep_off[p][t] = SIZE_MAX;
    }
    //  Every device has all its gradients, so no replica is lent out.
    for (int k = 0; self->pool && k < n; k++)
        assert (!srv_pool_pending (self->pool, self->dev[act[k]].replica));
    const float *srcs[SRV_MAX_DEVICES];
    float *dst = nn_model_weights (self->full);
    for (int t = 0; t < tensors; t++) {
        nn_tensor_info_t info;
        nn_model_tensor (self->full, t, &info);
        for (int k = 0; k < n; k++) {
            int i = act[k], p = srv_parts_split (self, i);
            if (part_off[p][t] != SIZE_MAX)
                srcs[k] = self->dev[i].params + part_off[p][t];
            else {
                assert (rep_off[p][t] != SIZE_MAX);
                const nn_model_t *r = srv_pool_model (self->pool, self->dev[i].replica);
                srcs[k] = nn_model_weights_const (r) + rep_off[p][t];
            }
        }
        srv_aggregate_combine (dst + info.offset, srcs, weights, n, info.count, &self->agg);
    }
    for (int p = 0; p <= NN_MAX_UNITS; p++) {
        nn_free (part_off[p]);
        nn_free (rep_off[p]);
        if (self->part[p])
            nn_model_copy_tensors (self->part[p], self->full);
    }
    for (int k = 0; self->pool && k < n; k++)
        nn_model_copy_tensors (srv_pool_model (self->pool, self->dev[act[k]].replica),
                               self->full);
    return epoch_end;
}

static void s_replan (srv_t *self, bool probed);
static void s_end_epoch (srv_t *self);

//  Every device finished the epoch's training (its last round closed): the
//  BN calibration first, if the config asks for it, then the epoch ends.
static void
s_epoch_trained (srv_t *self)
{
    self->calib_s = 0.0;
    if (srv_calib_wanted (self)) {
        if (self->mode == PL_MODE_SL)
            srv_parts_merge (self);     //  sl averages nothing: merge what trained
        if (srv_calib_begin (self)) {
            for (int i = 0; i < self->devices; i++)
                if (self->dev[i].active)
                    s_send_model (self, &self->dev[i], true);
            return;
        }
    }
    s_end_epoch (self);
}

//  Every device finished the epoch: record it, then finish, or go on to
//  the next epoch (after an adaptive re-plan's probes, if any go out).
static void
s_end_epoch (srv_t *self)
{
    bool summary_written = srv_epoch_record (self);
    if (self->epoch >= self->cfg->epochs) {
        srv_epoch_finish (self, summary_written);
        return;
    }
    self->epoch++;
    self->round_iter = 0;
    bool active[SRV_MAX_DEVICES];
    proto_msg_t *probes[SRV_MAX_DEVICES];
    for (int i = 0; i < self->devices; i++)
        active[i] = self->dev[i].active && self->dev[i].joined;
    if (srv_planner_epoch_end (self->planner, active, self->epoch, probes)) {
        for (int i = 0; i < self->devices; i++)
            if (probes[i])
                srv_send (self, &self->dev[i], &probes[i]);
        self->replanning = true;
        return;
    }
    s_replan (self, false);
}

//  Before an epoch: the re-plan of the epoch-end probes (probed: they are
//  in) and the config's split_point_moves for the epoch, applied; then the
//  epoch begins.
static void
s_replan (srv_t *self, bool probed)
{
    bool active[SRV_MAX_DEVICES];
    for (int i = 0; i < self->devices; i++)
        active[i] = self->dev[i].active;
    srv_planner_decision_t dec;
    self->replanning = false;
    if (srv_planner_next (self->planner, &self->assign, active, probed, self->epoch, &dec)
    &&  s_apply (self, &dec))
        s_fail (self);
    if (!self->done)
        s_epoch_begin (self);
}

//  The round is complete: close it. sl passes the turn on (skipping
//  devices that left) and ends the epoch after the last turn; the other
//  modes aggregate. true when the round closed.
static bool
s_round_close (srv_t *self)
{
    //  A replica's step after its last GRADIENTS may still run (the device
    //  had them first): the worker's STEP settles the round again.
    if (self->pool && srv_pool_stepping (self->pool))
        return false;
    bool active[SRV_MAX_DEVICES], params_in[SRV_MAX_DEVICES];
    for (int i = 0; i < self->devices; i++) {
        active[i] = self->dev[i].active;
        params_in[i] = self->dev[i].params_in;
    }
    if (self->mode == PL_MODE_SL) {
        int t = self->sl_turn;
        if (t < self->devices && active[t] && !params_in[t])
            return false;
        if (t < self->devices)
            self->dev[t].params_in = false;
        self->sl_turn = srv_round_next_turn (active, self->devices, t);
        if (self->sl_turn < self->devices)
            s_round_begin (self);
        else
            s_epoch_trained (self);
        return true;
    }
    if (!srv_round_complete (active, params_in, self->devices))
        return false;
    uint32_t next_iter;
    if (s_aggregate (self, &next_iter))
        s_epoch_trained (self);
    else {
        self->round_iter = next_iter;
        s_activate_pending (self);
        srv_parts_checkpoint (self);
        s_round_begin (self);
    }
    return true;
}

//  One decision; true when it changed the state so that another may follow.
static bool
s_step (srv_t *self)
{
    if (!self->started)
        return s_maybe_start (self);
    int active = srv_session_active_count (self);
    if (active < self->cfg->min_devices) {
        char text[128];
        snprintf (text, sizeof text, "%d device(s) left, min_devices is %d", active,
                  self->cfg->min_devices);
        srv_session_abort_all (self, text);
        return false;
    }
    if (self->calibrating) {
        if (!srv_calib_complete (self))
            return false;
        srv_calib_finish (self);
        s_end_epoch (self);
        return true;
    }
    if (self->replanning) {
        bool joined[SRV_MAX_DEVICES];
        for (int i = 0; i < self->devices; i++)
            joined[i] = self->dev[i].joined;
        if (!srv_planner_settled (self->planner, joined))
            return false;
        s_replan (self, true);
        return true;
    }
    return s_round_close (self);
}

double
srv_round_start_due (const srv_t *self)
{
    if (self->started || self->joined < self->devices)
        return -1;
    return self->last_join + SRV_START_SETTLE_S - pl_monotonic ();
}

void
srv_round_advance (srv_t *self)
{
    while (!self->done && s_step (self))
        ;
}
