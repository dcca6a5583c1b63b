/*  test_rogue.c: peers that are not pipelearn-client against the real
    pipelearn-server (suite 'net').

    - rogue: while two honest clients train, a peer sends oversized frame
      claims, truncated headers, wrong shapes and a flood of HELLOs; each
      gets an ERROR (or its connection dropped by libzmq) and the honest run
      finishes with the same model it reaches undisturbed, in bounded memory.
    - fedavg: FedAvg weights devices by their sample counts. Scripted fl
      devices send PARAMS slabs the test chooses, so the averaged model in
      model.ckpt can be checked exactly; a real dirichlet run shows unequal
      shards reach the summary.

    The binaries run as child processes on tcp://127.0.0.1:* (the server
    writes its endpoint to a file); the synthetic dataset keeps runs short. */
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
#include "nn_model.h"
#include "pl_le.h"
#include "proto_msg.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define REPLY_TIMEOUT_MS 10000
#define FLOOD_HELLOS 2000
#define SERVER_RSS_LIMIT_KB (128L * 1024)

//  ---------------------------------------------------------------------
//  Processes (as in test_daemons.c)

//  Wait until the server log says every device joined (training started).
static void
s_wait_started (pltest_run_t *run, pid_t server)
{
    char path[4096];
    pltest_path (path, run->dir, "server.log");
    double deadline = pl_monotonic () + 60;
    while (pl_monotonic () < deadline) {
        char *text = pltest_read (path);
        bool started = text && strstr (text, "device(s) joined; training");
        free (text);
        if (started)
            return;
        int st;
        if (waitpid (server, &st, WNOHANG) != 0) {
            pltest_dump_logs (run);
            pltest_kill_all (run);
            cr_assert_fail ("the server exited before training started");
        }
        usleep (20000);
    }
    pltest_dump_logs (run);
    pltest_kill_all (run);
    cr_assert_fail ("the devices did not join within 60 s");
}

static bool
s_alive (pid_t pid)
{
    int st;
    return waitpid (pid, &st, WNOHANG) == 0;
}

//  ---------------------------------------------------------------------
//  Peers played by the test

static void *
s_dealer (void *ctx, const char *endpoint)
{
    void *sock = zmq_socket (ctx, ZMQ_DEALER);
    cr_assert_not_null (sock);
    int linger = 0, timeout_ms = REPLY_TIMEOUT_MS;
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    //  A DEALER blocks a send while it has no peer: if the server is gone,
    //  fail the test with a message instead of hanging until meson's timeout.
    zmq_setsockopt (sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    cr_assert_eq (zmq_connect (sock, endpoint), 0, "connect %s: %s", endpoint,
                  zmq_strerror (errno));
    return sock;
}

//  The next message on sock, decoded; fails the test after REPLY_TIMEOUT_MS.
static proto_msg_t *
s_recv (void *sock, const char *what)
{
    zmq_pollitem_t item = { sock, 0, ZMQ_POLLIN, 0 };
    cr_assert_eq (zmq_poll (&item, 1, REPLY_TIMEOUT_MS), 1, "%s: no message from the server",
                  what);
    proto_msg_t *msg = NULL;
    char err[512];
    int rc = proto_msg_recv (&msg, sock, NULL, err, sizeof err);
    cr_assert_eq (rc, 0, "%s: the server's message does not decode: %s", what, err);
    return msg;
}

static bool
s_is_heartbeat (zmq_msg_t *frame)
{
    proto_header_t h;
    char err[256];
    return proto_header_decode (&h, zmq_msg_data (frame), zmq_msg_size (frame), err,
                                sizeof err) == 0 && h.type == PROTO_MSG_HEARTBEAT;
}

//  Expect ERROR with this code as the server's next message. The header is
//  checked on its own first (proto_header_decode), so a reply that is not
//  ERROR fails on its type, not on a payload mismatch.
static void
s_expect_error (void *sock, uint32_t code, const char *what)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    int count = 0;
    int more = 0;
    //  HEARTBEATs may come at any time, before the start too (PROTOCOL.md).
    do {
        for (int i = 0; i < count; i++)
            zmq_msg_close (&frames[i]);
        zmq_pollitem_t item = { sock, 0, ZMQ_POLLIN, 0 };
        cr_assert_eq (zmq_poll (&item, 1, REPLY_TIMEOUT_MS), 1,
                      "%s: no reply to the rogue peer", what);
        count = 0;
        more = 1;
        while (more) {
            cr_assert (count < PROTO_MAX_FRAMES, "%s: reply has too many frames", what);
            zmq_msg_init (&frames[count]);
            cr_assert (zmq_msg_recv (&frames[count], sock, 0) >= 0, "%s: recv: %s", what,
                       zmq_strerror (errno));
            more = zmq_msg_more (&frames[count]);
            count++;
        }
    } while (s_is_heartbeat (&frames[0]));
    char err[512];
    proto_header_t h;
    cr_assert_eq (proto_header_decode (&h, zmq_msg_data (&frames[0]), zmq_msg_size (&frames[0]),
                                       err, sizeof err), 0, "%s: reply header: %s", what, err);
    cr_assert_eq (h.type, PROTO_MSG_ERROR, "%s: reply is %s, want ERROR", what,
                  proto_type_name (h.type));
    proto_msg_t *msg = NULL;
    cr_assert_eq (proto_msg_decode_frames (&msg, frames, count, NULL, err, sizeof err), 0,
                  "%s: ERROR payload: %s", what, err);
    for (int i = 0; i < count; i++)
        zmq_msg_close (&frames[i]);
    cr_assert_eq (proto_msg_error_code (msg), code, "%s: ERROR code %u (\"%s\"), want %u",
                  what, proto_msg_error_code (msg), proto_msg_error_text (msg), code);
    proto_msg_destroy (&msg);
}

