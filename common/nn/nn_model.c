/*  nn_model.c: a model part built from units [begin, end) of a spec. */
#include "nn_model.h"

#include "nn_alloc.h"
#include "nn_layer.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

//  Where a gradient lives during backward (see s_plan_backward).
typedef enum {
    S_G_NONE = 0,           //  not computed (dx NULL)
    S_G_DOUT,               //  the caller's dout
    S_G_DX,                 //  the caller's dx
    S_G_SLOT,               //  a slot of the gradient slab
    S_G_SAVED               //  a chained BN's x-hat (its input gradient)
} s_gkind_t;

typedef struct {
    s_gkind_t kind;
    int index;              //  slot, or layer for S_G_SAVED
} s_gref_t;

//  One layer's backward: where its output gradient is read, where it
//  writes each input's gradient, and where that must be added (when the
//  input has several consumers and another wrote its gradient first).
typedef struct {
    s_gref_t dout;
    s_gref_t write[2];
    s_gref_t add_to[2];     //  kind S_G_NONE: write is the gradient itself
    size_t count[2];        //  floats per sample of input j
} s_bstep_t;

struct _nn_model_t {
    nn_model_spec_t spec;
    int unit_begin, unit_end, max_batch;
    int layers_count;
    nn_layer_t *layers;
    float *weights, *grads, *optim;
    size_t params_count, weights_count;
    float *acts;                //  activation slab (layer outputs, saved state)
    s_bstep_t *bsteps;          //  per layer, the backward wiring
    float *gslab;               //  gradient slots
    size_t *slot_at;            //  each slot's offset in gslab
    int slots_count;
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
    snprintf (t->name, sizeof t->name, "u%d.l%d.%s.%s", layer->unit, layer->local,
              layer->ops->name, what);
    t->offset = offset;
    t->count = count;
    t->trainable = trainable;
    t->dims_count = dims_count;
    for (int i = 0; i < 4; i++)
        t->dims[i] = i < dims_count ? dims[i] : 0;
}

//  Lay parameters out in the slabs (trainable ones first, then buffers)
//  and record the tensor table.
static void
s_place_params (nn_model_t *self)
{
    size_t at = 0;
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        int dims[4] = { 0 }, nd = 0;
        size_t w = 0, b = 0, buf = 0;
        if (l->ops->params)
            l->ops->params (&l->spec, l->ishape, &w, &b, &buf, dims, &nd);
        l->w_count = w, l->b_count = b, l->buf_count = buf;
        l->w = l->dw = l->b = l->db = NULL;
        if (w) {
            l->w = self->weights + at;
            l->dw = self->grads + at;
            s_tensor (self, l, "w", at, w, true, nd, dims);
            at += w;
        }
        if (b) {
            l->b = self->weights + at;
            l->db = self->grads + at;
            int bd[1] = { (int) b };
            s_tensor (self, l, "b", at, b, true, 1, bd);
            at += b;
        }
    }
    assert (at == self->params_count);
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        if (!l->buf_count)
            continue;
        size_t part = l->buf_count / 2;
        int dims[1] = { (int) part };
        for (int k = 0; k < 2; k++) {
            l->buf[k] = self->weights + at;
            s_tensor (self, l, l->ops->buffer_names[k], at, part, false, 1, dims);
            at += part;
        }
    }
    assert (at == self->weights_count);
}

static nn_layer_t *
s_src (nn_model_t *self, const nn_layer_t *l, int j)
{
    return l->src[j] >= 0 ? &self->layers[l->src[j]] : NULL;
}

//  Which layers run in place (output over input): those whose kind allows
//  it, when the input is a buffer of ours that nothing else reads -- its
//  one consumer is this layer and its producer's backward does not read
//  it. Flatten always relabels its input.
static void
s_plan_inplace (nn_model_t *self)
{
    bool *owned = nn_calloc ((size_t) self->layers_count + 1, sizeof (bool));
    bool *kept = nn_calloc ((size_t) self->layers_count + 1, sizeof (bool));
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        nn_layer_t *p = s_src (self, l, 0);
        bool p_owned = p && owned[p - self->layers];
        bool p_kept = p && kept[p - self->layers];
        l->inplace = l->ops->can_inplace && !l->ops->aliases && p_owned && !p_kept
                     && p->consumers == 1;
        bool relabels = l->inplace || l->ops->aliases;
        owned[i] = relabels ? p_owned : true;
        //  Storage whose content a backward still needs, through relabels.
        kept[i] = l->ops->needs_output || (l->ops->aliases && p_kept);
    }
    nn_free (owned);
    nn_free (kept);
}

