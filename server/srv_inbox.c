/*  srv_inbox.c: device messages and worker replies, checked and recorded.
    See srv_inbox.h. */
#include "srv_inbox.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "pl_log.h"
#include "srv_calib.h"
#include "srv_metrics.h"
#include "srv_parts.h"
#include "srv_round.h"
#include "srv_session.h"
#include "srv_timeline.h"

void
srv_inbox_gradients (srv_t *self, proto_msg_t *grad)
{
    if (!grad) {
        pl_log_error ("server: a worker could not build GRADIENTS");
        self->rc = 1;
        self->done = true;
        return;
    }
    const proto_header_t *h = proto_msg_header (grad);
    const proto_loss_t *l = proto_msg_loss (grad);
    srv_device_t *d = &self->dev[h->device_id];
    if (!isfinite (l->loss)) {
        //  The device's replica diverged: its gradients are not sent (the
        //  device would train on them) and it leaves the run; the others'
        //  replicas are averaged without it.
        if (d->active) {
            char why[160];
            snprintf (why, sizeof why, "training diverged: the server's loss on its "
                      "micro-batch %u of epoch %u, iteration %u is %g", h->micro_batch,
                      h->epoch, h->iteration, (double) l->loss);
            srv_drop_later (d, PROTO_ERR_DIVERGED, true, why);
        }
        proto_msg_destroy (&grad);
        return;
    }
    self->loss_sum += l->loss;
    self->correct += l->correct;
    self->samples_seen += l->count;
    if (proto_msg_is_last (grad))
        self->iterations++;
    if (!d->active) {
        proto_msg_destroy (&grad);      //  for a session that was dropped
        return;
    }
    d->last_seen = pl_monotonic ();     //  its silence counts from its work's return
    d->trained += l->count;
    //  The gradients leave now; srv_link_spans ends the span where the
    //  device starts their backward.
    srv_timeline_link (self, h->device_id, "downlink", h);
    char why[NN_ERR_SIZE];
    uint64_t round = (uint64_t) self->epoch << 32 | self->round_iter;
    if (srv_wire_encode_gradients (self->wire, (int) h->device_id, round, grad, why,
                                   sizeof why)) {
        //  The replica's gradient cannot travel in the device's codec (int8
        //  and topk refuse a non-finite value, which a finite loss can
        //  still leave): it leaves the run as a diverged one would.
        char text[NN_ERR_SIZE + 64];
        snprintf (text, sizeof text, "its GRADIENTS cannot be encoded: %s", why);
        proto_msg_destroy (&grad);
        srv_drop_later (d, PROTO_ERR_INTERNAL, false, text);
        return;
    }
    srv_send (self, d, &grad);
}

//  ERROR code to d and drop it (0 code: it was answered already).
static void
s_refuse (srv_t *self, srv_device_t *d, const char *text, const char *why)
{
    srv_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE, text);
    srv_drop (self, d, 0, why);
}

