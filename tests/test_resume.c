/*  test_resume.c: crash safety of the server (suite 'net'). The server is
    killed with SIGKILL in the middle of a run; `--resume` on the same
    results directory continues from the newest valid checkpoint (a
    corrupted one is skipped) and the final model equals an uninterrupted
    run's. sfl, momentum 0: devices restart with fresh processes and keep no
    optimiser state, so with momentum the two runs would differ by design. */
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

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <poll.h>
#include <sodium.h>
#include <sys/inotify.h>
#include <sys/socket.h>

#define RESUME_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"momentum\": 0, \"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\"}"
//  The same run with the server's HEARTBEAT every second, for devices with
//  --timeout 3: at the default 5 s, a device waiting on the other one at
//  an epoch end (slow under ASan on a loaded host) could hear nothing for
//  3 s and give up while the server is there.
#define RESUME_CONFIG_HB \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"momentum\": 0, \"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\", \"heartbeat_s\": 1}"

#define RESUME_CONFIG_MIXED \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"momentum\": 0, \"split_point\": [1, 3], \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\"}"

//  A TCP port nothing listens on right now.
static int
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    cr_assert_eq (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname (fd, (struct sockaddr *) &a, &len);
    close (fd);
    return ntohs (a.sin_port);
}

//  Per epoch 1..3 of DIR/sub/timeline.csv: rows (but "wait": how often a
//  device waits depends on timing), earliest start, latest end. Every line
//  must be the header (first line only) or a row.
typedef struct {
    int rows[4];
    double first[4], last[4];
} s_tl_t;

static s_tl_t
s_timeline (const char *dir, const char *sub)
{
    pltest_csv_t csv = pltest_load_csv (dir, sub);
    s_tl_t tl = { { 0 }, { 1e300, 1e300, 1e300, 1e300 }, { 0 } };
    for (int i = 0; i < csv.count; i++) {
        const pltest_row_t *r = &csv.rows[i];
        cr_assert (r->epoch >= 1 && r->epoch <= 3, "%s/timeline.csv row %d: epoch %d", sub,
                   i + 1, r->epoch);
        tl.rows[r->epoch] += strcmp (r->stage, "wait") != 0;
        tl.first[r->epoch] = r->start_s < tl.first[r->epoch] ? r->start_s : tl.first[r->epoch];
        tl.last[r->epoch] = r->end_s > tl.last[r->epoch] ? r->end_s : tl.last[r->epoch];
    }
    free (csv.rows);
    return tl;
}

//  The same run with MobileNetV3-Small: a model whose units are graphs
//  (squeeze-excite forks, residual adds) with BN statistics in every unit.
#define RESUME_CONFIG_MOBILENET \
    "{\"model\": \"mobilenetv3-small\", \"dataset\": \"synthetic\", \"samples\": 800, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"momentum\": 0, \"split_point\": 4, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\"}"

static void
s_full_run (pltest_run_t *run, const char *sub, const char *config)
{
    char endpoint[256];
    pid_t server = pltest_start_server (run, sub, config, endpoint, sizeof endpoint);
    pid_t c0 = pltest_start_client (run, 0, endpoint), c1 = pltest_start_client (run, 1, endpoint);
    pltest_expect_exit (run, server, 0, "server");
    pltest_expect_exit (run, c0, 0, "client 0");
    pltest_expect_exit (run, c1, 0, "client 1");
}

//  --resume on DIR/sub (bound to bind; NULL: any port) with two fresh
//  devices, all three to exit 0.
static void
s_resume_run (pltest_run_t *run, const char *sub, const char *config_json, const char *bind)
{
    char endpoint[256];
    pid_t server = pltest_start_server_full (run, sub, config_json, endpoint, sizeof endpoint,
                                        NULL, NULL, bind, true);
    pid_t c0 = pltest_start_client (run, 0, endpoint), c1 = pltest_start_client (run, 1, endpoint);
    pltest_expect_exit (run, server, 0, "resumed server");
    pltest_expect_exit (run, c0, 0, "client 0 after the resume");
    pltest_expect_exit (run, c1, 0, "client 1 after the resume");
}

