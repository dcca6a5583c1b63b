/*  pipelearn-client: one device of a pipelearn / sfl / sl / fl run.

    pipelearn-client --connect tcp://HOST:PORT [--device-id N] [--data-dir DIR]
                     [--threads N] [--timeout S]

    The run's config and this device's plan come from the server (WELCOME).
    Split modes: per mini-batch of B samples, N micro-batches of B/N go
    through the device part, each in its own model context, and their
    ACTIVATIONS are sent as soon as they are computed; GRADIENTS that have
    arrived meanwhile are consumed between forwards (backward in their
    context), the rest after the last forward; then one SGD step.

    Aggregation: every aggregation_frequency iterations (and always at the
    end of the epoch) the device sends PARAMS and waits for MODEL. At the end
    of an epoch it sends EVENTS, then STATS, then PARAMS: STATS is how the
    server knows the round closes the epoch. In sl the device waits for
    MODEL (its turn) before each epoch and sends EVENTS + STATS + PARAMS at
    the end of it.

    Timeline: the device records its stage events (forward and backward per
    micro-batch, update per iteration, wait while blocked on GRADIENTS or
    MODEL) against the origin the server sent in the plan, so both share one
    time axis, and ships them in EVENTS at each epoch end. A wait for MODEL
    after an epoch's last PARAMS belongs to the next epoch (it is the wait
    before that epoch starts); after the last epoch it is never sent.

    Iterations per epoch are the same on every device: the smallest shard
    over B (every device computes every shard's size, which is cheap), so
    aggregation rounds line up.
*/
#include "nn_alloc.h"
#include "nn_dataset.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "pl_args.h"
#include "pl_config.h"
#include "cli_run.h"
#include "cli_state.h"
#include "pl_curve.h"
#include "pl_daemon.h"
#include "pl_log.h"
#include "pl_shards.h"
#include "pl_stop.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "proto_msg.h"

#include <czmq.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: pipelearn-client --connect tcp://HOST:PORT\n"
        "                        (--cert FILE_secret --server-cert FILE | --insecure)\n"
        "                        [--device-id N] [--data-dir DIR] [--threads N]\n"
        "                        [--timeout SECONDS] [--heartbeat SECONDS]\n"
        "                        [--log-format text|json]\n"
        "Joins a pipelearn-server run as one device; the run's config comes from\n"
        "the server. --cert: this device's secret certificate (its public half must\n"
        "be in the server's --allow directory); --server-cert: the server's public\n"
        "certificate, the only server this device will talk to. --insecure: plain\n"
        "TCP. --timeout: give up when the server is silent that long (60).\n"
        "--heartbeat: ZMTP heartbeat interval (5; a connection silent 6x that is\n"
        "closed and made again). --log-format json: one JSON object per log line.\n");
}

