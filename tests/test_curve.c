/*  test_curve.c: CurveZMQ between the real daemons (suite 'net'): only
    devices in the server's allow-list join, devices pin the server's key,
    SIGHUP re-reads the allow-list (and removes revoked devices), slots
    are bound to keys, and the flags refuse an ambiguous security choice. Keys are written here with CZMQ's zcert, the same
    format pipelearn-keygen writes. */
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

#include <czmq.h>

//  One device, small and fast: the run is over in a second or two.
#define CURVE_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 50, \"epochs\": 1, \"seed\": 5, " \
    "\"split_point\": 1, \"threads\": 1, \"devices\": 1, \"mode\": \"pipelearn\", " \
    "\"micro_batches\": 2}"

//  Write DIR/name and DIR/name_secret (0600), and the public one into
//  allow_dir too when it is not NULL.
static void
s_keygen (const char *dir, const char *name, const char *allow_dir)
{
    zcert_t *cert = zcert_new ();
    char path[4096];
    pltest_path (path, dir, name);
    mode_t old = umask (077);
    cr_assert_eq (zcert_save (cert, path), 0, "zcert_save %s", path);
    umask (old);
    if (allow_dir) {
        pltest_path (path, allow_dir, name);
        cr_assert_eq (zcert_save_public (cert, path), 0);
    }
    zcert_destroy (&cert);
}

typedef struct {
    pltest_run_t run;
    char keys[4096], allow[4096], server_cert[4096], server_secret[4096];
} s_lab_t;

static void
s_lab (s_lab_t *lab)
{
    pltest_mkdtemp (lab->run.dir, "curve");
    pltest_path (lab->keys, lab->run.dir, "keys");
    pltest_path (lab->allow, lab->run.dir, "allow");
    cr_assert_eq (mkdir (lab->keys, 0700), 0);
    cr_assert_eq (mkdir (lab->allow, 0700), 0);
    s_keygen (lab->keys, "server", NULL);
    s_keygen (lab->keys, "device0", lab->allow);
    s_keygen (lab->keys, "stranger", NULL);
    pltest_path (lab->server_cert, lab->keys, "server");
    pltest_path (lab->server_secret, lab->keys, "server_secret");
}

static void
s_expect_run_ok (pltest_run_t *run, pid_t server, pid_t client)
{
    int src = pltest_wait (run, server, pl_monotonic () + 120);
    int crc = pltest_wait (run, client, pl_monotonic () + 20);
    if (src || crc) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    cr_assert_eq (src, 0, "server exit status %d", src);
    cr_assert_eq (crc, 0, "client exit status %d", crc);
}

Test (curve, allowed_device_trains_and_strangers_learn_nothing, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    char endpoint[256], cert[4096];
    pid_t server = pltest_start_server_sec (&lab.run, "run", CURVE_CONFIG, endpoint,
                                       sizeof endpoint, lab.server_secret, lab.allow);
    //  A device whose key is not in the allow-list: the handshake fails, no
    //  WELCOME ever comes, and it gives up after its --timeout.
    pltest_path (cert, lab.keys, "stranger_secret");
    pid_t stranger = pltest_start_client_sec (&lab.run, 1, endpoint, cert, lab.server_cert, "3");
    int rc = pltest_wait (&lab.run, stranger, pl_monotonic () + 30);
    cr_assert (rc != 0 && rc != -1, "a device outside the allow-list: exit status %d", rc);
    cr_assert_not (pltest_log_has (&lab.run, "client1.log", "joined"),
                   "a device outside the allow-list joined");
    cr_assert (pltest_log_has (&lab.run, "client1.log", "silent"), "no clear message");
    //  The same stranger stopped by SIGTERM while it waits: it exits at once
    //  (its BYE has no peer to go to and must not block the exit).
    stranger = pltest_start_client_sec (&lab.run, 1, endpoint, cert, lab.server_cert, "60");
    //  Its first log line after the signal handlers are set (not OpenBLAS's,
    //  which may come before a re-exec: CI's SIGTERM once landed there).
    cr_assert (pltest_wait_log (&lab.run, "client1.log", "client: connecting to", 30),
               "the stranger did not start");
    kill (stranger, SIGTERM);
    rc = pltest_wait (&lab.run, stranger, pl_monotonic () + 10);
    cr_assert_eq (rc, 0, "a stranger stopped by SIGTERM: exit status %d (-1: still running "
                  "after 10 s)", rc);
    cr_assert (pltest_log_has (&lab.run, "client1.log", "stopped by a signal"),
               "no message about the signal");
    //  A device that pins another server key: same (it is device0's real
    //  key, so only the server key is wrong).
    pltest_path (cert, lab.keys, "device0_secret");
    char wrong[4096];
    pltest_path (wrong, lab.keys, "stranger");
    pid_t pinned = pltest_start_client_sec (&lab.run, 1, endpoint, cert, wrong, "3");
    rc = pltest_wait (&lab.run, pinned, pl_monotonic () + 30);
    cr_assert (rc != 0 && rc != -1, "a device pinning another server key: exit status %d", rc);
    cr_assert_not (pltest_log_has (&lab.run, "client1.log", "joined"));
    //  The allowed device with the right server key trains to the end.
    pid_t device = pltest_start_client_sec (&lab.run, 0, endpoint, cert, lab.server_cert, "60");
    s_expect_run_ok (&lab.run, server, device);
    cr_assert (pltest_log_has (&lab.run, "server.log", "CurveZMQ on; 1 device certificate"));
    pltest_kill_all (&lab.run);
    pltest_rmtree (lab.run.dir);
}

