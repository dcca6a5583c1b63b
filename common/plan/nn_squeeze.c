/*  nn_squeeze.c: zstd's ratio on the split tensors, measured (nn_squeeze.h). */
#include "nn_squeeze.h"

#include "nn_alloc.h"
#include "nn_codec.h"
#include "nn_kernels.h"
#include "nn_rng.h"

#include <assert.h>
#include <string.h>

int
nn_squeeze_kind (int codec, bool up)
{
    if (codec == NN_CODEC_FP16)
        return up ? NN_SQUEEZE_FP16_UP : NN_SQUEEZE_FP16_DOWN;
    if (codec == NN_CODEC_INT8)
        return up ? NN_SQUEEZE_INT8_UP : NN_SQUEEZE_INT8_DOWN;
    return -1;
}

//  Encode t (shape) with codec, plain and with zstd: *ratio = zstd body /
//  plain body. -1 with a message.
static int
s_ratio (double *ratio, const float *t, const nn_codec_shape_t *shape, nn_codec_id_t codec,
         bool stochastic, nn_rng_t *rng, char *err, size_t err_size)
{
    size_t body[2] = { 0, 0 };
    for (int z = 0; z < 2; z++) {
        nn_codec_params_t params = { .id = codec, .zstd = z == 1,
                                     .stochastic = stochastic && codec == NN_CODEC_INT8 };
        nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, shape, err, err_size);
        if (!enc)
            return -1;
        size_t bytes = nn_codec_encoder_bytes (enc);
        uint8_t *wire = nn_malloc (bytes);
        //  The same draws for both encodings: zstd sees the plain body.
        nn_rng_t r = *rng;
        int rc = nn_codec_encode (enc, wire, bytes, t, &r, err, err_size);
        body[z] = nn_codec_encoder_last_bytes (enc) - NN_CODEC_HEADER_BYTES;
        nn_free (wire);
        nn_codec_encoder_destroy (&enc);
        if (rc)
            return -1;
    }
    *rng = nn_rng_split (rng, 1);
    //  A body is never empty (every dim >= 1); the bound keeps a tiny
    //  body's frame overhead from reading as a huge ratio.
    double r = (double) body[1] / (double) body[0];
    *ratio = r < NN_SQUEEZE_RATIO_MAX ? r : NN_SQUEEZE_RATIO_MAX;
    return 0;
}

//  Both codecs' ratios for tensor t at unit m's output, one direction.
static int
s_boundary (double *row, const nn_model_t *m, const float *t, int n, bool up, bool stochastic,
            nn_rng_t *rng, char *err, size_t err_size)
{
    nn_shape_t s = nn_model_output_shape (m);
    nn_codec_shape_t shape = { (uint32_t) n, (uint32_t) s.h, (uint32_t) s.w, (uint32_t) s.c };
    for (int c = NN_CODEC_FP16; c <= NN_CODEC_INT8; c++)
        if (s_ratio (&row[nn_squeeze_kind (c, up)], t, &shape, (nn_codec_id_t) c, stochastic,
                     rng, err, err_size))
            return -1;
    return 0;
}

int
nn_squeeze_measure (nn_squeeze_t *out, const nn_model_spec_t *spec, const float *x,
                    const int *y, int n, uint64_t seed, bool stochastic, int threads,
                    char *err, size_t err_size)
{
    assert (out && spec && x && y);
    memset (out, 0, sizeof *out);
    if (n < 1)
        return nn_errf (err, err_size, "squeeze: %d samples; need at least 1", n);
    if (nn_model_spec_check (spec, err, err_size))
        return -1;
    int units = spec->units_count;
    if (units > NN_MAX_UNITS)
        return nn_errf (err, err_size, "squeeze: %d units exceed %d", units, NN_MAX_UNITS);
    //  One model per unit, as the daemons split it: every boundary's
    //  activation and gradient is a unit's output and input gradient.
    nn_model_t *m[NN_MAX_UNITS] = { NULL };
    float *grad[NN_MAX_UNITS] = { NULL };   //  grad[u]: gradient at unit u's output
    const float *act[NN_MAX_UNITS] = { NULL };
    float *dlogits = NULL;
    nn_rng_t seeded, rng;
    nn_rng_seed (&seeded, seed);
    rng = nn_rng_split (&seeded, 0x5155u);
    int rc = 0;
    for (int u = 0; u < units && rc == 0; u++) {
        m[u] = nn_model_new (spec, u, u + 1, n, err, err_size);
        if (!m[u]) {
            rc = -1;
            break;
        }
        nn_model_init (m[u], &seeded);
        nn_model_set_threads (m[u], threads > 0 ? threads : 1);
    }
    //  Forward through the units; the activations are encoded before any
    //  backward runs (a backward may reuse a unit's buffers). Then the
    //  loss and backward: unit u's input gradient is the gradient at
    //  boundary u - 1.
    for (int u = 0; u < units && rc == 0; u++)
        act[u] = nn_model_forward (m[u], u == 0 ? x : act[u - 1], n, true, &rng);
    out->boundaries = units - 1;
    for (int b = 0; b < units - 1 && rc == 0; b++)
        rc = s_boundary (out->ratio[b], m[b], act[b], n, true, stochastic, &rng, err,
                         err_size);
    if (rc == 0) {
        nn_shape_t o = nn_model_output_shape (m[units - 1]);
        dlogits = nn_alloc_aligned (sizeof (float) * (size_t) n * nn_shape_size (o));
        nn_softmax_xent (dlogits, act[units - 1], y, n, spec->classes, 1.0f, NULL);
    }
    for (int u = units - 1; u >= 1 && rc == 0; u--) {
        size_t in = (size_t) n * nn_shape_size (nn_model_input_shape (m[u]));
        grad[u - 1] = nn_alloc_aligned (sizeof (float) * in);
        nn_model_backward (m[u], u == units - 1 ? dlogits : grad[u], grad[u - 1]);
        rc = s_boundary (out->ratio[u - 1], m[u - 1], grad[u - 1], n, false, stochastic,
                         &rng, err, err_size);
    }
    for (int u = 0; u < units; u++) {
        nn_model_destroy (&m[u]);
        nn_free (grad[u]);
    }
    nn_free (dlogits);
    if (rc)
        memset (out, 0, sizeof *out);
    return rc;
}
