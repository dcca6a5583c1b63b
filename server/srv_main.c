/*  pipelearn-server: the edge server of a split (or federated) training run.

    pipelearn-server --config FILE [--bind ENDPOINT] [--results DIR]
                     [--set KEY=VALUE]... [--endpoint-file PATH] [--quiet]

    One reactor thread polls the ROUTER and the worker actors' pipes. The
    reactor owns the server replicas (units P..U): one per device, one
    shared in sl. Compute runs on a pool of workers, one per core (at most
    one per replica): ACTIVATIONS wait in their replica's queue until a
    worker is free and the replica is not already being trained, then go to
    that worker by pointer with the replica lent to it; GRADIENTS come back
    the same way. PARAMS are collected per round and FedAvg'd (device
    parts and server replicas); at the end of an epoch the merged model is
    evaluated on the test set. Results: DIR/summary.json, DIR/timeline.csv,
    DIR/model.ckpt.

    Epoch end protocol (what the clients do): at the end of its epoch a
    device sends EVENTS (its stage events of the epoch), STATS and then its
    epoch-final PARAMS, so the server knows an aggregation round closes an
    epoch when every device's STATS for that epoch has arrived.

    Timeline: WELCOME's plan carries origin_s, the CLOCK_REALTIME second
    this server took as time 0, so device events and the workers' compute
    events share one time axis. Device events are checked (epoch, indices,
    a per-epoch budget) and merged as they arrive; timeline.csv is written
    sorted by start time at the end.
*/
#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_dataset.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "nn_plan.h"
#include "nn_profile.h"
#include "pl_blas.h"
#include "pl_config.h"
#include "pl_curve.h"
#include "pl_log.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "proto_msg.h"
#include "proto_tensor.h"
#include "srv_ckpt.h"
#include "srv_metrics.h"
#include "srv_plan.h"
#include "srv_state.h"
#include "srv_run.h"
#include "srv_worker.h"

#include <assert.h>
#include <czmq.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t s_interrupted = 0;
static volatile sig_atomic_t s_reload = 0;

static void
s_on_signal (int sig)
{
    if (sig == SIGHUP)
        s_reload = 1;
    else
        s_interrupted = 1;
}

typedef struct {
    const char *config_path;
    const char *results_dir;
    const char *bind;
    const char *endpoint_file;
    bool resume;                //  continue from the newest checkpoint
    bool force;                 //  a new run over an earlier run's checkpoints
    const char *cert;           //  server secret certificate
    const char *allow;          //  directory of allowed device certificates
    bool insecure;
    bool quiet;
} s_args_t;


static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: pipelearn-server --config FILE (--cert FILE_secret --allow DIR | --insecure)\n"
        "                        [--bind tcp://*:PORT] [--results DIR]\n"
        "                        [--metrics [ADDR:]PORT] [--log-format text|json]\n"
        "                        [--set KEY=VALUE]... [--endpoint-file PATH]\n"
        "                        [--resume | --force] [--quiet]\n"
        "--metrics serves Prometheus /metrics and a live dashboard over HTTP (a\n"
        "PORT alone listens on 127.0.0.1; config key \"metrics\"). --log-format\n"
        "json logs one JSON object per line.\n"
        "Runs the server side of a pipelearn/sfl/sl/fl run for the configured\n"
        "number of devices and writes DIR/summary.json, DIR/timeline.csv and\n"
        "DIR/model.ckpt. Devices authenticate with CurveZMQ: --cert is this\n"
        "server's secret certificate, --allow a directory of the devices' public\n"
        "certificates (pipelearn-keygen makes both); SIGHUP re-reads them.\n"
        "--insecure: plain TCP, no authentication. --endpoint-file writes the\n"
        "bound endpoint (useful with tcp://127.0.0.1:*). The run is checkpointed in\n"
        "DIR/checkpoints at every aggregation point; --resume continues it from the\n"
        "newest valid one (devices rejoin as they connect). Without --resume, a DIR\n"
        "holding an earlier run's checkpoints is refused; --force deletes them and\n"
        "starts a new run there.\n");
}

static int
s_parse_args (int argc, char **argv, s_args_t *args, pl_config_t *cfg)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "results", required_argument, NULL, 'r' },
        { "bind", required_argument, NULL, 'b' },
        { "set", required_argument, NULL, 's' },
        { "endpoint-file", required_argument, NULL, 'E' },
        { "quiet", no_argument, NULL, 'q' },
        { "cert", required_argument, NULL, 'C' },
        { "allow", required_argument, NULL, 'A' },
        { "insecure", no_argument, NULL, 'I' },
        { "resume", no_argument, NULL, 'R' },
        { "force", no_argument, NULL, 'F' },
        { "metrics", required_argument, NULL, 'M' },
        { "log-format", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    char err[NN_ERR_SIZE];
    //  The config file first, so that every other flag overrides it.
    if (pl_config_load_args (cfg, argc, argv, &args->config_path, err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    int c;
    while ((c = getopt_long (argc, argv, "c:r:b:s:E:qh", opts, NULL)) != -1) {
        switch (c) {
            case 'c': break;
            case 'C': args->cert = optarg; break;
            case 'A': args->allow = optarg; break;
            case 'I': args->insecure = true; break;
            case 'R': args->resume = true; break;
            case 'F': args->force = true; break;
            case 'r': args->results_dir = optarg; break;
            case 'b': args->bind = optarg; break;
            case 'E': args->endpoint_file = optarg; break;
            case 'q': args->quiet = true; break;
            case 'M': snprintf (cfg->metrics, sizeof cfg->metrics, "%s", optarg); break;
            case 'L':
                if (pl_log_set_format_name (optarg)) {
                    pl_log_error ("--log-format: want text or json, got \"%s\"", optarg);
                    return -1;
                }
                break;
            case 'h': s_usage (stdout); exit (0);
            case 's':
                if (pl_config_set (cfg, optarg, err, sizeof err)) {
                    pl_log_error ("%s", err);
                    return -1;
                }
                break;
            default: s_usage (stderr); return -1;
        }
    }
    if (args->resume && args->force) {
        pl_log_error ("--resume continues the run in the results directory, --force "
                      "replaces it: give one");
        return -1;
    }
    if (optind < argc) {
        pl_log_error ("unexpected argument \"%s\"", argv[optind]);
        s_usage (stderr);
        return -1;
    }
    if (args->insecure ? (args->cert || args->allow) : !(args->cert && args->allow)) {
        pl_log_error ("security: give --cert FILE_secret and --allow DIR (CurveZMQ, the "
                      "default; keys from pipelearn-keygen), or --insecure alone for plain "
                      "TCP");
        return -1;
    }
    const char *src = args->config_path ? args->config_path : "config";
    if (pl_config_check (cfg, src, err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    if (strcmp (cfg->mode, "pipelearn") == 0 && cfg->micro_batches != PL_AUTO
    &&  cfg->batch_size % cfg->micro_batches) {
        pl_log_error ("%s: micro_batches, batch_size: %d micro-batches must divide the "
                      "batch of %d samples", src, cfg->micro_batches, cfg->batch_size);
        return -1;
    }
    if (cfg->devices > SRV_MAX_DEVICES) {
        pl_log_error ("%s: devices: at most %d, got %d", src, SRV_MAX_DEVICES,
                      cfg->devices);
        return -1;
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Sending

//  Send queue per device (ZMQ_SNDHWM, in messages). A device that reads has
//  at most its N micro-batches' GRADIENTS outstanding, plus a MODEL, a PLAN,
//  a probe and HEARTBEATs: twice the largest N any plan can give, plus
//  slack. libzmq's default (1000) let a device that stopped reading hold
//  ~630 MB of the server's memory.
static int
s_send_hwm (const srv_t *self)
{
    int n = self->plan.auto_micro ? self->batch : self->micro;
    if (n < 1)
        n = 1;
    if (n > 256)
        n = 256;
    return 2 * n + 16;
}

//  Drop d once the current handler returns (see s_drop_pending); the
//  first reason given is the one logged.
static void
s_drop_later (srv_device_t *d, uint32_t code, bool diverged, const char *why)
{
    if (d->drop_pending)
        return;
    d->drop_pending = true;
    d->drop_diverged = diverged;
    d->drop_code = code;
    snprintf (d->drop_why, sizeof d->drop_why, "%s", why);
}

//  The ROUTER never blocks (ZMQ_SNDTIMEO 0, ZMQ_ROUTER_MANDATORY): a device
//  whose send queue is full (it stopped reading) or whose connection is
//  gone fails the send and is dropped, instead of growing the server's
//  memory. A device about to be dropped is sent nothing more.
void
srv_send (srv_t *self, srv_device_t *d, proto_msg_t **msg_p)
{
    int type = proto_msg_type (*msg_p);
    if (d->drop_pending) {
        proto_msg_destroy (msg_p);
        return;
    }
    if (proto_msg_send_to (msg_p, self->rh, d->rid, d->rid_len)) {
        int e = errno;
        proto_msg_destroy (msg_p);
        char why[160];
        if (e == EAGAIN)
            snprintf (why, sizeof why, "not reading: its send queue is full (%d messages, "
                      "ZMQ_SNDHWM) at a %s", s_send_hwm (self), proto_type_name (type));
        else
        if (e == EHOSTUNREACH)
            snprintf (why, sizeof why, "its connection is gone (sending %s)",
                      proto_type_name (type));
        else {
            pl_log_warn ("server: sending %s to a device failed: %s", proto_type_name (type),
                         zmq_strerror (e));
            return;
        }
        s_drop_later (d, 0, false, why);
        return;
    }
    d->state = proto_state_next (d->state, type, PROTO_DOWN);
}

//  An ERROR to one peer: 0, or -1 (errno set) when it could not be queued
//  (callers that must not lose it say so; the others go on).
static int
s_send_error_to (srv_t *self, const uint8_t *rid, size_t rid_len, uint32_t code,
                 const char *text)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ERROR);
    char clipped[PROTO_TEXT_MAX];
    snprintf (clipped, sizeof clipped, "%s", text);
    proto_msg_set_error (msg, code, clipped);
    if (proto_msg_send_to (&msg, self->rh, rid, rid_len) == 0)
        return 0;
    int e = errno;
    proto_msg_destroy (&msg);
    errno = e;
    return -1;
}

static srv_device_t *
s_find (srv_t *self, const uint8_t *rid, size_t rid_len)
{
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined && self->dev[i].rid_len == rid_len
        &&  memcmp (self->dev[i].rid, rid, rid_len) == 0)
            return &self->dev[i];
    return NULL;
}

//  Too few devices are left to go on: tell the others and stop. When the
//  devices left because their training diverged, the run ends with exit
//  status SRV_EXIT_DIVERGED and says so; the newest checkpoint holds the
//  last finite model (s_checkpoint never writes a non-finite one).
static void
s_abort_all (srv_t *self, const char *why)
{
    bool diverged = self->diverged > 0;
    if (diverged)
        pl_log_error ("server: training diverged (a non-finite loss on %d device(s)) and "
                      "%s; the run stops. The newest checkpoint in %s/checkpoints holds "
                      "the last finite model; lower learning_rate and start again",
                      self->diverged, why, self->results);
    else
        pl_log_error ("server: %s; aborting the run", why);
    //  The run ends here: wait up to a second for room in a device's queue
    //  rather than drop the notice (a device that misses it waits out its
    //  --timeout).
    zsock_set_sndtimeo (self->router, 1000);
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            if (s_send_error_to (self, self->dev[i].rid, self->dev[i].rid_len,
                                 diverged ? PROTO_ERR_DIVERGED : PROTO_ERR_INTERNAL,
                                 diverged ? "run stopped: training diverged"
                                          : "run aborted: too few devices left"))
                pl_log_warn ("server: could not tell device %d that the run stops (%s)",
                             i, zmq_strerror (errno));
            self->dev[i].joined = self->dev[i].active = false;
        }
    self->rc = diverged ? SRV_EXIT_DIVERGED : 1;
    self->done = true;
}

static int
s_active_count (const srv_t *self)
{
    int n = 0;
    for (int i = 0; i < self->devices; i++)
        n += self->dev[i].active;
    return n;
}

static void s_round_check (srv_t *self);

//  Drop a device from the run: it misbehaved, left, or missed a deadline.
//  It gets ERROR (code; 0 when the caller already answered ERROR) if it
//  can still hear; its queued micro-batches are
//  discarded; the round goes on without it (or ends, if it was the last one
//  missing), unless fewer than min_devices would be left.
void
srv_drop (srv_t *self, srv_device_t *d, uint32_t code, const char *why)
{
    int id = (int) (d - self->dev);
    bool was_active = d->active;
    pl_log_warn ("server: device %d dropped: %s", id, why);
    srv_metrics_note_drop (self->metrics, id);
    if (self->diverging) {
        self->diverged++;
        self->diverging = false;
    }
    if (d->joined) {
        if (code) {
            char text[PROTO_TEXT_MAX];
            snprintf (text, sizeof text, "dropped from the run: %s", why);
            s_send_error_to (self, d->rid, d->rid_len, code, text);
        }
        self->joined--;
    }
    d->joined = d->active = false;
    d->params_in = d->stats_in = false;
    d->drop_pending = false;
    if (self->mode != PROTO_MODE_FL) {
        srv_replica_t *r = &self->rep[d->replica];
        while (zlist_size (r->queue)) {
            proto_msg_t *m = zlist_pop (r->queue);
            proto_msg_destroy (&m);
        }
    }
    srv_plan_on_drop (self, d);
    if (!self->started || !was_active || self->done)
        return;
    if (s_active_count (self) < self->cfg.min_devices) {
        char text[128];
        snprintf (text, sizeof text, "%d device(s) left, min_devices is %d",
                  s_active_count (self), self->cfg.min_devices);
        s_abort_all (self, text);
        return;
    }
    s_round_check (self);
}

//  Drop the devices marked by s_drop_later. A drop can close a round and
//  send MODELs, which can mark another: scan again.
static void
s_drop_pending (srv_t *self)
{
    bool dropped = true;
    while (dropped && !self->done) {
        dropped = false;
        for (int i = 0; i < self->devices && !self->done; i++) {
            srv_device_t *d = &self->dev[i];
            if (!d->drop_pending)
                continue;
            d->drop_pending = false;
            if (d->joined) {
                char why[sizeof d->drop_why];
                snprintf (why, sizeof why, "%s", d->drop_why);
                self->diverging = d->drop_diverged;
                srv_drop (self, d, d->drop_code, why);
                dropped = true;
            }
        }
    }
}

static void
s_send_model (srv_t *self, srv_device_t *d)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_MODEL);
    proto_slab_t slab = { .unit_begin = 0,
                          .unit_end = (uint32_t) nn_model_unit_end (self->devpart),
                          .count = self->dev_wcount, .sample_count = 0 };
    memcpy (slab.spec_hash, self->spec_hash, PROTO_SPEC_HASH_SIZE);
    //  The header's iteration is where the round starts, so that a device
    //  joining a running run knows where to pick up.
    proto_msg_set_route (msg, (uint32_t) (d - self->dev), (uint32_t) self->epoch,
                         self->round_iter, 0);
    proto_msg_set_slab_copy (msg, &slab, nn_model_weights_const (self->devpart));
    d->last_seen = pl_monotonic ();
    srv_send (self, d, &msg);
}

