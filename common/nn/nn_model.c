/*  nn_model.c: a model part built from units [begin, end) of a spec. */
#include "nn_model.h"

#include "nn_alloc.h"
#include "nn_layer.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

struct _nn_model_t {
    nn_model_spec_t spec;
    int unit_begin, unit_end, max_batch;
    int layers_count;
    nn_layer_t *layers;
    float *weights, *grads, *optim;
    size_t params_count, weights_count;
    float *acts;                //  activation slab (layer outputs, saved state)
    float *grad_a, *grad_b;     //  ping-pong input-gradient buffers
    float *scratch;             //  threads x scratch_stride floats
    size_t scratch_stride;
    float *grad_parts;          //  per-thread partial parameter gradients
    double *bn_parts;           //  per-thread BN partial sums
    int threads;
    bool shared;                //  slabs borrowed from another model
    nn_model_t *base;           //  a context: whose threads and per-thread
                                //  buffers it uses (it owns none)
    nn_tensor_info_t *tensors;
    int tensors_count;
    int last_n;
};

//  Round float counts up to a cache line so every view is 64-byte aligned.
static size_t
s_align (size_t count)
{
    return (count + 15) / 16 * 16;
}

static void
s_tensor (nn_model_t *self, const nn_layer_t *layer, const char *what, size_t offset,
          size_t count, bool trainable, int dims_count, const int *dims)
{
    nn_tensor_info_t *t = &self->tensors[self->tensors_count++];
    int unit = 0, local = layer->index;
    //  Recover (unit, layer-in-unit) from the global index.
    while (local >= self->spec.units[unit].layers_count)
        local -= self->spec.units[unit++].layers_count;
    snprintf (t->name, sizeof t->name, "u%d.l%d.%s.%s", unit, local, layer->ops->name, what);
    t->offset = offset;
    t->count = count;
    t->trainable = trainable;
    t->dims_count = dims_count;
    for (int i = 0; i < 4; i++)
        t->dims[i] = i < dims_count ? dims[i] : 0;
}

//  Lay parameters out in the slabs and record the tensor table.
static void
s_place_params (nn_model_t *self)
{
    size_t at = 0;
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        size_t buffers;
        nn_layer_param_counts (&l->spec, l->ishape, &l->w_count, &l->b_count, &buffers);
        if (l->w_count) {
            l->w = self->weights + at;
            l->dw = self->grads + at;
            int dims[4], nd;
            if (l->spec.kind == NN_LAYER_CONV) {
                nd = 4;
                dims[0] = l->spec.out_channels, dims[1] = dims[2] = l->spec.kernel;
                dims[3] = l->ishape.c;
            }
            else if (l->spec.kind == NN_LAYER_DENSE) {
                nd = 2;
                dims[0] = l->spec.out_channels, dims[1] = (int) nn_shape_size (l->ishape);
            }
            else {
                nd = 1;
                dims[0] = (int) l->w_count;
            }
            s_tensor (self, l, "w", at, l->w_count, true, nd, dims);
            at += l->w_count;
        }
        if (l->b_count) {
            l->b = self->weights + at;
            l->db = self->grads + at;
            int dims[1] = { (int) l->b_count };
            s_tensor (self, l, "b", at, l->b_count, true, 1, dims);
            at += l->b_count;
        }
    }
    assert (at == self->params_count);
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        if (l->spec.kind != NN_LAYER_BATCHNORM)
            continue;
        int dims[1] = { l->ishape.c };
        l->running_mean = self->weights + at;
        s_tensor (self, l, "running_mean", at, (size_t) l->ishape.c, false, 1, dims);
        at += (size_t) l->ishape.c;
        l->running_var = self->weights + at;
        s_tensor (self, l, "running_var", at, (size_t) l->ishape.c, false, 1, dims);
        at += (size_t) l->ishape.c;
    }
    assert (at == self->weights_count);
}

//  Which layers run in place (output over input): those whose kind allows
//  it, when the input is a buffer of ours that its producer's backward
//  does not read.
static void
s_plan_inplace (nn_model_t *self)
{
    bool prev_owned = false;            //  is the previous output ours to overwrite?
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        bool prev_needs_output = i > 0 && self->layers[i - 1].ops->needs_output;
        l->inplace = l->ops->can_inplace && prev_owned && !prev_needs_output
                     && l->spec.kind != NN_LAYER_FLATTEN;
        bool owns_out = !l->inplace && l->spec.kind != NN_LAYER_FLATTEN;
        prev_owned = owns_out || (prev_owned && (l->inplace || l->spec.kind == NN_LAYER_FLATTEN));
    }
}