//  A PARAMS checked against what the server knows, before any of it is
//  kept: the round's end iteration (a device cannot move the run's round
//  position), a sample count within the device's shard (it weighs the
//  average), finite weights. 0, or -1 with why filled.
static int
s_params_check (const srv_t *self, const srv_device_t *d, const proto_msg_t *msg,
                char *why, size_t why_size)
{
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    const proto_slab_t *slab = proto_msg_slab (msg);
    srv_round_t round = { .epoch_iterations = self->epoch_iterations,
                          .aggregation_frequency = self->cfg->aggregation_frequency,
                          .sl = self->mode == PL_MODE_SL,
                          .round_iter = self->round_iter };
    if (srv_round_check_close (&round, h->iteration, why, why_size))
        return -1;
    if (!srv_round_end (&round))
        //  Unknown iterations: the devices of a round must at least agree.
        for (int i = 0; i < self->devices; i++)
            if (self->dev[i].active && self->dev[i].params_in
            &&  self->dev[i].params_iter != h->iteration) {
                snprintf (why, why_size, "PARAMS closes iteration %u; device %d closed "
                          "this round at %u", h->iteration, i, self->dev[i].params_iter);
                return -1;
            }
    uint64_t cap = self->shard_size[id] > 0 ? (uint64_t) self->shard_size[id]
                 : self->cfg->samples > 0 ? (uint64_t) self->cfg->samples : INT32_MAX;
    if (slab->sample_count == 0 || slab->sample_count > cap) {
        snprintf (why, why_size, "PARAMS claims %" PRIu64 " samples; device %d's shard "
                  "holds %" PRIu64, slab->sample_count, id, cap);
        return -1;
    }
    //  proto checked the count against the run's when every device has one
    //  split point; with several, against this device's here.
    size_t count = srv_parts_device_count (self, id);
    if (slab->count != count) {
        snprintf (why, why_size, "PARAMS of %" PRIu64 " floats; device %d's part at split "
                  "point %d holds %zu", (uint64_t) slab->count, id,
                  srv_parts_split (self, id), count);
        return -1;
    }
    const float *w = proto_msg_tensor_data (msg);
    size_t bad = srv_first_nonfinite (w, count);
    if (bad < count) {
        snprintf (why, why_size, "PARAMS holds non-finite weights (weight %zu is %g)", bad,
                  (double) w[bad]);
        return -1;
    }
    return 0;
}

