/*  proto_tensor.c: tensor descriptors, labels and float frames.

    Sizes a peer announces are checked in 64-bit arithmetic with explicit
    overflow tests before anything is multiplied into a byte count, and a
    byte count is compared with the frame that actually arrived before any
    byte of it is read.
*/
#include "proto_tensor.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn_alloc.h"

int
proto_fail (char *err, size_t err_size, int code, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start (ap, fmt);
        vsnprintf (err, err_size, fmt, ap);
        va_end (ap);
    }
    return code;
}

proto_limits_t
proto_limits_resolve (const proto_limits_t *limits)
{
    proto_limits_t l = { 0 };
    if (limits)
        l = *limits;
    if (l.max_frames <= 0 || l.max_frames > PROTO_MAX_FRAMES)
        l.max_frames = PROTO_MAX_FRAMES;
    if (l.max_frame_bytes == 0)
        l.max_frame_bytes = PROTO_DEFAULT_MAX_FRAME_BYTES;
    if (l.max_json_bytes == 0 || l.max_json_bytes > PROTO_JSON_MAX)
        l.max_json_bytes = PROTO_JSON_MAX;
    return l;
}

//  "25x14x14x32" into buf.
static const char *
s_dims_str (char *buf, size_t size, const uint32_t *dims, int rank)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < rank && used < size; i++) {
        int n = snprintf (buf + used, size - used, i ? "x%" PRIu32 : "%" PRIu32, dims[i]);
        if (n < 0)
            break;
        used += (size_t) n;
    }
    return buf;
}

size_t
proto_tensor_desc_size (int rank)
{
    return 4 + 4 * (size_t) (rank > 0 ? rank : 0);
}

size_t
proto_tensor_desc_encode (uint8_t *out, const proto_tensor_desc_t *d)
{
    assert (d->rank <= PROTO_MAX_RANK);
    out[0] = d->dtype;
    out[1] = d->rank;
    out[2] = 0;
    out[3] = 0;
    for (int i = 0; i < d->rank; i++)
        proto_le_put_u32 (out + 4 + 4 * i, d->dims[i]);
    return proto_tensor_desc_size (d->rank);
}

int
proto_tensor_desc_check (const proto_tensor_desc_t *d, uint64_t *count_out,
                         const char *what, char *err, size_t err_size)
{
    if (d->dtype != PROTO_DTYPE_F32)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: dtype %u not supported (1 = f32)",
                           what, (unsigned) d->dtype);
    if (d->rank < 1 || d->rank > PROTO_MAX_RANK)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: descriptor: rank %u not in 1..%d",
                           what, (unsigned) d->rank, PROTO_MAX_RANK);
    //  Bytes must fit in size_t (and so in u64) after * 4.
    const uint64_t max_count = (uint64_t) (SIZE_MAX / 4);
    uint64_t count = 1;
    bool overflow = false;
    for (int i = 0; i < d->rank; i++) {
        if (d->dims[i] == 0)
            return proto_fail (err, err_size, PROTO_E_SHAPE,
                               "%s: descriptor: dims[%d] is 0", what, i);
        if (count > max_count / d->dims[i])
            overflow = true;
        else
            count *= d->dims[i];
    }
    if (overflow) {
        char buf[64];
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: descriptor: dims %s overflow (more than %" PRIu64
                           " elements)", what,
                           s_dims_str (buf, sizeof buf, d->dims, d->rank), max_count);
    }
    if (count_out)
        *count_out = count;
    return 0;
}

int
proto_tensor_desc_decode (proto_tensor_desc_t *d, uint64_t *count_out,
                          const uint8_t *buf, size_t len, char *err, size_t err_size)
{
    return proto_tensor_desc_decode_as (d, count_out, buf, len, "tensor", err, err_size);
}

int
proto_tensor_desc_decode_as (proto_tensor_desc_t *d, uint64_t *count_out,
                             const uint8_t *buf, size_t len, const char *what,
                             char *err, size_t err_size)
{
    memset (d, 0, sizeof *d);
    if (len < 4)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: descriptor: %zu bytes, need at least 4", what, len);
    d->dtype = buf[0];
    d->rank = buf[1];
    if (d->dtype != PROTO_DTYPE_F32)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: dtype %u not supported (1 = f32)",
                           what, (unsigned) d->dtype);
    if (d->rank < 1 || d->rank > PROTO_MAX_RANK)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: descriptor: rank %u not in 1..%d",
                           what, (unsigned) d->rank, PROTO_MAX_RANK);
    if (buf[2] || buf[3])
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: padding bytes 0x%02x 0x%02x, must be 0",
                           what, buf[2], buf[3]);
    size_t need = proto_tensor_desc_size (d->rank);
    if (len != need)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: descriptor: %zu bytes, rank %u needs %zu",
                           what, len, (unsigned) d->rank, need);
    for (int i = 0; i < d->rank; i++)
        d->dims[i] = proto_le_get_u32 (buf + 4 + 4 * i);
    return proto_tensor_desc_check (d, count_out, what, err, err_size);
}