#define SRV_CKPT_KEEP 3

//  Index of the first non-finite value of v (count), or count if all are
//  finite.
static size_t
s_first_nonfinite (const float *v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite (v[i]))
            return i;
    return count;
}

//  Every weight of the device part and of the replicas is finite. Updates
//  are checked before they are averaged; this is the last line before a
//  model reaches the disk.
static bool
s_models_finite (const srv_t *self)
{
    if (s_first_nonfinite (nn_model_weights_const (self->devpart), self->dev_wcount)
        < self->dev_wcount)
        return false;
    for (int i = 0; i < self->replicas_count; i++)
        if (s_first_nonfinite (nn_model_weights_const (self->rep[i].model), self->srv_wcount)
            < self->srv_wcount)
            return false;
    return true;
}

//  Checkpoint the round about to begin (crash safety; see srv_ckpt.h).
//  A non-finite model is never written: the newest checkpoint stays the
//  last good one.
static void
s_checkpoint (srv_t *self)
{
    nn_model_t *reps[SRV_MAX_DEVICES];
    if (!s_models_finite (self)) {
        pl_log_error ("server: the model holds non-finite weights at epoch %d, iteration "
                      "%u; not checkpointed (the newest checkpoint is the last finite "
                      "model)", self->epoch, self->round_iter);
        self->rc = 1;
        return;
    }
    for (int i = 0; i < self->replicas_count; i++)
        reps[i] = self->rep[i].model;
    char err[NN_ERR_SIZE];
    srv_ckpt_point_t pt = { self->epoch, self->round_iter, self->origin };
    if (srv_ckpt_save (self->results, SRV_CKPT_KEEP, pt, &self->cfg, self->devpart, reps,
                       self->replicas_count, pl_summary_epochs (self->summary), err,
                       sizeof err))
        pl_log_error ("server: %s (the run goes on without this checkpoint)", err);
}

//  A round begins: its deadline starts now.
static void
s_round_begin (srv_t *self)
{
    self->round_start = pl_monotonic ();
    if (self->mode == PROTO_MODE_SL) {
        s_send_model (self, &self->dev[self->sl_turn]);
        return;
    }
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].active)
            s_send_model (self, &self->dev[i]);
}

//  Devices that joined a running run take part from this aggregation point
//  on: their replica gets the current server part (weights and optimiser
//  state of an active replica; gradients zeroed). A replica still lent to a
//  worker (a dropped session's last step) waits for the next point.
static void
s_activate_pending (srv_t *self)
{
    int from = -1;
    for (int i = 0; i < self->devices && from < 0; i++)
        if (self->dev[i].active)
            from = i;
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined || d->active)
            continue;
        if (self->mode != PROTO_MODE_FL && self->mode != PROTO_MODE_SL && from >= 0) {
            srv_replica_t *r = &self->rep[d->replica];
            if (r->busy)
                continue;
            const srv_replica_t *src = &self->rep[self->dev[from].replica];
            memcpy (nn_model_weights (r->model), nn_model_weights_const (src->model),
                    sizeof (float) * self->srv_wcount);
            memcpy (nn_model_optim_state (r->model), nn_model_optim_state_const (src->model),
                    sizeof (float) * nn_model_params_count (r->model));
            nn_model_zero_grad (r->model);
        }
        d->active = true;
        pl_log_info ("server: device %d rejoins at epoch %d, iteration %u", i, self->epoch,
                     self->round_iter);
        srv_metrics_note_rejoin (self->metrics, i);
    }
}

//  ---------------------------------------------------------------------
//  Worker requests (synchronous; see srv_worker.h)

static void s_on_grad (srv_t *self, proto_msg_t *grad);
static void s_progress_clear (srv_t *self);

//  Give queued ACTIVATIONS to idle workers: replicas in turn from self->rr,
//  so one device's queue cannot starve the others'; a replica goes to one
//  worker at a time (its gradients accumulate across micro-batches).
static void
s_dispatch (srv_t *self)
{
    for (int w = 0; w < self->workers_count; w++) {
        if (self->worker_rep[w] >= 0)
            continue;
        int pick = -1;
        for (int k = 0; k < self->replicas_count && pick < 0; k++) {
            int r = (self->rr + k) % self->replicas_count;
            if (!self->rep[r].busy && zlist_size (self->rep[r].queue))
                pick = r;
        }
        if (pick < 0)
            return;
        self->rr = (pick + 1) % self->replicas_count;
        srv_replica_t *r = &self->rep[pick];
        proto_msg_t *act = zlist_pop (r->queue);
        r->busy = true;
        self->worker_rep[w] = pick;
        zsock_send (self->workers[w], "spp", "ACT", act, r->model);
    }
}

static int
s_worker_index (srv_t *self, zactor_t *w)
{
    for (int i = 0; i < self->workers_count; i++)
        if (self->workers[i] == w)
            return i;
    return -1;
}

//  A worker finished a step: its replica and the worker are free again.
static void
s_on_worker_grad (srv_t *self, int w, proto_msg_t *grad)
{
    int r = self->worker_rep[w];
    if (r >= 0)
        self->rep[r].busy = false;
    self->worker_rep[w] = -1;
    s_on_grad (self, grad);
    s_dispatch (self);
}

//  A synchronous request to an idle worker ("BUSY", "TL"); a GRAD that
//  is still on its way is handled while waiting.
static void *
s_worker_call (srv_t *self, int w, const char *cmd, const char *want)
{
    zsock_send (self->workers[w], "spp", cmd, NULL, NULL);
    while (true) {
        char *tag = NULL;
        void *ptr = NULL;
        if (zsock_recv (self->workers[w], "sp", &tag, &ptr) || !tag)
            return NULL;
        bool match = streq (tag, want);
        bool grad = streq (tag, "GRAD");
        zstr_free (&tag);
        if (match)
            return ptr;
        if (grad)
            s_on_worker_grad (self, w, ptr);
    }
}

//  ---------------------------------------------------------------------
//  Evaluation, epochs, results

static void
s_evaluate (srv_t *self, double *loss, double *acc)
{
    int b = self->eval_batch;
    int *idx = nn_malloc (sizeof (int) * (size_t) b);
    int *y = nn_malloc (sizeof (int) * (size_t) b);
    size_t sample = nn_shape_size (nn_model_input_shape (self->full));
    float *x = nn_alloc_aligned (sizeof (float) * sample * (size_t) b);
    double total = 0.0;
    int correct = 0;
    const nn_dataset_t *test = self->test;
    for (int start = 0; start < test->count; start += b) {
        int n = test->count - start < b ? test->count - start : b;
        for (int i = 0; i < n; i++)
            idx[i] = start + i;
        nn_dataset_batch (x, y, test, idx, n, NULL, NULL);
        const float *out = nn_model_forward (self->full, x, n, false, NULL);
        total += (double) nn_softmax_xent (NULL, out, y, n, self->spec.classes, 1.0f,
                                           &correct) * n;
    }
    *loss = test->count ? total / test->count : 0.0;
    *acc = test->count ? (double) correct / test->count : 0.0;
    nn_free (idx);
    nn_free (y);
    nn_free (x);
}

//  Merge the current device part and server part into the full model.
static void
s_merge (srv_t *self)
{
    nn_model_copy_tensors (self->full, self->devpart);
    if (self->mode != PROTO_MODE_FL)
        //  After aggregation every replica holds the average.
        nn_model_copy_tensors (self->full, self->rep[0].model);
}

//  By start, then end, then who and stage: a total order, so the file is
//  the same whatever order the events arrived in.
static int
s_event_cmp (const void *a_, const void *b_)
{
    const pl_event_t *a = a_, *b = b_;
    if (a->start_s != b->start_s)
        return a->start_s < b->start_s ? -1 : 1;
    if (a->end_s != b->end_s)
        return a->end_s < b->end_s ? -1 : 1;
    int c = strcmp (a->who, b->who);
    return c ? c : strcmp (a->stage, b->stage);
}

//  Order by (device lane, epoch, iteration, micro-batch) for s_link_spans;
//  who "deviceN" and "link:dN" both give N.
static int
s_link_key (const pl_event_t *e)
{
    const char *digits = strncmp (e->who, "device", 6) == 0 ? e->who + 6
                       : strncmp (e->who, "link:d", 6) == 0 ? e->who + 6 : NULL;
    return digits ? atoi (digits) : -1;
}

static int
s_link_cmp (const void *a_, const void *b_)
{
    const pl_event_t *a = *(const pl_event_t *const *) a_, *b = *(const pl_event_t *const *) b_;
    int ka = s_link_key (a), kb = s_link_key (b);
    if (ka != kb)
        return ka < kb ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    if (a->iteration != b->iteration)
        return a->iteration < b->iteration ? -1 : 1;
    if (a->micro_batch != b->micro_batch)
        return a->micro_batch < b->micro_batch ? -1 : 1;
    return strcmp (a->stage, b->stage);
}