static void
s_send_hello (void *sock, int requested_id, uint64_t samples, const char *name)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t hello = { .protocol_version = PROTO_VERSION,
                            .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                            .requested_device_id = requested_id, .sample_count = samples };
    snprintf (hello.name, sizeof hello.name, "%s", name);
    cr_assert_eq (proto_msg_set_hello (msg, &hello), 0);
    cr_assert_eq (proto_msg_send (&msg, sock), 0, "send HELLO: %s", zmq_strerror (errno));
}

//  The TCP port of "tcp://127.0.0.1:PORT".
static int
s_port_of (const char *endpoint)
{
    const char *colon = strrchr (endpoint, ':');
    cr_assert_not_null (colon, "endpoint %s", endpoint);
    int port = atoi (colon + 1);
    cr_assert (port > 0 && port < 65536, "endpoint %s", endpoint);
    return port;
}

static void
s_write_all (int fd, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size > 0) {
        ssize_t n = send (fd, p, size, MSG_NOSIGNAL);
        cr_assert (n > 0, "raw send: %s", strerror (errno));
        p += n;
        size -= (size_t) n;
    }
}

//  A raw ZMTP 3.0 peer (NULL mechanism, DEALER) that sends a valid
//  ACTIVATIONS header frame and then announces a frame of claim bytes,
//  sending only a little of it. libzmq reads the size first, so a claim
//  above the server's ZMQ_MAXMSGSIZE must close the connection at once,
//  before anything of that size is allocated. true if the server closed
//  the connection within timeout_ms; *received_out gets the bytes the
//  server sent meanwhile (its greeting, READY, maybe an ERROR). Reading
//  stops early (the connection still open) once `enough` bytes are in.
static bool
s_raw_claim (int port, uint64_t claim, int timeout_ms, size_t enough, size_t *received_out)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    cr_assert (fd >= 0, "socket: %s", strerror (errno));
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    cr_assert_eq (connect (fd, (struct sockaddr *) &addr, sizeof addr), 0, "connect: %s",
                  strerror (errno));
    //  Greeting: signature, version 3.0, mechanism NULL, as-server 0, filler.
    uint8_t greeting[64] = { 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0, 'N', 'U', 'L', 'L' };
    s_write_all (fd, greeting, sizeof greeting);
    //  Wait for the server's greeting before going on: libzmq 4.3 drops a
    //  peer whose greeting arrives in one segment with what follows it.
    size_t got = 0;
    uint8_t theirs[64];
    while (got < sizeof theirs) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        cr_assert_eq (poll (&p, 1, REPLY_TIMEOUT_MS), 1, "no ZMTP greeting from the server");
        ssize_t n = recv (fd, theirs + got, sizeof theirs - got, 0);
        cr_assert (n > 0, "the server closed the connection during the greeting");
        got += (size_t) n;
    }
    cr_assert (theirs[0] == 0xFF && theirs[9] == 0x7F && theirs[10] == 3,
               "the server's greeting is not ZMTP 3");
    //  READY command with Socket-Type DEALER.
    uint8_t ready[2 + 28] = { 0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11 };
    memcpy (ready + 9, "Socket-Type", 11);
    ready[23] = 6;              //  value length, 4 bytes big-endian (20..22 stay 0)
    memcpy (ready + 24, "DEALER", 6);
    s_write_all (fd, ready, sizeof ready);
    //  Frame 1: a valid ACTIVATIONS header, MORE set (short frame).
    proto_header_t h = { .magic = PROTO_MAGIC, .version = PROTO_VERSION,
                         .type = PROTO_MSG_ACTIVATIONS, .epoch = 1 };
    uint8_t header[2 + PROTO_HEADER_SIZE] = { 0x01, PROTO_HEADER_SIZE };
    proto_header_encode (header + 2, &h);
    s_write_all (fd, header, sizeof header);
    //  Frame 2: long frame, 8-byte big-endian size, then a token of data.
    uint8_t big[9 + 1024] = { 0x02 };
    for (int i = 0; i < 8; i++)
        big[1 + i] = (uint8_t) (claim >> (56 - 8 * i));
    s_write_all (fd, big, sizeof big);

    //  Read (and drop) the server's greeting until it closes the connection.
    bool closed = false;
    size_t received = got;
    double deadline = pl_monotonic () + timeout_ms / 1000.0;
    while (!closed && received < enough && pl_monotonic () < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int left = (int) ((deadline - pl_monotonic ()) * 1000) + 1;
        if (poll (&p, 1, left) <= 0)
            break;
        uint8_t sink[256];
        ssize_t n = recv (fd, sink, sizeof sink, 0);
        closed = n == 0 || (n < 0 && errno == ECONNRESET);
        if (n > 0)
            received += (size_t) n;
    }
    close (fd);
    *received_out = received;
    return closed;
}

//  ---------------------------------------------------------------------
//  rogue