int
proto_tensor_check_limits (const proto_tensor_desc_t *d, const proto_limits_t *limits,
                           const char *what, char *err, size_t err_size)
{
    if (limits->max_batch && d->dims[0] > limits->max_batch)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: batch %" PRIu32 " exceeds limit %" PRIu32,
                           what, d->dims[0], limits->max_batch);
    if (!limits->h && !limits->w && !limits->c)
        return 0;
    char got[64];
    s_dims_str (got, sizeof got, d->dims, d->rank);
    if (d->rank != 4)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: shape %s has rank %u, expected 4 (n,h,w,c)",
                           what, got, (unsigned) d->rank);
    const uint32_t want[3] = { limits->h, limits->w, limits->c };
    for (int i = 0; i < 3; i++) {
        if (want[i] && d->dims[i + 1] != want[i]) {
            char part[3][12];
            for (int j = 0; j < 3; j++)
                if (want[j])
                    snprintf (part[j], sizeof part[j], "%" PRIu32, want[j]);
                else
                    snprintf (part[j], sizeof part[j], "*");
            return proto_fail (err, err_size, PROTO_E_SHAPE,
                               "%s: per-sample shape %" PRIu32 "x%" PRIu32 "x%" PRIu32
                               " (h x w x c), expected %sx%sx%s", what,
                               d->dims[1], d->dims[2], d->dims[3],
                               part[0], part[1], part[2]);
        }
    }
    return 0;
}

int
proto_labels_check (const int32_t *labels, size_t count, uint32_t classes,
                    const char *what, char *err, size_t err_size)
{
    for (size_t i = 0; i < count; i++) {
        if (labels[i] < 0 || (classes && (uint32_t) labels[i] >= classes)) {
            if (classes)
                return proto_fail (err, err_size, PROTO_E_LABEL,
                                   "%s: labels[%zu] = %" PRId32 " not in [0, %" PRIu32 ")",
                                   what, i, labels[i], classes);
            return proto_fail (err, err_size, PROTO_E_LABEL,
                               "%s: labels[%zu] = %" PRId32 " is negative",
                               what, i, labels[i]);
        }
    }
    return 0;
}

int
proto_labels_decode (int32_t *out, const uint8_t *buf, size_t count, uint32_t classes,
                     const char *what, char *err, size_t err_size)
{
    for (size_t i = 0; i < count; i++)
        out[i] = proto_le_get_i32 (buf + 4 * i);
    return proto_labels_check (out, count, classes, what, err, err_size);
}

void
proto_labels_encode (uint8_t *out, const int32_t *labels, size_t count)
{
    for (size_t i = 0; i < count; i++)
        proto_le_put_i32 (out + 4 * i, labels[i]);
}

bool
proto_host_is_le (void)
{
    const uint16_t probe = 1;
    uint8_t first;
    memcpy (&first, &probe, 1);
    return first == 1;
}

void
proto_floats_encode (uint8_t *out, const float *in, size_t count)
{
    if (proto_host_is_le ())
        memcpy (out, in, count * sizeof (float));
    else
        for (size_t i = 0; i < count; i++)
            proto_le_put_f32 (out + 4 * i, in[i]);
}

void
proto_floats_decode (float *out, const uint8_t *in, size_t count)
{
    if (proto_host_is_le ())
        memcpy (out, in, count * sizeof (float));
    else
        for (size_t i = 0; i < count; i++)
            out[i] = proto_le_get_f32 (in + 4 * i);
}

void
proto_frame_init_size (zmq_msg_t *frame, size_t size)
{
    //  libzmq fails only for lack of memory; like nn_malloc, that aborts.
    if (zmq_msg_init_size (frame, size) != 0) {
        fprintf (stderr, "pipelearn: out of memory allocating a %zu-byte frame\n", size);
        abort ();
    }
}

void
proto_frame_from_floats (zmq_msg_t *frame, const float *data, size_t count)
{
    proto_frame_init_size (frame, count * sizeof (float));
    proto_floats_encode (zmq_msg_data (frame), data, count);
}

//  libzmq's free callback takes (data, hint); a function pointer cannot
//  travel in a void * hint portably, so it travels in a small box.
typedef struct {
    proto_free_fn *free_fn;
} s_owner_t;

static void
s_owner_free (void *data, void *hint)
{
    s_owner_t *owner = hint;
    owner->free_fn (data);
    nn_free (owner);
}

void
proto_frame_from_owned (zmq_msg_t *frame, float *data, size_t count,
                        proto_free_fn *free_fn)
{
    assert (free_fn);
    if (!proto_host_is_le ())
        for (size_t i = 0; i < count; i++) {
            float v = data[i];
            proto_le_put_f32 ((uint8_t *) (data + i), v);
        }
    s_owner_t *owner = nn_malloc (sizeof *owner);
    owner->free_fn = free_fn;
    if (zmq_msg_init_data (frame, data, count * sizeof (float), s_owner_free, owner) != 0) {
        fprintf (stderr, "pipelearn: out of memory wrapping a %zu-float frame\n", count);
        abort ();
    }
}

const float *
proto_floats_view (zmq_msg_t *frame, size_t count, float **copy_p)
{
    const uint8_t *bytes = zmq_msg_data (frame);
    *copy_p = NULL;
    if (proto_host_is_le () && (uintptr_t) bytes % _Alignof (float) == 0)
        return (const float *) (const void *) bytes;
    //  A frame decoded out of libzmq's receive batch can start at any byte
    //  offset: one aligned copy is cheaper than unaligned float loads in
    //  every kernel downstream.
    float *copy = nn_alloc_aligned (count * sizeof (float));
    proto_floats_decode (copy, bytes, count);
    *copy_p = copy;
    return copy;
}
