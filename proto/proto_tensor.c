/*  proto_tensor.c: tensor descriptors, labels, float frames, and the
    messages that carry floats (MODEL, PARAMS, ACTIVATIONS, GRADIENTS,
    EVAL activations): their setters, accessors, checks and codecs.

    Sizes a peer announces are checked in 64-bit arithmetic with explicit
    overflow tests before anything is multiplied into a byte count, and a
    byte count is compared with the frame that actually arrived before any
    byte of it is read.
*/
#include "proto_tensor.h"

#include "proto_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn_alloc.h"
#include "nn_codec.h"

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
    if (l.max_events == 0 || l.max_events > PROTO_EVENTS_MAX)
        l.max_events = PROTO_EVENTS_MAX;
    return l;
}

size_t
proto_limits_frame_bytes (const proto_limits_t *limits, bool tensors)
{
    const proto_limits_t l = proto_limits_resolve (limits);
    if (!l.slab_count || (tensors && (!l.max_batch || !l.h || !l.w || !l.c)))
        return PROTO_DEFAULT_MAX_FRAME_BYTES;
    uint64_t tensor = 0;
    if (tensors) {
        //  Each factor is below 2^32: check the products rather than wrap.
        tensor = (uint64_t) l.h * l.w;
        if (tensor > UINT64_MAX / l.c || tensor * l.c > UINT64_MAX / 4 / l.max_batch)
            return PROTO_DEFAULT_MAX_FRAME_BYTES;
        //  The largest data frame of such a tensor: f32, or a codec payload
        //  when that is larger (int8's 24 + 8 c + count for a tensor of few
        //  elements per channel; zstd's bound above the fp16 and int8
        //  bodies, at most 64 bytes for small ones); topk (gradients) never
        //  travels up.
        uint64_t count = tensor * l.c * l.max_batch;
        tensor = count * 4;
        if (count > UINT32_MAX)
            ;   //  no codec carries it (u32 counts): f32 only
        else
        for (int id = NN_CODEC_FP16; id <= NN_CODEC_INT8; id++) {
            uint64_t z = nn_codec_zstd_wire_bytes_max (
                             nn_codec_wire_bytes ((nn_codec_id_t) id, count, l.c, 0));
            tensor = z > tensor ? z : tensor;
        }
    }
    uint64_t max = PROTO_HEADER_SIZE + 256;        //  fixed-size frames, descriptors
    uint64_t sizes[] = { tensor, tensors ? (uint64_t) l.max_batch * 4 : 0,
                         l.slab_count > UINT64_MAX / 4 ? UINT64_MAX : l.slab_count * 4,
                         (uint64_t) l.max_events * PROTO_EVENT_SIZE,
                         (uint64_t) l.max_json_bytes, 4 + PROTO_TEXT_MAX,
                         PROTO_HELLO_FIXED_SIZE + PROTO_NAME_MAX };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > max)
            max = sizes[i];
    if (max > PROTO_DEFAULT_MAX_FRAME_BYTES)
        return PROTO_DEFAULT_MAX_FRAME_BYTES;
    return (size_t) max;
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
        pl_le_put_u32 (out + 4 + 4 * i, d->dims[i]);
    return proto_tensor_desc_size (d->rank);
}

int
proto_tensor_desc_check (const proto_tensor_desc_t *d, uint64_t *count_out,
                         const char *what, char *err, size_t err_size)
{
    if (d->dtype != PROTO_DTYPE_F32 && d->dtype != PROTO_DTYPE_CODEC)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: dtype %u not supported (1 = f32, 2 = codec)",
                           what, (unsigned) d->dtype);
    if (d->rank < 1 || d->rank > PROTO_MAX_RANK)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: descriptor: rank %u not in 1..%d",
                           what, (unsigned) d->rank, PROTO_MAX_RANK);
    if (d->dtype == PROTO_DTYPE_CODEC && d->rank != 4)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: descriptor: a codec payload needs rank 4 (n,h,w,c), got %u",
                           what, (unsigned) d->rank);
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
    if (d->dtype != PROTO_DTYPE_F32 && d->dtype != PROTO_DTYPE_CODEC)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: dtype %u not supported (1 = f32, 2 = codec)",
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
        d->dims[i] = pl_le_get_u32 (buf + 4 + 4 * i);
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
        out[i] = pl_le_get_i32 (buf + 4 * i);
    return proto_labels_check (out, count, classes, what, err, err_size);
}

