/*  test_slowlink.c: a message that takes longer to cross the link than the
    ZMTP heartbeat timeout still arrives, and a peer that stops answering
    is still dropped within that timeout.

    libzmq (4.3, stream_engine_base.cpp) starts the heartbeat timeout when
    it sends a PING and cancels it only when a whole ZMTP frame has been
    decoded; bytes of a frame still arriving do not count. A 45 MB slab in
    one frame over a 10 Mbit/s uplink (36 s) therefore lost its connection
    at heartbeat_timeout_s (30 s). proto sends every frame of
    PROTO_CHUNK_BYTES or more as a run of chunks (PROTOCOL.md, "Chunks"),
    so frames keep arriving while the transfer lasts.

    Suite lab: the test process, as root, moves into a network namespace of
    its own (unshare) and shapes its loopback with tbf (the kernel has no
    netem). The namespace, its qdisc and both sockets go when the test's
    process exits.
*/
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "pl_clock.h"
#include "proto_msg.h"
#include "proto_tensor.h"

#define S_HB_IVL_MS     500
#define S_HB_TIMEOUT_MS 2000
#define S_RATE_MBIT     8
//  About 3x the heartbeat timeout at S_RATE_MBIT: 6 MB take 6 s.
#define S_SLAB_FLOATS   ((uint64_t) 1500000)

//  A private network namespace whose loopback is a S_RATE_MBIT link (one
//  queue for both directions). On lo the burst must exceed its 64 KiB MTU.
static void
s_slow_loopback (void)
{
    cr_assert_eq (geteuid (), 0, "suite lab runs as root (unshare, tc); this is uid %d",
                  (int) geteuid ());
    cr_assert_eq (unshare (CLONE_NEWNET), 0, "unshare (CLONE_NEWNET): %s", strerror (errno));
    cr_assert_eq (system ("ip link set lo up"), 0, "ip link set lo up");
    char cmd[160];
    snprintf (cmd, sizeof cmd, "tc qdisc add dev lo root tbf rate %dmbit burst 70kb "
              "latency 50ms", S_RATE_MBIT);
    cr_assert_eq (system (cmd), 0, "%s", cmd);
}