//  Freeze both devices (SIGSTOP) the moment DIR/sub/checkpoints/
//  round-000002-000000 appears (inotify; the server renames a finished
//  checkpoint into place): without them the server cannot get past the
//  first iteration of epoch 2, however fast the host (a MobileNetV3-Small
//  epoch of 8 iterations takes 0.1 s on a quiet 2-core host), so a kill or
//  stop that follows lands in epoch 2. Thawed with s_thaw.
static void
s_freeze_at_epoch_2 (const char *dir, const char *sub, pid_t c0, pid_t c1)
{
    char root[4200], point[4300];
    snprintf (root, sizeof root, "%s/%s/checkpoints", dir, sub);
    snprintf (point, sizeof point, "%s/round-000002-000000", root);
    //  300 s: a planned run profiles before epoch 1, over 2 minutes under
    //  ASan on a loaded 2-core host.
    double deadline = pl_monotonic () + 300;
    while (access (root, F_OK) != 0 && pl_monotonic () < deadline)
        usleep (1000);
    int fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
    cr_assert (fd >= 0, "inotify_init1: %s", strerror (errno));
    cr_assert (inotify_add_watch (fd, root, IN_MOVED_TO | IN_CREATE) >= 0,
               "inotify_add_watch %s: %s", root, strerror (errno));
    while (access (point, F_OK) != 0 && pl_monotonic () < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll (&p, 1, 100);
        char events[4096];
        while (read (fd, events, sizeof events) > 0)
            ;
    }
    cr_assert_eq (kill (c0, SIGSTOP), 0);
    cr_assert_eq (kill (c1, SIGSTOP), 0);
    close (fd);
    cr_assert_eq (access (point, F_OK), 0, "epoch 2's checkpoint never appeared");
    usleep (100000);
}

static void
s_thaw (pid_t c0, pid_t c1)
{
    kill (c0, SIGCONT);
    kill (c1, SIGCONT);
}

//  Kill the server in epoch 2, optionally corrupt the newest checkpoint,
//  resume with fresh devices; the result must equal the uninterrupted run.
static void
s_crash_and_resume (bool corrupt, const char *config, const char *model)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    s_full_run (&run, "whole", config);

    char bind[64], endpoint[256], ckdir[4096];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    pltest_path (ckdir, run.dir, "crash/checkpoints/round-000002-000000");
    pid_t server = pltest_start_server_full (&run, "crash", config, endpoint,
                                        sizeof endpoint, NULL, NULL, bind, false);
    pid_t c0 = pltest_start_client_sec (&run, 0, endpoint, NULL, NULL, "3");
    pid_t c1 = pltest_start_client_sec (&run, 1, endpoint, NULL, NULL, "3");
    s_freeze_at_epoch_2 (run.dir, "crash", c0, c1);
    cr_assert_eq (kill (server, SIGKILL), 0);
    pltest_wait (&run, server, pl_monotonic () + 5);
    s_thaw (c0, c1);
    //  The devices give up on the dead server with an error.
    pltest_expect_exit (&run, c0, 1, "client 0 after the crash");
    pltest_expect_exit (&run, c1, 1, "client 1 after the crash");

    cr_assert_eq (access (ckdir, F_OK), 0, "no checkpoint at the start of epoch 2");
    if (corrupt) {
        char file[4200];
        snprintf (file, sizeof file, "%s/replica-1.ckpt", ckdir);
        cr_assert_eq (truncate (file, 1000), 0);
    }
    s_resume_run (&run, "crash", config, bind);
    if (corrupt) {
        cr_assert (pltest_log_has (&run, "server.log", "skipping checkpoint round-000002-000000"),
                   "the corrupt checkpoint was not reported");
        cr_assert (pltest_log_has (&run, "server.log", "round-000001-000000: epoch 1"));
    }
    else
        cr_assert (pltest_log_has (&run, "server.log", "round-000002-000000: epoch 2"),
                   "did not resume from the start of epoch 2");

    nn_model_t *a = pltest_load_model (run.dir, "whole", model);
    nn_model_t *b = pltest_load_model (run.dir, "crash", model);
    double d = pltest_max_rel_diff (a, b);
    cr_expect (d < 1e-5, "resumed model differs from the uninterrupted one by %g", d);
    cJSON *s = pltest_summary (run.dir, "crash");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 3,
                  "the resumed summary has not the 3 epochs");
    cJSON_Delete (s);
    //  timeline.csv: each epoch's rows once (as many as the uninterrupted
    //  run's: the interrupted epoch's were dropped and run again), in one
    //  time base: epoch 1's rows (written before the crash) end before the
    //  resumed epoch 2 starts, the downtime between them.
    s_tl_t whole = s_timeline (run.dir, "whole"), tl = s_timeline (run.dir, "crash");
    for (int e = 1; e <= 3; e++)
        cr_expect_eq (tl.rows[e], whole.rows[e], "epoch %d: %d rows in timeline.csv, the "
                      "uninterrupted run has %d", e, tl.rows[e], whole.rows[e]);
    if (!corrupt)
        cr_expect (tl.first[2] > tl.last[1] + 0.3, "the resumed epoch 2 starts at %.3f s, "
                   "epoch 1 ended at %.3f s: not one time base", tl.first[2], tl.last[1]);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  A planned stop (SIGTERM: "server stopping; it can resume the run") in
