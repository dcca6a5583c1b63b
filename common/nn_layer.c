/*  nn_layer.c: per-kind forward/backward over nn_kernels (NHWC). */
#include "nn_layer.h"

#include "nn_alloc.h"

#include <string.h>

#define S_BN_MOMENTUM 0.1f
#define S_BN_EPS 1e-5f

static nn_conv_shape_t
s_conv_shape (const nn_layer_t *self, int n)
{
    nn_conv_shape_t s = {
        .n = n, .h = self->ishape.h, .w = self->ishape.w, .c = self->ishape.c,
        .k = self->spec.out_channels, .r = self->spec.kernel, .s = self->spec.kernel,
        .stride = self->spec.stride, .pad = self->spec.pad
    };
    nn_conv_shape_finish (&s);
    return s;
}

static nn_pool_shape_t
s_pool_shape (const nn_layer_t *self, int n)
{
    nn_pool_shape_t s = {
        .n = n, .h = self->ishape.h, .w = self->ishape.w, .c = self->ishape.c,
        .kernel = self->spec.kernel, .stride = self->spec.stride, .pad = self->spec.pad
    };
    nn_pool_shape_finish (&s);
    return s;
}

static void
s_remember (nn_layer_t *self, const float *in, int n, bool train)
{
    self->in_ptr = in;
    self->n = n;
    self->train = train;
}

static void
s_conv_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    nn_conv_shape_t s = s_conv_shape (self, n);
    nn_conv2d_forward (self->out, in, self->w, self->b, &s, self->scratch);
}

static void
s_conv_backward (nn_layer_t *self, const float *dout, float *din)
{
    nn_conv_shape_t s = s_conv_shape (self, self->n);
    nn_conv2d_backward (din, self->dw, self->db, dout, self->in_ptr, self->w, &s,
                        self->scratch);
}

static void
s_dense_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    nn_dense_forward (self->out, in, self->w, self->b, n,
                      (int) nn_shape_size (self->ishape), self->spec.out_channels);
}

static void
s_dense_backward (nn_layer_t *self, const float *dout, float *din)
{
    nn_dense_backward (din, self->dw, self->db, dout, self->in_ptr, self->w, self->n,
                       (int) nn_shape_size (self->ishape), self->spec.out_channels);
}

static void
s_bn_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    int m = n * self->ishape.h * self->ishape.w;
    if (train)
        nn_batchnorm_forward_train (self->out, self->saved, self->stats,
                                    self->running_mean, self->running_var, in,
                                    self->w, self->b, m, self->ishape.c,
                                    S_BN_MOMENTUM, S_BN_EPS);
    else
        nn_batchnorm_forward_eval (self->out, in, self->w, self->b,
                                   self->running_mean, self->running_var, m,
                                   self->ishape.c, S_BN_EPS);
}

static void
s_bn_backward (nn_layer_t *self, const float *dout, float *din)
{
    //  Backward through evaluation-mode BN is not part of training.
    int m = self->n * self->ishape.h * self->ishape.w;
    nn_batchnorm_backward (din, self->dw, self->db, dout, self->saved, self->stats,
                           self->w, m, self->ishape.c);
}

static void
s_relu_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    nn_relu_forward (self->out, in, (size_t) n * nn_shape_size (self->oshape));
}

static void
s_relu_backward (nn_layer_t *self, const float *dout, float *din)
{
    if (din)
        nn_relu_backward (din, dout, self->out, (size_t) self->n * nn_shape_size (self->oshape));
}

static void
s_maxpool_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    nn_pool_shape_t s = s_pool_shape (self, n);
    nn_maxpool_forward (self->out, self->argmax, in, &s);
}

static void
s_maxpool_backward (nn_layer_t *self, const float *dout, float *din)
{
    nn_pool_shape_t s = s_pool_shape (self, self->n);
    if (din)
        nn_maxpool_backward (din, dout, self->argmax, &s);
}

static void
s_avgpool_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    nn_pool_shape_t s = s_pool_shape (self, n);
    nn_avgpool_forward (self->out, in, &s);
}

static void
s_avgpool_backward (nn_layer_t *self, const float *dout, float *din)
{
    nn_pool_shape_t s = s_pool_shape (self, self->n);
    if (din)
        nn_avgpool_backward (din, dout, &s);
}

//  Flatten is a relabelling of NHWC memory: out is the input itself.
static void
s_flatten_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    self->out = (float *) in;
}

static void
s_flatten_backward (nn_layer_t *self, const float *dout, float *din)
{
    if (din && din != dout)
        memcpy (din, dout, sizeof (float) * self->n * nn_shape_size (self->ishape));
}

static void
s_dropout_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_remember (self, in, n, train);
    size_t count = (size_t) n * nn_shape_size (self->oshape);
    if (train && self->spec.p > 0.0f)
        nn_dropout_forward (self->out, self->saved, in, count, self->spec.p, rng);
    else if (self->out != in)
        memcpy (self->out, in, sizeof (float) * count);
}

static void
s_dropout_backward (nn_layer_t *self, const float *dout, float *din)
{
    size_t count = (size_t) self->n * nn_shape_size (self->oshape);
    if (!din)
        return;
    if (self->train && self->spec.p > 0.0f)
        nn_dropout_backward (din, dout, self->saved, count);
    else if (din != dout)
        memcpy (din, dout, sizeof (float) * count);
}