//  A socket with the daemons' heartbeat options, short.
static void *
s_socket (void *ctx, int type)
{
    void *sock = zmq_socket (ctx, type);
    cr_assert_not_null (sock);
    int ivl = S_HB_IVL_MS, timeout = S_HB_TIMEOUT_MS, linger = 0;
    zmq_setsockopt (sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt (sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    return sock;
}

//  A ROUTER on an ephemeral port and a monitor on its disconnects.
static void *
s_router (void *ctx, char *endpoint, size_t size, void **monitor)
{
    void *router = s_socket (ctx, ZMQ_ROUTER);
    cr_assert_eq (zmq_bind (router, "tcp://127.0.0.1:*"), 0);
    cr_assert_eq (zmq_getsockopt (router, ZMQ_LAST_ENDPOINT, endpoint, &size), 0);
    cr_assert_eq (zmq_socket_monitor (router, "inproc://router-events",
                                      ZMQ_EVENT_DISCONNECTED), 0);
    *monitor = zmq_socket (ctx, ZMQ_PAIR);
    cr_assert_eq (zmq_connect (*monitor, "inproc://router-events"), 0);
    return router;
}

//  Disconnects the monitor reported so far, waiting at most wait_ms for
//  the first.
static int
s_disconnects (void *monitor, int wait_ms)
{
    int count = 0;
    zmq_pollitem_t item = { monitor, 0, ZMQ_POLLIN, 0 };
    while (zmq_poll (&item, 1, count ? 0 : wait_ms) == 1) {
        zmq_msg_t part;
        zmq_msg_init (&part);
        if (zmq_msg_recv (&part, monitor, 0) < 0)
            break;
        bool more = zmq_msg_more (&part);
        zmq_msg_close (&part);
        if (!more)
            count++;
    }
    return count;
}

//  A PARAMS of S_SLAB_FLOATS floats, float i = i.
static proto_msg_t *
s_params (void)
{
    float *data = malloc (S_SLAB_FLOATS * sizeof *data);
    cr_assert_not_null (data);
    for (uint64_t i = 0; i < S_SLAB_FLOATS; i++)
        data[i] = (float) i;
    proto_slab_t desc = { .unit_begin = 0, .unit_end = 1, .count = S_SLAB_FLOATS,
                          .sample_count = 1 };
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PARAMS);
    cr_assert_eq (proto_msg_set_slab_copy (msg, &desc, data), 0);
    free (data);
    return msg;
}

Test (slowlink, message_longer_than_heartbeat_timeout_arrives, .timeout = 60)
{
    s_slow_loopback ();
    void *ctx = zmq_ctx_new ();
    char endpoint[256];
    void *monitor;
    void *router = s_router (ctx, endpoint, sizeof endpoint, &monitor);
    void *dealer = s_socket (ctx, ZMQ_DEALER);
    cr_assert_eq (zmq_connect (dealer, endpoint), 0);

    double t0 = pl_monotonic ();
    proto_msg_t *msg = s_params ();
    cr_assert_eq (proto_msg_send (&msg, dealer), 0, "send: %s", zmq_strerror (errno));
    //  Twice the time the link needs (6 s) plus margin: without chunks
    //  libzmq closes the connection after about 2.5 s and the message,
    //  half sent, is lost with it.
    int rcvtimeo = 20000;
    zmq_setsockopt (router, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len;
    proto_msg_t *got = NULL;
    char err[512] = "";
    int rc = proto_msg_recv_from (&got, router, rid, &rid_len, NULL, err, sizeof err);
    double took = pl_monotonic () - t0;
    int drops = s_disconnects (monitor, 0);
    cr_assert_eq (rc, 0, "no PARAMS after %.1f s (rc %d: %s); the ROUTER saw %d "
                  "disconnect(s)", took, rc, err, drops);
    cr_assert_eq (drops, 0, "the connection was closed %d time(s) during the transfer", drops);
    //  The link really was slower than the heartbeat timeout, or this test
    //  shows nothing.
    cr_assert_gt (took, 2.0 * S_HB_TIMEOUT_MS / 1000.0,
                  "the transfer took %.1f s: the link is not shaped", took);
    const proto_slab_t *slab = proto_msg_slab (got);
    cr_assert_eq (slab->count, S_SLAB_FLOATS);
    const float *f = proto_msg_tensor_data (got);
    for (uint64_t i = 0; i < S_SLAB_FLOATS; i++)
        cr_assert_eq (f[i], (float) i, "float %llu is %g", (unsigned long long) i, f[i]);
    proto_msg_destroy (&got);
    zmq_close (dealer);
    zmq_close (monitor);
    zmq_close (router);
    zmq_ctx_term (ctx);
}

//  The other half: chunks must not make a dead peer look alive. A device
//  whose process is stopped (SIGSTOP: its TCP connection stays open, its
//  libzmq answers nothing) is dropped by the heartbeat timeout, as before.
Test (slowlink, stopped_idle_peer_is_dropped_within_the_timeout, .timeout = 60)
{
    s_slow_loopback ();
    int ready[2];
    cr_assert_eq (pipe (ready), 0);
    void *ctx = zmq_ctx_new ();
    char endpoint[256];
    void *monitor;
    void *router = s_router (ctx, endpoint, sizeof endpoint, &monitor);
    pid_t pid = fork ();
    cr_assert_neq (pid, -1);
    if (pid == 0) {
        //  A context of its own: the parent's is not fork-safe.
        void *cctx = zmq_ctx_new ();
        void *dealer = s_socket (cctx, ZMQ_DEALER);
        zmq_connect (dealer, endpoint);
        proto_msg_t *hb = proto_msg_new (PROTO_MSG_HEARTBEAT);
        int ok = proto_msg_send (&hb, dealer) == 0;
        if (write (ready[1], "r", 1) != 1)
            ok = 0;
        pause ();
        _exit (ok ? 0 : 1);
    }
    char c;
    cr_assert_eq (read (ready[0], &c, 1), 1);
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len;
    proto_msg_t *got = NULL;
    int rcvtimeo = 10000;
    zmq_setsockopt (router, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
    cr_assert_eq (proto_msg_recv_from (&got, router, rid, &rid_len, NULL, NULL, 0), 0,
                  "no HEARTBEAT from the peer");
    proto_msg_destroy (&got);
    cr_assert_eq (s_disconnects (monitor, 0), 0);
    double t0 = pl_monotonic ();
    kill (pid, SIGSTOP);
    int drops = s_disconnects (monitor, 4 * S_HB_TIMEOUT_MS);
    double took = pl_monotonic () - t0;
    kill (pid, SIGKILL);
    waitpid (pid, NULL, 0);
    cr_assert_eq (drops, 1, "the stopped peer was not dropped in %.1f s", took);
    //  At most one interval to the next PING, then the timeout.
    cr_assert_leq (took, (S_HB_IVL_MS + S_HB_TIMEOUT_MS) / 1000.0 + 1.0,
                   "dropped after %.1f s, heartbeat_timeout %d ms", took, S_HB_TIMEOUT_MS);
    zmq_close (monitor);
    zmq_close (router);
    zmq_ctx_term (ctx);
}
