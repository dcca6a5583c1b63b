/*  srv_monitor.c: the ROUTER's libzmq socket monitor. See srv_monitor.h. */
#include "srv_monitor.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"

struct _srv_monitor_t {
    void *watched;              //  the monitored socket (libzmq handle)
    zsock_t *reader;            //  PAIR connected to libzmq's monitor endpoint
};

srv_monitor_t *
srv_monitor_new (void *socket, char *err, size_t err_size)
{
    srv_monitor_t *self = nn_calloc (1, sizeof *self);
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "inproc://pl-srv-monitor-%p", (void *) self);
    int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
               | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor (socket, endpoint, events)) {
        snprintf (err, err_size, "server: cannot monitor the ROUTER's connections: %s",
                  zmq_strerror (errno));
        nn_free (self);
        return NULL;
    }
    self->watched = socket;
    self->reader = zsock_new (ZMQ_PAIR);
    if (!self->reader || zsock_connect (self->reader, "%s", endpoint)) {
        snprintf (err, err_size, "server: cannot read the ROUTER's monitor: %s",
                  zmq_strerror (errno));
        srv_monitor_destroy (&self);
        return NULL;
    }
    return self;
}

void
srv_monitor_destroy (srv_monitor_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    srv_monitor_t *self = *self_p;
    zmq_socket_monitor (self->watched, NULL, 0);
    zsock_destroy (&self->reader);
    nn_free (self);
    *self_p = NULL;
}

zsock_t *
srv_monitor_reader (srv_monitor_t *self)
{
    return self->reader;
}

int
srv_monitor_next (srv_monitor_t *self, srv_monitor_event_t *event)
{
    void *sock = zsock_resolve (self->reader);
    //  A receive without waiting processes the socket's pending commands
    //  (the one that makes a newly written event readable) at most once a
    //  millisecond; ZMQ_EVENTS processes them always.
    int ready = 0;
    size_t size = sizeof ready;
    zmq_getsockopt (sock, ZMQ_EVENTS, &ready, &size);
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&frame);
            return 0;
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
        if (ok && what == ZMQ_EVENT_DISCONNECTED) {
            *event = (srv_monitor_event_t) { SRV_MONITOR_CLOSED, (int) value };
            return 1;
        }
        if (ok && (what & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                         | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                         | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))) {
            *event = (srv_monitor_event_t) { SRV_MONITOR_REFUSED, -1 };
            return 1;
        }
    }
}
