/*  srv_parts.c: device part, merged model, replicas. See srv_parts.h. */
#include "srv_parts.h"

#include <string.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "pl_log.h"
#include "srv_ckpt.h"

void
srv_parts_merge (srv_t *self)
{
    nn_model_copy_tensors (self->full, self->devpart);
    if (self->pool)
        //  After aggregation every replica holds the average.
        nn_model_copy_tensors (self->full, srv_pool_model (self->pool, 0));
}

bool
srv_parts_finite (const srv_t *self)
{
    if (srv_first_nonfinite (nn_model_weights_const (self->devpart), self->dev_wcount)
        < self->dev_wcount)
        return false;
    for (int i = 0; self->pool && i < srv_pool_replicas (self->pool); i++)
        if (srv_first_nonfinite (nn_model_weights_const (srv_pool_model (self->pool, i)),
                                 self->srv_wcount) < self->srv_wcount)
            return false;
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
    int split = srv_assign_split (&self->assign);
    srv_parts_merge (self);
    nn_model_t *devpart = nn_model_new (&self->spec, 0, split, 1, err, sizeof err);
    if (!devpart) {
        pl_log_error ("server: re-split: %s", err);
        return -1;
    }
    nn_model_copy_tensors (devpart, self->full);
    nn_model_destroy (&self->devpart);
    self->devpart = devpart;
    self->dev_wcount = nn_model_weights_count (devpart);
    int mb = srv_assign_max_micro_batch (&self->assign, self->batch);
    if (srv_pool_resplit (self->pool, split, self->full, mb, self->timeline, err,
                          sizeof err)) {
        pl_log_error ("server: re-split: %s", err);
        return -1;
    }
    self->srv_wcount = nn_model_weights_count (srv_pool_model (self->pool, 0));
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
    self->limits.max_batch = (uint32_t) mb;
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
                       self->devpart, reps, n, pl_summary_epochs (self->summary), err,
                       sizeof err))
        pl_log_error ("server: %s (the run goes on without this checkpoint)", err);
}