void
proto_labels_encode (uint8_t *out, const int32_t *labels, size_t count)
{
    for (size_t i = 0; i < count; i++)
        pl_le_put_i32 (out + 4 * i, labels[i]);
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
            pl_le_put_f32 (out + 4 * i, in[i]);
}

void
proto_floats_decode (float *out, const uint8_t *in, size_t count)
{
    if (proto_host_is_le ())
        memcpy (out, in, count * sizeof (float));
    else
        for (size_t i = 0; i < count; i++)
            out[i] = pl_le_get_f32 (in + 4 * i);
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

uint8_t *
proto_frame_alloc (zmq_msg_t *frame, size_t size)
{
    proto_frame_init_size (frame, size);
    return (uint8_t *) zmq_msg_data (frame);
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
            pl_le_put_f32 ((uint8_t *) (data + i), v);
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

//  ---------------------------------------------------------------------
//  Float-carrying messages: MODEL, PARAMS, ACTIVATIONS, GRADIENTS, EVAL

static void
s_hash_hex (char *out, const uint8_t *hash)
{
    //  The first 8 bytes are enough to tell two specs apart in a log line.
    for (int i = 0; i < 8; i++)
        snprintf (out + 2 * i, 3, "%02x", hash[i]);
}

static int
s_slab_check (const proto_slab_t *s, int type, bool calibrate, const proto_limits_t *l,
              char *err, size_t err_size)
{
    const char *tn = proto_type_name (type);
    if (s->unit_begin >= s->unit_end)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: slab: unit range [%" PRIu32 ", %" PRIu32 ") is empty",
                           tn, s->unit_begin, s->unit_end);
    if (s->count == 0 || s->count > (uint64_t) (SIZE_MAX / 4))
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: slab: count %" PRIu64 " not in 1..%zu",
                           tn, s->count, SIZE_MAX / 4);
    //  A calibration PARAMS holds the part's buffers: fewer floats than its
    //  slab, which starts with at least one parameter. A MODEL with
    //  CALIBRATE holds the whole slab (calibrate these weights) or, after a
    //  calibration, the buffers alone (train on, with these statistics).
    bool buffers = calibrate
                && (type == PROTO_MSG_PARAMS
                ||  (type == PROTO_MSG_MODEL && s->count != l->slab_count));
    if (buffers && l->buffer_count && s->count != l->buffer_count)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: slab: count %" PRIu64 " (CALIBRATE: the buffers), "
                           "expected %" PRIu64, tn, s->count, l->buffer_count);
    if (buffers && l->slab_count && s->count >= l->slab_count)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: slab: count %" PRIu64 " (CALIBRATE: the buffers), "
                           "not below the slab's %" PRIu64, tn, s->count, l->slab_count);
    if (!buffers && l->slab_count && s->count != l->slab_count)
        return proto_fail (err, err_size, PROTO_E_SHAPE,
                           "%s: slab: count %" PRIu64 ", expected %" PRIu64,
                           tn, s->count, l->slab_count);
    if (l->spec_hash && memcmp (s->spec_hash, l->spec_hash, PROTO_SPEC_HASH_SIZE) != 0) {
        char got[17], want[17];
        s_hash_hex (got, s->spec_hash);
        s_hash_hex (want, l->spec_hash);
        return proto_fail (err, err_size, PROTO_E_SPEC,
                           "%s: slab: spec hash %s..., expected %s...", tn, got, want);
    }
    if (type == PROTO_MSG_MODEL && s->sample_count != 0)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "MODEL: slab: sample_count %" PRIu64 ", must be 0", s->sample_count);
    if (type == PROTO_MSG_PARAMS && s->sample_count == 0)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "PARAMS: slab: sample_count is 0 (FedAvg weight), must be >= 1");
    return 0;
}

