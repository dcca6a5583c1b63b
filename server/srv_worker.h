/*  srv_worker.h: one server-side replica (units P..U) in its own thread.

    The reactor talks to a worker only by messages over the actor pipe,
    every one a picture "sp" (command, pointer):

    - "ACT", proto_msg_t * (ACTIVATIONS; ownership moves to the worker).
      The worker runs forward, softmax cross-entropy scaled by 1/N, backward
      with the input gradient, and replies "GRAD", proto_msg_t * (a
      GRADIENTS message routed like the ACTIVATIONS; ownership moves to the
      reactor) or "GRAD", NULL if it could not build one. After the message
      flagged LAST it steps SGD and zeroes the gradients.
    - "GETW", NULL: replies "WGTS", float * (an nn_malloc copy of the weights
      slab, the reactor's to free).
    - "SETW", const float *: copies the slab in (the pointer is borrowed
      until the reply), replies "OK", NULL.
    - "BUSY", NULL: replies "BUSY", double * (nn_malloc'd seconds of compute
      since the last BUSY, the reactor's to free).
    - "TL", NULL: replies "TL", pl_timeline_t * (its events; ownership moves).

    Synchronous commands are only sent while no ACT is in flight for the
    worker (aggregation happens after every device has all its gradients),
    but the reactor still tolerates a "GRAD" reply while it waits.
*/
#ifndef SRV_WORKER_H_INCLUDED
#define SRV_WORKER_H_INCLUDED

#include <czmq.h>

#include "nn_model.h"
#include "nn_optim.h"

typedef struct {
    const nn_model_spec_t *spec;    //  copied by the worker before it signals
    int unit_begin;                 //  split point P
    int max_batch;                  //  B / N
    int micro_batches;              //  N: loss scale 1/N
    uint64_t seed;                  //  replica initialisation
    nn_sgd_t sgd;
    double origin;                  //  timeline time 0 (pl_wall_clock)
    char who[16];                   //  timeline "who", e.g. "server:d0"
} srv_worker_args_t;

//  zactor function; args is a srv_worker_args_t * valid until it signals.
//  Signals 0 when ready, -1 if the replica could not be built (then exits).
void srv_worker_actor (zsock_t *pipe, void *args);

#endif