static const nn_layer_ops_t s_ops[] = {
    [NN_LAYER_CONV] = { "conv", s_conv_forward, s_conv_backward, false, false },
    [NN_LAYER_BATCHNORM] = { "bn", s_bn_forward, s_bn_backward, true, false },
    [NN_LAYER_RELU] = { "relu", s_relu_forward, s_relu_backward, true, true },
    [NN_LAYER_MAXPOOL] = { "maxpool", s_maxpool_forward, s_maxpool_backward, false, false },
    [NN_LAYER_AVGPOOL] = { "avgpool", s_avgpool_forward, s_avgpool_backward, false, false },
    [NN_LAYER_DENSE] = { "dense", s_dense_forward, s_dense_backward, false, false },
    [NN_LAYER_FLATTEN] = { "flatten", s_flatten_forward, s_flatten_backward, true, false },
    [NN_LAYER_DROPOUT] = { "dropout", s_dropout_forward, s_dropout_backward, true, false },
};

const nn_layer_ops_t *
nn_layer_ops (nn_layer_kind_t kind)
{
    if ((int) kind < NN_LAYER_CONV || (int) kind > NN_LAYER_DROPOUT)
        return NULL;
    return &s_ops[kind];
}

int
nn_layer_output_shape (const nn_layer_spec_t *spec, nn_shape_t in, nn_shape_t *out,
                       char *err, size_t err_size)
{
    switch (spec->kind) {
        case NN_LAYER_CONV: {
            nn_conv_shape_t s = { .n = 1, .h = in.h, .w = in.w, .c = in.c,
                                  .k = spec->out_channels, .r = spec->kernel,
                                  .s = spec->kernel, .stride = spec->stride,
                                  .pad = spec->pad };
            if (spec->out_channels < 1 || nn_conv_shape_finish (&s))
                return nn_errf (err, err_size,
                                "conv %dx%d stride %d pad %d to %d channels does not fit input %dx%dx%d",
                                spec->kernel, spec->kernel, spec->stride, spec->pad,
                                spec->out_channels, in.h, in.w, in.c);
            *out = (nn_shape_t) { s.p, s.q, s.k };
            return 0;
        }
        case NN_LAYER_MAXPOOL:
        case NN_LAYER_AVGPOOL: {
            nn_pool_shape_t s = { .n = 1, .h = in.h, .w = in.w, .c = in.c,
                                  .kernel = spec->kernel, .stride = spec->stride,
                                  .pad = spec->pad };
            if (nn_pool_shape_finish (&s))
                return nn_errf (err, err_size,
                                "pool %d stride %d pad %d does not fit input %dx%dx%d",
                                spec->kernel, spec->stride, spec->pad, in.h, in.w, in.c);
            *out = (nn_shape_t) { s.p, s.q, in.c };
            return 0;
        }
        case NN_LAYER_DENSE:
            if (spec->out_channels < 1)
                return nn_errf (err, err_size, "dense needs at least one unit");
            if (in.h != 1 || in.w != 1)
                return nn_errf (err, err_size,
                                "dense needs a flat input, got %dx%dx%d (add a flatten)",
                                in.h, in.w, in.c);
            *out = (nn_shape_t) { 1, 1, spec->out_channels };
            return 0;
        case NN_LAYER_FLATTEN:
            *out = (nn_shape_t) { 1, 1, (int) nn_shape_size (in) };
            return 0;
        case NN_LAYER_DROPOUT:
            if (!(spec->p >= 0.0f && spec->p < 1.0f))
                return nn_errf (err, err_size, "dropout p must be in [0, 1), got %g",
                                (double) spec->p);
            *out = in;
            return 0;
        case NN_LAYER_BATCHNORM:
        case NN_LAYER_RELU:
            *out = in;
            return 0;
    }
    return nn_errf (err, err_size, "unknown layer kind %d", (int) spec->kind);
}

void
nn_layer_param_counts (const nn_layer_spec_t *spec, nn_shape_t in,
                       size_t *w_count, size_t *b_count, size_t *buffers)
{
    *w_count = *b_count = *buffers = 0;
    switch (spec->kind) {
        case NN_LAYER_CONV:
            *w_count = (size_t) spec->out_channels * spec->kernel * spec->kernel * in.c;
            *b_count = spec->bias ? (size_t) spec->out_channels : 0;
            break;
        case NN_LAYER_DENSE:
            *w_count = (size_t) spec->out_channels * nn_shape_size (in);
            *b_count = spec->bias ? (size_t) spec->out_channels : 0;
            break;
        case NN_LAYER_BATCHNORM:
            *w_count = *b_count = (size_t) in.c;
            *buffers = 2 * (size_t) in.c;
            break;
        default:
            break;
    }
}

size_t
nn_layer_scratch_count (const nn_layer_t *self, int max_batch)
{
    if (self->spec.kind != NN_LAYER_CONV)
        return 0;
    nn_conv_shape_t s = s_conv_shape (self, max_batch);
    return nn_conv2d_scratch_count (&s);
}
