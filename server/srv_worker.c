/*  srv_worker.c: one thread of the server's compute pool: trains the
    replica each ACTIVATIONS is for. See srv_worker.h. */
#include "srv_worker.h"

#include <assert.h>

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "pl_log.h"
#include "pl_timeline.h"
#include "proto_msg.h"

#include <string.h>
#include <time.h>

typedef struct {
    //  Activation contexts by split point (NULL for one not in use); slabs
    //  lent per step.
    nn_model_t *ctx[NN_MAX_UNITS + 1];
    nn_model_t *model;          //  the context of the step in progress
    bool shared_replica;
    int batch_size;
    int classes;
    nn_sgd_t sgd;
    nn_rng_t rng;               //  seeded with the run's seed; split per step
    int *labels;                //  (max_batch)
    float *dlogits;             //  (max_batch, classes)
    pl_timeline_t *timeline;
    double origin;
    double busy_s;
    srv_bufpool_t *bufpool;     //  the reactor's: GRADIENTS tensors
    //  The mini-batch's last GRADIENTS went out; the SGD step on the
    //  replica (self->model's slabs) follows: its route, for the timeline.
    bool step_due;
    int step_epoch, step_iteration;
    uint16_t step_device;
} s_worker_t;

//  The timeline's name for the replica's lane.
static void
s_who (const s_worker_t *self, char *who, size_t size, uint32_t device_id)
{
    if (self->shared_replica)
        snprintf (who, size, "server");
    else
        snprintf (who, size, "server:d%u", device_id & 0xffff);
}

//  After the last micro-batch's GRADIENTS left: SGD on the replica and its
//  gradients zeroed, an "update" row in the timeline (as a device's).
static void
s_worker_step_after (s_worker_t *self)
{
    self->step_due = false;
    double t0 = pl_monotonic (), s0 = pl_timeline_now (self->timeline);
    nn_sgd_step (nn_model_weights (self->model), nn_model_optim_state (self->model),
                 nn_model_grads (self->model), nn_model_params_count (self->model),
                 &self->sgd);
    nn_model_zero_grad (self->model);
    self->busy_s += pl_monotonic () - t0;
    char who[24];
    s_who (self, who, sizeof who, self->step_device);
    pl_timeline_add (self->timeline, who, "update", self->step_epoch, self->step_iteration,
                     -1, s0, pl_timeline_now (self->timeline));
}

//  Forward, loss and backward for one micro-batch. The ACTIVATIONS were
//  validated by proto against the run's limits (rank 4, boundary shape,
//  batch <= max_batch, labels in range), so no peer value can break this.
static proto_msg_t *
s_worker_step (s_worker_t *self, proto_msg_t **act_p, nn_model_t *replica)
{
    proto_msg_t *act = *act_p;
    self->model = self->ctx[nn_model_unit_begin (replica)];
    //  The pool builds a context for every replica's split point.
    assert (self->model);
    nn_model_use_slabs (self->model, replica);
    const proto_header_t *h = proto_msg_header (act);
    const proto_tensor_desc_t *d = proto_msg_tensor (act);
    int n = (int) d->dims[0];
    const int32_t *labels = proto_msg_labels (act);
    for (int i = 0; i < n; i++)
        self->labels[i] = labels[i];
    //  Dropout in the server's units (vgg11's dense ones): masks drawn from
    //  a stream named by the step (device, epoch, iteration, micro-batch),
    //  so a run is reproducible whichever worker takes the step.
    uint64_t stream = ((uint64_t) (h->device_id & 0xffff) << 48)
                    ^ ((uint64_t) (h->epoch & 0xffff) << 32)
                    ^ ((uint64_t) (h->iteration & 0xffffff) << 8) ^ (h->micro_batch & 0xff);
    nn_rng_t step_rng = nn_rng_split (&self->rng, stream);
    double t0 = pl_monotonic (), s0 = pl_timeline_now (self->timeline);
    const float *out = nn_model_forward (self->model, proto_msg_tensor_data (act), n,
                                         true, &step_rng);
    int correct = 0;
    float loss = nn_softmax_xent (self->dlogits, out, self->labels, n, self->classes,
                                  (float) n / (float) self->batch_size, &correct);
    size_t in_count = proto_msg_tensor_count (act);
    float *dx = srv_bufpool_zeroed (self->bufpool, sizeof (float) * in_count);
    if (!dx) {
        pl_log_error ("server worker: out of memory for a GRADIENTS tensor");
        proto_msg_destroy (act_p);
        return NULL;
    }
    nn_model_backward (self->model, self->dlogits, dx);
    bool last = proto_msg_is_last (act);
    //  The step waits until the GRADIENTS are on their way (s_worker_step_after):
    //  the device needs only them, and a large server part's step (ResNet18's
    //  11 M parameters: 13-15 ms on one core) would hold the last one back.
    if (last) {
        self->step_due = true;
        self->step_epoch = (int) h->epoch;
        self->step_iteration = (int) h->iteration;
        self->step_device = (uint16_t) (h->device_id & 0xffff);
    }
    self->busy_s += pl_monotonic () - t0;
    char who[24];
    s_who (self, who, sizeof who, h->device_id);
    pl_timeline_add (self->timeline, who, "compute", (int) h->epoch,
                     (int) h->iteration, (int) h->micro_batch, s0,
                     pl_timeline_now (self->timeline));

    proto_msg_t *grad = proto_msg_new (PROTO_MSG_GRADIENTS);
    proto_msg_set_route (grad, h->device_id, h->epoch, h->iteration, h->micro_batch);
    proto_msg_set_last (grad, last);
    uint32_t dims[PROTO_MAX_RANK];
    memcpy (dims, d->dims, sizeof dims);
    if (proto_msg_set_tensor_owned (grad, &dx, dims, d->rank, srv_bufpool_free)) {
        srv_bufpool_free (dx);
        proto_msg_destroy (&grad);
        proto_msg_destroy (act_p);
        return NULL;
    }
    proto_loss_t l = { .loss = loss, .correct = (uint32_t) correct, .count = (uint32_t) n };
    proto_msg_set_loss (grad, &l);
    proto_msg_destroy (act_p);
    return grad;
}