//  Fusions that save passes over (and memory for) the largest tensors:
//  - BN -> ReLU: the BN clamps its own output; the ReLU forward is a no-op.
//  - ReLU -> max-pool: the pool records, per output, whether its winner
//    was positive, and its backward routes gradient only there; the ReLU
//    backward is a no-op.
//  - BN -> ReLU -> max-pool, all three: nothing reads the BN output after
//    the pool's forward, so the BN runs the pool itself a few samples at a
//    time from a chunk of output in scratch (nn_layer.c), and keeps x-hat
//    over its own input instead. Backward, the BN takes the pool's output
//    gradient, makes the pool's chunk by chunk and writes its input
//    gradient over x-hat: no whole-batch buffer at the BN's size is needed
//    forward or backward.
static void
s_fuse (nn_model_t *self)
{
    for (int i = 1; i < self->layers_count; i++) {
        nn_layer_t *prev = &self->layers[i - 1], *l = &self->layers[i];
        if (l->spec.kind != NN_LAYER_RELU || !l->inplace)
            continue;
        bool bn = prev->spec.kind == NN_LAYER_BATCHNORM;
        bool pool = i + 1 < self->layers_count
                    && self->layers[i + 1].spec.kind == NN_LAYER_MAXPOOL;
        if (bn) {
            prev->bn_relu = true;
            l->relu_fwd_fused = true;
        }
        if (pool) {
            l->relu_bwd_fused = true;
            self->layers[i + 1].pool_mask_input = true;
        }
        if (bn && pool && prev->inplace) {
            prev->bn_transient = true;
            prev->bn_pool = &self->layers[i + 1];
            prev->inplace = false;
            l->in_bn_chain = true;
            self->layers[i + 1].in_bn_chain = true;
        }
    }
}

//  Carve the activation slab: outputs of layers that own one, BN x-hat
//  and statistics, dropout masks and max-pool winners.
static void
s_carve (nn_model_t *self)
{
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int i = 0; i < self->layers_count; i++) {
            nn_layer_t *l = &self->layers[i];
            size_t out_count = s_align ((size_t) self->max_batch * nn_shape_size (l->oshape));
            if (!l->inplace && !l->bn_transient && l->spec.kind != NN_LAYER_FLATTEN) {
                if (pass)
                    l->out = self->acts + at;
                at += out_count;
            }
            if (l->bn_transient) {
                //  Output a chunk at a time in scratch; x-hat over the input.
                if (pass)
                    l->out = NULL;
            }
            else if (l->spec.kind == NN_LAYER_BATCHNORM || l->spec.kind == NN_LAYER_DROPOUT) {
                if (pass)
                    l->saved = self->acts + at;
                at += out_count;
            }
            if (l->spec.kind == NN_LAYER_BATCHNORM) {
                if (pass)
                    l->stats = self->acts + at;
                at += s_align (2 * (size_t) l->ishape.c);
            }
            if (l->spec.kind == NN_LAYER_MAXPOOL) {
                //  One byte a winner.
                if (pass)
                    l->argmax = (uint8_t *) (self->acts + at);
                at += s_align ((out_count + sizeof (float) - 1) / sizeof (float));
            }
        }
        total = at;
        if (pass == 0)
            self->acts = nn_alloc_aligned (sizeof (float) * (total ? total : 1));
    }
}

