/*  srv_wire.h: the server's side of what crosses the split: each device's
    codecs (the config's, or the planner's choice for "auto"; named in
    WELCOME and PLAN), the check that its
    ACTIVATIONS come in its up codec, and the encoders of its GRADIENTS.

    The sender owns an encoder: the server holds one per device for the
    gradients it sends (topk's residual is per device replica). The
    residual is kept from step to step within a round (error feedback) and
    dropped when a new model starts (a round's first GRADIENTS after an
    aggregation), when the gradient's shape changes (a PLAN moved the split
    point or N), when the device's session starts again (a rejoin) and on a
    resume (residuals are not checkpointed), as PROTOCOL.md's "Codecs" says:
    the residual belongs to the model it was computed on.
*/
#ifndef SRV_WIRE_H_INCLUDED
#define SRV_WIRE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "pl_config.h"
#include "proto_msg.h"

typedef struct _srv_wire_t srv_wire_t;

//  For the config's devices; seed names int8's stochastic rounding streams.
srv_wire_t *srv_wire_new (const pl_config_t *cfg);
void srv_wire_destroy (srv_wire_t **self_p);

//  Device id's codecs into a WELCOME or PLAN assignment.
void srv_wire_assign (const srv_wire_t *self, int id, proto_assign_t *plan);
//  Device id's codecs (for the summary): the config's, or the planner's
//  choice for an "auto" direction (auto_up / auto_down as configured).
pl_codecs_t srv_wire_codecs (const srv_wire_t *self, int id);
//  The planner chose device id's codecs (an "auto" direction): they hold
//  for the GRADIENTS it is sent and the ACTIVATIONS it sends from the next
//  MODEL on (the server tells it in a PLAN). A new down codec starts a new
//  encoder. codecs.up is never topk.
void srv_wire_set_codecs (srv_wire_t *self, int id, pl_codecs_t codecs);

//  Device id has a new session: its encoder starts afresh.
void srv_wire_reset (srv_wire_t *self, int id);

//  ACTIVATIONS from device id (proto decoded the payload): 0 when they
//  travel in its up codec, else -1 with a message naming both.
int srv_wire_check_activations (const srv_wire_t *self, int id, const proto_msg_t *act,
                                char *why, size_t why_size);

//  GRADIENTS for device id: replace the f32 tensor with its down codec's
//  payload (nothing for none). round names the model the gradient belongs
//  to (epoch and the round's first iteration): a new one drops topk's
//  residual. 0, or -1 with a message (the message is left unchanged).
int srv_wire_encode_gradients (srv_wire_t *self, int id, uint64_t round, proto_msg_t *grad,
                               char *why, size_t why_size);

#endif
