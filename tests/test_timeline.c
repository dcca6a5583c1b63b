/*  test_timeline.c: DIR/timeline.csv of a daemon run proves the pipeline
    (suite 'net').

    pipelearn-server and two pipelearn-client processes run over loopback
    TCP on the synthetic dataset (the process helpers are those of
    test_daemons.c). Devices send their stage events in EVENTS at each
    epoch end, on the time axis of the origin the server put in the plan;
    the server merges them with its workers' compute events. The test reads
    the CSV back and checks:
    - device rows exist, one forward and one backward per micro-batch and
      one update per iteration, with sane fields, and the file is sorted;
    - causality across processes: a micro-batch's server compute starts
      after the device's forward of it ends and ends before the device's
      backward of it starts (so the shared origin really lines clocks up);
    - transfers: every micro-batch has a link:dN uplink row from the end of
      its forward to (no later than) the start of its server compute, and
      a downlink row from (no earlier than) the end of that compute to the
      start of its backward;
    - in sfl the server compute for device d never overlaps device d's
      own forward/backward or its transfers (beyond 1 ms): causality
      forbids it;
    - in pipelearn (N = 4) what makes overlap possible, as orders rather
      than times: a device's forwards of an iteration run back to back
      (no wait for the server between them), and a device scripted here
      gets micro-batch m's gradients before it sends micro-batch m + 1
      (the server computes a micro-batch while the later ones are still
      on the device). How much the two sides then overlap on the clock is
      the scheduler's (two cores shared with other tests; CI once saw
      none in a run of 0.2 s): logged, not asserted.
    A hand-driven device checks the plan's origin and that the server
    refuses EVENTS that do not fit the run. And the first epoch's clock
    holds every device's training when a device was ready before the
    start (fl, whose first training message is the epoch's last).
*/
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

#include "proto_msg.h"
#include "pltest_device.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define DEVICES 2
#define EPS_S 0.001             //  clock and rounding slack (CSV has 1 us)

//  ---------------------------------------------------------------------
//  Processes (as in test_daemons.c)

//  ---------------------------------------------------------------------
//  timeline.csv

static bool
s_is (const pltest_row_t *r, const char *who, const char *stage)
{
    return strcmp (r->who, who) == 0 && strcmp (r->stage, stage) == 0;
}

static double
s_overlap (const pltest_row_t *a, const pltest_row_t *b)
{
    double lo = a->start_s > b->start_s ? a->start_s : b->start_s;
    double hi = a->end_s < b->end_s ? a->end_s : b->end_s;
    return hi - lo;
}

//  The one row of who/stage for (iteration, micro_batch), asserting there
//  is exactly one.
static const pltest_row_t *
s_find (const pltest_csv_t *csv, const char *who, const char *stage, int iteration, int micro)
{
    const pltest_row_t *found = NULL;
    for (int i = 0; i < csv->count; i++) {
        const pltest_row_t *r = &csv->rows[i];
        if (s_is (r, who, stage) && r->iteration == iteration && r->micro_batch == micro) {
            cr_assert_null (found, "%s %s iteration %d micro-batch %d appears twice", who,
                            stage, iteration, micro);
            found = r;
        }
    }
    cr_assert_not_null (found, "no %s %s row for iteration %d micro-batch %d", who, stage,
                        iteration, micro);
    return found;
}