static int
s_parse_args (int argc, char **argv, cli_args_t *a)
{
    static const struct option opts[] = {
        { "connect", required_argument, NULL, 'c' },
        { "device-id", required_argument, NULL, 'i' },
        { "data-dir", required_argument, NULL, 'd' },
        { "threads", required_argument, NULL, 't' },
        { "timeout", required_argument, NULL, 'T' },
        { "heartbeat", required_argument, NULL, 'H' },
        { "cert", required_argument, NULL, 'C' },
        { "server-cert", required_argument, NULL, 'S' },
        { "insecure", no_argument, NULL, 'I' },
        { "log-format", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    a->device_id = -1;
    a->threads = 1;
    a->timeout_s = 60.0;
    a->heartbeat_s = 5.0;
    int c;
    while ((c = getopt_long (argc, argv, "c:i:d:t:T:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
            case 'c': a->connect = optarg; break;
            case 'C': a->cert = optarg; break;
            case 'S': a->server_cert = optarg; break;
            case 'I': a->insecure = true; break;
            case 'd': a->data_dir = optarg; break;
            case 'L':
                if (pl_args_log_format (optarg))
                    return -1;
                break;
            case 'i':
                a->device_id = (int) strtol (optarg, &end, 10);
                if (*end || a->device_id < 0) {
                    pl_log_error ("--device-id: want an integer >= 0, got \"%s\"", optarg);
                    return -1;
                }
                break;
            case 't':
                a->threads = (int) strtol (optarg, &end, 10);
                if (*end || a->threads < 1 || a->threads > 256) {
                    pl_log_error ("--threads: want 1..256, got \"%s\"", optarg);
                    return -1;
                }
                break;
            case 'H':
                a->heartbeat_s = strtod (optarg, &end);
                if (*end || !(a->heartbeat_s > 0) || a->heartbeat_s > 3600) {
                    pl_log_error ("--heartbeat: want seconds in (0, 3600], got \"%s\"",
                                  optarg);
                    return -1;
                }
                break;
            case 'T':
                a->timeout_s = strtod (optarg, &end);
                if (*end || !(a->timeout_s > 0)) {
                    pl_log_error ("--timeout: want seconds > 0, got \"%s\"", optarg);
                    return -1;
                }
                break;
            case 'h': s_usage (stdout); exit (0);
            default: s_usage (stderr); return -1;
        }
    }
    if (pl_args_end (argc, argv, s_usage))
        return -1;
    if (!a->connect) {
        s_usage (stderr);
        return -1;
    }
    if (a->insecure ? (a->cert || a->server_cert) : !(a->cert && a->server_cert)) {
        pl_log_error ("security: give --cert FILE_secret and --server-cert FILE "
                      "(CurveZMQ, the default), or --insecure alone for plain TCP");
        return -1;
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Messaging

//  Record a stage event; iteration / micro_batch -1 when they do not apply.
static void
s_event (cli_t *self, int stage, uint32_t epoch, int iteration, int micro_batch,
         double start_s, double end_s)
{
    pl_timeline_add (self->timeline, self->who, proto_stage_name (stage), (int) epoch,
                     iteration, micro_batch, start_s, end_s);
}

static double
s_tl_now (const cli_t *self)
{
    return pl_timeline_now (self->timeline);
}

//  The longest a wait for the server sleeps before it looks at the stop
//  flag again.
#define S_POLL_SLICE_MS 200

//  Next message from the server that is not a HEARTBEAT, waiting at most
//  timeout_ms (-1: --timeout). NULL on silence, interrupt, socket error,
//  malformed input (answered with ERROR), ERROR or BYE (sets self->bye).
static proto_msg_t *
s_recv (cli_t *self, int timeout_ms)
{
    bool patient = timeout_ms < 0;
    double deadline = pl_monotonic () + (patient ? self->args.timeout_s : timeout_ms / 1000.0);
    while (!self->stop->stop) {
        double left = deadline - pl_monotonic ();
        if (left < 0)
            left = 0;
        zmq_pollitem_t item = { self->dh, 0, ZMQ_POLLIN, 0 };
        //  In slices: SIGTERM may be delivered to another thread of this
        //  process (OpenBLAS's, OpenMP's), which sets the stop flag but
        //  leaves this poll asleep until its timeout (--timeout, 60 s): CI
        //  saw a stopped device still running 10 s after the signal.
        long ms = (long) (left * 1000.0 + 0.5);
        long slice = ms < S_POLL_SLICE_MS ? ms : S_POLL_SLICE_MS;
        int rc = zmq_poll (&item, 1, slice);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0 && slice < ms)
            continue;
        if (rc <= 0) {
            if (patient && self->assign.batch_size == 0 && self->rejoining)
                pl_log_info ("client: no answer from the server in %.0f s; it is not back "
                             "yet", self->args.timeout_s);
            else
            if (patient && self->assign.batch_size == 0)
                pl_log_error ("client: no answer to HELLO in %.0f s; giving up (--timeout). "
                              "The server is silent: down, a wrong --connect, this "
                              "device's key not in its --allow list, or a wrong "
                              "--server-cert", self->args.timeout_s);
            else
            if (patient)
                pl_log_error ("client: the server has been silent for %.0f s; giving up "
                              "(--timeout)", self->args.timeout_s);
            return NULL;
        }
        proto_msg_t *msg = NULL;
        char err[NN_ERR_SIZE];
        rc = proto_msg_recv (&msg, self->dh, &self->limits, err, sizeof err);
        if (rc == PROTO_E_AGAIN)
            continue;
        if (rc != 0) {
            pl_log_error ("client: from the server: %s", rc == PROTO_E_SOCKET
                          ? zmq_strerror (errno) : err);
            if (proto_code_is_malformed (rc))
                cli_send_error (self, rc == PROTO_E_VERSION ? PROTO_ERR_VERSION
                                                          : PROTO_ERR_MALFORMED, err);
            self->recv_failed = true;
            return NULL;
        }
        self->stats.bytes_down += cli_msg_bytes (msg);
        int type = proto_msg_type (msg);
        if (type == PROTO_MSG_HEARTBEAT || type == PROTO_MSG_PROBE) {
            //  A probe is answered at once, whatever the device is doing:
            //  the server times the round trip.
            rc = type == PROTO_MSG_PROBE ? cli_planning_probe_answer (self, msg) : 0;
            proto_msg_destroy (&msg);
            if (rc) {
                self->recv_failed = true;
                return NULL;
            }
            if (patient)
                deadline = pl_monotonic () + self->args.timeout_s;
            continue;
        }
        if (type == PROTO_MSG_BYE) {
            self->bye = true;
            proto_msg_destroy (&msg);
            return NULL;
        }
        if (type == PROTO_MSG_ERROR) {
            uint32_t code = proto_msg_error_code (msg);
            const char *text = proto_msg_error_text (msg);
            //  A planned stop (code 9; servers before it sent code 7 with
            //  this text) is not a failure: cli_run waits and joins again.
            self->server_resuming = code == PROTO_ERR_RESUMING
                || (code == PROTO_ERR_INTERNAL && strncmp (text, "server stopping", 15) == 0);
            self->run_complete = code == PROTO_ERR_COMPLETE;
            if (self->server_resuming || self->run_complete)
                pl_log_info ("client: the server says: %s", text);
            else
                pl_log_error ("client: server error %u: %s", code, text);
            self->diverged = self->diverged || code == PROTO_ERR_DIVERGED;
            proto_msg_destroy (&msg);
            self->recv_failed = true;
            return NULL;
        }
        return msg;
    }
    return NULL;
}

//  A message that has no place here: tell the server and stop.
static void
s_unexpected (cli_t *self, proto_msg_t **msg_p, const char *waiting_for)
{
    char text[160];
    snprintf (text, sizeof text, "client: got %s while waiting for %s",
              proto_type_name (proto_msg_type (*msg_p)), waiting_for);
    pl_log_error ("%s", text);
    cli_send_error (self, PROTO_ERR_STATE, text);
    proto_msg_destroy (msg_p);
}

//  A MODEL's units and place in the run: 0, or -1 (answered ERROR).
static int
s_model_check (cli_t *self, const proto_msg_t *msg)
{
    const proto_slab_t *slab = proto_msg_slab (msg);
    if (slab->unit_begin != 0
    ||  slab->unit_end != (uint32_t) nn_model_unit_end (self->ctx[0])) {
        pl_log_error ("client: MODEL holds units %u..%u, want 0..%d", slab->unit_begin,
                      slab->unit_end, nn_model_unit_end (self->ctx[0]));
        cli_send_error (self, PROTO_ERR_SPEC, "MODEL for the wrong units");
        return -1;
    }
    const proto_header_t *h = proto_msg_header (msg);
    if (h->epoch < 1 || h->epoch > (uint32_t) self->cfg.epochs
    ||  h->iteration >= (uint32_t) self->iterations) {
        pl_log_error ("client: MODEL for epoch %u, iteration %u: outside the run's %d "
                      "epoch(s) of %d iteration(s)", h->epoch, h->iteration,
                      self->cfg.epochs, self->iterations);
        cli_send_error (self, PROTO_ERR_STATE, "MODEL outside the run");
        return -1;
    }
    if (proto_msg_is_calibrate (msg) && self->cfg.bn_calibration_batches < 1) {
        pl_log_error ("client: MODEL with CALIBRATE in a run without BN calibration");
        cli_send_error (self, PROTO_ERR_STATE, "MODEL with CALIBRATE, calibration off");
        return -1;
    }
    return 0;
}

//  A MODEL with CALIBRATE asking for a calibration: checked, then this
//  device's share of it (cli_calib.c); the message is destroyed. 0 or -1.
static int
s_calibrate (cli_t *self, proto_msg_t **msg_p)
{
    int rc = s_model_check (self, *msg_p) ? -1 : cli_calibrate (self, *msg_p);
    proto_msg_destroy (msg_p);
    return rc;
}

//  Wait for MODEL and load it; the wait is recorded for epoch, iteration
//  (-1: between iterations). A MODEL with CALIBRATE on the way is the
//  epoch's BN calibration: done, then the wait goes on. 0, 1 on BYE, -1 on
//  failure.
static int
s_wait_model (cli_t *self, uint32_t epoch, int iteration)
{
    double t0 = pl_monotonic (), s0 = s_tl_now (self);
    proto_msg_t *msg = s_recv (self, -1);
    while (msg && proto_msg_type (msg) == PROTO_MSG_MODEL && cli_calib_request (self, msg)) {
        self->stats.idle_s += pl_monotonic () - t0;
        if (s_calibrate (self, &msg))
            return -1;
        t0 = pl_monotonic ();
        msg = s_recv (self, -1);
    }
    //  A PLAN comes just before the MODEL it holds for.
    while (msg && proto_msg_type (msg) == PROTO_MSG_PLAN && self->mode != PL_MODE_FL) {
        int rc = cli_planning_apply (self, proto_msg_assign (msg));
        proto_msg_destroy (&msg);
        if (rc)
            return -1;
        msg = s_recv (self, -1);
    }
    self->stats.idle_s += pl_monotonic () - t0;
    s_event (self, PROTO_STAGE_WAIT, epoch, iteration, -1, s0, s_tl_now (self));
    if (!msg)
        return self->bye ? 1 : -1;
    if (proto_msg_type (msg) != PROTO_MSG_MODEL) {
        s_unexpected (self, &msg, "MODEL");
        return -1;
    }
    if (s_model_check (self, msg)) {
        proto_msg_destroy (&msg);
        return -1;
    }
    const proto_header_t *h = proto_msg_header (msg);
    self->model_epoch = h->epoch;
    self->model_iter = h->iteration;
    int rc = cli_calib_load (self, msg);
    proto_msg_destroy (&msg);
    return rc;
}

static int
s_send_params (cli_t *self)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PARAMS);
    proto_slab_t slab = { .unit_begin = 0,
                          .unit_end = (uint32_t) nn_model_unit_end (self->ctx[0]),
                          .count = nn_model_weights_count (self->ctx[0]),
                          .sample_count = (uint64_t) self->shard_count };
    memcpy (slab.spec_hash, self->spec_hash, PROTO_SPEC_HASH_SIZE);
    proto_msg_set_route (msg, (uint32_t) self->id, self->cur_epoch, self->cur_iter, 0);
    proto_msg_set_slab_copy (msg, &slab, nn_model_weights_const (self->ctx[0]));
    return cli_send (self, &msg);
}

//  This epoch's events, in as many EVENTS messages as they need, then
//  forgotten. Times are clamped so that a clock stepped backwards (or a
//  device clock behind the server's) never makes an invalid record.
static int
s_send_events (cli_t *self)
{
    size_t n = pl_timeline_count (self->timeline);
    const pl_event_t *ev = pl_timeline_events (self->timeline);
    proto_event_t *out = nn_malloc (sizeof *out * (n < PROTO_EVENTS_MAX ? (n ? n : 1)
                                                                        : PROTO_EVENTS_MAX));
    int rc = 0;
    size_t used = 0;
    for (size_t i = 0; rc == 0 && i <= n; i++) {
        if (used == PROTO_EVENTS_MAX || (i == n && used > 0)) {
            proto_msg_t *msg = proto_msg_new (PROTO_MSG_EVENTS);
            proto_msg_set_route (msg, (uint32_t) self->id, self->cur_epoch, self->cur_iter, 0);
            if (proto_msg_set_events (msg, out, used)) {
                pl_log_error ("client: cannot build EVENTS (bug)");
                proto_msg_destroy (&msg);
                rc = -1;
                break;
            }
            rc = cli_send (self, &msg);
            used = 0;
        }
        if (i == n)
            break;
        const pl_event_t *e = &ev[i];
        int stage = proto_stage_from_name (e->stage);
        //  Only this epoch's: a wait for the next epoch's MODEL goes next time.
        if (stage < 0 || (uint32_t) e->epoch != self->cur_epoch)
            continue;
        double start = e->start_s > 0 ? e->start_s : 0.0;
        double end = e->end_s > start ? e->end_s : start;
        out[used++] = (proto_event_t) {
            .stage = (uint32_t) stage, .epoch = (uint32_t) e->epoch,
            .iteration = e->iteration < 0 ? PROTO_EVENT_NONE : (uint32_t) e->iteration,
            .micro_batch = e->micro_batch < 0 ? PROTO_EVENT_NONE : (uint32_t) e->micro_batch,
            .start_s = start, .end_s = end };
    }
    nn_free (out);
    pl_timeline_clear (self->timeline);
    return rc;
}

static int
s_send_stats (cli_t *self)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_STATS);
    self->stats.epoch = self->cur_epoch;
    //  The epoch's last upload, PARAMS, goes after STATS: count it here so
    //  the epoch's bytes_up includes the model upload (fl's main traffic).
    self->stats.bytes_up += PROTO_HEADER_SIZE
                          + 4 * (uint64_t) nn_model_weights_count (self->ctx[0]);
    self->params_prepaid = true;
    proto_msg_set_route (msg, (uint32_t) self->id, self->cur_epoch, self->cur_iter, 0);
    proto_msg_set_stats (msg, &self->stats);
    int rc = cli_send (self, &msg);
    memset (&self->stats, 0, sizeof self->stats);
    return rc;
}