Test (curve, sighup_rereads_the_allow_list, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    //  Start with an empty allow-list, then add device0 and send SIGHUP.
    char pub[4096];
    pltest_path (pub, lab.allow, "device0");
    cr_assert_eq (unlink (pub), 0);
    char endpoint[256], cert[4096], path[4096];
    pid_t server = pltest_start_server_sec (&lab.run, "run", CURVE_CONFIG, endpoint,
                                       sizeof endpoint, lab.server_secret, lab.allow);
    pltest_path (cert, lab.keys, "device0_secret");
    pltest_path (path, lab.keys, "device0");
    char *text = pltest_read (path);
    cr_assert_not_null (text);
    pltest_write (pub, text);
    free (text);
    cr_assert_eq (kill (server, SIGHUP), 0);
    double deadline = pl_monotonic () + 20;
    while (!pltest_log_has (&lab.run, "server.log", "keys reloaded; 1 device certificate")
           && pl_monotonic () < deadline)
        usleep (50000);
    cr_assert (pltest_log_has (&lab.run, "server.log", "keys reloaded; 1 device certificate"),
               "no reload logged after SIGHUP");
    pid_t device = pltest_start_client_sec (&lab.run, 0, endpoint, cert, lab.server_cert, "60");
    s_expect_run_ok (&lab.run, server, device);
    pltest_kill_all (&lab.run);
    pltest_rmtree (lab.run.dir);
}

//  Two devices, several short epochs (so a SIGHUP lands mid-run); extra is
//  more config keys, each followed by a comma.
#define CURVE_CONFIG2(extra) \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 800, " \
    "\"test_samples\": 100, \"batch_size\": 50, \"epochs\": 4, \"seed\": 5, " \
    extra "\"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"pipelearn\", \"micro_batches\": 2}"

//  The allowed public certificate of name, with metadata device-id = id.
static void
s_allow_as (s_lab_t *lab, const char *name, int id)
{
    char path[4096];
    pltest_path (path, lab->keys, name);
    zcert_t *cert = zcert_load (path);
    cr_assert_not_null (cert, "zcert_load %s", path);
    zcert_set_meta (cert, "device-id", "%d", id);
    pltest_path (path, lab->allow, name);
    cr_assert_eq (zcert_save_public (cert, path), 0);
    zcert_destroy (&cert);
}

static void
s_expect_both_ok (pltest_run_t *run, pid_t server, pid_t c0, pid_t c1)
{
    int src = pltest_wait (run, server, pl_monotonic () + 180);
    int rc0 = pltest_wait (run, c0, pl_monotonic () + 20);
    int rc1 = pltest_wait (run, c1, pl_monotonic () + 20);
    if (src || rc0 || rc1) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    cr_assert_eq (src, 0, "server exit status %d", src);
    cr_assert_eq (rc0, 0, "device 0 exit status %d", rc0);
    cr_assert_eq (rc1, 0, "device 1 exit status %d", rc1);
}