static int
s_loss_check (const proto_loss_t *loss, uint32_t batch, char *err, size_t err_size)
{
    if (loss->count != batch || loss->correct > loss->count)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "GRADIENTS: loss: correct %" PRIu32 " count %" PRIu32
                           ", need correct <= count == batch %" PRIu32,
                           loss->correct, loss->count, batch);
    return 0;
}

void
proto_msg_data_clear (proto_msg_t *self)
{
    if (self->has_data)
        zmq_msg_close (&self->data);
    nn_free (self->data_copy);
    self->has_data = false;
    self->data_copy = NULL;
    self->data_view = NULL;
    self->data_count = 0;
    self->codec = NN_CODEC_NONE;
    self->codec_bytes = 0;
}

//  After `data` holds a little-endian frame of count floats.
static void
s_data_attach (proto_msg_t *self, size_t count)
{
    self->has_data = true;
    self->data_count = count;
    self->data_view = proto_floats_view (&self->data, count, &self->data_copy);
}

int
proto_msg_set_slab_copy (proto_msg_t *self, const proto_slab_t *desc, const float *data)
{
    assert (self && desc && proto_type_is_slab (self->header.type));
    if (desc->count == 0 || desc->count > (uint64_t) (SIZE_MAX / 4))
        return -1;
    assert (data);
    proto_msg_data_clear (self);
    self->slab = *desc;
    proto_frame_from_floats (&self->data, data, (size_t) desc->count);
    s_data_attach (self, (size_t) desc->count);
    return 0;
}

int
proto_msg_set_slab_owned (proto_msg_t *self, const proto_slab_t *desc,
                          float **data_p, proto_free_fn *free_fn)
{
    assert (self && desc && proto_type_is_slab (self->header.type));
    assert (data_p && *data_p && free_fn);
    if (desc->count == 0 || desc->count > (uint64_t) (SIZE_MAX / 4))
        return -1;
    proto_msg_data_clear (self);
    self->slab = *desc;
    proto_frame_from_owned (&self->data, *data_p, (size_t) desc->count, free_fn);
    *data_p = NULL;
    s_data_attach (self, (size_t) desc->count);
    return 0;
}

const proto_slab_t *
proto_msg_slab (const proto_msg_t *self)
{
    assert (self && proto_type_is_slab (self->header.type));
    return &self->slab;
}

//  A valid descriptor for dims[0..rank), or -1.
static int
s_tensor_make (proto_tensor_desc_t *d, uint64_t *count, const uint32_t *dims, int rank)
{
    memset (d, 0, sizeof *d);
    if (rank < 1 || rank > PROTO_MAX_RANK)
        return -1;
    assert (dims);
    d->dtype = PROTO_DTYPE_F32;
    d->rank = (uint8_t) rank;
    for (int i = 0; i < rank; i++)
        d->dims[i] = dims[i];
    return proto_tensor_desc_check (d, count, "tensor", NULL, 0) ? -1 : 0;
}

static void
s_tensor_attached (proto_msg_t *self, const proto_tensor_desc_t *d)
{
    self->tensor = *d;
    self->header.flags &= ~PROTO_FLAG_EVAL_RESULT;
}

int
proto_msg_set_tensor_copy (proto_msg_t *self, const float *data,
                           const uint32_t *dims, int rank)
{
    assert (self && proto_type_is_tensor (self->header.type));
    proto_tensor_desc_t d;
    uint64_t count;
    if (s_tensor_make (&d, &count, dims, rank))
        return -1;
    assert (data);
    proto_msg_data_clear (self);
    proto_frame_from_floats (&self->data, data, (size_t) count);
    s_data_attach (self, (size_t) count);
    s_tensor_attached (self, &d);
    return 0;
}

int
proto_msg_set_tensor_owned (proto_msg_t *self, float **data_p,
                            const uint32_t *dims, int rank, proto_free_fn *free_fn)
{
    assert (self && proto_type_is_tensor (self->header.type));
    assert (data_p && *data_p && free_fn);
    proto_tensor_desc_t d;
    uint64_t count;
    if (s_tensor_make (&d, &count, dims, rank))
        return -1;
    proto_msg_data_clear (self);
    proto_frame_from_owned (&self->data, *data_p, (size_t) count, free_fn);
    *data_p = NULL;
    s_data_attach (self, (size_t) count);
    s_tensor_attached (self, &d);
    return 0;
}

