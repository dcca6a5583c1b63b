/*  nn_codec.h: codecs for the tensors that cross the split (activations up,
    gradients down): none, fp16, int8 and, for gradients, top-k with error
    feedback. The byte layout is proto/PROTOCOL.md's "Codecs" section.

    Pure: no I/O, no globals; the only randomness (int8's stochastic
    rounding) comes from an nn_rng_t the caller passes in. Tensors are
    float32 (n, h, w, c) NHWC; channels are the last axis.

    Sender: an nn_codec_encoder_t per direction and per device, made for
    one shape. It owns its scratch and, for topk, the residual: what a step
    did not send is added to the next step's gradient (error feedback), so
    over steps the sum of what was sent plus the final residual is the sum
    of the inputs. Every encoding of an encoder has the same size
    (nn_codec_encoder_bytes): k is fixed by the shape and the fraction;
    with zstd (a lossless stage after the codec, params.zstd) the size of
    each encoding is its own (nn_codec_encoder_last_bytes), at most
    nn_codec_encoder_bytes.

    Receiver: nn_codec_decode is a pure function. It checks every field a
    peer controls before it writes a float (see nn_codec_decode) and fails
    with a message; it never trusts a size or a count it read.
*/
#ifndef NN_CODEC_H_INCLUDED
#define NN_CODEC_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn_rng.h"

//  Wire ids (byte 0 of the codec header); the order is also "lossiness":
//  none is exact, fp16 keeps 11 significant bits, int8 8 bits per channel
//  range, topk drops most elements.
typedef enum {
    NN_CODEC_NONE = 0,
    NN_CODEC_FP16 = 1,
    NN_CODEC_INT8 = 2,
    NN_CODEC_TOPK = 3,
    NN_CODEC_COUNT
} nn_codec_id_t;

#define NN_CODEC_HEADER_BYTES 24
//  Header flag (int8 only): the sender rounded stochastically. Information
//  for the receiver's log; decoding is the same.
#define NN_CODEC_FLAG_STOCHASTIC 0x01u
//  Header flag (fp16, int8, topk): the body (everything after the header)
//  is one zstd frame that declares its content size; its content is the
//  body the codec writes without this flag (PROTOCOL.md "Codecs").
#define NN_CODEC_FLAG_ZSTD 0x02u
//  The zstd level the encoders use: 1, the fastest of the standard levels
//  (about 400 MB/s of int8 payload per core; levels 2-5 compress the
//  split's activations no better, docs/codecs.md).
#define NN_CODEC_ZSTD_LEVEL 1

typedef struct {
    uint32_t n, h, w, c;        //  NHWC; a dense output is (n, 1, 1, units)
} nn_codec_shape_t;

typedef struct {
    nn_codec_id_t id;
    bool stochastic;            //  int8: round up with probability equal to the
                                //  fraction (unbiased), from the rng passed to encode
    double topk_fraction;       //  topk: share of elements sent each step, (0, 1];
                                //  k = ceil(fraction * count)
    bool zstd;                  //  compress the body with zstd (not for none)
} nn_codec_params_t;

//  "none", "fp16", "int8", "topk"; NULL for anything else.
const char *nn_codec_name (nn_codec_id_t id);
//  Name -> id, 0; -1 for an unknown name (NULL included).
int nn_codec_parse (const char *name, nn_codec_id_t *id);

//  Elements of a shape (0 if any dim is 0). Fits in uint64_t.
uint64_t nn_codec_shape_count (const nn_codec_shape_t *shape);

//  k for count elements at fraction (1..count), for the planner and encoder.
uint32_t nn_codec_topk_k (uint64_t count, double fraction);

//  Bytes of one encoding: header plus body (PROTOCOL.md): none 4 count,
//  fp16 2 count, int8 8 channels + count, topk 8 k. For the planner too.
uint64_t nn_codec_wire_bytes (nn_codec_id_t id, uint64_t count, uint32_t channels,
                              uint32_t k);
//  The most bytes an encoding with the zstd flag may have for a body of
//  nn_codec_wire_bytes - 24 bytes: the header plus zstd's compress bound
//  (a receiver refuses more). A body beyond zstd's limits: UINT64_MAX.
uint64_t nn_codec_zstd_wire_bytes_max (uint64_t raw_wire_bytes);

//  ---------------------------------------------------------------------
//  Sender

typedef struct _nn_codec_encoder_t nn_codec_encoder_t;