//  pipelearn, 2 devices, 6 epochs. The rogue phase happens while the run
//  trains: device 0 is stopped (SIGSTOP) once training starts and resumed
//  after the phase, so the run cannot end first however fast this host is
//  (it did once: the phase takes 3 s or more, the run about 4 s); device 1
//  trains its epoch meanwhile and then waits on device 0 at the
//  aggregation. vgg5-nobn keeps the run deterministic so a disturbed run
//  can be compared with an undisturbed one.
#define ROGUE_CONFIG \
    "{\"model\": \"vgg5-nobn\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 500, \"batch_size\": 50, \"epochs\": 6, \"seed\": 3, " \
    "\"learning_rate\": 0.01, \"momentum\": 0.9, \"split_point\": 2, \"threads\": 1, " \
    "\"devices\": 2, \"mode\": \"pipelearn\", \"micro_batches\": 5, " \
    "\"aggregation_frequency\": -1}"

Test (rogue, malformed_and_flooding_peers_do_not_disturb_the_run, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run", ROGUE_CONFIG, endpoint, sizeof endpoint);
    pid_t clients[2] = { pltest_start_client (&run, 0, endpoint), pltest_start_client (&run, 1, endpoint) };
    s_wait_started (&run, server);
    cr_assert_eq (kill (clients[0], SIGSTOP), 0);
    double rogue_start = pl_monotonic ();

    void *ctx = zmq_ctx_new ();
    void *rogue = s_dealer (ctx, endpoint);

    //  (a) Frame size claims above the server's ZMQ_MAXMSGSIZE: just above
    //  the protocol's default cap, and absurd. libzmq drops the connection.
    //  The control first: the raw peer is a valid ZMTP peer, so a frame of
    //  the size it really sends (1024 bytes) is received and answered (an
    //  ACTIVATIONS without its labels frame is malformed), not dropped.
    //  Greeting (64) + READY (>= 30) + an ERROR (header frame alone is 42):
    //  an ERROR is proof the frame was delivered (a dropped peer gets none).
    int port = s_port_of (endpoint);
    size_t received = 0;
    const size_t with_error = 64 + 30 + 42 + 1;
    cr_assert_not (s_raw_claim (port, 1024, REPLY_TIMEOUT_MS, with_error, &received),
                   "the raw ZMTP peer is dropped even with an honest frame size");
    cr_assert (received >= with_error, "the raw ZMTP peer got %zu bytes in %d ms, no ERROR "
               "reply", received, REPLY_TIMEOUT_MS);
    //  64 MiB is far below the protocol's cap but far above anything this
    //  run sends (its largest frame is an EVENTS frame of 2 MiB): the server
    //  must size its limit to the run, not to the protocol.
    uint64_t claims[] = { (uint64_t) 64 << 20, (uint64_t) PROTO_DEFAULT_MAX_FRAME_BYTES + 1,
                          (uint64_t) 1 << 40 };
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++)
        cr_expect (s_raw_claim (port, claims[i], REPLY_TIMEOUT_MS, SIZE_MAX, &received),
                   "a frame announced as %llu bytes did not get the connection dropped",
                   (unsigned long long) claims[i]);
    cr_assert (s_alive (server), "the server died on an oversized frame claim");

    //  (b) A header frame cut to 10 bytes (valid magic and version, so it is
    //  the length that fails).
    proto_header_t h = { .magic = PROTO_MAGIC, .version = PROTO_VERSION,
                         .type = PROTO_MSG_HELLO };
    uint8_t hdr[PROTO_HEADER_SIZE];
    proto_header_encode (hdr, &h);
    cr_assert_eq (zmq_send (rogue, hdr, 10, 0), 10);
    s_expect_error (rogue, PROTO_ERR_MALFORMED, "truncated header");

    //  (c) HELLO while the run is full is refused; ACTIVATIONS of a shape the
    //  split point does not produce are malformed (decoded against the
    //  server's limits before any state check).
    s_send_hello (rogue, -1, 1000, "rogue");
    s_expect_error (rogue, PROTO_ERR_REFUSED, "HELLO to a full run");
    proto_msg_t *act = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    const uint32_t dims[4] = { 10, 3, 3, 3 };
    float data[10 * 3 * 3 * 3] = { 0 };
    int32_t labels[10] = { 0 };
    cr_assert_eq (proto_msg_set_tensor_copy (act, data, dims, 4), 0);
    proto_msg_set_labels (act, labels, 10);
    proto_msg_set_route (act, 0, 1, 0, 0);
    cr_assert_eq (proto_msg_send (&act, rogue), 0, "send ACTIVATIONS: %s", zmq_strerror (errno));
    s_expect_error (rogue, PROTO_ERR_MALFORMED, "ACTIVATIONS with a wrong shape");

    //  (d) A flood of HELLOs: answered (refused, none accepted) until the
    //  address has earned too many ERRORs; then it is ignored. The flood goes
    //  on regardless; the honest devices (joined) are not affected.
    double flood_start = pl_monotonic ();
    int answered = 0;
    for (int i = 0; i < FLOOD_HELLOS; i++) {
        s_send_hello (rogue, i % 2, 1000, "flood");
        if (answered == i) {
            zmq_pollitem_t item = { rogue, 0, ZMQ_POLLIN, 0 };
            if (zmq_poll (&item, 1, 2000) == 1) {
                char what[64];
                snprintf (what, sizeof what, "HELLO %d of the flood", i + 1);
                s_expect_error (rogue, PROTO_ERR_REFUSED, what);
                answered++;
            }
        }
    }
    double flood_s = pl_monotonic () - flood_start;
    cr_log_info ("flood: %d of %d HELLOs answered before the rate limit", answered,
                 FLOOD_HELLOS);
    cr_expect (answered > 0 && answered < 64, "%d HELLOs answered: no rate limit", answered);
    cr_expect (pltest_log_has (&run, "server.log", "rate-limiting 127.0.0.1"),
               "the rate limit was not logged");
    bool alive = s_alive (server);
    cr_log_info ("rogue phase %.2f s (flood of %d HELLOs %.2f s); server alive after: %s",
                 pl_monotonic () - rogue_start, FLOOD_HELLOS, flood_s, alive ? "yes" : "no");
    cr_expect (alive, "the server died during the rogue phase");
    cr_assert_eq (kill (clients[0], SIGCONT), 0);
    zmq_close (rogue);
    zmq_ctx_term (ctx);

    pltest_finish_run (&run, "run", server, clients, 2);
    cJSON *s = pltest_summary (run.dir, "run");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 6);
    double acc = pltest_num (pltest_last_epoch (s), "test_acc");
    cr_expect (acc > 0.5, "test accuracy %.3f with a rogue peer (want > 0.5)", acc);
    double rss_kb = pltest_num (s, "peak_rss_kb");
    cr_log_info ("server peak RSS %.0f KiB", rss_kb);
    cr_expect (PLTEST_UNDER_ASAN || rss_kb < SERVER_RSS_LIMIT_KB, "server peak RSS %.0f KiB (limit %ld KiB)",
               rss_kb, SERVER_RSS_LIMIT_KB);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (pltest_last_epoch (s), "devices");
    cr_expect_eq (cJSON_GetArraySize (devs), 2, "the summary lists a device the rogue added");
    cJSON_Delete (s);

    //  Not disturbed: the same run without the rogue ends with the same model.
    pltest_run_daemons (&run, "clean", ROGUE_CONFIG, 2);
    nn_model_t *a = pltest_load_model (run.dir, "run", "vgg5-nobn");
    nn_model_t *b = pltest_load_model (run.dir, "clean", "vgg5-nobn");
    const float *wa = nn_model_weights_const (a), *wb = nn_model_weights_const (b);
    double worst = 0.0;
    for (size_t i = 0; i < nn_model_weights_count (a); i++) {
        double d = fabs ((double) wa[i] - wb[i]) / (1.0 + fabs ((double) wb[i]));
        if (!(d <= worst))
            worst = d;
    }
    cr_expect (worst < 1e-4, "the run with a rogue peer differs from the clean one by %g",
               worst);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  fedavg

