/*  srv_parts.c: device parts, merged model, replicas. See srv_parts.h. */
#include "srv_parts.h"

#include <assert.h>
#include <string.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "pl_log.h"
#include "srv_ckpt.h"

int
srv_parts_split (const srv_t *self, int id)
{
    return self->mode == PL_MODE_FL ? self->units : self->assign.split[id];
}

nn_model_t *
srv_parts_device (srv_t *self, int id)
{
    nn_model_t *part = self->part[srv_parts_split (self, id)];
    assert (part);
    return part;
}

size_t
srv_parts_device_count (const srv_t *self, int id)
{
    const nn_model_t *part = self->part[srv_parts_split (self, id)];
    assert (part);
    return nn_model_weights_count (part);
}

nn_model_t *
srv_parts_widest (srv_t *self)
{
    //  The parts built (srv_parts_build), which during a re-split are the
    //  old assignment's.
    for (int p = NN_MAX_UNITS; p >= 0; p--)
        if (self->part[p])
            return self->part[p];
    assert (false);
    return NULL;
}

//  The proto limits every device's messages are checked against. With
//  devices at different split points the boundary shape and the slab size
//  differ by device: proto checks neither and srv_inbox.c checks each
//  against the device's own.
static void
s_limits (srv_t *self)
{
    self->limits.max_batch = (uint32_t) srv_assign_max_micro_batch (&self->assign,
                                                                    self->batch);
    if (self->mode != PL_MODE_FL && srv_assign_mixed (&self->assign)) {
        self->limits.slab_count = self->limits.buffer_count = 0;
        self->limits.h = self->limits.w = self->limits.c = 0;
        return;
    }
    const nn_model_t *part = srv_parts_device (self, 0);
    self->limits.slab_count = nn_model_weights_count (part);
    self->limits.buffer_count = nn_model_weights_count (part) - nn_model_params_count (part);
    if (self->mode == PL_MODE_FL)
        return;
    nn_shape_t s = nn_model_output_shape (part);
    self->limits.h = (uint32_t) s.h;
    self->limits.w = (uint32_t) s.w;
    self->limits.c = (uint32_t) s.c;
}

int
srv_parts_build (srv_t *self)
{
    char err[NN_ERR_SIZE];
    bool used[NN_MAX_UNITS + 1] = { false };
    for (int i = 0; i < self->devices; i++)
        used[srv_parts_split (self, i)] = true;
    for (int p = 0; p <= NN_MAX_UNITS; p++) {
        if (!used[p]) {
            nn_model_destroy (&self->part[p]);
            continue;
        }
        if (!self->part[p]) {
            self->part[p] = nn_model_new (&self->spec, 0, p, 1, err, sizeof err);
            if (!self->part[p]) {
                pl_log_error ("server: device part at split point %d: %s", p, err);
                return -1;
            }
        }
        nn_model_copy_tensors (self->part[p], self->full);
    }
    s_limits (self);
    return 0;
}

void
srv_parts_merge (srv_t *self)
{
    int id = 0;
    for (int i = self->devices - 1; i >= 0; i--)
        if (self->dev[i].active)
            id = i;
    if (self->pool) {
        int r = self->mode == PL_MODE_SL ? 0 : id;
        nn_model_copy_tensors (self->full, srv_pool_model (self->pool, r));
    }
    nn_model_copy_tensors (self->full, srv_parts_widest (self));
}

bool
srv_parts_finite (const srv_t *self)
{
    for (int p = 0; p <= NN_MAX_UNITS; p++) {
        const nn_model_t *m = self->part[p];
        size_t n = m ? nn_model_weights_count (m) : 0;
        if (m && srv_first_nonfinite (nn_model_weights_const (m), n) < n)
            return false;
    }
    for (int i = 0; self->pool && i < srv_pool_replicas (self->pool); i++) {
        const nn_model_t *m = srv_pool_model (self->pool, i);
        size_t n = nn_model_weights_count (m);
        if (srv_first_nonfinite (nn_model_weights_const (m), n) < n)
            return false;
    }
    return true;
}

int
srv_parts_workers (const srv_t *self)
{
    int cores = self->cfg->threads > 0 ? self->cfg->threads
                                      : (int) sysconf (_SC_NPROCESSORS_ONLN);
    int replicas = self->mode == PL_MODE_SL ? 1 : self->devices;
    if (cores < 1)
        cores = 1;
    return cores < replicas ? cores : replicas;
}

int
srv_parts_resize (srv_t *self)
{
    if (!self->pool)
        return 0;
    int mb = srv_assign_max_micro_batch (&self->assign, self->batch);
    self->limits.max_batch = (uint32_t) mb;
    if (mb <= srv_pool_max_batch (self->pool))
        return 0;
    //  Called between rounds: every replica is home, no step in flight.
    return srv_pool_resize (self->pool, mb, self->timeline);
}

int
srv_parts_resplit (srv_t *self)
{
    char err[NN_ERR_SIZE];
    srv_parts_merge (self);
    if (srv_parts_build (self))
        return -1;
    int mb = srv_assign_max_micro_batch (&self->assign, self->batch);
    if (srv_pool_resplit (self->pool, self->assign.split, self->full, mb, self->timeline,
                          err, sizeof err)) {
        pl_log_error ("server: re-split: %s", err);
        return -1;
    }
    for (int i = 0; i < SRV_MAX_DEVICES; i++) {
        nn_free (self->dev[i].params);
        self->dev[i].params = self->dev[i].joined
                            ? nn_malloc (sizeof (float) * srv_parts_device_count (self, i))
                            : NULL;
    }
    return 0;
}

void
srv_parts_checkpoint (srv_t *self)
{
    nn_model_t *reps[SRV_MAX_DEVICES];
    if (!srv_parts_finite (self)) {
        pl_log_error ("server: the model holds non-finite weights at epoch %d, iteration "
                      "%u; not checkpointed (the newest checkpoint is the last finite "
                      "model)", self->epoch, self->round_iter);
        self->rc = 1;
        return;
    }
    int n = self->pool ? srv_pool_replicas (self->pool) : 0;
    for (int i = 0; i < n; i++)
        reps[i] = srv_pool_model (self->pool, i);
    char err[NN_ERR_SIZE];
    srv_ckpt_point_t pt = { self->epoch, self->round_iter, self->origin };
    if (srv_ckpt_save (self->results, SRV_CKPT_KEEP, pt, self->cfg, &self->assign,
                       srv_parts_widest (self), reps, n, pl_summary_epochs (self->summary),
                       err, sizeof err))
        pl_log_error ("server: %s (the run goes on without this checkpoint)", err);
}
