/*  srv_calib.h: re-estimating the BN running statistics of the averaged
    model after an epoch (config bn_calibration_batches; PROTOCOL.md,
    "Calibration").

    FedAvg averages each device's BN running statistics, but every device
    estimated its own for its own weights: for the averaged weights they
    are out of step, and a model with BN can evaluate near chance after an
    epoch whose devices drifted apart (ResNet18, one epoch: 10.6% in the
    daemons, 21.7% in PyTorch's same recipe; re-estimated, 70%). So after
    the epoch's aggregation, before it is evaluated, the server sends every
    active device the averaged model in a MODEL with CALIBRATE; each
    forwards bn_calibration_batches mini-batches of its shard in training
    mode through its part, each batch weighing the same, sends their
    activations up with CALIBRATE in micro-batches (split modes: the server
    gathers each mini-batch and forwards it through its own copy of the
    device's server units, no GRADIENTS come back) and its part's buffers in a PARAMS with CALIBRATE. Each BN
    layer's statistics are then pooled over the devices as the mixture of
    their shards (nn_bn_pool), written to the merged model and from there
    to every part and replica. Training does not read running statistics,
    so only the evaluation, the checkpoints and the saved model see them.

    Internal to the server; srv_step.c drives it, srv_inbox.c feeds it.
*/
#ifndef SRV_CALIB_H_INCLUDED
#define SRV_CALIB_H_INCLUDED

#include "srv_internal.h"

//  The config asks for calibration and the model has BN.
bool srv_calib_wanted (const srv_t *self);
//  Set it up for every active device (self->full holds the averaged
//  model): true when it is on (self->calibrating; the caller sends each
//  active device its MODEL with CALIBRATE), false when there is nothing to
//  do or it could not start (logged; the epoch goes on uncalibrated).
bool srv_calib_begin (srv_t *self);
//  ACTIVATIONS or PARAMS with CALIBRATE from d (allowed by proto's state
//  machine). Out of place, malformed or non-finite: d is dropped.
void srv_calib_on_activations (srv_t *self, srv_device_t *d, const proto_msg_t *msg);
void srv_calib_on_params (srv_t *self, srv_device_t *d, const proto_msg_t *msg);
//  Every active device has sent all of it.
bool srv_calib_complete (const srv_t *self);
//  Pool the statistics into the merged model, the parts and the replicas,
//  free the calibration state, and record its time for the epoch.
void srv_calib_finish (srv_t *self);
//  Free one device's calibration state (it left, or the run ends).
void srv_calib_release (srv_device_t *d);

#endif