//  Input gradients alternate between two buffers (layers that can work in
//  place keep theirs); each is sized to the largest gradient it will hold,
//  found by walking the backward pass once as nn_model_backward does. A
//  chained BN writes its input gradient over its x-hat, in the activation
//  slab, and the ReLU and max-pool of its chain pass their dout to it.
static void
s_place_grad_buffers (nn_model_t *self)
{
    size_t need[2] = { 0, 0 };
    int g = -1;                         //  -1: not one of ours (dout, x-hat)
    for (int i = self->layers_count - 1; i >= 1; i--) {
        const nn_layer_t *l = &self->layers[i];
        if (l->in_bn_chain)
            continue;
        if (l->bn_transient) {
            g = -1;
            continue;
        }
        int din = (l->ops->can_inplace && g >= 0) ? g : (g == 0 ? 1 : 0);
        size_t count = (size_t) self->max_batch * nn_shape_size (l->ishape);
        need[din] = need[din] > count ? need[din] : count;
        g = din;
    }
    self->grad_a = nn_alloc_aligned (sizeof (float) * s_align (need[0] + 1));
    self->grad_b = nn_alloc_aligned (sizeof (float) * s_align (need[1] + 1));
}

//  Point self's layers at owner's per-thread buffers (owner: self, or
//  the base of a context; the same units and batch size, so the same
//  layout) and thread count.
static void
s_point_thread_buffers (nn_model_t *self, const nn_model_t *owner)
{
    size_t at = 0, bn_at = 0;
    int threads = owner->threads;
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        l->threads = threads;
        l->scratch = owner->scratch;
        l->scratch_stride = owner->scratch_stride;
        l->grad_parts = owner->grad_parts + at;
        at += s_align (l->w_count + l->b_count) * (size_t) (threads - 1);
        l->bn_parts = owner->bn_parts + bn_at;
        if (l->spec.kind == NN_LAYER_BATCHNORM)
            bn_at += 2 * (size_t) l->ishape.c * (size_t) threads;
    }
}

//  Per-thread buffers: conv scratch (also the chained BN's output chunk),
//  partial gradients, BN partial sums. Only used during a forward or
//  backward call, so a context uses its base's.
static void
s_place_thread_buffers (nn_model_t *self, int threads)
{
    if (self->base) {
        s_place_thread_buffers (self->base, threads);
        s_point_thread_buffers (self, self->base);
        return;
    }
    nn_free (self->scratch);
    nn_free (self->grad_parts);
    nn_free (self->bn_parts);
    size_t stride = 0, parts = 0, bn = 0;
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        size_t sc = s_align (nn_layer_scratch_count (l, self->max_batch));
        stride = stride > sc ? stride : sc;
        parts += s_align (l->w_count + l->b_count) * (size_t) (threads - 1);
        if (l->spec.kind == NN_LAYER_BATCHNORM)
            bn += 2 * (size_t) l->ishape.c * (size_t) threads;
    }
    self->scratch = nn_alloc_aligned (sizeof (float) * (stride * (size_t) threads + 16));
    self->scratch_stride = stride;
    self->grad_parts = nn_alloc_aligned (sizeof (float) * (parts + 16));
    self->bn_parts = nn_alloc_aligned (sizeof (double) * (bn + 16));
    self->threads = threads;
    s_point_thread_buffers (self, self);
}

void
nn_model_set_threads (nn_model_t *self, int threads)
{
    s_place_thread_buffers (self, threads < 1 ? 1 : threads);
}

int
nn_model_threads (const nn_model_t *self)
{
    return self->base ? self->base->threads : self->threads;
}

