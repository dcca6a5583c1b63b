/*  test_pltest.c: the tests' support library cleans up after a failing
    test (suite 'net'). pltest_victim (tests/tools) starts a server and a
    device through pltest and then fails: by a failed assertion, by being
    killed (SIGKILL, as Criterion's .timeout does), by a crash. It runs here
    as its own program; afterwards neither daemon may be running. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pl_clock.h"
#include "pltest.h"
#include "runcmd.h"

typedef enum { S_GONE, S_ZOMBIE, S_RUNNING } s_state_t;

//  The process recorded as pid started at starttime: gone (no such
//  process, or the number now belongs to a later one), exited but not
//  yet reaped by whoever adopted it, or still running.
static s_state_t
s_state (int pid, unsigned long long starttime)
{
    char state;
    unsigned long long start;
    if (pltest_proc_stat (pid, &state, &start) != 0 || start != starttime)
        return S_GONE;
    return state == 'Z' || state == 'X' ? S_ZOMBIE : S_RUNNING;
}

//  Run pltest_victim's test name; then every daemon it recorded must be
//  gone at once (reaped) or, when reaped, dead within 10 s.
static void
s_victim (const char *name, const char *outcome, bool reaped)
{
    char dir[4096], bin[4096], cmd[4096], out[16384], pids[4096];
    pltest_mkdtemp (dir, "victim");
    built ("tests/pltest_victim", bin, sizeof bin);
    //  Without BXFI_MAP: Criterion's worker sets it for itself, and a
    //  Criterion program that inherits it takes itself for that worker
    //  and aborts.
    int n = snprintf (cmd, sizeof cmd,
                      "env -u BXFI_MAP PLTEST_VICTIM_DIR='%s' '%s' --filter 'victim/%s'", dir,
                      bin, name);
    cr_assert (n > 0 && n < (int) sizeof cmd, "command too long");
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_neq (rc, 0, "pltest_victim %s passed:\n%s", name, out);
    cr_assert (strstr (out, outcome), "pltest_victim %s: no \"%s\" in:\n%s", name, outcome,
               out);
    pltest_path (pids, dir, "pids");
    FILE *f = fopen (pids, "r");
    cr_assert_not_null (f, "pltest_victim %s recorded no daemons:\n%s", name, out);
    int pid, count = 0;
    unsigned long long start;
    while (fscanf (f, "%d %llu", &pid, &start) == 2) {
        count++;
        if (reaped)
            cr_expect_eq (s_state (pid, start), S_GONE,
                          "%s: daemon %d was not killed and reaped by the test's process",
                          name, pid);
        double deadline = pl_monotonic () + 10;
        while (s_state (pid, start) == S_RUNNING && pl_monotonic () < deadline)
            usleep (20000);
        if (s_state (pid, start) == S_RUNNING)
            kill (pid, SIGKILL);
        cr_expect_neq (s_state (pid, start), S_RUNNING,
                       "%s: daemon %d still running 10 s after its test's process ended",
                       name, pid);
    }
    fclose (f);
    cr_assert_eq (count, 2, "%s: %d daemons recorded, want the server and a device", name,
                  count);
    pltest_rmtree (dir);
}

Test (pltest, failed_assertion_leaves_no_daemon, .timeout = 120)
{
    s_victim ("failed_assertion", "deliberate failure", true);
}

Test (pltest, killed_test_leaves_no_daemon, .timeout = 120)
{
    s_victim ("killed", "victim::killed: CRASH", false);
}

Test (pltest, crashed_test_leaves_no_daemon, .timeout = 120)
{
    s_victim ("crashed", "victim::crashed: CRASH", false);
}
