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
    slice, and read about 1x. The same for nn_profile_codecs' round trip
    (encode + decode; fp16, int8, topk on a 20x14x14x32 tensor).

    probe, probe_busy: srv_linkrate (the server's PROBE exchange) between
    two network namespaces joined by a veth pair whose ends tbf limits to
    the 4g profile's 25 Mbit/s down and 10 up; the device's end answers as
    pipelearn-client does, in a cgroup at 10% of a core, idle (probe) or
    with a thread spinning so that the group is throttled every period
    (probe_busy). Of three measurements, the median must read >= 70% of
    both rates (payload, so at most ~96%) and every one >= 50%. What it
    guards: a probe that measures the device's CPU, not its link, or the
    prober's (such readings were 14-30%: 3.6-5.3 of 25 below, 7.1-7.6 of 25
    in issue 17's lab runs). Why one round may read less than 70%:
    a round sums about 0.66 s of transfers, and one retransmission timeout
    (200 ms at least) or two or three quota pauses of a throttled device
    (up to 90 ms each) inside it cost 25-30%. Seen twice in the 7 CI runs
    that had these tests (14 probe runs), one round each at 7.0 of 10 Mbit/s up: round 0 of an idle device (stop 25's
    CI), round 2 of a busy one (64 throttled periods; t13_avx2_2); the
    other rounds of those runs read 9.6. Measured 2026-11-26 (AMD EPYC, loaded
    host): idle, 0 throttled periods, 23-25 down / 9.5-10 up, before and
    after the probes were summed; busy, 19-22 / 9-11 before (one round at
    18.8, 75%), 21-22 / 9.6-9.9 after. This kernel has no sch_netem, so
    there is no delay on the link and TCP's slow start (which summing also
    dilutes) is not exercised. The server's side matters as much: run in
    parallel with quota_profile on the loaded host, the prober (no quota,
    but in the CI's low-priority group) read an idle device's link as
    3.6-5.3 Mbit/s down; hence the lab suite, not parallel.

    Exit 0 pass, 1 fail, 77 skip (no cgroup, network namespace or tbf can
    be made: not root, no cpu controller). Every group, namespace and child
    it makes is removed.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <zmq.h>

#include "nn_alloc.h"
#include "nn_model.h"
#include "nn_profile.h"
#include "pl_clock.h"
#include "pltest_cgroup.h"
#include "proto_msg.h"
#include "srv_linkrate.h"

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

//  window_s 0: the profile's default; the units' CPU-time reference needs
//  none (no pauses to average: CPU time stops with the process) and takes
//  tiny, else its window would be 0.3 CPU seconds per measurement. The
//  codecs' CPU-time reference takes the default window (0.3 CPU s per
//  codec, hundreds of round trips of 0.1 ms): five round trips, as it
//  took before, averaged one slow iteration into a reference up to 2x off
//  (fp16's encode read 6.5-12.5x slower under the quota in 6 runs on an
//  idle host, and 5.3x and 5.4x in two CI runs).
//  cpu_now: the client's (its compute thread's CPU clock) for the wall
//  profiles, none for the CPU-time reference.
static int
s_profile (nn_profile_now_fn now, nn_profile_now_fn cpu_now, double window_s,
           nn_estimate_costs_t *costs)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_profile_args_t a = { .batch_size = 20, .iterations = 3, .seed = 1, .now = now,
                            .window_s = window_s, .cpu_now = cpu_now };
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

//  The codecs' speeds on an activation-sized tensor (nn_profile_codecs):
//  each encode and decode takes well under a 10 ms slice.
static int
s_codecs (nn_profile_now_fn now, double window_s, nn_estimate_codec_speed_t *speed)
{
    nn_profile_args_t a = { .iterations = 5, .seed = 1, .now = now, .window_s = window_s };
    nn_codec_shape_t shape = { 20, 14, 14, 32 };
    char err[NN_ERR_SIZE];
    if (nn_profile_codecs (&shape, &a, speed, err, sizeof err)) {
        fprintf (stderr, "codecs: %s\n", err);
        return -1;
    }
    return 0;
}

typedef struct {
    nn_estimate_costs_t costs;
    nn_estimate_codec_speed_t codecs;
} s_result_t;

static int
s_profile_wall (void *out)
{
    s_result_t *r = out;
    return s_profile (pl_monotonic_clock, pl_thread_cpu_clock, 0.0, &r->costs)
        || s_codecs (pl_monotonic_clock, 0.0, &r->codecs) ? -1 : 0;
}

static int
s_test_profile (void)
{
    nn_estimate_costs_t cpu, wall;
    nn_estimate_codec_speed_t cpu_codecs;
    s_result_t quota;
    if (s_profile (s_cpu_clock, NULL, 1e-9, &cpu)
    ||  s_profile (pl_monotonic_clock, pl_thread_cpu_clock, 0.0, &wall)
    ||  s_codecs (s_cpu_clock, 0.0, &cpu_codecs))
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
    s_sums (&quota.costs, &qf, &qb);
    printf ("VGG5 batch 20, per batch (all units):\n"
            "  CPU time            forward %.4f s backward %.4f s\n"
            "  wall, no quota      forward %.4f s backward %.4f s\n"
            "  wall, %2d%% quota     forward %.4f s backward %.4f s (%.1fx, %.1fx the CPU "
            "time; %.1f s, %ld throttled periods)\n",
            cf, cb, wf, wb, 100 * S_QUOTA_US / S_PERIOD_US, qf, qb, qf / cf, qb / cb, took,
            throttled);
    int fail = 0;
    if (!(qf >= 5.0 * cf && qb >= 5.0 * cb)) {
        printf ("FAIL: at 10%% of a core the profile must read >= 5x the CPU time "
                "(the quota allows 10x at best)\n");
        fail = 1;
    }
    //  The codecs: the same bound on a round trip's time (encode +
    //  decode), so on its speed. Not on each part: nn_profile_codecs
    //  splits the sustained round trip in the fastest iteration's
    //  proportions, and topk's decode is a few percent of its round trip,
    //  so its share moves with the noise of two fastest-iteration
    //  measurements (native 3 of the issue-13 series on 934eda9: topk
    //  encode 8.4x, decode 4.3x). The planner charges a device its
    //  uplink codec's encode and its downlink codec's decode
    //  (nn_estimate.c); topk codes gradients only, so a device decodes
    //  it, and a mis-split moves a few per cent of its round trip.
    for (int c = NN_CODEC_FP16; c < NN_CODEC_COUNT; c++) {
        double e = cpu_codecs.encode_Bps[c] / quota.codecs.encode_Bps[c];
        double d = cpu_codecs.decode_Bps[c] / quota.codecs.decode_Bps[c];
        double rt = (1.0 / quota.codecs.encode_Bps[c] + 1.0 / quota.codecs.decode_Bps[c])
                  / (1.0 / cpu_codecs.encode_Bps[c] + 1.0 / cpu_codecs.decode_Bps[c]);
        printf ("  codec %-5s round trip %.1fx slower than its CPU time (encode %.1fx, "
                "decode %.1fx)\n", nn_codec_name ((nn_codec_id_t) c), rt, e, d);
        if (!(rt >= 5.0)) {
            printf ("FAIL: codec %s's round trip must read >= 5x slower at 10%% of a core\n",
                    nn_codec_name ((nn_codec_id_t) c));
            fail = 1;
        }
    }
    return fail;
}


//  ---------------------------------------------------------------------
//  probe: a shaped link between two network namespaces, the device's end
//  in a 10% quota group.

#define S_DOWN_MBIT 25
#define S_UP_MBIT 10

static int
s_sh (const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (cmd, sizeof cmd, fmt, ap);
    va_end (ap);
    int rc = system (cmd);
    return rc == 0 ? 0 : -1;
}

static int
s_enter (const char *ns)
{
    char path[256];
    snprintf (path, sizeof path, "/var/run/netns/%s", ns);
    int fd = open (path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = setns (fd, CLONE_NEWNET);
    close (fd);
    return rc;
}

static char s_ns_srv[32], s_ns_dev[32];

static void
s_netns_remove (void)
{
    s_sh ("ip netns del %s 2>/dev/null", s_ns_srv);
    s_sh ("ip netns del %s 2>/dev/null", s_ns_dev);
}

//  Two namespaces joined by a veth pair, 10.9.0.1 (server) and 10.9.0.2
//  (device), each end's egress limited by tbf: the 4g profile's rates.
static int
s_netns_make (char *why, size_t why_size)
{
    long pid = (long) getpid ();
    snprintf (s_ns_srv, sizeof s_ns_srv, "plq%lds", pid);
    snprintf (s_ns_dev, sizeof s_ns_dev, "plq%ldd", pid);
    if (s_sh ("ip netns add %s 2>/dev/null", s_ns_srv)) {
        snprintf (why, why_size, "cannot make a network namespace (ip netns add)");
        return -1;
    }
    if (s_sh ("ip netns add %s", s_ns_dev)
    ||  s_sh ("ip link add %s netns %s type veth peer name %s netns %s", s_ns_srv, s_ns_srv,
              s_ns_dev, s_ns_dev)
    ||  s_sh ("ip -n %s addr add 10.9.0.1/24 dev %s && ip -n %s link set %s up && "
              "ip -n %s link set lo up", s_ns_srv, s_ns_srv, s_ns_srv, s_ns_srv, s_ns_srv)
    ||  s_sh ("ip -n %s addr add 10.9.0.2/24 dev %s && ip -n %s link set %s up && "
              "ip -n %s link set lo up", s_ns_dev, s_ns_dev, s_ns_dev, s_ns_dev, s_ns_dev)
    ||  s_sh ("tc -n %s qdisc add dev %s root tbf rate %dmbit burst 32kb latency 100ms",
              s_ns_srv, s_ns_srv, S_DOWN_MBIT)
    ||  s_sh ("tc -n %s qdisc add dev %s root tbf rate %dmbit burst 32kb latency 100ms",
              s_ns_dev, s_ns_dev, S_UP_MBIT)) {
        snprintf (why, why_size, "cannot make the veth pair or its tbf shaping");
        s_netns_remove ();
        return -1;
    }
    return 0;
}

//  The device: answers every PROBE as pipelearn-client does
//  (cli_planning_probe_answer) until killed.
static void *
s_burn (void *arg)
{
    volatile double x = 0.0;
    for (;;)
        x += 1.0;
    return arg;
}

static void
s_answerer (int port, bool busy)
{
    if (busy) {
        pthread_t t;
        pthread_create (&t, NULL, s_burn, NULL);
    }
    void *ctx = zmq_ctx_new ();
    void *dealer = zmq_socket (ctx, ZMQ_DEALER);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://10.9.0.1:%d", port);
    if (zmq_connect (dealer, ep))
        _exit (3);
    proto_msg_t *hello = proto_msg_new (PROTO_MSG_HEARTBEAT);
    proto_msg_set_route (hello, 0, 0, 0, 0);
    if (proto_msg_send (&hello, dealer))
        _exit (3);
    proto_limits_t limits = { 0 };
    char err[256];
    for (;;) {
        proto_msg_t *msg = NULL;
        if (proto_msg_recv (&msg, dealer, &limits, err, sizeof err))
            _exit (4);
        if (proto_msg_type (msg) == PROTO_MSG_PROBE) {
            proto_probe_t answer = { .probe_id = proto_msg_probe (msg)->probe_id };
            proto_msg_t *out = proto_msg_new (PROTO_MSG_PROBE);
            proto_msg_set_route (out, 0, 0, 0, 0);
            proto_msg_set_probe (out, &answer, proto_msg_probe (msg)->reply_bytes);
            if (proto_msg_send (&out, dealer))
                _exit (5);
        }
        proto_msg_destroy (&msg);
    }
}

//  The server's side: srv_linkrate, as srv_planner runs it, `rounds`
//  times; results (rtt, down, up per round) to fd.
static int
s_prober (int port_fd, int out_fd, int rounds)
{
    void *ctx = zmq_ctx_new ();
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    int timeout = 30000;
    zmq_setsockopt (router, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (zmq_bind (router, "tcp://10.9.0.1:*"))
        return -1;
    char ep[128];
    size_t len = sizeof ep;
    zmq_getsockopt (router, ZMQ_LAST_ENDPOINT, ep, &len);
    int port = atoi (strrchr (ep, ':') + 1);
    if (write (port_fd, &port, sizeof port) != sizeof port)
        return -1;
    proto_limits_t limits = { 0 };
    char err[256];
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len = 0;
    proto_msg_t *msg = NULL;
    if (proto_msg_recv_from (&msg, router, rid, &rid_len, &limits, err, sizeof err))
        return -1;
    proto_msg_destroy (&msg);
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    for (int r = 0; r < rounds; r++) {
        proto_msg_t *next = srv_linkrate_probe (&link, 0, 0);
        while (next) {
            if (proto_msg_send_to (&next, router, rid, rid_len))
                return -1;
            if (proto_msg_recv_from (&msg, router, rid, &rid_len, &limits, err, sizeof err))
                return -1;
            int rc = srv_linkrate_answer (&link, msg, 0, 0, 0, &next, err, sizeof err);
            proto_msg_destroy (&msg);
            if (rc)
                return -1;
        }
        double res[3] = { link.rtt_s, link.down_Bps, link.up_Bps };
        if (write (out_fd, res, sizeof res) != sizeof res)
            return -1;
    }
    return 0;
}

static double
s_median3 (const double v[3])
{
    double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
    return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

static int
s_test_probe (bool busy)
{
    char why[512];
    pltest_cgroup_t g;
    if (pltest_cgroup_new (&g, "pl-test-quota", S_QUOTA_US, S_PERIOD_US, why, sizeof why)) {
        printf ("SKIP: %s\n", why);
        return S_SKIP;
    }
    if (s_netns_make (why, sizeof why)) {
        pltest_cgroup_remove (&g);
        printf ("SKIP: %s\n", why);
        return S_SKIP;
    }
    enum { ROUNDS = 3 };
    int port_p[2], res_p[2];
    if (pipe (port_p) || pipe (res_p)) {
        pltest_cgroup_remove (&g);
        s_netns_remove ();
        return 1;
    }
    pid_t prober = fork ();
    if (prober == 0) {
        if (s_enter (s_ns_srv))
            _exit (2);
        _exit (s_prober (port_p[1], res_p[1], ROUNDS) ? 1 : 0);
    }
    //  Only the prober holds the pipes' write ends: if it dies, the reads
    //  below end.
    close (port_p[1]);
    close (res_p[1]);
    int port = 0;
    pid_t answerer = -1;
    if (read (port_p[0], &port, sizeof port) == sizeof port) {
        answerer = fork ();
        if (answerer == 0) {
            close (res_p[0]);
            if (pltest_cgroup_join (&g) || s_enter (s_ns_dev))
                _exit (2);
            s_answerer (port, busy);
            _exit (0);
        }
    }
    close (port_p[0]);
    double res[ROUNDS][3];
    size_t got = 0;
    while (got < sizeof res) {
        ssize_t n = read (res_p[0], (char *) res + got, sizeof res - got);
        if (n <= 0)
            break;
        got += (size_t) n;
    }
    if (answerer > 0)
        kill (answerer, SIGKILL);
    int status = 0;
    waitpid (prober, &status, 0);
    if (answerer > 0)
        waitpid (answerer, NULL, 0);
    long throttled = pltest_cgroup_throttled (&g);
    pltest_cgroup_remove (&g);
    s_netns_remove ();
    if (got != sizeof res) {
        printf ("FAIL: the probe did not finish (prober status %d)\n", status);
        return 1;
    }
    int fail = 0;
    double downs[ROUNDS], ups[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        downs[r] = res[r][1] * 8e-6;
        ups[r] = res[r][2] * 8e-6;
        printf ("round %d: RTT %.1f ms, downlink %.1f Mbit/s (tbf %d), uplink %.1f Mbit/s "
                "(tbf %d)\n", r, res[r][0] * 1e3, downs[r], S_DOWN_MBIT, ups[r], S_UP_MBIT);
        if (downs[r] < 0.5 * S_DOWN_MBIT || ups[r] < 0.5 * S_UP_MBIT) {
            printf ("FAIL: round %d reads under 50%% of a tbf rate\n", r);
            fail = 1;
        }
    }
    double down = s_median3 (downs), up = s_median3 (ups);
    printf ("device %s at %d%% of a core: %ld throttled periods; median downlink %.1f, "
            "uplink %.1f Mbit/s\n", busy ? "busy (a thread spinning)" : "idle",
            100 * S_QUOTA_US / S_PERIOD_US, throttled, down, up);
    if (down < 0.7 * S_DOWN_MBIT || up < 0.7 * S_UP_MBIT) {
        printf ("FAIL: the median round must read >= 70%% of the tbf rates\n");
        fail = 1;
    }
    return fail;
}

int
main (int argc, char **argv)
{
    //  A child must not outlive a killed test with a group around it.
    signal (SIGPIPE, SIG_IGN);
    const char *which = argc > 1 ? argv[1] : "profile";
    if (strcmp (which, "profile") == 0)
        return s_test_profile ();
    if (strcmp (which, "probe") == 0 || strcmp (which, "probe_busy") == 0)
        return s_test_probe (strcmp (which, "probe_busy") == 0);
    fprintf (stderr, "usage: test_quota profile|probe|probe_busy\n");
    return 2;
}
