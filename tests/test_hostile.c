/*  test_hostile.c: an enrolled device that turns hostile, and a run that
    diverges, against the real pipelearn-server (suite 'net'; issue 19,
    findings 1, 4 and 9).

    Each case runs a server, one honest pipelearn-client (device 0) and a
    device scripted here with libzmq and proto (device 1) that joins like a
    client and then sends what a poisoner would: NaN weights, a sample
    count of 2^63, a round that ends at iteration 0xFFFFFFFF, NaN
    activations, or it stops reading. The scripted device must be dropped
    with its reason logged, and the honest device's run must finish with a
    finite model.ckpt and every epoch in summary.json. The last case trains
    with learning rate 1e6: the run must stop with a clear message, never
    hang and never checkpoint a non-finite model.

    The binaries run as child processes on tcp://127.0.0.1:*; the synthetic
    dataset keeps runs short. No wall-clock figure is asserted: waits are
    generous bounds that only catch a hang. */
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
#include "runcmd.h"

#include "nn_checkpoint.h"
#include "nn_codec.h"
#include "nn_model.h"
#include "pl_le.h"
#include "proto_msg.h"
#include "pltest_device.h"

#include <cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#define EPOCHS 2
//  Synthetic data, 2 devices with contiguous shards of 200, batch 20: 10
//  iterations an epoch.
#define SHARD 200
#define ITERATIONS 10

#define FL_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 5, " \
    "\"threads\": 1, \"devices\": 2, \"mode\": \"fl\"}"

//  The end of an fl epoch as pipelearn-client sends it (STATS, PARAMS),
//  with the weights, sample count and closing iteration given.
static void
s_device_params (pltest_device_t *self, const float *w, uint64_t samples, uint32_t iteration)
{
    uint32_t id = self->plan.device_id;
    proto_msg_t *stats = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t st = { .epoch = self->epoch, .loss_sum = 2.3 * SHARD, .samples = SHARD };
    proto_msg_set_route (stats, id, self->epoch, iteration, 0);
    proto_msg_set_stats (stats, &st);
    cr_assert_eq (proto_msg_send (&stats, self->sock), 0);
    proto_msg_t *params = proto_msg_new (PROTO_MSG_PARAMS);
    proto_slab_t slab = self->slab;
    slab.sample_count = samples;
    proto_msg_set_route (params, id, self->epoch, iteration, 0);
    cr_assert_eq (proto_msg_set_slab_copy (params, &slab, w), 0);
    cr_assert_eq (proto_msg_send (&params, self->sock), 0);
}

//  Server with FL_CONFIG-like config, the scripted device 1 joined, then the
//  honest client 0; returns when training started (the MODEL is in).
static pid_t
s_start (pltest_run_t *run, const char *config, char *endpoint, size_t size, pltest_device_t *dev,
         int rcvhwm, pid_t *client)
{
    pltest_mkdtemp (run->dir, "hostile");
    pid_t server = pltest_start_server (run, "run", config, endpoint, size);
    pltest_device_join (dev, endpoint, 1, rcvhwm);
    *client = pltest_start_client (run, 0, endpoint);
    pltest_device_model (dev);
    return server;
}

//  The honest device's run finished: both exit 0, every epoch is in the
//  summary, model.ckpt is finite, the scripted device was dropped for why.
static void
s_expect_honest_run (pltest_run_t *run, pid_t server, pid_t client, const char *why)
{
    pltest_finish_run (run, "run", server, &client, 1);
    cr_expect (pltest_log_has (run, "server.log", why), "the server log does not say \"%s\"", why);
    cJSON *s = pltest_summary (run->dir, "run");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_expect_eq (cJSON_GetArraySize (epochs), EPOCHS, "summary.json has %d epoch(s)",
                  cJSON_GetArraySize (epochs));
    double loss = pltest_num (pltest_last_epoch (s), "test_loss");
    cr_expect (isfinite (loss), "test_loss %g", loss);
    cJSON_Delete (s);
    nn_model_t *m = pltest_load_model (run->dir, "run", "vgg5");
    const float *w = nn_model_weights_const (m);
    for (size_t i = 0; i < nn_model_weights_count (m); i++)
        cr_assert (isfinite (w[i]), "model.ckpt: weight %zu is %g", i, (double) w[i]);
    nn_model_destroy (&m);
}