//  Every device active in the run's last epoch.
static void
s_expect_all_active (const char *dir, int devices)
{
    cJSON *s = pltest_summary (dir, "run");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (pltest_last_epoch (s), "devices");
    cr_assert_eq (cJSON_GetArraySize (devs), devices);
    for (int i = 0; i < devices; i++)
        cr_expect (cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (
                       cJSON_GetArrayItem (devs, i), "active")),
                   "device %d not active in the last epoch", i);
    cJSON_Delete (s);
}

//  Issue 19 (3), issue 21 (2): a device waiting for the others is kept
//  alive by the server's HEARTBEATs (it gave up after its --timeout and
//  left a dead slot); killed before the start and restarted, it gets its
//  own slot back at once (its key holds it), and the other device is not
//  refused "run is full".
Test (curve, a_device_restarted_before_the_start_gets_its_slot_back, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    s_keygen (lab.keys, "device1", lab.allow);
    char endpoint[256], cert0[4096], cert1[4096];
    pid_t server = pltest_start_server_sec (&lab.run, "run", CURVE_CONFIG2 ("\"heartbeat_s\": 1, "),
                                       endpoint, sizeof endpoint, lab.server_secret,
                                       lab.allow);
    pltest_path (cert0, lab.keys, "device0_secret");
    pltest_path (cert1, lab.keys, "device1_secret");
    pid_t c0 = pltest_start_client_sec (&lab.run, 0, endpoint, cert0, lab.server_cert, "3");
    cr_assert (pltest_wait_log (&lab.run, "client0.log", "joined as device 0", 60),
               "device 0 did not join");
    //  Longer than its --timeout: it must still be waiting.
    int rc = pltest_wait (&lab.run, c0, pl_monotonic () + 6);
    if (rc != -1)
        pltest_dump_logs (&lab.run);
    cr_assert_eq (rc, -1, "device 0 waiting for the start exited (status %d)", rc);
    cr_assert_eq (kill (c0, SIGKILL), 0);
    pltest_wait (&lab.run, c0, pl_monotonic () + 10);
    c0 = pltest_start_client_sec (&lab.run, 0, endpoint, cert0, lab.server_cert, "60");
    cr_assert (pltest_wait_log (&lab.run, "client0.log", "client: joined as", 60),
               "the restarted device 0 did not join");
    cr_assert (pltest_log_has (&lab.run, "client0.log", "joined as device 0"),
               "the restarted device 0 got another slot");
    pid_t c1 = pltest_start_client_sec (&lab.run, 1, endpoint, cert1, lab.server_cert, "60");
    s_expect_both_ok (&lab.run, server, c0, c1);
    cr_assert_not (pltest_log_has (&lab.run, "client1.log", "run is full"));
    s_expect_all_active (lab.run.dir, 2);
    pltest_kill_all (&lab.run);
    pltest_rmtree (lab.run.dir);
}

//  Issue 19 (3): an allow-list certificate's device-id binds its key to
//  that slot: device0's key asking for device 1 is refused, and device 1
//  then joins with its own key.
Test (curve, a_key_bound_to_device_0_cannot_take_slot_1, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    s_keygen (lab.keys, "device1", NULL);
    s_allow_as (&lab, "device0", 0);
    s_allow_as (&lab, "device1", 1);
    char endpoint[256], cert0[4096], cert1[4096];
    pid_t server = pltest_start_server_sec (&lab.run, "run", CURVE_CONFIG2 (""), endpoint,
                                       sizeof endpoint, lab.server_secret, lab.allow);
    pltest_path (cert0, lab.keys, "device0_secret");
    pltest_path (cert1, lab.keys, "device1_secret");
    pid_t wrong = pltest_start_client_sec (&lab.run, 1, endpoint, cert0, lab.server_cert, "10");
    int rc = pltest_wait (&lab.run, wrong, pl_monotonic () + 60);
    if (rc == -1 || rc == 0)
        pltest_dump_logs (&lab.run);
    cr_assert (rc != 0 && rc != -1, "device0's key asking for device 1: exit status %d", rc);
    cr_assert (pltest_log_has (&lab.run, "client1.log", "the allow-list makes this key device 0"),
               "no clear reason");
    cr_assert_not (pltest_log_has (&lab.run, "client1.log", "joined as device 1"));
    pid_t c0 = pltest_start_client_sec (&lab.run, 0, endpoint, cert0, lab.server_cert, "60");
    pid_t c1 = pltest_start_client_sec (&lab.run, 1, endpoint, cert1, lab.server_cert, "60");
    s_expect_both_ok (&lab.run, server, c0, c1);
    s_expect_all_active (lab.run.dir, 2);
    pltest_kill_all (&lab.run);
    pltest_rmtree (lab.run.dir);
}

