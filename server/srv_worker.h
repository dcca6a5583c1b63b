/*  srv_worker.h: a server compute worker, one thread of the pool.

    The pool has one worker per core (at most one per device); the
    replicas (one per device in sfl/pipelearn, one shared in sl) belong to
    the reactor. A worker owns an activation context for B/N samples per
    split point in use (devices may train at different ones) and, for each
    step, points the one of the replica's split point at the replica
    (nn_model_use_slabs), so activation memory grows with the cores and
    the split points, and only the replicas' slabs grow with the devices.

    The reactor talks to a worker only by messages over the actor pipe:

    - "ACT", proto_msg_t *, nn_model_t * (picture "spp"): ACTIVATIONS
      (ownership moves to the worker) and the replica to train (lent: the
      reactor gives one replica to at most one worker at a time and does
      not touch it until the reply). The worker runs forward, softmax
      cross-entropy scaled by 1/N (m/B), backward with the input gradient, and
      replies "GRAD", proto_msg_t * (a GRADIENTS message routed like the
      ACTIVATIONS; ownership moves to the reactor) or "GRAD", NULL if it
      could not build one. For the ACTIVATIONS flagged LAST the reply is
      "LAST", proto_msg_t * (or NULL) instead: the worker then steps SGD on
      the replica and zeroes its gradients, and replies "STEP", NULL when
      done. The replica stays lent until "STEP": the device's last
      gradients go out before the step, which they do not need.
    - "BUSY", NULL: replies "BUSY", double * (nn_malloc'd seconds of compute
      since the last BUSY, the reactor's to free).
    - "TL", NULL: replies "TL", pl_timeline_t * (its events; ownership moves).
*/
#ifndef SRV_WORKER_H_INCLUDED
#define SRV_WORKER_H_INCLUDED

#include <czmq.h>

#include "nn_model.h"
#include "nn_optim.h"
#include "srv_bufpool.h"

typedef struct {
    const nn_model_spec_t *spec;    //  copied by the worker before it signals
    int max_batch;                  //  B / N of the device with the most samples
                                    //  per micro-batch
    int batch_size;                 //  B: a micro-batch of m samples has its loss
                                    //  scaled by m / B (= 1/N of its device)
    nn_sgd_t sgd;
    uint64_t seed;                  //  the run's seed: each step's dropout masks
                                    //  come from a stream named by its route
    double origin;                  //  timeline time 0 (pl_wall_clock)
    //  One replica per split point in use (a context for units P..U of
    //  each, which drops its own slabs for views of it at once).
    nn_model_t *owners[NN_MAX_UNITS];
    int owners_count;
    bool shared_replica;            //  sl: events as "server", else "server:dN"
    srv_bufpool_t *bufpool;         //  where GRADIENTS tensors come from (the
                                    //  reactor's; outlives the worker)
} srv_worker_args_t;

//  zactor function; args is a srv_worker_args_t * valid until it signals.
//  Signals 0 when ready, -1 if the context could not be built (then exits).
void srv_worker_actor (zsock_t *pipe, void *args);

#endif
