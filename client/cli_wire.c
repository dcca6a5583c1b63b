/*  cli_wire.c: what the device sends and receives across the split: the
    privacy noise on its ACTIVATIONS, their codec, and the check that
    GRADIENTS come in the codec its plan names. The device owns the
    encoder of its uploads (one; none/fp16/int8 keep no state between
    steps); the server owns the one of its gradients. See cli_state.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_state.h"
#include "nn_alloc.h"
#include "pl_log.h"

//  Streams of the run's seed for the device's noise and int8 rounding:
//  named by purpose and device id, so they are the same for a seed
//  whichever process or host runs the device, and independent of its
//  dropout and data streams.
#define S_NOISE_STREAM 0x6e6f697365000000ull    //  "noise"
#define S_ROUND_STREAM 0x726f756e64000000ull    //  "round"

void
cli_wire_setup (cli_t *self)
{
    nn_rng_t base;
    nn_rng_seed (&base, self->cfg.seed);
    self->noise = pl_config_noise (&self->cfg, self->id);
    self->noise_rng = nn_rng_split (&base, S_NOISE_STREAM ^ (uint64_t) self->id);
    self->round_rng = nn_rng_split (&base, S_ROUND_STREAM ^ (uint64_t) self->id);
    if (self->noise.kind != NN_NOISE_NONE)
        pl_log_info ("client: adding %s noise of scale %g to uploaded activations",
                     nn_noise_name (self->noise.kind), self->noise.scale);
}

void
cli_wire_free (cli_t *self)
{
    nn_codec_encoder_destroy (&self->up_enc);
    nn_free (self->up_buf);
    nn_free (self->up_noisy);
    self->up_buf = NULL;
    self->up_noisy = NULL;
    self->up_count = 0;
}

//  The encoder for tensors of dims in the plan's up codec, rebuilt when
//  the shape or the codec changed (a PLAN). 0 or -1 with a message.
static int
s_encoder (cli_t *self, const uint32_t *dims, char *err, size_t err_size)
{
    nn_codec_shape_t shape = { dims[0], dims[1], dims[2], dims[3] };
    nn_codec_params_t params = {
        .id = (nn_codec_id_t) self->assign.codec_up,
        .stochastic = (self->assign.codec_flags & PROTO_ASSIGN_STOCHASTIC_UP) != 0,
        .zstd = (self->assign.codec_flags & PROTO_ASSIGN_ZSTD_UP) != 0 };
    //  A PLAN may change the codec or only its flags (codec_flags).
    if (self->up_enc && memcmp (&shape, &self->up_shape, sizeof shape) == 0
    &&  self->up_codec == params.id && self->up_stochastic == params.stochastic
    &&  self->up_zstd == params.zstd)
        return 0;
    nn_codec_encoder_destroy (&self->up_enc);
    nn_free (self->up_buf);
    self->up_buf = NULL;
    self->up_enc = nn_codec_encoder_new (&params, &shape, err, err_size);
    if (!self->up_enc)
        return -1;
    self->up_buf = nn_malloc (nn_codec_encoder_bytes (self->up_enc));
    self->up_shape = shape;
    self->up_codec = params.id;
    self->up_stochastic = params.stochastic;
    self->up_zstd = params.zstd;
    return 0;
}

int
cli_wire_set_activations (cli_t *self, proto_msg_t *msg, const float *out,
                          const uint32_t *dims, char *err, size_t err_size)
{
    size_t count = (size_t) dims[0] * dims[1] * dims[2] * dims[3];
    const float *send = out;
    if (self->noise.kind != NN_NOISE_NONE) {
        //  On a copy: the model's own output feeds its backward pass.
        if (count > self->up_count) {
            nn_free (self->up_noisy);
            self->up_noisy = nn_alloc_aligned (sizeof (float) * count);
            self->up_count = count;
        }
        memcpy (self->up_noisy, out, sizeof (float) * count);
        nn_noise_add (self->up_noisy, count, &self->noise, &self->noise_rng);
        send = self->up_noisy;
    }
    if (self->assign.codec_up == NN_CODEC_NONE) {
        if (proto_msg_set_tensor_copy (msg, send, dims, 4))
            return nn_errf (err, err_size, "cannot build ACTIVATIONS of %ux%ux%ux%u",
                            dims[0], dims[1], dims[2], dims[3]);
        return 0;
    }
    if (s_encoder (self, dims, err, err_size))
        return -1;
    if (nn_codec_encode (self->up_enc, self->up_buf, nn_codec_encoder_bytes (self->up_enc),
                         send, &self->round_rng, err, err_size))
        return -1;
    size_t bytes = nn_codec_encoder_last_bytes (self->up_enc);
    if (proto_msg_set_tensor_encoded (msg, self->up_buf, bytes, dims))
        return nn_errf (err, err_size, "cannot build ACTIVATIONS from a %zu-byte %s "
                        "payload", bytes, nn_codec_name (self->up_codec));
    return 0;
}

int
cli_wire_check_gradients (const cli_t *self, const proto_msg_t *msg, char *err,
                          size_t err_size)
{
    int got = proto_msg_tensor_codec (msg);
    if (got == self->assign.codec_down)
        return 0;
    return nn_errf (err, err_size, "GRADIENTS (epoch %u, iteration %u, micro-batch %u) in "
                    "codec %s; this device's plan says %s", proto_msg_header (msg)->epoch,
                    proto_msg_header (msg)->iteration, proto_msg_header (msg)->micro_batch,
                    nn_codec_name ((nn_codec_id_t) got),
                    nn_codec_name ((nn_codec_id_t) self->assign.codec_down));
}
