/*  srv_pool.c: replicas, their ACTIVATIONS queues and the compute workers.
    See srv_pool.h. */
#include "srv_pool.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_rng.h"
#include "pl_log.h"
#include "srv_worker.h"

#define S_MAX 64

typedef struct {
    nn_model_t *model;          //  owns the slabs; built for batch 1
    zlist_t *queue;             //  proto_msg_t * (ACTIVATIONS), oldest first
    bool busy;                  //  lent to a worker until its reply
    bool stepping;              //  busy: its last GRADIENTS came, the step runs
} s_replica_t;

struct _srv_pool_t {
    srv_pool_args_t args;       //  args.max_batch follows the plan
    int split[S_MAX];           //  P of each replica (args.splits points here)
    nn_model_spec_t spec;
    s_replica_t rep[S_MAX];
    int replicas_count;
    zactor_t *workers[S_MAX];
    int worker_rep[S_MAX];      //  replica a worker is training, -1 idle
    int workers_count;
    int rr;                     //  replica the next dispatch scan starts at
    zpoller_t *poller;          //  the reactor's, or NULL
    //  Replies read during a call, handed out by srv_pool_take_reply:
    //  at most one per worker (a worker has one step at a time).
    proto_msg_t *kept[S_MAX];
    bool kept_in[S_MAX];
};

static int
s_workers_start (srv_pool_t *self)
{
    const srv_pool_args_t *a = &self->args;
    srv_worker_args_t wa = {
        .spec = &self->spec, .max_batch = a->max_batch,
        .batch_size = a->batch_size, .sgd = a->sgd, .seed = a->seed, .origin = a->origin,
        .shared_replica = a->shared_replica, .bufpool = a->bufpool
    };
    //  One replica per split point in use: a worker builds an activation
    //  context for each.
    for (int i = 0; i < self->replicas_count; i++) {
        bool seen = false;
        for (int k = 0; k < wa.owners_count && !seen; k++)
            seen = nn_model_unit_begin (wa.owners[k]) == self->split[i];
        if (!seen)
            wa.owners[wa.owners_count++] = self->rep[i].model;
    }
    for (int i = 0; i < a->workers; i++) {
        self->worker_rep[i] = -1;
        self->workers[i] = zactor_new (srv_worker_actor, &wa);
        if (!self->workers[i]) {
            pl_log_error ("server: cannot start worker %d", i);
            return -1;
        }
        self->workers_count = i + 1;
        if (self->poller)
            zpoller_add (self->poller, self->workers[i]);
    }
    return 0;
}

static int
s_index (const srv_pool_t *self, const void *which)
{
    for (int i = 0; i < self->workers_count; i++)
        if ((const void *) self->workers[i] == which)
            return i;
    return -1;
}

//  Whether a worker's reply carries GRADIENTS (GRAD, or LAST: the step on
//  the replica follows).
static bool
s_is_grad (const char *tag)
{
    return streq (tag, "GRAD") || streq (tag, "LAST");
}

//  Reads one reply of worker w: the tag and its pointer. A GRAD or a STEP
//  frees the worker and its replica; a LAST marks the replica stepping.
//  0 or -1.
static int
s_read (srv_pool_t *self, int w, char **tag_p, void **ptr_p)
{
    *tag_p = NULL;
    *ptr_p = NULL;
    if (zsock_recv (self->workers[w], "sp", tag_p, ptr_p) || !*tag_p)
        return -1;
    int r = self->worker_rep[w];
    if (streq (*tag_p, "LAST")) {
        if (r >= 0)
            self->rep[r].stepping = true;
    }
    else
    if (streq (*tag_p, "GRAD") || streq (*tag_p, "STEP")) {
        if (r >= 0)
            self->rep[r].busy = self->rep[r].stepping = false;
        self->worker_rep[w] = -1;
    }
    return 0;
}

//  A synchronous request to worker w ("BUSY", "TL"); a GRAD or LAST still
//  on its way is kept for srv_pool_take_reply (a STEP is taken: s_read).
static void *
s_call (srv_pool_t *self, int w, const char *cmd)
{
    zsock_send (self->workers[w], "spp", cmd, NULL, NULL);
    while (true) {
        char *tag = NULL;
        void *ptr = NULL;
        if (s_read (self, w, &tag, &ptr))
            return NULL;
        bool match = streq (tag, cmd);
        bool grad = s_is_grad (tag);
        zstr_free (&tag);
        if (match)
            return ptr;
        if (grad) {
            assert (!self->kept_in[w]);
            self->kept[w] = ptr;
            self->kept_in[w] = true;
        }
    }
}

