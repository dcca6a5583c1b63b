/*  pltest_victim.c: Criterion tests that start daemons through pltest and
    then fail on purpose, for test_pltest to run as a separate program and
    check afterwards that none of those daemons is left. Not a test of its
    own (it fails by design); meson builds it, test_pltest runs it.

    Each test starts a server (configured for two devices, it waits for
    them for ever) and one device, writes "PID STARTTIME" of both to
    $PLTEST_VICTIM_DIR/pids (STARTTIME: field 22 of /proc/PID/stat, so a
    reader can tell the process from a later one given the same number),
    then leaves by the path its name says. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pltest.h"

#define VICTIM_CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 200, " \
    "\"test_samples\": 100, \"batch_size\": 50, \"epochs\": 1, \"seed\": 3, " \
    "\"split_point\": 1, \"threads\": 1, \"devices\": 2, \"mode\": \"sfl\"}"

static unsigned long long
s_starttime (pid_t pid)
{
    char state;
    unsigned long long start;
    cr_assert_eq (pltest_proc_stat (pid, &state, &start), 0, "no /proc/%d/stat", (int) pid);
    return start;
}

//  Start the server and a device in run, record both; the run's directory
//  is under $PLTEST_VICTIM_DIR.
static void
s_start_daemons (pltest_run_t *run)
{
    const char *dir = getenv ("PLTEST_VICTIM_DIR");
    cr_assert_not_null (dir, "PLTEST_VICTIM_DIR is not set: test_pltest runs this program");
    pltest_path (run->dir, dir, "run");
    cr_assert_eq (mkdir (run->dir, 0700), 0, "%s", run->dir);
    char endpoint[256], pids[4096];
    pid_t server = pltest_start_server (run, "res", VICTIM_CONFIG, endpoint, sizeof endpoint);
    pid_t device = pltest_start_client (run, 0, endpoint);
    pltest_path (pids, dir, "pids");
    FILE *f = fopen (pids, "w");
    cr_assert_not_null (f, "%s", pids);
    fprintf (f, "%d %llu\n%d %llu\n", (int) server, s_starttime (server), (int) device,
             s_starttime (device));
    cr_assert_eq (fclose (f), 0);
}

Test (victim, failed_assertion)
{
    pltest_run_t run = { 0 };
    s_start_daemons (&run);
    cr_assert_fail ("deliberate failure with a server and a device running");
}

//  What Criterion's .timeout does to a test's process, and what a crash
//  amounts to for the daemons: no fini, no atexit handler runs.
Test (victim, killed)
{
    pltest_run_t run = { 0 };
    s_start_daemons (&run);
    raise (SIGKILL);
}

Test (victim, crashed)
{
    pltest_run_t run = { 0 };
    s_start_daemons (&run);
    abort ();
}