//  ---------------------------------------------------------------------
//  Training

//  GRADIENTS for micro-batch i of the current iteration: backward in its
//  context. -1 if the message does not match anything in flight.
static int
s_on_gradients (cli_t *self, proto_msg_t **msg_p)
{
    const proto_header_t *h = proto_msg_header (*msg_p);
    const proto_tensor_desc_t *d = proto_msg_tensor (*msg_p);
    uint32_t i = h->micro_batch;
    if (h->epoch != self->cur_epoch || h->iteration != self->cur_iter
    ||  i >= (uint32_t) self->micro || !self->awaiting[i]
    ||  d->dims[0] != (uint32_t) self->mb) {
        s_unexpected (self, msg_p, "GRADIENTS of a micro-batch in flight");
        return -1;
    }
    char err[NN_ERR_SIZE];
    if (cli_wire_check_gradients (self, *msg_p, err, sizeof err)) {
        pl_log_error ("client: %s", err);
        cli_send_error (self, PROTO_ERR_STATE, err);
        proto_msg_destroy (msg_p);
        return -1;
    }
    double t0 = pl_monotonic (), s0 = s_tl_now (self);
    nn_model_backward (self->ctx[i], proto_msg_tensor_data (*msg_p), NULL);
    self->stats.backward_s += pl_monotonic () - t0;
    s_event (self, PROTO_STAGE_BACKWARD, self->cur_epoch, (int) self->cur_iter, (int) i, s0,
             s_tl_now (self));
    self->awaiting[i] = false;
    self->pending--;
    proto_msg_destroy (msg_p);
    return 0;
}