//  fl: the scripted device ends its first round with PARAMS built by
//  poison from the MODEL's weights; it must be dropped for why.
static void
s_fl_poison (void (*poison) (float *w, size_t n, uint64_t *samples, uint32_t *iteration),
             const char *why)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pltest_device_t dev = { 0 };
    pid_t client;
    pid_t server = s_start (&run, FL_CONFIG, endpoint, sizeof endpoint, &dev, 0, &client);
    uint64_t samples = SHARD;
    uint32_t iteration = ITERATIONS;
    poison (dev.w, dev.slab.count, &samples, &iteration);
    s_device_params (&dev, dev.w, samples, iteration);
    cr_assert (pltest_wait_log (&run, "server.log", why, 60), "no \"%s\" in the server log", why);
    pltest_device_close (&dev);
    s_expect_honest_run (&run, server, client, why);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

static void
s_nan_weights (float *w, size_t n, uint64_t *samples, uint32_t *iteration)
{
    (void) samples, (void) iteration;
    for (size_t i = 0; i < n; i++)
        w[i] = NAN;
    *samples = 1;
}

static void
s_huge_count (float *w, size_t n, uint64_t *samples, uint32_t *iteration)
{
    (void) w, (void) n, (void) iteration;
    *samples = (uint64_t) 1 << 63;
}

static void
s_far_iteration (float *w, size_t n, uint64_t *samples, uint32_t *iteration)
{
    (void) w, (void) n, (void) samples;
    *iteration = 0xFFFFFFFFu;
}

Test (hostile, nan_weights_are_never_averaged, .timeout = 300)
{
    s_fl_poison (s_nan_weights, "device 1 dropped: PARAMS holds non-finite weights");
}

Test (hostile, sample_count_is_capped_at_the_shard, .timeout = 300)
{
    s_fl_poison (s_huge_count, "device 1 dropped: PARAMS claims 9223372036854775808 "
                 "samples; device 1's shard holds 200");
}

Test (hostile, a_device_cannot_move_the_round, .timeout = 300)
{
    s_fl_poison (s_far_iteration, "device 1 dropped: PARAMS closes iteration 4294967295");
}

//  ---------------------------------------------------------------------
//  Split modes: activations

#define SPLIT_CONFIG(mode, extra) \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 5, " \
    "\"threads\": 1, \"devices\": 2, \"mode\": \"" mode "\", \"split_point\": 1, " \
    "\"measure_link\": false, \"adaptive\": false" extra "}"

Test (hostile, nan_activations_never_reach_a_replica, .timeout = 300)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pltest_device_t dev = { 0 };
    pid_t client;
    pid_t server = s_start (&run, SPLIT_CONFIG ("sfl", ""), endpoint, sizeof endpoint, &dev, 0,
                            &client);
    //  The encoder refuses nothing here: a NaN tensor is valid on the wire.
    pltest_device_activations (&dev, NAN, 0);
    const char *why = "device 1 dropped: ACTIVATIONS hold non-finite values";
    cr_assert (pltest_wait_log (&run, "server.log", why, 60), "no \"%s\" in the server log", why);
    pltest_device_close (&dev);
    s_expect_honest_run (&run, server, client, why);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  Split modes: codec payloads (PROTOCOL.md, "Codecs")

#define CODEC_CONFIG SPLIT_CONFIG ("sfl", ", \"codec\": \"int8\"")

//  How the scripted device breaks its int8 ACTIVATIONS payload.
typedef enum {
    S_BAD_HEADER,       //  a reserved header byte set
    S_COUNT,            //  the payload's batch is one short of the descriptor's
    S_NAN_SCALE,        //  channel 0's scale NaN
    S_OTHER_CODEC       //  a valid fp16 payload: not the negotiated codec
} s_codec_attack_t;