//  Fields, counts, order and cross-process causality; returns the largest
//  overlap (seconds) of a server compute for device d with device d's own
//  forward or backward, over both devices, and in *link_overlap the
//  largest with device d's transfers.
static double
s_check_timeline (const pltest_csv_t *csv, const char *mode, int iterations, int micro,
                  double *link_overlap)
{
    cr_assert_gt (csv->count, 0, "%s: empty timeline", mode);
    double last_end = 0.0;
    for (int i = 0; i < csv->count; i++) {
        const pltest_row_t *r = &csv->rows[i];
        cr_assert (isfinite (r->start_s) && r->start_s >= 0 && r->end_s >= r->start_s
                   && r->end_s - r->start_s < PLTEST_RUN_TIMEOUT_S,
                   "%s: row %d (%s %s) has times %.6f..%.6f", mode, i, r->who, r->stage,
                   r->start_s, r->end_s);
        if (i > 0)
            cr_assert_geq (r->start_s, csv->rows[i - 1].start_s,
                           "%s: timeline.csv not sorted by start at row %d", mode, i);
        if (r->end_s > last_end)
            last_end = r->end_s;
    }
    cr_assert_lt (last_end, PLTEST_RUN_TIMEOUT_S, "%s: times are not relative to the run", mode);

    double best = -INFINITY;
    *link_overlap = -INFINITY;
    for (int d = 0; d < DEVICES; d++) {
        char dev[16], srv[16], link[16];
        snprintf (dev, sizeof dev, "device%d", d);
        snprintf (srv, sizeof srv, "server:d%d", d);
        snprintf (link, sizeof link, "link:d%d", d);
        int forward = 0, backward = 0, update = 0, wait = 0, compute = 0;
        for (int i = 0; i < csv->count; i++) {
            const pltest_row_t *r = &csv->rows[i];
            if (strcmp (r->who, srv) == 0 && strcmp (r->stage, "compute") == 0)
                compute++;
            if (strcmp (r->who, dev) != 0)
                continue;
            cr_assert_eq (r->epoch, 1, "%s: %s %s in epoch %d", mode, dev, r->stage,
                          r->epoch);
            if (strcmp (r->stage, "forward") == 0 || strcmp (r->stage, "backward") == 0) {
                cr_assert (r->iteration >= 0 && r->iteration < iterations
                           && r->micro_batch >= 0 && r->micro_batch < micro,
                           "%s: %s %s at iteration %d micro-batch %d", mode, dev, r->stage,
                           r->iteration, r->micro_batch);
                if (r->stage[0] == 'f')
                    forward++;
                else
                    backward++;
            }
            else if (strcmp (r->stage, "update") == 0) {
                cr_assert (r->iteration >= 0 && r->iteration < iterations
                           && r->micro_batch == -1, "%s: %s update at %d/%d", mode, dev,
                           r->iteration, r->micro_batch);
                update++;
            }
            else if (strcmp (r->stage, "wait") == 0)
                wait++;
            else
                cr_assert_fail ("%s: %s has an unknown stage \"%s\"", mode, dev, r->stage);
        }
        cr_assert_eq (forward, iterations * micro, "%s: %s has %d forward rows, want %d",
                      mode, dev, forward, iterations * micro);
        cr_assert_eq (backward, iterations * micro, "%s: %s has %d backward rows, want %d",
                      mode, dev, backward, iterations * micro);
        cr_assert_eq (update, iterations, "%s: %s has %d update rows, want %d", mode, dev,
                      update, iterations);
        cr_assert_gt (wait, 0, "%s: %s never waited for the server", mode, dev);
        cr_assert_eq (compute, iterations * micro, "%s: %s has %d compute rows, want %d",
                      mode, srv, compute, iterations * micro);

        //  One time axis: forward -> server compute -> backward, per micro-batch.
        for (int it = 0; it < iterations; it++)
            for (int m = 0; m < micro; m++) {
                const pltest_row_t *f = s_find (csv, dev, "forward", it, m);
                const pltest_row_t *s = s_find (csv, srv, "compute", it, m);
                const pltest_row_t *b = s_find (csv, dev, "backward", it, m);
                cr_assert_leq (f->end_s, s->start_s + EPS_S, "%s: %s iteration %d micro %d: "
                               "server compute starts at %.6f, before the forward ends at "
                               "%.6f", mode, dev, it, m, s->start_s, f->end_s);
                cr_assert_leq (s->end_s, b->start_s + EPS_S, "%s: %s iteration %d micro %d: "
                               "backward starts at %.6f, before the server compute ends at "
                               "%.6f", mode, dev, it, m, b->start_s, s->end_s);
                const pltest_row_t *up = s_find (csv, link, "uplink", it, m);
                const pltest_row_t *down = s_find (csv, link, "downlink", it, m);
                cr_assert (fabs (up->start_s - f->end_s) <= EPS_S
                           && up->end_s <= s->start_s + EPS_S, "%s: %s iteration %d micro "
                           "%d: uplink %.6f..%.6f, forward ends %.6f, compute starts %.6f",
                           mode, link, it, m, up->start_s, up->end_s, f->end_s, s->start_s);
                cr_assert (down->start_s >= s->end_s - EPS_S
                           && fabs (down->end_s - b->start_s) <= EPS_S, "%s: %s iteration "
                           "%d micro %d: downlink %.6f..%.6f, compute ends %.6f, backward "
                           "starts %.6f", mode, link, it, m, down->start_s, down->end_s,
                           s->end_s, b->start_s);
            }

        for (int i = 0; i < csv->count; i++) {
            const pltest_row_t *s = &csv->rows[i];
            if (!s_is (s, srv, "compute"))
                continue;
            for (int j = 0; j < csv->count; j++) {
                const pltest_row_t *r = &csv->rows[j];
                if (s_is (r, dev, "forward") || s_is (r, dev, "backward")) {
                    double o = s_overlap (s, r);
                    if (o > best)
                        best = o;
                }
                //  Another micro-batch's transfer (a micro-batch's own
                //  touches its compute at an instant).
                if ((s_is (r, link, "uplink") || s_is (r, link, "downlink"))
                &&  (r->iteration != s->iteration || r->micro_batch != s->micro_batch)) {
                    double o = s_overlap (s, r);
                    if (o > *link_overlap)
                        *link_overlap = o;
                }
            }
        }
    }
    return best;
}

