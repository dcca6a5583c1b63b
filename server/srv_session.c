/*  srv_session.c: device sessions and slots. See srv_session.h.

    With CurveZMQ every message carries its sender's key (libzmq's
    "User-Id", which zauth sets to the client's public key), and a slot is
    held by one key: a HELLO from a key that already holds a slot replaces
    that slot's session at once, so a device restarted after a crash has
    its slot back and nothing waits for the dead connection. A key the
    allow-list binds to a device id (docs/deploy.md) takes that slot and no
    other, and no other key takes it. With --insecure there are no keys: a
    HELLO asking for a joined device id takes that slot only when the old
    connection is gone, with a warning (s_session_replace).
*/
#include "srv_session.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "pl_log.h"
#include "pl_timeline.h"
#include "srv_metrics.h"
#include "srv_parts.h"

//  Send queue per device (ZMQ_SNDHWM, in messages). A device that reads has
//  at most its N micro-batches' GRADIENTS outstanding, plus a MODEL, a PLAN,
//  a probe and HEARTBEATs: twice the largest N any plan can give, plus
//  slack. libzmq's default (1000) let a device that stopped reading hold
//  ~630 MB of the server's memory.
int
srv_session_send_hwm (const srv_t *self)
{
    int n = srv_planner_auto_micro (self->planner) ? self->batch : self->assign.micro[0];
    if (n < 1)
        n = 1;
    if (n > 256)
        n = 256;
    return 2 * n + 16;
}

void
srv_drop_later (srv_device_t *d, uint32_t code, bool diverged, const char *why)
{
    if (d->drop_pending)
        return;
    d->drop_pending = true;
    d->drop_diverged = diverged;
    d->drop_code = code;
    snprintf (d->drop_why, sizeof d->drop_why, "%s", why);
}

//  The ROUTER never blocks (ZMQ_SNDTIMEO 0, ZMQ_ROUTER_MANDATORY): a device
//  whose send queue is full (it stopped reading) or whose connection is
//  gone fails the send and is dropped, instead of growing the server's
//  memory.
void
srv_send (srv_t *self, srv_device_t *d, proto_msg_t **msg_p)
{
    int type = proto_msg_type (*msg_p);
    if (d->drop_pending) {
        proto_msg_destroy (msg_p);
        return;
    }
    //  A device takes frames up to the protocol's cap (its DEALER's
    //  ZMQ_MAXMSGSIZE, PROTOCOL.md): a larger one would close its
    //  connection without a word and leave it waiting for ever.
    char err[128];
    if (proto_msg_send_to_capped (msg_p, self->rh, d->rid, d->rid_len,
                                  PROTO_DEFAULT_MAX_FRAME_BYTES, err, sizeof err)) {
        int e = errno;
        proto_msg_destroy (msg_p);
        char why[sizeof d->drop_why];
        uint32_t code = 0;
        if (e == EAGAIN)
            snprintf (why, sizeof why, "not reading: its send queue is full (%d messages, "
                      "ZMQ_SNDHWM) at a %s", srv_session_send_hwm (self),
                      proto_type_name (type));
        else
        if (e == EHOSTUNREACH)
            snprintf (why, sizeof why, "its connection is gone (sending %s)",
                      proto_type_name (type));
        else {
            //  The device would wait for this message for ever: tell it
            //  why, and go on without it.
            pl_log_error ("server: device %d: cannot send: %s", (int) (d - self->dev), err);
            snprintf (why, sizeof why, "the server cannot send it: %s", err);
            code = PROTO_ERR_INTERNAL;
        }
        srv_drop_later (d, code, false, why);
        return;
    }
    d->state = proto_state_next (d->state, type, PROTO_DOWN);
}

int
srv_send_error_to (srv_t *self, const uint8_t *rid, size_t rid_len, uint32_t code,
                   const char *text)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ERROR);
    char clipped[PROTO_TEXT_MAX];
    snprintf (clipped, sizeof clipped, "%s", text);
    proto_msg_set_error (msg, code, clipped);
    if (proto_msg_send_to (&msg, self->rh, rid, rid_len) == 0)
        return 0;
    int e = errno;
    proto_msg_destroy (&msg);
    errno = e;
    return -1;
}

srv_device_t *
srv_find (srv_t *self, const uint8_t *rid, size_t rid_len)
{
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined && self->dev[i].rid_len == rid_len
        &&  memcmp (self->dev[i].rid, rid, rid_len) == 0)
            return &self->dev[i];
    return NULL;
}

