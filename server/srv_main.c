/*  pipelearn-server: the edge server of a split (or federated) training run.

    pipelearn-server --config FILE [--bind ENDPOINT] [--results DIR]
                     [--set KEY=VALUE]... [--endpoint-file PATH] [--quiet]

    This file is the reactor: one thread polls the ROUTER and the compute
    workers' pipes (srv_pool.h). Each event goes to its handler
    (srv_inbox.c: device messages and worker replies; srv_session.c:
    sessions), which records what happened; then srv_round_advance
    (srv_step.c) decides what follows. Deadlines, heartbeats, SIGHUP's key
    reload and the progress line run between events. docs/architecture.md
    draws the whole server.

    Epoch end protocol (what the clients do): at the end of its epoch a
    device sends EVENTS (its stage events of the epoch), STATS and then its
    epoch-final PARAMS, so the server knows an aggregation round closes an
    epoch when every device's STATS for that epoch has arrived.
*/
#include "nn_alloc.h"
#include "pl_args.h"
#include "pl_config.h"
#include "pl_curve.h"
#include "pl_daemon.h"
#include "pl_log.h"
#include "pl_stop.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "srv_ckpt.h"
#include "srv_inbox.h"
#include "srv_internal.h"
#include "srv_metrics.h"
#include "srv_run.h"
#include "srv_session.h"
#include "srv_setup.h"
#include "srv_step.h"
#include "srv_timeline.h"