nn_model_t *
nn_model_new (const nn_model_spec_t *spec, int unit_begin, int unit_end, int max_batch,
              char *err, size_t err_size)
{
    if (nn_model_spec_check (spec, err, err_size))
        return NULL;
    if (unit_begin < 0 || unit_end > spec->units_count || unit_begin >= unit_end) {
        nn_errf (err, err_size, "model %s: unit range [%d, %d) outside 0..%d",
                 spec->name, unit_begin, unit_end, spec->units_count);
        return NULL;
    }
    if (max_batch < 1) {
        nn_errf (err, err_size, "model %s: batch size must be > 0, got %d",
                 spec->name, max_batch);
        return NULL;
    }
    nn_model_t *self = nn_calloc (1, sizeof *self);
    self->spec = *spec;
    self->unit_begin = unit_begin;
    self->unit_end = unit_end;
    self->max_batch = max_batch;
    int first = 0;
    for (int u = 0; u < unit_begin; u++)
        first += spec->units[u].layers_count;
    for (int u = unit_begin; u < unit_end; u++)
        self->layers_count += spec->units[u].layers_count;
    self->layers = nn_calloc ((size_t) self->layers_count, sizeof (nn_layer_t));

    nn_shape_t shape = unit_begin ? nn_model_spec_unit_output (spec, unit_begin - 1)
                                  : nn_model_spec_input (spec);
    size_t params = 0, buffers = 0;
    int i = 0;
    for (int u = unit_begin; u < unit_end; u++)
        for (int k = 0; k < spec->units[u].layers_count; k++, i++) {
            nn_layer_t *l = &self->layers[i];
            l->spec = spec->units[u].layers[k];
            l->ops = nn_layer_ops (l->spec.kind);
            l->index = first + i;
            l->ishape = shape;
            nn_layer_output_shape (&l->spec, shape, &l->oshape, NULL, 0);
            shape = l->oshape;
            size_t w, b, buf;
            nn_layer_param_counts (&l->spec, l->ishape, &w, &b, &buf);
            params += w + b;
            buffers += buf;
            self->tensors_count += (w > 0) + (b > 0) + (buf > 0 ? 2 : 0);
        }
    self->params_count = params;
    self->weights_count = params + buffers;
    self->weights = nn_alloc_aligned (sizeof (float) * (self->weights_count + 1));
    self->grads = nn_alloc_aligned (sizeof (float) * (params + 1));
    self->optim = nn_alloc_aligned (sizeof (float) * (params + 1));
    self->tensors = nn_calloc ((size_t) self->tensors_count + 1, sizeof (nn_tensor_info_t));
    self->tensors_count = 0;
    s_place_params (self);
    s_plan_inplace (self);
    s_fuse (self);
    s_carve (self);
    s_place_grad_buffers (self);
    s_place_thread_buffers (self, 1);
    return self;
}

nn_model_t *
nn_model_new_shared (nn_model_t *base, char *err, size_t err_size)
{
    nn_model_t *self = nn_model_new (&base->spec, base->unit_begin, base->unit_end,
                                     base->max_batch, err, err_size);
    if (!self)
        return NULL;
    nn_free (self->weights);
    nn_free (self->grads);
    nn_free (self->optim);
    self->weights = base->weights;
    self->grads = base->grads;
    self->optim = base->optim;
    self->shared = true;
    self->tensors_count = 0;
    s_place_params (self);
    //  Per-thread buffers are the base's (contexts take turns).
    nn_free (self->scratch);
    nn_free (self->grad_parts);
    nn_free (self->bn_parts);
    self->scratch = self->grad_parts = NULL;
    self->bn_parts = NULL;
    self->base = base;
    s_point_thread_buffers (self, base);
    return self;
}

void
nn_model_use_slabs (nn_model_t *self, nn_model_t *owner)
{
    assert (self && owner);
    assert (self->unit_begin == owner->unit_begin && self->unit_end == owner->unit_end);
    assert (self->weights_count == owner->weights_count
            && self->params_count == owner->params_count);
    if (self->weights == owner->weights)
        return;
    if (!self->shared) {
        nn_free (self->weights);
        nn_free (self->grads);
        nn_free (self->optim);
        self->shared = true;
    }
    self->weights = owner->weights;
    self->grads = owner->grads;
    self->optim = owner->optim;
    self->tensors_count = 0;
    s_place_params (self);
}

void
nn_model_destroy (nn_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    nn_model_t *self = *self_p;
    nn_free (self->layers);
    if (!self->shared) {
        nn_free (self->weights);
        nn_free (self->grads);
        nn_free (self->optim);
    }
    nn_free (self->acts);
    nn_free (self->grad_a);
    nn_free (self->grad_b);
    nn_free (self->scratch);
    nn_free (self->grad_parts);
    nn_free (self->bn_parts);
    nn_free (self->tensors);
    nn_free (self);
    *self_p = NULL;
}

static void
s_xavier (float *w, size_t count, double fan_in, double fan_out, nn_rng_t *rng)
{
    double bound = sqrt (6.0 / (fan_in + fan_out));
    for (size_t i = 0; i < count; i++)
        w[i] = (float) ((2.0 * nn_rng_uniform_double (rng) - 1.0) * bound);
}

