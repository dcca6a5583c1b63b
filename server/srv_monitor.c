/*  srv_monitor.c: the ROUTER's libzmq socket monitor, read by a thread of
    its own. See srv_monitor.h. */
#include "srv_monitor.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "pl_clock.h"

#define S_PIPE_HWM      10000   //  events the reactor may leave unread
#define S_SYNC_WAIT_S   2.0     //  srv_monitor_next's longest wait for a sync answer
#define S_FD_MAX        (1 << 20)       //  descriptors above are not tracked

//  On the pipe, thread to reactor. seq numbers the opens and closes the
//  thread saw (forwarded or dropped), so the reactor notices a gap; a
//  SYNCED carries the token of the request it answers and the seq the next
//  event will have. Reactor to thread: a uint64_t token.
typedef enum { S_OPENED = 1, S_CLOSED = 2, S_SYNCED = 3 } s_kind_t;
typedef struct {
    uint32_t kind;
    int32_t fd;
    uint64_t seq;
    uint64_t token;
} s_wire_t;

enum { S_UNKNOWN = 0, S_OPEN = 1, S_SHUT = 2 };    //  what the reactor knows of a fd

struct _srv_monitor_t {
    void *watched;              //  the monitored socket (libzmq handle)
    bool watching;              //  zmq_socket_monitor is on
    //  The thread's.
    zsock_t *events;            //  PAIR connected to libzmq's monitor endpoint
    zsock_t *out;               //  its end of the pipe
    uint64_t seq;
    //  Both.
    pthread_t thread;
    bool running;
    atomic_bool stop;
    atomic_long refused, dropped;
    //  The reactor's.
    zsock_t *in;                //  its end of the pipe
    uint64_t next_seq;          //  the seq it expects next
    uint64_t token;             //  of the last sync asked
    bool sync_wait, synced;
    double sync_deadline;
    uint8_t *fds;               //  S_UNKNOWN/S_OPEN/S_SHUT by descriptor
    size_t fds_size;
};

//  ---------------------------------------------------------------------
//  The thread.

static void
s_forward (srv_monitor_t *self, s_kind_t kind, int fd)
{
    s_wire_t w = { kind, fd, self->seq++, 0 };
    if (zmq_send (zsock_resolve (self->out), &w, sizeof w, ZMQ_DONTWAIT) < 0)
        atomic_fetch_add (&self->dropped, 1);
}

//  Every event libzmq wrote before the call: ZMQ_EVENTS processes the
//  socket's pending commands (the ones that make written events readable)
//  always; a receive without waiting at most once a millisecond.
static void
s_drain (srv_monitor_t *self)
{
    void *sock = zsock_resolve (self->events);
    int ready = 0;
    size_t size = sizeof ready;
    zmq_getsockopt (sock, ZMQ_EVENTS, &ready, &size);
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&frame);
            return;
        }
        //  libzmq's event: frame 1 is u16 event and u32 value (host order),
        //  frame 2 the endpoint, which says nothing about the peer.
        uint16_t what = 0;
        uint32_t value = 0;
        bool ok = zmq_msg_size (&frame) == 6;
        if (ok) {
            memcpy (&what, zmq_msg_data (&frame), 2);
            memcpy (&value, (const uint8_t *) zmq_msg_data (&frame) + 2, 4);
        }
        bool more = zmq_msg_more (&frame);
        zmq_msg_close (&frame);
        while (more) {
            zmq_msg_init (&frame);
            more = zmq_msg_recv (&frame, sock, 0) >= 0 && zmq_msg_more (&frame);
            zmq_msg_close (&frame);
        }
        if (!ok)
            continue;
        //  What the metrics counted as CURVE refusals before this thread
        //  also served the reactor: every failed handshake.
        if (what & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
            atomic_fetch_add (&self->refused, 1);
        else
        if (what == ZMQ_EVENT_ACCEPTED)
            s_forward (self, S_OPENED, (int) value);
        else
        if (what == ZMQ_EVENT_DISCONNECTED)
            s_forward (self, S_CLOSED, (int) value);
    }
}

static void *
s_thread (void *arg)
{
    srv_monitor_t *self = arg;
    void *out = zsock_resolve (self->out);
    bool answer = false;        //  a sync to answer once the pipe has room
    uint64_t token = 0;
    while (!atomic_load (&self->stop)) {
        zmq_pollitem_t items[] = { { zsock_resolve (self->events), 0, ZMQ_POLLIN, 0 },
                                   { out, 0, ZMQ_POLLIN, 0 } };
        zmq_poll (items, 2, answer ? 5 : 100);
        s_drain (self);
        uint64_t asked;
        while (zmq_recv (out, &asked, sizeof asked, ZMQ_DONTWAIT) == (int) sizeof asked) {
            s_drain (self);
            answer = true;
            token = asked;
        }
        if (answer) {
            s_wire_t w = { S_SYNCED, -1, self->seq, token };
            answer = zmq_send (out, &w, sizeof w, ZMQ_DONTWAIT) < 0;
        }
    }
    return NULL;
}

//  ---------------------------------------------------------------------