//  When the devices left because their training diverged, the run ends
//  with exit status SRV_EXIT_DIVERGED and says so; the newest checkpoint
//  holds the last finite model (srv_step.c never writes a non-finite one).
void
srv_session_abort_all (srv_t *self, const char *why)
{
    bool diverged = self->diverged > 0;
    if (diverged)
        pl_log_error ("server: training diverged (a non-finite loss on %d device(s)) and "
                      "%s; the run stops. The newest checkpoint in %s/checkpoints holds "
                      "the last finite model; lower learning_rate and start again",
                      self->diverged, why, self->results);
    else
        pl_log_error ("server: %s; aborting the run", why);
    //  The run ends here: wait up to a second for room in a device's queue
    //  rather than drop the notice (a device that misses it waits out its
    //  --timeout).
    zsock_set_sndtimeo (self->router, 1000);
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            if (srv_send_error_to (self, self->dev[i].rid, self->dev[i].rid_len,
                                   diverged ? PROTO_ERR_DIVERGED : PROTO_ERR_INTERNAL,
                                   diverged ? "run stopped: training diverged"
                                            : "run aborted: too few devices left"))
                pl_log_warn ("server: could not tell device %d that the run stops (%s)",
                             i, zmq_strerror (errno));
            self->dev[i].joined = self->dev[i].active = false;
        }
    self->rc = diverged ? SRV_EXIT_DIVERGED : 1;
    self->done = true;
}

int
srv_session_active_count (const srv_t *self)
{
    int n = 0;
    for (int i = 0; i < self->devices; i++)
        n += self->dev[i].active;
    return n;
}

void
srv_drop (srv_t *self, srv_device_t *d, uint32_t code, const char *why)
{
    int id = (int) (d - self->dev);
    pl_log_warn ("server: device %d dropped: %s", id, why);
    srv_metrics_note_drop (self->metrics, id);
    if (self->diverging) {
        self->diverged++;
        self->diverging = false;
    }
    if (d->joined) {
        if (code) {
            char text[PROTO_TEXT_MAX];
            snprintf (text, sizeof text, "dropped from the run: %s", why);
            srv_send_error_to (self, d->rid, d->rid_len, code, text);
        }
        self->joined--;
    }
    d->joined = d->active = false;
    d->params_in = d->stats_in = false;
    d->cal_split = 0;
    d->drop_pending = false;
    if (self->pool)
        srv_pool_discard (self->pool, d->replica);
    srv_planner_on_drop (self->planner, id);
}

bool
srv_session_drop_pending (srv_t *self)
{
    bool dropped = false;
    for (int i = 0; i < self->devices && !self->done; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->drop_pending)
            continue;
        d->drop_pending = false;
        if (d->joined) {
            char why[sizeof d->drop_why];
            snprintf (why, sizeof why, "%s", d->drop_why);
            self->diverging = d->drop_diverged;
            srv_drop (self, d, d->drop_code, why);
            dropped = true;
        }
    }
    return dropped;
}

//  ---------------------------------------------------------------------
//  Slots

//  May key take slot i now? It is free, and the allow-list binds it to no
//  other key.
static bool
s_slot_free_for (const srv_t *self, int i, const char *key)
{
    if (self->dev[i].joined)
        return false;
    const char *bound = self->curve ? pl_curve_device_key (self->curve, i) : NULL;
    return !bound || strcmp (bound, key) == 0;
}

//  The slot a HELLO from key ("" with --insecure) asking for device req (-1:
//  any) takes, with *replace set when a live session holds it; -1 with the
//  reason in why.
static int
s_slot_for (const srv_t *self, const char *key, int req, bool *replace, char *why,
            size_t why_size)
{
    *replace = false;
    if (req >= self->devices)
        req = -1;                       //  as before: any free slot
    if (self->curve) {
        if (!key[0] || !pl_curve_key_allowed (self->curve, key)) {
            snprintf (why, why_size, "this device's key is not in the allow-list");
            return -1;
        }
        int bound = pl_curve_key_device (self->curve, key);
        if (bound >= self->devices || (bound >= 0 && req >= 0 && req != bound)) {
            snprintf (why, why_size, "the allow-list makes this key device %d; it asked for "
                      "device %d of %d", bound, req, self->devices);
            return -1;
        }
        if (bound >= 0) {
            *replace = self->dev[bound].joined;
            return bound;
        }
        for (int i = 0; i < self->devices; i++)
            if (self->dev[i].joined && strcmp (self->dev[i].key, key) == 0) {
                *replace = true;
                return i;
            }
    }
    else
    if (req >= 0 && self->dev[req].joined) {
        *replace = true;
        return req;
    }
    //  A free slot: the one asked for, else the one this key held last,
    //  else one no key held yet, else any.
    if (req >= 0 && s_slot_free_for (self, req, key))
        return req;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < self->devices; i++) {
            if (!s_slot_free_for (self, i, key))
                continue;
            bool last = key[0] && strcmp (self->dev[i].key, key) == 0;
            if (pass == 2 || (pass == 0 && last) || (pass == 1 && !self->dev[i].key[0]))
                return i;
        }
    snprintf (why, why_size, "run is full");
    return -1;
}

