/*  fuzz_codec.c: libFuzzer harness for the split's codec decoder
    (nn_codec_decode, common/nn/nn_codec.h).

    Input: [codec u8][n u8][h u8][w u8][c u8][payload] (fuzz_common.h):
    the codec the receiver expects (mod 4) and the shape it expects, each
    dim (byte mod 8) + 1, so tensors stay small and lying dims are easy to
    reach; the rest is the payload, copied to an allocation that ends where
    it does (ASan catches any over-read).

    Contracts checked besides "no crash, no leak, no UB":
    - a refused payload leaves every output float as it was and says why;
    - an accepted payload has exactly nn_codec_wire_bytes bytes, every
      output float is read (ASan checks the extent), topk leaves at most k
      non-zero floats;
    - none and fp16 are canonical: the decoded floats encode back to the
      payload byte for byte, except that an fp16 signalling NaN comes back
      quiet (bit 9 set), as the format says.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "nn_codec.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define S_SENTINEL 1234.5f

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < FUZZ_CODEC_PREFIX)
        return 0;
    nn_codec_id_t id = (nn_codec_id_t) (data[0] % NN_CODEC_COUNT);
    nn_codec_shape_t shape = { (uint32_t) (data[1] % 8 + 1), (uint32_t) (data[2] % 8 + 1),
                               (uint32_t) (data[3] % 8 + 1), (uint32_t) (data[4] % 8 + 1) };
    size_t count = (size_t) nn_codec_shape_count (&shape);
    size_t len = size - FUZZ_CODEC_PREFIX;
    uint8_t *payload = malloc (len ? len : 1);
    memcpy (payload, data + FUZZ_CODEC_PREFIX, len);
    float *out = malloc (sizeof (float) * count);
    for (size_t i = 0; i < count; i++)
        out[i] = S_SENTINEL;
    char err[512] = "";
    int rc = nn_codec_decode (out, payload, len, id, &shape, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || err[0] == 0)
            fuzz_die ("codec: refused with rc %d and message '%s'", rc, err);
        for (size_t i = 0; i < count; i++)
            if (memcmp (&out[i], &(float) { S_SENTINEL }, sizeof (float)))
                fuzz_die ("codec: refused ('%s') but wrote float %zu", err, i);
        free (payload);
        free (out);
        return 0;
    }
    uint32_t k = 0;
    if (len >= 24)
        memcpy (&k, payload + 20, 4);       //  little-endian hosts (x86-64, aarch64)
    //  With the zstd flag the size is anything up to zstd's bound of the
    //  body (never for none); without it, exactly the formula's.
    const bool zstd = len >= 24 && (payload[1] & NN_CODEC_FLAG_ZSTD);
    const uint64_t raw = nn_codec_wire_bytes (id, count, shape.c, k);
    if (zstd ? id == NN_CODEC_NONE || len > nn_codec_zstd_wire_bytes_max (raw) : len != raw)
        fuzz_die ("codec: accepted %zu bytes for a %s payload of %zu elements, k %u", len,
                  nn_codec_name (id), count, k);
    size_t nonzero = 0;
    for (size_t i = 0; i < count; i++)
        nonzero += out[i] != 0.0f;
    if (id == NN_CODEC_TOPK && nonzero > k)
        fuzz_die ("codec: topk: %zu non-zero floats for k %u", nonzero, k);
    if ((id == NN_CODEC_NONE || id == NN_CODEC_FP16) && !zstd) {
        char eerr[512];
        nn_codec_params_t params = { .id = id };
        nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, &shape, eerr, sizeof eerr);
        if (!enc)
            fuzz_die ("codec: encoder for an accepted shape: %s", eerr);
        uint8_t *again = malloc (nn_codec_encoder_bytes (enc));
        if (nn_codec_encode (enc, again, nn_codec_encoder_bytes (enc), out, NULL, eerr,
                             sizeof eerr))
            fuzz_die ("codec: %s: re-encoding failed: %s", nn_codec_name (id), eerr);
        for (size_t i = 0; i < len; i++) {
            uint8_t want = payload[i];
            //  An fp16 signalling NaN (exponent 31, mantissa bit 9 clear,
            //  mantissa not 0) is decoded quiet.
            if (id == NN_CODEC_FP16 && i >= 24 && (i - 24) % 2 == 1) {
                uint16_t h = (uint16_t) (payload[i - 1] | payload[i] << 8);
                if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) && !(h & 0x200))
                    want |= 0x02;
            }
            if (again[i] != want)
                fuzz_die ("codec: %s: byte %zu re-encodes to 0x%02x, was 0x%02x",
                          nn_codec_name (id), i, again[i], payload[i]);
        }
        free (again);
        nn_codec_encoder_destroy (&enc);
    }
    free (payload);
    free (out);
    return 0;
}
