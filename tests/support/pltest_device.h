/*  pltest_device.h: a device scripted by a test with libzmq and proto: it
    joins the real pipelearn-server as pipelearn-client would (HELLO,
    WELCOME, MODEL) and then sends exactly what the test says, to check
    what the server does with it (a hostile payload, or one micro-batch at
    a time). Every wait fails the test after PLTEST_DEVICE_WAIT_MS. */
#ifndef PLTEST_DEVICE_H_INCLUDED
#define PLTEST_DEVICE_H_INCLUDED

#include <stdint.h>

#include "proto_msg.h"

#define PLTEST_DEVICE_WAIT_MS 30000

typedef struct {
    void *ctx, *sock;
    proto_assign_t plan;        //  from WELCOME (or the last PLAN)
    proto_slab_t slab;          //  of the last MODEL
    float *w;                   //  its weights (slab.count), owned
    uint32_t epoch, iter;       //  where the MODEL's round starts
} pltest_device_t;

//  HELLO as device id, then WELCOME. rcvhwm > 0 limits its receive queue.
void pltest_device_join (pltest_device_t *self, const char *endpoint, int id, int rcvhwm);
//  The next message that is not a HEARTBEAT (the caller destroys it);
//  `what` names the wait in the failure.
proto_msg_t *pltest_device_recv (pltest_device_t *self, const char *what);
//  Wait for MODEL (training started; PLANs before it update self->plan)
//  and keep its weights.
void pltest_device_model (pltest_device_t *self);
//  ACTIVATIONS of micro-batch mb of the round's first iteration at the
//  plan's split point (model vgg5 on 28x28x1 inputs), every value
//  `value`, labels 0..9 in turn.
void pltest_device_activations (pltest_device_t *self, float value, uint32_t mb);
void pltest_device_close (pltest_device_t *self);

#endif