//  Is d's connection still there? A HEARTBEAT to a connection libzmq has
//  closed fails (ZMQ_ROUTER_MANDATORY); a process that died has had its
//  connection closed by its kernel.
static bool
s_session_alive (srv_t *self, srv_device_t *d)
{
    if (d->closed)                      //  libzmq said so (srv_session_transport)
        return false;
    //  A send processes the socket's pending commands (a closed peer's
    //  pipe termination) at most once a millisecond; the HELLO's receive
    //  may have just done so. ZMQ_EVENTS processes them always.
    int events = 0;
    size_t size = sizeof events;
    zmq_getsockopt (self->rh, ZMQ_EVENTS, &events, &size);
    proto_msg_t *hb = proto_msg_new (PROTO_MSG_HEARTBEAT);
    if (proto_msg_send_to (&hb, self->rh, d->rid, d->rid_len) == 0)
        return true;
    int e = errno;
    proto_msg_destroy (&hb);
    return e != EHOSTUNREACH;
}

//  A new session takes over d: the old one is dropped (told why, if it
//  can still hear) as a device that left would be. With CurveZMQ the key
//  proves it is the same device. With --insecure nothing does: a slot is
//  only taken over when its connection is gone (a crashed device's), or
//  anyone could push a device out; one whose connection lingers is freed
//  by the deadlines. 0; -1 when that drop leaves too few devices for the
//  run to go on (the step function ends it); -2 when the old session
//  stays (why says so).
static int
s_session_replace (srv_t *self, srv_device_t *d, char *why, size_t why_size)
{
    int id = (int) (d - self->dev);
    bool was_active = d->active;
    if (self->curve)
        srv_drop (self, d, PROTO_ERR_REFUSED, "replaced by a new connection with its key");
    else
    if (s_session_alive (self, d)) {
        snprintf (why, why_size, "device %d is taken by a live connection (--insecure: no "
                  "key shows this is the same device)", id);
        return -2;
    }
    else {
        pl_log_warn ("server: --insecure: device %d's connection is gone; a new HELLO asking "
                     "for its device id takes the slot", id);
        srv_drop (self, d, 0, "its connection is gone (a new connection asks for its id)");
    }
    if (self->started && was_active
    &&  srv_session_active_count (self) < self->cfg->min_devices) {
        snprintf (why, why_size, "the run has ended");
        return -1;
    }
    return 0;
}

int
srv_session_drop_gone (srv_t *self)
{
    int dropped = 0;
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined)
            continue;
        if (d->drop_pending) {
            char why[sizeof d->drop_why];
            snprintf (why, sizeof why, "%s", d->drop_why);
            srv_drop (self, d, d->drop_code, why);
            dropped++;
        }
        else
        if (!s_session_alive (self, d)) {
            srv_drop (self, d, 0, "its connection is gone (before the start)");
            dropped++;
        }
    }
    return dropped;
}

void
srv_session_drop_revoked (srv_t *self)
{
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined || !d->key[0])
            continue;
        int bound = pl_curve_key_device (self->curve, d->key);
        char why[160];
        if (!pl_curve_key_allowed (self->curve, d->key))
            snprintf (why, sizeof why, "its key was removed from the allow-list (SIGHUP)");
        else
        if (bound >= 0 && bound != i)
            snprintf (why, sizeof why, "the allow-list now makes its key device %d (SIGHUP)",
                      bound);
        else
            continue;
        srv_drop_later (d, PROTO_ERR_REFUSED, false, why);
    }
}

//  What WELCOME and PLAN tell device id: the current assignment.
static proto_assign_t
s_assignment (const srv_t *self, int id)
{
    proto_assign_t plan = { .device_id = (uint32_t) id,
                          .split_point = self->mode == PL_MODE_FL
                                       ? 0 : (uint32_t) self->assign.split[id],
                          .micro_batches = (uint32_t) self->assign.micro[id],
                          .batch_size = (uint32_t) self->batch,
                          .devices = (uint32_t) self->devices,
                          .mode = (uint32_t) self->mode, .shard_begin = 0,
                          .shard_count = 0, .seed = self->cfg->seed,
                          .origin_s = self->origin };
    srv_wire_assign (self->wire, id, &plan);
    return plan;
}

