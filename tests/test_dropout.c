/*  test_dropout.c: devices that die, stall or come back, against the real
    daemons (suite 'net'). A device killed mid-epoch is dropped when it
    goes silent, the round completes with the others, and the device,
    restarted, rejoins at the next aggregation point and contributes; an fl
    device that stalls misses the round deadline; too few devices left ends
    the run with a clear message. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn_checkpoint.h"
#include "pl_timeline.h"
#include "pltest.h"
#include "proto_msg.h"

#include <zmq.h>

#include <signal.h>

//  Three devices, three epochs of about a second each on a quiet 2-core host
//  (synthetic data).
#define DROPOUT_CONFIG_N(mode, samples, extra) \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": " samples ", " \
    "\"test_samples\": 300, \"batch_size\": 50, \"epochs\": 3, \"seed\": 9, " \
    "\"split_point\": 1, \"threads\": 1, \"devices\": 3, \"mode\": \"" mode "\", " \
    "\"micro_batches\": 2, " extra "}"
#define DROPOUT_CONFIG(mode, extra) DROPOUT_CONFIG_N (mode, "3000", extra)

static const cJSON *
s_epoch (const cJSON *summary, int index)
{
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (summary, "epochs");
    cr_assert (cJSON_GetArraySize (epochs) > index, "summary: no epoch %d", index + 1);
    return cJSON_GetArrayItem (epochs, index);
}

static const cJSON *
s_device (const cJSON *epoch, int id)
{
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (epoch, "devices");
    cr_assert (cJSON_GetArraySize (devs) > id);
    return cJSON_GetArrayItem (devs, id);
}

static bool
s_active (const cJSON *device)
{
    return cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (device, "active"));
}

//  Three devices, and the run started with all of them.
static void
s_start_three (pltest_run_t *run, const char *endpoint, pid_t c[3])
{
    for (int i = 0; i < 3; i++)
        c[i] = pltest_start_client (run, i, endpoint);
    cr_assert (pltest_wait_log (run, "server.log", "all 3 device(s) joined", 60),
               "the run did not start");
}

//  The pipelearn run of three devices (device_timeout_s 3, min_devices 2)
//  with device 2 SIGKILLed as it starts epoch 1 (the kill follows its
//  "iteration(s) per epoch" line at once: on a fast host an epoch of 20
//  iterations takes half a second, and epoch 1 must still be open when it
//  is restarted at once); returns the server.
static pid_t
s_run_and_kill_device_2 (pltest_run_t *run, char *endpoint, size_t size, pid_t c[3])
{
    pltest_mkdtemp (run->dir, "dropout");
    pid_t server = pltest_start_server (run, "run",
                                   DROPOUT_CONFIG ("pipelearn", "\"device_timeout_s\": 3, "
                                                   "\"min_devices\": 2"),
                                   endpoint, size);
    s_start_three (run, endpoint, c);
    //  Training, not loading: a device killed before it has its shard is
    //  another case (below).
    for (int i = 0; i < 3; i++) {
        char log[32];
        snprintf (log, sizeof log, "client%d.log", i);
        cr_assert (pltest_wait_log (run, log, "iteration(s) per epoch", 60));
    }
    cr_assert_eq (kill (c[2], SIGKILL), 0);
    pltest_wait (run, c[2], pl_monotonic () + 5);
    return server;
}

Test (dropout, killed_device_is_dropped_and_rejoins_when_restarted, .timeout = 400)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pid_t c[3];
    pid_t server = s_run_and_kill_device_2 (&run, endpoint, sizeof endpoint, c);
    //  Dropped at once: libzmq reports its connection closed (the ROUTER's
    //  monitor), or a send finds it gone (ZMQ_ROUTER_MANDATORY), whichever
    //  the server sees first; else as silent.
    cr_assert (pltest_wait_log (&run, "server.log", "device 2 dropped: ", 30),
               "the killed device was not dropped");
    cr_assert (pltest_log_has (&run, "server.log", "device 2 dropped: silent for")
               || pltest_log_has (&run, "server.log", "device 2 dropped: its connection is gone")
               || pltest_log_has (&run, "server.log",
                                  "device 2 dropped: libzmq closed its connection"),
               "the killed device was dropped for another reason");
    //  Restarted (as systemd would), it rejoins at the next aggregation point.
    c[2] = pltest_start_client (&run, 2, endpoint);
    pltest_expect_exit (&run, server, 0, "server");
    for (int i = 0; i < 3; i++)
        pltest_expect_exit (&run, c[i], 0, i < 2 ? "a device that stayed" : "the restarted device");
    cr_assert (pltest_log_has (&run, "server.log", "device 2 joined the running run"));
    cr_assert (pltest_log_has (&run, "server.log", "device 2 rejoins at epoch"));
    cJSON *s = pltest_summary (run.dir, "run");
    //  Epoch 1 closed without device 2; by the last epoch it is back and its
    //  parameters were averaged in (its samples are its shard).
    cr_expect_not (s_active (s_device (s_epoch (s, 0), 2)),
                   "device 2 active at the end of epoch 1");
    cr_expect (s_active (s_device (s_epoch (s, 0), 0)));
    //  Issue 21, item 3: what it did in epoch 1 before it was killed is in
    //  the summary (it showed 0 samples, as if it had never trained). The
    //  server counts the samples of its ACTIVATIONS whose GRADIENTS it sent
    //  back: each is one micro-batch (25 samples) that the server's replica
    //  computed, a "server:d2" compute row of epoch 1 in timeline.csv.
    //  Its own STATS never came, so its times are not a report.
    const cJSON *first = s_device (s_epoch (s, 0), 2);
    pltest_csv_t csv = pltest_load_csv (run.dir, "run");
    int computed = 0;
    for (int i = 0; i < csv.count; i++)
        computed += strcmp (csv.rows[i].who, "server:d2") == 0
                 && strcmp (csv.rows[i].stage, "compute") == 0 && csv.rows[i].epoch == 1;
    free (csv.rows);
    double trained = pltest_num (first, "trained_samples");
    cr_log_info ("epoch 1: device 2 trained %g samples before it was killed (%d of its "
                 "micro-batches computed)", trained, computed);
    cr_expect (trained <= 25.0 * computed && fmod (trained, 25.0) == 0.0,
               "epoch 1: device 2 trained %g samples; the server computed %d of its "
               "micro-batches", trained, computed);
    //  All but one: the drop discards the replica's queue (srv_pool_discard),
    //  and a replica is in at most one worker, whose result, back after the
    //  drop, is computed (a row) but never sent (seen once: 1 computed, 0
    //  trained, the drop by the socket monitor within the compute).
    cr_expect (trained >= 25.0 * (computed - 1),
               "epoch 1: device 2 trained %d micro-batch(es) before it was killed (at most "
               "one of them returned after its drop), the summary says %g samples",
               computed, trained);
    cr_expect (cJSON_IsFalse (cJSON_GetObjectItemCaseSensitive (first, "reported")));
    cr_expect_eq (pltest_num (first, "samples"), 0.0, "no PARAMS of epoch 1 came from it");
    cr_expect (cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (s_device (s_epoch (s, 0), 0),
                                                                "reported")));
    const cJSON *last = s_epoch (s, 2);
    cr_expect (s_active (s_device (last, 2)), "the restarted device did not rejoin");
    cr_expect_eq (pltest_num (s_device (last, 2), "samples"), 1000.0);
    cr_expect (pltest_num (s_device (last, 2), "forward_s") > 0.0, "it did not train");
    //  20 iterations of 50: every sample it trained in the last epoch.
    cr_expect_eq (pltest_num (s_device (last, 2), "trained_samples"), 1000.0);
    cr_expect (pltest_num (last, "test_acc") > 0.3, "test accuracy %.3f",
               pltest_num (last, "test_acc"));
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (dropout, stalled_fl_device_misses_the_round_deadline, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "dropout");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
                                   DROPOUT_CONFIG_N ("fl", "600", "\"round_timeout_s\": 8, "
                                                     "\"min_devices\": 2"),
                                   endpoint, sizeof endpoint);
    pid_t c[3];
    s_start_three (&run, endpoint, c);
    //  Frozen, not dead: its connection stays up, it just never answers.
    cr_assert_eq (kill (c[1], SIGSTOP), 0);
    pltest_expect_exit (&run, server, 0, "server");
    pltest_expect_exit (&run, c[0], 0, "device 0");
    pltest_expect_exit (&run, c[2], 0, "device 2");
    cr_assert (pltest_log_has (&run, "server.log", "device 1 dropped: round not finished"),
               "no deadline drop logged");
    cJSON *s = pltest_summary (run.dir, "run");
    cr_expect_not (s_active (s_device (s_epoch (s, 2), 1)));
    cr_expect (pltest_num (s_epoch (s, 2), "test_acc") > 0.3);
    cJSON_Delete (s);
    kill (c[1], SIGKILL);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (dropout, too_few_devices_left_ends_the_run, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "dropout");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
                                   DROPOUT_CONFIG ("sfl", "\"device_timeout_s\": 3, "
                                                   "\"min_devices\": 3"),
                                   endpoint, sizeof endpoint);
    pid_t c[3];
    s_start_three (&run, endpoint, c);
    usleep (500000);
    cr_assert_eq (kill (c[0], SIGKILL), 0);
    pltest_expect_exit (&run, server, 1, "server");
    cr_assert (pltest_log_has (&run, "server.log", "2 device(s) left, min_devices is 3"),
               "no clear reason logged");
    //  The others are told and stop with an error rather than hang.
    pltest_expect_exit (&run, c[1], 1, "device 1");
    pltest_expect_exit (&run, c[2], 1, "device 2");
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  Issue 19 (3), issue 21 (2): a device killed mid-run and restarted at
//  once (as systemd or Compose would) takes its slot back: its connection
//  is gone, so the server drops it when libzmq reports the close, or when
//  a send to it fails (ZMQ_ROUTER_MANDATORY), or its new HELLO (--insecure:
//  the same device id) frees the slot, with a warning, whichever comes
//  first; not "run is full" until a deadline. fl with rare heartbeats:
//  on a quiet host nothing sends to the dead device first, but on a loaded
//  one the round's first MODEL can go out after the kill ("device 1
//  dropped: its connection is gone (sending MODEL)", seen at load 25).
Test (dropout, a_device_restarted_within_device_timeout_rejoins, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "dropout");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
                                   DROPOUT_CONFIG_N ("fl", "3000", "\"device_timeout_s\": 120, "
                                                     "\"heartbeat_s\": 60, "
                                                     "\"heartbeat_timeout_s\": 300"),
                                   endpoint, sizeof endpoint);
    pid_t c[3];
    s_start_three (&run, endpoint, c);
    usleep (500000);                    //  mid epoch 1
    cr_assert_eq (kill (c[1], SIGKILL), 0);
    pltest_wait (&run, c[1], pl_monotonic () + 5);
    c[1] = pltest_start_client (&run, 1, endpoint);
    for (int i = 0; i < 3; i++)
        pltest_expect_exit (&run, c[i], 0, i == 1 ? "the restarted device" : "a device");
    pltest_expect_exit (&run, server, 0, "server");
    cr_assert_not (pltest_log_has (&run, "client1.log", "run is full"));
    cr_assert (pltest_log_has (&run, "server.log", "device 1 joined the running run"));
    cr_assert (pltest_log_has (&run, "server.log", "device 1's connection is gone; a new HELLO")
               || pltest_log_has (&run, "server.log",
                                  "device 1 dropped: libzmq closed its connection")
               || pltest_log_has (&run, "server.log", "device 1 dropped: its connection is gone"),
               "the server did not say how it freed device 1's slot");
    cJSON *s = pltest_summary (run.dir, "run");
    cr_expect (s_active (s_device (s_epoch (s, 2), 1)), "the restarted device did not rejoin");
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  The epoch in which the server logged "device 2 joined the running run
//  in epoch E"; 0 when it did not.
static int
s_join_epoch (pltest_run_t *run)
{
    char path[4200];
    snprintf (path, sizeof path, "%s/server.log", run->dir);
    char *text = pltest_read (path);
    const char *needle = "device 2 joined the running run in epoch ";
    const char *at = strstr (text, needle);
    int epoch = at ? atoi (at + strlen (needle)) : 0;
    free (text);
    return epoch;
}

//  Issue 21, item 3. Once per epoch (aggregation_frequency -1): a device
//  killed in epoch 1 and restarted is admitted at the next aggregation
//  point, the end of the epoch in which it joined again, and from there it
//  takes part with its whole shard, not sitting one out (reported: epoch 2
//  "samples 0, active false"). Restarted at once (its key or id takes the
//  slot back from the dead connection: it joins in epoch 1) and restarted
//  after the server dropped it (on a fast host epoch 1 may close at that
//  drop, and it joins in epoch 2; the next point is then epoch 3's start).
static void
s_restart_and_check (bool after_drop)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pid_t c[3];
    pid_t server = s_run_and_kill_device_2 (&run, endpoint, sizeof endpoint, c);
    if (after_drop)
        cr_assert (pltest_wait_log (&run, "server.log", "device 2 dropped: ", 30));
    //  Restarted at once, it must join while epoch 1 is open: device 0 is
    //  stopped meanwhile, so the epoch cannot close however long the new
    //  process takes to start on a loaded host (half a second is a whole
    //  epoch on a fast one). At most 2 s: device_timeout_s is 3.
    if (!after_drop)
        cr_assert_eq (kill (c[0], SIGSTOP), 0);
    c[2] = pltest_start_client (&run, 2, endpoint);
    if (!after_drop) {
        pltest_wait_log (&run, "server.log", "device 2 joined the running run", 2);
        cr_assert_eq (kill (c[0], SIGCONT), 0);
    }
    pltest_expect_exit (&run, server, 0, "server");
    for (int i = 0; i < 3; i++)
        pltest_expect_exit (&run, c[i], 0, i < 2 ? "a device that stayed" : "the restarted device");
    int joined = s_join_epoch (&run);
    if (!after_drop)
        cr_assert_eq (joined, 1, "restarted at once, device 2 joined in epoch %d", joined);
    cr_assert (joined >= 1 && joined <= 2, "device 2 joined again in epoch %d of 3", joined);
    char want[96];
    snprintf (want, sizeof want, "device 2 rejoins at epoch %d, iteration 0", joined + 1);
    cr_assert (pltest_log_has (&run, "server.log", want),
               "device 2 was not given the model at the end of epoch %d", joined);
    cJSON *s = pltest_summary (run.dir, "run");
    cr_expect_not (s_active (s_device (s_epoch (s, 0), 2)),
                   "device 2 active at the end of epoch 1");
    for (int e = joined; e < 3; e++) {
        const cJSON *d = s_device (s_epoch (s, e), 2);
        cr_expect (s_active (d), "epoch %d: the restarted device is not active", e + 1);
        cr_expect_eq (pltest_num (d, "samples"), 1000.0, "epoch %d: device 2 trained %g samples, "
                      "want its shard of 1000", e + 1, pltest_num (d, "samples"));
    }
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (dropout, restarted_device_takes_part_from_the_next_aggregation_point, .timeout = 400)
{
    s_restart_and_check (false);
    s_restart_and_check (true);
}

//  Issue 21 (seen after --resume): a HELLO that libzmq had queued from a
//  connection that died before the server read it (a device killed while
//  the server was down or starting) took the last free slot. The run
//  started with it, its MODEL found the connection gone, and the server,
//  short of devices (min_devices), aborted before training. Now the slot
//  is freed before the start and the run waits for the real device. The
//  dead connection is made here: its handshake done, a HELLO for device 0
//  sent while the server is stopped (SIGSTOP), and the connection closed
//  before the server runs again, so the server reads the HELLO with the
//  connection already gone. (Since the server reads its connections'
//  closes, it usually ignores that HELLO outright.)
Test (dropout, a_dead_queued_hello_does_not_start_the_run, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "deadhello");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
                                   DROPOUT_CONFIG_N ("pipelearn", "600", "\"min_devices\": 3"),
                                   endpoint, sizeof endpoint);
    pid_t c[3];
    c[1] = pltest_start_client (&run, 1, endpoint);
    c[2] = pltest_start_client (&run, 2, endpoint);
    cr_assert (pltest_wait_log (&run, "server.log", "device 1 joined", 60));
    cr_assert (pltest_wait_log (&run, "server.log", "device 2 joined", 60));

    void *ctx = zmq_ctx_new ();
    void *dealer = zmq_socket (ctx, ZMQ_DEALER);
    cr_assert_eq (zmq_socket_monitor (dealer, "inproc://deadhello-monitor",
                                      ZMQ_EVENT_HANDSHAKE_SUCCEEDED), 0);
    void *monitor = zmq_socket (ctx, ZMQ_PAIR);
    cr_assert_eq (zmq_connect (monitor, "inproc://deadhello-monitor"), 0);
    zmq_setsockopt (monitor, ZMQ_RCVTIMEO, &(int) { 30000 }, sizeof (int));
    cr_assert_eq (zmq_connect (dealer, endpoint), 0);
    zmq_msg_t event;                    //  two frames: event and address
    for (int part = 0; part < 2; part++) {
        zmq_msg_init (&event);
        cr_assert (zmq_msg_recv (&event, monitor, 0) >= 0, "no ZMTP handshake with the server");
        zmq_msg_close (&event);
    }
    cr_assert_eq (kill (server, SIGSTOP), 0);
    proto_msg_t *hello = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t h = { .protocol_version = PROTO_VERSION,
                        .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                        .requested_device_id = 0 };
    snprintf (h.name, sizeof h.name, "dead");
    cr_assert_eq (proto_msg_set_hello (hello, &h), 0);
    cr_assert_eq (proto_msg_send (&hello, dealer), 0);
    usleep (300000);                    //  into the stopped server's TCP receive buffer
    zmq_setsockopt (dealer, ZMQ_LINGER, &(int) { 2000 }, sizeof (int));
    zmq_close (dealer);
    zmq_close (monitor);
    zmq_ctx_term (ctx);                 //  the HELLO, then the connection's end
    cr_assert_eq (kill (server, SIGCONT), 0);

    //  The server either ignores the HELLO, having seen its connection's
    //  close first (srv_monitor.c), or takes it and frees the slot again.
    bool seen = false;
    for (double until = pl_monotonic () + 30; !seen && pl_monotonic () < until;
         usleep (100000))
        seen = pltest_log_has (&run, "server.log", "device 0 dropped: ")
            || pltest_log_has (&run, "server.log", "from a connection libzmq has already "
                               "closed; ignored");
    cr_assert (seen, "the server did not see the dead connection's HELLO");
    c[0] = pltest_start_client (&run, 0, endpoint);
    pltest_expect_exit (&run, server, 0, "server");
    for (int i = 0; i < 3; i++)
        pltest_expect_exit (&run, c[i], 0, "a device");
    cr_expect_not (pltest_log_has (&run, "server.log", "min_devices is 3"));
    cr_expect (pltest_log_has (&run, "server.log", "all 3 device(s) joined"));
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
