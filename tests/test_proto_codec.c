/*  test_proto_codec: ACTIVATIONS and GRADIENTS carrying a codec payload
    (proto/PROTOCOL.md, "Codecs"; dtype 2): round trips through proto's
    encoder and decoder give nn_codec_decode's floats, the codec and the
    payload's size; every way a peer can break a payload (bad header,
    shape or count that is not the descriptor's, a NaN int8 scale, an
    unknown codec, none dressed as a codec, topk on ACTIVATIONS, a short
    payload) is refused with PROTO_E_* and a message, and a sender cannot
    send what the receiver would refuse. Payloads with the zstd flag
    travel at their own size, up to zstd's bound for the shape. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include <zstd.h>

#include "nn_codec.h"
#include "pl_le.h"
#include "pltest_frames.h"
#include "proto_msg.h"

#define N 4
#define H 3
#define W 2
#define C 5
#define COUNT (N * H * W * C)

static const uint32_t s_dims[4] = { N, H, W, C };

static void
s_tensor (float *x)
{
    for (int i = 0; i < COUNT; i++)
        x[i] = (float) sin (0.37 * i) * (float) (1 + i % 7);
}

//  The payload of x in codec id (topk at fraction 0.25), *size bytes; the
//  caller frees it.
static uint8_t *
s_payload (nn_codec_id_t id, const float *x, size_t *size)
{
    nn_codec_params_t params = { .id = id, .topk_fraction = 0.25 };
    nn_codec_shape_t shape = { N, H, W, C };
    char err[256];
    nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, &shape, err, sizeof err);
    cr_assert_not_null (enc, "%s", err);
    *size = nn_codec_encoder_bytes (enc);
    uint8_t *buf = malloc (*size);
    cr_assert_eq (nn_codec_encode (enc, buf, *size, x, NULL, err, sizeof err), 0, "%s", err);
    nn_codec_encoder_destroy (&enc);
    return buf;
}

//  A message of type carrying payload (size bytes).
static proto_msg_t *
s_msg (int type, const uint8_t *payload, size_t size)
{
    proto_msg_t *m = proto_msg_new (type);
    proto_msg_set_route (m, 1, 0, 0, 0);
    cr_assert_eq (proto_msg_set_tensor_encoded (m, payload, size, s_dims), 0);
    if (type == PROTO_MSG_ACTIVATIONS) {
        int32_t labels[N] = { 0, 1, 2, 3 };
        proto_msg_set_labels (m, labels, N);
    }
    else {
        proto_loss_t loss = { .loss = 1.0f, .correct = 1, .count = N };
        proto_msg_set_loss (m, &loss);
    }
    return m;
}

static int
s_decode (proto_msg_t **m, pltest_frames_t *f, char *err, size_t err_size)
{
    return proto_msg_decode_bytes (m, (const void *const *) f->data, f->size, f->count, NULL,
                                   err, err_size);
}

//  A message of type carrying payload (size bytes, codec id), through
//  proto's check, encoder and decoder: the data frame is the payload as it
//  is, and the decoded floats are want (COUNT). what names the case.
static void
s_expect_round_trip (int type, nn_codec_id_t id, const uint8_t *payload, size_t size,
                     const float *want, const char *what)
{
    char err[512] = "";
    proto_msg_t *m = s_msg (type, payload, size);
    cr_assert_eq (proto_msg_tensor_codec (m), id);
    cr_assert_eq (proto_msg_tensor_wire_bytes (m), size);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), 0, "%s: %s", what, err);
    pltest_frames_t f = pltest_frames_of (m);
    cr_assert_eq (f.data[1][0], PROTO_DTYPE_CODEC, "descriptor dtype");
    cr_assert_eq (f.size[2], size, "the data frame is the payload");
    cr_assert (memcmp (f.data[2], payload, size) == 0);
    proto_msg_t *got = NULL;
    cr_assert_eq (s_decode (&got, &f, err, sizeof err), 0, "%s: %s", what, err);
    cr_assert_eq (proto_msg_type (got), type);
    cr_assert_eq (proto_msg_tensor_codec (got), id);
    cr_assert_eq (proto_msg_tensor_wire_bytes (got), size);
    cr_assert_eq (proto_msg_tensor_count (got), (size_t) COUNT);
    cr_assert (memcmp (proto_msg_tensor_data (got), want, sizeof (float) * COUNT) == 0,
               "%s: proto's floats are not those expected", what);
    proto_msg_destroy (&got);
    pltest_frames_free (&f);
}

Test (proto_codec, every_codec_round_trips_through_proto)
{
    float x[COUNT], want[COUNT];
    s_tensor (x);
    for (int id = NN_CODEC_FP16; id < NN_CODEC_COUNT; id++) {
        int type = id == NN_CODEC_TOPK ? PROTO_MSG_GRADIENTS : PROTO_MSG_ACTIVATIONS;
        size_t size;
        uint8_t *payload = s_payload ((nn_codec_id_t) id, x, &size);
        nn_codec_shape_t shape = { N, H, W, C };
        char err[512] = "";
        cr_assert_eq (nn_codec_decode (want, payload, size, (nn_codec_id_t) id, &shape, err,
                                       sizeof err), 0, "%s", err);
        //  want: nn_codec_decode's floats.
        s_expect_round_trip (type, (nn_codec_id_t) id, payload, size, want,
                             nn_codec_name ((nn_codec_id_t) id));
        free (payload);
    }
    //  f32 tensors say codec none and 4 bytes a float.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_GRADIENTS);
    cr_assert_eq (proto_msg_set_tensor_copy (m, x, s_dims, 4), 0);
    cr_assert_eq (proto_msg_tensor_codec (m), NN_CODEC_NONE);
    cr_assert_eq (proto_msg_tensor_wire_bytes (m), 4 * (size_t) COUNT);
    proto_msg_destroy (&m);
}

//  A message of type carrying payload (size bytes), as frames to damage;
//  frees payload.
static pltest_frames_t
s_frames_of_payload (int type, uint8_t *payload, size_t size)
{
    pltest_frames_t f = pltest_frames_of (s_msg (type, payload, size));
    free (payload);
    return f;
}

//  A valid int8 ACTIVATIONS, as frames to damage.
static pltest_frames_t
s_int8_frames (int type, nn_codec_id_t id)
{
    float x[COUNT];
    s_tensor (x);
    size_t size;
    uint8_t *payload = s_payload (id, x, &size);
    return s_frames_of_payload (type, payload, size);
}

//  A few bytes cannot make the receiver allocate a huge tensor: a 24-byte
//  fp16 header claiming 1 x 65536 x 65535 x 1 elements (16 GiB as f32) is
//  refused on the frame limit before any allocation, and so is a payload
//  whose size is not its shape's.
Test (proto_codec, a_small_payload_cannot_claim_a_huge_tensor)
{
    pltest_frames_t f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_FP16);
    pl_le_put_u32 (f.data[1] + 4, 1);
    pl_le_put_u32 (f.data[1] + 8, 65536);
    pl_le_put_u32 (f.data[1] + 12, 65535);
    pl_le_put_u32 (f.data[1] + 16, 1);
    f.size[3] = 4;                              //  one label, in range
    f.size[2] = NN_CODEC_HEADER_BYTES;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "over the frame limit");
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_FP16);
    proto_limits_t limits = { .max_frame_bytes = 4 * COUNT - 4 };
    pltest_frames_refused (&f, &limits, PROTO_E_SIZE, "over the frame limit");
}

Test (proto_codec, malformed_payloads_refused)
{
    //  Bad header: reserved bytes, flags, an unknown codec id.
    pltest_frames_t f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    f.data[2][2] = 1;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "ACTIVATIONS: codec: int8: reserved bytes must be 0");
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_FP16);
    f.data[2][1] = 1;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "fp16: flags 0x01 not allowed");
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    f.data[2][0] = 9;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "ACTIVATIONS: codec id 9 unknown");
    //  Count mismatch: the payload's shape is not the descriptor's.
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    pl_le_put_u32 (f.data[2] + 4, N - 1);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "is not the expected");
    //  The descriptor's shape needs another payload size: refused on the
    //  size, before anything of the shape's size is allocated.
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    pl_le_put_u32 (f.data[1] + 4, N - 1);     //  the descriptor's batch, labels too
    f.size[3] -= 4;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "its header and shape need");
    //  A payload cut short, and one shorter than its header.
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    f.size[2] -= 1;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "its header and shape need");
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    f.size[2] = 10;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "shorter than its 24-byte header");
    //  A NaN scale.
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8);
    pl_le_put_f32 (f.data[2] + 24 + 8 * 2, NAN);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "channel 2: scale nan");
    //  none has one encoding (f32), and topk is for gradients only.
    f = s_int8_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_FP16);
    f.data[2][0] = NN_CODEC_NONE;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "codec none travels as dtype 1");
    f = s_int8_frames (PROTO_MSG_GRADIENTS, NN_CODEC_TOPK);
    uint8_t *act = f.data[0];
    pl_le_put_u16 (act + 6, PROTO_MSG_ACTIVATIONS);
    f.size[3] = 4 * N;                          //  labels 0, in range
    memset (f.data[3], 0, 12);
    f.data[3] = realloc (f.data[3], 4 * N);
    memset (f.data[3], 0, 4 * N);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "codec topk is for GRADIENTS only");
    //  topk indices out of order.
    f = s_int8_frames (PROTO_MSG_GRADIENTS, NN_CODEC_TOPK);
    uint32_t first = pl_le_get_u32 (f.data[2] + 24);
    pl_le_put_u32 (f.data[2] + 28, first);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "strictly increasing");
}

Test (proto_codec, sender_refuses_what_a_receiver_would)
{
    float x[COUNT];
    s_tensor (x);
    size_t size;
    uint8_t *payload = s_payload (NN_CODEC_INT8, x, &size);
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    //  Shorter than a header, none, an unknown codec, a shape that is no tensor.
    cr_assert_eq (proto_msg_set_tensor_encoded (m, payload, 10, s_dims), -1);
    uint8_t saved = payload[0];
    payload[0] = NN_CODEC_NONE;
    cr_assert_eq (proto_msg_set_tensor_encoded (m, payload, size, s_dims), -1);
    payload[0] = 7;
    cr_assert_eq (proto_msg_set_tensor_encoded (m, payload, size, s_dims), -1);
    payload[0] = saved;
    const uint32_t zero[4] = { 0, H, W, C };
    cr_assert_eq (proto_msg_set_tensor_encoded (m, payload, size, zero), -1);
    proto_msg_destroy (&m);
    //  A NaN scale set: proto_msg_check says why, the send would fail.
    pl_le_put_f32 (payload + 24, NAN);
    m = s_msg (PROTO_MSG_ACTIVATIONS, payload, size);
    char err[512] = "";
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    cr_assert_not_null (strstr (err, "channel 0: scale nan"), "%s", err);
    proto_msg_destroy (&m);
    free (payload);
}

//  A receiver's frame limit leaves room for int8's per-channel parameters
//  where they outweigh f32 (one element per channel).
Test (proto_codec, frame_limit_fits_int8_payloads)
{
    proto_limits_t l = { .max_batch = 1, .h = 1, .w = 1, .c = 4096, .slab_count = 1,
                         .max_events = 1, .max_json_bytes = 1 };
    size_t bytes = proto_limits_frame_bytes (&l, true);
    cr_assert_geq (bytes, nn_codec_wire_bytes (NN_CODEC_INT8, 4096, 4096, 0));
}

//  ---------------------------------------------------------------------
//  zstd (NN_CODEC_FLAG_ZSTD): a payload's size is its own, at most
//  nn_codec_zstd_wire_bytes_max of the shape's; its frame is checked by
//  the decoder (PROTO_E_VALUE).

//  The payload of x in codec id with zstd (topk at fraction 0.25), *size
//  its bytes (the encoding's own); the caller frees it.
static uint8_t *
s_payload_zstd (nn_codec_id_t id, const float *x, size_t *size)
{
    nn_codec_params_t params = { .id = id, .topk_fraction = 0.25, .zstd = true };
    nn_codec_shape_t shape = { N, H, W, C };
    char err[256];
    nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, &shape, err, sizeof err);
    cr_assert_not_null (enc, "%s", err);
    size_t cap = nn_codec_encoder_bytes (enc);
    uint8_t *buf = malloc (cap);
    cr_assert_eq (nn_codec_encode (enc, buf, cap, x, NULL, err, sizeof err), 0, "%s", err);
    *size = nn_codec_encoder_last_bytes (enc);
    cr_assert_eq (buf[1] & NN_CODEC_FLAG_ZSTD, NN_CODEC_FLAG_ZSTD);
    nn_codec_encoder_destroy (&enc);
    return buf;
}

//  The most bytes a zstd payload of codec id may have for the test's
//  shape (topk: k of the fraction 0.25).
static size_t
s_zstd_max (nn_codec_id_t id)
{
    uint32_t k = id == NN_CODEC_TOPK ? nn_codec_topk_k (COUNT, 0.25) : 0;
    return (size_t) nn_codec_zstd_wire_bytes_max (nn_codec_wire_bytes (id, COUNT, C, k));
}

//  Both message types, each codec they carry, from a smooth tensor
//  (compresses) and from values spread over the binary16 range (does not:
//  the frame is larger than the payload without zstd, still within the
//  bound): the frame carries the payload as it is, and the floats are
//  those of the payload without zstd.
Test (proto_codec, zstd_payloads_round_trip_through_proto)
{
    float x[2][COUNT], want[COUNT];
    s_tensor (x[0]);
    nn_rng_t r;
    nn_rng_seed (&r, 21);
    for (int i = 0; i < COUNT; i++)
        x[1][i] = ldexpf (nn_rng_uniform (&r) - 0.5f, (int) nn_rng_below (&r, 40) - 24);
    int larger = 0;
    const int types[2] = { PROTO_MSG_ACTIVATIONS, PROTO_MSG_GRADIENTS };
    for (int ti = 0; ti < 2; ti++) {
        int type = types[ti];
        for (int id = NN_CODEC_FP16; id < NN_CODEC_COUNT; id++) {
            if (id == NN_CODEC_TOPK && type != PROTO_MSG_GRADIENTS)
                continue;
            for (int t = 0; t < 2; t++) {
                size_t raw, size;
                uint8_t *plain = s_payload ((nn_codec_id_t) id, x[t], &raw);
                uint8_t *payload = s_payload_zstd ((nn_codec_id_t) id, x[t], &size);
                cr_assert_leq (size, s_zstd_max ((nn_codec_id_t) id));
                larger += size > raw;
                nn_codec_shape_t shape = { N, H, W, C };
                char err[512] = "";
                cr_assert_eq (nn_codec_decode (want, plain, raw, (nn_codec_id_t) id, &shape,
                                               err, sizeof err), 0, "%s", err);
                //  want: the floats of the payload without zstd.
                char what[96];
                snprintf (what, sizeof what, "%s %s + zstd (tensor %d)",
                          proto_type_name (type), nn_codec_name ((nn_codec_id_t) id), t);
                s_expect_round_trip (type, (nn_codec_id_t) id, payload, size, want, what);
                free (payload);
                free (plain);
            }
        }
    }
    cr_assert_gt (larger, 0, "some frame is larger than its payload without zstd");
}

//  A valid zstd message of type and codec id, as frames to damage; *max
//  the bound of its payload.
static pltest_frames_t
s_zstd_frames (int type, nn_codec_id_t id, size_t *max)
{
    float x[COUNT];
    s_tensor (x);
    size_t size;
    uint8_t *payload = s_payload_zstd (id, x, &size);
    *max = s_zstd_max (id);
    return s_frames_of_payload (type, payload, size);
}

//  The data frame of f grown to size bytes, zeros after the payload.
static void
s_grow_payload (pltest_frames_t *f, size_t size)
{
    f->data[2] = realloc (f->data[2], size + 1);
    if (size > f->size[2])
        memset (f->data[2] + f->size[2], 0, size - f->size[2]);
    f->size[2] = size;
}

Test (proto_codec, zstd_payload_over_its_bound_refused_on_size)
{
    const struct { int type; nn_codec_id_t id; } cases[] = {
        { PROTO_MSG_ACTIVATIONS, NN_CODEC_FP16 }, { PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8 },
        { PROTO_MSG_GRADIENTS, NN_CODEC_INT8 }, { PROTO_MSG_GRADIENTS, NN_CODEC_TOPK } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t max;
        pltest_frames_t f = s_zstd_frames (cases[i].type, cases[i].id, &max);
        s_grow_payload (&f, max + 1);
        pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "(zstd)");
        //  At the bound the size passes; the decoder refuses the padding
        //  after the frame.
        f = s_zstd_frames (cases[i].type, cases[i].id, &max);
        s_grow_payload (&f, max);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
    }
    //  The message names the bound.
    size_t max;
    pltest_frames_t f = s_zstd_frames (PROTO_MSG_ACTIVATIONS, NN_CODEC_INT8, &max);
    s_grow_payload (&f, max + 1);
    char needle[128];
    snprintf (needle, sizeof needle, "ACTIVATIONS: int8 payload (zstd) %zu bytes, its header "
              "and shape allow at most %zu", max + 1, max);
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, needle);
}

Test (proto_codec, zstd_payload_with_a_corrupt_frame_refused)
{
    size_t max;
    const int types[2] = { PROTO_MSG_ACTIVATIONS, PROTO_MSG_GRADIENTS };
    for (int ti = 0; ti < 2; ti++) {
        int type = types[ti];
        nn_codec_id_t id = type == PROTO_MSG_GRADIENTS ? NN_CODEC_TOPK : NN_CODEC_FP16;
        //  Cut by a byte; cut to the header; the magic number broken;
        //  garbage after the frame; the flag on a body that is no frame.
        pltest_frames_t f = s_zstd_frames (type, id, &max);
        f.size[2] -= 1;
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
        f = s_zstd_frames (type, id, &max);
        f.size[2] = NN_CODEC_HEADER_BYTES;
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
        f = s_zstd_frames (type, id, &max);
        f.data[2][NN_CODEC_HEADER_BYTES] ^= 0xFF;
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
        f = s_zstd_frames (type, id, &max);
        s_grow_payload (&f, f.size[2] + 3);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
        f = s_int8_frames (type, id);
        f.data[2][1] |= NN_CODEC_FLAG_ZSTD;
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "not one whole zstd frame");
    }
    //  A frame of one byte more than the shape needs (its own content
    //  size right): the frame's declared size is checked.
    float x[COUNT];
    s_tensor (x);
    size_t raw;
    uint8_t *plain = s_payload (NN_CODEC_INT8, x, &raw);
    size_t body = raw - NN_CODEC_HEADER_BYTES;
    uint8_t *more = calloc (1, body + 1);
    memcpy (more, plain + NN_CODEC_HEADER_BYTES, body);
    uint8_t *z = malloc (NN_CODEC_HEADER_BYTES + ZSTD_compressBound (body + 1));
    memcpy (z, plain, NN_CODEC_HEADER_BYTES);
    z[1] |= NN_CODEC_FLAG_ZSTD;
    size_t zn = ZSTD_compress (z + NN_CODEC_HEADER_BYTES, ZSTD_compressBound (body + 1), more,
                               body + 1, 1);
    cr_assert_not (ZSTD_isError (zn));
    pltest_frames_t f = pltest_frames_of (s_msg (PROTO_MSG_ACTIVATIONS, plain, raw));
    s_grow_payload (&f, NN_CODEC_HEADER_BYTES + zn);
    memcpy (f.data[2], z, NN_CODEC_HEADER_BYTES + zn);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "declares");
    //  The codec's checks inside a valid frame: a NaN scale. A sender
    //  refuses it as a receiver would.
    pl_le_put_f32 (plain + NN_CODEC_HEADER_BYTES + 8 * 2, NAN);
    zn = ZSTD_compress (z + NN_CODEC_HEADER_BYTES, ZSTD_compressBound (body + 1),
                        plain + NN_CODEC_HEADER_BYTES, body, 1);
    cr_assert_not (ZSTD_isError (zn));
    proto_msg_t *m = s_msg (PROTO_MSG_ACTIVATIONS, z, NN_CODEC_HEADER_BYTES + zn);
    char err[512] = "";
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    cr_assert_not_null (strstr (err, "channel 2: scale nan"), "%s", err);
    proto_msg_destroy (&m);
    pl_le_put_f32 (plain + NN_CODEC_HEADER_BYTES + 8 * 2, 1.0f);
    f = pltest_frames_of (s_msg (PROTO_MSG_ACTIVATIONS, plain, raw));
    s_grow_payload (&f, NN_CODEC_HEADER_BYTES + zn);
    memcpy (f.data[2], z, NN_CODEC_HEADER_BYTES + zn);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "channel 2: scale nan");
    free (plain); free (more); free (z);
}

//  A receiver's frame limit leaves room for a zstd payload at its bound,
//  which exceeds the payload without zstd and, with one element per
//  channel (int8), f32.
Test (proto_codec, frame_limit_fits_zstd_payloads)
{
    const uint32_t shapes[][4] = { { 1, 1, 1, 4096 }, { 1, 1, 1, 65536 }, { 3, 1, 1, 1000 },
                                   { 100, 7, 7, 64 }, { 1, 2, 2, 3 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        proto_limits_t l = { .max_batch = shapes[i][0], .h = shapes[i][1], .w = shapes[i][2],
                             .c = shapes[i][3], .slab_count = 1, .max_events = 1,
                             .max_json_bytes = 1 };
        uint64_t count = (uint64_t) l.max_batch * l.h * l.w * l.c;
        size_t bytes = proto_limits_frame_bytes (&l, true);
        for (int id = NN_CODEC_FP16; id <= NN_CODEC_INT8; id++) {
            uint64_t z = nn_codec_zstd_wire_bytes_max (nn_codec_wire_bytes ((nn_codec_id_t) id,
                                                                            count, l.c, 0));
            cr_assert_geq (bytes, z, "%u x %u x %u x %u, %s: limit %zu < bound %llu",
                           l.max_batch, l.h, l.w, l.c, nn_codec_name ((nn_codec_id_t) id),
                           bytes, (unsigned long long) z);
        }
    }
}