//  epoch 2, then the server started again with --resume on the same
//  address: the same device processes wait by themselves, join the resumed
//  run and finish it with status 0 (none exits into a supervisor's restart
//  loop), the run resumes from the start of epoch 2 and ends with the
//  uninterrupted run's model and its 3 epochs.
Test (resume, planned_stop_devices_wait_and_rejoin_by_themselves, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    s_full_run (&run, "whole", RESUME_CONFIG);

    char bind[64], endpoint[256], summary[4096];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    pltest_path (summary, run.dir, "stop/summary.json");
    pid_t server = pltest_start_server_full (&run, "stop", RESUME_CONFIG_HB, endpoint,
                                        sizeof endpoint, NULL, NULL, bind, false);
    //  --timeout 3: a try that gets no answer ends after 3 s, and the next
    //  comes after the back-off (1 s, 2 s, 4 s, ...).
    pid_t c0 = pltest_start_client_sec (&run, 0, endpoint, NULL, NULL, "3");
    pid_t c1 = pltest_start_client_sec (&run, 1, endpoint, NULL, NULL, "3");
    s_freeze_at_epoch_2 (run.dir, "stop", c0, c1);
    cr_assert_eq (kill (server, SIGTERM), 0);
    pltest_expect_exit (&run, server, 0, "server stopped by SIGTERM");
    s_thaw (c0, c1);
    //  Away for longer than the devices' --timeout: they try again.
    cr_assert (pltest_wait_log (&run, "client0.log", "joining again in 2 s", 20),
               "device 0 did not try again after a silent try");
    cr_assert_eq (waitpid (c0, NULL, WNOHANG), 0, "device 0 exited while the server was away");
    cr_assert_eq (waitpid (c1, NULL, WNOHANG), 0, "device 1 exited while the server was away");
    server = pltest_start_server_full (&run, "stop", RESUME_CONFIG_HB, endpoint, sizeof endpoint,
                                  NULL, NULL, bind, true);
    pltest_expect_exit (&run, server, 0, "resumed server");
    pltest_expect_exit (&run, c0, 0, "device 0, rejoined by itself");
    pltest_expect_exit (&run, c1, 0, "device 1, rejoined by itself");
    cr_assert (pltest_log_has (&run, "server.log", "round-000002-000000: epoch 2"),
               "did not resume from the start of epoch 2");
    nn_model_t *a = pltest_load_model (run.dir, "whole", "vgg5");
    nn_model_t *b = pltest_load_model (run.dir, "stop", "vgg5");
    double d = pltest_max_rel_diff (a, b);
    if (d >= 1e-5)
        pltest_dump_logs (&run);
    cr_expect (d < 1e-5, "the model after the planned stop differs from the uninterrupted "
               "one by %g", d);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    cJSON *s = pltest_summary (run.dir, "stop");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 3);
    cJSON_Delete (s);
    pltest_rmtree (run.dir);
}

Test (resume, killed_server_resumes_to_the_same_model, .timeout = 400)
{
    s_crash_and_resume (false, RESUME_CONFIG, "vgg5");
}

