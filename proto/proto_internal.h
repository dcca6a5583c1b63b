/*  proto_internal.h: private to proto/ (daemons include proto_msg.h only).

    The message struct, the little-endian byte helpers every codec in
    proto/ uses, the tensor, label and float-frame pieces, and the entry
    points of the codecs proto_msg.c dispatches to (proto_tensor.c,
    proto_planning.c). Values are written and read byte by byte so no host
    struct layout or byte order leaks onto the wire. Builds on the wire
    types alone: the codecs never call back into proto_msg.c.
*/
#ifndef PROTO_INTERNAL_H_INCLUDED
#define PROTO_INTERNAL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

#include "pl_le.h"
#include "proto_wire.h"

//  The message object, shared by proto_msg.c (envelope, fixed payloads,
//  sockets) and proto_tensor.c (the float-carrying payloads).
struct _proto_msg_t {
    proto_header_t header;
    proto_hello_t hello;
    char *config;               //  WELCOME: NUL-terminated copy, or NULL
    size_t config_len;
    proto_assign_t assign;      //  WELCOME, PLAN
    uint64_t frame_cap;         //  WELCOME: the server's receive cap; 0 until set
    proto_slab_t slab;
    proto_tensor_desc_t tensor;
    //  Float data (tensor or slab). data_view is NULL when none is set; it
    //  points into `data` (has_data) or into data_copy. `data` must stay
    //  where it is: a frame of <= 33 bytes keeps its bytes inside the
    //  zmq_msg_t itself, so the message is never copied by value.
    bool has_data;
    zmq_msg_t data;
    const float *data_view;
    float *data_copy;
    size_t data_count;
    //  ACTIVATIONS / GRADIENTS with dtype PROTO_DTYPE_CODEC: the codec
    //  (nn_codec_id_t; 0 none for f32) and the payload's bytes. A message
    //  to send holds the payload in `data` (data_view NULL); a received one
    //  holds the decoded floats in data_copy.
    uint8_t codec;
    size_t codec_bytes;
    int32_t *labels;            //  NULL until set
    size_t labels_count;
    proto_loss_t loss;
    proto_eval_result_t eval;
    proto_stats_t stats;
    proto_event_t *events;      //  EVENTS: NULL until set
    size_t events_count;
    uint32_t error_code;
    char *error_text;           //  NULL until set
    proto_profile_t *profile;   //  PROFILE: NULL until set
    proto_probe_t probe;
    size_t probe_bytes;         //  PROBE payload length
};

static inline bool
proto_type_is_tensor (int type)
{
    return type == PROTO_MSG_ACTIVATIONS || type == PROTO_MSG_GRADIENTS
        || type == PROTO_MSG_EVAL;
}

static inline bool
proto_type_is_slab (int type)
{
    return type == PROTO_MSG_MODEL || type == PROTO_MSG_PARAMS;
}

//  Write a message into err (if not NULL) and return code.
__attribute__ ((format (printf, 4, 5)))
int proto_fail (char *err, size_t err_size, int code, const char *fmt, ...);

//  limits with every 0 / NULL default resolved (NULL = all defaults).
proto_limits_t proto_limits_resolve (const proto_limits_t *limits);

//  Structure of a descriptor (dtype, rank, dims >= 1, product * 4 fits in
//  size_t). *count_out (may be NULL) gets the element count. `what` names
//  the message in the error ("ACTIVATIONS").
int proto_tensor_desc_check (const proto_tensor_desc_t *d, uint64_t *count_out,
                             const char *what, char *err, size_t err_size);
//  proto_tensor_desc_decode with `what` naming the message in errors.
int proto_tensor_desc_decode_as (proto_tensor_desc_t *d, uint64_t *count_out,
                                 const uint8_t *buf, size_t len, const char *what,
                                 char *err, size_t err_size);
//  Batch and per-sample shape against resolved limits: 0 or PROTO_E_SHAPE.
int proto_tensor_check_limits (const proto_tensor_desc_t *d,
                               const proto_limits_t *limits, const char *what,
                               char *err, size_t err_size);

//  count labels, each in [0, classes) (classes 0: >= 0): 0 or PROTO_E_LABEL.
int proto_labels_check (const int32_t *labels, size_t count, uint32_t classes,
                        const char *what, char *err, size_t err_size);
//  buf holds count * 4 bytes; out receives count labels, then checked.
int proto_labels_decode (int32_t *out, const uint8_t *buf, size_t count,
                         uint32_t classes, const char *what,
                         char *err, size_t err_size);
void proto_labels_encode (uint8_t *out, const int32_t *labels, size_t count);

bool proto_host_is_le (void);
//  count floats, host order <-> little-endian bytes (any alignment).
void proto_floats_encode (uint8_t *out, const float *in, size_t count);
void proto_floats_decode (float *out, const uint8_t *in, size_t count);

