/*  srv_monitor.h: what libzmq does to the ROUTER's connections, for the
    reactor: which connection it closed (named by its file descriptor, as
    proto_peer_t.fd names the connection a message came over) and how many
    handshakes failed. libzmq closes a connection without a word to the
    socket's reader (a frame over ZMQ_MAXMSGSIZE, a peer that closed it, a
    peer silent past the ZMTP heartbeat timeout): its socket monitor is
    the only place that says so.

    A thread of its own reads the monitor, always, from srv_monitor_new
    to srv_monitor_destroy, which stops libzmq's monitor first, then stops
    and joins the thread (nothing is left running or detached: the
    server's exit is clean under valgrind and LeakSanitizer). libzmq
    writes monitor events with a blocking send under its monitor lock
    (libzmq issue #3575), so a monitor left unread for about 2000 events (a
    flood of TCP connections while the reactor evaluates, or after its
    loop) would stall libzmq's I/O thread, every connection of the ROUTER
    with it, and the monitor's own shutdown. The thread counts failed
    handshakes itself (srv_monitor_refused) and forwards the connections'
    opens and closes to the reactor through an inproc pipe without
    waiting: when the reactor lets the pipe fill, later events are dropped
    and counted, and the reactor forgets what it knew of every
    descriptor. What a dropped event costs: a device whose close was
    dropped goes when the server's next send to it fails (ROUTER_MANDATORY:
    its routing id is gone; a HEARTBEAT within heartbeat_s), as before
    the monitor, instead of at once; a HELLO from a connection whose
    close was dropped takes a slot that the same failed send frees.

    Own state only (no srv_t). One monitor per socket is all libzmq allows:
    this is the ROUTER's. Every function but srv_monitor_refused is for the
    reactor's thread.
*/
#ifndef SRV_MONITOR_H_INCLUDED
#define SRV_MONITOR_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct _srv_monitor_t srv_monitor_t;

typedef enum {
    SRV_MONITOR_CLOSED = 1      //  libzmq closed the connection on fd (DISCONNECTED)
} srv_monitor_kind_t;

typedef struct {
    srv_monitor_kind_t kind;
    int fd;                     //  the connection's descriptor
} srv_monitor_event_t;

//  Watches socket (a libzmq socket handle of zsys's context) and starts the
//  reading thread. Call before bind, so no connection's events are missed.
//  NULL with a message.
srv_monitor_t *srv_monitor_new (void *socket, char *err, size_t err_size);
//  Stops libzmq's monitor while the thread still reads (so libzmq's
//  pending event sends complete), then the thread, then closes the pipes.
//  Never blocks on libzmq. Call before the socket is closed. Accepts NULL.
void srv_monitor_destroy (srv_monitor_t **self_p);
//  The reactor's end of the pipe, for its poller.
zsock_t *srv_monitor_reader (srv_monitor_t *self);
//  The next close the thread forwarded, without waiting (except while a
//  srv_monitor_sync is answered, up to its deadline): 1 with *event set, or
//  0 when none is queued.
int srv_monitor_next (srv_monitor_t *self, srv_monitor_event_t *event);
//  Asks the thread to forward every event libzmq emitted before this call;
//  srv_monitor_next then waits (at most 2 s) for the answer, which comes
//  after them. srv_monitor_synced says whether it came: only then has the
//  caller, having read srv_monitor_next until 0, seen every connection on
//  a descriptor close that closed before a message now read from it.
void srv_monitor_sync (srv_monitor_t *self);
bool srv_monitor_synced (const srv_monitor_t *self);
//  Whether the last event forwarded for fd, with none dropped since the
//  reactor learnt it, was its connection's close. After a synced read, a
//  message from fd came over a connection libzmq has closed: its accept
//  came before the message, so the close is its own or a later one's.
//  (libzmq's listener emits ACCEPTED after it hands the connection to its
//  session, on the same I/O thread that then runs the handshake: with
//  zsys's one I/O thread, before any message of it can be read.)
//  Not covered: a HELLO read after its connection closed AND a newer
//  connection took the same fd (the last event is then that accept): the
//  session is made with the newer connection's fd and is dropped when that
//  one closes, or by the deadlines.
bool srv_monitor_closed (const srv_monitor_t *self, int fd);
//  Handshakes that failed (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, _PROTOCOL
//  or _AUTH: an unknown CURVE key, a bad greeting, a bare TCP connection)
//  since the start. Any thread.
long srv_monitor_refused (const srv_monitor_t *self);
//  Events the pipe had no room for since the start (the reactor busy).
long srv_monitor_dropped (const srv_monitor_t *self);

#endif
