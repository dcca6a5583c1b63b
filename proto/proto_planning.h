/*  proto_planning.h: the planning messages (PROTOCOL.md, "Planning") and
    the assignment they carry, as proto_planning.c encodes and checks them.
    Part of proto's public interface (include proto_msg.h).

    The assignment (proto_assign_t) is what a device does in the run: its
    id, split point, micro-batch count, batch, mode, seed and time 0.
    WELCOME carries the first; a PLAN message carries a new one.
*/
#ifndef PROTO_PLANNING_H_INCLUDED
#define PROTO_PLANNING_H_INCLUDED

#include "proto_wire.h"

//  WELCOME and PLAN: the assignment (copied; checked when the message is
//  sent or received, the same way for both).
void proto_msg_set_assign (proto_msg_t *self, const proto_assign_t *assign);
const proto_assign_t *proto_msg_assign (const proto_msg_t *self);

//  WELCOME: ask for a PROFILE (sets / clears PROTO_FLAG_PROFILE).
void proto_msg_set_profile_request (proto_msg_t *self, bool request);
bool proto_msg_profile_requested (const proto_msg_t *self);

//  PROFILE. The setter copies; -1 (nothing set) if a field is out of range.
int proto_msg_set_profile (proto_msg_t *self, const proto_profile_t *profile);
const proto_profile_t *proto_msg_profile (const proto_msg_t *self);

//  PROBE: frame 1 plus payload_bytes bytes of payload (zeros). -1 if
//  reply_bytes exceeds PROTO_PROBE_MAX_BYTES.
int proto_msg_set_probe (proto_msg_t *self, const proto_probe_t *probe,
                         size_t payload_bytes);
const proto_probe_t *proto_msg_probe (const proto_msg_t *self);
size_t proto_msg_probe_payload_bytes (const proto_msg_t *self);

#endif
