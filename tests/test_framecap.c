/*  test_framecap.c: a frame over a cap is never a silent stall (suite
    'net'; issue 21, item 1).

    libzmq closes a connection whose peer sends a frame over its
    ZMQ_MAXMSGSIZE and tells nobody why: the device then sat waiting and
    the server dropped it 30 s later as "silent". The server now puts the
    cap its ROUTER enforces in WELCOME, and the sending side refuses a
    larger frame itself, naming the message, its size and the cap.

    - the server's WELCOME carries the cap it logs ("frames up to N bytes");
    - a real pipelearn-client that is asked (by a scripted server) for a
      frame over the cap WELCOME gave refuses it, tells the server why in
      an ERROR and exits 1 at once, instead of sending into a silent drop. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "pl_clock.h"
#include "pltest.h"
#include "proto_msg.h"

#define WAIT_MS 30000

static proto_msg_t *
s_recv (void *sock, uint8_t *rid, size_t *rid_len, const char *what)
{
    zmq_pollitem_t item = { sock, 0, ZMQ_POLLIN, 0 };
    for (;;) {
        cr_assert_eq (zmq_poll (&item, 1, WAIT_MS), 1, "%s: nothing arrived", what);
        proto_msg_t *msg = NULL;
        char err[512];
        int rc = rid ? proto_msg_recv_from (&msg, sock, rid, rid_len, NULL, err, sizeof err)
                     : proto_msg_recv (&msg, sock, NULL, err, sizeof err);
        cr_assert_eq (rc, 0, "%s: %s", what, err);
        if (proto_msg_type (msg) != PROTO_MSG_HEARTBEAT)
            return msg;
        proto_msg_destroy (&msg);
    }
}

Test (framecap, welcome_carries_the_servers_frame_cap, .timeout = 120)
{
    pltest_run_t run = { .count = 0 };
    pltest_mkdtemp (run.dir, "framecap_welcome");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
        "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 200, "
        "\"test_samples\": 100, \"batch_size\": 100, \"epochs\": 1, \"seed\": 5, "
        "\"split_point\": 1, \"threads\": 1, \"devices\": 1, \"mode\": \"sfl\", "
        "\"micro_batches\": 1, \"device_timeout_s\": 5}", endpoint, sizeof endpoint);
    cr_assert (server > 0);
    void *ctx = zmq_ctx_new ();
    void *sock = zmq_socket (ctx, ZMQ_DEALER);
    zmq_setsockopt (sock, ZMQ_LINGER, &(int) { 0 }, sizeof (int));
    cr_assert_eq (zmq_connect (sock, endpoint), 0);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t hello = { .protocol_version = PROTO_VERSION,
                            .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                            .requested_device_id = 0 };
    snprintf (hello.name, sizeof hello.name, "scripted");
    cr_assert_eq (proto_msg_set_hello (msg, &hello), 0);
    cr_assert_eq (proto_msg_send (&msg, sock), 0);
    msg = s_recv (sock, NULL, NULL, "WELCOME");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_WELCOME, "got %s",
                  proto_type_name (proto_msg_type (msg)));
    //  sfl at split 1, batch 100: the largest frame is the run's (100, 14,
    //  14, 32) activations, 2508800 bytes (what test_curve's runs send).
    char logged[128];
    snprintf (logged, sizeof logged, "frames up to %" PRIu64 " bytes",
              proto_msg_frame_cap (msg));
    cr_expect_eq (proto_msg_frame_cap (msg), 2508800);
    cr_expect (pltest_log_has (&run, "server.log", logged), "server.log lacks \"%s\"", logged);
    proto_msg_destroy (&msg);
    zmq_close (sock);
    zmq_ctx_term (ctx);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  A scripted server: WELCOME with a cap of 4096 bytes, then a PROBE that
//  asks for a 64 KiB answer. A real server never asks for more than its
//  cap (its probes stop at its frame limit); this one does, so the
//  device's own check is what stands between it and a silent drop.
Test (framecap, a_device_refuses_a_frame_over_the_servers_cap_and_says_so, .timeout = 120)
{
    pltest_run_t run = { .count = 0 };
    pltest_mkdtemp (run.dir, "framecap_device");
    void *ctx = zmq_ctx_new ();
    char endpoint[256];
    void *router = pltest_router_bind (ctx, endpoint, sizeof endpoint);
    pid_t client = pltest_start_client (&run, 0, endpoint);

    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len = 0;
    proto_msg_t *msg = s_recv (router, rid, &rid_len, "HELLO");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_HELLO);
    proto_msg_destroy (&msg);

    const char *config =
        "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 20, "
        "\"test_samples\": 10, \"batch_size\": 10, \"epochs\": 1, \"seed\": 5, "
        "\"split_point\": 1, \"threads\": 1, \"devices\": 1, \"mode\": \"sfl\", "
        "\"micro_batches\": 1}";
    msg = proto_msg_new (PROTO_MSG_WELCOME);
    cr_assert_eq (proto_msg_set_config (msg, config, strlen (config)), 0);
    proto_assign_t plan = { .device_id = 0, .split_point = 1, .micro_batches = 1,
                            .batch_size = 10, .devices = 1, .mode = PL_MODE_SFL,
                            .shard_begin = 0, .shard_count = 20, .seed = 5,
                            .origin_s = (double) time (NULL) };
    proto_msg_set_assign (msg, &plan);
    cr_assert_eq (proto_msg_set_frame_cap (msg, 4096), 0);
    cr_assert_eq (proto_msg_send_to (&msg, router, rid, rid_len), 0);
    msg = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t probe = { .probe_id = 7, .reply_bytes = 65536 };
    cr_assert_eq (proto_msg_set_probe (msg, &probe, 0), 0);
    cr_assert_eq (proto_msg_send_to (&msg, router, rid, rid_len), 0);
    double asked = pl_monotonic ();

    //  The device's answer: an ERROR that names the message, its size and
    //  the cap, not a 64 KiB PROBE (which a real server's libzmq would
    //  have dropped with the connection).
    msg = s_recv (router, rid, &rid_len, "the device's ERROR");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_ERROR, "got %s",
                  proto_type_name (proto_msg_type (msg)));
    const char *text = proto_msg_error_text (msg);
    cr_expect (strstr (text, "PROBE: frame 2 is 65536 bytes, over the receiver's cap of "
                             "4096 bytes"), "ERROR text: %s", text);
    proto_msg_destroy (&msg);
    int status = pltest_wait (&run, client, pl_monotonic () + 20);
    cr_expect_eq (status, 1, "the device exits 1, it does not wait (exit %d)", status);
    cr_expect (pl_monotonic () - asked < 20, "it stopped %.1f s after the PROBE",
               pl_monotonic () - asked);
    cr_expect (pltest_log_has (&run, "client0.log", "not sending PROBE, the server would "
                               "drop it: PROBE: frame 2 is 65536 bytes, over the receiver's "
                               "cap of 4096 bytes; stopping"));
    cr_expect (pltest_log_has (&run, "client0.log", "the server takes frames up to 4096 bytes"));
    if (status != 1)
        pltest_dump_logs (&run);
    zmq_close (router);
    zmq_ctx_term (ctx);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