//  The transfers of a split run. The server recorded when each micro-batch's
//  activations arrived (link:dN uplink, start = end = arrival) and when its
//  gradients left (downlink, start = end = departure); the devices' events
//  give the other ends: an upload spans from the end of the micro-batch's
//  forward on the device to its arrival, a download from the departure to
//  the start of its backward on the device (both include queueing in
//  libzmq and the kernel, the propagation delay, and for a download the
//  time the device was busy with another micro-batch). A transfer whose
//  device event is missing (the device was dropped, its events capped) is
//  left out. Rewrites ev[0..n) in place and returns the new count.
static size_t
s_link_spans (pl_event_t *ev, size_t n)
{
    const pl_event_t **by = nn_malloc ((n ? n : 1) * sizeof *by);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (s_link_key (&ev[i]) >= 0 && ev[i].micro_batch >= 0 && ev[i].iteration >= 0)
            by[m++] = &ev[i];
    qsort (by, m, sizeof *by, s_link_cmp);
    //  Runs of one (device, epoch, iteration, micro-batch): stages sort as
    //  backward, downlink, forward, uplink (and the device's own "upload",
    //  "wait"), so each link event finds its partner in its run.
    bool *drop = nn_calloc (n ? n : 1, sizeof *drop);
    for (size_t i = 0; i < m; ) {
        size_t j = i;
        const pl_event_t *fwd = NULL, *bwd = NULL;
        pl_event_t *up = NULL, *down = NULL;
        while (j < m && s_link_key (by[j]) == s_link_key (by[i])
               && by[j]->epoch == by[i]->epoch && by[j]->iteration == by[i]->iteration
               && by[j]->micro_batch == by[i]->micro_batch) {
            const pl_event_t *e = by[j];
            bool link = e->who[0] == 'l';
            if (!link && strcmp (e->stage, "forward") == 0)
                fwd = e;
            else
            if (!link && strcmp (e->stage, "backward") == 0)
                bwd = e;
            else
            if (link && strcmp (e->stage, "uplink") == 0)
                up = &ev[e - ev];
            else
            if (link && strcmp (e->stage, "downlink") == 0)
                down = &ev[e - ev];
            j++;
        }
        if (up) {
            if (fwd && fwd->end_s <= up->end_s)
                up->start_s = fwd->end_s;
            else
                drop[up - ev] = true;
        }
        if (down) {
            if (bwd && bwd->start_s >= down->start_s)
                down->end_s = bwd->start_s;
            else
                drop[down - ev] = true;
        }
        i = j;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (!drop[i])
            ev[kept++] = ev[i];
    nn_free (drop);
    nn_free (by);
    return kept;
}

//  A transfer's server end, now: "uplink" (activations arrived) or
//  "downlink" (gradients leave) of device's micro-batch h, an instant that
//  s_link_spans stretches to the device's end.
static void
s_link_event (srv_t *self, uint32_t device, const char *stage, const proto_header_t *h)
{
    char who[16];
    snprintf (who, sizeof who, "link:d%u", device & 0xffff);
    double now = pl_timeline_now (self->timeline);
    pl_timeline_add (self->timeline, who, stage, (int) h->epoch, (int) h->iteration,
                     (int) h->micro_batch, now, now);
}

//  self->timeline's events, transfers completed, sorted by start time, as
//  a new timeline.
static pl_timeline_t *
s_timeline_sorted (srv_t *self)
{
    size_t n = pl_timeline_count (self->timeline);
    pl_event_t *ev = nn_malloc ((n ? n : 1) * sizeof *ev);
    if (n)
        memcpy (ev, pl_timeline_events (self->timeline), n * sizeof *ev);
    n = s_link_spans (ev, n);
    qsort (ev, n, sizeof *ev, s_event_cmp);
    pl_timeline_t *sorted = pl_timeline_new (self->origin);
    for (size_t i = 0; i < n; i++)
        pl_timeline_add_event (sorted, &ev[i]);
    nn_free (ev);
    return sorted;
}

//  At each epoch end and at the finish: the events so far (the workers'
//  too), transfers completed, sorted, go to timeline.csv (the first time
//  this process writes it, a new file), and memory holds one epoch's at
//  most. Within an epoch rows are sorted by start; epochs follow in order.
static void
s_timeline_flush (srv_t *self)
{
    char err[NN_ERR_SIZE], path[1024];
    for (int i = 0; i < self->workers_count; i++) {
        pl_timeline_t *tl = s_worker_call (self, i, "TL", "TL");
        if (!tl)
            continue;
        const pl_event_t *ev = pl_timeline_events (tl);
        for (size_t k = 0; k < pl_timeline_count (tl); k++)
            pl_timeline_add_event (self->timeline, &ev[k]);
        pl_timeline_destroy (&tl);
    }
    snprintf (path, sizeof path, "%s/timeline.csv", self->results);
    pl_timeline_t *sorted = s_timeline_sorted (self);
    int wrc = pl_timeline_write_csv (sorted, path, self->timeline_written, err, sizeof err);
    pl_timeline_destroy (&sorted);
    //  Events are forgotten only once written: after a failed write they
    //  go out with the next flush's (pl_timeline_write_csv undoes a partial
    //  append), so an epoch is late in timeline.csv, never lost.
    self->timeline_pending = wrc != 0;
    if (wrc)
        pl_log_error ("%s; its %zu event(s) are kept for the next write", err,
                      pl_timeline_count (self->timeline));
    else {
        pl_timeline_clear (self->timeline);
        self->timeline_written = true;
    }
}

static void
s_finish (srv_t *self, bool summary_written)
{
    char err[NN_ERR_SIZE], path[1024];
    s_timeline_flush (self);
    snprintf (path, sizeof path, "%s/model.ckpt", self->results);
    bool written = false;
    if (!s_models_finite (self)) {
        pl_log_error ("server: the final model holds non-finite weights; %s not written",
                      path);
        self->rc = 1;
    }
    else
    if (nn_checkpoint_save (path, self->full, false, err, sizeof err)) {
        pl_log_error ("%s", err);
        self->rc = 1;
    }
    else
        written = true;
    //  Then the point after the last epoch, which tells --resume the run is
    //  done: only once model.ckpt and summary.json are written. Without it
    //  the newest checkpoint is the last round's, and --resume runs that
    //  again and writes the results (exit 1 here says so).
    if (written && summary_written) {
        self->epoch = self->cfg.epochs + 1;
        self->round_iter = 0;
        s_checkpoint (self);
        self->epoch = self->cfg.epochs;
    }
    else
        pl_log_error ("server: the results are incomplete; the run is not marked complete "
                      "(--resume runs its last round again)");
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            proto_msg_t *bye = proto_msg_new (PROTO_MSG_BYE);
            srv_send (self, &self->dev[i], &bye);
            self->dev[i].joined = false;
        }
    self->done = true;
}

//  Every device finished the epoch: evaluate, record, start the next
//  epoch or finish.
static void
s_end_epoch (srv_t *self)
{
    double wall = pl_monotonic () - self->epoch_start;
    s_merge (self);
    pl_epoch_stats_t st = { .epoch = self->epoch, .wall_s = wall };
    long samples = self->samples_seen;
    if (self->mode == PROTO_MODE_FL) {
        //  The devices trained the whole model: their STATS carry the loss.
        double loss = 0.0;
        uint64_t correct = 0, seen = 0;
        for (int i = 0; i < self->devices; i++) {
            samples += (long) self->dev[i].samples;
            loss += self->dev[i].stats.loss_sum;
            correct += self->dev[i].stats.correct;
            seen += self->dev[i].stats.samples;
        }
        st.train_loss = seen ? loss / (double) seen : 0.0;
        st.train_acc = seen ? (double) correct / (double) seen : 0.0;
    }
    else {
        st.train_loss = self->iterations ? self->loss_sum / self->iterations : 0.0;
        st.train_acc = samples ? (double) self->correct / samples : 0.0;
    }
    st.images_per_s = wall > 0 ? samples / wall : 0.0;
    double t0 = pl_monotonic ();
    s_evaluate (self, &st.test_loss, &st.test_acc);
    st.eval_s = pl_monotonic () - t0;
    cJSON *ej = pl_summary_add_epoch (self->summary, &st);
    cJSON *replans = srv_plan_take_replans (self);
    if (replans)
        cJSON_AddItemToObject (ej, "replanned_before", replans);
    double busy = 0.0;
    cJSON *server = cJSON_AddObjectToObject (ej, "server");
    cJSON *per_worker = cJSON_CreateArray ();
    for (int i = 0; i < self->workers_count; i++) {
        double *b = s_worker_call (self, i, "BUSY", "BUSY");
        cJSON_AddItemToArray (per_worker, cJSON_CreateNumber (b ? *b : 0.0));
        if (b) {
            busy += *b;
            nn_free (b);
        }
    }
    cJSON_AddNumberToObject (server, "busy_s", busy);
    cJSON_AddItemToObject (server, "worker_busy_s", per_worker);
    double idle = wall * self->workers_count - busy;
    cJSON_AddNumberToObject (server, "idle_s", idle > 0 ? idle : 0.0);
    cJSON_AddNumberToObject (server, "workers", self->workers_count);
    cJSON *devs = cJSON_AddArrayToObject (ej, "devices");
    for (int i = 0; i < self->devices; i++) {
        const proto_stats_t *s = &self->dev[i].stats;
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddNumberToObject (o, "samples", (double) self->dev[i].samples);
        cJSON_AddNumberToObject (o, "forward_s", s->forward_s);
        cJSON_AddNumberToObject (o, "backward_s", s->backward_s);
        cJSON_AddNumberToObject (o, "update_s", s->update_s);
        cJSON_AddNumberToObject (o, "idle_s", s->idle_s);
        cJSON_AddNumberToObject (o, "bytes_up", (double) s->bytes_up);
        cJSON_AddNumberToObject (o, "bytes_down", (double) s->bytes_down);
        cJSON_AddBoolToObject (o, "active", self->dev[i].active);
        if (self->mode != PROTO_MODE_FL)
            srv_plan_epoch_json (self, i, o);
        cJSON_AddItemToArray (devs, o);
        memset (&self->dev[i].stats, 0, sizeof self->dev[i].stats);
        self->dev[i].stats_in = false;
        self->dev[i].events_in = 0;
        self->dev[i].events_capped = false;
    }
    if (!self->quiet) {
        s_progress_clear (self);
        if (self->epoch == 1)
            printf ("%5s %10s %10s %10s %10s %10s %8s %8s\n", "epoch", "loss", "train_acc",
                    "test_acc", "images/s", "wall_s", "eval_s", "busy_s");
        printf ("%5d %10.4f %9.2f%% %9.2f%% %10.0f %10.2f %8.2f %8.2f\n", self->epoch,
                st.train_loss, 100.0 * st.train_acc, 100.0 * st.test_acc, st.images_per_s,
                wall, st.eval_s, busy);
        fflush (stdout);
    }
    s_timeline_flush (self);
    char err[NN_ERR_SIZE];
    bool summary_written = pl_summary_write (self->summary, self->results, err,
                                             sizeof err) == 0;
    if (!summary_written) {
        pl_log_error ("%s", err);
        self->rc = 1;
    }
    self->loss_sum = 0.0;
    self->iterations = self->samples_seen = self->correct = 0;
    if (self->epoch >= self->cfg.epochs) {
        s_finish (self, summary_written);
        return;
    }
    self->epoch++;
    self->round_iter = 0;
    //  An adaptive re-plan probes the links first and comes back here.
    if (!srv_plan_epoch_end (self))
        srv_epoch_continue (self);
}

void
srv_epoch_continue (srv_t *self)
{
    self->epoch_start = pl_monotonic ();
    s_activate_pending (self);
    if (self->mode == PROTO_MODE_SL) {
        self->sl_turn = 0;
        while (self->sl_turn < self->devices && !self->dev[self->sl_turn].active)
            self->sl_turn++;
    }
    s_checkpoint (self);
    s_round_begin (self);
}

//  dst (count) from the n slabs srcs by the run's rule (config
//  aggregation): FedAvg weighted by sample counts, or the coordinate-wise
//  trimmed mean or median (unweighted, so no claim can pull them).
static void
s_combine (const srv_t *self, float *dst, const float *const *srcs, const double *weights,
           int n, size_t count)
{
    float scratch[SRV_MAX_DEVICES];
    if (strcmp (self->cfg.aggregation, "median") == 0)
        nn_median (dst, srcs, n, count, scratch);
    else
    if (strcmp (self->cfg.aggregation, "trimmed-mean") == 0) {
        int trim = (int) (self->cfg.trim_fraction * n);
        if (2 * trim >= n)
            trim = (n - 1) / 2;
        nn_trimmed_mean (dst, srcs, n, trim, count, scratch);
    }
    else
        nn_fedavg (dst, srcs, weights, n, count);
}