//  200 samples and 5 iterations of 40 per device, one epoch.
#define CONFIG \
    "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, " \
    "\"test_samples\": 100, \"batch_size\": 40, \"seed\": 5, \"epochs\": 1, " \
    "\"learning_rate\": 0.01, \"momentum\": 0.9, \"split_point\": 2, " \
    "\"aggregation_frequency\": -1, \"threads\": 1, "
#define ITERATIONS 5

Test (timeline, pipelearn_server_overlaps_device, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    pltest_run_daemons (&run, "pipe", CONFIG "\"devices\": 2, \"mode\": \"pipelearn\", "
                   "\"micro_batches\": 4}",
                   DEVICES);
    pltest_csv_t csv = pltest_load_csv (run.dir, "pipe");
    double links;
    double overlap = s_check_timeline (&csv, "pipelearn", ITERATIONS, 4, &links);
    cr_log_info ("pipelearn: largest server/device overlap %.6f s, server/transfer %.6f s "
                 "(the scheduler's: not asserted)",
                 overlap, links);
    //  A device's forwards of one iteration run back to back: no wait for
    //  the server (a wait row) between the first one's start and the last
    //  one's end. (The epoch's first wait, for MODEL, ends before them.)
    for (int d = 0; d < DEVICES; d++) {
        char dev[16];
        snprintf (dev, sizeof dev, "device%d", d);
        for (int it = 0; it < ITERATIONS; it++) {
            const pltest_row_t *f0 = s_find (&csv, dev, "forward", it, 0);
            const pltest_row_t *fn = s_find (&csv, dev, "forward", it, 3);
            for (int i = 0; i < csv.count; i++) {
                const pltest_row_t *w = &csv.rows[i];
                if (s_is (w, dev, "wait"))
                    cr_expect (w->end_s <= f0->start_s + EPS_S || w->start_s >= fn->end_s - EPS_S,
                               "pipelearn: %s waited %.6f..%.6f between its forwards of "
                               "iteration %d (%.6f..%.6f)", dev, w->start_s, w->end_s, it,
                               f0->start_s, fn->end_s);
            }
        }
    }
    //  The epoch's clock starts when the first device is ready (PROTOCOL.md)
    //  and stops at the aggregation after the last device's PARAMS. The
    //  stages' span is on another axis (the run's origin): a device's first
    //  rows may start just before the server reads its READY, its last just
    //  after the PARAMS it sent (here wall_s read 0.94x the span on a quiet
    //  host), so neither bounds the other exactly. What is asserted: the
    //  clock covers most of the span (at least half). How much longer it
    //  runs (a device taking MODEL and building its first batch, the
    //  aggregation) is scheduling, not physics: logged, not bounded. An
    //  upper bound of 2% + 10 ms failed CI run t13_native_3 on an unchanged
    //  tree (wall 0.3412 s against a span of 0.2816 s, the host shared with
    //  other builds) and once before at load 30. The span starts at the
    //  first row that is not a wait: a device's wait for the first MODEL
    //  begins at its WELCOME and covers the others' joining and the
    //  server's settle before the start (SRV_START_SETTLE_S), before the
    //  epoch's clock.
    double first = 1e30, last = -1e30;
    for (int i = 0; i < csv.count; i++) {
        const pltest_row_t *r = &csv.rows[i];
        if (strcmp (r->stage, "wait") != 0 && r->start_s < first)
            first = r->start_s;
        last = r->end_s > last ? r->end_s : last;
    }
    cJSON *summary = pltest_summary (run.dir, "pipe");
    cJSON *epochs = cJSON_GetObjectItemCaseSensitive (summary, "epochs");
    double wall = cJSON_GetObjectItemCaseSensitive (cJSON_GetArrayItem (epochs, 0),
                                                    "wall_s")->valuedouble;
    cr_log_info ("pipelearn: epoch wall_s %.4f s, stages span %.4f s (%.2fx)", wall,
                 last - first, wall / (last - first));
    cr_expect (wall >= (last - first) * 0.5,
               "pipelearn: epoch wall_s %.4f s is under half its stages' span %.4f s", wall,
               last - first);
    cJSON_Delete (summary);
    free (csv.rows);
    pltest_rmtree (run.dir);
}