//  Stops the (idle) workers, keeping their timeline events.
static void
s_workers_stop (srv_pool_t *self, pl_timeline_t *timeline)
{
    for (int i = 0; i < self->workers_count; i++) {
        pl_timeline_t *tl = s_call (self, i, "TL");
        if (tl) {
            const pl_event_t *ev = pl_timeline_events (tl);
            for (size_t k = 0; k < pl_timeline_count (tl); k++)
                pl_timeline_add_event (timeline, &ev[k]);
            pl_timeline_destroy (&tl);
        }
        if (self->poller)
            zpoller_remove (self->poller, self->workers[i]);
        zactor_destroy (&self->workers[i]);
    }
    self->workers_count = 0;
}

srv_pool_t *
srv_pool_new (const srv_pool_args_t *args, char *err, size_t err_size)
{
    assert (args->replicas >= 1 && args->replicas <= S_MAX);
    assert (args->workers >= 1 && args->workers <= S_MAX);
    srv_pool_t *self = nn_calloc (1, sizeof *self);
    self->args = *args;
    self->spec = *args->spec;
    self->args.spec = &self->spec;
    memcpy (self->split, args->splits, sizeof (int) * (size_t) args->replicas);
    self->args.splits = self->split;
    //  Replicas start equal (same seed): FedAvg of equal models is the
    //  model, and sfl with one device equals the single-process trainer.
    for (int i = 0; i < args->replicas; i++) {
        s_replica_t *r = &self->rep[i];
        r->model = nn_model_new (&self->spec, self->split[i], self->spec.units_count, 1,
                                 err, err_size);
        if (!r->model) {
            srv_pool_destroy (&self);
            return NULL;
        }
        nn_rng_t rng;
        nn_rng_seed (&rng, args->seed);
        nn_model_init (r->model, &rng);
        r->queue = zlist_new ();
        self->replicas_count = i + 1;
    }
    if (s_workers_start (self)) {
        snprintf (err, err_size, "server: cannot start the compute workers");
        srv_pool_destroy (&self);
        return NULL;
    }
    return self;
}

void
srv_pool_destroy (srv_pool_t **self_p)
{
    srv_pool_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < self->workers_count; i++) {
        //  A run that ends early (aborted, interrupted) can leave a step in
        //  a worker: take its GRADIENTS (and a STEP after them) off the pipe
        //  before stopping it.
        while (self->worker_rep[i] >= 0) {
            char *tag = NULL;
            void *ptr = NULL;
            if (s_read (self, i, &tag, &ptr)) {
                zstr_free (&tag);
                break;
            }
            if (s_is_grad (tag) && ptr) {
                proto_msg_t *grad = ptr;
                proto_msg_destroy (&grad);
            }
            zstr_free (&tag);
        }
        self->worker_rep[i] = -1;
        if (self->poller)
            zpoller_remove (self->poller, self->workers[i]);
        zactor_destroy (&self->workers[i]);
    }
    for (int i = 0; i < S_MAX; i++)
        if (self->kept_in[i])
            proto_msg_destroy (&self->kept[i]);
    for (int i = 0; i < self->replicas_count; i++) {
        s_replica_t *r = &self->rep[i];
        srv_pool_discard (self, i);
        zlist_destroy (&r->queue);
        nn_model_destroy (&r->model);
    }
    nn_free (self);
    *self_p = NULL;
}

void
srv_pool_attach (srv_pool_t *self, zpoller_t *poller)
{
    self->poller = poller;
    for (int i = 0; i < self->workers_count; i++)
        zpoller_add (poller, self->workers[i]);
}

int
srv_pool_replicas (const srv_pool_t *self)
{
    return self->replicas_count;
}

int
srv_pool_workers (const srv_pool_t *self)
{
    return self->workers_count;
}

int
srv_pool_max_batch (const srv_pool_t *self)
{
    return self->args.max_batch;
}

nn_model_t *
srv_pool_model (srv_pool_t *self, int replica)
{
    assert (replica >= 0 && replica < self->replicas_count);
    return self->rep[replica].model;
}

bool
srv_pool_busy (const srv_pool_t *self, int replica)
{
    return self->rep[replica].busy;
}