//  clip_update_norm: each device's update to the device part (its PARAMS
//  less the model it was sent, which devpart still holds) is scaled to
//  that L2 norm at most, so no single device can move the model further.
static void
s_clip_updates (srv_t *self)
{
    double max_norm = self->cfg.clip_update_norm;
    if (max_norm <= 0.0 || self->mode == PROTO_MODE_SL)
        return;
    const float *ref = nn_model_weights_const (self->devpart);
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->active)
            continue;
        double norm = nn_clip_update (d->params, ref, self->dev_wcount, max_norm);
        if (norm > max_norm)
            pl_log_info ("server: device %d's update clipped from norm %.4g to %.4g "
                         "(clip_update_norm)", i, norm, max_norm);
    }
}

//  Every device sent PARAMS for this round: aggregate everything (s_combine),
//  answer MODEL (or close the epoch first when every device also sent its
//  STATS).
static void
s_aggregate (srv_t *self)
{
    const float *srcs[SRV_MAX_DEVICES];
    double weights[SRV_MAX_DEVICES];
    //  Over the devices that finished the round; a dropped device's weight
    //  goes to the others.
    bool epoch_end = true;
    int n = 0, act[SRV_MAX_DEVICES];
    uint32_t next_iter = 0;
    for (int i = 0; i < self->devices; i++) {
        if (!self->dev[i].active)
            continue;
        act[n] = i;
        srcs[n] = self->dev[i].params;
        weights[n] = (double) self->dev[i].samples;
        n++;
        self->dev[i].params_in = false;
        next_iter = self->dev[i].params_iter;
        epoch_end = epoch_end && self->dev[i].stats_in;
    }
    s_clip_updates (self);
    s_combine (self, nn_model_weights (self->devpart), srcs, weights, n, self->dev_wcount);
    if (self->mode != PROTO_MODE_FL && self->replicas_count > 1) {
        //  Every device has all its gradients, so no replica is lent out.
        const float *ws[SRV_MAX_DEVICES];
        for (int k = 0; k < n; k++) {
            const srv_replica_t *r = &self->rep[self->dev[act[k]].replica];
            assert (!r->busy && zlist_size (r->queue) == 0);
            ws[k] = nn_model_weights_const (r->model);
        }
        float *avg = nn_malloc (sizeof (float) * self->srv_wcount);
        s_combine (self, avg, ws, weights, n, self->srv_wcount);
        for (int k = 0; k < n; k++)
            memcpy (nn_model_weights (self->rep[self->dev[act[k]].replica].model), avg,
                    sizeof (float) * self->srv_wcount);
        nn_free (avg);
    }
    if (epoch_end)
        s_end_epoch (self);
    else {
        self->round_iter = next_iter;
        s_activate_pending (self);
        s_checkpoint (self);
        s_round_begin (self);
    }
}

//  After a PARAMS or a drop: close the round when every active device is
//  done with it (sl: pass the turn on, skipping devices that left).
static void
s_round_check (srv_t *self)
{
    if (self->done)
        return;
    if (self->mode == PROTO_MODE_SL) {
        if (self->sl_turn < self->devices && self->dev[self->sl_turn].active
        &&  !self->dev[self->sl_turn].params_in)
            return;
        if (self->sl_turn < self->devices)
            self->dev[self->sl_turn].params_in = false;
        do
            self->sl_turn++;
        while (self->sl_turn < self->devices && !self->dev[self->sl_turn].active);
        if (self->sl_turn < self->devices)
            s_round_begin (self);
        else
            s_end_epoch (self);
        return;
    }
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].active && !self->dev[i].params_in)
            return;
    s_aggregate (self);
}

//  ---------------------------------------------------------------------
//  Messages from devices

static void
s_on_grad (srv_t *self, proto_msg_t *grad)
{
    if (!grad) {
        pl_log_error ("server: a worker could not build GRADIENTS");
        self->rc = 1;
        self->done = true;
        return;
    }
    const proto_header_t *h = proto_msg_header (grad);
    const proto_loss_t *l = proto_msg_loss (grad);
    if (!isfinite (l->loss)) {
        //  The device's replica diverged: its gradients are not sent (the
        //  device would train on them) and it leaves the run; the others'
        //  replicas are averaged without it.
        srv_device_t *d = &self->dev[h->device_id];
        if (d->active) {
            char why[160];
            snprintf (why, sizeof why, "training diverged: the server's loss on its "
                      "micro-batch %u of epoch %u, iteration %u is %g", h->micro_batch,
                      h->epoch, h->iteration, (double) l->loss);
            s_drop_later (d, PROTO_ERR_DIVERGED, true, why);
        }
        proto_msg_destroy (&grad);
        return;
    }
    self->loss_sum += l->loss;
    self->correct += l->correct;
    self->samples_seen += l->count;
    if (proto_msg_is_last (grad))
        self->iterations++;
    srv_device_t *d = &self->dev[h->device_id];
    if (!d->active) {
        proto_msg_destroy (&grad);      //  for a session that was dropped
        return;
    }
    d->last_seen = pl_monotonic ();     //  its silence counts from its work's return
    //  The gradients leave now; s_link_spans ends the span where the device
    //  starts their backward.
    s_link_event (self, h->device_id, "downlink", h);
    srv_send (self, d, &grad);
}

void
srv_start (srv_t *self)
{
    self->started = true;
    if (!self->resumed) {
        self->epoch = 1;
        self->round_iter = 0;
    }
    self->epoch_start = pl_monotonic ();
    self->clock_wait = true;
    int lo = self->plan.slot[0].micro, hi = lo;
    for (int i = 1; i < self->devices; i++) {
        int m = self->plan.slot[i].micro;
        lo = m < lo ? m : lo;
        hi = m > hi ? m : hi;
    }
    char micro[32];
    if (lo == hi)
        snprintf (micro, sizeof micro, "%d", lo);
    else
        snprintf (micro, sizeof micro, "%d..%d", lo, hi);
    pl_log_info ("server: all %d device(s) joined; training (%s, split %d, %s "
                 "micro-batch(es), batch %d)", self->devices, self->cfg.mode, self->split,
                 micro, self->batch);
    for (int i = 0; i < self->devices; i++)
        self->dev[i].active = true;
    self->sl_turn = 0;
    if (!self->resumed)
        s_checkpoint (self);
    s_round_begin (self);
}

//  ---------------------------------------------------------------------
//  Sessions and slots
//
//  With CurveZMQ every message carries its sender's key (libzmq's
//  "User-Id", which zauth sets to the client's public key), and a slot is
//  held by one key: a HELLO from a key that already holds a slot replaces
//  that slot's session at once, so a device restarted after a crash has
//  its slot back and nothing waits for the dead connection. A key the
//  allow-list binds to a device id (docs/deploy.md) takes that slot and no
//  other, and no other key takes it. With --insecure there are no keys: a
//  HELLO asking for a joined device id takes that slot only when the old
//  connection is gone, with a warning (s_session_replace).

//  May key take slot i now? It is free, and the allow-list binds it to no
//  other key.
static bool
s_slot_free_for (const srv_t *self, int i, const char *key)
{
    if (self->dev[i].joined)
        return false;
    const char *bound = self->curve ? pl_curve_device_key (self->curve, i) : NULL;
    return !bound || strcmp (bound, key) == 0;
}

//  The slot a HELLO from key ("" with --insecure) asking for device req (-1:
//  any) takes, with *replace set when a live session holds it; -1 with the
//  reason in why.
static int
s_slot_for (const srv_t *self, const char *key, int req, bool *replace, char *why,
            size_t why_size)
{
    *replace = false;
    if (req >= self->devices)
        req = -1;                       //  as before: any free slot
    if (self->curve) {
        if (!key[0] || !pl_curve_key_allowed (self->curve, key)) {
            snprintf (why, why_size, "this device's key is not in the allow-list");
            return -1;
        }
        int bound = pl_curve_key_device (self->curve, key);
        if (bound >= self->devices || (bound >= 0 && req >= 0 && req != bound)) {
            snprintf (why, why_size, "the allow-list makes this key device %d; it asked for "
                      "device %d of %d", bound, req, self->devices);
            return -1;
        }
        if (bound >= 0) {
            *replace = self->dev[bound].joined;
            return bound;
        }
        for (int i = 0; i < self->devices; i++)
            if (self->dev[i].joined && strcmp (self->dev[i].key, key) == 0) {
                *replace = true;
                return i;
            }
    }
    else
    if (req >= 0 && self->dev[req].joined) {
        *replace = true;
        return req;
    }
    //  A free slot: the one asked for, else the one this key held last,
    //  else one no key held yet, else any.
    if (req >= 0 && s_slot_free_for (self, req, key))
        return req;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < self->devices; i++) {
            if (!s_slot_free_for (self, i, key))
                continue;
            bool last = key[0] && strcmp (self->dev[i].key, key) == 0;
            if (pass == 2 || (pass == 0 && last) || (pass == 1 && !self->dev[i].key[0]))
                return i;
        }
    snprintf (why, why_size, "run is full");
    return -1;
}

//  Is d's connection still there? A HEARTBEAT to a connection libzmq has
//  closed fails (ZMQ_ROUTER_MANDATORY); a process that died has had its
//  connection closed by its kernel.
static bool
s_session_alive (srv_t *self, srv_device_t *d)
{
    proto_msg_t *hb = proto_msg_new (PROTO_MSG_HEARTBEAT);
    if (proto_msg_send_to (&hb, self->rh, d->rid, d->rid_len) == 0)
        return true;
    int e = errno;
    proto_msg_destroy (&hb);
    return e != EHOSTUNREACH;
}

//  A new session takes over d: the old one is dropped (told why, if it
//  can still hear) as a device that left would be. With CurveZMQ the key
//  proves it is the same device. With --insecure nothing does: a slot is
//  only taken over when its connection is gone (a crashed device's), or
//  anyone could push a device out; one whose connection lingers is freed
//  by the deadlines. 0; -1 when that drop ended the run; -2 when the old
//  session stays (why says so).
static int
s_session_replace (srv_t *self, srv_device_t *d, char *why, size_t why_size)
{
    int id = (int) (d - self->dev);
    if (self->curve)
        srv_drop (self, d, PROTO_ERR_REFUSED, "replaced by a new connection with its key");
    else
    if (s_session_alive (self, d)) {
        snprintf (why, why_size, "device %d is taken by a live connection (--insecure: no "
                  "key shows this is the same device)", id);
        return -2;
    }
    else {
        pl_log_warn ("server: --insecure: device %d's connection is gone; a new HELLO asking "
                     "for its device id takes the slot", id);
        srv_drop (self, d, 0, "its connection is gone (a new connection asks for its id)");
    }
    return self->done ? -1 : 0;
}

//  After SIGHUP reloaded the allow-list: a device whose key is no longer
//  in it, or is now bound to another device id, leaves the run (at the
//  end of this reactor pass, s_drop_pending).
static void
s_drop_revoked (srv_t *self)
{
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->joined || !d->key[0])
            continue;
        int bound = pl_curve_key_device (self->curve, d->key);
        char why[160];
        if (!pl_curve_key_allowed (self->curve, d->key))
            snprintf (why, sizeof why, "its key was removed from the allow-list (SIGHUP)");
        else
        if (bound >= 0 && bound != i)
            snprintf (why, sizeof why, "the allow-list now makes its key device %d (SIGHUP)",
                      bound);
        else
            continue;
        s_drop_later (d, PROTO_ERR_REFUSED, false, why);
    }
}

