/*  test_quota.c: the planner's inputs on a device under a CPU quota
    (docs/planner.md, "Devices under a CPU quota").

    A device at 10% of a core (cgroup cpu.max 10 ms per 100 ms period, as
    pipelearn-lab --device-cpu 10 sets, or a container's CPU limit) runs at
    full speed for 10 ms and then not at all until the next period. What
    the planner needs is what the device sustains, about ten times slower
    than its unthrottled speed.

    profile: nn_profile_run of VGG5 at batch 20 (every unit's forward and
    backward take a few milliseconds, so an iteration fits inside one
    10 ms slice) in a child in a cgroup of its own at 10% of a core must
    read per-batch forward and backward times at least 5x the CPU time the
    same work takes (measured in this process with the CPU-time clock,
    which other load on the host does not inflate). Why it holds under
    load: the quota lets the child run at most 10 ms per 100 ms whatever
    else runs, so sustained wall time >= 10x its CPU time; load only adds
    wall time. The margin (5x for 10x) is for the window's edges (an
    average over about three periods can miss most of one pause). Before
    the fix the profile kept the fastest iteration, one that fitted in a
    slice, and read about 1x.

    Exit 0 pass, 1 fail, 77 skip (no cgroup can be made: not root, no cpu
    controller). Every group it makes is removed, its child reaped.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "nn_model.h"
#include "nn_profile.h"
#include "pl_clock.h"
#include "pltest_cgroup.h"

#define S_SKIP 77
#define S_QUOTA_US 10000
#define S_PERIOD_US 100000

static double
s_cpu_clock (void *arg)
{
    (void) arg;
    struct timespec ts;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

//  window_s 0: the profile's default; the CPU-time reference needs none
//  (no pauses to average: CPU time stops with the process) and takes
//  tiny, else its window would be 0.3 CPU seconds per measurement.
static int
s_profile (nn_profile_now_fn now, double window_s, nn_estimate_costs_t *costs)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_profile_args_t a = { .batch_size = 20, .iterations = 3, .seed = 1, .now = now,
                            .window_s = window_s };
    char err[NN_ERR_SIZE];
    if (nn_profile_run (&spec, &a, costs, NULL, NULL, err, sizeof err)) {
        fprintf (stderr, "profile: %s\n", err);
        return -1;
    }
    return 0;
}

static void
s_sums (const nn_estimate_costs_t *c, double *fwd, double *bwd)
{
    *fwd = *bwd = 0.0;
    for (int u = 0; u < c->units_count; u++) {
        *fwd += c->unit[u].fwd_s;
        *bwd += c->unit[u].bwd_s;
    }
}

//  Runs fn in a child inside group g; the child writes `bytes` of result
//  to a pipe. 0 with out filled, -1 if the child failed.
static int
s_in_group (const pltest_cgroup_t *g, int (*fn) (void *out), void *out, size_t bytes)
{
    int fd[2];
    if (pipe (fd))
        return -1;
    pid_t pid = fork ();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close (fd[0]);
        if (pltest_cgroup_join (g)) {
            fprintf (stderr, "cannot join %s: %s\n", g->dir, strerror (errno));
            _exit (2);
        }
        int rc = fn (out);
        if (rc == 0 && write (fd[1], out, bytes) != (ssize_t) bytes)
            rc = -1;
        _exit (rc ? 1 : 0);
    }
    close (fd[1]);
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = read (fd[0], (char *) out + got, bytes - got);
        if (n <= 0)
            break;
        got += (size_t) n;
    }
    close (fd[0]);
    int status = 0;
    while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
        ;
    return got == bytes && WIFEXITED (status) && WEXITSTATUS (status) == 0 ? 0 : -1;
}

static int
s_profile_wall (void *out)
{
    return s_profile (pl_monotonic_clock, 0.0, out);
}

static int
s_test_profile (void)
{
    nn_estimate_costs_t cpu, wall, quota;
    if (s_profile (s_cpu_clock, 1e-9, &cpu) || s_profile (pl_monotonic_clock, 0.0, &wall))
        return 1;
    pltest_cgroup_t g;
    char why[512];
    if (pltest_cgroup_new (&g, "pl-test-quota", S_QUOTA_US, S_PERIOD_US, why, sizeof why)) {
        printf ("SKIP: %s\n", why);
        return S_SKIP;
    }
    double t0 = pl_monotonic ();
    int rc = s_in_group (&g, s_profile_wall, &quota, sizeof quota);
    double took = pl_monotonic () - t0;
    long throttled = pltest_cgroup_throttled (&g);
    if (pltest_cgroup_remove (&g))
        fprintf (stderr, "could not remove %s\n", g.dir);
    if (rc) {
        printf ("FAIL: the profile in the quota group failed\n");
        return 1;
    }
    double cf, cb, wf, wb, qf, qb;
    s_sums (&cpu, &cf, &cb);
    s_sums (&wall, &wf, &wb);
    s_sums (&quota, &qf, &qb);
    printf ("VGG5 batch 20, per batch (all units):\n"
            "  CPU time            forward %.4f s backward %.4f s\n"
            "  wall, no quota      forward %.4f s backward %.4f s\n"
            "  wall, %2d%% quota     forward %.4f s backward %.4f s (%.1fx, %.1fx the CPU "
            "time; %.1f s, %ld throttled periods)\n",
            cf, cb, wf, wb, 100 * S_QUOTA_US / S_PERIOD_US, qf, qb, qf / cf, qb / cb, took,
            throttled);
    if (!(qf >= 5.0 * cf && qb >= 5.0 * cb)) {
        printf ("FAIL: at 10%% of a core the profile must read >= 5x the CPU time "
                "(the quota allows 10x at best)\n");
        return 1;
    }
    return 0;
}

int
main (int argc, char **argv)
{
    //  A child must not outlive a killed test with a group around it.
    signal (SIGPIPE, SIG_IGN);
    const char *which = argc > 1 ? argv[1] : "profile";
    if (strcmp (which, "profile") == 0)
        return s_test_profile ();
    fprintf (stderr, "usage: test_quota profile\n");
    return 2;
}
