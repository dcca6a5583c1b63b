/*  srv_inbox.h: every message from a device and every reply from a worker
    arrives here and is checked here, beyond what proto checks (shapes,
    sizes, the protocol state): the round, the epoch, the turn, sample
    counts, finite values. A handler records what happened (or drops the
    device that broke the rules); it decides nothing about what follows:
    that is srv_round_advance's (srv_step.c), which the reactor loop
    calls after each handler.
*/
#ifndef SRV_INBOX_H_INCLUDED
#define SRV_INBOX_H_INCLUDED

#include "srv_internal.h"

//  One message waiting on the ROUTER (none is not an error).
void srv_inbox_router (srv_t *self);
//  A worker's GRADIENTS (ownership moves; NULL: the worker could not build
//  one, which ends the run): counted, sent to its device.
void srv_inbox_gradients (srv_t *self, proto_msg_t *grad);
//  Devices that hold up the round (silent for device_timeout_s while they
//  should be sending, or not done round_timeout_s after it began) and
//  probes without an answer are dropped.
void srv_inbox_deadlines (srv_t *self);

#endif