srv_monitor_t *
srv_monitor_new (void *socket, char *err, size_t err_size)
{
    srv_monitor_t *self = nn_calloc (1, sizeof *self);
    char endpoint[64], pipe[64];
    snprintf (endpoint, sizeof endpoint, "inproc://pl-srv-monitor-%p", (void *) self);
    snprintf (pipe, sizeof pipe, "inproc://pl-srv-monitor-pipe-%p", (void *) self);
    int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED
               | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
               | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor (socket, endpoint, events)) {
        snprintf (err, err_size, "server: cannot monitor the ROUTER's connections: %s",
                  zmq_strerror (errno));
        nn_free (self);
        return NULL;
    }
    self->watched = socket;
    self->watching = true;
    self->events = zsock_new (ZMQ_PAIR);
    self->out = zsock_new (ZMQ_PAIR);
    self->in = zsock_new (ZMQ_PAIR);
    if (self->out && self->in) {
        zsock_set_sndhwm (self->out, S_PIPE_HWM);
        zsock_set_rcvhwm (self->in, S_PIPE_HWM);
    }
    if (!self->events || !self->out || !self->in
    ||  zsock_connect (self->events, "%s", endpoint)
    ||  zsock_bind (self->out, "%s", pipe) || zsock_connect (self->in, "%s", pipe)
    ||  pthread_create (&self->thread, NULL, s_thread, self)) {
        snprintf (err, err_size, "server: cannot read the ROUTER's monitor: %s",
                  zmq_strerror (errno));
        srv_monitor_destroy (&self);
        return NULL;
    }
    self->running = true;
    return self;
}

void
srv_monitor_destroy (srv_monitor_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    srv_monitor_t *self = *self_p;
    //  In this order: libzmq may be blocked sending an event under the
    //  lock zmq_socket_monitor takes, and only the thread's reading frees
    //  it.
    if (self->watching)
        zmq_socket_monitor (self->watched, NULL, 0);
    if (self->running) {
        atomic_store (&self->stop, true);
        pthread_join (self->thread, NULL);
    }
    zsock_destroy (&self->events);
    zsock_destroy (&self->out);
    zsock_destroy (&self->in);
    nn_free (self->fds);
    nn_free (self);
    *self_p = NULL;
}

zsock_t *
srv_monitor_reader (srv_monitor_t *self)
{
    return self->in;
}

//  What the reactor knows of fd; a gap forgets all of it (a dropped event
//  may have been any descriptor's).
static void
s_learn (srv_monitor_t *self, const s_wire_t *w)
{
    if (w->seq != self->next_seq && self->fds)
        memset (self->fds, S_UNKNOWN, self->fds_size);
    self->next_seq = w->seq + 1;
    if (w->fd < 0 || w->fd >= S_FD_MAX)
        return;
    size_t fd = (size_t) w->fd;
    if (fd >= self->fds_size) {
        size_t size = self->fds_size ? self->fds_size : 1024;
        while (size <= fd)
            size *= 2;
        self->fds = nn_realloc (self->fds, size);
        memset (self->fds + self->fds_size, S_UNKNOWN, size - self->fds_size);
        self->fds_size = size;
    }
    self->fds[fd] = w->kind == S_CLOSED ? S_SHUT : S_OPEN;
}

int
srv_monitor_next (srv_monitor_t *self, srv_monitor_event_t *event)
{
    void *in = zsock_resolve (self->in);
    int ready = 0;
    size_t size = sizeof ready;
    zmq_getsockopt (in, ZMQ_EVENTS, &ready, &size);
    for (;;) {
        s_wire_t w;
        if (zmq_recv (in, &w, sizeof w, ZMQ_DONTWAIT) != (int) sizeof w) {
            double left = self->sync_deadline - pl_monotonic ();
            if (!self->sync_wait || left <= 0) {
                self->sync_wait = false;
                return 0;
            }
            zmq_pollitem_t item = { in, 0, ZMQ_POLLIN, 0 };
            zmq_poll (&item, 1, (long) (left * 1000) + 1);
            continue;
        }
        if (w.kind == S_SYNCED) {
            if (w.token == self->token && self->sync_wait) {
                self->sync_wait = false;
                self->synced = true;
                if (w.seq != self->next_seq && self->fds)       //  a gap at the end
                    memset (self->fds, S_UNKNOWN, self->fds_size);
                self->next_seq = w.seq;
            }
            continue;
        }
        s_learn (self, &w);
        if (w.kind == S_CLOSED) {
            *event = (srv_monitor_event_t) { SRV_MONITOR_CLOSED, w.fd };
            return 1;
        }
    }
}

void
srv_monitor_sync (srv_monitor_t *self)
{
    self->synced = false;
    self->sync_wait = false;
    uint64_t token = ++self->token;
    if (zmq_send (zsock_resolve (self->in), &token, sizeof token, ZMQ_DONTWAIT) < 0)
        return;
    self->sync_wait = true;
    self->sync_deadline = pl_monotonic () + S_SYNC_WAIT_S;
}

bool
srv_monitor_synced (const srv_monitor_t *self)
{
    return self->synced;
}

bool
srv_monitor_closed (const srv_monitor_t *self, int fd)
{
    return fd >= 0 && (size_t) fd < self->fds_size && self->fds[fd] == S_SHUT;
}

long
srv_monitor_refused (const srv_monitor_t *self)
{
    return atomic_load (&((srv_monitor_t *) self)->refused);
}

long
srv_monitor_dropped (const srv_monitor_t *self)
{
    return atomic_load (&((srv_monitor_t *) self)->dropped);
}
