/*  srv_monitor.h: what libzmq does to the ROUTER's connections, for the
    reactor: which connection it closed (named by its file descriptor, as
    proto_peer_t.fd names the connection a message came over) and which
    handshakes failed. libzmq closes a connection without a word to the
    socket's reader (a frame over ZMQ_MAXMSGSIZE, a peer that closed it, a
    peer silent past the ZMTP heartbeat timeout): its socket monitor is
    the only place that says so.

    Own state only (no srv_t). One monitor per socket is all libzmq allows:
    this is the ROUTER's. Reactor thread only.
*/
#ifndef SRV_MONITOR_H_INCLUDED
#define SRV_MONITOR_H_INCLUDED

#include <czmq.h>
#include <stddef.h>

typedef struct _srv_monitor_t srv_monitor_t;

typedef enum {
    SRV_MONITOR_CLOSED = 1,     //  libzmq closed the connection on fd (DISCONNECTED)
    SRV_MONITOR_REFUSED = 2     //  a handshake failed (unknown key, bad greeting, ...)
} srv_monitor_kind_t;

typedef struct {
    srv_monitor_kind_t kind;
    int fd;                     //  CLOSED: the connection's descriptor; else -1
} srv_monitor_event_t;

//  Watches socket (a libzmq socket handle of zsys's context). Call before
//  bind, so no connection's events are missed. NULL with a message.
srv_monitor_t *srv_monitor_new (void *socket, char *err, size_t err_size);
//  Stops watching; call before the socket is closed. Accepts NULL.
void srv_monitor_destroy (srv_monitor_t **self_p);
//  The socket the events arrive on, for the reactor's poller.
zsock_t *srv_monitor_reader (srv_monitor_t *self);
//  The next event, without waiting: 1 with *event set, or 0 when none is
//  queued. Every event libzmq emitted before this call is seen by it or by
//  an earlier one (pending commands are processed first), so a caller that
//  reads until 0 before it trusts a descriptor has seen that descriptor's
//  earlier connections close.
int srv_monitor_next (srv_monitor_t *self, srv_monitor_event_t *event);

#endif