//  ACTIVATIONS of the round's first micro-batch as an int8 (or, for
//  S_OTHER_CODEC, fp16) payload, damaged as attack says and sent as raw
//  frames, past proto's sender checks, as a hostile peer can.
static void
s_device_codec_activations (pltest_device_t *self, s_codec_attack_t attack)
{
    nn_model_spec_t spec;
    char err[256];
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0);
    nn_shape_t s = nn_model_spec_unit_output (&spec, (int) self->plan.split_point - 1);
    uint32_t n = self->plan.batch_size / self->plan.micro_batches;
    nn_codec_shape_t shape = { n, (uint32_t) s.h, (uint32_t) s.w, (uint32_t) s.c };
    size_t count = (size_t) nn_codec_shape_count (&shape);
    float *x = malloc (sizeof (float) * count);
    for (size_t i = 0; i < count; i++)
        x[i] = (float) (i % 13) * 0.1f;
    nn_codec_params_t params = { .id = attack == S_OTHER_CODEC ? NN_CODEC_FP16
                                                               : NN_CODEC_INT8 };
    nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, &shape, err, sizeof err);
    cr_assert_not_null (enc, "%s", err);
    size_t size = nn_codec_encoder_bytes (enc);
    uint8_t *payload = malloc (size);
    cr_assert_eq (nn_codec_encode (enc, payload, size, x, NULL, err, sizeof err), 0);
    nn_codec_encoder_destroy (&enc);
    free (x);
    int32_t labels[256];
    for (uint32_t i = 0; i < n; i++)
        labels[i] = (int32_t) (i % 10);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (msg, self->plan.device_id, self->epoch, self->iter, 0);
    proto_msg_set_last (msg, self->plan.micro_batches == 1);
    const uint32_t dims[4] = { shape.n, shape.h, shape.w, shape.c };
    cr_assert_eq (proto_msg_set_tensor_encoded (msg, payload, size, dims), 0);
    proto_msg_set_labels (msg, labels, n);
    free (payload);
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    int frames_count = proto_msg_encode (msg, frames, err, sizeof err);
    cr_assert (frames_count == 4, "encode: %s", err);
    proto_msg_destroy (&msg);
    //  Damage the payload (frame 2) in a copy libzmq then sends.
    zmq_msg_t bad;
    zmq_msg_init_size (&bad, zmq_msg_size (&frames[2]));
    uint8_t *b = zmq_msg_data (&bad);
    memcpy (b, zmq_msg_data (&frames[2]), zmq_msg_size (&bad));
    if (attack == S_BAD_HEADER)
        b[3] = 0x5a;
    else
    if (attack == S_COUNT)
        pl_le_put_u32 (b + 4, n - 1);
    else
    if (attack == S_NAN_SCALE)
        pl_le_put_f32 (b + 24, NAN);
    zmq_msg_move (&frames[2], &bad);        //  releases the valid payload first
    for (int i = 0; i < frames_count; i++)
        cr_assert_eq (zmq_msg_send (&frames[i], self->sock,
                                    i + 1 < frames_count ? ZMQ_SNDMORE : 0) >= 0, true,
                      "send frame %d: %s", i, zmq_strerror (errno));
}

static void
s_codec_attack (s_codec_attack_t attack, const char *why)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pltest_device_t dev = { 0 };
    pid_t client;
    pid_t server = s_start (&run, CODEC_CONFIG, endpoint, sizeof endpoint, &dev, 0, &client);
    //  The plan names the negotiated codecs.
    cr_assert_eq (dev.plan.codec_up, NN_CODEC_INT8);
    cr_assert_eq (dev.plan.codec_down, NN_CODEC_INT8);
    s_device_codec_activations (&dev, attack);
    cr_assert (pltest_wait_log (&run, "server.log", why, 60), "no \"%s\" in the server log",
               why);
    pltest_device_close (&dev);
    s_expect_honest_run (&run, server, client, why);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (hostile, codec_payload_with_a_bad_header_is_dropped, .timeout = 300)
{
    s_codec_attack (S_BAD_HEADER, "device 1 dropped: sent a malformed message (ACTIVATIONS: "
                    "codec: int8: reserved bytes must be 0)");
}

Test (hostile, codec_payload_of_another_count_is_dropped, .timeout = 300)
{
    s_codec_attack (S_COUNT, "device 1 dropped: sent a malformed message (ACTIVATIONS: "
                    "codec: int8: shape (19, 14, 14, 32) is not the expected (20, 14, 14, 32))");
}

Test (hostile, codec_payload_with_a_nan_scale_is_dropped, .timeout = 300)
{
    s_codec_attack (S_NAN_SCALE, "device 1 dropped: sent a malformed message (ACTIVATIONS: "
                    "codec: int8: channel 0: scale nan");
}

Test (hostile, codec_not_negotiated_is_dropped, .timeout = 300)
{
    s_codec_attack (S_OTHER_CODEC, "device 1 dropped: ACTIVATIONS (epoch 1, iteration 0, "
                    "micro-batch 0) in codec fp16; device 1's plan says int8");
}