//  Chunks (proto_chunk.c, PROTOCOL.md "Chunks"). Send one encoded frame:
//  as it is when smaller than PROTO_CHUNK_BYTES, else as a run of chunks
//  that share its buffer (frame is left empty). The caller closes frame
//  either way. more: frames follow in
//  this message. 0, or -1 with errno from libzmq; libzmq takes the rest
//  of a message once its first frame is accepted.
int proto_chunk_send (void *socket, zmq_msg_t *frame, bool more);

//  The receiving side of one message: the run of chunks being joined.
//  Zero it with limit set (the largest frame allowed) before the first
//  part; proto_chunks_reset frees what a failed or cut message left.
typedef struct {
    uint8_t *buf;
    size_t size, cap;
    size_t limit;
    bool open;                  //  a run has started and not ended
} proto_chunks_t;

//  Take one received wire frame (part: always closed) of frame number
//  index. 1: frame index is whole in *out (initialised, the caller closes
//  it; empty when keep is false: counted, not kept); 0: a run goes on;
//  PROTO_E_SIZE: a wire frame over PROTO_CHUNK_BYTES or a run past limit
//  (err says which; the caller drains the rest of the message).
int proto_chunks_take (proto_chunks_t *self, zmq_msg_t *part, int index, bool keep,
                       zmq_msg_t *out, char *err, size_t err_size);
void proto_chunks_reset (proto_chunks_t *self);

//  Initialise frame with size bytes; aborts on out of memory.
void proto_frame_init_size (zmq_msg_t *frame, size_t size);
//  Initialise frame with size bytes and return them for writing.
uint8_t *proto_frame_alloc (zmq_msg_t *frame, size_t size);

//  A received frame's bytes and size.
static inline const uint8_t *
proto_frame_bytes (zmq_msg_t *frame, size_t *len)
{
    *len = zmq_msg_size (frame);
    return (const uint8_t *) zmq_msg_data (frame);
}

//  Initialise frame with count floats copied from data, little-endian.
void proto_frame_from_floats (zmq_msg_t *frame, const float *data, size_t count);
//  Initialise frame around data without copying; free_fn (data) runs once
//  when libzmq and every holder are done with it. On a big-endian host the
//  buffer is byte-swapped in place first (it is ours now).
void proto_frame_from_owned (zmq_msg_t *frame, float *data, size_t count,
                             proto_free_fn *free_fn);
//  Host-order floats of a little-endian frame of count floats: a pointer
//  into the frame if it is 4-byte aligned on a little-endian host, else a
//  converted copy in *copy_p (nn_alloc_aligned, the caller frees it).
const float *proto_floats_view (zmq_msg_t *frame, size_t count, float **copy_p);

//  Float-carrying messages (proto_tensor.c). Each works on frames[1..] of
//  the message; frames[0] is the header.

//  Drop the float data (closing the frame releases a handed-over buffer).
void proto_msg_data_clear (proto_msg_t *self);
//  Encoder checks of a MODEL/PARAMS or tensor (not EVAL result) message.
int proto_msg_slab_check (const proto_msg_t *self, char *err, size_t err_size);
int proto_msg_tensor_check (const proto_msg_t *self, char *err, size_t err_size);
//  Initialise frames[1..2] (slab) or frames[1..3] (tensor) of a checked message.
void proto_msg_encode_slab (proto_msg_t *self, zmq_msg_t *frames);
void proto_msg_encode_tensor (proto_msg_t *self, zmq_msg_t *frames);
//  Parse and check frames[1..]; frame counts and sizes are already checked
//  against limits. The data frame is moved into self.
int proto_msg_decode_slab (proto_msg_t *self, zmq_msg_t *frames,
                           const proto_limits_t *limits, char *err, size_t err_size);
int proto_msg_decode_tensor (proto_msg_t *self, zmq_msg_t *frames,
                             const proto_limits_t *limits, char *err, size_t err_size);

//  The plan (WELCOME frame 2, PLAN frame 1), PROTO_ASSIGN_SIZE bytes, and its
//  checks; what names the message in errors (proto_msg.c).
void proto_assign_put (uint8_t *b, const proto_assign_t *p);
//  proto_assign_get fails (PROTO_E_VALUE) only on a reserved byte that is not 0.
int proto_assign_get (proto_assign_t *p, const uint8_t *b, const char *what, char *err,
                      size_t err_size);
int proto_assign_check (const proto_assign_t *p, const proto_limits_t *l, const char *what,
                      char *err, size_t err_size);

//  Planning messages: PROFILE, PROBE, PLAN (proto_planning.c), in the same
//  shape as the float-carrying ones above.
int proto_msg_planning_check (const proto_msg_t *self, char *err, size_t err_size);
void proto_msg_encode_planning (proto_msg_t *self, zmq_msg_t *frames);
int proto_msg_decode_planning (proto_msg_t *self, zmq_msg_t *frames,
                               const proto_limits_t *limits, char *err, size_t err_size);

#endif