//  The server answers each micro-batch before the device has sent the
//  next: device 1, scripted, sends micro-batch m of its first iteration
//  only once micro-batch m - 1's GRADIENTS are in. A server that waited for
//  the whole batch would never answer (the wait fails after 30 s). Device
//  0 is a real client, so the run is a real two-device pipelearn round.
Test (timeline, pipelearn_server_answers_each_micro_batch_before_the_next, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run", CONFIG "\"devices\": 2, "
                                   "\"mode\": \"pipelearn\", \"micro_batches\": 4, "
                                   "\"measure_link\": false, \"adaptive\": false}",
                                   endpoint, sizeof endpoint);
    pltest_device_t dev = { 0 };
    pltest_device_join (&dev, endpoint, 1, 0);
    pltest_start_client (&run, 0, endpoint);
    pltest_device_model (&dev);
    cr_assert_eq (dev.plan.micro_batches, 4u);
    for (uint32_t mb = 0; mb < 4; mb++) {
        pltest_device_activations (&dev, 0.5f, mb);
        proto_msg_t *msg = pltest_device_recv (&dev, "GRADIENTS");
        cr_assert_eq (proto_msg_type (msg), PROTO_MSG_GRADIENTS, "micro-batch %u: got %s, "
                      "want GRADIENTS", mb, proto_type_name (proto_msg_type (msg)));
        const proto_header_t *h = proto_msg_header (msg);
        cr_assert (h->epoch == dev.epoch && h->iteration == dev.iter && h->micro_batch == mb,
                   "GRADIENTS for epoch %u iteration %u micro-batch %u, want %u/%u/%u",
                   h->epoch, h->iteration, h->micro_batch, dev.epoch, dev.iter, mb);
        proto_msg_destroy (&msg);
    }
    pltest_device_close (&dev);
    pltest_kill_all (&run);
    (void) server;
    pltest_rmtree (run.dir);
}

Test (timeline, sfl_server_never_overlaps_device, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    pltest_run_daemons (&run, "sfl", CONFIG "\"devices\": 2, \"mode\": \"sfl\", "
                   "\"micro_batches\": 1}", DEVICES);
    pltest_csv_t csv = pltest_load_csv (run.dir, "sfl");
    double links;
    double overlap = s_check_timeline (&csv, "sfl", ITERATIONS, 1, &links);
    cr_log_info ("sfl: largest server/device overlap %.6f s, server/transfer %.6f s",
                 overlap, links);
    cr_expect_leq (overlap, EPS_S, "sfl: the server compute for a device overlaps that "
                   "device's forward or backward by %.6f s", overlap);
    cr_expect_leq (links, EPS_S, "sfl: the server compute for a device overlaps that "
                   "device's transfers by %.6f s", links);
    free (csv.rows);
    pltest_rmtree (run.dir);
}