//  Issue 19 (6): a key removed from the allow-list is removed from the run
//  at the SIGHUP; the other device's run goes on to the end.
Test (curve, a_revoked_key_is_dropped_at_sighup, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    s_keygen (lab.keys, "device1", lab.allow);
    char endpoint[256], cert0[4096], cert1[4096], pub[4096];
    pid_t server = pltest_start_server_sec (&lab.run, "run", CURVE_CONFIG2 (""), endpoint,
                                       sizeof endpoint, lab.server_secret, lab.allow);
    pltest_path (cert0, lab.keys, "device0_secret");
    pltest_path (cert1, lab.keys, "device1_secret");
    pid_t c0 = pltest_start_client_sec (&lab.run, 0, endpoint, cert0, lab.server_cert, "60");
    pid_t c1 = pltest_start_client_sec (&lab.run, 1, endpoint, cert1, lab.server_cert, "60");
    cr_assert (pltest_wait_log (&lab.run, "server.log", "all 2 device(s) joined", 60),
               "the run did not start");
    pltest_path (pub, lab.allow, "device1");
    cr_assert_eq (unlink (pub), 0);
    cr_assert_eq (kill (server, SIGHUP), 0);
    const char *why = "device 1 dropped: its key was removed from the allow-list";
    bool dropped = pltest_wait_log (&lab.run, "server.log", why, 60);
    if (!dropped)
        pltest_dump_logs (&lab.run);
    cr_assert (dropped, "no \"%s\" in the server log", why);
    int rc1 = pltest_wait (&lab.run, c1, pl_monotonic () + 60);
    cr_assert (rc1 != 0 && rc1 != -1, "the revoked device: exit status %d", rc1);
    s_expect_run_ok (&lab.run, server, c0);
    cJSON *s = pltest_summary (lab.run.dir, "run");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (pltest_last_epoch (s), "devices");
    cr_expect_not (cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (
                       cJSON_GetArrayItem (devs, 1), "active")),
                   "the revoked device is active in the last epoch");
    cJSON_Delete (s);
    pltest_kill_all (&lab.run);
    pltest_rmtree (lab.run.dir);
}

//  pipelearn-server / -client with the given arguments after the binary;
//  returns the exit status and the output in out.
static int
s_run_bin (const char *bin_rel, char *const *args, char *out, size_t size)
{
    char cmd[8192];
    built (bin_rel, cmd, sizeof cmd);
    //  Temporary paths from mkdtemp: no spaces or quotes to escape.
    for (int i = 0; args[i]; i++) {
        size_t used = strlen (cmd);
        snprintf (cmd + used, sizeof cmd - used, " %s", args[i]);
    }
    return runcmd (cmd, out, size);
}

