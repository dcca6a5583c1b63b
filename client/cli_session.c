/*  cli_session.c: what the device sends the server in its session: every
    message goes through cli_send, which counts the bytes for the epoch's
    STATS. */
#include <errno.h>

#include "cli_state.h"
#include "pl_log.h"

size_t
cli_msg_bytes (const proto_msg_t *msg)
{
    size_t bytes = PROTO_HEADER_SIZE + 4 * proto_msg_tensor_count (msg);
    int t = proto_msg_type (msg);
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
    if (proto_msg_send (msg_p, self->dh)) {
        pl_log_error ("client: sending %s failed: %s", proto_type_name (type),
                      zmq_strerror (errno));
        proto_msg_destroy (msg_p);
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
    proto_msg_set_error (msg, code, text);
    cli_send (self, &msg);
}