//  The shape a codec payload of this descriptor must carry (rank 4).
static nn_codec_shape_t
s_codec_shape (const proto_tensor_desc_t *d)
{
    nn_codec_shape_t shape = { d->dims[0], d->dims[1], d->dims[2], d->dims[3] };
    return shape;
}

int
proto_msg_set_tensor_encoded (proto_msg_t *self, const void *payload, size_t size,
                              const uint32_t *dims)
{
    assert (self && (self->header.type == PROTO_MSG_ACTIVATIONS
                     || self->header.type == PROTO_MSG_GRADIENTS));
    assert (payload && dims);
    proto_tensor_desc_t d;
    uint64_t count;
    if (s_tensor_make (&d, &count, dims, 4) || count > UINT32_MAX
    ||  size < NN_CODEC_HEADER_BYTES)
        return -1;
    const uint8_t id = ((const uint8_t *) payload)[0];
    if (id == NN_CODEC_NONE || !nn_codec_name ((nn_codec_id_t) id))
        return -1;
    d.dtype = PROTO_DTYPE_CODEC;
    proto_msg_data_clear (self);
    memcpy (proto_frame_alloc (&self->data, size), payload, size);
    self->has_data = true;
    self->data_count = (size_t) count;
    self->codec = id;
    self->codec_bytes = size;
    s_tensor_attached (self, &d);
    return 0;
}

int
proto_msg_tensor_codec (const proto_msg_t *self)
{
    assert (self);
    return self->codec;
}

size_t
proto_msg_tensor_wire_bytes (const proto_msg_t *self)
{
    assert (self);
    return self->codec ? self->codec_bytes : 4 * self->data_count;
}

//  A codec tensor's payload header against its message and descriptor:
//  the message type (topk travels only in GRADIENTS), the codec, and the
//  payload's exact size for the descriptor's shape. Reads only the header,
//  allocates nothing: what a receiver checks first.
static int
s_codec_payload_header (const uint8_t *buf, size_t size, const proto_tensor_desc_t *d,
                        int type, char *err, size_t err_size)
{
    const char *tn = proto_type_name (type);
    if (type != PROTO_MSG_ACTIVATIONS && type != PROTO_MSG_GRADIENTS)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: descriptor: dtype 2 (codec) is for ACTIVATIONS and "
                           "GRADIENTS only", tn);
    if (size < NN_CODEC_HEADER_BYTES)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: codec payload of %zu bytes is shorter than its %d-byte "
                           "header", tn, size, NN_CODEC_HEADER_BYTES);
    const nn_codec_id_t id = (nn_codec_id_t) buf[0];
    if (!nn_codec_name (id))
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: codec id %u unknown "
                           "(1 fp16, 2 int8, 3 topk)", tn, (unsigned) buf[0]);
    if (id == NN_CODEC_NONE)
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: codec none travels as "
                           "dtype 1 (f32), not as a codec payload", tn);
    if (id == NN_CODEC_TOPK && type != PROTO_MSG_GRADIENTS)
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: codec topk is for "
                           "GRADIENTS only", tn);
    //  The payload's size follows from its header and the shape (int8's
    //  channels, topk's k): anything else is refused before the decoder
    //  (and before any buffer of the shape's size) sees it.
    const nn_codec_shape_t shape = s_codec_shape (d);
    const uint64_t count = nn_codec_shape_count (&shape);
    const uint32_t k = id == NN_CODEC_TOPK ? pl_le_get_u32 (buf + 20) : 0;
    if (count == 0 || count > UINT32_MAX || k > count)
        return proto_fail (err, err_size, PROTO_E_SHAPE, "%s: codec payload for %" PRIu64
                           " elements with k %" PRIu32, tn, count, k);
    const uint64_t want = nn_codec_wire_bytes (id, count, shape.c, k);
    if (buf[1] & NN_CODEC_FLAG_ZSTD) {
        //  Compressed: at most zstd's bound for the body (the decoder
        //  checks the frame and its content size).
        const uint64_t max = nn_codec_zstd_wire_bytes_max (want);
        if (size > max)
            return proto_fail (err, err_size, PROTO_E_SIZE, "%s: %s payload (zstd) %zu "
                               "bytes, its header and shape allow at most %" PRIu64, tn,
                               nn_codec_name (id), size, max);
        return 0;
    }
    if (size != want)
        return proto_fail (err, err_size, PROTO_E_SIZE, "%s: %s payload %zu bytes, its "
                           "header and shape need %" PRIu64, tn, nn_codec_name (id), size,
                           want);
    return 0;
}