void
srv_session_send_plan (srv_t *self, int id)
{
    srv_device_t *d = &self->dev[id];
    if (!d->joined)
        return;
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
    proto_assign_t plan = s_assignment (self, id);
    proto_msg_set_route (m, (uint32_t) id, (uint32_t) self->epoch, 0, 0);
    proto_msg_set_assign (m, &plan);
    d->micro = self->assign.micro[id];
    srv_send (self, d, &m);
}

//  The largest frame the ROUTER takes from a device (its ZMQ_MAXMSGSIZE
//  less CurveZMQ's overhead, srv_setup.c), as WELCOME tells it.
static size_t
s_frame_cap (const srv_t *self)
{
    size_t cap = self->limits.max_frame_bytes;
    return cap < PROTO_HEADER_SIZE ? PROTO_HEADER_SIZE
         : cap > PROTO_DEFAULT_MAX_FRAME_BYTES ? PROTO_DEFAULT_MAX_FRAME_BYTES : cap;
}

//  A DISCONNECTED names a connection by its file descriptor, which the
//  kernel gives to the next connection once libzmq has closed it (after
//  the event). So an event marks only the session that holds that
//  descriptor, and srv_session_hello reads every event up to its HELLO
//  (srv_monitor_sync) before a new session takes one: an old connection's
//  close never reaches a device that reconnected on the same descriptor.
int
srv_session_transport (srv_t *self)
{
    int marked = 0;
    srv_monitor_event_t ev;
    while (self->monitor && srv_monitor_next (self->monitor, &ev) == 1)
        for (int i = 0; i < self->devices; i++) {
            srv_device_t *d = &self->dev[i];
            if (!d->joined || d->fd < 0 || d->fd != ev.fd)
                continue;
            d->fd = -1;
            d->closed = true;
            marked++;
        }
    return marked;
}

//  srv_session_transport after the monitor's round trip (srv_session.h).
bool
srv_session_transport_synced (srv_t *self)
{
    if (self->monitor)
        srv_monitor_sync (self->monitor);
    srv_session_transport (self);
    return self->monitor && srv_monitor_synced (self->monitor);
}

//  libzmq queues what a connection sent in the ROUTER before it reports
//  the connection closed (the engine's messages are flushed before its
//  DISCONNECTED, except those of the read that failed), and ZMQ_EVENTS
//  processes its pending commands: a ROUTER with nothing to read has
//  given the reactor all of a closed connection's messages. Until then
//  the device's BYE or last PARAMS may still come; a failed send (a
//  HEARTBEAT within heartbeat_s) bounds the wait when the ROUTER stays
//  busy.
int
srv_session_drop_closed (srv_t *self)
{
    int dropped = 0;
    bool router_empty = false;
    for (int i = 0; i < self->devices && !self->done; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined || !d->closed)
            continue;
        if (!router_empty && (zsock_events (self->router) & ZMQ_POLLIN))
            return dropped;
        router_empty = true;
        //  libzmq does not say why: the cap is named so an operator can
        //  tell a device that sent too much from one that went away.
        size_t cap = s_frame_cap (self);
        pl_log_warn ("server: device %d (%s, key %s): libzmq closed its connection: "
                     "a frame over the receive cap of %zu bytes, or the peer closed "
                     "the connection or went silent past heartbeat_timeout_s", i,
                     d->name, d->key[0] ? d->key : "none, --insecure", cap);
        char why[sizeof d->drop_why];
        snprintf (why, sizeof why, "libzmq closed its connection (a frame over the "
                  "receive cap of %zu bytes, or the peer closed it)", cap);
        srv_drop (self, d, 0, why);
        dropped++;
    }
    return dropped;
}