//  The fedavg run: 400 samples over 2 devices (contiguous shards of 200),
//  batch 20: 10 iterations an epoch.
#define FEDAVG_ITERATIONS 10

//  One scripted fl device: joined, holding the MODEL it was sent.
typedef struct {
    void *sock;
    uint32_t id;
    proto_slab_t slab;          //  of the MODEL
    size_t count;
} s_fake_t;

static void
s_fake_join (s_fake_t *self, void *ctx, const char *endpoint, int id, uint64_t samples)
{
    self->sock = s_dealer (ctx, endpoint);
    char name[32];
    snprintf (name, sizeof name, "scripted%d", id);
    s_send_hello (self->sock, id, samples, name);
    proto_msg_t *msg = s_recv (self->sock, "WELCOME");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_WELCOME, "got %s, want WELCOME",
                  proto_type_name (proto_msg_type (msg)));
    self->id = proto_msg_assign (msg)->device_id;
    cr_assert_eq (self->id, (uint32_t) id);
    proto_msg_destroy (&msg);
}

//  The MODEL of epoch 1 (HEARTBEATs skipped); returns its weights (caller frees).
static float *
s_fake_model (s_fake_t *self)
{
    while (true) {
        proto_msg_t *msg = s_recv (self->sock, "MODEL");
        int type = proto_msg_type (msg);
        if (type == PROTO_MSG_HEARTBEAT) {
            proto_msg_destroy (&msg);
            continue;
        }
        cr_assert_eq (type, PROTO_MSG_MODEL, "got %s, want MODEL", proto_type_name (type));
        self->slab = *proto_msg_slab (msg);
        self->count = proto_msg_tensor_count (msg);
        cr_assert_eq (self->count, self->slab.count);
        float *w = malloc (sizeof (float) * self->count);
        memcpy (w, proto_msg_tensor_data (msg), sizeof (float) * self->count);
        proto_msg_destroy (&msg);
        return w;
    }
}

//  End epoch 1 the way pipelearn-client does: STATS, then PARAMS closing
//  the epoch's last iteration (the server checks it: FEDAVG_ITERATIONS).
static void
s_fake_end_epoch (s_fake_t *self, const float *w, uint64_t samples)
{
    proto_msg_t *stats = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t st = { .forward_s = 0.5, .epoch = 1 };
    proto_msg_set_route (stats, self->id, 1, 0, 0);
    proto_msg_set_stats (stats, &st);
    cr_assert_eq (proto_msg_send (&stats, self->sock), 0, "send STATS: %s",
                  zmq_strerror (errno));
    proto_msg_t *params = proto_msg_new (PROTO_MSG_PARAMS);
    proto_slab_t slab = self->slab;
    slab.sample_count = samples;
    proto_msg_set_route (params, self->id, 1, FEDAVG_ITERATIONS, 0);
    cr_assert_eq (proto_msg_set_slab_copy (params, &slab, w), 0);
    cr_assert_eq (proto_msg_send (&params, self->sock), 0, "send PARAMS: %s",
                  zmq_strerror (errno));
}