static void
s_on_hello (srv_t *self, proto_msg_t *msg, const uint8_t *rid, size_t rid_len,
            const char *key)
{
    const proto_hello_t *hello = proto_msg_hello (msg);
    uint32_t need = self->mode == PROTO_MODE_FL ? PROTO_CAP_FL : PROTO_CAP_SPLIT;
    if (!(hello->capabilities & need)) {
        s_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED,
                         "capability missing for this run's mode");
        return;
    }
    //  Before the start any free slot; once running, a slot whose device was
    //  dropped (a restarted or reconnecting device rejoins there).
    char why[160];
    bool replace;
    int id = s_slot_for (self, key, hello->requested_device_id, &replace, why, sizeof why);
    if (id < 0) {
        pl_log_warn ("server: HELLO (%s) refused: %s", hello->name, why);
        s_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED, why);
        return;
    }
    srv_device_t *d = &self->dev[id];
    int replaced = replace ? s_session_replace (self, d, why, sizeof why) : 0;
    if (replaced) {
        if (replaced == -2)
            pl_log_warn ("server: HELLO (%s) refused: %s", hello->name, why);
        s_send_error_to (self, rid, rid_len, PROTO_ERR_REFUSED,
                         replaced == -2 ? why : "the run has ended");
        return;
    }
    float *params = d->params;          //  kept across sessions of the slot
    memset (d, 0, sizeof *d);
    d->params = params;
    //  An allowed key is PL_CURVE_KEY_TEXT characters (s_slot_for).
    size_t key_len = strnlen (key, PL_CURVE_KEY_TEXT);
    memcpy (d->key, key, key_len);
    d->key[key_len] = 0;
    d->joined = true;
    d->last_seen = pl_monotonic ();
    memcpy (d->rid, rid, rid_len);
    d->rid_len = rid_len;
    d->state = proto_state_next (PROTO_STATE_CONNECTING, PROTO_MSG_HELLO, PROTO_UP);
    d->replica = self->mode == PROTO_MODE_SL ? 0 : id;
    if (!d->params)
        d->params = nn_malloc (sizeof (float) * self->dev_wcount);
    self->joined++;
    srv_plan_on_join (self, d);

    proto_msg_t *w = proto_msg_new (PROTO_MSG_WELCOME);
    proto_msg_set_route (w, (uint32_t) id, 0, 0, 0);
    cJSON *json = pl_config_to_json (&self->cfg);
    char *text = json ? cJSON_PrintUnformatted (json) : NULL;
    cJSON_Delete (json);
    if (!text || proto_msg_set_config (w, text, strlen (text))) {
        pl_log_error ("server: cannot encode the config for WELCOME");
        free (text);
        proto_msg_destroy (&w);
        srv_drop (self, d, PROTO_ERR_STATE, "internal error");
        return;
    }
    free (text);
    proto_plan_t plan = { .device_id = (uint32_t) id,
                          .split_point = self->mode == PROTO_MODE_FL ? 0
                                                                     : (uint32_t) self->split,
                          .micro_batches = (uint32_t) d->micro,
                          .batch_size = (uint32_t) self->batch,
                          .devices = (uint32_t) self->devices,
                          .mode = (uint32_t) self->mode, .shard_begin = 0,
                          .shard_count = 0, .seed = self->cfg.seed,
                          .origin_s = self->origin };
    proto_msg_set_plan (w, &plan);
    proto_msg_set_profile_request (w, srv_plan_profile_wanted (self));
    srv_send (self, d, &w);
    if (self->started) {
        pl_log_info ("server: device %d joined the running run (%s); it takes part from "
                     "the next aggregation point", id, hello->name);
        return;
    }
    pl_log_info ("server: device %d joined (%s)", id, hello->name);
    srv_plan_maybe_start (self);
}

//  The iteration this round's PARAMS must close: the next aggregation
//  point, or the epoch's end (the devices' rule in cli_main.c's s_train).
//  0 when the iterations per epoch are unknown.
static uint32_t
s_round_end (const srv_t *self)
{
    if (self->epoch_iterations <= 0)
        return 0;
    uint32_t end = (uint32_t) self->epoch_iterations;
    int agg = self->cfg.aggregation_frequency;
    if (self->mode != PROTO_MODE_SL && agg > 0 && self->round_iter + (uint32_t) agg < end)
        end = self->round_iter + (uint32_t) agg;
    return end;
}

//  A PARAMS checked against what the server knows, before any of it is
//  kept: the round's end iteration (a device cannot move the run's round
//  position), a sample count within the device's shard (it weighs the
//  average), finite weights. 0, or -1 with why filled.
static int
s_params_check (const srv_t *self, const srv_device_t *d, const proto_msg_t *msg,
                char *why, size_t why_size)
{
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    const proto_slab_t *slab = proto_msg_slab (msg);
    uint32_t end = s_round_end (self);
    int agg = self->cfg.aggregation_frequency;
    if (end ? h->iteration != end
            : h->iteration <= self->round_iter || h->iteration > INT32_MAX
              || (agg > 0 && self->mode != PROTO_MODE_SL
                  && h->iteration > self->round_iter + (uint32_t) agg)) {
        snprintf (why, why_size, "PARAMS closes iteration %u; this round began at "
                  "iteration %u and ends at %u", h->iteration, self->round_iter, end);
        return -1;
    }
    if (!end)
        //  Unknown iterations: the devices of a round must at least agree.
        for (int i = 0; i < self->devices; i++)
            if (self->dev[i].active && self->dev[i].params_in
            &&  self->dev[i].params_iter != h->iteration) {
                snprintf (why, why_size, "PARAMS closes iteration %u; device %d closed "
                          "this round at %u", h->iteration, i, self->dev[i].params_iter);
                return -1;
            }
    uint64_t cap = self->shard_size[id] > 0 ? (uint64_t) self->shard_size[id]
                 : self->cfg.samples > 0 ? (uint64_t) self->cfg.samples : INT32_MAX;
    if (slab->sample_count == 0 || slab->sample_count > cap) {
        snprintf (why, why_size, "PARAMS claims %" PRIu64 " samples; device %d's shard "
                  "holds %" PRIu64, slab->sample_count, id, cap);
        return -1;
    }
    const float *w = proto_msg_tensor_data (msg);
    size_t bad = s_first_nonfinite (w, self->dev_wcount);
    if (bad < self->dev_wcount) {
        snprintf (why, why_size, "PARAMS holds non-finite weights (weight %zu is %g)", bad,
                  (double) w[bad]);
        return -1;
    }
    return 0;
}

static void
s_on_params (srv_t *self, srv_device_t *d, proto_msg_t *msg)
{
    const proto_slab_t *slab = proto_msg_slab (msg);
    const proto_header_t *h = proto_msg_header (msg);
    if (slab->unit_begin != 0 || slab->unit_end != (uint32_t) nn_model_unit_end (self->devpart)
    ||  h->epoch != (uint32_t) self->epoch || d->params_in || !d->active) {
        s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE,
                         "PARAMS for the wrong units, epoch or round");
        srv_drop (self, d, 0, "unexpected PARAMS");
        return;
    }
    //  A device sends PARAMS once all its gradients came back; with its
    //  micro-batches still queued or in a worker the round cannot close.
    if (self->mode != PROTO_MODE_FL
    &&  (self->rep[d->replica].busy || zlist_size (self->rep[d->replica].queue))) {
        s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE,
                         "PARAMS before the gradients of all ACTIVATIONS");
        srv_drop (self, d, 0, "PARAMS with ACTIVATIONS pending");
        return;
    }
    if (self->mode == PROTO_MODE_SL && (int) (d - self->dev) != self->sl_turn) {
        s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE, "not your turn");
        srv_drop (self, d, 0, "PARAMS out of turn");
        return;
    }
    char why[256];
    if (s_params_check (self, d, msg, why, sizeof why)) {
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    memcpy (d->params, proto_msg_tensor_data (msg), sizeof (float) * self->dev_wcount);
    d->samples = slab->sample_count;
    d->params_iter = h->iteration;
    d->params_in = true;
    if (self->mode == PROTO_MODE_SL)
        //  sl hands the device part on as it is: no averaging.
        memcpy (nn_model_weights (self->devpart), d->params,
                sizeof (float) * self->dev_wcount);
    s_round_check (self);
}

//  A device's stage events for the current epoch: checked beyond what proto
//  checks (epoch, indices, order with STATS) and merged into the timeline
//  as "deviceN". 0, or -1 with why filled (the caller drops the device).
static int
s_on_events (srv_t *self, srv_device_t *d, const proto_msg_t *msg, char *why,
             size_t why_size)
{
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    size_t count = 0;
    const proto_event_t *ev = proto_msg_events (msg, &count);
    if (h->epoch != (uint32_t) self->epoch) {
        snprintf (why, why_size, "EVENTS for epoch %u; the run is in epoch %d", h->epoch,
                  self->epoch);
        return -1;
    }
    if (d->stats_in) {
        snprintf (why, why_size, "EVENTS after this epoch's STATS (send them before)");
        return -1;
    }
    //  Check every record before keeping any: all or nothing.
    for (size_t i = 0; i < count; i++) {
        const proto_event_t *e = &ev[i];
        bool micro_ok = e->micro_batch == PROTO_EVENT_NONE
                     || e->micro_batch < (uint32_t) d->micro;
        bool iter_ok = e->iteration == PROTO_EVENT_NONE || e->iteration <= INT32_MAX;
        if (e->epoch != h->epoch || !micro_ok || !iter_ok) {
            snprintf (why, why_size, "EVENTS: event %zu: epoch %u, iteration %u, "
                      "micro-batch %u do not fit epoch %u with %d micro-batch(es)", i,
                      e->epoch, e->iteration, e->micro_batch, h->epoch, d->micro);
            return -1;
        }
    }
    size_t room = SRV_MAX_EVENTS - d->events_in;
    if (count > room) {
        if (!d->events_capped)
            pl_log_warn ("server: device %d sent more than %d events in epoch %d; the rest "
                         "are left out of timeline.csv", id, SRV_MAX_EVENTS, self->epoch);
        d->events_capped = true;
        count = room;
    }
    d->events_in += count;
    char who[16];
    snprintf (who, sizeof who, "device%d", id & 0xffff);
    for (size_t i = 0; i < count; i++) {
        const proto_event_t *e = &ev[i];
        pl_timeline_add (self->timeline, who, proto_stage_name ((int) e->stage),
                         (int) e->epoch,
                         e->iteration == PROTO_EVENT_NONE ? -1 : (int) e->iteration,
                         e->micro_batch == PROTO_EVENT_NONE ? -1 : (int) e->micro_batch,
                         e->start_s, e->end_s);
    }
    return 0;
}

//  Peers that are not devices of the run and keep earning ERRORs (garbage,
//  refused HELLOs, messages before HELLO) are ignored for a while, by IP
//  address: no reply, no log line, so a flood costs the server a receive
//  and a decode per message and nothing more. Joined devices are exempt.
static srv_abuse_t *
s_abuse_slot (srv_t *self, const char *peer, bool create)
{
    srv_abuse_t *oldest = &self->abuse[0];
    for (int i = 0; i < SRV_ABUSE_SLOTS; i++) {
        srv_abuse_t *a = &self->abuse[i];
        if (a->addr[0] && strcmp (a->addr, peer) == 0)
            return a;
        if (a->window_start < oldest->window_start)
            oldest = a;
    }
    if (!create)
        return NULL;
    memset (oldest, 0, sizeof *oldest);
    snprintf (oldest->addr, sizeof oldest->addr, "%s", peer);
    return oldest;
}

static bool
s_abuse_blocked (srv_t *self, const char *peer)
{
    if (!peer[0])
        return false;
    const srv_abuse_t *a = s_abuse_slot (self, peer, false);
    return a && pl_monotonic () < a->blocked_until;
}

static void
s_abuse_note (srv_t *self, const char *peer)
{
    if (!peer[0])
        return;                         //  inproc: no address to hold against
    srv_abuse_t *a = s_abuse_slot (self, peer, true);
    double now = pl_monotonic ();
    if (now - a->window_start > SRV_ABUSE_WINDOW_S) {
        a->window_start = now;
        a->count = 0;
    }
    if (++a->count > SRV_ABUSE_LIMIT && now >= a->blocked_until) {
        a->blocked_until = now + SRV_ABUSE_BLOCK_S;
        pl_log_warn ("server: rate-limiting %s: %d protocol errors in %.0f s; ignoring its "
                     "unjoined connections for %.0f s", peer, a->count, SRV_ABUSE_WINDOW_S,
                     SRV_ABUSE_BLOCK_S);
    }
}

