/*  srv_wire.c: per-device codecs and gradient encoders. See srv_wire.h. */
#include "srv_wire.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_codec.h"
#include "srv_assign.h"

//  int8 stochastic rounding of device i's gradients: its own stream.
#define S_ROUND_STREAM 0x67726164726f756eull    //  "gradroun"

typedef struct {
    nn_codec_encoder_t *enc;    //  NULL until its first GRADIENTS, or after a reset
    nn_codec_shape_t shape;
    uint64_t round;
    uint8_t *buf;               //  the encoder's bytes
    nn_rng_t rng;
} s_device_t;

struct _srv_wire_t {
    int devices;
    pl_codecs_t codecs[SRV_MAX_DEVICES];
    bool stochastic;
    bool zstd;                  //  codec payloads compressed (both directions)
    double topk_fraction;
    s_device_t dev[SRV_MAX_DEVICES];
};

srv_wire_t *
srv_wire_new (const pl_config_t *cfg)
{
    srv_wire_t *self = nn_calloc (1, sizeof *self);
    self->devices = cfg->devices < SRV_MAX_DEVICES ? cfg->devices : SRV_MAX_DEVICES;
    self->stochastic = cfg->int8_stochastic;
    self->zstd = cfg->codec_zstd;
    self->topk_fraction = cfg->topk_fraction;
    nn_rng_t base;
    nn_rng_seed (&base, cfg->seed);
    for (int i = 0; i < self->devices; i++) {
        self->codecs[i] = pl_config_codecs (cfg, i);
        self->dev[i].rng = nn_rng_split (&base, S_ROUND_STREAM ^ (uint64_t) i);
    }
    return self;
}

void
srv_wire_reset (srv_wire_t *self, int id)
{
    assert (self && id >= 0 && id < self->devices);
    s_device_t *d = &self->dev[id];
    nn_codec_encoder_destroy (&d->enc);
    nn_free (d->buf);
    d->buf = NULL;
}

void
srv_wire_destroy (srv_wire_t **self_p)
{
    assert (self_p);
    srv_wire_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < self->devices; i++)
        srv_wire_reset (self, i);
    nn_free (self);
    *self_p = NULL;
}

pl_codecs_t
srv_wire_codecs (const srv_wire_t *self, int id)
{
    assert (self && id >= 0 && id < self->devices);
    return self->codecs[id];
}

void
srv_wire_set_codecs (srv_wire_t *self, int id, pl_codecs_t codecs)
{
    assert (self && id >= 0 && id < self->devices);
    assert (codecs.up != NN_CODEC_TOPK);
    //  An encoder of the old codec must not encode the next GRADIENTS.
    if (codecs.down != self->codecs[id].down)
        srv_wire_reset (self, id);
    self->codecs[id].up = codecs.up;
    self->codecs[id].down = codecs.down;
}

void
srv_wire_assign (const srv_wire_t *self, int id, proto_assign_t *plan)
{
    pl_codecs_t c = srv_wire_codecs (self, id);
    plan->codec_up = (uint8_t) c.up;
    plan->codec_down = (uint8_t) c.down;
    plan->codec_flags = 0;
    if (self->stochastic && c.up == NN_CODEC_INT8)
        plan->codec_flags |= PROTO_ASSIGN_STOCHASTIC_UP;
    if (self->stochastic && c.down == NN_CODEC_INT8)
        plan->codec_flags |= PROTO_ASSIGN_STOCHASTIC_DOWN;
    if (self->zstd && c.up != NN_CODEC_NONE)
        plan->codec_flags |= PROTO_ASSIGN_ZSTD_UP;
    if (self->zstd && c.down != NN_CODEC_NONE)
        plan->codec_flags |= PROTO_ASSIGN_ZSTD_DOWN;
    plan->topk_fraction = c.down == NN_CODEC_TOPK ? (float) self->topk_fraction : 0.0f;
}

int
srv_wire_check_activations (const srv_wire_t *self, int id, const proto_msg_t *act,
                            char *why, size_t why_size)
{
    int got = proto_msg_tensor_codec (act);
    pl_codecs_t c = srv_wire_codecs (self, id);
    if (got == (int) c.up)
        return 0;
    const proto_header_t *h = proto_msg_header (act);
    return nn_errf (why, why_size, "ACTIVATIONS (epoch %u, iteration %u, micro-batch %u) "
                    "in codec %s; device %d's plan says %s", h->epoch, h->iteration,
                    h->micro_batch, nn_codec_name ((nn_codec_id_t) got), id,
                    nn_codec_name (c.up));
}

int
srv_wire_encode_gradients (srv_wire_t *self, int id, uint64_t round, proto_msg_t *grad,
                           char *why, size_t why_size)
{
    pl_codecs_t c = srv_wire_codecs (self, id);
    if (c.down == NN_CODEC_NONE)
        return 0;
    const proto_tensor_desc_t *td = proto_msg_tensor (grad);
    //  The worker answers ACTIVATIONS, which proto and the inbox held to
    //  rank 4 and this device's boundary.
    assert (td->rank == 4);
    nn_codec_shape_t shape = { td->dims[0], td->dims[1], td->dims[2], td->dims[3] };
    s_device_t *d = &self->dev[id];
    if (d->enc && (memcmp (&shape, &d->shape, sizeof shape) != 0 || d->round != round))
        srv_wire_reset (self, id);
    if (!d->enc) {
        nn_codec_params_t params = { .id = c.down, .stochastic = self->stochastic,
                                     .topk_fraction = self->topk_fraction,
                                     .zstd = self->zstd };
        d->enc = nn_codec_encoder_new (&params, &shape, why, why_size);
        if (!d->enc)
            return -1;
        d->buf = nn_malloc (nn_codec_encoder_bytes (d->enc));
        d->shape = shape;
        d->round = round;
    }
    if (nn_codec_encode (d->enc, d->buf, nn_codec_encoder_bytes (d->enc),
                         proto_msg_tensor_data (grad), &d->rng, why, why_size))
        return -1;
    size_t bytes = nn_codec_encoder_last_bytes (d->enc);
    uint32_t dims[4] = { shape.n, shape.h, shape.w, shape.c };
    if (proto_msg_set_tensor_encoded (grad, d->buf, bytes, dims))
        return nn_errf (why, why_size, "cannot build GRADIENTS from a %zu-byte %s payload",
                        bytes, nn_codec_name (c.down));
    return 0;
}