//  Receive one message while micro-batches are in flight.
static int
s_pump (cli_t *self, int timeout_ms)
{
    double t0 = pl_monotonic (), s0 = s_tl_now (self);
    proto_msg_t *msg = s_recv (self, timeout_ms);
    if (timeout_ms != 0) {
        self->stats.idle_s += pl_monotonic () - t0;
        s_event (self, PROTO_STAGE_WAIT, self->cur_epoch, (int) self->cur_iter, -1, s0,
                 s_tl_now (self));
    }
    //  Nothing yet (1) only when the zero-timeout poll found nothing: an
    //  ERROR ("server stopping") read here ends the run now, not after
    //  --timeout of waiting for gradients that will not come.
    if (!msg)
        return timeout_ms == 0 && !self->bye && !self->recv_failed && !self->stop->stop ? 1 : -1;
    if (proto_msg_type (msg) != PROTO_MSG_GRADIENTS) {
        s_unexpected (self, &msg, "GRADIENTS");
        return -1;
    }
    return s_on_gradients (self, &msg);
}

static int
s_split_iteration (cli_t *self, const int *order)
{
    for (int i = 0; i < self->micro; i++) {
        nn_dataset_batch (self->x[i], self->y[i], self->train, order + (size_t) i * self->mb,
                          self->mb, &self->aug, &self->data_rng);
        double t0 = pl_monotonic (), s0 = s_tl_now (self);
        const float *out = nn_model_forward (self->ctx[i], self->x[i], self->mb, true,
                                             &self->rng);
        self->stats.forward_s += pl_monotonic () - t0;
        s_event (self, PROTO_STAGE_FORWARD, self->cur_epoch, (int) self->cur_iter, i, s0,
                 s_tl_now (self));
        //  Copied into the message, not lent: if the run ends while this
        //  message still waits in libzmq's queue (the server aborted, the
        //  device was dropped), libzmq may read it after the contexts are
        //  freed. The copy costs ~0.1 ms per micro-batch.
        nn_shape_t s = nn_model_output_shape (self->ctx[i]);
        uint32_t dims[4] = { (uint32_t) self->mb, (uint32_t) s.h, (uint32_t) s.w,
                             (uint32_t) s.c };
        proto_msg_t *msg = proto_msg_new (PROTO_MSG_ACTIVATIONS);
        proto_msg_set_route (msg, (uint32_t) self->id, self->cur_epoch, self->cur_iter,
                             (uint32_t) i);
        proto_msg_set_last (msg, i == self->micro - 1);
        char err[NN_ERR_SIZE];
        if (cli_wire_set_activations (self, msg, out, dims, err, sizeof err)) {
            proto_msg_destroy (&msg);
            pl_log_error ("client: cannot build ACTIVATIONS: %s", err);
            cli_send_error (self, PROTO_ERR_INTERNAL, err);
            return -1;
        }
        for (int k = 0; k < self->mb; k++)
            self->labels[k] = self->y[i][k];
        proto_msg_set_labels (msg, self->labels, (size_t) self->mb);
        if (cli_send (self, &msg))
            return -1;
        self->awaiting[i] = true;
        self->pending++;
        //  Consume what has arrived without waiting: the next forward runs
        //  while this micro-batch is on the wire and on the server.
        if (i < self->micro - 1) {
            int rc;
            while ((rc = s_pump (self, 0)) == 0)
                ;
            if (rc < 0)
                return -1;
        }
    }
    while (self->pending > 0)
        if (s_pump (self, -1))
            return -1;
    double t0 = pl_monotonic (), s0 = s_tl_now (self);
    nn_sgd_step (nn_model_weights (self->ctx[0]), nn_model_optim_state (self->ctx[0]),
                 nn_model_grads (self->ctx[0]), nn_model_params_count (self->ctx[0]),
                 &self->sgd);
    nn_model_zero_grad (self->ctx[0]);
    self->stats.update_s += pl_monotonic () - t0;
    s_event (self, PROTO_STAGE_UPDATE, self->cur_epoch, (int) self->cur_iter, -1, s0,
             s_tl_now (self));
    return 0;
}