static void
s_on_router (srv_t *self)
{
    proto_msg_t *msg = NULL;
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len = 0;
    char err[NN_ERR_SIZE];
    proto_peer_t peer;
    int rc = proto_msg_recv_from_peer (&msg, self->rh, rid, &rid_len, &peer, &self->limits,
                                       err, sizeof err);
    if (rc == PROTO_E_AGAIN)
        return;
    if (rc == PROTO_E_SOCKET) {
        pl_log_error ("server: receive failed: %s", zmq_strerror (errno));
        return;
    }
    srv_device_t *d = rid_len ? s_find (self, rid, rid_len) : NULL;
    if (!d && s_abuse_blocked (self, peer.address)) {
        proto_msg_destroy (&msg);
        return;
    }
    if (rc != 0 && !d) {
        s_abuse_note (self, peer.address);
        srv_metrics_note_refused (self->metrics, SRV_REFUSED_MALFORMED);
    }
    if (rc != 0) {
        pl_log_warn ("server: malformed message from %s: %s",
                     d ? "a device" : "an unknown peer", err);
        if (rid_len)
            s_send_error_to (self, rid, rid_len,
                             rc == PROTO_E_VERSION ? PROTO_ERR_VERSION
                                                   : PROTO_ERR_MALFORMED, err);
        if (d)
            srv_drop (self, d, 0, "sent a malformed message");
        return;
    }
    int type = proto_msg_type (msg);
    if (d)
        d->last_seen = pl_monotonic ();
    if (!d) {
        if (type == PROTO_MSG_HELLO)
            s_on_hello (self, msg, rid, rid_len, peer.user_id);
        else {
            pl_log_warn ("server: %s from an unknown peer; answered ERROR",
                         proto_type_name (type));
            s_send_error_to (self, rid, rid_len, PROTO_ERR_STATE,
                             "send HELLO first");
        }
        if (!s_find (self, rid, rid_len)) {
            s_abuse_note (self, peer.address);  //  refused or out of order
            srv_metrics_note_refused (self->metrics, SRV_REFUSED_HELLO);
        }
        proto_msg_destroy (&msg);
        return;
    }
    if (!proto_msg_allowed (self->mode, d->state, msg, PROTO_UP)) {
        char text[128];
        snprintf (text, sizeof text, "%s not allowed in this state", proto_type_name (type));
        s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE, text);
        proto_msg_destroy (&msg);
        srv_drop (self, d, 0, text);
        return;
    }
    int id = (int) (d - self->dev);
    //  A device is ready to train once it has loaded its shard and built
    //  its contexts: it says so with a HEARTBEAT, and any training message
    //  implies it. The first epoch's clock starts at the first ready
    //  device, so the devices' loading is not epoch time (as the trainer's
    //  wall_s leaves out its own loading).
    if (self->clock_wait && self->started
    &&  (type == PROTO_MSG_HEARTBEAT || type == PROTO_MSG_ACTIVATIONS
    ||   type == PROTO_MSG_PARAMS || type == PROTO_MSG_STATS || type == PROTO_MSG_EVENTS)) {
        self->epoch_start = pl_monotonic ();
        self->clock_wait = false;
    }
    switch (type) {
        case PROTO_MSG_ACTIVATIONS: {
            const proto_header_t *h = proto_msg_header (msg);
            if (h->epoch != (uint32_t) self->epoch
            ||  (self->mode == PROTO_MODE_SL && id != self->sl_turn)) {
                s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE,
                                 "ACTIVATIONS for another epoch or out of turn");
                proto_msg_destroy (&msg);
                srv_drop (self, d, 0, "unexpected ACTIVATIONS");
                return;
            }
            //  A device has at most N micro-batches out before it waits for
            //  their gradients; more is a broken or hostile peer.
            srv_replica_t *r = &self->rep[d->replica];
            if (proto_msg_tensor (msg)->dims[0] != (uint32_t) (self->batch / d->micro)) {
                char text[128];
                snprintf (text, sizeof text, "ACTIVATIONS of %u samples; this device's plan "
                          "has micro-batches of %d", proto_msg_tensor (msg)->dims[0],
                          self->batch / d->micro);
                s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE, text);
                proto_msg_destroy (&msg);
                srv_drop (self, d, 0, text);
                return;
            }
            if (zlist_size (r->queue) >= (size_t) d->micro) {
                s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE,
                                 "more ACTIVATIONS in flight than micro-batches");
                proto_msg_destroy (&msg);
                srv_drop (self, d, 0, "ACTIVATIONS flood");
                return;
            }
            //  A replica trained on non-finite activations turns non-finite,
            //  and the average of the replicas with it (labels are checked
            //  against the classes by proto).
            size_t acount = proto_msg_tensor_count (msg);
            size_t bad = s_first_nonfinite (proto_msg_tensor_data (msg), acount);
            if (bad < acount) {
                char text[128];
                snprintf (text, sizeof text, "ACTIVATIONS hold non-finite values (value "
                          "%zu is %g)", bad, (double) proto_msg_tensor_data (msg)[bad]);
                proto_msg_destroy (&msg);
                srv_drop (self, d, PROTO_ERR_STATE, text);
                return;
            }
            srv_plan_on_activations (self, d, msg);
            if (self->mode != PROTO_MODE_FL) {
                //  Arrived now; s_link_spans starts the span where the
                //  device's forward of this micro-batch ended.
                s_link_event (self, (uint32_t) id, "uplink", h);
            }
            //  The worker routes GRADIENTS by the header's device id.
            proto_msg_set_route (msg, (uint32_t) id, h->epoch, h->iteration, h->micro_batch);
            zlist_append (r->queue, msg);
            s_dispatch (self);
            return;
        }
        case PROTO_MSG_PARAMS:
            s_on_params (self, d, msg);
            break;
        case PROTO_MSG_STATS:
            d->stats = *proto_msg_stats (msg);
            d->stats_in = true;
            break;
        case PROTO_MSG_EVENTS: {
            char why[256];
            if (s_on_events (self, d, msg, why, sizeof why)) {
                s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE, why);
                srv_drop (self, d, 0, why);
            }
            break;
        }
        case PROTO_MSG_HEARTBEAT:
            break;
        case PROTO_MSG_PROFILE:
            srv_plan_on_profile (self, d, msg);
            break;
        case PROTO_MSG_PROBE:
            srv_plan_on_probe (self, d, msg);
            break;
        case PROTO_MSG_BYE:
            srv_drop (self, d, 0, "left (BYE)");
            break;
        case PROTO_MSG_ERROR: {
            char why[PROTO_TEXT_MAX + 64];
            bool diverged = proto_msg_error_code (msg) == PROTO_ERR_DIVERGED;
            snprintf (why, sizeof why, "%s: %s", diverged ? "training diverged on the device"
                                                          : "sent ERROR",
                      proto_msg_error_text (msg));
            self->diverging = diverged;
            srv_drop (self, d, 0, why);
            break;
        }
        default:
            s_send_error_to (self, d->rid, d->rid_len, PROTO_ERR_STATE,
                             "message type not used by this server");
            srv_drop (self, d, 0, "unexpected message type");
            break;
    }
    proto_msg_destroy (&msg);
}

static void
s_on_worker (srv_t *self, zactor_t *w)
{
    char *tag = NULL;
    void *ptr = NULL;
    if (zsock_recv (w, "sp", &tag, &ptr) || !tag)
        return;
    int i = s_worker_index (self, w);
    if (streq (tag, "GRAD") && i >= 0)
        s_on_worker_grad (self, i, ptr);
    else
        pl_log_error ("server: unexpected worker reply \"%s\" (bug)", tag);
    zstr_free (&tag);
}

//  One self-overwriting line on a terminal while an epoch trains.
static void
s_progress (srv_t *self)
{
    double now = pl_monotonic ();
    if (!self->tty || self->quiet || now - self->last_progress < 0.5)
        return;
    self->last_progress = now;
    double wall = now - self->epoch_start;
    long images = self->samples_seen;
    double loss = self->iterations ? self->loss_sum / self->iterations : 0.0;
    if (self->mode == PROTO_MODE_FL)
        printf ("\r\033[Kepoch %d/%d  %.1f s  (fl: devices train locally)", self->epoch,
                self->cfg.epochs, wall);
    else
        printf ("\r\033[Kepoch %d/%d  %ld iterations  %ld images  loss %.4f  %.0f images/s"
                "  %.1f s", self->epoch, self->cfg.epochs, self->iterations, images, loss,
                wall > 0 ? images / wall : 0.0, wall);
    fflush (stdout);
    self->progress_shown = true;
}

static void
s_progress_clear (srv_t *self)
{
    if (self->progress_shown) {
        printf ("\r\033[K");
        self->progress_shown = false;
    }
}

//  Drop devices that hold up the round: silent for device_timeout_s while
//  they should be sending activations (split modes; an fl device trains on
//  its own), or not done with the round round_timeout_s after it began.
static void
s_check_deadlines (srv_t *self)
{
    double now = pl_monotonic ();
    for (int i = 0; i < self->devices && !self->done; i++) {
        srv_device_t *d = &self->dev[i];
        if (!d->active || d->params_in)
            continue;
        if (self->mode == PROTO_MODE_SL && i != self->sl_turn)
            continue;
        //  Waiting for the server's own work is not silence.
        const srv_replica_t *r = self->mode != PROTO_MODE_FL ? &self->rep[d->replica] : NULL;
        if (r && (r->busy || zlist_size (r->queue)))
            continue;
        char why[160];
        if (self->mode != PROTO_MODE_FL && now - d->last_seen > self->cfg.device_timeout_s) {
            snprintf (why, sizeof why, "silent for %.1f s (device_timeout_s %g)",
                      now - d->last_seen, self->cfg.device_timeout_s);
            srv_drop (self, d, PROTO_ERR_TIMEOUT, why);
        }
        else
        if (now - self->round_start > self->cfg.round_timeout_s) {
            snprintf (why, sizeof why, "round not finished after %.1f s (round_timeout_s %g)",
                      now - self->round_start, self->cfg.round_timeout_s);
            srv_drop (self, d, PROTO_ERR_TIMEOUT, why);
        }
    }
}

static void
s_heartbeat (srv_t *self)
{
    double now = pl_monotonic ();
    if (now - self->last_heartbeat < self->cfg.heartbeat_s)
        return;
    self->last_heartbeat = now;
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            proto_msg_t *hb = proto_msg_new (PROTO_MSG_HEARTBEAT);
            srv_send (self, &self->dev[i], &hb);
        }
}

//  ---------------------------------------------------------------------

int
srv_max_micro_batch (const srv_t *self)
{
    int lo = self->plan.slot[0].micro;
    for (int i = 1; i < self->devices; i++)
        lo = self->plan.slot[i].micro < lo ? self->plan.slot[i].micro : lo;
    return self->batch / (lo > 0 ? lo : 1);
}

//  The compute pool for the current split and largest micro-batch.
static int
s_workers_start (srv_t *self)
{
    const pl_config_t *cfg = &self->cfg;
    //  One worker per core: more would only oversubscribe the host
    //  (OpenBLAS runs one thread inside each worker).
    self->workers_count = srv_workers_for (self);
    if (!self->bufpool)                 //  two GRADIENTS in flight per device
        self->bufpool = srv_bufpool_new (2 * self->devices + 2);
    for (int i = 0; i < self->workers_count; i++) {
        srv_worker_args_t wa = {
            .spec = &self->spec, .unit_begin = self->split, .max_batch = self->worker_batch,
            .batch_size = self->batch,
            .sgd = { (float) cfg->learning_rate, (float) cfg->momentum,
                     (float) cfg->weight_decay },
            .origin = self->origin, .replica = self->rep[0].model,
            .shared_replica = self->mode == PROTO_MODE_SL,
            .bufpool = self->bufpool
        };
        self->worker_rep[i] = -1;
        self->workers[i] = zactor_new (srv_worker_actor, &wa);
        if (!self->workers[i]) {
            pl_log_error ("server: cannot start worker %d", i);
            return -1;
        }
        if (self->poller)
            zpoller_add (self->poller, self->workers[i]);
    }
    return 0;
}

//  Stop the (idle) workers, keeping their timeline events.
static void
s_workers_stop (srv_t *self)
{
    for (int i = 0; i < self->workers_count; i++) {
        pl_timeline_t *tl = s_worker_call (self, i, "TL", "TL");
        if (tl) {
            const pl_event_t *ev = pl_timeline_events (tl);
            for (size_t k = 0; k < pl_timeline_count (tl); k++)
                pl_timeline_add_event (self->timeline, &ev[k]);
            pl_timeline_destroy (&tl);
        }
        if (self->poller)
            zpoller_remove (self->poller, self->workers[i]);
        zactor_destroy (&self->workers[i]);
    }
    self->workers_count = 0;
}

int
srv_workers_restart (srv_t *self)
{
    if (self->mode == PROTO_MODE_FL)
        return 0;
    int mb = srv_max_micro_batch (self);
    self->limits.max_batch = (uint32_t) mb;
    if (mb <= self->worker_batch)
        return 0;
    //  Called between rounds: every replica is home, no step in flight.
    s_workers_stop (self);
    self->worker_batch = mb;
    return s_workers_start (self);
}