#include <czmq.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>


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
s_parse_args (int argc, char **argv, srv_args_t *args, pl_config_t *cfg)
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
    if (pl_args_config (cfg, argc, argv, &args->config_path))
        return -1;
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
                if (pl_args_log_format (optarg))
                    return -1;
                break;
            case 'h': s_usage (stdout); exit (0);
            case 's':
                if (pl_args_set (cfg, optarg))
                    return -1;
                break;
            default: s_usage (stderr); return -1;
        }
    }
    if (args->resume && args->force) {
        pl_log_error ("--resume continues the run in the results directory, --force "
                      "replaces it: give one");
        return -1;
    }
    if (pl_args_end (argc, argv, s_usage))
        return -1;
    if (args->insecure ? (args->cert || args->allow) : !(args->cert && args->allow)) {
        pl_log_error ("security: give --cert FILE_secret and --allow DIR (CurveZMQ, the "
                      "default; keys from pipelearn-keygen), or --insecure alone for plain "
                      "TCP");
        return -1;
    }
    const char *src = args->config_path ? args->config_path : "config";
    char err[NN_ERR_SIZE];
    if (pl_config_check (cfg, src, err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    if (cfg->mode == PL_MODE_PIPELEARN && cfg->micro_batches != PL_AUTO
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

//  The metrics' copy of the run's state.
static void
s_metrics_sample (const srv_t *self, srv_metrics_sample_t *m)
{
    memset (m, 0, sizeof *m);
    m->mode = pl_mode_name (self->mode);
    m->model = self->cfg->model;
    m->dataset = self->cfg->dataset;
    m->aggregation = self->cfg->aggregation;
    m->epochs = self->cfg->epochs;
    m->batch = self->batch;
    m->devices = self->devices;
    m->origin = self->origin;
    m->started = self->started;
    m->done = self->done;
    m->epoch = self->started ? self->epoch : 0;
    m->split = self->mode == PL_MODE_FL ? self->units : srv_assign_split (&self->assign);
    m->workers = self->pool ? srv_pool_workers (self->pool) : 0;
    m->joined = self->joined;
    m->iterations = self->iterations;
    m->epoch_iterations = self->epoch_iterations;
    m->loss_sum = self->loss_sum;
    m->correct = (double) self->correct;
    m->samples = (double) self->samples_seen;
    m->epoch_elapsed_s = self->started && !self->clock_wait
                       ? pl_monotonic () - self->epoch_start : 0.0;
    m->curve_refused = self->monitor ? srv_monitor_refused (self->monitor) : 0;
    for (int i = 0; i < self->devices; i++) {
        const srv_device_t *d = &self->dev[i];
        m->dev[i].joined = d->joined;
        m->dev[i].active = d->active;
        m->dev[i].split = self->mode == PL_MODE_FL ? self->units : self->assign.split[i];
        m->dev[i].micro = self->assign.micro[i];
        if (self->pool)
            m->dev[i].queue = (int) srv_pool_queued (self->pool, d->replica)
                            + (srv_pool_busy (self->pool, d->replica) ? 1 : 0);
    }
}

//  After any event: drop the devices marked for it, and let the step
//  function decide what follows, until nothing more is due (a decision
//  can send MODELs whose failed send marks another device).
static void
s_settle (srv_t *self)
{
    do
        srv_round_advance (self);
    while (!self->done && srv_session_drop_pending (self));
}

//  Worker replies: the one just polled (which), then any a call to a
//  worker kept (srv_pool_take_reply); each goes to its device.
static void
s_on_workers (srv_t *self, void *which)
{
    proto_msg_t *grad = NULL;
    int rc = which ? srv_pool_recv (self->pool, which, &grad) : 0;
    if (rc == 1)
        srv_inbox_gradients (self, grad);
    if (rc == 1 || rc == 2) {
        //  A freed replica may have ACTIVATIONS queued, or close the round.
        srv_pool_dispatch (self->pool);
        s_settle (self);
    }
    while (!self->done && srv_pool_take_reply (self->pool, &grad) == 1) {
        srv_inbox_gradients (self, grad);
        srv_pool_dispatch (self->pool);
        s_settle (self);
    }
}

static void
s_on_sighup (srv_t *self)
{
    char err[NN_ERR_SIZE];
    if (!self->curve)
        pl_log_info ("server: SIGHUP: --insecure, no keys to reload");
    else
    if (pl_curve_server_reload (self->curve, err, sizeof err))
        pl_log_error ("server: SIGHUP: %s; keeping the previous keys", err);
    else {
        pl_log_info ("server: SIGHUP: keys reloaded; %d device certificate(s) "
                     "allowed", pl_curve_allowed (self->curve));
        srv_session_drop_revoked (self);
    }
}

static void
s_loop (srv_t *self)
{
    while (!self->done && !self->stop.stop) {
        //  Wake often enough to notice a deadline within a tenth of it.
        double tick = self->cfg->device_timeout_s * 100.0;
        int wait_ms = tick < 1000.0 ? (int) tick + 1 : 1000;
        double due = srv_round_start_due (self);     //  a start waiting to settle
        if (due >= 0 && due * 1000.0 + 1 < wait_ms)
            wait_ms = (int) (due * 1000.0) + 1;
        void *which = zpoller_wait (self->poller, wait_ms);
        if (which == self->router) {
            //  Drain what is queued so one busy device cannot starve others.
            for (int k = 0; k < 64 && !self->done; k++) {
                srv_inbox_router (self);
                s_settle (self);
                if (!(zsock_events (self->router) & ZMQ_POLLIN))
                    break;
            }
        }
        else
        if (which && self->pool)
            s_on_workers (self, which);
        else
        if (zpoller_terminated (self->poller) && self->stop.stop)
            break;          //  other signals (SIGHUP) also end a poll: go on
        if (self->pool && !self->done)
            s_on_workers (self, NULL);
        //  Every turn, not only when its socket wakes the poll: a busy
        //  ROUTER comes first in the poller and would starve it.
        if (!self->done) {
            srv_session_transport (self);
            if (srv_session_drop_closed (self))
                s_settle (self);
        }
        if (self->stop.reload) {
            self->stop.reload = 0;
            s_on_sighup (self);
        }
        if (!self->done)
            srv_inbox_deadlines (self);
        //  HEARTBEATs before the start too: a device waiting for the others
        //  hears the server is alive, and a dead one's slot is freed (a
        //  send to a connection libzmq closed fails, and its ZMTP
        //  heartbeat closes a silent one after heartbeat_timeout_s).
        if (!self->done)
            srv_session_heartbeat (self);
        if (self->started && !self->done)
            srv_timeline_progress (self);
        if (self->metrics) {
            srv_metrics_sample_t sample;
            s_metrics_sample (self, &sample);
            srv_metrics_tick (self->metrics, &sample);
        }
        s_settle (self);
    }
}

//  The run was stopped by a signal: say where it stands and tell the
//  devices.
static void
s_interrupted_notice (srv_t *self)
{
    //  The current round is abandoned; the checkpoint of its start is on
    //  disk, so the run loses nothing that --resume cannot redo.
    if (self->started)
        pl_log_warn ("server: stopped by a signal in epoch %d; the run continues from "
                     "its last checkpoint with --resume", self->epoch);
    else
        pl_log_warn ("server: stopped by a signal before training started");
    //  The notice must arrive (a device that misses it waits out its
    //  --timeout): wait up to a second for room in a device's queue
    //  rather than drop it as the training sends do. RESUMING: the devices
    //  wait and join the resumed server by themselves, without exiting.
    zsock_set_sndtimeo (self->router, 1000);
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined
        &&  srv_send_error_to (self, self->dev[i].rid, self->dev[i].rid_len,
                               PROTO_ERR_RESUMING, "server stopping; it can resume the run"))
            pl_log_warn ("server: could not tell device %d that the server stops (%s)",
                         i, zmq_strerror (errno));
}

//  --resume found the run complete. Devices started after it (a reboot,
//  `docker-compose up` on a finished results volume, a device restarted in
//  the run's last seconds) would otherwise get no answer, exit after their
//  --timeout and be restarted in a loop: for device_timeout_s every HELLO
//  is answered ERROR COMPLETE, on which a device exits 0. Anything else is
//  dropped unanswered.
static void
s_answer_complete (srv_t *self)
{
    double until = pl_monotonic () + self->cfg->device_timeout_s;
    pl_log_info ("server: telling devices for %.0f s that the run is complete",
                 self->cfg->device_timeout_s);
    while (!self->stop.stop && pl_monotonic () < until) {
        zmq_pollitem_t item = { self->rh, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, 200) <= 0)
            continue;
        proto_msg_t *msg = NULL;
        uint8_t rid[PROTO_ROUTING_ID_MAX];
        size_t rid_len = sizeof rid;
        char err[NN_ERR_SIZE];
        if (proto_msg_recv_from (&msg, self->rh, rid, &rid_len, &self->limits, err,
                                 sizeof err) == 0
        &&  proto_msg_type (msg) == PROTO_MSG_HELLO) {
            pl_log_info ("server: a device asked to join; told it the run is complete");
            srv_send_error_to (self, rid, rid_len, PROTO_ERR_COMPLETE, "the run is complete");
        }
        proto_msg_destroy (&msg);
    }
}

static int
s_finish (srv_t *self, int rc)
{
    srv_setup_teardown (self);
    pl_stop_detach (&self->stop);
    pl_config_t *cfg = (pl_config_t *) self->cfg;      //  srv_run's, to free
    nn_free (cfg);
    nn_free (self);
    return rc;
}

int
srv_run (int argc, char **argv)
{
    srv_t *self = nn_calloc (1, sizeof *self);
    pl_config_t *cfg = nn_calloc (1, sizeof *cfg);
    pl_config_defaults (cfg);
    srv_args_t args = { 0 };
    pl_args_lock ();
    int parsed = s_parse_args (argc, argv, &args, cfg);
    pl_args_unlock ();
    self->cfg = cfg;                    //  checked: read-only from here on
    if (parsed) {
        nn_free (cfg);
        nn_free (self);
        return 2;
    }
    s_raise_nofile ();
    //  SIGINT/SIGTERM end this run, SIGHUP re-reads --allow (pl_stop.h).
    if (pl_daemon_run_setup (&self->stop, true)) {
        pl_log_error ("server: more than %d runs in this process", PL_STOP_MAX_RUNS);
        nn_free (cfg);
        nn_free (self);
        return 1;
    }
    self->quiet = args.quiet;
    self->tty = isatty (STDOUT_FILENO);
    self->results = args.results_dir ? args.results_dir : self->cfg->results_dir;
    char ckerr[NN_ERR_SIZE];
    if (!args.resume && srv_ckpt_claim_fresh (self->results, args.force, ckerr,
                                              sizeof ckerr)) {
        pl_log_error ("server: %s", ckerr);
        pl_stop_detach (&self->stop);
        nn_free (cfg);
        nn_free (self);
        return 1;
    }
    self->origin = pl_wall_clock ();
    //  A resumed run keeps its time 0: timeline.csv goes on where it was.
    if (args.resume)
        srv_ckpt_peek_origin (self->results, &self->origin);
    self->timeline = pl_timeline_new (self->origin);
    self->summary = pl_summary_new (self->cfg, self->results, "pipelearn-server", 1);
    int resumed = 0;
    if (srv_setup (self, &args) || (args.resume && (resumed = srv_setup_resume (self)) < 0))
        return s_finish (self, 1);
    char merr[NN_ERR_SIZE];
    srv_metrics_sample_t sample;
    s_metrics_sample (self, &sample);
    if (self->cfg->metrics[0]
    &&  !(self->metrics = srv_metrics_new (self->cfg->metrics, &sample, self->results,
                                           self->timeline, self->summary, merr, sizeof merr))) {
        pl_log_error ("%s", merr);
        return s_finish (self, 1);
    }
    if (resumed == 1) {                 //  the run was already complete
        int rc = srv_setup_complete_results (self);
        if (rc == 0)
            s_answer_complete (self);
        return s_finish (self, rc);
    }
    s_loop (self);
    srv_timeline_progress_clear (self);
    if (self->timeline_pending && self->done && self->rc == 0) {
        pl_log_error ("server: timeline.csv could not be written at the end; the results "
                      "are incomplete");
        self->rc = 1;
    }
    if (self->stop.stop && !self->done)
        s_interrupted_notice (self);
    if (self->rc == 0)
        pl_log_info ("server: results in %s (peak RSS %ld KiB)", self->results,
                     pl_peak_rss_kb ());
    return s_finish (self, self->rc);
}
