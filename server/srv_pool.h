/*  srv_pool.h: the server replicas and the compute workers that train them.

    The pool owns the server-side replicas (units P_i..U of device i's
    split point: one per device, one shared in sl), the ACTIVATIONS waiting for each, and the worker actors
    (srv_worker.h), one per core and at most one per replica. A replica is
    lent to one worker at a time (its gradients accumulate across
    micro-batches) and replicas are served in turn, so one device's queue
    cannot starve the others'.

    Replies: the reactor polls the workers (srv_pool_attach) and reads a
    reply with srv_pool_recv. A GRAD that arrives while the pool waits for
    a worker's answer to a call (BUSY, TL) is kept, not handled: the
    reactor takes it with srv_pool_take_reply afterwards. Reading a reply
    frees its worker and replica at once, but for a mini-batch's last
    GRADIENTS: the worker steps SGD on the replica after sending them, and
    both stay lent until it says the step ended (srv_pool_recv returns 2;
    srv_pool_stepping meanwhile). What follows is the reactor's.
*/
#ifndef SRV_POOL_H_INCLUDED
#define SRV_POOL_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#include "nn_model.h"
#include "nn_optim.h"
#include "pl_timeline.h"
#include "proto_msg.h"
#include "srv_bufpool.h"

typedef struct _srv_pool_t srv_pool_t;

typedef struct {
    const nn_model_spec_t *spec;    //  borrowed; outlives the pool
    const int *splits;              //  P of each replica (replicas entries, copied):
                                    //  replica i holds units P_i..U
    int replicas;                   //  one per device, or one (sl)
    int workers;                    //  compute threads
    int max_batch;                  //  largest micro-batch a worker takes
    int batch_size;                 //  B
    uint64_t seed;                  //  replicas start as the seed's model
    nn_sgd_t sgd;
    double origin;                  //  timeline time 0
    bool shared_replica;            //  sl: one replica for every device
    srv_bufpool_t *bufpool;         //  GRADIENTS tensors; outlives the pool
} srv_pool_args_t;

//  Builds the replicas and starts the workers. NULL with err filled.
srv_pool_t *srv_pool_new (const srv_pool_args_t *args, char *err, size_t err_size);
//  Stops the workers (a step still in one is taken off its pipe and
//  dropped) and frees the replicas and their queues.
void srv_pool_destroy (srv_pool_t **self_p);

//  Poll the workers' pipes with poller (workers added now and whenever
//  they are restarted, removed when stopped).
void srv_pool_attach (srv_pool_t *self, zpoller_t *poller);

int srv_pool_replicas (const srv_pool_t *self);
int srv_pool_workers (const srv_pool_t *self);
int srv_pool_max_batch (const srv_pool_t *self);
//  Borrowed; the caller does not touch a busy replica's model.
nn_model_t *srv_pool_model (srv_pool_t *self, int replica);
//  ACTIVATIONS wait for the replica or are in a worker (their GRADIENTS
//  have not come back). Not when only the step after a mini-batch's last
//  GRADIENTS runs: the device may have them and send PARAMS meanwhile.
bool srv_pool_pending (const srv_pool_t *self, int replica);
//  Some replica's step (after its last GRADIENTS) still runs: its weights
//  are not to be read or replaced until the worker's STEP.
bool srv_pool_stepping (const srv_pool_t *self);
bool srv_pool_busy (const srv_pool_t *self, int replica);
size_t srv_pool_queued (const srv_pool_t *self, int replica);

//  ACTIVATIONS for replica (ownership moves), then idle workers get work.
void srv_pool_enqueue (srv_pool_t *self, int replica, proto_msg_t **act_p);
//  Drops the ACTIVATIONS still queued for replica (a device left).
void srv_pool_discard (srv_pool_t *self, int replica);
//  Gives queued ACTIVATIONS to idle workers.
void srv_pool_dispatch (srv_pool_t *self);

//  which is one of the pool's worker pipes: reads its reply. 1 with
//  *grad_p the GRADIENTS (ownership moves; NULL: the worker could not
//  build it), 2 when a replica's step ended (it is free again: dispatch
//  and let the round advance), 0 when which is not the pool's, -1 on a
//  broken reply.
int srv_pool_recv (srv_pool_t *self, void *which, proto_msg_t **grad_p);
//  A reply that arrived during a call: 1 with *grad_p as srv_pool_recv,
//  0 when none is kept.
int srv_pool_take_reply (srv_pool_t *self, proto_msg_t **grad_p);

//  Seconds of compute per worker since the last call (workers values);
//  returns the sum.
double srv_pool_busy_s (srv_pool_t *self, double *per_worker);
//  Moves the workers' timeline events into timeline.
void srv_pool_take_events (srv_pool_t *self, pl_timeline_t *timeline);

//  Restart the workers for micro-batches of up to max_batch samples
//  (keeping their events in timeline). Only between rounds (no replica
//  lent). 0 or -1.
int srv_pool_resize (srv_pool_t *self, int max_batch, pl_timeline_t *timeline);
//  Rebuild each replica whose split point splits[i] differs from the one
//  it holds, from full's weights (its optimiser state starts again at 0;
//  the others keep theirs), and restart the workers for max_batch. Only
//  between rounds. 0 or -1 with err filled.
int srv_pool_resplit (srv_pool_t *self, const int *splits, const nn_model_t *full,
                      int max_batch, pl_timeline_t *timeline, char *err, size_t err_size);

#endif