//  Fusions that save passes over (and memory for) the largest tensors,
//  each only where the tensors between the fused layers have one consumer:
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
        nn_layer_t *l = &self->layers[i];
        nn_layer_t *prev = s_src (self, l, 0);
        if (l->spec.kind != NN_LAYER_RELU || !l->inplace)
            continue;
        nn_layer_t *next = i + 1 < self->layers_count ? &self->layers[i + 1] : NULL;
        bool bn = prev->spec.kind == NN_LAYER_BATCHNORM;
        bool pool = next && next->spec.kind == NN_LAYER_MAXPOOL && next->src[0] == i
                    && l->consumers == 1;
        if (bn) {
            prev->bn_relu = true;
            l->relu_fwd_fused = true;
        }
        if (pool) {
            l->relu_bwd_fused = true;
            next->pool_mask_input = true;
        }
        if (bn && pool && prev->inplace && prev == l - 1) {
            prev->bn_transient = true;
            prev->bn_pool = next;
            prev->inplace = false;
            l->in_bn_chain = true;
            next->in_bn_chain = true;
        }
    }
}

//  Carve the activation slab: outputs of layers that own one, and what
//  each kind keeps for backward (its ops' carve).
static void
s_carve (nn_model_t *self)
{
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int i = 0; i < self->layers_count; i++) {
            nn_layer_t *l = &self->layers[i];
            size_t out_count = s_align ((size_t) self->max_batch * nn_shape_size (l->oshape));
            //  A chained BN's output is a chunk at a time in scratch.
            if (!l->inplace && !l->bn_transient && !l->ops->aliases) {
                if (pass)
                    l->out = self->acts + at;
                at += out_count;
            }
            else if (pass)
                l->out = NULL;
            if (l->ops->carve)
                at += l->ops->carve (l, pass ? self->acts + at : NULL, self->max_batch,
                                     s_align);
        }
        total = at;
        if (pass == 0)
            self->acts = nn_alloc_aligned (sizeof (float) * (total ? total : 1));
    }
}

//  The backward pass walks the layers in reverse. A layer reads its output
//  gradient and writes its inputs' gradients; an output read by several
//  layers gets the sum of their gradients: the first to run (in backward
//  order) writes it, the others write a temporary and add. Gradients live
//  in slots of one slab, each slot reused once its gradient is consumed
//  (two slots for a chain, as ping-pong buffers); a layer that can work in
//  place writes its input gradient over its output gradient. A chained BN
//  reads its max-pool's output gradient and writes its input gradient over
//  its x-hat; the ReLU and max-pool of its chain have no step of their own.
typedef struct {
    size_t *size;           //  per slot, floats
    bool *busy;
    int count;
} s_slots_t;

static int
s_slot_take (s_slots_t *s, size_t floats)
{
    int best = -1;
    for (int k = 0; k < s->count; k++)
        if (!s->busy[k] && (best < 0 || (s->size[k] >= floats) > (s->size[best] >= floats)))
            best = k;
    if (best < 0)
        best = s->count++;
    s->busy[best] = true;
    s->size[best] = s->size[best] > floats ? s->size[best] : floats;
    return best;
}