size_t
srv_pool_queued (const srv_pool_t *self, int replica)
{
    const zlist_t *q = self->rep[replica].queue;
    return q ? zlist_size ((zlist_t *) q) : 0;
}

bool
srv_pool_pending (const srv_pool_t *self, int replica)
{
    const s_replica_t *r = &self->rep[replica];
    return (r->busy && !r->stepping) || srv_pool_queued (self, replica);
}

bool
srv_pool_stepping (const srv_pool_t *self)
{
    for (int i = 0; i < self->replicas_count; i++)
        if (self->rep[i].stepping)
            return true;
    return false;
}

void
srv_pool_enqueue (srv_pool_t *self, int replica, proto_msg_t **act_p)
{
    zlist_append (self->rep[replica].queue, *act_p);
    *act_p = NULL;
    srv_pool_dispatch (self);
}

void
srv_pool_discard (srv_pool_t *self, int replica)
{
    s_replica_t *r = &self->rep[replica];
    while (r->queue && zlist_size (r->queue)) {
        proto_msg_t *m = zlist_pop (r->queue);
        proto_msg_destroy (&m);
    }
}

void
srv_pool_dispatch (srv_pool_t *self)
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
        s_replica_t *r = &self->rep[pick];
        proto_msg_t *act = zlist_pop (r->queue);
        r->busy = true;
        self->worker_rep[w] = pick;
        zsock_send (self->workers[w], "spp", "ACT", act, r->model);
    }
}

int
srv_pool_recv (srv_pool_t *self, void *which, proto_msg_t **grad_p)
{
    *grad_p = NULL;
    int w = s_index (self, which);
    if (w < 0)
        return 0;
    char *tag = NULL;
    void *ptr = NULL;
    if (s_read (self, w, &tag, &ptr))
        return -1;
    int rc = 1;
    if (s_is_grad (tag))
        *grad_p = ptr;
    else
    if (streq (tag, "STEP"))
        rc = 2;
    else {
        pl_log_error ("server: unexpected worker reply \"%s\" (bug)", tag);
        rc = -1;
    }
    zstr_free (&tag);
    return rc;
}

int
srv_pool_take_reply (srv_pool_t *self, proto_msg_t **grad_p)
{
    for (int w = 0; w < S_MAX; w++)
        if (self->kept_in[w]) {
            *grad_p = self->kept[w];
            self->kept[w] = NULL;
            self->kept_in[w] = false;
            return 1;
        }
    return 0;
}

double
srv_pool_busy_s (srv_pool_t *self, double *per_worker)
{
    double sum = 0.0;
    for (int i = 0; i < self->workers_count; i++) {
        double *b = s_call (self, i, "BUSY");
        per_worker[i] = b ? *b : 0.0;
        sum += per_worker[i];
        nn_free (b);
    }
    return sum;
}

void
srv_pool_take_events (srv_pool_t *self, pl_timeline_t *timeline)
{
    for (int i = 0; i < self->workers_count; i++) {
        pl_timeline_t *tl = s_call (self, i, "TL");
        if (!tl)
            continue;
        const pl_event_t *ev = pl_timeline_events (tl);
        for (size_t k = 0; k < pl_timeline_count (tl); k++)
            pl_timeline_add_event (timeline, &ev[k]);
        pl_timeline_destroy (&tl);
    }
}

int
srv_pool_resize (srv_pool_t *self, int max_batch, pl_timeline_t *timeline)
{
    s_workers_stop (self, timeline);
    self->args.max_batch = max_batch;
    return s_workers_start (self);
}

int
srv_pool_resplit (srv_pool_t *self, const int *splits, const nn_model_t *full,
                  int max_batch, pl_timeline_t *timeline, char *err, size_t err_size)
{
    s_workers_stop (self, timeline);
    for (int i = 0; i < self->replicas_count; i++) {
        s_replica_t *r = &self->rep[i];
        assert (!r->busy && zlist_size (r->queue) == 0);
        if (splits[i] == self->split[i])
            continue;
        nn_model_destroy (&r->model);
        //  Weights from the merged model; momentum starts again at 0.
        r->model = nn_model_new (&self->spec, splits[i], self->spec.units_count, 1, err,
                                 err_size);
        if (!r->model)
            return -1;
        nn_model_copy_tensors (r->model, full);
        self->split[i] = splits[i];
    }
    self->args.max_batch = max_batch;
    return s_workers_start (self);
}
