/*  test_resume.c: crash safety of the server (suite 'net'). The server is
    killed with SIGKILL in the middle of a run; `--resume` on the same
    results directory continues from the newest valid checkpoint (a
    corrupted one is skipped) and the final model equals an uninterrupted
    run's. sfl, momentum 0: devices restart with fresh processes and keep no
    optimiser state, so with momentum the two runs would differ by design. */
#define TMP_TEMPLATE "/tmp/pl_test_resume_XXXXXX"
#include "testdir.h"
#include "daemonrun.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#define RESUME_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"momentum\": 0, \"split_point\": 1, \"threads\": 1, \"devices\": 2, " \
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
    s_csv_t csv = s_load_csv (dir, sub);
    s_tl_t tl = { { 0 }, { 1e300, 1e300, 1e300, 1e300 }, { 0 } };
    for (int i = 0; i < csv.count; i++) {
        const s_row_t *r = &csv.rows[i];
        cr_assert (r->epoch >= 1 && r->epoch <= 3, "%s/timeline.csv row %d: epoch %d", sub,
                   i + 1, r->epoch);
        tl.rows[r->epoch] += strcmp (r->stage, "wait") != 0;
        tl.first[r->epoch] = r->start_s < tl.first[r->epoch] ? r->start_s : tl.first[r->epoch];
        tl.last[r->epoch] = r->end_s > tl.last[r->epoch] ? r->end_s : tl.last[r->epoch];
    }
    free (csv.rows);
    return tl;
}

static void
s_full_run (s_run_t *run, const char *sub)
{
    char endpoint[256];
    pid_t server = s_start_server (run, sub, RESUME_CONFIG, endpoint, sizeof endpoint);
    pid_t c0 = s_start_client (run, 0, endpoint), c1 = s_start_client (run, 1, endpoint);
    s_expect_exit (run, server, 0, "server");
    s_expect_exit (run, c0, 0, "client 0");
    s_expect_exit (run, c1, 0, "client 1");
}

//  Kill the server in epoch 2, optionally corrupt the newest checkpoint,
//  resume with fresh devices; the result must equal the uninterrupted run.
static void
s_crash_and_resume (bool corrupt)
{
    s_run_t run = { 0 };
    s_mkdtemp (run.dir);
    s_full_run (&run, "whole");

    char bind[64], endpoint[256], summary[4096];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    s_path (summary, run.dir, "crash/summary.json");
    pid_t server = s_start_server_full (&run, "crash", RESUME_CONFIG, endpoint,
                                        sizeof endpoint, NULL, NULL, bind, false);
    pid_t c0 = s_start_client_sec (&run, 0, endpoint, NULL, NULL, "3");
    pid_t c1 = s_start_client_sec (&run, 1, endpoint, NULL, NULL, "3");
    //  summary.json appears when epoch 1 ends: then kill it mid epoch 2.
    double deadline = pl_monotonic () + 120;
    while (access (summary, F_OK) != 0 && pl_monotonic () < deadline)
        usleep (10000);
    cr_assert_eq (access (summary, F_OK), 0, "epoch 1 never ended");
    usleep (300000);
    cr_assert_eq (kill (server, SIGKILL), 0);
    s_wait (&run, server, pl_monotonic () + 5);
    //  The devices give up on the dead server with an error.
    s_expect_exit (&run, c0, 1, "client 0 after the crash");
    s_expect_exit (&run, c1, 1, "client 1 after the crash");

    char ckdir[4096];
    s_path (ckdir, run.dir, "crash/checkpoints/round-000002-000000");
    cr_assert_eq (access (ckdir, F_OK), 0, "no checkpoint at the start of epoch 2");
    if (corrupt) {
        char file[4200];
        snprintf (file, sizeof file, "%s/replica-1.ckpt", ckdir);
        cr_assert_eq (truncate (file, 1000), 0);
    }
    server = s_start_server_full (&run, "crash", RESUME_CONFIG, endpoint, sizeof endpoint,
                                  NULL, NULL, bind, true);
    c0 = s_start_client (&run, 0, endpoint);
    c1 = s_start_client (&run, 1, endpoint);
    s_expect_exit (&run, server, 0, "resumed server");
    s_expect_exit (&run, c0, 0, "client 0 after the resume");
    s_expect_exit (&run, c1, 0, "client 1 after the resume");
    if (corrupt) {
        cr_assert (s_log_has (&run, "server.log", "skipping checkpoint round-000002-000000"),
                   "the corrupt checkpoint was not reported");
        cr_assert (s_log_has (&run, "server.log", "round-000001-000000: epoch 1"));
    }
    else
        cr_assert (s_log_has (&run, "server.log", "round-000002-000000: epoch 2"),
                   "did not resume from the start of epoch 2");

    nn_model_t *a = s_load_model (run.dir, "whole", "vgg5");
    nn_model_t *b = s_load_model (run.dir, "crash", "vgg5");
    double d = s_max_rel_diff (a, b);
    cr_expect (d < 1e-5, "resumed model differs from the uninterrupted one by %g", d);
    cJSON *s = s_summary (run.dir, "crash");
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
    s_kill_all (&run);
    s_rmtree (run.dir);
}

