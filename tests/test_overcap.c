/*  test_overcap.c: a device whose connection libzmq closes is dropped at
    once, with its reason (suite 'net'; issue 21, item 1).

    The server's ROUTER takes frames up to the cap it sends in WELCOME
    (ZMQ_MAXMSGSIZE). A hostile or broken device that sends a larger frame
    anyway has its connection closed by libzmq, which tells the server
    nothing: the server then waited device_timeout_s and dropped the device
    as "silent" (or the run stalled until then). Now the server watches its
    ROUTER's connections (a libzmq socket monitor) and drops that device at
    once, naming it and the cap.

    - a device scripted here with libzmq and CurveZMQ joins a real run with
      an honest pipelearn-client, then sends a frame over its WELCOME cap:
      the server logs device 1 and the cap within 20 s (device_timeout_s is
      120 s), and the honest device's run completes;
    - a device that reconnects (--insecure: the same id; CurveZMQ: the
      same key) while the server is stopped, so the old connection's close
      and the new HELLO reach it together and the new connection gets the
      old one's file descriptor, keeps its new session: the old
      connection's event drops the old session only;
    - 3000 bare TCP connections opened and closed while the server reads
      only its ROUTER (--resume of a complete run answering late devices)
      stall nothing: an honest late device is answered and the server
      exits on time (libzmq blocks its I/O thread on an unread monitor);
    - a HELLO that reaches the server with its connection's end (written
      by a relay while the server is stopped, then the relay closes) takes
      no slot: device 1 joins once, on its live connection, and is never
      dropped;
    - a device that says BYE and closes its connection while another
      device's HELLO is read first leaves by its BYE: the close (read at
      that HELLO) does not overtake what the connection sent before it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <czmq.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <unistd.h>

#include "pl_clock.h"
#include "pltest.h"
#include "proto_msg.h"

#define WAIT_MS 30000

//  Two devices, sfl at split 1, two short epochs. Only a close the server
//  sees can drop a device within the test's bounds: the deadlines are long.
#define OVERCAP_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 5, " \
    "\"threads\": 1, \"devices\": 2, \"mode\": \"sfl\", \"split_point\": 1, " \
    "\"measure_link\": false, \"adaptive\": false, \"device_timeout_s\": 120, " \
    "\"round_timeout_s\": 300, \"heartbeat_timeout_s\": 120}"

//  A device scripted with libzmq: one DEALER, CurveZMQ when keys are given.
typedef struct {
    void *ctx, *sock;
    uint64_t cap;               //  WELCOME's frame cap
} s_dev_t;

static void
s_dev_connect (s_dev_t *self, const char *endpoint, zcert_t *mine, zcert_t *server)
{
    if (!self->ctx)
        self->ctx = zmq_ctx_new ();
    self->sock = zmq_socket (self->ctx, ZMQ_DEALER);
    int linger = 0, sndtimeo = WAIT_MS;
    zmq_setsockopt (self->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (self->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
    if (mine) {
        const char *skey = zcert_public_txt (server);
        cr_assert_eq (zmq_setsockopt (self->sock, ZMQ_CURVE_SERVERKEY, skey, strlen (skey)), 0);
        const char *pub = zcert_public_txt (mine), *sec = zcert_secret_txt (mine);
        cr_assert_eq (zmq_setsockopt (self->sock, ZMQ_CURVE_PUBLICKEY, pub, strlen (pub)), 0);
        cr_assert_eq (zmq_setsockopt (self->sock, ZMQ_CURVE_SECRETKEY, sec, strlen (sec)), 0);
    }
    cr_assert_eq (zmq_connect (self->sock, endpoint), 0);
}

//  The next message that is not a HEARTBEAT; fails the test after WAIT_MS.
static proto_msg_t *
s_dev_recv (s_dev_t *self, const char *what)
{
    for (;;) {
        zmq_pollitem_t item = { self->sock, 0, ZMQ_POLLIN, 0 };
        cr_assert_eq (zmq_poll (&item, 1, WAIT_MS), 1, "%s: nothing from the server", what);
        proto_msg_t *msg = NULL;
        char err[512];
        cr_assert_eq (proto_msg_recv (&msg, self->sock, NULL, err, sizeof err), 0, "%s: %s",
                      what, err);
        if (proto_msg_type (msg) != PROTO_MSG_HEARTBEAT)
            return msg;
        proto_msg_destroy (&msg);
    }
}

//  The next message must be of this type.
static void
s_dev_expect (s_dev_t *self, int type)
{
    proto_msg_t *msg = s_dev_recv (self, proto_type_name (type));
    cr_assert_eq (proto_msg_type (msg), type, "got %s, want %s",
                  proto_type_name (proto_msg_type (msg)), proto_type_name (type));
    if (type == PROTO_MSG_WELCOME)
        self->cap = proto_msg_frame_cap (msg);
    proto_msg_destroy (&msg);
}

//  A HELLO asking for device id.
static proto_msg_t *
s_hello_new (int id)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t hello = { .protocol_version = PROTO_VERSION,
                            .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                            .requested_device_id = id };
    snprintf (hello.name, sizeof hello.name, "scripted%d", id);
    cr_assert_eq (proto_msg_set_hello (msg, &hello), 0);
    return msg;
}

//  HELLO asking for device id; queued, whether or not the server is there.
static void
s_dev_hello (s_dev_t *self, int id)
{
    proto_msg_t *msg = s_hello_new (id);
    cr_assert_eq (proto_msg_send (&msg, self->sock), 0);
}

static void
s_dev_close (s_dev_t *self)
{
    if (self->sock)
        zmq_close (self->sock);
    self->sock = NULL;
}

static void
s_dev_destroy (s_dev_t *self)
{
    s_dev_close (self);
    if (self->ctx)
        zmq_ctx_term (self->ctx);
    self->ctx = NULL;
}

//  A key pair in DIR/keys/name(_secret), its public part in DIR/allow too
//  when allow.
static zcert_t *
s_cert (const char *dir, const char *name, bool allow)
{
    char path[4096], sub[4096];
    zcert_t *cert = zcert_new ();
    pltest_path (sub, dir, "keys");
    mkdir (sub, 0700);
    pltest_path (path, sub, name);
    mode_t old = umask (077);
    cr_assert_eq (zcert_save (cert, path), 0, "zcert_save %s", path);
    umask (old);
    if (allow) {
        pltest_path (sub, dir, "allow");
        mkdir (sub, 0700);
        pltest_path (path, sub, name);
        cr_assert_eq (zcert_save_public (cert, path), 0);
    }
    return cert;
}

//  How often needle is in DIR/log.
static int
s_log_count (pltest_run_t *run, const char *log, const char *needle)
{
    char path[4096];
    pltest_path (path, run->dir, log);
    char *text = pltest_read (path);
    int n = 0;
    for (const char *p = text; p && (p = strstr (p, needle)); p += strlen (needle))
        n++;
    free (text);
    return n;
}

static void
s_expect_finished (pltest_run_t *run, pid_t server, pid_t client)
{
    int src = pltest_wait (run, server, pl_monotonic () + 240);
    int crc = pltest_wait (run, client, pl_monotonic () + 30);
    if (src || crc) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    cr_assert_eq (src, 0, "server exit status %d", src);
    cr_assert_eq (crc, 0, "honest device exit status %d", crc);
    cJSON *s = pltest_summary (run->dir, "run");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_expect_eq (cJSON_GetArraySize (epochs), 2, "summary.json has %d epoch(s)",
                  cJSON_GetArraySize (epochs));
    cJSON_Delete (s);
}

//  Keys for a CurveZMQ run (curve false: --insecure, none): the server's,
//  device0's (an honest pipelearn-client) and device1's (the scripted
//  device), both devices allowed.
typedef struct {
    bool curve;
    zcert_t *server, *dev1;
    char allow[4096], secret[4096], pub[4096], cert0[4096];
} s_keys_t;

static void
s_keys_make (s_keys_t *self, const char *dir, bool curve)
{
    *self = (s_keys_t) { .curve = curve };
    if (!curve)
        return;
    self->server = s_cert (dir, "server", false);
    zcert_t *honest = s_cert (dir, "device0", true);
    zcert_destroy (&honest);
    self->dev1 = s_cert (dir, "device1", true);
    char keys[4096];
    pltest_path (keys, dir, "keys");
    pltest_path (self->allow, dir, "allow");
    pltest_path (self->secret, keys, "server_secret");
    pltest_path (self->pub, keys, "server");
    pltest_path (self->cert0, keys, "device0_secret");
}

static void
s_keys_destroy (s_keys_t *self)
{
    zcert_destroy (&self->server);
    zcert_destroy (&self->dev1);
}

//  Keys (curve false: --insecure, none) and the server for config in
//  run->dir; the server's pid, its endpoint in endpoint (256 bytes).
static pid_t
s_start_server (pltest_run_t *run, const char *config, bool curve, s_keys_t *keys,
                char *endpoint)
{
    s_keys_make (keys, run->dir, curve);
    return curve ? pltest_start_server_sec (run, "run", config, endpoint, 256, keys->secret,
                                            keys->allow)
                 : pltest_start_server (run, "run", config, endpoint, 256);
}

//  dev connects to endpoint as device 1 (with device1's key under
//  CurveZMQ) and says HELLO; WELCOME must follow (dev->cap is its cap).
static void
s_dev_join (s_dev_t *dev, const char *endpoint, const s_keys_t *keys)
{
    s_dev_connect (dev, endpoint, keys->dev1, keys->server);
    s_dev_hello (dev, 1);
    s_dev_expect (dev, PROTO_MSG_WELCOME);
}

//  The start the tests share: keys, the server for config and the
//  scripted device 1 joined (dev zeroed first). The server's pid; its
//  endpoint in endpoint (256 bytes).
static pid_t
s_start_one_device (pltest_run_t *run, const char *config, bool curve, s_keys_t *keys,
                    s_dev_t *dev, char *endpoint)
{
    pid_t server = s_start_server (run, config, curve, keys, endpoint);
    *dev = (s_dev_t) { 0 };
    s_dev_join (dev, endpoint, keys);
    return server;
}

static pid_t
s_client0 (pltest_run_t *run, const s_keys_t *keys, const char *endpoint)
{
    return keys->curve ? pltest_start_client_sec (run, 0, endpoint, keys->cert0, keys->pub, "60")
                       : pltest_start_client (run, 0, endpoint);
}

Test (overcap, a_frame_over_the_cap_drops_its_device_at_once_naming_it, .timeout = 280)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "overcap");
    s_keys_t keys;
    s_dev_t dev;
    char endpoint[256];
    pid_t server = s_start_one_device (&run, OVERCAP_CONFIG, true, &keys, &dev, endpoint);
    cr_assert (dev.cap > 0);
    pid_t client = s_client0 (&run, &keys, endpoint);
    s_dev_expect (&dev, PROTO_MSG_MODEL);

    //  A header-sized first frame, then one 4 KiB over the cap: libzmq
    //  reads the second frame's size and closes the connection.
    size_t big = (size_t) dev.cap + 4096;
    uint8_t *bytes = calloc (1, big);
    cr_assert_not_null (bytes);
    cr_assert_eq (zmq_send (dev.sock, bytes, PROTO_HEADER_SIZE, ZMQ_SNDMORE), PROTO_HEADER_SIZE);
    cr_assert_eq (zmq_send (dev.sock, bytes, big, 0), (int) big);
    free (bytes);
    double sent = pl_monotonic ();
    char cap_text[128];
    snprintf (cap_text, sizeof cap_text, "receive cap of %" PRIu64 " bytes", dev.cap);
    bool dropped = pltest_wait_log (&run, "server.log", "device 1 dropped: libzmq closed its "
                                    "connection", 20);
    double took = pl_monotonic () - sent;
    if (!dropped)
        pltest_dump_logs (&run);
    cr_assert (dropped, "no drop of device 1 in the server log %.1f s after the frame", took);
    cr_expect (pltest_log_has (&run, "server.log", cap_text), "the log does not say \"%s\"",
               cap_text);
    cr_expect (pltest_log_has (&run, "server.log", "server: device 1 (scripted1, key "),
               "the log does not name the device");
    cr_expect_not (pltest_log_has (&run, "server.log", "dropped: silent"));
    s_dev_destroy (&dev);
    s_expect_finished (&run, server, client);
    s_keys_destroy (&keys);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  The scripted device says BYE; the honest run must complete.
static void
s_bye_and_finish (pltest_run_t *run, s_dev_t *dev, s_keys_t *keys, pid_t server, pid_t client)
{
    proto_msg_t *bye = proto_msg_new (PROTO_MSG_BYE);
    cr_assert_eq (proto_msg_send (&bye, dev->sock), 0);
    s_dev_destroy (dev);
    s_expect_finished (run, server, client);
    s_keys_destroy (keys);
    pltest_kill_all (run);
    pltest_rmtree (run->dir);
}

//  The scripted device reconnects 3 times while the server is stopped
//  (SIGSTOP): the old connection's close and the new connection wait in
//  the kernel and reach the server together, and the kernel hands the new
//  connection the lowest free descriptor, the old one's. With --insecure
//  nothing slows the new HELLO, which the server reads before the old
//  connection's event (seen in every round); with CurveZMQ its handshake
//  takes round trips first. Each new session must stay: it gets MODEL
//  when the honest device joins, and device 1 is dropped once per
//  reconnection (its old session), never more.
static void
s_reconnect (bool curve)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "overcap_reconnect");
    s_keys_t keys;
    s_dev_t dev;
    char endpoint[256];
    pid_t server = s_start_one_device (&run, OVERCAP_CONFIG, curve, &keys, &dev, endpoint);
    for (int round = 0; round < 3; round++) {
        cr_assert_eq (kill (server, SIGSTOP), 0);
        s_dev_close (&dev);
        usleep (100000);
        s_dev_connect (&dev, endpoint, keys.dev1, keys.server);
        s_dev_hello (&dev, 1);
        usleep (300000);
        cr_assert_eq (kill (server, SIGCONT), 0);
        s_dev_expect (&dev, PROTO_MSG_WELCOME);
    }
    pid_t client = s_client0 (&run, &keys, endpoint);
    //  Training starts only with device 1 in: its new session is alive.
    s_dev_expect (&dev, PROTO_MSG_MODEL);
    int drops = s_log_count (&run, "server.log", "device 1 dropped");
    if (drops != 3)
        pltest_dump_logs (&run);
    cr_expect_eq (drops, 3, "device 1 was dropped %d times for 3 reconnections", drops);
    s_bye_and_finish (&run, &dev, &keys, server, client);
}

Test (overcap, a_reconnected_device_is_not_dropped_by_its_old_connections_close,
      .timeout = 280)
{
    s_reconnect (false);
}

Test (overcap, a_device_reconnected_with_its_key_is_not_dropped_by_the_old_close,
      .timeout = 280)
{
    s_reconnect (true);
}

//  ---------------------------------------------------------------------
//  A flood of bare TCP connections while the server reads nothing but its
//  ROUTER (--resume of a complete run answers late devices for
//  device_timeout_s; the main loop's evaluation and the end of a run are
//  such phases too). libzmq writes each connection's monitor events with
//  a blocking send under its monitor lock (libzmq issue #3575): a monitor
//  nobody reads fills after about 2000 events and then stalls libzmq's I/O
//  thread (no connection is served), and stopping the monitor at exit
//  waits on the same lock for ever.

#define FLOOD_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 200, " \
    "\"device_timeout_s\": 15, \"test_samples\": 100, \"batch_size\": 50, \"epochs\": 1, " \
    "\"seed\": 5, \"momentum\": 0, \"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\"}"

//  The address of endpoint ("tcp://127.0.0.1:PORT").
static struct sockaddr_in
s_addr (const char *endpoint)
{
    const char *colon = strrchr (endpoint, ':');
    cr_assert_not_null (colon);
    struct sockaddr_in to = { .sin_family = AF_INET,
                              .sin_port = htons ((uint16_t) atoi (colon + 1)) };
    cr_assert_eq (inet_pton (AF_INET, "127.0.0.1", &to.sin_addr), 1);
    return to;
}

//  n TCP connections to endpoint ("tcp://127.0.0.1:PORT"), each closed
//  at once, no ZMTP greeting. A connect that takes over 200 ms (a stalled
//  server leaves its backlog full) counts as not made. The number made.
static int
s_flood (const char *endpoint, int n)
{
    struct sockaddr_in to = s_addr (endpoint);
    int made = 0;
    double until = pl_monotonic () + 60;
    for (int i = 0; i < n && pl_monotonic () < until; i++) {
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        cr_assert (fd >= 0);
        struct timeval tv = { 0, 200000 };
        setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect (fd, (struct sockaddr *) &to, sizeof to) == 0)
            made++;
        close (fd);
    }
    return made;
}

Test (overcap, a_flood_of_connections_while_the_server_is_busy_stalls_nothing,
      .timeout = 280)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "overcap_flood");
    pltest_run_daemons (&run, "done", FLOOD_CONFIG, 2);
    char endpoint[256];
    double start = pl_monotonic ();
    pid_t server = pltest_start_server_full (&run, "done", FLOOD_CONFIG, endpoint,
                                             sizeof endpoint, NULL, NULL, NULL, true);
    cr_assert (pltest_wait_log (&run, "server.log", "that the run is complete", 30));
    double t0 = pl_monotonic ();
    int made = s_flood (endpoint, 3000);
    double flood_s = pl_monotonic () - t0;
    cr_log_info ("flood: %d of 3000 connections in %.1f s", made, flood_s);
    //  An honest late device is still answered: libzmq's I/O thread runs.
    pid_t late = pltest_start_client_sec (&run, 0, endpoint, NULL, NULL, "10");
    int lrc = pltest_wait (&run, late, pl_monotonic () + 30);
    //  The server answers for device_timeout_s (15 s) from its start, then
    //  exits: its teardown takes well under a second; 25 s more is slack
    //  for a loaded shared machine. A stalled monitor hangs it for ever.
    int src = pltest_wait (&run, server, start + 15 + 25);
    double took = pl_monotonic () - start;
    if (lrc || src)
        pltest_dump_logs (&run);
    pltest_kill_all (&run);
    cr_expect_geq (made, 2000, "only %d of 3000 connections were accepted in %.1f s", made,
                   flood_s);
    cr_expect_eq (lrc, 0, "the honest late device exited %d", lrc);
    cr_expect (pltest_log_has (&run, "client0.log", "the run is complete"),
               "the late device was not told the run is complete");
    cr_assert_eq (src, 0, "server exit status %d after %.1f s (-1: still running)", src, took);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  A HELLO the ROUTER delivers after its connection's close (review of
//  3b6ad41, item 2): the connection is spoken by hand (ZMTP 3.0, NULL
//  mechanism) into the kernel's buffers while the server is stopped --
//  greeting, READY, the HELLO -- and closed, so on SIGCONT libzmq reads
//  all of it and the end of the stream at once and reports the close
//  before the reactor reads the HELLO.

//  Copies what is readable on from to to; false at the end of the stream.
static bool
s_relay (int from, int to)
{
    uint8_t buf[65536];
    ssize_t n = read (from, buf, sizeof buf);
    if (n <= 0)
        return false;
    cr_assert_eq (write (to, buf, (size_t) n), n);
    return true;
}

//  A TCP listener on 127.0.0.1; its port in *port.
static int
s_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    cr_assert_eq (inet_pton (AF_INET, "127.0.0.1", &a.sin_addr), 1);
    socklen_t len = sizeof a;
    cr_assert_eq (bind (fd, (struct sockaddr *) &a, len), 0);
    cr_assert_eq (listen (fd, 4), 0);
    cr_assert_eq (getsockname (fd, (struct sockaddr *) &a, &len), 0);
    *port = ntohs (a.sin_port);
    return fd;
}

Test (overcap, a_hello_from_a_connection_already_closed_takes_no_slot, .timeout = 280)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "overcap_dead_hello");
    s_keys_t keys;
    char endpoint[256];
    pid_t server = s_start_server (&run, OVERCAP_CONFIG, false, &keys, endpoint);
    struct sockaddr_in to = s_addr (endpoint);

    //  A scripted device through a relay in this process: the handshake
    //  goes through, then its HELLO is written to the server while the
    //  server is stopped and the relay's connection closed at once.
    int port, lfd = s_listen (&port);
    char relay[64];
    snprintf (relay, sizeof relay, "tcp://127.0.0.1:%d", port);
    s_dev_t dead = { 0 };
    s_dev_connect (&dead, relay, NULL, NULL);
    int cfd = accept (lfd, NULL, NULL), sfd = socket (AF_INET, SOCK_STREAM, 0);
    cr_assert (cfd >= 0 && sfd >= 0);
    cr_assert_eq (connect (sfd, (struct sockaddr *) &to, sizeof to), 0);
    double until = pl_monotonic () + 1.0;           //  the ZMTP handshake
    while (pl_monotonic () < until) {
        struct pollfd p[2] = { { cfd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
        if (poll (p, 2, 50) > 0) {
            if (p[0].revents)
                cr_assert (s_relay (cfd, sfd));
            if (p[1].revents)
                cr_assert (s_relay (sfd, cfd));
        }
    }
    s_dev_hello (&dead, 1);
    struct pollfd pc = { cfd, POLLIN, 0 };
    cr_assert_eq (poll (&pc, 1, 5000), 1, "the scripted HELLO never reached the relay");
    cr_assert_eq (kill (server, SIGSTOP), 0);
    cr_assert (s_relay (cfd, sfd));
    close (sfd);
    usleep (300000);
    cr_assert_eq (kill (server, SIGCONT), 0);
    usleep (500000);
    close (cfd);
    close (lfd);
    s_dev_destroy (&dead);

    //  Device 1's slot is free: a live connection asking for it gets it
    //  without pushing anyone out, and the run starts with it.
    s_dev_t dev = { 0 };
    s_dev_join (&dev, endpoint, &keys);
    pid_t client = s_client0 (&run, &keys, endpoint);
    s_dev_expect (&dev, PROTO_MSG_MODEL);
    int drops = s_log_count (&run, "server.log", "device 1 dropped");
    int joins = s_log_count (&run, "server.log", "device 1 joined");
    bool said = pltest_log_has (&run, "server.log", "from a connection libzmq has already "
                                "closed; ignored");
    //  Usually libzmq reports the close before the reactor reads the HELLO
    //  (the HELLO and the close were both waiting when the server resumed)
    //  and the HELLO is ignored. libzmq's I/O thread may also hand the
    //  HELLO over and read the close an instant later (test_dropout's
    //  dead_hello case takes either too): the dead session then holds the
    //  slot until a send to it fails, and must be dropped, once, before
    //  the live device takes the slot (it got MODEL above).
    bool ignored = said && joins == 1 && drops == 0;
    bool dropped = !said && drops == 1 && joins == 2;
    if (!ignored)
        pltest_dump_logs (&run);
    if (dropped)
        cr_log_info ("the server read the dead connection's HELLO before its close, and "
                     "dropped that session before the live device took the slot");
    cr_expect (ignored || dropped, "device 1 joined %d times and was dropped %d times; the "
               "server %s the dead connection's HELLO ignored: the dead HELLO kept its slot",
               joins, drops, said ? "says" : "never says");
    s_bye_and_finish (&run, &dev, &keys, server, client);
}

//  ---------------------------------------------------------------------
//  A close must not overtake what its connection sent before it. A
//  device says BYE and closes its connection while another connection's
//  HELLO is queued ahead of the BYE (the server stopped meanwhile): the
//  server reads the HELLO first, and with it (the sync at a HELLO) the
//  leaving connection's close, while the BYE still waits in the ROUTER.
//  The device must leave as it said ("left (BYE)"), not as a connection
//  libzmq closed (a frame over the cap, says that log). Three devices, so
//  the joiner does not start the run (a start checks first that every
//  session is alive).
#define BYE_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 300, " \
    "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 1, \"seed\": 5, " \
    "\"threads\": 1, \"devices\": 3, \"mode\": \"sfl\", \"split_point\": 1, " \
    "\"measure_link\": false, \"adaptive\": false, \"device_timeout_s\": 120}"

Test (overcap, a_close_does_not_overtake_what_its_connection_sent, .timeout = 280)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "overcap_bye");
    s_keys_t keys;
    s_dev_t leaver, joiner = { 0 };
    char endpoint[256];
    pid_t server = s_start_one_device (&run, BYE_CONFIG, false, &keys, &leaver, endpoint);
    s_dev_connect (&joiner, endpoint, NULL, NULL);
    usleep (500000);                    //  the joiner's ZMTP handshake
    cr_assert_eq (kill (server, SIGSTOP), 0);
    s_dev_hello (&joiner, 0);
    usleep (200000);
    proto_msg_t *bye = proto_msg_new (PROTO_MSG_BYE);
    cr_assert_eq (proto_msg_send (&bye, leaver.sock), 0);
    usleep (200000);                    //  in the kernel's buffers, then FIN
    s_dev_destroy (&leaver);
    usleep (300000);
    cr_assert_eq (kill (server, SIGCONT), 0);
    s_dev_expect (&joiner, PROTO_MSG_WELCOME);
    bool gone = pltest_wait_log (&run, "server.log", "device 1 dropped: ", 20);
    bool left = pltest_log_has (&run, "server.log", "device 1 dropped: left (BYE)");
    if (!gone || !left)
        pltest_dump_logs (&run);
    cr_expect (gone, "device 1 was not dropped");
    cr_expect (left, "device 1's BYE was overtaken by its connection's close");
    cr_expect_not (pltest_log_has (&run, "server.log", "BYE from an unknown peer"));
    s_dev_destroy (&joiner);
    s_keys_destroy (&keys);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