//  s_codec_payload_header, then the whole payload decoded into out
//  (count floats of d's shape; NULL: into a scratch buffer, freed).
static int
s_codec_payload_check (float *out, const uint8_t *buf, size_t size,
                       const proto_tensor_desc_t *d, int type, char *err, size_t err_size)
{
    int rc = s_codec_payload_header (buf, size, d, type, err, err_size);
    if (rc)
        return rc;
    const nn_codec_shape_t shape = s_codec_shape (d);
    const nn_codec_id_t id = (nn_codec_id_t) buf[0];
    float *scratch = out ? out : nn_alloc_aligned (sizeof (float)
                                                   * (size_t) nn_codec_shape_count (&shape));
    char why[256];
    rc = nn_codec_decode (scratch, buf, size, id, &shape, why, sizeof why);
    if (!out)
        nn_free (scratch);
    if (rc)
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: %s", proto_type_name (type),
                           why);
    return 0;
}

const proto_tensor_desc_t *
proto_msg_tensor (const proto_msg_t *self)
{
    assert (self && proto_type_is_tensor (self->header.type));
    return &self->tensor;
}

const float *
proto_msg_tensor_data (const proto_msg_t *self)
{
    assert (self);
    return self->data_view;
}

size_t
proto_msg_tensor_count (const proto_msg_t *self)
{
    assert (self);
    return self->data_count;
}

bool
proto_msg_tensor_is_zero_copy (const proto_msg_t *self)
{
    assert (self);
    return self->data_view && !self->data_copy;
}

void
proto_msg_set_labels (proto_msg_t *self, const int32_t *labels, size_t count)
{
    assert (self && (self->header.type == PROTO_MSG_ACTIVATIONS
                     || self->header.type == PROTO_MSG_EVAL));
    assert (labels || count == 0);
    int32_t *copy = nn_calloc (count ? count : 1, sizeof *copy);
    if (count)
        memcpy (copy, labels, count * sizeof *copy);
    nn_free (self->labels);
    self->labels = copy;
    self->labels_count = count;
}

const int32_t *
proto_msg_labels (const proto_msg_t *self)
{
    assert (self);
    return self->labels;
}

size_t
proto_msg_labels_count (const proto_msg_t *self)
{
    assert (self);
    return self->labels_count;
}

void
proto_msg_set_loss (proto_msg_t *self, const proto_loss_t *loss)
{
    assert (self && loss && self->header.type == PROTO_MSG_GRADIENTS);
    self->loss = *loss;
}

const proto_loss_t *
proto_msg_loss (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_GRADIENTS);
    return &self->loss;
}

//  frame shares the message's float data: a reference, not a copy.
static void
s_data_frame (proto_msg_t *self, zmq_msg_t *frame)
{
    if (self->has_data) {
        zmq_msg_init (frame);
        int rc = zmq_msg_copy (frame, &self->data);
        assert (rc == 0);
        (void) rc;
    }
    else    //  decoded from a misaligned frame: only the copy is left
        proto_frame_from_floats (frame, self->data_view, self->data_count);
}

//  Keep frame (count little-endian floats) as the message's data.
static void
s_data_take (proto_msg_t *self, zmq_msg_t *frame, size_t count)
{
    zmq_msg_init (&self->data);
    zmq_msg_move (&self->data, frame);
    s_data_attach (self, count);
    if (self->data_copy) {
        //  Misaligned: the aligned copy is what we keep.
        zmq_msg_close (&self->data);
        self->has_data = false;
    }
}