//  A device that sends activations but never reads its gradients: the
//  server's queue for it is bounded (ZMQ_SNDHWM) and the device is dropped
//  when it is full; the server's memory stays bounded. round_timeout_s and
//  heartbeat_timeout_s are long, so only that drop can end the device's
//  round (a device that reads nothing does not answer ZMTP pings either).
//  The pace keeps fewer than N micro-batches waiting on the server (more is
//  a flood, dropped for that), slower under ASan, where the server is.
#define READER_RSS_LIMIT_KB (256L * 1024)

Test (hostile, a_device_that_never_reads_is_dropped, .timeout = 500)
{
    pltest_run_t run = { 0 };
    char endpoint[256];
    pltest_device_t dev = { 0 };
    pid_t client;
    pid_t server = s_start (&run, SPLIT_CONFIG ("pipelearn", ", \"micro_batches\": 4, "
                                                "\"round_timeout_s\": 3600, "
                                                "\"heartbeat_timeout_s\": 3600"),
                            endpoint, sizeof endpoint, &dev, 1, &client);
    const char *why = "device 1 dropped: not reading";
    double deadline = pl_monotonic () + (PLTEST_UNDER_ASAN ? 240 : 120);
    int sent = 0;
    while (!pltest_log_has (&run, "server.log", "device 1 dropped: ")
           && pl_monotonic () < deadline) {
        pltest_device_activations (&dev, 0.5f, 0);
        sent++;
        usleep (PLTEST_UNDER_ASAN ? 400000 : 100000);
    }
    cr_log_info ("the scripted device sent %d ACTIVATIONS before it was dropped", sent);
    cr_assert (pltest_log_has (&run, "server.log", why), "after %d ACTIVATIONS never read, "
               "no \"%s\" in the server log", sent, why);
    pltest_device_close (&dev);
    s_expect_honest_run (&run, server, client, why);
    cJSON *s = pltest_summary (run.dir, "run");
    double rss_kb = pltest_num (s, "peak_rss_kb");
    cr_log_info ("server peak RSS %.0f KiB", rss_kb);
    cr_expect (PLTEST_UNDER_ASAN || rss_kb < READER_RSS_LIMIT_KB,
               "server peak RSS %.0f KiB (limit %ld KiB)", rss_kb, READER_RSS_LIMIT_KB);
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  Divergence

//  Every DIR/run/checkpoints/round-*/devpart.ckpt (fl: the whole model)
//  loads and is finite; returns how many there are.
static int
s_checkpoints_finite (const char *dir)
{
    char path[4096];
    pltest_path (path, dir, "run/checkpoints");
    DIR *d = opendir (path);
    cr_assert_not_null (d, "no %s", path);
    nn_model_spec_t spec;
    char err[512];
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0);
    int count = 0;
    struct dirent *e;
    while ((e = readdir (d))) {
        if (strncmp (e->d_name, "round-", 6) != 0 || strstr (e->d_name, ".tmp"))
            continue;
        char file[4400];
        snprintf (file, sizeof file, "%s/%s/devpart.ckpt", path, e->d_name);
        nn_model_t *m = nn_model_new (&spec, 0, spec.units_count, 1, err, sizeof err);
        cr_assert_eq (nn_checkpoint_load (file, m, err, sizeof err), 0, "%s", err);
        const float *w = nn_model_weights_const (m);
        for (size_t i = 0; i < nn_model_weights_count (m); i++)
            cr_assert (isfinite (w[i]), "%s: weight %zu is %g", file, i, (double) w[i]);
        nn_model_destroy (&m);
        count++;
    }
    closedir (d);
    return count;
}