//  fl: one batch of local training. 0, or -1 when the loss is not finite
//  (training diverged: the server is told with ERROR DIVERGED and the
//  device stops; STATS cannot carry a non-finite loss).
static int
s_fl_iteration (cli_t *self, const int *order)
{
    nn_dataset_batch (self->x[0], self->y[0], self->train, order, self->batch, &self->aug,
                      &self->data_rng);
    double t0 = pl_monotonic (), s0 = s_tl_now (self);
    const float *out = nn_model_forward (self->ctx[0], self->x[0], self->batch, true,
                                         &self->rng);
    int correct = 0;
    float loss = nn_softmax_xent (self->dlogits, out, self->y[0], self->batch,
                                  self->spec.classes, 1.0f, &correct);
    if (!isfinite (loss)) {
        char text[160];
        snprintf (text, sizeof text, "the loss is %g at epoch %u, iteration %u "
                  "(learning_rate %g)", (double) loss, self->cur_epoch, self->cur_iter,
                  self->cfg.learning_rate);
        pl_log_error ("client: training diverged: %s; stopping and telling the server",
                      text);
        cli_send_error (self, PROTO_ERR_DIVERGED, text);
        self->diverged = true;
        return -1;
    }
    self->stats.loss_sum += (double) loss * self->batch;
    self->stats.correct += (uint64_t) correct;
    self->stats.samples += (uint64_t) self->batch;
    double t1 = pl_monotonic (), s1 = s_tl_now (self);
    nn_model_backward (self->ctx[0], self->dlogits, NULL);
    double t2 = pl_monotonic (), s2 = s_tl_now (self);
    nn_sgd_step (nn_model_weights (self->ctx[0]), nn_model_optim_state (self->ctx[0]),
                 nn_model_grads (self->ctx[0]), nn_model_params_count (self->ctx[0]),
                 &self->sgd);
    nn_model_zero_grad (self->ctx[0]);
    self->stats.forward_s += t1 - t0;
    self->stats.backward_s += t2 - t1;
    self->stats.update_s += pl_monotonic () - t2;
    int it = (int) self->cur_iter;
    s_event (self, PROTO_STAGE_FORWARD, self->cur_epoch, it, 0, s0, s1);
    s_event (self, PROTO_STAGE_BACKWARD, self->cur_epoch, it, 0, s1, s2);
    s_event (self, PROTO_STAGE_UPDATE, self->cur_epoch, it, -1, s2, s_tl_now (self));
    return 0;
}