//  Two scripted fl devices claiming 150 and 50 samples (the server caps a
//  claim at the device's shard, 200 here) send slabs a and b; the server's
//  model.ckpt must be (150 a + 50 b) / 200, which an unweighted mean misses
//  by far more than the tolerance.
Test (fedavg, weights_are_proportional_to_samples, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "fedavg",
                                   "{\"model\": \"vgg5-nobn\", \"dataset\": \"synthetic\", "
                                   "\"samples\": 400, \"test_samples\": 100, "
                                   "\"batch_size\": 20, \"epochs\": 1, \"seed\": 5, "
                                   "\"devices\": 2, \"mode\": \"fl\"}",
                                   endpoint, sizeof endpoint);
    void *ctx = zmq_ctx_new ();
    const uint64_t samples[2] = { 150, 50 };
    s_fake_t fake[2] = { { 0 } };
    for (int i = 0; i < 2; i++)
        s_fake_join (&fake[i], ctx, endpoint, i, samples[i]);
    float *init = s_fake_model (&fake[0]);
    free (s_fake_model (&fake[1]));
    size_t n = fake[0].count;
    cr_assert_eq (fake[1].count, n);
    //  Two different slabs near the initial weights (evaluation stays finite).
    float *a = malloc (sizeof (float) * n), *b = malloc (sizeof (float) * n);
    for (size_t i = 0; i < n; i++) {
        a[i] = init[i] + 0.01f * (float) sin ((double) i);
        b[i] = 0.5f * init[i] - 0.02f * (float) cos (0.5 * (double) i);
    }
    s_fake_end_epoch (&fake[0], a, samples[0]);
    s_fake_end_epoch (&fake[1], b, samples[1]);
    //  The server closes the run with BYE to each (HEARTBEATs may come first).
    for (int i = 0; i < 2; i++)
        while (true) {
            proto_msg_t *msg = s_recv (fake[i].sock, "BYE");
            int type = proto_msg_type (msg);
            proto_msg_destroy (&msg);
            if (type == PROTO_MSG_BYE)
                break;
            cr_assert_eq (type, PROTO_MSG_HEARTBEAT, "got %s, want BYE", proto_type_name (type));
        }
    int src = pltest_wait (&run, server, pl_monotonic () + 60);
    if (src != 0)
        pltest_dump_logs (&run);
    cr_assert_eq (src, 0, "server exit status %d", src);
    for (int i = 0; i < 2; i++)
        zmq_close (fake[i].sock);
    zmq_ctx_term (ctx);

    nn_model_t *m = pltest_load_model (run.dir, "fedavg", "vgg5-nobn");
    cr_assert_eq (nn_model_weights_count (m), n);
    const float *w = nn_model_weights_const (m);
    double worst = 0.0, unweighted_gap = 0.0;
    for (size_t i = 0; i < n; i++) {
        double want = (150.0 * a[i] + 50.0 * b[i]) / 200.0;
        double d = fabs (w[i] - want) / (1.0 + fabs (want));
        if (!(d <= worst))
            worst = d;
        double mean = 0.5 * ((double) a[i] + b[i]);
        double g = fabs (mean - want) / (1.0 + fabs (want));
        if (g > unweighted_gap)
            unweighted_gap = g;
    }
    cr_log_info ("FedAvg by samples: max relative error %g (an unweighted mean is %g off)",
                 worst, unweighted_gap);
    cr_assert (unweighted_gap > 1e-3, "the two slabs are too close to tell the weights apart");
    cr_expect (worst < 1e-6, "model.ckpt is not the 150:50 sample-weighted average "
               "(max relative error %g)", worst);
    cJSON *s = pltest_summary (run.dir, "fedavg");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (pltest_last_epoch (s), "devices");
    cr_assert_eq (cJSON_GetArraySize (devs), 2);
    for (int i = 0; i < 2; i++)
        cr_expect_eq (pltest_num (cJSON_GetArrayItem (devs, i), "samples"), (double) samples[i],
                      "summary devices[%d].samples", i);
    cJSON_Delete (s);
    nn_model_destroy (&m);
    free (init);
    free (a);
    free (b);
    pltest_rmtree (run.dir);
}

//  The next message that is not a HEARTBEAT.
static proto_msg_t *
s_fake_next (s_fake_t *self, const char *what)
{
    while (true) {
        proto_msg_t *msg = s_recv (self->sock, what);
        if (proto_msg_type (msg) != PROTO_MSG_HEARTBEAT)
            return msg;
        proto_msg_destroy (&msg);
    }
}