void
nn_model_init (nn_model_t *self, const nn_rng_t *rng)
{
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        nn_rng_t stream = nn_rng_split (rng, (uint64_t) l->index);
        if (l->spec.kind == NN_LAYER_CONV) {
            double rs = (double) l->spec.kernel * l->spec.kernel;
            s_xavier (l->w, l->w_count, rs * l->ishape.c, rs * l->spec.out_channels, &stream);
        }
        else if (l->spec.kind == NN_LAYER_DENSE)
            s_xavier (l->w, l->w_count, (double) nn_shape_size (l->ishape),
                      l->spec.out_channels, &stream);
        else if (l->spec.kind == NN_LAYER_BATCHNORM) {
            for (int c = 0; c < l->ishape.c; c++) {
                l->w[c] = 1.0f;
                l->running_mean[c] = 0.0f;
                l->running_var[c] = 1.0f;
            }
        }
        if (l->b)
            memset (l->b, 0, sizeof (float) * l->b_count);
    }
    memset (self->optim, 0, sizeof (float) * self->params_count);
    nn_model_zero_grad (self);
}

const float *
nn_model_forward (nn_model_t *self, const float *x, int n, bool train, nn_rng_t *rng)
{
    assert (n >= 1 && n <= self->max_batch);
    if (self->base)
        s_point_thread_buffers (self, self->base);  //  it may have changed threads
    const float *cur = x;
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        if (l->inplace)
            l->out = (float *) cur;
        l->ops->forward (l, cur, n, train, rng);
        cur = l->out;
    }
    self->last_n = n;
    return cur;
}

void
nn_model_backward (nn_model_t *self, const float *dout, float *dx)
{
    if (self->base)
        s_point_thread_buffers (self, self->base);
    const float *g = dout;
    for (int i = self->layers_count - 1; i >= 0; i--) {
        nn_layer_t *l = &self->layers[i];
        if (l->in_bn_chain)
            continue;                   //  the chain's BN takes g as is
        bool ours = g == self->grad_a || g == self->grad_b;
        float *din;
        if (i == 0)
            din = dx;
        else if (l->bn_transient)
            din = l->saved;             //  over x-hat, element for element
        else if (l->ops->can_inplace && ours)
            din = (float *) g;
        else
            din = g == self->grad_a ? self->grad_b : self->grad_a;
        l->ops->backward (l, g, din);
        g = din;
    }
}

void
nn_model_zero_grad (nn_model_t *self)
{
    memset (self->grads, 0, sizeof (float) * self->params_count);
}

const nn_model_spec_t *nn_model_spec (const nn_model_t *self) { return &self->spec; }
int nn_model_unit_begin (const nn_model_t *self) { return self->unit_begin; }
int nn_model_unit_end (const nn_model_t *self) { return self->unit_end; }
int nn_model_max_batch (const nn_model_t *self) { return self->max_batch; }
nn_shape_t nn_model_input_shape (const nn_model_t *self) { return self->layers[0].ishape; }

nn_shape_t
nn_model_output_shape (const nn_model_t *self)
{
    return self->layers[self->layers_count - 1].oshape;
}

float *nn_model_weights (nn_model_t *self) { return self->weights; }
const float *nn_model_weights_const (const nn_model_t *self) { return self->weights; }
float *nn_model_grads (nn_model_t *self) { return self->grads; }
float *nn_model_optim_state (nn_model_t *self) { return self->optim; }
const float *nn_model_optim_state_const (const nn_model_t *self) { return self->optim; }
size_t nn_model_params_count (const nn_model_t *self) { return self->params_count; }
size_t nn_model_weights_count (const nn_model_t *self) { return self->weights_count; }
int nn_model_tensors_count (const nn_model_t *self) { return self->tensors_count; }

void
nn_model_tensor (const nn_model_t *self, int index, nn_tensor_info_t *info)
{
    assert (index >= 0 && index < self->tensors_count);
    *info = self->tensors[index];
}

int
nn_model_copy_tensors (nn_model_t *dst, const nn_model_t *src)
{
    int copied = 0;
    for (int i = 0; i < dst->tensors_count; i++) {
        const nn_tensor_info_t *d = &dst->tensors[i];
        for (int j = 0; j < src->tensors_count; j++) {
            const nn_tensor_info_t *s = &src->tensors[j];
            if (s->count != d->count || strcmp (s->name, d->name))
                continue;
            memcpy (dst->weights + d->offset, src->weights + s->offset,
                    sizeof (float) * d->count);
            copied++;
            break;
        }
    }
    return copied;
}