//  An encoder for tensors of this shape. -1 cases (NULL with a message):
//  unknown id, a dim of 0, more than 2^32 - 1 elements (topk's indices are
//  u32), topk_fraction outside (0, 1] for topk, zstd with none.
nn_codec_encoder_t *nn_codec_encoder_new (const nn_codec_params_t *params,
                                          const nn_codec_shape_t *shape,
                                          char *err, size_t err_size);
void nn_codec_encoder_destroy (nn_codec_encoder_t **self_p);

//  Size of every encoding this encoder writes; with zstd, the most an
//  encoding may take (the size out must have).
size_t nn_codec_encoder_bytes (const nn_codec_encoder_t *self);
//  Size of the last successful encoding (0 before the first): the bytes to
//  send. Without zstd, nn_codec_encoder_bytes.
size_t nn_codec_encoder_last_bytes (const nn_codec_encoder_t *self);

//  Encode in (the shape's count floats) into out (out_size >= the
//  encoder's bytes). rng is needed for int8 with stochastic rounding (may
//  be NULL otherwise). -1 with a message when in holds a non-finite value
//  and the codec cannot carry it (int8: no scale fits it; topk: it would
//  poison the residual); fp16 and none carry inf and NaN (PROTOCOL.md).
//  On failure a topk residual is unchanged.
int nn_codec_encode (nn_codec_encoder_t *self, uint8_t *out, size_t out_size,
                     const float *in, nn_rng_t *rng, char *err, size_t err_size);

//  topk: the residual (count floats) that the next encode adds to its
//  input; NULL for the other codecs. Borrowed.
const float *nn_codec_encoder_residual (const nn_codec_encoder_t *self);
//  topk: forget the residual (a new plan, a model replaced by FedAvg).
void nn_codec_encoder_reset (nn_codec_encoder_t *self);

//  ---------------------------------------------------------------------
//  Receiver

//  Decode buf (size bytes, any alignment) into out (room for expected's
//  count floats). Checks, in order, and fails with a message at the first
//  failure, writing nothing to out:
//  - size >= 24, codec id known and == expected_id, reserved 0, flags
//    allowed for the codec, dims == expected (each >= 1), count <= 2^32 - 1;
//  - k: 0 for none/fp16/int8, <= count for topk;
//  - size == nn_codec_wire_bytes exactly; with the zstd flag (allowed for
//    fp16, int8 and topk), size <= nn_codec_zstd_wire_bytes_max of that,
//    and the body is exactly one zstd frame that declares a content size
//    of nn_codec_wire_bytes - 24 and decodes to exactly that many bytes
//    (never more is written: the output is bounded by the shape), which
//    are then checked as below;
//  - int8: every channel's scale finite and > 0, zero finite and
//    zero + 255 scale finite in float;
//  - topk: indices < count and strictly increasing.
//  Values themselves (f32, fp16, topk's) travel unchecked, as proto's f32
//  tensors do: a receiver checks finiteness where it needs it.
int nn_codec_decode (float *out, const void *buf, size_t size, nn_codec_id_t expected_id,
                     const nn_codec_shape_t *expected, char *err, size_t err_size);

//  ---------------------------------------------------------------------
//  Kernels, exposed for tests and the benchmark (the codecs use them).

//  IEEE 754 binary16, round to nearest, ties to even; overflow (|x| >=
//  65520) to inf; inf to inf; NaN to a quiet NaN with the sign and the top
//  9 payload bits (sign | 0x7E00 | mantissa >> 13), as F16C's VCVTPS2PH
//  does. The fast paths (F16C when nn_isa_active () is avx2 or avx512, a
//  branch-light portable one otherwise) and the reference (integer
//  rounding, written for clarity) give the same bits; tests compare them.
void nn_codec_fp16_from_float (uint16_t *out, const float *in, size_t count);
void nn_codec_fp16_from_float_ref (uint16_t *out, const float *in, size_t count);
//  Exact (every binary16 is a float); a NaN keeps sign and payload and is
//  made quiet (bit 22 set), as VCVTPH2PS does.
void nn_codec_fp16_to_float (float *out, const uint16_t *in, size_t count);
void nn_codec_fp16_to_float_ref (float *out, const uint16_t *in, size_t count);

//  topk selection: the k indices of the largest |x[i]| (ties: the lower
//  index first), ascending, into index. x finite, 1 <= k <= count.
//  scratch: count floats. The reference sorts everything; tests compare.
void nn_codec_topk_select (uint32_t *index, const float *x, uint32_t count, uint32_t k,
                           float *scratch);
void nn_codec_topk_select_ref (uint32_t *index, const float *x, uint32_t count,
                               uint32_t k);

#endif
