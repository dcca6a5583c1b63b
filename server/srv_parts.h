/*  srv_parts.h: the model's parts on the server: the device part, the
    merged model, and the server replicas (srv_pool.h), rebuilt when the
    assignment moves the split point or raises the largest micro-batch.
    Internal to the server (srv_internal.h); calls no other server file
    but the pool.
*/
#ifndef SRV_PARTS_H_INCLUDED
#define SRV_PARTS_H_INCLUDED

#include "srv_internal.h"

//  Merge the current device part and server part into the full model.
void srv_parts_merge (srv_t *self);
//  Every weight of the device part and of the replicas is finite. Updates
//  are checked before they are averaged; this is the last line before a
//  model reaches the disk.
bool srv_parts_finite (const srv_t *self);
//  Move the split to self->assign's at an aggregation point (or before the
//  start): the merged model is cut again, replicas and workers rebuilt,
//  the message limits follow. 0 or -1 (logged).
int srv_parts_resplit (srv_t *self);
//  The workers and limits for the largest micro-batch of self->assign
//  (workers restart only when it grew). 0 or -1.
int srv_parts_resize (srv_t *self);
//  Compute workers for the run: one per core (config threads, 0 = all
//  cores), at most one per replica.
int srv_parts_workers (const srv_t *self);
//  Checkpoint the round about to begin (self->epoch, self->round_iter;
//  crash safety, see srv_ckpt.h). A non-finite model is never written
//  (rc becomes 1): the newest checkpoint stays the last good one.
void srv_parts_checkpoint (srv_t *self);

#endif