int
proto_msg_decode_slab (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
               char *err, size_t err_size)
{
    const char *tn = proto_type_name (self->header.type);
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    if (len != PROTO_SLAB_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: slab descriptor %zu bytes, expected %d",
                           tn, len, PROTO_SLAB_SIZE);
    proto_slab_t *s = &self->slab;
    memcpy (s->spec_hash, b, PROTO_SPEC_HASH_SIZE);
    s->unit_begin = pl_le_get_u32 (b + 32);
    s->unit_end = pl_le_get_u32 (b + 36);
    s->count = pl_le_get_u64 (b + 40);
    s->sample_count = pl_le_get_u64 (b + 48);
    int rc = s_slab_check (s, self->header.type,
                           (self->header.flags & PROTO_FLAG_CALIBRATE) != 0, l, err,
                           err_size);
    if (rc)
        return rc;
    size_t dlen = zmq_msg_size (&frames[2]);
    if (dlen != s->count * 4)   //  count <= SIZE_MAX / 4: no overflow
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: data %zu bytes, count %" PRIu64 " needs %" PRIu64,
                           tn, dlen, s->count, s->count * 4);
    s_data_take (self, &frames[2], (size_t) s->count);
    return 0;
}

int
proto_msg_decode_tensor (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
                 char *err, size_t err_size)
{
    const int type = self->header.type;
    const char *tn = proto_type_name (type);
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    uint64_t count;
    proto_tensor_desc_t *d = &self->tensor;
    int rc = proto_tensor_desc_decode_as (d, &count, b, len, tn, err, err_size);
    if (!rc)
        rc = proto_tensor_check_limits (d, l, tn, err, err_size);
    if (rc)
        return rc;
    size_t dlen = zmq_msg_size (&frames[2]);
    if (d->dtype == PROTO_DTYPE_CODEC) {
        if (count > UINT32_MAX)
            return proto_fail (err, err_size, PROTO_E_SHAPE, "%s: %" PRIu64 " elements, "
                               "a codec payload carries at most %" PRIu32, tn, count,
                               UINT32_MAX);
        //  The decoded tensor is held as f32: no larger than an f32 frame
        //  the receiver would take (a topk payload of 32 bytes is valid for
        //  any count, so its size alone bounds nothing).
        size_t cap = l && l->max_frame_bytes ? l->max_frame_bytes
                                             : PROTO_DEFAULT_MAX_FRAME_BYTES;
        if (count > cap / 4)
            return proto_fail (err, err_size, PROTO_E_SIZE, "%s: %" PRIu64 " elements "
                               "decode to %" PRIu64 " bytes, over the frame limit of %zu",
                               tn, count, count * 4, cap);
        //  Checked (and its size bounded) before the labels and the loss, as
        //  an f32 frame's size is; decoded at the end, once all else holds.
        if (dlen < NN_CODEC_HEADER_BYTES)
            return proto_fail (err, err_size, PROTO_E_SIZE,
                               "%s: codec payload of %zu bytes is shorter than its %d-byte "
                               "header", tn, dlen, NN_CODEC_HEADER_BYTES);
        rc = s_codec_payload_header (zmq_msg_data (&frames[2]), dlen, d, type, err,
                                     err_size);
        if (rc)
            return rc;
    }
    else
    if (dlen != count * 4)      //  checked: count * 4 fits in size_t
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "%s: data %zu bytes, shape needs %" PRIu64 " (%" PRIu64 " floats)",
                           tn, dlen, count * 4, count);
    const uint32_t batch = d->dims[0];
    const uint8_t *t = proto_frame_bytes (&frames[3], &len);
    if (type == PROTO_MSG_GRADIENTS) {
        if (len != PROTO_LOSS_SIZE)
            return proto_fail (err, err_size, PROTO_E_SIZE,
                               "GRADIENTS: loss frame %zu bytes, expected %d",
                               len, PROTO_LOSS_SIZE);
        self->loss.loss = pl_le_get_f32 (t);
        self->loss.correct = pl_le_get_u32 (t + 4);
        self->loss.count = pl_le_get_u32 (t + 8);
        rc = s_loss_check (&self->loss, batch, err, err_size);
    }
    else {
        if (len != (size_t) batch * 4)
            return proto_fail (err, err_size, PROTO_E_SIZE,
                               "%s: labels %zu bytes, batch %" PRIu32 " needs %zu",
                               tn, len, batch, (size_t) batch * 4);
        self->labels = nn_calloc (batch, sizeof *self->labels);
        self->labels_count = batch;
        rc = proto_labels_decode (self->labels, t, batch, l->classes, tn, err, err_size);
    }
    if (rc)
        return rc;
    if (d->dtype == PROTO_DTYPE_CODEC) {
        //  Decoded once into an aligned buffer the message owns; the frame
        //  stays with the caller, who closes it.
        float *out = nn_alloc_aligned (sizeof (float) * (size_t) count);
        rc = s_codec_payload_check (out, zmq_msg_data (&frames[2]), dlen, d, type,
                                    err, err_size);
        if (rc) {
            nn_free (out);
            return rc;
        }
        self->data_copy = out;
        self->data_view = out;
        self->data_count = (size_t) count;
        self->codec = ((const uint8_t *) zmq_msg_data (&frames[2]))[0];
        self->codec_bytes = dlen;
        return 0;
    }
    s_data_take (self, &frames[2], (size_t) count);
    return 0;
}