//  0 when the run ended with BYE, -1 otherwise.
static int
s_train (cli_t *self)
{
    int agg = self->cfg.aggregation_frequency;
    //  An epoch is `iterations` batches on every device, enough for the
    //  largest shard: a smaller shard is gone through again (reshuffled)
    //  to fill its batches, so no device leaves samples out.
    size_t order_count = (size_t) self->iterations * (size_t) self->batch;
    int *order = nn_malloc (sizeof (int) * (order_count + (size_t) self->shard_count));
    int rc = 0;
    self->cur_epoch = 1;
    //  The first MODEL says where this device starts: epoch 1, iteration 0
    //  at the start of a run; later when it (re)joins a running one.
    int epoch = 1, start_it = 0;
    if (self->mode != PL_MODE_SL && (rc = s_wait_model (self, 1, -1)) == 0) {
        epoch = (int) self->model_epoch;
        start_it = (int) self->model_iter;
    }
    for (; rc == 0 && epoch <= self->cfg.epochs; epoch++) {
        self->cur_epoch = (uint32_t) epoch;
        self->cur_iter = 0;
        if (self->mode == PL_MODE_SL) {
            if ((rc = s_wait_model (self, (uint32_t) epoch, -1)) != 0)
                break;
            epoch = (int) self->model_epoch;
            self->cur_epoch = (uint32_t) epoch;
        }
        //  An epoch's data order depends on the epoch alone, so a device that
        //  (re)joins at epoch k draws what it would have drawn anyway.
        self->data_rng = nn_rng_split (&self->data_base, (uint64_t) epoch);
        for (size_t at = 0; at < order_count; at += (size_t) self->shard_count) {
            memcpy (order + at, self->shard, sizeof (int) * (size_t) self->shard_count);
            nn_rng_shuffle_int (&self->data_rng, order + at, self->shard_count);
        }
        int first = start_it;
        start_it = 0;
        for (int it = first; rc == 0 && it < self->iterations; it++) {
            self->cur_iter = (uint32_t) it;
            const int *batch = order + (size_t) it * self->batch;
            if (self->mode == PL_MODE_FL ? s_fl_iteration (self, batch)
                                            : s_split_iteration (self, batch))
                rc = -1;
            if (rc)
                break;
            self->cur_iter = (uint32_t) it + 1;
            bool end = it == self->iterations - 1;
            bool round = self->mode != PL_MODE_SL && agg > 0 && (it + 1) % agg == 0;
            if (end) {
                if (s_send_events (self) || s_send_stats (self) || s_send_params (self))
                    rc = -1;
                else if (self->mode != PL_MODE_SL)
                    rc = s_wait_model (self, (uint32_t) epoch + 1, -1);
            }
            else if (round) {
                if (s_send_params (self))
                    rc = -1;
                else
                    rc = s_wait_model (self, (uint32_t) epoch, it);
            }
        }
    }
    nn_free (order);
    if (rc == 1 || self->bye)
        return 0;
    if (rc)
        return -1;
    //  Wait for BYE (in sl the other devices may still be training, and the
    //  last epoch's BN calibration may come first).
    while (!self->bye) {
        proto_msg_t *msg = s_recv (self, -1);
        if (!msg)
            return self->bye ? 0 : -1;
        if (proto_msg_type (msg) == PROTO_MSG_MODEL && cli_calib_request (self, msg)) {
            if (s_calibrate (self, &msg))
                return -1;
            continue;
        }
        s_unexpected (self, &msg, "BYE");
        return -1;
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Joining

static int
s_join (cli_t *self)
{
    char err[NN_ERR_SIZE];
    proto_msg_t *hello = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t h = { .protocol_version = PROTO_VERSION,
                        .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                        .requested_device_id = self->args.device_id,
                        .sample_count = 0 };
    snprintf (h.name, sizeof h.name, "pipelearn-client");
    proto_msg_set_hello (hello, &h);
    //  The signal handlers are set by now: from this line on SIGTERM and
    //  SIGINT end the run with a BYE (tests wait for it before signalling).
    pl_log_info ("client: connecting to %s", self->args.connect);
    if (cli_send (self, &hello))
        return -1;
    proto_msg_t *msg = s_recv (self, -1);
    if (!msg)
        return -1;
    if (proto_msg_type (msg) != PROTO_MSG_WELCOME) {
        s_unexpected (self, &msg, "WELCOME");
        return -1;
    }
    self->assign = *proto_msg_assign (msg);
    self->send_cap = proto_msg_frame_cap (msg);
    self->profile_requested = proto_msg_profile_requested (msg);
    pl_config_defaults (&self->cfg);
    int rc = pl_config_parse (&self->cfg, proto_msg_config (msg, NULL), "WELCOME", err,
                              sizeof err);
    proto_msg_destroy (&msg);
    if (rc == 0)
        rc = pl_config_check (&self->cfg, "WELCOME", err, sizeof err);
    const proto_assign_t *p = &self->assign;
    if (rc == 0 && (p->batch_size != (uint32_t) self->cfg.batch_size
                    || p->batch_size % p->micro_batches
                    || p->micro_batches > CLI_MAX_MICRO
                    || p->devices != (uint32_t) self->cfg.devices
                    || p->device_id >= p->devices)) {
        snprintf (err, sizeof err, "WELCOME: plan (batch %u, %u micro-batches, device %u "
                  "of %u) does not fit the config or this client", p->batch_size,
                  p->micro_batches, p->device_id, p->devices);
        rc = -1;
    }
    if (rc) {
        pl_log_error ("client: %s", err);
        cli_send_error (self, PROTO_ERR_REFUSED, err);
        return -1;
    }
    self->mode = (pl_mode_t) p->mode;
    self->id = (int) p->device_id;
    self->batch = (int) p->batch_size;
    self->micro = (int) p->micro_batches;
    self->mb = self->batch / self->micro;
    //  proto checked origin_s is finite and >= 0.
    self->timeline = pl_timeline_new (p->origin_s);
    snprintf (self->who, sizeof self->who, "device%d", self->id & 0xffff);
    cli_wire_setup (self);
    //  json log lines name the device from now on (one device per process;
    //  the in-process tests, which run several, log text).
    pl_log_set_device (self->id);
    pl_log_info ("client: joined as device %d of %u (%s, split %u, %d micro-batch(es)); "
                 "the server takes frames up to %" PRIu64 " bytes", self->id, p->devices,
                 pl_mode_name ((int) self->mode), p->split_point, self->micro,
                 self->send_cap);
    return 0;
}

//  Data and models for the plan.
//  What the shard selection needs and finds (see s_select_shard).
typedef struct {
    const pl_config_t *cfg;
    int devices, id;
    int *mine, mine_count;              //  this device's shard
    int min_count, max_count;           //  over every device's shard
} s_shards_t;

//  pl_shards_each's callback: keep this device's shard, count the others.
static int
s_keep_mine (int device, int *shard, int count, void *arg)
{
    s_shards_t *sh = arg;
    if (device == 0 || count < sh->min_count)
        sh->min_count = count;
    if (count > sh->max_count)
        sh->max_count = count;
    if (device == sh->id) {
        sh->mine = shard;
        sh->mine_count = count;
    }
    else
        nn_free (shard);
    return 0;
}

//  Every device's shard is computed (from the labels alone) to know the
//  smallest and largest; this device keeps its own. The loader then reads
//  only those images: a device never holds the whole training set.
static int *
s_select_shard (const nn_dataset_t *unloaded, int *count_out, void *arg, char *err,
                size_t err_size)
{
    s_shards_t *sh = arg;
    if (pl_shards_each (sh->cfg, sh->devices, unloaded, s_keep_mine, sh, err, err_size)) {
        nn_free (sh->mine);
        sh->mine = NULL;
        return NULL;
    }
    if (sh->mine)
        *count_out = sh->mine_count;
    return sh->mine;
}

static int
s_prepare (cli_t *self)
{
    char err[NN_ERR_SIZE];
    const pl_config_t *cfg = &self->cfg;
    const char *dir = self->args.data_dir ? self->args.data_dir
                    : cfg->data_dir[0] ? cfg->data_dir : NULL;
    nn_rng_seed (&self->rng, cfg->seed);
    s_shards_t sh = { .cfg = cfg, .devices = (int) self->assign.devices, .id = self->id };
    self->train = nn_dataset_load_named_select (cfg->dataset, dir, true, cfg->samples,
                                                s_select_shard, &sh, err, sizeof err);
    if (!self->train)
        goto fail;
    if (cfg->pad_to > 0 && nn_dataset_pad (self->train, cfg->pad_to, err, sizeof err))
        goto fail;
    if (nn_model_spec_by_name (&self->spec, cfg->model, self->train->c, self->train->h,
                               self->train->w, self->train->classes, err, sizeof err))
        goto fail;
    nn_model_spec_hash (&self->spec, self->spec_hash);
    //  The loaded set is the shard, in shard order.
    self->shard_count = self->train->count;
    self->shard = nn_malloc (sizeof (int) * (size_t) (self->shard_count + 1));
    for (int i = 0; i < self->shard_count; i++)
        self->shard[i] = i;
    int min_count = sh.min_count, max_count = sh.max_count, devices = sh.devices;
    //  Every device runs as many iterations as the largest shard needs (the
    //  rounds must line up), so every sample of every shard is used each
    //  epoch; an empty shard cannot fill a batch.
    self->iterations = (max_count + self->batch - 1) / self->batch;
    if (min_count == 0) {
        snprintf (err, sizeof err, "a device's shard is empty (%d devices, %d samples)",
                  devices, cfg->samples);
        goto fail;
    }
    self->data_base = nn_rng_split (&self->rng, 1000 + (uint64_t) self->id);
    //  Profile before the contexts exist, so that the two are never in
    //  memory together (cli_planning_profile has answered ERROR on failure).
    if (self->profile_requested && cli_planning_profile (self))
        return -1;
    int units = self->mode == PL_MODE_FL ? self->spec.units_count
                                            : (int) self->assign.split_point;
    if (cli_contexts_build (self, units, self->micro, err, sizeof err))
        goto fail;
    self->sgd = (nn_sgd_t) { (float) cfg->learning_rate, (float) cfg->momentum,
                             (float) cfg->weight_decay };
    self->aug = (nn_augment_t) { .augment = cfg->augment, .crop_pad = 4,
                                 .flip = cfg->flip };
    pl_log_info ("client: device %d: %d samples, %d iteration(s) per epoch", self->id,
                 self->shard_count, self->iterations);
    //  Ready: the server starts the first epoch's clock at the first ready
    //  device (PROTOCOL.md), so loading the shard is not epoch time.
    proto_msg_t *ready = proto_msg_new (PROTO_MSG_HEARTBEAT);
    proto_msg_set_route (ready, (uint32_t) self->id, 0, 0, 0);
    return cli_send (self, &ready);
fail:
    pl_log_error ("client: %s", err);
    cli_send_error (self, PROTO_ERR_INTERNAL, err);
    return -1;
}

//  How one session (a connection from HELLO to its end) ended.
typedef enum {
    S_END_DONE,         //  the run ended (BYE, or "complete"): exit 0
    S_END_FAILED,       //  exit 1
    S_END_DIVERGED,     //  exit CLI_EXIT_DIVERGED
    S_END_STOPPED,      //  SIGTERM/SIGINT: exit 0
    S_END_RESUMING,     //  the server stopped and will resume: join again
    S_END_SILENT        //  no answer to HELLO (while waiting for a resume: try again)
} s_end_t;

//  One session with the server on a new DEALER socket, from HELLO to the
//  end of the run or of the connection: everything it built (socket,
//  shard, models) is freed before it returns. rejoining: the server said
//  it would resume, so silence is "not back yet", not an error.
static s_end_t
s_session (const cli_args_t *args, const pl_stop_t *stop, bool rejoining)
{
    cli_t *self = nn_calloc (1, sizeof *self);
    self->args = *args;
    self->stop = stop;
    self->rejoining = rejoining;
    s_end_t end = S_END_FAILED;
    self->dealer = zsock_new (ZMQ_DEALER);
    if (!self->dealer) {
        pl_log_error ("client: cannot create a DEALER socket");
        nn_free (self);
        return S_END_FAILED;
    }
    self->dh = zsock_resolve (self->dealer);
    zsock_set_linger (self->dealer, 2000);
    //  A lost server is reconnected to with back-off (0.1 s doubling to
    //  5 s) until --timeout says the device has waited long enough.
    zsock_set_reconnect_ivl (self->dealer, 100);
    zsock_set_reconnect_ivl_max (self->dealer, 5000);
    //  ZMTP heartbeats both ways (the server sets its own): a server that
    //  vanished without closing TCP is noticed and reconnected to.
    zsock_set_heartbeat_ivl (self->dealer, (int) (self->args.heartbeat_s * 1000.0));
    zsock_set_heartbeat_timeout (self->dealer, (int) (self->args.heartbeat_s * 6000.0));
    //  A server that stops reading: a device has at most its micro-batches'
    //  ACTIVATIONS and an epoch end's EVENTS, STATS and PARAMS queued, so
    //  a bounded queue is never reached in a healthy run, and a send that
    //  blocks for --timeout fails (the device gives up as it does on a
    //  silent server) instead of hanging or growing without bound.
    zsock_set_sndhwm (self->dealer, 2 * CLI_MAX_MICRO + 16);
    double send_ms = self->args.timeout_s * 1000.0;
    zsock_set_sndtimeo (self->dealer, send_ms < INT_MAX ? (int) send_ms : -1);
    char err[NN_ERR_SIZE];
    if (!self->args.insecure
    &&  pl_curve_client_apply (self->dealer, self->args.cert, self->args.server_cert, err,
                               sizeof err)) {
        pl_log_error ("client: %s", err);
        zsock_destroy (&self->dealer);
        nn_free (self);
        return S_END_FAILED;
    }
    if (zmq_connect (self->dh, self->args.connect)) {
        pl_log_error ("client: connect %s: %s", self->args.connect, zmq_strerror (errno));
    }
    else
    if (s_join (self) == 0 && s_prepare (self) == 0 && s_train (self) == 0) {
        pl_log_info ("client: device %d done", self->id);
        end = S_END_DONE;
    }
    else
    if (self->run_complete) {
        pl_log_info ("client: the run is complete; nothing to do");
        end = S_END_DONE;
    }
    else
    if (self->diverged) {
        pl_log_error ("client: the run stopped: training diverged (lower learning_rate)");
        end = S_END_DIVERGED;
    }
    else
    if (self->stop->stop) {
        //  Stopped by SIGTERM/SIGINT: leave the run properly (the server
        //  drops this device and goes on; restarted, it rejoins).
        proto_msg_t *bye = proto_msg_new (PROTO_MSG_BYE);
        proto_msg_set_route (bye, (uint32_t) (self->id < 0 ? 0 : self->id), self->cur_epoch,
                             self->cur_iter, 0);
        //  A DEALER with no peer blocks a send (a server that refused this
        //  device's CURVE handshake leaves none): wait a second at most.
        zsock_set_sndtimeo (self->dealer, 1000);
        bool told = proto_msg_send (&bye, self->dh) == 0;
        if (!told)
            proto_msg_destroy (&bye);
        pl_log_info (told ? "client: stopped by a signal; told the server (BYE)"
                          : "client: stopped by a signal (no server to tell)");
        end = S_END_STOPPED;
    }
    else
    if (self->server_resuming)
        end = S_END_RESUMING;
    else
    if (self->assign.batch_size == 0 && !self->recv_failed)
        end = S_END_SILENT;
    //  Nothing queued for a server that is gone may reach the next one: a
    //  HELLO left in a silent try's queue, delivered by libzmq's linger
    //  after this session gave up on it, joined a dead connection to the
    //  resumed server (which dropped it and, short of devices, aborted).
    //  A final BYE or ERROR still gets its 2 s to leave.
    bool next_try = end == S_END_RESUMING || end == S_END_SILENT;
    zsock_set_linger (self->dealer, next_try ? 0 : 2000);
    zsock_destroy (&self->dealer);
    cli_contexts_free (self);
    cli_wire_free (self);
    nn_free (self->shard);
    nn_dataset_destroy (&self->train);
    pl_timeline_destroy (&self->timeline);
    nn_free (self);
    return end;
}

//  Sleep seconds, waking early for SIGTERM/SIGINT.
static void
s_nap (const pl_stop_t *stop, double seconds)
{
    double until = pl_monotonic () + seconds;
    while (!stop->stop && pl_monotonic () < until)
        zclock_sleep (S_POLL_SLICE_MS);
}

//  cli_run's sessions, until one ends the run: its exit status.
static int
s_run (const cli_args_t *args, const pl_stop_t *stop)
{
    if (args->insecure)
        pl_log_warn ("client: --insecure: plain TCP; the server is not authenticated");
    //  A planned server stop is not this device's failure: rather than exit
    //  (and be restarted by systemd or Compose in a loop while the server is
    //  away), the client joins again by itself, waiting 1 s, then twice as
    //  long after each try that got no answer in --timeout, up to 60 s,
    //  for as long as the server stays away. Every other end is final.
    double backoff_s = 0.0;
    for (;;) {
        s_end_t end = s_session (args, stop, backoff_s > 0);
        if (end == S_END_RESUMING)
            backoff_s = 1.0;
        else
        if (end == S_END_SILENT && backoff_s > 0)
            backoff_s = backoff_s * 2 < 60.0 ? backoff_s * 2 : 60.0;
        else
        if (end == S_END_SILENT)
            return 1;       //  the first try: --timeout has said its message
        else
            return end == S_END_DONE || end == S_END_STOPPED ? 0
                 : end == S_END_DIVERGED ? CLI_EXIT_DIVERGED : 1;
        pl_log_info ("client: waiting for the server to resume the run; joining again in "
                     "%.0f s", backoff_s);
        s_nap (stop, backoff_s);
        if (stop->stop) {
            pl_log_info ("client: stopped by a signal while waiting for the server");
            return 0;
        }
    }
}

int
cli_run (int argc, char **argv)
{
    cli_args_t args = { 0 };
    pl_args_lock ();
    int parsed = s_parse_args (argc, argv, &args);
    pl_args_unlock ();
    if (parsed)
        return 2;
    //  This run's flags, for all its sessions (pl_stop.h): SIGINT and
    //  SIGTERM end it.
    pl_stop_t stop;
    if (pl_daemon_run_setup (&stop, false)) {
        pl_log_error ("client: more than %d runs in this process", PL_STOP_MAX_RUNS);
        return 1;
    }
    int rc = s_run (&args, &stop);
    pl_stop_detach (&stop);
    return rc;
}
