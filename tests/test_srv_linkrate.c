/*  test_srv_linkrate: the PROBE state machine (server/srv_linkrate.h) driven
    by a scripted device that answers at once, or after a sleep.

    What it proves: the first timed transfer of a direction does not count;
    one stalled transfer among the counted ones is outvoted by the median,
    stalls in most of them count.
    The cap holds every transfer at 256 KiB, so the first answer of each
    direction already ends the growth; the script delays that answer by
    S_STALL_S (the cost a fresh TCP direction can pay: slow start, a lost
    tail, a retransmission timeout) and answers every other at once. Were
    the stalled transfer counted, the rate would be at most
    9 x 256 KiB / S_STALL_S (2.4 MB/s for 1 s). The test asks for 10x that:
    it fails only if the eight prompt answers took more than 89 ms in all,
    on the host's loopback-free in-process path (microseconds each). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "srv_linkrate.h"

TestSuite (srv_linkrate, .timeout = 60);

#define S_SIZE ((size_t) 256 << 10)
#define S_STALL_S 1.0

static void
s_sleep (double s)
{
    struct timespec ts = { (time_t) s, (long) ((s - (double) (time_t) s) * 1e9) };
    nanosleep (&ts, NULL);
}

//  The device's answer to a PROBE, as cli_planning_probe_answer makes it.
static proto_msg_t *
s_answer (const proto_msg_t *probe)
{
    proto_probe_t a = { .probe_id = proto_msg_probe (probe)->probe_id };
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_route (m, 0, 0, 0, 0);
    cr_assert_eq (proto_msg_set_probe (m, &a, proto_msg_probe (probe)->reply_bytes), 0);
    return m;
}

//  Runs one measurement; stall_down / stall_up: delay the answer to the
//  first timed transfer of that direction. Returns the PROBEs exchanged.
static int
s_measure (srv_linkrate_t *link, bool stall_down, bool stall_up)
{
    proto_msg_t *out = srv_linkrate_probe (link, 0, 0);
    int n = 0;
    bool first_down = true, first_up = true;
    while (out) {
        const proto_probe_t *p = proto_msg_probe (out);
        size_t down = proto_msg_probe_payload_bytes (out);
        if (down > 0 && first_down) {
            first_down = false;
            if (stall_down)
                s_sleep (S_STALL_S);
        }
        if (p->reply_bytes > 0 && first_up) {
            first_up = false;
            if (stall_up)
                s_sleep (S_STALL_S);
        }
        proto_msg_t *in = s_answer (out);
        proto_msg_destroy (&out);
        char why[256] = "";
        int rc = srv_linkrate_answer (link, in, 0, 0, S_SIZE, &out, why, sizeof why);
        proto_msg_destroy (&in);
        cr_assert_eq (rc, 0, "%s", why);
        cr_assert (++n < 100, "the probe never ends");
    }
    cr_assert (srv_linkrate_done (link));
    return n;
}

Test (srv_linkrate, a_directions_first_transfer_does_not_count)
{
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    s_measure (&link, true, true);
    double counted = 9.0 * (double) S_SIZE / S_STALL_S;
    cr_log_info ("down %.3g B/s, up %.3g B/s (the stall counted: <= %.3g)", link.down_Bps,
                 link.up_Bps, counted);
    cr_expect_gt (link.down_Bps, 10.0 * counted);
    cr_expect_gt (link.up_Bps, 10.0 * counted);
}

//  Runs one measurement whose timed uploads after the first (the counted
//  ones) listed in `stalls` (a bit per counted upload, 1 << 0 the first)
//  are answered after stall_s. Returns the counted uploads.
static int
s_measure_up_stalls (srv_linkrate_t *link, unsigned stalls, double stall_s)
{
    proto_msg_t *out = srv_linkrate_probe (link, 0, 0);
    int ups = 0;
    while (out) {
        if (proto_msg_probe (out)->reply_bytes > 0 && ups++ > 0
        &&  (stalls >> (ups - 2) & 1))
            s_sleep (stall_s);
        proto_msg_t *in = s_answer (out);
        proto_msg_destroy (&out);
        char why[256] = "";
        cr_assert_eq (srv_linkrate_answer (link, in, 0, 0, S_SIZE, &out, why, sizeof why), 0,
                      "%s", why);
        proto_msg_destroy (&in);
    }
    cr_assert (srv_linkrate_done (link));
    return ups - 1;
}

Test (srv_linkrate, one_stalled_transfer_is_outvoted)
{
    //  The first counted upload stalls for S_STALL_S: it alone spans the
    //  window (>= 0.6 s), yet the probe goes on to three counted uploads
    //  and the two prompt ones outvote it. Counted in a sum the rate would
    //  be at most 3 x 256 KiB / S_STALL_S.
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    int counted = s_measure_up_stalls (&link, 1u, S_STALL_S);
    cr_expect_eq (counted, 3);
    cr_expect_gt (link.up_Bps, 10.0 * 3.0 * (double) S_SIZE / S_STALL_S);
    cr_expect_gt (link.down_Bps, 10.0 * 3.0 * (double) S_SIZE / S_STALL_S);
}

Test (srv_linkrate, stalls_in_most_transfers_count)
{
    //  The other side of the rule: when most counted uploads stall (a
    //  device paused throughout, a slow link), the rate is theirs. Stall
    //  the first two of three by 0.35 s: the window is full after two, the
    //  third comes at once; the median is a stalled one, and the rate the
    //  sum's, 3 x 256 KiB over at least 0.7 s.
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    int counted = s_measure_up_stalls (&link, 3u, 0.35);
    cr_expect_eq (counted, 3);
    cr_expect_leq (link.up_Bps, 3.0 * (double) S_SIZE / 0.7);
}

Test (srv_linkrate, each_direction_sends_its_warm_up_and_up_to_eight_counted)
{
    //  Prompt answers: every timed transfer is short, so each direction
    //  runs its warm-up and then eight counted transfers.
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    int n = s_measure (&link, false, false);
    cr_expect_eq (n, 3 + 2 * (1 + 8));
    cr_expect (isfinite (link.rtt_s) && link.rtt_s >= 0.0);
}

//  An ACTIVATIONS header of (epoch, iteration, micro-batch); the period
//  reads only the route.
static proto_msg_t *
s_activations (uint32_t epoch, uint32_t iteration, uint32_t micro)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (m, 0, epoch, iteration, micro);
    return m;
}

Test (srv_linkrate, the_period_spans_the_first_micro_batches_of_an_epoch)
{
    srv_linkrate_t link;
    memset (&link, 0, sizeof link);
    //  Epoch 1: iterations 0..4 every 0.5 s, four micro-batches each 0.1 s
    //  apart (only the first of each counts), then a period.
    for (uint32_t it = 0; it < 5; it++)
        for (uint32_t mb = 0; mb < 4; mb++) {
            proto_msg_t *m = s_activations (1, it, mb);
            srv_linkrate_on_activations (&link, m, 100.0 + 0.5 * it + 0.1 * mb);
            proto_msg_destroy (&m);
        }
    cr_assert_float_eq (srv_linkrate_period (&link), 0.5, 1e-12);
    //  Read once: then forgotten.
    cr_assert_eq (srv_linkrate_period (&link), 0.0);
    //  Epoch 2 starts a new span (the gap to epoch 1 does not count); a
    //  repeated iteration does not stretch it; an older one (the device
    //  started over) starts a new span.
    const struct { uint32_t epoch, it; double t; } seq[] = {
        { 1, 4, 200.0 }, { 2, 0, 300.0 }, { 2, 1, 300.25 }, { 2, 1, 309.0 }, { 2, 0, 310.0 },
    };
    for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
        proto_msg_t *m = s_activations (seq[k].epoch, seq[k].it, 0);
        srv_linkrate_on_activations (&link, m, seq[k].t);
        proto_msg_destroy (&m);
    }
    //  The span since the restart at t 310 holds one iteration: too few.
    cr_assert_eq (srv_linkrate_period (&link), 0.0);
    for (uint32_t it = 0; it < 4; it++) {
        proto_msg_t *m = s_activations (3, it, 0);
        srv_linkrate_on_activations (&link, m, 400.0 + 0.25 * it);
        proto_msg_destroy (&m);
    }
    cr_assert_float_eq (srv_linkrate_period (&link), 0.25, 1e-12);
}