//  BN calibration (bn_calibration_batches, PROTOCOL.md "Calibration") with
//  three scripted fl devices of 200 samples each. After FedAvg each gets a
//  MODEL with CALIBRATE holding the whole averaged model. Devices 0 and 1
//  answer with buffers the test chooses (running means 1 and -1 apart, so
//  the spread between them counts); device 2 answers with a NaN and must be
//  dropped, the run going on without it. model.ckpt's statistics must be
//  the mixture of devices 0 and 1 (equal shards: mean (m0 + m1) / 2, var
//  (v0 + m0^2 + v1 + m1^2) / 2 - mean^2), not device 2's and not the plain
//  average of the variances.
Test (fedavg, calibration_pools_the_devices_bn_statistics, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "calib",
                                   "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", "
                                   "\"samples\": 600, \"test_samples\": 100, "
                                   "\"batch_size\": 20, \"epochs\": 1, \"seed\": 5, "
                                   "\"devices\": 3, \"mode\": \"fl\", "
                                   "\"bn_calibration_batches\": 2}",
                                   endpoint, sizeof endpoint);
    void *ctx = zmq_ctx_new ();
    s_fake_t fake[3] = { { 0 } };
    float *w[3];
    for (int i = 0; i < 3; i++)
        s_fake_join (&fake[i], ctx, endpoint, i, 200);
    for (int i = 0; i < 3; i++)
        w[i] = s_fake_model (&fake[i]);
    size_t n = fake[0].count;
    nn_model_spec_t spec;
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, NULL, 0), 0);
    nn_model_t *ref = nn_model_new (&spec, 0, spec.units_count, 1, NULL, 0);
    size_t params = nn_model_params_count (ref), buffers = n - params;
    cr_assert_eq (nn_model_weights_count (ref), n);
    cr_assert_gt (buffers, 0);
    for (int i = 0; i < 3; i++)
        s_fake_end_epoch (&fake[i], w[i], 200);
    //  The buffers each device reports: per BN layer running_mean then
    //  running_var (the tensor table says which float is which).
    float *buf[3];
    for (int i = 0; i < 3; i++) {
        proto_msg_t *msg = s_fake_next (&fake[i], "MODEL with CALIBRATE");
        cr_assert_eq (proto_msg_type (msg), PROTO_MSG_MODEL);
        cr_assert (proto_msg_is_calibrate (msg), "device %d: MODEL without CALIBRATE", i);
        cr_assert_eq (proto_msg_slab (msg)->count, n, "device %d: not the whole model", i);
        proto_msg_destroy (&msg);
        buf[i] = malloc (sizeof (float) * buffers);
        for (int t = 0; t < nn_model_tensors_count (ref); t++) {
            nn_tensor_info_t info;
            nn_model_tensor (ref, t, &info);
            if (info.trainable)
                continue;
            bool var = strstr (info.name, "running_var") != NULL;
            for (size_t k = 0; k < info.count; k++)
                buf[i][info.offset - params + k] =
                    var ? (i == 0 ? 0.5f : 2.0f) : (i == 0 ? 1.0f : -1.0f) + 0.01f * (float) k;
        }
        if (i == 2)
            buf[i][buffers / 2] = NAN;
        proto_msg_t *up = proto_msg_new (PROTO_MSG_PARAMS);
        proto_slab_t slab = fake[i].slab;
        slab.count = buffers;
        slab.sample_count = 200;
        proto_msg_set_route (up, fake[i].id, 1, 0, 0);
        proto_msg_set_calibrate (up, true);
        cr_assert_eq (proto_msg_set_slab_copy (up, &slab, buf[i]), 0);
        cr_assert_eq (proto_msg_send (&up, fake[i].sock), 0, "send PARAMS: %s",
                      zmq_strerror (errno));
    }
    //  Device 2 hears ERROR; the others BYE.
    for (int i = 0; i < 3; i++) {
        proto_msg_t *msg = s_fake_next (&fake[i], "BYE or ERROR");
        int type = proto_msg_type (msg);
        proto_msg_destroy (&msg);
        cr_assert_eq (type, i == 2 ? PROTO_MSG_ERROR : PROTO_MSG_BYE, "device %d got %s", i,
                      proto_type_name (type));
    }
    int src = pltest_wait (&run, server, pl_monotonic () + 60);
    if (src != 0)
        pltest_dump_logs (&run);
    cr_assert_eq (src, 0, "server exit status %d", src);
    for (int i = 0; i < 3; i++)
        zmq_close (fake[i].sock);
    zmq_ctx_term (ctx);
    char path[4096];
    pltest_path (path, run.dir, "server.log");
    char *log = pltest_read (path);
    cr_expect (log && strstr (log, "device 2 dropped: calibration PARAMS hold non-finite"),
               "the server's log does not say why device 2 left:\n%s", log ? log : "");
    free (log);

    nn_model_t *m = pltest_load_model (run.dir, "calib", "vgg5");
    const float *got = nn_model_weights_const (m) + params;
    double worst = 0.0, plain_gap = 0.0;
    for (size_t k = 0; k < buffers; k++) {
        //  Which tensor k is in: its mean's index for a variance.
        int t;
        nn_tensor_info_t info;
        for (t = 0; t < nn_model_tensors_count (ref); t++) {
            nn_model_tensor (ref, t, &info);
            if (!info.trainable && k + params >= info.offset && k + params < info.offset + info.count)
                break;
        }
        bool var = strstr (info.name, "running_var") != NULL;
        size_t j = k + params - info.offset;
        double m0 = 1.0 + 0.01 * (double) j, m1 = -1.0 + 0.01 * (double) j;
        double mean = 0.5 * (m0 + m1);
        double want = var ? 0.5 * (0.5 + m0 * m0 + 2.0 + m1 * m1) - mean * mean : mean;
        double d = fabs (got[k] - want) / (1.0 + fabs (want));
        worst = d > worst || !(d == d) ? d : worst;
        if (var)
            plain_gap = fmax (plain_gap, fabs (1.25 - want));
    }
    cr_log_info ("calibration pooling: max relative error %g (the plain average of the "
                 "variances is %g off)", worst, plain_gap);
    cr_assert (plain_gap > 0.5);
    cr_expect (worst < 1e-5, "model.ckpt's BN statistics are not the mixture of devices 0 "
               "and 1 (max relative error %g)", worst);
    cJSON *s = pltest_summary (run.dir, "calib");
    cr_expect_gt (pltest_num (pltest_last_epoch (s), "calibration_s"), 0.0);
    cJSON_Delete (s);
    nn_model_destroy (&m);
    nn_model_destroy (&ref);
    for (int i = 0; i < 3; i++) {
        free (w[i]);
        free (buf[i]);
    }
    pltest_rmtree (run.dir);
}