static void
s_plan_backward (nn_model_t *self)
{
    int L = self->layers_count;
    //  grad[i + 1]: where layer i's output gradient is (grad[0]: the input's).
    s_gref_t *grad = nn_calloc ((size_t) L + 1, sizeof (s_gref_t));
    s_slots_t slots = { nn_calloc (2 * (size_t) L + 2, sizeof (size_t)),
                        nn_calloc (2 * (size_t) L + 2, sizeof (bool)), 0 };
    self->bsteps = nn_calloc ((size_t) L, sizeof (s_bstep_t));
    grad[L] = (s_gref_t) { S_G_DOUT, 0 };
    for (int i = L - 1; i >= 0; i--) {
        nn_layer_t *l = &self->layers[i];
        s_bstep_t *st = &self->bsteps[i];
        if (l->in_bn_chain)
            continue;
        st->dout = grad[(l->bn_transient ? (int) (l->bn_pool - self->layers) : i) + 1];
        bool dout_kept = false;         //  its slot became an input's gradient
        int temps[2] = { -1, -1 };
        for (int j = 0; j < l->ops->inputs; j++) {
            int t = l->src[j] + 1;
            size_t floats = (size_t) self->max_batch
                            * nn_shape_size (j ? l->ishape2 : l->ishape);
            st->count[j] = floats / (size_t) self->max_batch;
            s_gref_t here;
            //  The part's input gradient always ends in the caller's dx.
            bool in_place = j == 0 && t > 0 && l->ops->can_inplace
                            && st->dout.kind == S_G_SLOT;
            bool fresh = false;
            if (l->bn_transient && j == 0)
                here = (s_gref_t) { S_G_SAVED, i };
            else if (in_place) {
                here = st->dout;
                if (slots.size[here.index] < floats)
                    slots.size[here.index] = floats;
            }
            else if (t == 0 && grad[0].kind == S_G_NONE)
                here = (s_gref_t) { S_G_DX, 0 };
            else {
                here = (s_gref_t) { S_G_SLOT, s_slot_take (&slots, floats) };
                fresh = true;
            }
            if (grad[t].kind == S_G_NONE) {
                grad[t] = here;
                st->write[j] = here;
                dout_kept |= in_place;
                continue;
            }
            if (here.kind == S_G_DX) {
                here = (s_gref_t) { S_G_SLOT, s_slot_take (&slots, floats) };
                fresh = true;
            }
            st->write[j] = here;
            st->add_to[j] = grad[t];
            if (fresh)
                temps[j] = here.index;
        }
        if (st->dout.kind == S_G_SLOT && !dout_kept)
            slots.busy[st->dout.index] = false;
        for (int j = 0; j < 2; j++)
            if (temps[j] >= 0)
                slots.busy[temps[j]] = false;
    }
    self->slots_count = slots.count;
    self->slot_at = nn_calloc ((size_t) slots.count + 1, sizeof (size_t));
    size_t total = 0;
    for (int k = 0; k < slots.count; k++) {
        self->slot_at[k] = total;
        total += s_align (slots.size[k]);
    }
    self->gslab = nn_alloc_aligned (sizeof (float) * (total + 16));
    nn_free (slots.size);
    nn_free (slots.busy);
    nn_free (grad);
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
        if (l->ops->sums)
            bn_at += l->ops->sums (l) * (size_t) threads;
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
        size_t sc = s_align (l->ops->scratch ? l->ops->scratch (l, self->max_batch) : 0);
        stride = stride > sc ? stride : sc;
        parts += s_align (l->w_count + l->b_count) * (size_t) (threads - 1);
        if (l->ops->sums)
            bn += l->ops->sums (l) * (size_t) threads;
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

void
nn_model_set_bn_momentum (nn_model_t *self, float momentum)
{
    assert (momentum > 0.0f && momentum <= 1.0f);
    for (int i = 0; i < self->layers_count; i++)
        self->layers[i].bn_momentum = momentum;
}

bool
nn_model_has_bn (const nn_model_t *self)
{
    for (int i = 0; i < self->layers_count; i++)
        if (self->layers[i].spec.kind == NN_LAYER_BATCHNORM)
            return true;
    return false;
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

    //  Wire the units' DAGs into one list: a unit's input is the previous
    //  unit's last layer, or the part's input (-1).
    nn_shape_t shape = unit_begin ? nn_model_spec_unit_output (spec, unit_begin - 1)
                                  : nn_model_spec_input (spec);
    size_t params = 0, buffers = 0;
    int i = 0, unit_in = -1;
    for (int u = unit_begin; u < unit_end; u++) {
        const nn_unit_spec_t *unit = &spec->units[u];
        nn_shape_t out[NN_MAX_UNIT_LAYERS];
        nn_unit_shapes (unit, shape, out, NULL, 0);
        int base = i;
        for (int k = 0; k < unit->layers_count; k++, i++) {
            nn_layer_t *l = &self->layers[i];
            l->spec = unit->layers[k];
            l->ops = nn_layer_ops (l->spec.kind);
            l->index = first + i;
            l->unit = u;
            l->local = k;
            l->bn_momentum = NN_BN_MOMENTUM;
            int src[2];
            int count = nn_unit_layer_inputs (unit, k, src);
            for (int j = 0; j < 2; j++) {
                l->src[j] = j >= count ? -2 : src[j] < 0 ? unit_in : base + src[j];
                if (j < count && l->src[j] >= 0)
                    self->layers[l->src[j]].consumers++;
            }
            l->ishape = src[0] < 0 ? shape : out[src[0]];
            if (count > 1)
                l->ishape2 = src[1] < 0 ? shape : out[src[1]];
            l->oshape = out[k];
            size_t w = 0, b = 0, buf = 0;
            int dims[4], nd;
            if (l->ops->params)
                l->ops->params (&l->spec, l->ishape, &w, &b, &buf, dims, &nd);
            params += w + b;
            buffers += buf;
            self->tensors_count += (w > 0) + (b > 0) + (buf > 0 ? 2 : 0);
        }
        unit_in = i - 1;
        shape = out[unit->layers_count - 1];
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
    s_plan_backward (self);
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
    nn_free (self->bsteps);
    nn_free (self->gslab);
    nn_free (self->slot_at);
    nn_free (self->scratch);
    nn_free (self->grad_parts);
    nn_free (self->bn_parts);
    nn_free (self->tensors);
    nn_free (self);
    *self_p = NULL;
}

void
nn_model_init (nn_model_t *self, const nn_rng_t *rng)
{
    //  Zero biases and buffers; each kind sets what differs from zero.
    memset (self->weights, 0, sizeof (float) * self->weights_count);
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        nn_rng_t stream = nn_rng_split (rng, (uint64_t) l->index);
        if (l->ops->init)
            l->ops->init (l, &stream);
    }
    memset (self->optim, 0, sizeof (float) * self->params_count);
    nn_model_zero_grad (self);
}

static const float *
s_input (nn_model_t *self, int src, const float *x)
{
    return src < 0 ? x : self->layers[src].out;
}

const float *
nn_model_forward (nn_model_t *self, const float *x, int n, bool train, nn_rng_t *rng)
{
    assert (n >= 1 && n <= self->max_batch);
    if (self->base)
        s_point_thread_buffers (self, self->base);  //  it may have changed threads
    for (int i = 0; i < self->layers_count; i++) {
        nn_layer_t *l = &self->layers[i];
        const float *in = s_input (self, l->src[0], x);
        if (l->inplace)
            l->out = (float *) in;
        if (l->ops->inputs > 1)
            l->in2 = s_input (self, l->src[1], x);
        l->ops->forward (l, in, n, train, rng);
    }
    self->last_n = n;
    return self->layers[self->layers_count - 1].out;
}

static float *
s_gptr (nn_model_t *self, s_gref_t g, const float *dout, float *dx)
{
    switch (g.kind) {
        case S_G_NONE: return NULL;
        case S_G_DOUT: return (float *) dout;
        case S_G_DX: return dx;
        case S_G_SLOT: return self->gslab + self->slot_at[g.index];
        case S_G_SAVED: return self->layers[g.index].saved;
    }
    return NULL;
}

void
nn_model_backward (nn_model_t *self, const float *dout, float *dx)
{
    if (self->base)
        s_point_thread_buffers (self, self->base);
    int n = self->last_n;
    for (int i = self->layers_count - 1; i >= 0; i--) {
        nn_layer_t *l = &self->layers[i];
        const s_bstep_t *st = &self->bsteps[i];
        if (l->in_bn_chain)
            continue;                   //  the chain's BN takes its dout as is
        float *din[2] = { NULL, NULL };
        for (int j = 0; j < l->ops->inputs; j++) {
            //  No input gradient wanted: nothing to write or add.
            bool wanted = !(st->write[j].kind == S_G_DX || st->add_to[j].kind == S_G_DX) || dx;
            din[j] = wanted ? s_gptr (self, st->write[j], dout, dx) : NULL;
        }
        l->din2 = din[1];
        l->ops->backward (l, s_gptr (self, st->dout, dout, dx), din[0]);
        for (int j = 0; j < l->ops->inputs; j++) {
            float *sum = s_gptr (self, st->add_to[j], dout, dx);
            if (!sum || !din[j])
                continue;
            size_t count = (size_t) n * st->count[j];
            for (size_t k = 0; k < count; k++)
                sum[k] += din[j][k];
        }
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
