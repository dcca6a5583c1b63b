/*  proto_tensor.h: internal to proto/ (daemons include proto_msg.h only).

    The little-endian byte helpers every codec in proto/ uses, and the
    tensor, label and float-frame pieces shared by proto_msg.c and
    proto_tensor.c. Values are written and read byte by byte so no host
    struct layout or byte order leaks onto the wire.
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

//  Write a message into err (if not NULL) and return code.
int proto_fail (char *err, size_t err_size, int code, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

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

//  Initialise frame with size bytes; aborts on out of memory.
void proto_frame_init_size (zmq_msg_t *frame, size_t size);
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

#endif
