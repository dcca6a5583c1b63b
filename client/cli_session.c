/*  cli_session.c: what the device sends the server in its session: every
    message goes through cli_send, which counts the bytes for the epoch's
    STATS. */
#include <errno.h>

#include "cli_state.h"
#include "nn_alloc.h"
#include "pl_log.h"

size_t
cli_msg_bytes (const proto_msg_t *msg)
{
    int t = proto_msg_type (msg);
    //  A tensor's data frame as it travels: f32 or its codec payload.
    size_t bytes = PROTO_HEADER_SIZE
                 + (t == PROTO_MSG_ACTIVATIONS || t == PROTO_MSG_GRADIENTS
                    ? proto_msg_tensor_wire_bytes (msg) : 4 * proto_msg_tensor_count (msg));
    if (t == PROTO_MSG_ACTIVATIONS)
        bytes += 4 * proto_msg_labels_count (msg);
    if (t == PROTO_MSG_EVENTS) {
        size_t count = 0;
        proto_msg_events (msg, &count);
        bytes += PROTO_EVENT_SIZE * count;
    }
    return bytes;
}

int
cli_send (cli_t *self, proto_msg_t **msg_p)
{
    size_t bytes = cli_msg_bytes (*msg_p);
    int type = proto_msg_type (*msg_p);
    char err[NN_ERR_SIZE];
    //  send_cap is the server's cap from WELCOME (0 before it: the
    //  protocol's): a larger frame would have libzmq close the connection
    //  without a word, and the run stall until the server drops this device
    //  as silent. Refuse it, say which and why, and stop.
    if (proto_msg_send_capped (msg_p, self->dh, self->send_cap, err, sizeof err)) {
        int e = errno;
        proto_msg_destroy (msg_p);
        if (e == EMSGSIZE) {
            pl_log_error ("client: not sending %s, the server would drop it: %s; stopping",
                          proto_type_name (type), err);
            if (type != PROTO_MSG_ERROR) {
                char text[PROTO_TEXT_MAX];
                snprintf (text, sizeof text, "device cannot send: %s", err);
                cli_send_error (self, PROTO_ERR_INTERNAL, text);
            }
        }
        else
            pl_log_error ("client: sending %s failed: %s", proto_type_name (type), err);
        return -1;
    }
    if (type == PROTO_MSG_PARAMS && self->params_prepaid)
        self->params_prepaid = false;   //  already in the STATS before it
    else
        self->stats.bytes_up += bytes;
    return 0;
}

void
cli_send_error (cli_t *self, uint32_t code, const char *text)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ERROR);
    //  The ERROR frame (4 bytes of code, then the text) must fit the
    //  server's cap too; texts are ASCII, so clipping keeps them valid.
    char clipped[PROTO_TEXT_MAX + 1];
    size_t room = self->send_cap > 4 && self->send_cap - 4 < sizeof clipped
                ? (size_t) self->send_cap - 4 + 1 : sizeof clipped;
    snprintf (clipped, room, "%s", text);
    proto_msg_set_error (msg, code, clipped);
    cli_send (self, &msg);
}