void
srv_worker_actor (zsock_t *pipe, void *args_)
{
    const srv_worker_args_t *args = args_;
    char err[NN_ERR_SIZE];
    s_worker_t self = { .batch_size = args->batch_size, .sgd = args->sgd,
                        .origin = args->origin, .shared_replica = args->shared_replica,
                        .bufpool = args->bufpool };
    nn_rng_seed (&self.rng, args->seed ^ 0x5e7e5e7e5e7e5e7eull);
    for (int k = 0; k < args->owners_count; k++) {
        int p = nn_model_unit_begin (args->owners[k]);
        nn_model_t *ctx = nn_model_new (args->spec, p, args->spec->units_count,
                                        args->max_batch, err, sizeof err);
        if (!ctx) {
            pl_log_error ("server worker: %s", err);
            for (int u = 0; u <= NN_MAX_UNITS; u++)
                nn_model_destroy (&self.ctx[u]);
            zsock_signal (pipe, 1);
            return;
        }
        //  Never use the context's own slabs: free them before they cost RSS.
        nn_model_use_slabs (ctx, args->owners[k]);
        self.ctx[p] = ctx;
    }
    self.classes = args->spec->classes;
    self.labels = nn_malloc (sizeof (int) * (size_t) args->max_batch);
    self.dlogits = nn_malloc (sizeof (float) * (size_t) args->max_batch
                              * (size_t) self.classes);
    self.timeline = pl_timeline_new (args->origin);
    zsock_signal (pipe, 0);

    while (true) {
        char *cmd = NULL;
        void *ptr = NULL, *replica = NULL;
        if (zsock_recv (pipe, "spp", &cmd, &ptr, &replica) || !cmd)
            break;                      //  interrupted
        if (streq (cmd, "$TERM")) {
            zstr_free (&cmd);
            break;
        }
        if (streq (cmd, "ACT")) {
            proto_msg_t *act = ptr;
            proto_msg_t *grad = s_worker_step (&self, &act, replica);
            if (self.step_due) {
                //  "LAST": the replica stays lent until "STEP".
                zsock_send (pipe, "sp", "LAST", grad);
                s_worker_step_after (&self);
                zsock_send (pipe, "sp", "STEP", NULL);
            }
            else
                zsock_send (pipe, "sp", "GRAD", grad);
        }
        else
        if (streq (cmd, "BUSY")) {
            double *busy = nn_malloc (sizeof *busy);
            *busy = self.busy_s;
            self.busy_s = 0.0;
            zsock_send (pipe, "sp", "BUSY", busy);
        }
        else
        if (streq (cmd, "TL")) {
            pl_timeline_t *tl = self.timeline;
            self.timeline = pl_timeline_new (self.origin);
            zsock_send (pipe, "sp", "TL", tl);
        }
        else
            pl_log_error ("server worker: unknown command \"%s\" (bug)", cmd);
        zstr_free (&cmd);
    }
    pl_timeline_destroy (&self.timeline);
    nn_free (self.labels);
    nn_free (self.dlogits);
    for (int u = 0; u <= NN_MAX_UNITS; u++)
        nn_model_destroy (&self.ctx[u]);
}