int
proto_msg_slab_check (const proto_msg_t *self, char *err, size_t err_size)
{
    const proto_limits_t l = proto_limits_resolve (NULL);
    if (!self->data_view)
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: no slab data set",
                           proto_type_name (self->header.type));
    return s_slab_check (&self->slab, self->header.type,
                         (self->header.flags & PROTO_FLAG_CALIBRATE) != 0, &l, err, err_size);
}

int
proto_msg_tensor_check (const proto_msg_t *self, char *err, size_t err_size)
{
    const char *tn = proto_type_name (self->header.type);
    if (!self->data_view && !(self->codec && self->has_data))
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: no tensor set", tn);
    int rc = proto_tensor_desc_check (&self->tensor, NULL, tn, err, err_size);
    if (rc)
        return rc;
    if (self->tensor.dtype == PROTO_DTYPE_CODEC) {
        if (!self->has_data)
            return proto_fail (err, err_size, PROTO_E_VALUE,
                               "%s: a received codec tensor is not sent again", tn);
        rc = s_codec_payload_check (NULL, zmq_msg_data ((zmq_msg_t *) &self->data),
                                    zmq_msg_size ((zmq_msg_t *) &self->data),
                                    &self->tensor, self->header.type, err, err_size);
        if (rc)
            return rc;
    }
    uint32_t batch = self->tensor.dims[0];
    if (self->header.type == PROTO_MSG_GRADIENTS)
        return s_loss_check (&self->loss, batch, err, err_size);
    if (!self->labels || self->labels_count != batch)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: %zu labels set for batch %" PRIu32,
                           tn, self->labels ? self->labels_count : 0, batch);
    return proto_labels_check (self->labels, self->labels_count, 0, tn, err, err_size);
}

void
proto_msg_encode_slab (proto_msg_t *self, zmq_msg_t *frames)
{
    const proto_slab_t *s = &self->slab;
    uint8_t *b = proto_frame_alloc (&frames[1], PROTO_SLAB_SIZE);
    memcpy (b, s->spec_hash, PROTO_SPEC_HASH_SIZE);
    pl_le_put_u32 (b + 32, s->unit_begin);
    pl_le_put_u32 (b + 36, s->unit_end);
    pl_le_put_u64 (b + 40, s->count);
    pl_le_put_u64 (b + 48, s->sample_count);
    s_data_frame (self, &frames[2]);
}

void
proto_msg_encode_tensor (proto_msg_t *self, zmq_msg_t *frames)
{
    uint8_t *b = proto_frame_alloc (&frames[1], proto_tensor_desc_size (self->tensor.rank));
    proto_tensor_desc_encode (b, &self->tensor);
    s_data_frame (self, &frames[2]);
    if (self->header.type == PROTO_MSG_GRADIENTS) {
        b = proto_frame_alloc (&frames[3], PROTO_LOSS_SIZE);
        pl_le_put_f32 (b, self->loss.loss);
        pl_le_put_u32 (b + 4, self->loss.correct);
        pl_le_put_u32 (b + 8, self->loss.count);
    }
    else {
        b = proto_frame_alloc (&frames[3], 4 * self->labels_count);
        proto_labels_encode (b, self->labels, self->labels_count);
    }
}