Test (curve, security_flags_are_required_and_checked, .timeout = 300)
{
    s_lab_t lab = { 0 };
    s_lab (&lab);
    char out[8192], cfg[4096];
    pltest_path (cfg, lab.run.dir, "c.json");
    pltest_write (cfg, CURVE_CONFIG);
    //  Neither CURVE keys nor --insecure: refused, saying what to give.
    char *a1[] = { "--config", cfg, NULL };
    cr_assert_eq (s_run_bin ("server/pipelearn-server", a1, out, sizeof out), 2);
    cr_assert (strstr (out, "--insecure"), "%s", out);
    char *a2[] = { "--connect", "tcp://127.0.0.1:1", NULL };
    cr_assert_eq (s_run_bin ("client/pipelearn-client", a2, out, sizeof out), 2);
    cr_assert (strstr (out, "--server-cert"), "%s", out);
    //  Both at once is ambiguous: refused.
    char *a3[] = { "--config", cfg, "--insecure", "--cert", lab.server_secret, "--allow",
                   lab.allow, NULL };
    cr_assert_eq (s_run_bin ("server/pipelearn-server", a3, out, sizeof out), 2);
    //  A secret certificate every user can read is refused, naming it.
    cr_assert_eq (chmod (lab.server_secret, 0644), 0);
    char *a4[] = { "--config", cfg, "--bind", "tcp://127.0.0.1:*", "--cert",
                   lab.server_secret, "--allow", lab.allow, NULL };
    cr_assert_eq (s_run_bin ("server/pipelearn-server", a4, out, sizeof out), 1);
    cr_assert (strstr (out, "server_secret is readable by every user"), "%s", out);
    //  A missing allow-list directory is named.
    cr_assert_eq (chmod (lab.server_secret, 0600), 0);
    char missing[4096];
    pltest_path (missing, lab.run.dir, "no-such-dir");
    char *a5[] = { "--config", cfg, "--bind", "tcp://127.0.0.1:*", "--cert",
                   lab.server_secret, "--allow", missing, NULL };
    cr_assert_eq (s_run_bin ("server/pipelearn-server", a5, out, sizeof out), 1);
    cr_assert (strstr (out, "no-such-dir"), "%s", out);
    pltest_rmtree (lab.run.dir);
}

//  Issue 21, item 1: under CurveZMQ a frame of exactly the run's largest
//  size (sfl/sl at split 1 with the shipped batch of 100: 2508800 bytes)
//  never arrived. libzmq checks ZMQ_MAXMSGSIZE against the encrypted frame,
//  33 bytes longer, and dropped the device without a word; 30 s later it
//  was "dropped: silent" and the run aborted (with --insecure they
//  finished). Each run here is one device, two iterations, one epoch.
Test (curve, the_largest_frames_arrive_under_curve, .timeout = 300)
{
    const char *runs[][2] = {
        { "sfl", "\"split_point\": 1, \"batch_size\": 100, \"micro_batches\": 1, \"samples\": 200" },
        { "sl", "\"split_point\": 1, \"batch_size\": 100, \"micro_batches\": 1, \"samples\": 200" },
        { "pipelearn", "\"split_point\": 1, \"batch_size\": 100, \"micro_batches\": 1, "
                       "\"samples\": 200" },
        { "sfl", "\"split_point\": 2, \"batch_size\": 400, \"micro_batches\": 1, \"samples\": 800" },
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        s_lab_t lab = { 0 };
        s_lab (&lab);
        char config[1024], endpoint[256], cert[4096];
        snprintf (config, sizeof config,
                  "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"test_samples\": 100, "
                  "\"epochs\": 1, \"seed\": 5, \"threads\": 1, \"devices\": 1, "
                  "\"device_timeout_s\": 5, \"mode\": \"%s\", %s}", runs[k][0], runs[k][1]);
        pid_t server = pltest_start_server_sec (&lab.run, "run", config, endpoint, sizeof endpoint,
                                           lab.server_secret, lab.allow);
        pltest_path (cert, lab.keys, "device0_secret");
        pid_t client = pltest_start_client_sec (&lab.run, 0, endpoint, cert, lab.server_cert, "20");
        int src = pltest_wait (&lab.run, server, pl_monotonic () + 60);
        int crc = pltest_wait (&lab.run, client, pl_monotonic () + 20);
        if (src || crc)
            pltest_dump_logs (&lab.run);
        pltest_kill_all (&lab.run);
        cr_expect (src == 0 && crc == 0, "%s, %s: server exit %d, device exit %d", runs[k][0],
                   runs[k][1], src, crc);
        pltest_rmtree (lab.run.dir);
    }
}
