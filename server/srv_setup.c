/*  srv_setup.c: a run's setup, resume and teardown. See srv_setup.h. */
#include "srv_calib.h"
#include "srv_setup.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_rng.h"
#include "pl_log.h"
#include "pl_shards.h"
#include "srv_ckpt.h"
#include "srv_metrics.h"
#include "srv_parts.h"
#include "srv_session.h"

//  The largest legitimate frame of this run. With devices at different
//  split points, the largest of any device's (its boundary shape and part).
//  When the planner may re-plan (a lower N, another split point), the
//  largest any plan can send: the socket limit applies to connections
//  already made.
static size_t
s_frame_limit (srv_t *self)
{
    bool mixed = self->mode != PL_MODE_FL && srv_assign_mixed (&self->assign);
    size_t bytes = mixed ? 0
                 : proto_limits_frame_bytes (&self->limits, self->mode != PL_MODE_FL);
    proto_limits_t any = self->limits;
    for (int i = 0; mixed && i < self->devices; i++) {
        nn_shape_t s = nn_model_output_shape (srv_parts_device (self, i));
        any.slab_count = srv_parts_device_count (self, i);
        any.h = (uint32_t) s.h;
        any.w = (uint32_t) s.w;
        any.c = (uint32_t) s.c;
        size_t b = proto_limits_frame_bytes (&any, true);
        bytes = b > bytes ? b : bytes;
    }
    if (!srv_planner_auto (self->planner))
        return bytes;
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

//  Shard sizes as every device computes them (pl_shards_each), from the
//  training set's labels. A select callback sees the labels before any image is read; it
//  counts and stops the load there.
typedef struct {
    const pl_config_t *cfg;
    int *sizes;                 //  cfg->devices
    bool counted;
} s_shard_count_t;

//  pl_shards_each's callback: a shard's size.
static int
s_count_one (int device, int *shard, int count, void *arg)
{
    s_shard_count_t *sc = arg;
    nn_free (shard);
    sc->sizes[device] = count;
    return 0;
}

static int *
s_shard_count (const nn_dataset_t *unloaded, int *count_out, void *arg, char *err,
               size_t err_size)
{
    s_shard_count_t *sc = arg;
    if (pl_shards_each (sc->cfg, sc->cfg->devices, unloaded, s_count_one, sc, err, err_size))
        return NULL;
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
    const pl_config_t *cfg = self->cfg;
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

//  The device parts, the merged model, and in split modes the pool of
//  replicas and workers, for self->assign. 0 or -1 (logged).
static int
s_models (srv_t *self)
{
    char err[NN_ERR_SIZE];
    const pl_config_t *cfg = self->cfg;
    int mb = srv_assign_max_micro_batch (&self->assign, self->batch);
    //  The merged model is only evaluated: a small batch keeps its
    //  activation memory (which nn_model sizes for training) small, at no
    //  cost in accuracy.
    self->eval_batch = self->batch < SRV_EVAL_BATCH ? self->batch : SRV_EVAL_BATCH;
    self->full = nn_model_new (&self->spec, 0, self->units, self->eval_batch, err,
                               sizeof err);
    if (!self->full) {
        pl_log_error ("%s", err);
        return -1;
    }
    nn_rng_t rng;
    nn_rng_seed (&rng, cfg->seed);
    //  Every part is cut from it: nn_model_init gives a part the full
    //  model's values of its units.
    nn_model_init (self->full, &rng);
    self->limits.classes = (uint32_t) self->spec.classes;
    self->limits.spec_hash = self->spec_hash;
    if (srv_parts_build (self))
        return -1;
    self->wire = srv_wire_new (cfg);
    if (self->mode == PL_MODE_FL)
        return 0;
    //  Two GRADIENTS in flight per device.
    self->bufpool = srv_bufpool_new (2 * self->devices + 2);
    srv_pool_args_t pa = {
        .spec = &self->spec, .splits = self->assign.split,
        .replicas = self->mode == PL_MODE_SL ? 1 : self->devices,
        //  One worker per core: more would only oversubscribe the host
        //  (OpenBLAS runs one thread inside each worker).
        .workers = srv_parts_workers (self),
        .max_batch = mb, .batch_size = self->batch, .seed = cfg->seed,
        .sgd = { (float) cfg->learning_rate, (float) cfg->momentum,
                 (float) cfg->weight_decay },
        .origin = self->origin, .shared_replica = self->mode == PL_MODE_SL,
        .bufpool = self->bufpool
    };
    self->pool = srv_pool_new (&pa, err, sizeof err);
    if (!self->pool) {
        pl_log_error ("%s", err);
        return -1;
    }
    return 0;
}

//  The ROUTER: options, CURVE, bind, the endpoint file. 0 or -1 (logged).
static int
s_router (srv_t *self, const srv_args_t *args)
{
    char err[NN_ERR_SIZE];
    const pl_config_t *cfg = self->cfg;
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
    zsock_set_sndhwm (self->router, srv_session_send_hwm (self));
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
    srv_planner_set_frame_limit (self->planner, self->limits.max_frame_bytes);
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
    //  Before the bind, so every connection's close is seen.
    self->monitor = srv_monitor_new (self->rh, err, sizeof err);
    if (!self->monitor)
        pl_log_warn ("%s; a device whose connection libzmq closes is dropped only by "
                     "the deadlines", err);
    const char *bind = args->bind ? args->bind : cfg->bind;
    if (zmq_bind (self->rh, bind)) {
        pl_log_error ("server: bind %s: %s", bind, zmq_strerror (errno));
        return -1;
    }
    char endpoint[256] = "";
    size_t len = sizeof endpoint;
    zmq_getsockopt (self->rh, ZMQ_LAST_ENDPOINT, endpoint, &len);
    pl_log_info ("server: listening on %s for %d device(s), mode %s; frames up to "
                 "%zu bytes", endpoint, self->devices, pl_mode_name (cfg->mode),
                 self->limits.max_frame_bytes);
    if (args->endpoint_file) {
        char path[1024];
        snprintf (path, sizeof path, "%s", args->endpoint_file);
        if (pl_write_file_atomic (path, endpoint, strlen (endpoint), err, sizeof err)) {
            pl_log_error ("%s", err);
            return -1;
        }
    }
    return 0;
}

int
srv_setup (srv_t *self, const srv_args_t *args)
{
    char err[NN_ERR_SIZE];
    const pl_config_t *cfg = self->cfg;
    self->mode = cfg->mode;
    self->batch = cfg->batch_size;
    self->devices = cfg->devices;
    self->agg = (srv_agg_t) { srv_aggregate_rule (cfg->aggregation), cfg->trim_fraction };
    self->abuse = srv_abuse_new ();
    const char *dir = cfg->data_dir[0] ? cfg->data_dir : NULL;
    self->test = nn_dataset_load_named (cfg->dataset, dir, false, cfg->test_samples, err,
                                        sizeof err);
    if (self->test && cfg->pad_to > 0 && nn_dataset_pad (self->test, cfg->pad_to, err,
                                                         sizeof err))
        nn_dataset_destroy (&self->test);
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
    srv_planner_args_t pa = { .cfg = cfg, .spec = &self->spec, .mode = self->mode,
                              .devices = self->devices, .batch = self->batch,
                              .workers = srv_parts_workers (self) };
    self->planner = srv_planner_new (&pa, &self->assign, pl_summary_root (self->summary));
    if (!self->planner)
        return -1;
    nn_model_spec_hash (&self->spec, self->spec_hash);
    if (s_models (self) || s_router (self, args))
        return -1;
    self->poller = zpoller_new (self->router, NULL);
    if (self->monitor)
        zpoller_add (self->poller, srv_monitor_reader (self->monitor));
    if (self->pool)
        srv_pool_attach (self->pool, self->poller);
    return 0;
}

int
srv_setup_resume (srv_t *self)
{
    nn_model_t *reps[SRV_MAX_DEVICES];
    srv_ckpt_point_t pt;
    cJSON *epochs = NULL;
    char err[NN_ERR_SIZE], chosen[2048];
    //  A planned ("auto") run resumes with the assignment it checkpointed;
    //  the provisional plan of this start may differ.
    srv_assign_t a;
    if (srv_planner_auto (self->planner)
    &&  srv_ckpt_peek_assign (self->results, self->devices, &a) == 0) {
        bool moved = false, valid = true;
        for (int i = 0; i < self->devices; i++) {
            valid = valid && a.split[i] >= 1 && a.split[i] < self->units;
            moved = moved || a.split[i] != self->assign.split[i];
        }
        if (self->mode == PL_MODE_SL && srv_assign_mixed (&a))
            valid = false;
        if (moved && valid) {
            for (int i = 0; i < self->devices; i++)
                self->assign.split[i] = a.split[i];
            if (srv_parts_resplit (self))
                return -1;
        }
        for (int i = 0; i < self->devices; i++)
            if (self->mode == PL_MODE_PIPELEARN && self->batch % a.micro[i] == 0)
                self->assign.micro[i] = a.micro[i];
    }
    int count = self->pool ? srv_pool_replicas (self->pool) : 0;
    for (int i = 0; i < count; i++)
        reps[i] = srv_pool_model (self->pool, i);
    int rc = srv_ckpt_load (self->results, self->cfg, srv_parts_widest (self), reps, count,
                            &pt, &epochs, chosen, sizeof chosen, err, sizeof err);
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
    //  The checkpoint holds the widest part: the narrower ones are cut from
    //  it (every holder of a unit held the same values when it was written).
    srv_parts_merge (self);
    if (srv_parts_build (self))
        return -1;
    if (pt.epoch > self->cfg->epochs) {
        pl_log_info ("server: --resume: the run in %s is complete (%d epoch(s)); nothing to "
                     "do", self->results, self->cfg->epochs);
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

int
srv_setup_complete_results (srv_t *self)
{
    char err[NN_ERR_SIZE], path[1024];
    snprintf (path, sizeof path, "%s/model.ckpt", self->results);
    if (nn_checkpoint_load (path, self->full, err, sizeof err)) {
        pl_log_warn ("server: --resume: %s; writing it from the final checkpoint", err);
        srv_parts_merge (self);
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

void
srv_setup_teardown (srv_t *self)
{
    srv_metrics_destroy (&self->metrics);       //  its threads read nothing after this
    srv_pool_destroy (&self->pool);
    zpoller_destroy (&self->poller);
    if (self->monitor && srv_monitor_dropped (self->monitor) > 0)
        pl_log_info ("server: %ld connection event(s) came while the reactor was busy and "
                     "were not read (a device whose close was among them went at the "
                     "server's next send to it, not at once)",
                     srv_monitor_dropped (self->monitor));
    srv_monitor_destroy (&self->monitor);
    zsock_destroy (&self->router);
    //  GRADIENTS still queued in libzmq give their buffers back later; the
    //  last one frees the pool.
    srv_bufpool_destroy (&self->bufpool);
    pl_curve_destroy (&self->curve);
    for (int i = 0; i < SRV_MAX_DEVICES; i++) {
        nn_free (self->dev[i].params);
        srv_calib_release (&self->dev[i]);
    }
    for (int p = 0; p <= NN_MAX_UNITS; p++)
        nn_model_destroy (&self->part[p]);
    nn_model_destroy (&self->full);
    nn_dataset_destroy (&self->test);
    srv_planner_destroy (&self->planner);
    srv_abuse_destroy (&self->abuse);
    srv_wire_destroy (&self->wire);
    pl_summary_destroy (&self->summary);
    pl_timeline_destroy (&self->timeline);
}