int
srv_resplit (srv_t *self, int split_point)
{
    char err[NN_ERR_SIZE];
    s_merge (self);
    s_workers_stop (self);
    nn_model_t *devpart = nn_model_new (&self->spec, 0, split_point, 1, err, sizeof err);
    if (!devpart) {
        pl_log_error ("server: re-split: %s", err);
        return -1;
    }
    nn_model_copy_tensors (devpart, self->full);
    nn_model_destroy (&self->devpart);
    self->devpart = devpart;
    self->split = split_point;
    self->cfg.split_point = split_point;
    self->dev_wcount = nn_model_weights_count (devpart);
    for (int i = 0; i < self->replicas_count; i++) {
        srv_replica_t *r = &self->rep[i];
        assert (!r->busy && zlist_size (r->queue) == 0);
        nn_model_destroy (&r->model);
        //  Weights from the merged model; momentum starts again at 0.
        r->model = nn_model_new (&self->spec, split_point, self->units, 1, err, sizeof err);
        if (!r->model) {
            pl_log_error ("server: re-split: %s", err);
            return -1;
        }
        nn_model_copy_tensors (r->model, self->full);
    }
    self->srv_wcount = nn_model_weights_count (self->rep[0].model);
    for (int i = 0; i < SRV_MAX_DEVICES; i++) {
        nn_free (self->dev[i].params);
        self->dev[i].params = self->dev[i].joined
                            ? nn_malloc (sizeof (float) * self->dev_wcount) : NULL;
    }
    nn_shape_t s = nn_model_output_shape (devpart);
    self->limits.slab_count = self->dev_wcount;
    self->limits.h = (uint32_t) s.h;
    self->limits.w = (uint32_t) s.w;
    self->limits.c = (uint32_t) s.c;
    self->worker_batch = srv_max_micro_batch (self);
    self->limits.max_batch = (uint32_t) self->worker_batch;
    return s_workers_start (self);
}

//  Worker threads for the run: one per core (config threads, 0 = all),
//  at most one per replica.
int
srv_workers_for (const srv_t *self)
{
    int cores = self->cfg.threads > 0 ? self->cfg.threads
                                      : (int) sysconf (_SC_NPROCESSORS_ONLN);
    int replicas = self->mode == PROTO_MODE_SL ? 1 : self->devices;
    if (cores < 1)
        cores = 1;
    return cores < replicas ? cores : replicas;
}

//  The largest legitimate frame of this run. When the planner may re-plan
//  (a lower N, another split point), the largest any plan can send: the
//  socket limit applies to connections already made.
static size_t
s_frame_limit (const srv_t *self)
{
    size_t bytes = proto_limits_frame_bytes (&self->limits, self->mode != PROTO_MODE_FL);
    if (!self->plan.auto_split && !self->plan.auto_micro)
        return bytes;
    proto_limits_t any = self->limits;
    any.max_batch = (uint32_t) self->batch;
    any.slab_count = nn_model_weights_count (self->full);
    for (int u = 0; u + 1 < self->units; u++) {
        nn_shape_t s = nn_model_spec_unit_output (&self->spec, u);
        any.h = (uint32_t) s.h;
        any.w = (uint32_t) s.w;
        any.c = (uint32_t) s.c;
        size_t b = proto_limits_frame_bytes (&any, true);
        bytes = b > bytes ? b : bytes;
    }
    return bytes;
}

//  Shard sizes as every device computes them (cli_main.c's s_select_shard:
//  the seed's stream 2000, devices in order), from the training set's
//  labels. A select callback sees the labels before any image is read; it
//  counts and stops the load there.
typedef struct {
    const pl_config_t *cfg;
    int *sizes;                 //  cfg->devices
    bool counted;
} s_shard_count_t;

static int *
s_shard_count (const nn_dataset_t *unloaded, int *count_out, void *arg, char *err,
               size_t err_size)
{
    s_shard_count_t *sc = arg;
    const pl_config_t *cfg = sc->cfg;
    nn_rng_t rng;
    nn_rng_seed (&rng, cfg->seed);
    nn_rng_t shard_rng = nn_rng_split (&rng, 2000);
    for (int d = 0; d < cfg->devices; d++) {
        int count = 0;
        int *s = nn_dataset_shard (unloaded, cfg->partition, cfg->devices, d, cfg->samples,
                                   cfg->dirichlet_alpha, &shard_rng, &count, err, err_size);
        if (!s)
            return NULL;
        nn_free (s);
        sc->sizes[d] = count;
    }
    sc->counted = true;
    *count_out = 0;
    snprintf (err, err_size, "counted");
    return NULL;                        //  stops the load: the sizes are all we need
}

//  self->shard_size and self->epoch_iterations; left 0 (weaker checks, one
//  warning) when the server cannot read the training set.
static void
s_shards_compute (srv_t *self)
{
    const pl_config_t *cfg = &self->cfg;
    char err[NN_ERR_SIZE];
    s_shard_count_t sc = { .cfg = cfg, .sizes = self->shard_size };
    const char *dir = cfg->data_dir[0] ? cfg->data_dir : NULL;
    nn_dataset_t *none = nn_dataset_load_named_select (cfg->dataset, dir, true, cfg->samples,
                                                       s_shard_count, &sc, err, sizeof err);
    nn_dataset_destroy (&none);
    int largest = 0;
    for (int d = 0; sc.counted && d < cfg->devices; d++)
        largest = self->shard_size[d] > largest ? self->shard_size[d] : largest;
    if (!sc.counted || largest == 0) {
        memset (self->shard_size, 0, sizeof self->shard_size);
        pl_log_warn ("server: cannot compute the devices' shard sizes (%s): updates are "
                     "checked against weaker bounds (sample_count <= samples, iterations "
                     "within the round)", err);
        return;
    }
    self->epoch_iterations = (largest + self->batch - 1) / self->batch;
}

static int
s_setup (srv_t *self, const s_args_t *args)
{
    char err[NN_ERR_SIZE];
    pl_config_t *cfg = &self->cfg;
    self->mode = (proto_mode_t) proto_mode_from_name (cfg->mode);
    self->batch = cfg->batch_size;
    self->devices = cfg->devices;
    const char *dir = cfg->data_dir[0] ? cfg->data_dir : NULL;
    self->test = nn_dataset_load_named (cfg->dataset, dir, false, cfg->test_samples, err,
                                        sizeof err);
    if (!self->test) {
        pl_log_error ("%s", err);
        return -1;
    }
    if (nn_model_spec_by_name (&self->spec, cfg->model, self->test->c, self->test->h,
                               self->test->w, self->test->classes, err, sizeof err)) {
        pl_log_error ("config: model: %s", err);
        return -1;
    }
    s_shards_compute (self);
    self->units = self->spec.units_count;
    bool pipelearn = self->mode == PROTO_MODE_PIPELEARN;
    if (self->mode != PROTO_MODE_FL
    &&  (cfg->split_point == PL_AUTO || (pipelearn && cfg->micro_batches == PL_AUTO))
    &&  srv_plan_setup (self))
        return -1;
    self->micro = pipelearn ? cfg->micro_batches : 1;
    self->split = self->mode == PROTO_MODE_FL ? self->units : cfg->split_point;
    for (int i = 0; i < SRV_MAX_DEVICES; i++)
        self->plan.slot[i].micro = self->micro;
    nn_model_spec_hash (&self->spec, self->spec_hash);
    int mb = srv_max_micro_batch (self);
    self->devpart = nn_model_new (&self->spec, 0, self->split, 1, err, sizeof err);
    //  The merged model is only evaluated: a small batch keeps its
    //  activation memory (which nn_model sizes for training) a few MiB
    //  instead of ~45 MiB at batch 100, at no cost in accuracy (evaluation
    //  of 10000 images takes about as long at batch 8 as at 100).
    self->eval_batch = self->batch < SRV_EVAL_BATCH ? self->batch : SRV_EVAL_BATCH;
    self->full = self->devpart ? nn_model_new (&self->spec, 0, self->units,
                                               self->eval_batch, err, sizeof err) : NULL;
    if (!self->full) {
        pl_log_error ("%s", err);
        return -1;
    }
    nn_rng_t rng;
    nn_rng_seed (&rng, cfg->seed);
    nn_model_init (self->devpart, &rng);
    nn_model_init (self->full, &rng);
    self->dev_wcount = nn_model_weights_count (self->devpart);

    self->limits.max_batch = (uint32_t) mb;
    self->worker_batch = mb;
    self->limits.classes = (uint32_t) self->spec.classes;
    self->limits.slab_count = self->dev_wcount;
    self->limits.spec_hash = self->spec_hash;
    if (self->mode != PROTO_MODE_FL) {
        nn_shape_t s = nn_model_output_shape (self->devpart);
        self->limits.h = (uint32_t) s.h;
        self->limits.w = (uint32_t) s.w;
        self->limits.c = (uint32_t) s.c;
        //  Replicas start equal (same seed): FedAvg of equal models is the
        //  model, and sfl with one device equals the single-process trainer.
        self->replicas_count = self->mode == PROTO_MODE_SL ? 1 : self->devices;
        for (int i = 0; i < self->replicas_count; i++) {
            srv_replica_t *r = &self->rep[i];
            r->model = nn_model_new (&self->spec, self->split, self->units, 1, err,
                                     sizeof err);
            if (!r->model) {
                pl_log_error ("%s", err);
                return -1;
            }
            nn_rng_t rrng;
            nn_rng_seed (&rrng, cfg->seed);
            nn_model_init (r->model, &rrng);
            r->queue = zlist_new ();
        }
        self->srv_wcount = nn_model_weights_count (self->rep[0].model);
        //  One worker per core: more would only oversubscribe the host
        //  (OpenBLAS runs one thread inside each worker).
        self->workers_count = srv_workers_for (self);
        if (s_workers_start (self))
            return -1;
    }
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->router) {
        pl_log_error ("server: cannot create the ROUTER socket");
        return -1;
    }
    self->rh = zsock_resolve (self->router);
    zsock_set_linger (self->router, 2000);
    //  Sends never block and never vanish: a message for a device whose
    //  queue is full (ZMQ_SNDHWM) or that is gone fails (EAGAIN,
    //  EHOSTUNREACH) and srv_send drops that device.
    zsock_set_router_mandatory (self->router, 1);
    zsock_set_sndhwm (self->router, s_send_hwm (self));
    zsock_set_sndtimeo (self->router, 0);
    //  ZMTP heartbeats: libzmq pings every connection and closes one whose
    //  peer stays silent past the timeout (a dead device's TCP connection is
    //  not kept open forever; NATs see traffic). The training protocol's
    //  own deadlines (device_timeout_s, round_timeout_s) decide about the
    //  run; the devices set the same on their side (--heartbeat).
    zsock_set_heartbeat_ivl (self->router, (int) (cfg->heartbeat_s * 1000.0));
    zsock_set_heartbeat_timeout (self->router, (int) (cfg->heartbeat_timeout_s * 1000.0));
    //  libzmq accepts a connection before its handshake: one that never
    //  sends a greeting (anyone who can reach the port, no key needed)
    //  holds a file descriptor until this closes it.
    zsock_set_handshake_ivl (self->router, (int) (cfg->handshake_timeout_s * 1000.0));
    //  No legitimate frame is bigger than this run's largest tensor, slab
    //  or EVENTS frame: libzmq drops a peer that announces more before
    //  buffering it (a few MiB here instead of the protocol's 256 MiB cap).
    self->limits.max_frame_bytes = s_frame_limit (self);
    if (proto_socket_limit (self->rh, &self->limits))
        pl_log_warn ("server: ZMQ_MAXMSGSIZE: %s", zmq_strerror (errno));
    if (args->insecure)
        pl_log_warn ("server: --insecure: plain TCP; anyone who can reach the port can "
                     "join and read the model");
    else {
        self->curve = pl_curve_server_new (self->router, args->cert, args->allow, err,
                                           sizeof err);
        if (!self->curve) {
            pl_log_error ("server: %s", err);
            return -1;
        }
        pl_log_info ("server: CurveZMQ on; %d device certificate(s) allowed in %s",
                     pl_curve_allowed (self->curve), args->allow);
    }
    const char *bind = args->bind ? args->bind : cfg->bind;
    if (zmq_bind (self->rh, bind)) {
        pl_log_error ("server: bind %s: %s", bind, zmq_strerror (errno));
        return -1;
    }
    char endpoint[256] = "";
    size_t len = sizeof endpoint;
    zmq_getsockopt (self->rh, ZMQ_LAST_ENDPOINT, endpoint, &len);
    pl_log_info ("server: listening on %s for %d device(s), mode %s; frames up to "
                 "%zu bytes", endpoint, self->devices, cfg->mode,
                 self->limits.max_frame_bytes);
    if (args->endpoint_file) {
        char path[1024];
        snprintf (path, sizeof path, "%s", args->endpoint_file);
        if (pl_write_file_atomic (path, endpoint, strlen (endpoint), err, sizeof err)) {
            pl_log_error ("%s", err);
            return -1;
        }
    }
    self->poller = zpoller_new (self->router, NULL);
    for (int i = 0; i < self->workers_count; i++)
        zpoller_add (self->poller, self->workers[i]);
    return 0;
}