//  The first epoch's clock starts at the first ready device, or at the
//  run's start when a device was ready before it (PROTOCOL.md). Device 0
//  here loads its shard and says it is ready while device 1 has not
//  joined; the server ignored that HEARTBEAT before e539f11 and started
//  the clock at the first training message, which in fl is the STATS at
//  the epoch's end: wall_s then read a few milliseconds. The epoch must
//  hold each device's whole training (forward, backward and update, on
//  the device's clock, between its MODEL and its PARAMS).
Test (timeline, the_clock_covers_an_epoch_whose_device_was_ready_first, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "fl", CONFIG "\"devices\": 2, "
                                        "\"mode\": \"fl\"}", endpoint, sizeof endpoint);
    pid_t c[DEVICES];
    c[0] = pltest_start_client (&run, 0, endpoint);
    cr_assert (pltest_wait_log (&run, "client0.log", "iteration(s) per epoch", 60),
               "device 0 did not load its shard");
    usleep (300000);                    //  its ready HEARTBEAT read by the server
    c[1] = pltest_start_client (&run, 1, endpoint);
    pltest_finish_run (&run, "fl", server, c, DEVICES);
    cJSON *summary = pltest_summary (run.dir, "fl");
    const cJSON *e = pltest_last_epoch (summary);
    double wall = pltest_num (e, "wall_s");
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (e, "devices");
    cr_assert (cJSON_IsArray (devs) && cJSON_GetArraySize (devs) == DEVICES);
    for (int i = 0; i < DEVICES; i++) {
        const cJSON *d = cJSON_GetArrayItem (devs, i);
        double train = pltest_num (d, "forward_s") + pltest_num (d, "backward_s")
                     + pltest_num (d, "update_s");
        cr_log_info ("fl: device %d trained %.4f s of an epoch of %.4f s", i, train, wall);
        cr_expect (wall >= train - EPS_S, "fl: the epoch's clock (%.4f s) misses part of "
                   "device %d's training (%.4f s)", wall, i, train);
    }
    cJSON_Delete (summary);
    pltest_rmtree (run.dir);
}

//  Written at every epoch end: one header, every epoch's rows (transfers
//  too), epochs in order, each sorted by start.
Test (timeline, epochs_are_appended_as_they_end, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    pltest_run_daemons (&run, "two", "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", "
                   "\"samples\": 160, \"test_samples\": 40, \"batch_size\": 40, "
                   "\"seed\": 5, \"epochs\": 2, \"split_point\": 2, \"threads\": 1, "
                   "\"devices\": 2, \"mode\": \"pipelearn\", \"micro_batches\": 2}", DEVICES);
    pltest_csv_t csv = pltest_load_csv (run.dir, "two");
    int rows[3] = { 0 }, links[3] = { 0 };
    for (int i = 0; i < csv.count; i++) {
        const pltest_row_t *r = &csv.rows[i];
        cr_assert (r->epoch == 1 || r->epoch == 2, "row %d: epoch %d", i, r->epoch);
        rows[r->epoch]++;
        if (strncmp (r->who, "link:d", 6) == 0)
            links[r->epoch]++;
        if (i > 0) {
            const pltest_row_t *p = &csv.rows[i - 1];
            cr_assert (r->epoch > p->epoch || (r->epoch == p->epoch
                                                && r->start_s >= p->start_s),
                       "row %d (epoch %d, %.6f) after row %d (epoch %d, %.6f)", i, r->epoch,
                       r->start_s, i - 1, p->epoch, p->start_s);
        }
    }
    //  2 devices x 2 iterations x 2 micro-batches x (uplink + downlink).
    cr_assert_eq (links[1], 16, "epoch 1: %d transfer rows", links[1]);
    cr_assert_eq (links[2], 16, "epoch 2: %d transfer rows", links[2]);
    cr_assert (rows[1] > links[1] && rows[2] > links[2]);
    free (csv.rows);
    pltest_rmtree (run.dir);
}

//  ---------------------------------------------------------------------
//  The server's side of EVENTS, with a hand-driven device

