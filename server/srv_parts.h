/*  srv_parts.h: the model's parts on the server: the device parts (one per
    split point in use), the merged model, and the server replicas
    (srv_pool.h), rebuilt when the assignment moves a split point or raises
    the largest micro-batch. Internal to the server (srv_internal.h); calls
    no other server file but the pool.

    Devices may train at different split points (pipelearn, sfl): device i
    holds units 0..P_i-1 and its replica P_i..U. Every unit is held by one
    part of each device, so FedAvg per unit over every holder (srv_step.c)
    is FedAvg over the devices of each one's two parts laid end to end.
*/
#ifndef SRV_PARTS_H_INCLUDED
#define SRV_PARTS_H_INCLUDED

#include "srv_internal.h"

//  The split point device id trains at (fl: units, the whole model).
int srv_parts_split (const srv_t *self, int id);
//  Device id's part (units 0..P_i-1): what MODEL sends it and its PARAMS
//  update. Borrowed; shared by the devices at that split point.
nn_model_t *srv_parts_device (srv_t *self, int id);
//  Floats of device id's part (its MODEL and PARAMS slab).
size_t srv_parts_device_count (const srv_t *self, int id);
//  The part at the largest split point built (what a checkpoint saves:
//  with any replica it covers every unit).
nn_model_t *srv_parts_widest (srv_t *self);
//  The device parts for the split points of self->assign, from the merged
//  model (parts no device trains at are freed), and the message limits
//  that follow. 0 or -1 (logged).
int srv_parts_build (srv_t *self);
//  Merge the device parts and a server replica into the full model: the
//  replica of the first active device (device 0 when none is), then the
//  widest part. Between rounds every holder of a unit holds the same
//  values, so any replica gives the same model.
void srv_parts_merge (srv_t *self);
//  Every weight of the device parts and of the replicas is finite. Updates
//  are checked before they are averaged; this is the last line before a
//  model reaches the disk.
bool srv_parts_finite (const srv_t *self);
//  Move the split points to self->assign's at an aggregation point (or
//  before the start): the merged model is cut again, the parts and the
//  replicas whose split point moved rebuilt, workers restarted, the
//  message limits follow. 0 or -1 (logged).
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