//  Devices at different split points (the widest device part and each
//  device's replica at its own split point are checkpointed; the narrower
//  parts are cut from them on resume).
Test (resume, killed_server_resumes_per_device_splits_to_the_same_model, .timeout = 400)
{
    s_crash_and_resume (false, RESUME_CONFIG_MIXED, "vgg5");
}

Test (resume, killed_server_resumes_mobilenet_to_the_same_model, .timeout = 400)
{
    s_crash_and_resume (false, RESUME_CONFIG_MOBILENET, "mobilenetv3-small");
}

Test (resume, corrupt_checkpoint_is_skipped_for_the_previous_one, .timeout = 400)
{
    s_crash_and_resume (true, RESUME_CONFIG, "vgg5");
}

//  A planned run ("auto"): the server re-plans from the devices it gets
//  after the restart, but resumes with the split points it checkpointed
//  (one per device; its own provisional plan could differ and the
//  checkpoint would not fit), and finishes the run.
#define AUTO_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"split_point\": \"auto\", \"micro_batches\": \"auto\", \"threads\": 1, " \
    "\"devices\": 2, \"mode\": \"pipelearn\", \"uplink_mbps\": 1000}"

//  Every device's split point in summary.json's assignment is in 1..4.
static bool
s_splits_fit (const cJSON *summary)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive (summary, "assignment");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive (a, "split_point");
    if (!cJSON_IsArray (p) || cJSON_GetArraySize (p) != 2)
        return false;
    const cJSON *v;
    cJSON_ArrayForEach (v, p)
        if (!cJSON_IsNumber (v) || v->valueint < 1 || v->valueint > 4)
            return false;
    return true;
}

Test (resume, planned_run_resumes_with_its_split, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    char bind[64], endpoint[256], summary[4096];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    pltest_path (summary, run.dir, "auto/summary.json");
    pid_t server = pltest_start_server_full (&run, "auto", AUTO_CONFIG, endpoint, sizeof endpoint,
                                        NULL, NULL, bind, false);
    pid_t c0 = pltest_start_client_sec (&run, 0, endpoint, NULL, NULL, "3");
    pid_t c1 = pltest_start_client_sec (&run, 1, endpoint, NULL, NULL, "3");
    s_freeze_at_epoch_2 (run.dir, "auto", c0, c1);
    cr_assert_eq (access (summary, F_OK), 0, "epoch 1 ended without a summary");
    cJSON *s = pltest_summary (run.dir, "auto");
    cr_expect (s_splits_fit (s), "split points before the crash");
    cJSON_Delete (s);
    cr_assert_eq (kill (server, SIGKILL), 0);
    pltest_wait (&run, server, pl_monotonic () + 5);
    s_thaw (c0, c1);
    pltest_expect_exit (&run, c0, 1, "client 0 after the crash");
    pltest_expect_exit (&run, c1, 1, "client 1 after the crash");
    s_resume_run (&run, "auto", AUTO_CONFIG, bind);
    cr_assert (pltest_log_has (&run, "server.log", "resuming from"), "did not resume");
    s = pltest_summary (run.dir, "auto");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 3);
    cr_expect (s_splits_fit (s), "split points after the resume");
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  Results that must not be lost (issue 19): the final writes, a fresh
//  run over a finished one, a damaged state.json.

//  device_timeout_s 4: also how long --resume of a complete run answers
//  late devices (ERROR COMPLETE) before it exits.
#define SMALL_CONFIG(seed) \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 200, \"device_timeout_s\": 4, " \
    "\"test_samples\": 100, \"batch_size\": 50, \"epochs\": 1, \"seed\": " #seed ", " \
    "\"momentum\": 0, \"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
    "\"mode\": \"sfl\"}"

//  pipelearn-server on DIR/sub bound to bind, with flag (may be NULL).
static pid_t
s_spawn_server (pltest_run_t *run, const char *sub, const char *config_json, const char *bind,
                const char *flag)
{
    char cfg[4096], res[4096], bin[4096], name[64];
    snprintf (name, sizeof name, "%s.json", sub);
    pltest_path (cfg, run->dir, name);
    pltest_write (cfg, config_json);
    pltest_path (res, run->dir, sub);
    built ("server/pipelearn-server", bin, sizeof bin);
    char *argv[] = { bin, "--config", cfg, "--bind", (char *) bind, "--results", res,
                     "--quiet", "--insecure", (char *) flag, NULL };
    return pltest_spawn (run, "server.log", argv);
}

