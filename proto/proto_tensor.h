/*  proto_tensor.h: internal to proto/ (daemons include proto_msg.h only).

    The message struct, the little-endian byte helpers every codec in
    proto/ uses, and the tensor, label and float-frame pieces shared by
    proto_msg.c and proto_tensor.c. Values are written and read byte by
    byte so no host struct layout or byte order leaks onto the wire.
*/
#ifndef PROTO_TENSOR_H_INCLUDED
#define PROTO_TENSOR_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

#include "proto_msg.h"

static inline void
proto_le_put_u16 (uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
}

static inline void
proto_le_put_u32 (uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static inline void
proto_le_put_u64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static inline uint16_t
proto_le_get_u16 (const uint8_t *p)
{
    return (uint16_t) (p[0] | (uint16_t) p[1] << 8);
}

static inline uint32_t
proto_le_get_u32 (const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint64_t
proto_le_get_u64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

//  Two's complement without relying on implementation-defined conversion.
static inline int32_t
proto_le_get_i32 (const uint8_t *p)
{
    uint32_t u = proto_le_get_u32 (p);
    return u <= INT32_MAX ? (int32_t) u : -(int32_t) (~u) - 1;
}

static inline void
proto_le_put_i32 (uint8_t *p, int32_t v)
{
    proto_le_put_u32 (p, (uint32_t) v);
}

//  Floats travel as the little-endian bytes of their IEEE-754 bit pattern.
static inline void
proto_le_put_f32 (uint8_t *p, float v)
{
    uint32_t u;
    memcpy (&u, &v, sizeof u);
    proto_le_put_u32 (p, u);
}

static inline float
proto_le_get_f32 (const uint8_t *p)
{
    uint32_t u = proto_le_get_u32 (p);
    float v;
    memcpy (&v, &u, sizeof v);
    return v;
}

static inline void
proto_le_put_f64 (uint8_t *p, double v)
{
    uint64_t u;
    memcpy (&u, &v, sizeof u);
    proto_le_put_u64 (p, u);
}

static inline double
proto_le_get_f64 (const uint8_t *p)
{
    uint64_t u = proto_le_get_u64 (p);
    double v;
    memcpy (&v, &u, sizeof v);
    return v;
}

//  The message object, shared by proto_msg.c (envelope, fixed payloads,
//  sockets) and proto_tensor.c (the float-carrying payloads).
struct _proto_msg_t {
    proto_header_t header;
    proto_hello_t hello;
    char *config;               //  WELCOME: NUL-terminated copy, or NULL
    size_t config_len;
    proto_plan_t plan;
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
int proto_fail (char *err, size_t err_size, int code, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

//  limits with every 0 / NULL default resolved (NULL = all defaults).
proto_limits_t proto_limits_resolve (const proto_limits_t *limits);
//  The largest frame any message valid under limits can carry: the data of a
//  max_batch x h x w x c tensor, a slab of slab_count floats, an EVENTS
//  frame of max_events records, a WELCOME config of max_json_bytes, and so
//  on. Receivers put it in max_frame_bytes so that ZMQ_MAXMSGSIZE
//  (proto_socket_limit) drops a peer announcing anything bigger before
//  buffering it. tensors false: the receiver takes no tensor messages
//  (an fl server), so the shape does not count. Falls back to
//  PROTO_DEFAULT_MAX_FRAME_BYTES when the limits leave a size that counts
//  open ("any").
size_t proto_limits_frame_bytes (const proto_limits_t *limits, bool tensors);

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

//  Initialise frame with size bytes; aborts on out of memory.
void proto_frame_init_size (zmq_msg_t *frame, size_t size);
//  Initialise frame with size bytes and return them for writing.
static inline uint8_t *
proto_frame_alloc (zmq_msg_t *frame, size_t size)
{
    proto_frame_init_size (frame, size);
    return (uint8_t *) zmq_msg_data (frame);
}

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

//  The plan (WELCOME frame 2, PLAN frame 1), PROTO_PLAN_SIZE bytes, and its
//  checks; what names the message in errors (proto_msg.c).
void proto_plan_put (uint8_t *b, const proto_plan_t *p);
void proto_plan_get (proto_plan_t *p, const uint8_t *b);
int proto_plan_check (const proto_plan_t *p, const proto_limits_t *l, const char *what,
                      char *err, size_t err_size);

//  Planning messages: PROFILE, PROBE, PLAN (proto_plan.c), in the same
//  shape as the float-carrying ones above.
int proto_msg_planning_check (const proto_msg_t *self, char *err, size_t err_size);
void proto_msg_encode_planning (proto_msg_t *self, zmq_msg_t *frames);
int proto_msg_decode_planning (proto_msg_t *self, zmq_msg_t *frames,
                               const proto_limits_t *limits, char *err, size_t err_size);

#endif