//  Join a one-device sfl run as a scripted device, send EVENTS holding
//  `event` for header epoch `epoch`, expect ERROR code 3 and the server to
//  give up.
static void
s_bad_events (uint32_t epoch, proto_event_t event, const char *needle)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "timeline");
    char endpoint[256];
    pid_t server = pltest_start_server (&run, "run", CONFIG "\"mode\": \"sfl\", "
                                   "\"micro_batches\": 1, \"devices\": 1}",
                                   endpoint, sizeof endpoint);
    double before = (double) time (NULL);
    pltest_device_t dev = { 0 };
    pltest_device_join (&dev, endpoint, 0, 0);
    double origin = dev.plan.origin_s;
    cr_assert (origin > before - 60 && origin <= (double) time (NULL) + 1,
               "WELCOME: plan origin_s %.6f is not the server's start (now %.0f)", origin,
               before);
    pltest_device_model (&dev);

    proto_msg_t *msg = proto_msg_new (PROTO_MSG_EVENTS);
    proto_msg_set_route (msg, 0, epoch, 0, 0);
    cr_assert_eq (proto_msg_set_events (msg, &event, 1), 0);
    cr_assert_eq (proto_msg_send (&msg, dev.sock), 0);
    msg = pltest_device_recv (&dev, "ERROR");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_ERROR, "got %s, want ERROR",
                  proto_type_name (proto_msg_type (msg)));
    cr_expect_eq (proto_msg_error_code (msg), PROTO_ERR_STATE, "ERROR code %u",
                  proto_msg_error_code (msg));
    cr_expect_not_null (strstr (proto_msg_error_text (msg), needle),
                        "ERROR text \"%s\" lacks \"%s\"", proto_msg_error_text (msg),
                        needle);
    proto_msg_destroy (&msg);
    int rc = pltest_wait (&run, server, pl_monotonic () + 30);
    if (rc <= 0) {
        pltest_dump_logs (&run);
        pltest_kill_all (&run);
    }
    pltest_device_close (&dev);
    cr_expect_gt (rc, 0, "the server should give up the run (exit status %d)", rc);
    pltest_rmtree (run.dir);
}

Test (timeline, server_refuses_events_that_do_not_fit, .timeout = 600)
{
    const proto_event_t ok = { .stage = PROTO_STAGE_FORWARD, .epoch = 1, .iteration = 0,
                               .micro_batch = 0, .start_s = 0.5, .end_s = 0.75 };
    s_bad_events (2, ok, "EVENTS for epoch 2; the run is in epoch 1");
    proto_event_t e = ok;
    e.epoch = 3;
    s_bad_events (1, e, "event 0: epoch 3");
    e = ok;
    e.micro_batch = 1;          //  sfl has one micro-batch
    s_bad_events (1, e, "micro-batch 1 do not fit epoch 1 with 1 micro-batch");
}

//  A resumed run's timeline.csv keeps the rows of the epochs before the
//  checkpoint; whatever else is in the file (later epochs, broken or
//  over-long lines, a last line cut short) is dropped, never trusted.
Test (timeline, resume_keeps_the_earlier_epochs_only)
{
    char dir[] = "/tmp/pl_test_timeline_XXXXXX", path[4096], err[256];
    cr_assert_not_null (mkdtemp (dir));
    pltest_path (path, dir, "timeline.csv");
    cr_assert_eq (pl_timeline_csv_keep_before (path, 2, err, sizeof err), 0,
                  "no file: nothing kept, a new file to start");
    char longrow[2000];
    memset (longrow, 'x', sizeof longrow);
    memcpy (longrow, "device0,forward,1,", 18);
    longrow[sizeof longrow - 1] = 0;
    char text[8192];
    snprintf (text, sizeof text,
              "who,stage,epoch,iteration,micro_batch,start_s,end_s,split_point,micro_batches\n"
              "device0,forward,1,0,0,0.100000,0.200000,1,4\n"
              "server,compute,2,0,0,0.300000,0.400000,1,4\n"
              "not a row\n"
              "%s\n"
              "device1,backward,-3,0,0,0.5,0.6,3,2\n"
              "device1,backward,1,0,0,0.500000,0.600000,3,2\n"
              "device1,update,3,0,-1,9.0,9.1,3,2\n"
              "device1,update,1,0,-1,0.7,0.8,3,2", longrow);
    pltest_write (path, text);
    cr_assert_eq (pl_timeline_csv_keep_before (path, 2, err, sizeof err), 1, "%s", err);
    char *kept = pltest_read (path);
    cr_assert_str_eq (kept, "who,stage,epoch,iteration,micro_batch,start_s,end_s,"
                            "split_point,micro_batches\n"
                            "device0,forward,1,0,0,0.100000,0.200000,1,4\n"
                            "device1,backward,1,0,0,0.500000,0.600000,3,2\n");
    free (kept);
    pltest_rmtree (dir);
}