//  The server alone (no devices) to its exit: its status, -1 if it is still
//  running after 60 s (waiting for devices: it took the run as unfinished).
static int
s_server_alone (pltest_run_t *run, const char *sub, const char *config_json, const char *flag)
{
    pid_t pid = s_spawn_server (run, sub, config_json, "tcp://127.0.0.1:*", flag);
    int rc = pltest_wait (run, pid, pl_monotonic () + 60);
    if (rc == -1) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    return rc;
}

//  model.ckpt cannot be written (a directory is in its place): the server
//  exits 1 and does not mark the run complete, so --resume (the old code
//  said "complete; nothing to do" and exited 0 with no model) runs the
//  last round again with the devices and writes the model.
Test (resume, failed_final_write_is_not_a_complete_run, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    char results[4096], model[4096], endpoint[256];
    pltest_path (results, run.dir, "fail");
    pltest_path (model, run.dir, "fail/model.ckpt");
    cr_assert_eq (mkdir (results, 0755), 0);
    cr_assert_eq (mkdir (model, 0755), 0);
    pid_t server = pltest_start_server (&run, "fail", SMALL_CONFIG (5), endpoint, sizeof endpoint);
    pid_t c0 = pltest_start_client (&run, 0, endpoint), c1 = pltest_start_client (&run, 1, endpoint);
    pltest_expect_exit (&run, server, 1, "server that cannot write model.ckpt");
    pltest_wait (&run, c0, pl_monotonic () + 30);
    pltest_wait (&run, c1, pl_monotonic () + 30);
    bool said = pltest_log_has (&run, "server.log", "not marked complete");

    cr_assert_eq (rmdir (model), 0);
    s_resume_run (&run, "fail", SMALL_CONFIG (5), NULL);
    cr_assert (!pltest_log_has (&run, "server.log", "nothing to do"), "called complete");
    nn_model_t *m = pltest_load_model (run.dir, "fail", "vgg5");
    nn_model_destroy (&m);
    cJSON *s = pltest_summary (run.dir, "fail");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 1);
    cJSON_Delete (s);
    cr_assert (said, "the failed run's log has no word on the incomplete results");
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  A device started after its run finished (a reboot, `docker-compose up`
//  on a finished results volume): the server, started with --resume as
//  its supervisor always does, finds the run complete and answers the
//  device's HELLO with ERROR COMPLETE; the device exits 0 (not restarted),
//  the server too, after device_timeout_s.
Test (resume, a_device_after_the_run_is_told_it_is_complete, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    pltest_run_daemons (&run, "done", SMALL_CONFIG (5), 2);
    char bind[64], endpoint[256];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    pid_t server = pltest_start_server_full (&run, "done", SMALL_CONFIG (5), endpoint,
                                             sizeof endpoint, NULL, NULL, bind, true);
    pid_t late = pltest_start_client_sec (&run, 0, endpoint, NULL, NULL, "20");
    pltest_expect_exit (&run, late, 0, "a device of a complete run");
    cr_assert (pltest_log_has (&run, "client0.log", "the run is complete"));
    pltest_expect_exit (&run, server, 0, "--resume of a complete run");
    pltest_rmtree (run.dir);
}

//  A complete run whose model.ckpt was lost: --resume writes it again from
//  the final checkpoint (the same weights), and exits 1 when it cannot
//  (never 0 without a model). A new run without --resume in its directory
//  is refused, touching nothing (it used to replace round 1 and keep the
//  old higher rounds); with --force it replaces the old run entirely.
Test (resume, finished_run_keeps_its_model_and_refuses_a_fresh_run, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    pltest_run_daemons (&run, "done", SMALL_CONFIG (5), 2);
    char model[4096], summary[4096];
    pltest_path (model, run.dir, "done/model.ckpt");
    pltest_path (summary, run.dir, "done/summary.json");
    nn_model_t *a = pltest_load_model (run.dir, "done", "vgg5");

    cr_assert_eq (unlink (model), 0);
    cr_assert_eq (s_server_alone (&run, "done", SMALL_CONFIG (5), "--resume"), 0);
    nn_model_t *b = pltest_load_model (run.dir, "done", "vgg5");
    cr_assert_eq (pltest_max_rel_diff (a, b), 0.0, "the rebuilt model is not the run's");
    nn_model_destroy (&b);
    cr_assert (pltest_log_has (&run, "server.log", "writing it from the final checkpoint"));

    cr_assert_eq (unlink (model), 0);
    cr_assert_eq (mkdir (model, 0755), 0);
    cr_assert_eq (s_server_alone (&run, "done", SMALL_CONFIG (5), "--resume"), 1,
                  "a complete run without its model succeeded");
    cr_assert_eq (rmdir (model), 0);
    cr_assert_eq (s_server_alone (&run, "done", SMALL_CONFIG (5), "--resume"), 0);

    char *before = pltest_read (summary);
    cr_assert_not_null (before);
    cr_assert_eq (s_server_alone (&run, "done", SMALL_CONFIG (6), NULL), 1,
                  "a fresh run started over a finished one");
    cr_assert (pltest_log_has (&run, "server.log", "holds checkpoints of a complete run of 1 "
                          "epoch(s)") && pltest_log_has (&run, "server.log", "--force"),
               "unclear refusal");
    char *after = pltest_read (summary);
    cr_assert_str_eq (after, before, "the refused run changed summary.json");
    free (after);
    free (before);
    b = pltest_load_model (run.dir, "done", "vgg5");
    cr_assert_eq (pltest_max_rel_diff (a, b), 0.0, "the refused run changed model.ckpt");
    nn_model_destroy (&b);

    //  --force: another seed's run replaces it; none of the old run's
    //  checkpoints is left (--resume would find them "for another run").
    char bind[64];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    pid_t server = s_spawn_server (&run, "done", SMALL_CONFIG (6), bind, "--force");
    pid_t c0 = pltest_start_client (&run, 0, bind), c1 = pltest_start_client (&run, 1, bind);
    pltest_expect_exit (&run, server, 0, "server with --force");
    pltest_expect_exit (&run, c0, 0, "client 0");
    pltest_expect_exit (&run, c1, 0, "client 1");
    cr_assert_eq (s_server_alone (&run, "done", SMALL_CONFIG (6), "--resume"), 0);
    cr_assert (pltest_log_has (&run, "server.log", "is complete"), "the new run is not complete");
    b = pltest_load_model (run.dir, "done", "vgg5");
    cr_assert_gt (pltest_max_rel_diff (a, b), 0.0, "--force kept the old model");
    nn_model_destroy (&b);
    nn_model_destroy (&a);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  Every DIR/checkpoints/round-*/state.json of a run: paths into paths.
static int
s_states (const char *results, char paths[][4096], int max)
{
    char dir[4096];
    int len = snprintf (dir, sizeof dir, "%s/checkpoints", results);
    cr_assert (len > 0 && len < (int) sizeof dir);
    DIR *d = opendir (dir);
    cr_assert_not_null (d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir (d)) && n < max)
        if (strncmp (e->d_name, "round-", 6) == 0) {
            len = snprintf (paths[n++], 4096, "%s/%s/state.json", dir, e->d_name);
            cr_assert (len > 0 && len < 4096);
        }
    closedir (d);
    return n;
}

//  state.json text with its checksum made right for its content (the
//  BLAKE2b-256 of the text with the checksum's digits as '0's).
static char *
s_print_with_checksum (cJSON *state)
{
    char zeros[65];
    memset (zeros, '0', 64);
    zeros[64] = 0;
    cJSON_DeleteItemFromObjectCaseSensitive (state, "checksum");
    cJSON_AddStringToObject (state, "checksum", zeros);
    char *text = cJSON_Print (state);
    char *at = strstr (text, zeros);
    cr_assert_not_null (at);
    unsigned char sum[crypto_generichash_BYTES];
    crypto_generichash (sum, sizeof sum, (unsigned char *) text, strlen (text), NULL, 0);
    char hex[65];
    sodium_bin2hex (hex, sizeof hex, sum, sizeof sum);
    memcpy (at, hex, 64);
    return text;
}

//  Edits of a parsed state.json; true: give it a right checksum.
static bool
s_format1_huge_epoch (cJSON *state)
{
    cJSON_DeleteItemFromObjectCaseSensitive (state, "checksum");
    cJSON_SetNumberValue (cJSON_GetObjectItemCaseSensitive (state, "format"), 1);
    cJSON_SetNumberValue (cJSON_GetObjectItemCaseSensitive (state, "epoch"), 1e300);
    return false;
}

static bool
s_huge_round_iter (cJSON *state)
{
    cJSON_SetNumberValue (cJSON_GetObjectItemCaseSensitive (state, "round_iter"),
                          4294967295.0);
    return true;
}

//  Write each paths[i] as orig[i] (its text as written) after edit.
static void
s_edit_states (char paths[][4096], char **orig, int n, bool (*edit) (cJSON *))
{
    for (int i = 0; i < n; i++) {
        cJSON *state = cJSON_Parse (orig[i]);
        cr_assert_not_null (state, "%s", paths[i]);
        char *text = edit (state) ? s_print_with_checksum (state) : cJSON_Print (state);
        pltest_write (paths[i], text);
        free (text);
        cJSON_Delete (state);
    }
}

//  A damaged state.json is refused, never resumed from: a changed value
//  fails the checksum; a value out of range fails even with a right
//  checksum, or in a format-1 file (no checksum). The old code resumed
//  "epoch 1e300" as epoch -2147483648 and waited for devices.
Test (resume, damaged_state_json_is_refused, .timeout = 400)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "resume");
    pltest_run_daemons (&run, "st", SMALL_CONFIG (5), 2);
    char results[4096], paths[8][4096];
    pltest_path (results, run.dir, "st");
    int n = s_states (results, paths, 8);
    cr_assert_geq (n, 2, "%d checkpoints", n);
    char *orig[8];
    for (int i = 0; i < n; i++)
        orig[i] = pltest_read (paths[i]);

    //  The epoch edited in the text: the checksum no longer matches.
    for (int i = 0; i < n; i++) {
        cJSON *state = cJSON_Parse (orig[i]);
        int epoch = (int) cJSON_GetObjectItemCaseSensitive (state, "epoch")->valuedouble;
        cJSON_Delete (state);
        char from[32], *text = strdup (orig[i]);
        snprintf (from, sizeof from, "\"epoch\":\t%d,", epoch);
        char *at = strstr (text, from);
        cr_assert_not_null (at, "%s lacks %s", paths[i], from);
        memcpy (at + 9, "9", 1);
        pltest_write (paths[i], text);
        free (text);
    }
    cr_assert_eq (s_server_alone (&run, "st", SMALL_CONFIG (5), "--resume"), 1);
    cr_assert (pltest_log_has (&run, "server.log", "checksum mismatch"), "no checksum error");

    //  Format 1 (no checksum) with epoch 1e300: the range check.
    s_edit_states (paths, orig, n, s_format1_huge_epoch);
    cr_assert_eq (s_server_alone (&run, "st", SMALL_CONFIG (5), "--resume"), 1);
    cr_assert (pltest_log_has (&run, "server.log", "epoch 1e+300 out of range"),
               "no range error for the epoch");

    //  A right checksum over a round_iter past the epoch's batches.
    s_edit_states (paths, orig, n, s_huge_round_iter);
    cr_assert_eq (s_server_alone (&run, "st", SMALL_CONFIG (5), "--resume"), 1);
    cr_assert (pltest_log_has (&run, "server.log", "round_iter 4.29497e+09 out of range"),
               "no range error for round_iter");

    //  The files as written: the run is complete again.
    for (int i = 0; i < n; i++) {
        pltest_write (paths[i], orig[i]);
        free (orig[i]);
    }
    cr_assert_eq (s_server_alone (&run, "st", SMALL_CONFIG (5), "--resume"), 0);
    cr_assert (pltest_log_has (&run, "server.log", "is complete"));
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