Test (resume, killed_server_resumes_to_the_same_model, .timeout = 400)
{
    s_crash_and_resume (false);
}

Test (resume, corrupt_checkpoint_is_skipped_for_the_previous_one, .timeout = 400)
{
    s_crash_and_resume (true);
}

//  A planned run ("auto"): the server re-plans from the devices it gets
//  after the restart, but resumes with the split point it checkpointed
//  (its own provisional plan could differ and the checkpoint would not
//  fit), and finishes the run.
#define AUTO_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 2000, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 3, \"seed\": 21, " \
    "\"split_point\": \"auto\", \"micro_batches\": \"auto\", \"threads\": 1, " \
    "\"devices\": 2, \"mode\": \"pipelearn\", \"uplink_mbps\": 1000}"

Test (resume, planned_run_resumes_with_its_split, .timeout = 400)
{
    s_run_t run = { 0 };
    s_mkdtemp (run.dir);
    char bind[64], endpoint[256], summary[4096];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_free_port ());
    s_path (summary, run.dir, "auto/summary.json");
    pid_t server = s_start_server_full (&run, "auto", AUTO_CONFIG, endpoint, sizeof endpoint,
                                        NULL, NULL, bind, false);
    pid_t c0 = s_start_client_sec (&run, 0, endpoint, NULL, NULL, "3");
    pid_t c1 = s_start_client_sec (&run, 1, endpoint, NULL, NULL, "3");
    double deadline = pl_monotonic () + 120;
    while (access (summary, F_OK) != 0 && pl_monotonic () < deadline)
        usleep (10000);
    cr_assert_eq (access (summary, F_OK), 0, "epoch 1 never ended");
    cJSON *s = s_summary (run.dir, "auto");
    int split = (int) s_num (cJSON_GetObjectItemCaseSensitive (s, "plan"), "split_point");
    cJSON_Delete (s);
    usleep (300000);
    cr_assert_eq (kill (server, SIGKILL), 0);
    s_wait (&run, server, pl_monotonic () + 5);
    s_expect_exit (&run, c0, 1, "client 0 after the crash");
    s_expect_exit (&run, c1, 1, "client 1 after the crash");
    server = s_start_server_full (&run, "auto", AUTO_CONFIG, endpoint, sizeof endpoint,
                                  NULL, NULL, bind, true);
    c0 = s_start_client (&run, 0, endpoint);
    c1 = s_start_client (&run, 1, endpoint);
    s_expect_exit (&run, server, 0, "resumed server");
    s_expect_exit (&run, c0, 0, "client 0 after the resume");
    s_expect_exit (&run, c1, 0, "client 1 after the resume");
    cr_assert (s_log_has (&run, "server.log", "resuming from"), "did not resume");
    s = s_summary (run.dir, "auto");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 3);
    int split2 = (int) s_num (cJSON_GetObjectItemCaseSensitive (s, "plan"), "split_point");
    cr_expect (split2 >= 1 && split2 <= 4, "split point %d after the resume", split2);
    cr_expect (split >= 1 && split <= 4);
    cJSON_Delete (s);
    s_kill_all (&run);
    s_rmtree (run.dir);
}