//  --resume: the models, the round and the epochs so far from the newest
//  valid checkpoint; the run restarts when its devices have joined. 0
//  (resumed, or no checkpoint yet: a new run), 1 when the run was already
//  complete, -1 on error.
static int
s_resume (srv_t *self)
{
    nn_model_t *reps[SRV_MAX_DEVICES];
    srv_ckpt_point_t pt;
    cJSON *epochs = NULL;
    char err[NN_ERR_SIZE], chosen[2048];
    //  A planned ("auto") run resumes with the split it checkpointed; the
    //  provisional plan of this start may differ.
    int p = 0, n = 0;
    if ((self->plan.auto_split || self->plan.auto_micro)
    &&  srv_ckpt_peek_plan (self->results, &p, &n) == 0) {
        if (p != self->split && p >= 1 && p < self->units && srv_resplit (self, p))
            return -1;
        if (self->mode == PROTO_MODE_PIPELEARN && self->batch % n == 0) {
            self->cfg.micro_batches = n;
            for (int i = 0; i < SRV_MAX_DEVICES; i++)
                self->plan.slot[i].micro = n;
        }
    }
    for (int i = 0; i < self->replicas_count; i++)
        reps[i] = self->rep[i].model;
    int rc = srv_ckpt_load (self->results, &self->cfg, self->devpart, reps,
                            self->replicas_count, &pt, &epochs, chosen, sizeof chosen, err,
                            sizeof err);
    if (rc == -2) {
        //  A supervisor always passes --resume; the first start has none.
        pl_log_info ("server: %s; starting a new run", err);
        return 0;
    }
    if (rc) {
        pl_log_error ("server: %s", err);
        return -1;
    }
    pl_summary_set_epochs (self->summary, epochs);
    if (pt.epoch > self->cfg.epochs) {
        pl_log_info ("server: --resume: the run in %s is complete (%d epoch(s)); nothing to "
                     "do", self->results, self->cfg.epochs);
        return 1;
    }
    //  timeline.csv keeps the epochs that ended before this point, in the
    //  run's time base (rows of the interrupted epoch are dropped: its
    //  rounds from the checkpoint on are run again, those before it had
    //  not been written). A checkpoint without origin_s, or another one
    //  than the run's time 0 taken at the start: a new file.
    if (pt.origin_s == self->origin) {
        char path[1024];
        snprintf (path, sizeof path, "%s/timeline.csv", self->results);
        int kept = pl_timeline_csv_keep_before (path, pt.epoch, err, sizeof err);
        if (kept < 0)
            pl_log_warn ("server: %s (timeline.csv starts again)", err);
        self->timeline_written = kept == 1;
    }
    self->epoch = pt.epoch;
    self->round_iter = pt.round_iter;
    self->resumed = true;
    pl_log_info ("server: resuming from %s: epoch %d, iteration %u", chosen, pt.epoch,
                 pt.round_iter);
    return 0;
}

//  --resume of a complete run: its results must be there. A model.ckpt
//  that does not load (lost, or damaged since) is written again from the
//  final checkpoint s_resume loaded, and a missing summary.json from its
//  epochs. 0, or 1 when they cannot be: never a success without a model.
static int
s_complete_results (srv_t *self)
{
    char err[NN_ERR_SIZE], path[1024];
    snprintf (path, sizeof path, "%s/model.ckpt", self->results);
    if (nn_checkpoint_load (path, self->full, err, sizeof err)) {
        pl_log_warn ("server: --resume: %s; writing it from the final checkpoint", err);
        s_merge (self);
        if (nn_checkpoint_save (path, self->full, false, err, sizeof err)) {
            pl_log_error ("server: --resume: %s", err);
            return 1;
        }
    }
    snprintf (path, sizeof path, "%s/summary.json", self->results);
    if (access (path, F_OK) != 0
    &&  pl_summary_write (self->summary, self->results, err, sizeof err)) {
        pl_log_error ("server: --resume: %s", err);
        return 1;
    }
    return 0;
}

static void
s_teardown (srv_t *self)
{
    srv_metrics_destroy (&self->metrics);       //  its threads read nothing after this
    zpoller_destroy (&self->poller);
    for (int i = 0; i < self->workers_count; i++) {
        //  A run that ends early (aborted, interrupted) can leave a step in
        //  a worker: take its GRADIENTS off the pipe before stopping it.
        if (self->worker_rep[i] >= 0) {
            char *tag = NULL;
            void *ptr = NULL;
            if (zsock_recv (self->workers[i], "sp", &tag, &ptr) == 0 && tag
            &&  streq (tag, "GRAD") && ptr) {
                proto_msg_t *grad = ptr;
                proto_msg_destroy (&grad);
            }
            zstr_free (&tag);
            self->worker_rep[i] = -1;
        }
        zactor_destroy (&self->workers[i]);
    }
    for (int i = 0; i < self->replicas_count; i++) {
        srv_replica_t *r = &self->rep[i];
        while (r->queue && zlist_size (r->queue)) {
            proto_msg_t *m = zlist_pop (r->queue);
            proto_msg_destroy (&m);
        }
        zlist_destroy (&r->queue);
        nn_model_destroy (&r->model);
    }
    zsock_destroy (&self->router);
    //  GRADIENTS still queued in libzmq give their buffers back later; the
    //  last one frees the pool.
    srv_bufpool_destroy (&self->bufpool);
    pl_curve_destroy (&self->curve);
    for (int i = 0; i < SRV_MAX_DEVICES; i++)
        nn_free (self->dev[i].params);
    nn_model_destroy (&self->devpart);
    nn_model_destroy (&self->full);
    nn_dataset_destroy (&self->test);
    pl_summary_destroy (&self->summary);
    pl_timeline_destroy (&self->timeline);
}

//  Every connection holds a file descriptor, also one that never
//  authenticates, until libzmq closes it: take all the descriptors the hard
//  limit allows (a soft limit of 1024 is the usual default) so a flood of
//  connections leaves the results room to be written.
static void
s_raise_nofile (void)
{
    struct rlimit rl;
    if (getrlimit (RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    //  An unlimited hard limit is not a valid soft one (fs.nr_open caps it).
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
    if (setrlimit (RLIMIT_NOFILE, &rl) != 0)
        pl_log_warn ("server: cannot raise the open-file limit from %lu: %s",
                     (unsigned long) was, strerror (errno));
}

int
srv_run (int argc, char **argv)
{
    srv_t *self = nn_calloc (1, sizeof *self);
    pl_config_defaults (&self->cfg);
    s_args_t args = { 0 };
    pl_args_lock ();
    int parsed = s_parse_args (argc, argv, &args, &self->cfg);
    pl_args_unlock ();
    if (parsed) {
        nn_free (self);
        return 2;
    }
    pl_blas_set_threads (1);
    s_raise_nofile ();
    zsys_init ();
    zsys_handler_set (NULL);
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGHUP, &sa, NULL);
    self->quiet = args.quiet;
    self->tty = isatty (STDOUT_FILENO);
    self->results = args.results_dir ? args.results_dir : self->cfg.results_dir;
    char ckerr[NN_ERR_SIZE];
    if (!args.resume && srv_ckpt_claim_fresh (self->results, args.force, ckerr,
                                              sizeof ckerr)) {
        pl_log_error ("server: %s", ckerr);
        nn_free (self);
        return 1;
    }
    self->origin = pl_wall_clock ();
    //  A resumed run keeps its time 0: timeline.csv goes on where it was.
    if (args.resume)
        srv_ckpt_peek_origin (self->results, &self->origin);
    self->timeline = pl_timeline_new (self->origin);
    self->summary = pl_summary_new (&self->cfg, self->results, "pipelearn-server", 1);
    int resumed = 0;
    if (s_setup (self, &args) || (args.resume && (resumed = s_resume (self)) < 0)) {
        s_teardown (self);
        nn_free (self);
        return 1;
    }
    char merr[NN_ERR_SIZE];
    if (self->cfg.metrics[0]
    &&  !(self->metrics = srv_metrics_new (self->cfg.metrics, self, self->results,
                                           self->timeline, self->summary, merr, sizeof merr))) {
        pl_log_error ("%s", merr);
        s_teardown (self);
        nn_free (self);
        return 1;
    }
    srv_metrics_watch (self->metrics, self->rh);
    if (resumed == 1) {                 //  the run was already complete
        int rc = s_complete_results (self);
        s_teardown (self);
        nn_free (self);
        return rc;
    }
    while (!self->done && !s_interrupted) {
        //  Wake often enough to notice a deadline within a tenth of it.
        double tick = self->cfg.device_timeout_s * 100.0;
        void *which = zpoller_wait (self->poller, tick < 1000.0 ? (int) tick + 1 : 1000);
        if (which == self->router) {
            //  Drain what is queued so one busy device cannot starve others.
            for (int k = 0; k < 64 && !self->done; k++) {
                s_on_router (self);
                if (!(zsock_events (self->router) & ZMQ_POLLIN))
                    break;
            }
        }
        else
        if (which)
            s_on_worker (self, (zactor_t *) which);
        else
        if (zpoller_terminated (self->poller) && s_interrupted)
            break;          //  other signals (SIGHUP) also end a poll: go on
        if (s_reload) {
            s_reload = 0;
            char err[NN_ERR_SIZE];
            if (!self->curve)
                pl_log_info ("server: SIGHUP: --insecure, no keys to reload");
            else
            if (pl_curve_server_reload (self->curve, err, sizeof err))
                pl_log_error ("server: SIGHUP: %s; keeping the previous keys", err);
            else {
                pl_log_info ("server: SIGHUP: keys reloaded; %d device certificate(s) "
                             "allowed", pl_curve_allowed (self->curve));
                s_drop_revoked (self);
            }
        }
        srv_plan_check_deadlines (self);
        if (self->started && !self->done && !srv_plan_probing (self))
            s_check_deadlines (self);
        //  HEARTBEATs before the start too: a device waiting for the others
        //  hears the server is alive, and a dead one's slot is freed (a
        //  send to a connection libzmq closed fails, and its ZMTP
        //  heartbeat closes a silent one after heartbeat_timeout_s).
        if (!self->done)
            s_heartbeat (self);
        if (self->started && !self->done)
            s_progress (self);
        srv_metrics_tick (self->metrics, self);
        s_drop_pending (self);
    }
    s_progress_clear (self);
    if (self->timeline_pending && self->done && self->rc == 0) {
        pl_log_error ("server: timeline.csv could not be written at the end; the results "
                      "are incomplete");
        self->rc = 1;
    }
    int rc = self->rc;
    if (s_interrupted && !self->done) {
        //  The current round is abandoned; the checkpoint of its start is on
        //  disk, so the run loses nothing that --resume cannot redo.
        if (self->started)
            pl_log_warn ("server: stopped by a signal in epoch %d; the run continues from "
                         "its last checkpoint with --resume", self->epoch);
        else
            pl_log_warn ("server: stopped by a signal before training started");
        //  The notice must arrive (a device that misses it waits out its
        //  --timeout): wait up to a second for room in a device's queue
        //  rather than drop it as the training sends do.
        zsock_set_sndtimeo (self->router, 1000);
        for (int i = 0; i < self->devices; i++)
            if (self->dev[i].joined
            &&  s_send_error_to (self, self->dev[i].rid, self->dev[i].rid_len,
                                 PROTO_ERR_INTERNAL, "server stopping; it can resume the run"))
                pl_log_warn ("server: could not tell device %d that the server stops (%s)",
                             i, zmq_strerror (errno));
    }
    if (rc == 0)
        pl_log_info ("server: results in %s (peak RSS %ld KiB)", self->results,
                     pl_peak_rss_kb ());
    s_teardown (self);
    nn_free (self);
    return rc;
}