Test (hostile, a_diverging_fl_run_stops_cleanly, .timeout = 300)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "hostile");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run",
                                   "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", "
                                   "\"samples\": 400, \"test_samples\": 100, "
                                   "\"batch_size\": 20, \"epochs\": 2, \"seed\": 5, "
                                   "\"threads\": 1, \"devices\": 2, \"mode\": \"fl\", "
                                   "\"learning_rate\": 1e6}", endpoint, sizeof endpoint);
    pid_t clients[2] = { pltest_start_client (&run, 0, endpoint),
                         pltest_start_client (&run, 1, endpoint) };
    //  Not a stall until round_timeout_s (600 s): the run ends by itself.
    int src = pltest_wait (&run, server, pl_monotonic () + 120);
    int crc[2];
    for (int i = 0; i < 2; i++)
        crc[i] = pltest_wait (&run, clients[i], pl_monotonic () + 30);
    if (src != 3 || crc[0] != 3 || crc[1] != 3) {
        pltest_dump_logs (&run);
        pltest_kill_all (&run);
    }
    cr_assert_eq (src, 3, "server exit status %d, want 3 (diverged)", src);
    for (int i = 0; i < 2; i++) {
        char log[32];
        snprintf (log, sizeof log, "client%d.log", i);
        cr_expect_eq (crc[i], 3, "client %d exit status %d, want 3 (diverged)", i, crc[i]);
        cr_expect (pltest_log_has (&run, log, "training diverged"), "%s does not say why", log);
        cr_expect (!pltest_log_has (&run, log, "sending STATS failed"), "%s: STATS refused", log);
    }
    cr_expect (pltest_log_has (&run, "server.log", "training diverged"),
               "the server log does not say the training diverged");
    cr_expect (pltest_log_has (&run, "server.log", "lower learning_rate"),
               "the server log does not say what to do");
    //  The last good checkpoint is kept and nothing non-finite was written.
    cr_expect (s_checkpoints_finite (run.dir) >= 1, "no checkpoint was kept");
    char path[4096];
    pltest_path (path, run.dir, "run/model.ckpt");
    cr_expect (access (path, F_OK) != 0, "a diverged run wrote model.ckpt");
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  Connections without a key

//  Issue 19 (2): 150 TCP connections that never say a word, against a
//  server allowed 128 open files, while two honest devices train. libzmq
//  accepts them before any handshake; they hold descriptors until
//  handshake_timeout_s closes them. Results written meanwhile wait for a
//  descriptor, and timeline events are kept until written: the run
//  finishes and every epoch is in summary.json and timeline.csv.
#define IDLE_CONNECTIONS 150
#define FLOOD_EPOCHS 6

Test (hostile, idle_connections_cannot_exhaust_the_server, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "hostile");
    char endpoint[256];
    run.nofile = 128;
    pid_t server = pltest_start_server (&run, "run",
                                   "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", "
                                   "\"samples\": 800, \"test_samples\": 100, "
                                   "\"batch_size\": 50, \"epochs\": 6, \"seed\": 5, "
                                   "\"split_point\": 1, \"threads\": 1, \"devices\": 2, "
                                   "\"mode\": \"sfl\", \"measure_link\": false}",
                                   endpoint, sizeof endpoint);
    run.nofile = 0;
    pid_t clients[2] = { pltest_start_client (&run, 0, endpoint), pltest_start_client (&run, 1, endpoint) };
    cr_assert (pltest_wait_log (&run, "server.log", "all 2 device(s) joined", 60),
               "the run did not start");
    int port = atoi (strrchr (endpoint, ':') + 1);
    int fds[IDLE_CONNECTIONS];
    int opened = 0;
    for (int i = 0; i < IDLE_CONNECTIONS; i++) {
        fds[i] = socket (AF_INET, SOCK_STREAM, 0);
        cr_assert (fds[i] >= 0, "socket: %s", strerror (errno));
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                                 .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        opened += connect (fds[i], (struct sockaddr *) &a, sizeof a) == 0;
    }
    cr_log_info ("%d of %d idle connections opened", opened, IDLE_CONNECTIONS);
    pltest_finish_run (&run, "run", server, clients, 2);
    for (int i = 0; i < IDLE_CONNECTIONS; i++)
        close (fds[i]);
    cJSON *s = pltest_summary (run.dir, "run");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")),
                  FLOOD_EPOCHS);
    cJSON_Delete (s);
    pltest_csv_t csv = pltest_load_csv (run.dir, "run");
    bool seen[FLOOD_EPOCHS + 1] = { false };
    for (int i = 0; i < csv.count; i++)
        if (csv.rows[i].epoch >= 1 && csv.rows[i].epoch <= FLOOD_EPOCHS)
            seen[csv.rows[i].epoch] = true;
    free (csv.rows);
    for (int e = 1; e <= FLOOD_EPOCHS; e++)
        cr_expect (seen[e], "timeline.csv has no row of epoch %d", e);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