static void
s_on_params (srv_t *self, srv_device_t *d, proto_msg_t *msg)
{
    const proto_slab_t *slab = proto_msg_slab (msg);
    const proto_header_t *h = proto_msg_header (msg);
    const int id = (int) (d - self->dev);
    if (slab->unit_begin != 0 || slab->unit_end != (uint32_t) srv_parts_split (self, id)
    ||  h->epoch != (uint32_t) self->epoch || d->params_in || !d->active) {
        s_refuse (self, d, "PARAMS for the wrong units, epoch or round", "unexpected PARAMS");
        return;
    }
    //  A device sends PARAMS once all its gradients came back; with its
    //  micro-batches still queued or in a worker the round cannot close.
    if (self->pool && srv_pool_pending (self->pool, d->replica)) {
        s_refuse (self, d, "PARAMS before the gradients of all ACTIVATIONS",
                  "PARAMS with ACTIVATIONS pending");
        return;
    }
    if (self->mode == PL_MODE_SL && (int) (d - self->dev) != self->sl_turn) {
        s_refuse (self, d, "not your turn", "PARAMS out of turn");
        return;
    }
    char why[256];
    if (s_params_check (self, d, msg, why, sizeof why)) {
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    size_t count = srv_parts_device_count (self, id);
    memcpy (d->params, proto_msg_tensor_data (msg), sizeof (float) * count);
    d->samples = slab->sample_count;
    if (self->mode == PL_MODE_FL)
        //  s_params_check: the round [round_iter, iteration) is this one's.
        d->trained += (uint64_t) (h->iteration - self->round_iter) * (uint64_t) self->batch;
    d->params_iter = h->iteration;
    d->params_in = true;
    if (self->mode == PL_MODE_SL)
        //  sl hands the device part on as it is: no averaging.
        memcpy (nn_model_weights (srv_parts_device (self, id)), d->params,
                sizeof (float) * count);
}

//  ACTIVATIONS: the epoch and turn, the device's micro-batch size, at most
//  N in flight, finite values; then queued for its replica. Takes msg.
static void
s_on_activations (srv_t *self, srv_device_t *d, proto_msg_t **msg_p)
{
    proto_msg_t *msg = *msg_p;
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    char text[128];
    if (!self->pool) {                  //  fl: proto's state machine lets none through
        proto_msg_destroy (msg_p);
        s_refuse (self, d, "message type not used by this server", "unexpected message type");
        return;
    }
    if (h->epoch != (uint32_t) self->epoch
    ||  (self->mode == PL_MODE_SL && id != self->sl_turn)) {
        proto_msg_destroy (msg_p);
        s_refuse (self, d, "ACTIVATIONS for another epoch or out of turn",
                  "unexpected ACTIVATIONS");
        return;
    }
    //  proto checked the boundary shape when every device has one split
    //  point; with several, this device's is checked here.
    const proto_tensor_desc_t *td = proto_msg_tensor (msg);
    nn_shape_t bs = nn_model_output_shape (srv_parts_device (self, id));
    if (td->rank != 4 || td->dims[1] != (uint32_t) bs.h || td->dims[2] != (uint32_t) bs.w
    ||  td->dims[3] != (uint32_t) bs.c) {
        snprintf (text, sizeof text, "ACTIVATIONS of another shape than split point %d's "
                  "boundary (%dx%dx%d)", srv_parts_split (self, id), bs.h, bs.w, bs.c);
        proto_msg_destroy (msg_p);
        srv_drop (self, d, PROTO_ERR_STATE, text);
        return;
    }
    //  A device has at most N micro-batches out before it waits for their
    //  gradients; more is a broken or hostile peer.
    if (proto_msg_tensor (msg)->dims[0] != (uint32_t) (self->batch / d->micro)) {
        snprintf (text, sizeof text, "ACTIVATIONS of %u samples; this device's plan "
                  "has micro-batches of %d", proto_msg_tensor (msg)->dims[0],
                  self->batch / d->micro);
        proto_msg_destroy (msg_p);
        s_refuse (self, d, text, text);
        return;
    }
    if (srv_pool_queued (self->pool, d->replica) >= (size_t) d->micro) {
        proto_msg_destroy (msg_p);
        s_refuse (self, d, "more ACTIVATIONS in flight than micro-batches",
                  "ACTIVATIONS flood");
        return;
    }
    //  A replica trained on non-finite activations turns non-finite, and
    //  the average of the replicas with it (labels are checked against the
    //  classes by proto).
    if (srv_wire_check_activations (self->wire, id, msg, text, sizeof text)) {
        proto_msg_destroy (msg_p);
        srv_drop (self, d, PROTO_ERR_STATE, text);
        return;
    }
    size_t acount = proto_msg_tensor_count (msg);
    size_t bad = srv_first_nonfinite (proto_msg_tensor_data (msg), acount);
    if (bad < acount) {
        snprintf (text, sizeof text, "ACTIVATIONS hold non-finite values (value "
                  "%zu is %g)", bad, (double) proto_msg_tensor_data (msg)[bad]);
        proto_msg_destroy (msg_p);
        srv_drop (self, d, PROTO_ERR_STATE, text);
        return;
    }
    srv_planner_on_activations (self->planner, id, msg);
    //  Arrived now; srv_link_spans starts the span where the device's
    //  forward of this micro-batch ended.
    srv_timeline_link (self, (uint32_t) id, "uplink", h);
    //  The worker routes GRADIENTS by the header's device id.
    proto_msg_set_route (msg, (uint32_t) id, h->epoch, h->iteration, h->micro_batch);
    srv_pool_enqueue (self->pool, d->replica, msg_p);
}

//  PROFILE or PROBE for the planner: the next PROBE goes out, or the
//  device is dropped for breaking the protocol.
static void
s_on_planning (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    const int id = (int) (d - self->dev);
    proto_msg_t *next = NULL;
    char why[160];
    int rc = proto_msg_type (msg) == PROTO_MSG_PROFILE
           ? srv_planner_on_profile (self->planner, id, msg, self->started, self->epoch,
                                     &next, why, sizeof why)
           : srv_planner_on_probe (self->planner, id, msg, self->epoch, &next, why,
                                   sizeof why);
    if (rc)
        srv_drop (self, d, PROTO_ERR_STATE, why);
    else
    if (next)
        srv_send (self, d, &next);
}

//  A message from a peer with no session: HELLO, or an ERROR back.
static void
s_on_stranger (srv_t *self, proto_msg_t *msg, const uint8_t *rid, size_t rid_len,
               const proto_peer_t *peer)
{
    int type = proto_msg_type (msg);
    if (type == PROTO_MSG_HELLO)
        srv_session_hello (self, msg, rid, rid_len, peer);
    else {
        pl_log_warn ("server: %s from an unknown peer; answered ERROR",
                     proto_type_name (type));
        srv_send_error_to (self, rid, rid_len, PROTO_ERR_STATE, "send HELLO first");
    }
    if (!srv_find (self, rid, rid_len)) {
        //  Refused or out of order.
        if (srv_abuse_note (self->abuse, peer->address, pl_monotonic ()))
            pl_log_warn ("server: rate-limiting %s: %d protocol errors in %.0f s; ignoring "
                         "its unjoined connections for %.0f s", peer->address,
                         SRV_ABUSE_LIMIT + 1, SRV_ABUSE_WINDOW_S, SRV_ABUSE_BLOCK_S);
        srv_metrics_note_refused (self->metrics, SRV_REFUSED_HELLO);
    }
}

static void
s_on_device (srv_t *self, srv_device_t *d, proto_msg_t **msg_p)
{
    proto_msg_t *msg = *msg_p;
    int type = proto_msg_type (msg);
    if (!proto_msg_allowed (self->mode, d->state, msg, PROTO_UP)) {
        char text[128];
        snprintf (text, sizeof text, "%s not allowed in this state", proto_type_name (type));
        s_refuse (self, d, text, text);
        return;
    }
    //  A device is ready to train once it has loaded its shard and built
    //  its contexts: it says so with a HEARTBEAT, and any training message
    //  implies it. The first epoch's clock starts at the first ready
    //  device, so the devices' loading is not epoch time (as the trainer's
    //  wall_s leaves out its own loading).
    if (!self->started && type == PROTO_MSG_HEARTBEAT)
        d->ready = true;
    if (self->clock_wait && self->started
    &&  (type == PROTO_MSG_HEARTBEAT || type == PROTO_MSG_ACTIVATIONS
    ||   type == PROTO_MSG_PARAMS || type == PROTO_MSG_STATS || type == PROTO_MSG_EVENTS)) {
        self->epoch_start = pl_monotonic ();
        self->clock_wait = false;
    }
    switch (type) {
        case PROTO_MSG_ACTIVATIONS:
            if (proto_msg_is_calibrate (msg))
                srv_calib_on_activations (self, d, msg);
            else
            if (self->calibrating)
                s_refuse (self, d, "ACTIVATIONS during the BN calibration",
                          "unexpected ACTIVATIONS");
            else
                s_on_activations (self, d, msg_p);
            break;
        case PROTO_MSG_PARAMS:
            if (proto_msg_is_calibrate (msg))
                srv_calib_on_params (self, d, msg);
            else
            if (self->calibrating)
                s_refuse (self, d, "PARAMS during the BN calibration", "unexpected PARAMS");
            else
                s_on_params (self, d, msg);
            break;
        case PROTO_MSG_STATS:
            d->stats = *proto_msg_stats (msg);
            d->stats_in = d->reported = true;
            break;
        case PROTO_MSG_EVENTS: {
            char why[256];
            if (srv_timeline_device_events (self, d, msg, why, sizeof why))
                s_refuse (self, d, why, why);
            break;
        }
        case PROTO_MSG_HEARTBEAT:
            break;
        case PROTO_MSG_PROFILE:
        case PROTO_MSG_PROBE:
            s_on_planning (self, d, msg);
            break;
        case PROTO_MSG_BYE:
            srv_drop (self, d, 0, "left (BYE)");
            break;
        case PROTO_MSG_ERROR: {
            char why[PROTO_TEXT_MAX + 64];
            bool diverged = proto_msg_error_code (msg) == PROTO_ERR_DIVERGED;
            snprintf (why, sizeof why, "%s: %s", diverged ? "training diverged on the device"
                                                          : "sent ERROR",
                      proto_msg_error_text (msg));
            self->diverging = diverged;
            srv_drop (self, d, 0, why);
            break;
        }
        default:
            s_refuse (self, d, "message type not used by this server",
                      "unexpected message type");
            break;
    }
}

void
srv_inbox_router (srv_t *self)
{
    proto_msg_t *msg = NULL;
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len = 0;
    char err[NN_ERR_SIZE];
    proto_peer_t peer;
    int rc = proto_msg_recv_from_peer (&msg, self->rh, rid, &rid_len, &peer, &self->limits,
                                       err, sizeof err);
    if (rc == PROTO_E_AGAIN)
        return;
    if (rc == PROTO_E_SOCKET) {
        pl_log_error ("server: receive failed: %s", zmq_strerror (errno));
        return;
    }
    srv_device_t *d = rid_len ? srv_find (self, rid, rid_len) : NULL;
    double now = pl_monotonic ();
    if (!d && srv_abuse_blocked (self->abuse, peer.address, now)) {
        proto_msg_destroy (&msg);
        return;
    }
    if (rc != 0) {
        if (!d) {
            if (srv_abuse_note (self->abuse, peer.address, now))
                pl_log_warn ("server: rate-limiting %s: %d protocol errors in %.0f s; "
                             "ignoring its unjoined connections for %.0f s", peer.address,
                             SRV_ABUSE_LIMIT + 1, SRV_ABUSE_WINDOW_S, SRV_ABUSE_BLOCK_S);
            srv_metrics_note_refused (self->metrics, SRV_REFUSED_MALFORMED);
        }
        if (d)
            pl_log_warn ("server: malformed message from device %d: %s",
                         (int) (d - self->dev), err);
        else
            pl_log_warn ("server: malformed message from an unknown peer: %s", err);
        if (rid_len)
            srv_send_error_to (self, rid, rid_len,
                               rc == PROTO_E_VERSION ? PROTO_ERR_VERSION
                                                     : PROTO_ERR_MALFORMED, err);
        if (d) {
            char why[NN_ERR_SIZE + 32];
            snprintf (why, sizeof why, "sent a malformed message (%s)", err);
            srv_drop (self, d, 0, why);
        }
        return;
    }
    if (d) {
        d->last_seen = now;
        s_on_device (self, d, &msg);
    }
    else
        s_on_stranger (self, msg, rid, rid_len, &peer);
    proto_msg_destroy (&msg);
}

void
srv_inbox_deadlines (srv_t *self)
{
    char why[160];
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined
        &&  srv_planner_overdue (self->planner, i, self->cfg->device_timeout_s, why,
                                 sizeof why))
            srv_drop (self, &self->dev[i], PROTO_ERR_TIMEOUT, why);
    if (!self->started || self->done || self->replanning)
        return;
    double now = pl_monotonic ();
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->active || d->params_in || (self->calibrating && d->cal_in))
            continue;
        if (self->mode == PL_MODE_SL && i != self->sl_turn && !self->calibrating)
            continue;
        //  Waiting for the server's own work is not silence.
        if (self->pool && srv_pool_pending (self->pool, d->replica))
            continue;
        if (self->mode != PL_MODE_FL && now - d->last_seen > self->cfg->device_timeout_s) {
            snprintf (why, sizeof why, "silent for %.1f s (device_timeout_s %g)",
                      now - d->last_seen, self->cfg->device_timeout_s);
            srv_drop (self, d, PROTO_ERR_TIMEOUT, why);
        }
        else
        if (now - self->round_start > self->cfg->round_timeout_s) {
            snprintf (why, sizeof why, "round not finished after %.1f s (round_timeout_s %g)",
                      now - self->round_start, self->cfg->round_timeout_s);
            srv_drop (self, d, PROTO_ERR_TIMEOUT, why);
        }
        //  Too few left: the step function ends the run and tells the rest.
        if (!d->active && srv_session_active_count (self) < self->cfg->min_devices)
            return;
    }
}
