/*  test_inproc.c: pipelearn-server and two pipelearn-clients in one process
    over inproc:// (suite 'net'), through srv_run / cli_run, the functions
    the binaries' main calls. The same run over loopback TCP (the real
    binaries) must end with the same model: the transport does not change
    the training. */
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
#include "pl_blas.h"
#include "pl_timeline.h"
#include "pltest.h"

#include "cli_run.h"
#include "srv_run.h"

#include <czmq.h>
#include <pthread.h>

#define INPROC_CONFIG \
    "{\"model\": \"vgg5-nobn\", \"dataset\": \"synthetic\", \"samples\": 1200, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 2, \"seed\": 13, " \
    "\"split_point\": 2, \"threads\": 1, \"devices\": 2, \"mode\": \"pipelearn\", " \
    "\"micro_batches\": 5}"

typedef struct {
    int argc;
    char *argv[24];
    int rc;
    bool server;
} s_daemon_t;

static void *
s_daemon_thread (void *arg)
{
    s_daemon_t *d = arg;
    d->rc = d->server ? srv_run (d->argc, d->argv) : cli_run (d->argc, d->argv);
    return NULL;
}

Test (inproc, server_and_devices_in_one_process_match_tcp, .timeout = 300)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "inproc");
    char cfg[4096], res[4096];
    pltest_path (cfg, run.dir, "inproc.json");
    pltest_write (cfg, INPROC_CONFIG);
    pltest_path (res, run.dir, "inproc");
    const char *endpoint = "inproc://pipelearn-test";
    s_daemon_t srv = { .server = true, .argc = 9,
                       .argv = { "pipelearn-server", "--config", cfg, "--bind",
                                 (char *) endpoint, "--results", res, "--insecure",
                                 "--quiet", NULL } };
    //  Process-wide setup each run does too, done once before the threads:
    //  CZMQ's global context is created on first use, not under a lock.
    zsys_init ();
    pthread_t threads[3];
    cr_assert_eq (pthread_create (&threads[0], NULL, s_daemon_thread, &srv), 0);
    //  inproc:// lets a device connect before the server binds, so no wait.
    s_daemon_t cli[2];
    char ids[2][4] = { "0", "1" };
    for (int i = 0; i < 2; i++) {
        cli[i] = (s_daemon_t) { .server = false, .argc = 6,
                                .argv = { "pipelearn-client", "--connect", (char *) endpoint,
                                          "--device-id", ids[i], "--insecure", NULL } };
        cr_assert_eq (pthread_create (&threads[i + 1], NULL, s_daemon_thread, &cli[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join (threads[i], NULL);
    cr_assert_eq (srv.rc, 0, "in-process server exit status %d", srv.rc);
    cr_assert_eq (cli[0].rc, 0, "in-process device 0 exit status %d", cli[0].rc);
    cr_assert_eq (cli[1].rc, 0, "in-process device 1 exit status %d", cli[1].rc);

    //  The same run over TCP with the real binaries, on this process's
    //  OpenBLAS core: a daemon picks a faster one where OpenBLAS mistakes
    //  the CPU (pl_blas_setup re-runs it; on an Intel Xeon family 6 model
    //  207 it read Prescott, and the daemons took SkylakeX), and another
    //  core's sums differ in their last bits (1.5e-4 after two epochs).
    setenv ("OPENBLAS_CORETYPE", pl_blas_corename (), 1);
    char ep[256];
    pid_t server = pltest_start_server (&run, "tcp", INPROC_CONFIG, ep, sizeof ep);
    pid_t c0 = pltest_start_client (&run, 0, ep), c1 = pltest_start_client (&run, 1, ep);
    pltest_expect_exit (&run, server, 0, "tcp server");
    pltest_expect_exit (&run, c0, 0, "tcp device 0");
    pltest_expect_exit (&run, c1, 0, "tcp device 1");

    nn_model_t *a = pltest_load_model (run.dir, "inproc", "vgg5-nobn");
    nn_model_t *b = pltest_load_model (run.dir, "tcp", "vgg5-nobn");
    double d = pltest_max_rel_diff (a, b);
    cr_expect (d < 1e-5, "inproc and tcp runs differ by %g", d);
    cJSON *s = pltest_summary (run.dir, "inproc");
    cr_expect_eq (cJSON_GetArraySize (cJSON_GetObjectItemCaseSensitive (s, "epochs")), 2);
    cJSON_Delete (s);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