//  Real clients on a skewed Dirichlet partition: the run completes and the
//  summary reports the unequal shard sizes the server weighted by.
static void
s_dirichlet_run (const char *mode)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char config[1024];
    snprintf (config, sizeof config,
              "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 1000, "
              "\"test_samples\": 200, \"batch_size\": 20, \"epochs\": 1, \"seed\": 7, "
              "\"split_point\": 2, \"partition\": \"dirichlet\", \"dirichlet_alpha\": 0.3, "
              "\"devices\": 2, \"mode\": \"%s\", \"micro_batches\": 1}", mode);
    pltest_run_daemons (&run, "run", config, 2);
    cJSON *s = pltest_summary (run.dir, "run");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (pltest_last_epoch (s), "devices");
    cr_assert_eq (cJSON_GetArraySize (devs), 2);
    double n0 = pltest_num (cJSON_GetArrayItem (devs, 0), "samples");
    double n1 = pltest_num (cJSON_GetArrayItem (devs, 1), "samples");
    cr_log_info ("%s, dirichlet 0.3: shards of %.0f and %.0f samples", mode, n0, n1);
    cr_expect (n0 >= 1 && n1 >= 1, "%s: an empty shard (%g, %g)", mode, n0, n1);
    cr_expect (n0 != n1, "%s: dirichlet shards are equal (%g)", mode, n0);
    cr_expect_eq (n0 + n1, 1000.0, "%s: shards sum to %g, want 1000", mode, n0 + n1);
    cJSON_Delete (s);
    pltest_rmtree (run.dir);
}

Test (fedavg, dirichlet_shards_fl, .timeout = 600) { s_dirichlet_run ("fl"); }
Test (fedavg, dirichlet_shards_sfl, .timeout = 600) { s_dirichlet_run ("sfl"); }

//  ---------------------------------------------------------------------
//  planning: PROFILE and PROBE from peers that get them wrong

#define PLAN_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 40, \"epochs\": 1, \"seed\": 3, " \
    "\"threads\": 1, \"devices\": 1, \"mode\": \"pipelearn\", \"split_point\": \"auto\", " \
    "\"micro_batches\": \"auto\", \"device_timeout_s\": 2}"

//  HELLO, then WELCOME (skipping HEARTBEATs); the WELCOME must ask for a
//  PROFILE in an "auto" run.
static void *
s_planning_peer (void *ctx, const char *endpoint, const char *name)
{
    void *sock = s_dealer (ctx, endpoint);
    s_send_hello (sock, -1, 0, name);
    proto_msg_t *msg = s_recv (sock, "WELCOME");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_WELCOME);
    cr_assert (proto_msg_profile_requested (msg), "an auto run's WELCOME asks for PROFILE");
    proto_msg_destroy (&msg);
    return sock;
}

static void
s_send_profile (void *sock, uint32_t units)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t p = { .units = units, .threads = 1 };
    for (uint32_t u = 0; u < units; u++)
        p.unit[u] = (proto_unit_cost_t) { 0.01, 0.02, 0.0, 0.0, 0.0 };
    cr_assert_eq (proto_msg_set_profile (msg, &p), 0);
    cr_assert_eq (proto_msg_send (&msg, sock), 0);
}

//  The next PROBE from the server (HEARTBEATs skipped).
static proto_msg_t *
s_next_probe (void *sock)
{
    while (true) {
        proto_msg_t *msg = s_recv (sock, "PROBE");
        if (proto_msg_type (msg) == PROTO_MSG_PROBE)
            return msg;
        cr_assert_eq (proto_msg_type (msg), PROTO_MSG_HEARTBEAT, "got %s, want PROBE",
                      proto_type_name (proto_msg_type (msg)));
        proto_msg_destroy (&msg);
    }
}

