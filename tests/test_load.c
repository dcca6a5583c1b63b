/*  test_load.c: one server, 32 devices on loopback (suite 'net'): every
    device finishes the epoch and the server's peak RSS stays within the
    bound the daemons promise for VGG5, 64 MiB + 16 MiB per device. The
    compute pool keeps activation memory per core; only each device's
    replica slabs (about 5.5 MiB at split 1) grow with the devices. */
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

#define LOAD_DEVICES 32
#define LOAD_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 3200, " \
    "\"test_samples\": 200, \"batch_size\": 50, \"epochs\": 1, \"seed\": 4, " \
    "\"split_point\": 1, \"threads\": 2, \"devices\": 32, \"mode\": \"pipelearn\", " \
    "\"micro_batches\": 2}"

Test (load, thirty_two_devices_finish_an_epoch_in_bounded_memory, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "load");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run", LOAD_CONFIG, endpoint, sizeof endpoint);
    pid_t c[LOAD_DEVICES];
    for (int i = 0; i < LOAD_DEVICES; i++)
        c[i] = pltest_start_client_sec (&run, i, endpoint, NULL, NULL, "120");
    pltest_expect_exit (&run, server, 0, "server");
    for (int i = 0; i < LOAD_DEVICES; i++)
        pltest_expect_exit (&run, c[i], 0, "a device");
    cJSON *s = pltest_summary (run.dir, "run");
    const cJSON *e = pltest_last_epoch (s);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (e, "devices");
    cr_assert_eq (cJSON_GetArraySize (devs), LOAD_DEVICES);
    for (int i = 0; i < LOAD_DEVICES; i++)
        cr_expect_eq (pltest_num (cJSON_GetArrayItem (devs, i), "samples"), 100.0,
                      "device %d did not report its shard", i);
    double rss_kb = pltest_num (s, "peak_rss_kb");
    double bound_kb = (64.0 + 16.0 * LOAD_DEVICES) * 1024.0;
    cr_log_info ("32 devices: server peak RSS %.0f KiB (bound %.0f KiB), workers %.0f",
                 rss_kb, bound_kb, pltest_num (cJSON_GetObjectItemCaseSensitive (e, "server"),
                                          "workers"));
    cr_expect (PLTEST_UNDER_ASAN || rss_kb < bound_kb, "server peak RSS %.0f KiB over the bound %.0f KiB", rss_kb,
               bound_kb);
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
