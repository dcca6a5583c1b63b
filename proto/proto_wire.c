/*  proto_wire.c: names of the wire's types, codes and stages. See
    proto_wire.h. */
#include "proto_wire.h"

#include <string.h>

#define S_TYPE_MAX       PROTO_MSG_PLAN

static const char *const s_type_names[S_TYPE_MAX + 1] = {
    NULL, "HELLO", "WELCOME", "MODEL", "ACTIVATIONS", "GRADIENTS", "PARAMS",
    "EVAL", "STATS", "HEARTBEAT", "BYE", "ERROR", "EVENTS", "PROFILE", "PROBE", "PLAN"
};

static const char *const s_stage_names[PROTO_STAGE_MAX + 1] = {
    NULL, "forward", "backward", "update", "wait", "upload"
};


//  ---------------------------------------------------------------------
//  Names and codes

const char *
proto_type_name (int type)
{
    return type >= 1 && type <= S_TYPE_MAX ? s_type_names[type] : "UNKNOWN";
}

const char *
proto_strerror (int code)
{
    switch (code) {
        case PROTO_OK:        return "ok";
        case PROTO_E_AGAIN:   return "no message (timeout, interrupted or terminated)";
        case PROTO_E_SOCKET:  return "socket error";
        case PROTO_E_MAGIC:   return "bad magic (not a pipelearn message)";
        case PROTO_E_VERSION: return "unsupported protocol version";
        case PROTO_E_TYPE:    return "unknown message type";
        case PROTO_E_FRAMES:  return "wrong number of frames";
        case PROTO_E_SIZE:    return "frame size wrong or over the limit";
        case PROTO_E_SHAPE:   return "tensor shape invalid or unexpected";
        case PROTO_E_LABEL:   return "label out of range";
        case PROTO_E_VALUE:   return "field value out of range";
        case PROTO_E_TEXT:    return "invalid text";
        case PROTO_E_SPEC:    return "model spec hash mismatch";
        case PROTO_E_TIME:    return "time not finite, negative or ending before it starts";
        default:              return "unknown error code";
    }
}

bool
proto_code_is_malformed (int code)
{
    return code <= PROTO_E_MAGIC && code >= PROTO_E_TIME;
}

const char *
proto_stage_name (int stage)
{
    return stage >= 1 && stage <= PROTO_STAGE_MAX ? s_stage_names[stage] : "UNKNOWN";
}

int
proto_stage_from_name (const char *name)
{
    for (int st = 1; name && st <= PROTO_STAGE_MAX; st++)
        if (strcmp (name, s_stage_names[st]) == 0)
            return st;
    return -1;
}