Test (rogue, planning_peers_are_dropped_and_the_run_goes_on, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "", PLAN_CONFIG, endpoint, sizeof endpoint);
    void *ctx = zmq_ctx_new ();

    //  A profile of the wrong model (3 units; vgg5 has 5).
    void *a = s_planning_peer (ctx, endpoint, "wrong-units");
    s_send_profile (a, 3);
    s_expect_error (a, PROTO_ERR_STATE, "PROFILE of 3 units");
    zmq_close (a);

    //  A right profile, then an answer to a probe that was never sent.
    void *b = s_planning_peer (ctx, endpoint, "bad-probe-answer");
    s_send_profile (b, 5);
    proto_msg_t *probe = s_next_probe (b);
    proto_probe_t answer = { .probe_id = proto_msg_probe (probe)->probe_id + 7 };
    proto_msg_destroy (&probe);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (msg, &answer, 0);
    cr_assert_eq (proto_msg_send (&msg, b), 0);
    s_expect_error (b, PROTO_ERR_STATE, "PROBE answer for no probe");
    zmq_close (b);

    //  A right profile, then silence: dropped after device_timeout_s.
    void *c = s_planning_peer (ctx, endpoint, "silent-prober");
    s_send_profile (c, 5);
    probe = s_next_probe (c);
    proto_msg_destroy (&probe);
    zmq_pollitem_t item = { c, 0, ZMQ_POLLIN, 0 };
    bool timed_out = false;
    double deadline = pl_monotonic () + 10;
    while (!timed_out && pl_monotonic () < deadline && zmq_poll (&item, 1, 10000) == 1) {
        proto_msg_t *m = NULL;
        char err[256];
        cr_assert_eq (proto_msg_recv (&m, c, NULL, err, sizeof err), 0, "%s", err);
        timed_out = proto_msg_type (m) == PROTO_MSG_ERROR
                 && proto_msg_error_code (m) == PROTO_ERR_TIMEOUT;
        proto_msg_destroy (&m);
    }
    cr_assert (timed_out, "a device silent during its probe was not dropped");
    zmq_close (c);
    zmq_ctx_term (ctx);

    //  The slot is free again: a real client joins, profiles, is probed and
    //  the run completes.
    pid_t client = pltest_start_client (&run, 0, endpoint);
    pltest_expect_exit (&run, server, 0, "server");
    pltest_expect_exit (&run, client, 0, "client");
    cr_expect (pltest_log_has (&run, "server.log", "device 0 link: uplink"));
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  PROFILE's codec speeds (issue 17) from peers that get them wrong, in a
//  run whose codecs are "auto": a speed that is not a number is malformed
//  (proto refuses it: ERROR MALFORMED), a speed of 0 (not measured) leaves
//  the planner blind (ERROR STATE); both peers are dropped with the reason
//  in the log, and a real device then takes the slot and the run ends.
#define AUTO_CODEC_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 40, \"epochs\": 1, \"seed\": 3, " \
    "\"threads\": 1, \"devices\": 1, \"mode\": \"pipelearn\", \"split_point\": 1, " \
    "\"micro_batches\": 2, \"codec\": \"auto\", \"measure_link\": false, " \
    "\"device_timeout_s\": 2}"

Test (rogue, profile_codec_speeds_that_are_wrong_get_the_peer_dropped, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "rogue");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "", AUTO_CODEC_CONFIG, endpoint,
                                        sizeof endpoint);
    void *ctx = zmq_ctx_new ();

    //  Speeds of 0: not measured.
    void *a = s_planning_peer (ctx, endpoint, "unmeasured-codecs");
    s_send_profile (a, 5);
    s_expect_error (a, PROTO_ERR_STATE, "PROFILE with codec speeds 0");
    zmq_close (a);

    //  int8's encode speed NaN, written into the encoded frame.
    void *b = s_planning_peer (ctx, endpoint, "nan-codec-speed");
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t p = { .units = 5, .threads = 1, .encode_Bps = { 1e9, 1e9, 1e9 },
                          .decode_Bps = { 1e9, 1e9, 1e9 } };
    for (uint32_t u = 0; u < 5; u++)
        p.unit[u] = (proto_unit_cost_t) { 0.01, 0.02, 0.0, 0.0, 0.0 };
    cr_assert_eq (proto_msg_set_profile (msg, &p), 0);
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[256];
    int n = proto_msg_encode (msg, frames, err, sizeof err);
    cr_assert_gt (n, 1, "%s", err);
    proto_msg_destroy (&msg);
    pl_le_put_f64 ((uint8_t *) zmq_msg_data (&frames[1]) + 24, NAN);
    for (int i = 0; i < n; i++)
        cr_assert_geq (zmq_msg_send (&frames[i], b, i + 1 < n ? ZMQ_SNDMORE : 0), 0);
    s_expect_error (b, PROTO_ERR_MALFORMED, "PROFILE with a NaN codec speed");
    zmq_close (b);

    //  zstd's ratios with int8 down at split point 2 of 0, written into the
    //  frame's optional zstd section (rows at 56 + 40 x 5).
    void *z = s_planning_peer (ctx, endpoint, "zero-zstd-ratio");
    msg = proto_msg_new (PROTO_MSG_PROFILE);
    p.zstd_rows = 4;
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < PROTO_ZSTD_RATIOS; k++)
            p.zstd_ratio[r][k] = 0.8;
    cr_assert_eq (proto_msg_set_profile (msg, &p), 0);
    n = proto_msg_encode (msg, frames, err, sizeof err);
    cr_assert_gt (n, 1, "%s", err);
    proto_msg_destroy (&msg);
    pl_le_put_f64 ((uint8_t *) zmq_msg_data (&frames[1]) + 256 + 4 + (1 * 4 + 3) * 8, 0.0);
    for (int i = 0; i < n; i++)
        cr_assert_geq (zmq_msg_send (&frames[i], z, i + 1 < n ? ZMQ_SNDMORE : 0), 0);
    s_expect_error (z, PROTO_ERR_MALFORMED, "PROFILE with a zstd ratio of 0");
    zmq_close (z);
    zmq_ctx_term (ctx);

    pid_t client = pltest_start_client (&run, 0, endpoint);
    pltest_expect_exit (&run, server, 0, "server");
    pltest_expect_exit (&run, client, 0, "client");
    cr_expect (pltest_log_has (&run, "server.log", "PROFILE: codec auto needs measured fp16"),
               "the blind profile's reason is not in the log");
    cr_expect (pltest_log_has (&run, "server.log", "PROFILE: int8 encode speed is nan"),
               "the malformed profile's reason is not in the log");
    cr_expect (pltest_log_has (&run, "server.log",
                               "PROFILE: zstd ratio int8 down at split point 2 is 0"),
               "the zero zstd ratio's reason is not in the log");
    cr_expect (pltest_log_has (&run, "server.log", "device 0: codecs up"),
               "the real device's codecs were not chosen");
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