void
srv_session_hello (srv_t *self, const proto_msg_t *msg, const uint8_t *rid, size_t rid_len,
                   const proto_peer_t *peer)
{
    const char *key = peer->user_id;
    const proto_hello_t *hello = proto_msg_hello (msg);
    //  The connections closed before this one opened are marked first (see
    //  srv_session_transport); one may be the slot's own last session.
    //  They are dropped by the loop, after what they sent before.
    //  Without every event up to this HELLO, a close read later may be an
    //  older connection's on the same descriptor: the session then keeps
    //  no descriptor (a send that fails or the deadlines drop it).
    bool synced = srv_session_transport_synced (self);
    //  A ROUTER still delivers what a connection sent before libzmq closed
    //  it: a session made now would hold a dead descriptor and the slot
    //  until a send to it failed (WELCOME, or a HEARTBEAT within
    //  heartbeat_s, once libzmq has removed the routing id); with
    //  --insecure it could refuse the device's real reconnect meanwhile.
    if (synced && peer->fd >= 0 && srv_monitor_closed (self->monitor, peer->fd)) {
        pl_log_info ("server: a HELLO (device %d, %s) from a connection libzmq has already "
                     "closed; ignored", hello->requested_device_id, hello->name);
        return;
    }
    uint32_t need = self->mode == PL_MODE_FL ? PROTO_CAP_FL : PROTO_CAP_SPLIT;
    if (!(hello->capabilities & need)) {
        srv_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED,
                           "capability missing for this run's mode");
        return;
    }
    //  Before the start any free slot; once running, a slot whose device was
    //  dropped (a restarted or reconnecting device rejoins there).
    char why[160];
    bool replace;
    int id = s_slot_for (self, key, hello->requested_device_id, &replace, why, sizeof why);
    if (id < 0) {
        pl_log_warn ("server: HELLO (%s) refused: %s", hello->name, why);
        srv_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED, why);
        return;
    }
    srv_device_t *d = &self->dev[id];
    int replaced = replace ? s_session_replace (self, d, why, sizeof why) : 0;
    if (replaced) {
        if (replaced == -2)
            pl_log_warn ("server: HELLO (%s) refused: %s", hello->name, why);
        srv_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED, why);
        return;
    }
    srv_wire_reset (self->wire, id);    //  a new session: a new encoder
    float *params = d->params;          //  kept across sessions of the slot
    uint64_t trained = d->trained;      //  the slot's work this epoch, for the summary
    memset (d, 0, sizeof *d);
    d->params = params;
    d->trained = trained;
    //  An allowed key is PL_CURVE_KEY_TEXT characters (s_slot_for).
    size_t key_len = strnlen (key, PL_CURVE_KEY_TEXT);
    memcpy (d->key, key, key_len);
    d->key[key_len] = 0;
    d->joined = true;
    d->last_seen = pl_monotonic ();
    memcpy (d->rid, rid, rid_len);
    d->rid_len = rid_len;
    d->fd = synced ? peer->fd : -1;
    snprintf (d->name, sizeof d->name, "%s", hello->name);
    d->state = proto_state_next (PROTO_STATE_CONNECTING, PROTO_MSG_HELLO, PROTO_UP);
    d->replica = self->mode == PL_MODE_SL ? 0 : id;
    if (!d->params)
        d->params = nn_malloc (sizeof (float) * srv_parts_device_count (self, id));
    self->joined++;
    if (!self->started)
        self->last_join = d->last_seen;
    srv_planner_on_join (self->planner, id, self->started);
    d->micro = self->assign.micro[id];

    proto_msg_t *w = proto_msg_new (PROTO_MSG_WELCOME);
    proto_msg_set_route (w, (uint32_t) id, 0, 0, 0);
    cJSON *json = pl_config_to_json (self->cfg);
    char *text = json ? cJSON_PrintUnformatted (json) : NULL;
    cJSON_Delete (json);
    if (!text || proto_msg_set_config (w, text, strlen (text))) {
        pl_log_error ("server: cannot encode the config for WELCOME");
        free (text);
        proto_msg_destroy (&w);
        srv_drop (self, d, PROTO_ERR_STATE, "internal error");
        return;
    }
    free (text);
    proto_assign_t plan = s_assignment (self, id);
    proto_msg_set_assign (w, &plan);
    //  What the ROUTER's ZMQ_MAXMSGSIZE lets through (srv_setup.c), so the
    //  device refuses a larger frame itself, saying so.
    proto_msg_set_frame_cap (w, s_frame_cap (self));
    proto_msg_set_profile_request (w, srv_planner_profile_wanted (self->planner,
                                                                  self->started));
    srv_send (self, d, &w);
    if (self->started)
        pl_log_info ("server: device %d joined the running run in epoch %d (%s); it takes "
                     "part from the next aggregation point", id, self->epoch, hello->name);
    else
        pl_log_info ("server: device %d joined (%s)", id, hello->name);
}

void
srv_session_heartbeat (srv_t *self)
{
    double now = pl_monotonic ();
    if (now - self->last_heartbeat < self->cfg->heartbeat_s)
        return;
    self->last_heartbeat = now;
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            proto_msg_t *hb = proto_msg_new (PROTO_MSG_HEARTBEAT);
            srv_send (self, &self->dev[i], &hb);
        }
}
