/*  nn_layer.c: per-kind forward/backward over nn_kernels (NHWC). */
#include "nn_layer.h"

#include "nn_alloc.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define S_BN_EPS 1e-5f

//  Below this much work (multiply-adds or elements) a layer runs on one
//  thread: the fork and join cost more than they save, and on a shared host
//  every join may wait for a descheduled thread. (VGG5's last dense layer;
//  its last BN and ReLU at micro-batch 10.)
#define S_MIN_PARALLEL_WORK 65536

int
nn_layer_threads (const nn_layer_t *self, size_t work)
{
    return work < S_MIN_PARALLEL_WORK ? 1 : self->threads;
}

void
nn_layer_remember (nn_layer_t *self, const float *in, int n, bool train)
{
    self->in_ptr = in;
    self->n = n;
    self->train = train;
}

//  Parameter-gradient accumulators for thread t: the layer's own for
//  thread 0, a zeroed private slice for the others (summed afterwards).
static void
s_grad_slot (nn_layer_t *self, int t, float **dw, float **db)
{
    if (t == 0) {
        *dw = self->dw;
        *db = self->db;
        return;
    }
    size_t pc = self->w_count + self->b_count;
    float *part = self->grad_parts + (size_t) (t - 1) * pc;
    memset (part, 0, sizeof (float) * pc);
    *dw = part;
    *db = self->b_count ? part + self->w_count : NULL;
}

//  Sum the other threads' partial gradients into the layer's own, with the
//  parameter range itself split across the threads.
static void
s_grad_reduce (nn_layer_t *self)
{
    int T = self->threads;
    if (T < 2)
        return;
    size_t pc = self->w_count + self->b_count;
    NN_THREADS_FOR (T, t,
        size_t i0 = pc * (size_t) t / (size_t) T, i1 = pc * (size_t) (t + 1) / (size_t) T;
        for (int u = 1; u < T; u++) {
            const float *part = self->grad_parts + (size_t) (u - 1) * pc;
            for (size_t i = i0; i < i1; i++) {
                if (i < self->w_count)
                    self->dw[i] += part[i];
                else
                    self->db[i - self->w_count] += part[i];
            }
        }
    );
}

static nn_conv_shape_t
s_conv_shape (const nn_layer_t *self, int n)
{
    nn_conv_shape_t s = {
        .n = n, .h = self->ishape.h, .w = self->ishape.w, .c = self->ishape.c,
        .k = self->spec.out_channels, .r = self->spec.kernel, .s = self->spec.kernel,
        .stride = self->spec.stride, .pad = self->spec.pad, .groups = self->spec.groups
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

//  Convolutions split the batch's pixels, not its images, across the
//  threads: a batch of 25 on two threads is 12.5 images each, not 12 and 13
//  (the input gradient excepted: see nn_conv2d_backward_input).
static void
s_conv_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    nn_conv_shape_t s = s_conv_shape (self, n);
    int T = self->threads, rows = n * s.p * s.q;
    NN_THREADS_FOR (T, t,
        int r0 = nn_layer_lo (rows, T, t), r1 = nn_layer_lo (rows, T, t + 1);
        if (r1 > r0)
            nn_conv2d_forward_rows (self->out, in, self->w, self->b, &s, r0, r1,
                                    self->scratch + t * self->scratch_stride);
    );
}

static void
s_conv_backward (nn_layer_t *self, const float *dout, float *din)
{
    int T = self->threads, n = self->n;
    nn_conv_shape_t s = s_conv_shape (self, n);
    size_t in_sz = nn_shape_size (self->ishape), out_sz = nn_shape_size (self->oshape);
    int rows = n * s.p * s.q;
    NN_THREADS_FOR (T, t,
        float *dw, *db, *scratch = self->scratch + t * self->scratch_stride;
        s_grad_slot (self, t, &dw, &db);
        int r0 = nn_layer_lo (rows, T, t), r1 = nn_layer_lo (rows, T, t + 1);
        if (r1 > r0)
            nn_conv2d_backward_weights_rows (dw, db, dout, self->in_ptr, &s, r0, r1, scratch);
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        if (din && n1 > n0) {
            nn_conv_shape_t part = s_conv_shape (self, n1 - n0);
            nn_conv2d_backward_input (din + n0 * in_sz, dout + n0 * out_sz, self->w, &part,
                                      scratch);
        }
    );
    s_grad_reduce (self);
}

//  Dense layers split units, not samples: each thread reads its own rows
//  of w once (at small batches w is most of the memory traffic), and the
//  split stays even at any batch size.
static void
s_dense_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    int i = (int) nn_shape_size (self->ishape), o = self->spec.out_channels;
    int T = nn_layer_threads (self, (size_t) n * i * o);
    NN_THREADS_FOR (T, t,
        int o0 = nn_layer_lo (o, T, t), o1 = nn_layer_lo (o, T, t + 1);
        if (o1 > o0)
            nn_dense_forward_cols (self->out, in, self->w, self->b, n, i, o, o0, o1);
    );
}

//  Weight gradients by output unit (each thread owns rows of dw over the
//  whole batch: no partial sums to add up); the input gradient by input
//  unit.
static void
s_dense_backward (nn_layer_t *self, const float *dout, float *din)
{
    int i = (int) nn_shape_size (self->ishape), o = self->spec.out_channels;
    int n = self->n, T = nn_layer_threads (self, (size_t) n * i * o);
    NN_THREADS_FOR (T, t,
        int o0 = nn_layer_lo (o, T, t), o1 = nn_layer_lo (o, T, t + 1);
        if (o1 > o0)
            nn_dense_backward_weights (self->dw + (size_t) o0 * i,
                                       self->db ? self->db + o0 : NULL, dout + o0,
                                       self->in_ptr, n, i, o1 - o0, o);
        int i0 = nn_layer_lo (i, T, t), i1 = nn_layer_lo (i, T, t + 1);
        if (din && i1 > i0)
            nn_dense_backward_input_cols (din, dout, self->w, n, i, o, i0, i1);
    );
}

//  A BN -> ReLU -> max-pool chain (bn_transient) normalises this many
//  floats of a thread's samples at a time into its scratch, which the pool
//  reads at once (still in L2): the BN output never exists for the whole
//  batch (10 MB of a VGG5 context at batch 100).
#define S_BN_CHUNK_FLOATS (64 * 1024)

//  Samples per chunk for a range of n: the whole range unless chained.
static int
s_bn_chunk (const nn_layer_t *self, int n)
{
    if (!self->bn_transient)
        return n;
    int chunk = (int) (S_BN_CHUNK_FLOATS / nn_shape_size (self->ishape));
    chunk = chunk < 1 ? 1 : chunk;
    return chunk < n ? chunk : n;
}

//  Where thread t's BN output of samples from s0 goes: the layer's output,
//  or in a chain the thread's scratch (one chunk).
static float *
s_bn_out (nn_layer_t *self, int t, int s0)
{
    if (self->bn_transient)
        return self->scratch + t * self->scratch_stride;
    return self->out + (size_t) s0 * nn_shape_size (self->ishape);
}

//  In a chain, the max-pool's forward of g samples from s0 of BN output y.
static void
s_bn_chain_pool (nn_layer_t *self, const float *y, int s0, int g)
{
    if (!self->bn_transient)
        return;
    nn_layer_t *pool = self->bn_pool;
    size_t prow = nn_shape_size (pool->oshape);
    nn_pool_shape_t s = s_pool_shape (pool, g);
    nn_maxpool_forward (pool->out + s0 * prow, pool->argmax + s0 * prow, y, &s,
                        pool->pool_mask_input);
}

//  The gradient w.r.t. the BN output of g samples from s0: dout itself, or
//  in a chain the max-pool's backward of its dout (the ReLU's is folded
//  into the pool's winners) into thread t's scratch.
static const float *
s_bn_chain_dy (nn_layer_t *self, const float *dout, int t, int s0, int g)
{
    if (!self->bn_transient)
        return dout + (size_t) s0 * nn_shape_size (self->ishape);
    nn_layer_t *pool = self->bn_pool;
    size_t prow = nn_shape_size (pool->oshape);
    float *dy = self->scratch + t * self->scratch_stride;
    nn_pool_shape_t s = s_pool_shape (pool, g);
    nn_maxpool_backward (dy, dout + s0 * prow, pool->argmax + s0 * prow, &s);
    return dy;
}

static void
s_bn_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    //  Samples split across the threads (a chain's max-pool needs whole
    //  images); moments below by rows.
    int c = self->ishape.c, hw = self->ishape.h * self->ishape.w, m = n * hw;
    int T = nn_layer_threads (self, (size_t) m * c);
    size_t row = (size_t) hw * c;
    int chunk = s_bn_chunk (self, n);
    if (!train) {
        NN_THREADS_FOR (T, t,
            int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
            for (int s0 = n0; s0 < n1; s0 += chunk) {
                int g = n1 - s0 < chunk ? n1 - s0 : chunk;
                float *y = s_bn_out (self, t, s0);
                nn_batchnorm_forward_eval (y, in + s0 * row, self->w, self->b,
                                           self->buf[0], self->buf[1], g * hw,
                                           c, S_BN_EPS);
                if (self->bn_relu)
                    nn_relu_forward (y, y, (size_t) g * row);
                s_bn_chain_pool (self, y, s0, g);
            }
        );
        return;
    }
    //  In a chain, x-hat goes over the input (see s_fuse).
    if (self->bn_transient)
        self->saved = (float *) in;
    NN_THREADS_FOR (T, t,
        double *sum = self->bn_parts + (size_t) t * 2 * c, *sq = sum + c;
        for (int k = 0; k < 2 * c; k++)
            sum[k] = 0.0;
        size_t r0 = (size_t) nn_layer_lo (m, T, t), r1 = (size_t) nn_layer_lo (m, T, t + 1);
        nn_batchnorm_moments (sum, sq, in + r0 * c, (int) (r1 - r0), c);
    );
    for (int t = 1; t < T; t++)
        for (int k = 0; k < 2 * c; k++)
            self->bn_parts[k] += self->bn_parts[(size_t) t * 2 * c + k];
    nn_batchnorm_finish (self->stats, self->buf[0], self->buf[1],
                         self->bn_parts, self->bn_parts + c, m, c, self->bn_momentum,
                         S_BN_EPS);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        for (int s0 = n0; s0 < n1; s0 += chunk) {
            int g = n1 - s0 < chunk ? n1 - s0 : chunk;
            float *y = s_bn_out (self, t, s0);
            nn_batchnorm_normalize (y, self->saved + s0 * row, in + s0 * row, self->stats,
                                    self->w, self->b, g * hw, c, self->bn_relu);
            s_bn_chain_pool (self, y, s0, g);
        }
    );
}

//  In a chain, dout is the gradient w.r.t. the max-pool's output; the
//  pool's gradient is made one chunk at a time, twice (for the sums, then
//  for din), which costs a scatter instead of a whole-batch buffer.
static void
s_bn_backward (nn_layer_t *self, const float *dout, float *din)
{
    //  Backward through evaluation-mode BN is not part of training.
    int c = self->ishape.c, hw = self->ishape.h * self->ishape.w;
    int n = self->n, m = n * hw, chunk = s_bn_chunk (self, n);
    int T = nn_layer_threads (self, (size_t) m * c);
    size_t row = (size_t) hw * c;
    NN_THREADS_FOR (T, t,
        double *sdy = self->bn_parts + (size_t) t * 2 * c, *sdyx = sdy + c;
        for (int k = 0; k < 2 * c; k++)
            sdy[k] = 0.0;
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        for (int s0 = n0; s0 < n1; s0 += chunk) {
            int g = n1 - s0 < chunk ? n1 - s0 : chunk;
            nn_batchnorm_backward_sums (sdy, sdyx, s_bn_chain_dy (self, dout, t, s0, g),
                                        self->saved + s0 * row, g * hw, c);
        }
    );
    double *sdy = self->bn_parts, *sdyx = sdy + c;
    for (int t = 1; t < T; t++)
        for (int k = 0; k < 2 * c; k++)
            sdy[k] += self->bn_parts[(size_t) t * 2 * c + k];
    for (int k = 0; k < c; k++) {
        self->dw[k] += (float) sdyx[k];
        self->db[k] += (float) sdy[k];
    }
    if (!din)
        return;
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        for (int s0 = n0; s0 < n1; s0 += chunk) {
            int g = n1 - s0 < chunk ? n1 - s0 : chunk;
            //  din may be x-hat itself: element for element, read first.
            nn_batchnorm_backward_apply (din + s0 * row, s_bn_chain_dy (self, dout, t, s0, g),
                                         self->saved + s0 * row, self->stats, self->w, sdy,
                                         sdyx, g * hw, n * hw, c);
        }
    );
}

static void
s_relu_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    if (self->relu_fwd_fused)
        return;                 //  in place, and the BN before already clamped
    size_t sz = nn_shape_size (self->oshape);
    int T = nn_layer_threads (self, (size_t) n * sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        nn_relu_forward (self->out + n0 * sz, in + n0 * sz, (size_t) (n1 - n0) * sz);
    );
}

static void
s_relu_backward (nn_layer_t *self, const float *dout, float *din)
{
    if (!din)
        return;
    size_t sz = nn_shape_size (self->oshape);
    if (self->relu_bwd_fused) {
        //  The max-pool after us masked its gradient by our output already.
        if (din != dout)
            memcpy (din, dout, sizeof (float) * sz * self->n);
        return;
    }
    int n = self->n, T = nn_layer_threads (self, (size_t) n * sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        nn_relu_backward (din + n0 * sz, dout + n0 * sz, self->out + n0 * sz,
                          (size_t) (n1 - n0) * sz);
    );
}

static void
s_maxpool_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    if (self->in_bn_chain)
        return;                 //  the BN before ran us chunk by chunk
    size_t in_sz = nn_shape_size (self->ishape), out_sz = nn_shape_size (self->oshape);
    int T = nn_layer_threads (self, (size_t) n * in_sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        nn_pool_shape_t s = s_pool_shape (self, n1 - n0);
        nn_maxpool_forward (self->out + n0 * out_sz, self->argmax + n0 * out_sz,
                            in + n0 * in_sz, &s, self->pool_mask_input);
    );
}

static void
s_maxpool_backward (nn_layer_t *self, const float *dout, float *din)
{
    //  In a chain the model passes our dout to the BN instead.
    assert (!self->in_bn_chain);
    if (!din)
        return;
    size_t in_sz = nn_shape_size (self->ishape), out_sz = nn_shape_size (self->oshape);
    int n = self->n, T = nn_layer_threads (self, (size_t) n * in_sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        nn_pool_shape_t s = s_pool_shape (self, n1 - n0);
        nn_maxpool_backward (din + n0 * in_sz, dout + n0 * out_sz,
                             self->argmax + n0 * out_sz, &s);
    );
}

static void
s_avgpool_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
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
    nn_layer_remember (self, in, n, train);
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
    nn_layer_remember (self, in, n, train);
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

//  Residual sum: out = in + in2, over in when in place.
static void
s_add_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    size_t sz = nn_shape_size (self->oshape);
    const float *in2 = self->in2;
    float *out = self->out;
    int T = nn_layer_threads (self, (size_t) n * sz);
    NN_THREADS_FOR (T, t,
        size_t i0 = (size_t) nn_layer_lo (n, T, t) * sz, i1 = (size_t) nn_layer_lo (n, T, t + 1) * sz;
        for (size_t i = i0; i < i1; i++)
            out[i] = in[i] + in2[i];
    );
}

//  Both inputs' gradients are dout (din may be dout itself: in place).
static void
s_add_backward (nn_layer_t *self, const float *dout, float *din)
{
    size_t bytes = sizeof (float) * (size_t) self->n * nn_shape_size (self->oshape);
    if (din && din != dout)
        memcpy (din, dout, bytes);
    if (self->din2)
        memcpy (self->din2, dout, bytes);
}

//  Element-wise activations that read their input in backward (hard-swish,
//  hard-sigmoid): samples split across the threads.
typedef void (s_unary_fn) (float *out, const float *in, size_t count);
typedef void (s_unary_bwd_fn) (float *din, const float *dout, const float *in, size_t count);

static void
s_unary_forward (nn_layer_t *self, const float *in, int n, bool train, s_unary_fn *fn)
{
    nn_layer_remember (self, in, n, train);
    size_t sz = nn_shape_size (self->oshape);
    int T = nn_layer_threads (self, (size_t) n * sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        fn (self->out + n0 * sz, in + n0 * sz, (size_t) (n1 - n0) * sz);
    );
}

static void
s_unary_backward (nn_layer_t *self, const float *dout, float *din, s_unary_bwd_fn *fn)
{
    if (!din)
        return;
    size_t sz = nn_shape_size (self->oshape);
    int n = self->n, T = nn_layer_threads (self, (size_t) n * sz);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        fn (din + n0 * sz, dout + n0 * sz, self->in_ptr + n0 * sz, (size_t) (n1 - n0) * sz);
    );
}

static void
s_hswish_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_unary_forward (self, in, n, train, nn_hswish_forward);
}

static void
s_hswish_backward (nn_layer_t *self, const float *dout, float *din)
{
    s_unary_backward (self, dout, din, nn_hswish_backward);
}

static void
s_hsigmoid_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    s_unary_forward (self, in, n, train, nn_hsigmoid_forward);
}

static void
s_hsigmoid_backward (nn_layer_t *self, const float *dout, float *din)
{
    s_unary_backward (self, dout, din, nn_hsigmoid_backward);
}

//  Squeeze-excite's scale: out (n, h, w, c) = x * s (n, 1, 1, c). Both
//  inputs are read again in backward (the model keeps them: neither runs
//  in place). Samples split across the threads.
static void
s_mul_forward (nn_layer_t *self, const float *in, int n, bool train, nn_rng_t *rng)
{
    nn_layer_remember (self, in, n, train);
    int hw = self->ishape.h * self->ishape.w, c = self->ishape.c;
    const float *sc = self->in2;
    int T = nn_layer_threads (self, (size_t) n * hw * c);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        if (n1 > n0)
            nn_channel_scale_forward (self->out + (size_t) n0 * hw * c, in + (size_t) n0 * hw * c,
                                      sc + (size_t) n0 * c, n1 - n0, hw, c);
    );
}

static void
s_mul_backward (nn_layer_t *self, const float *dout, float *din)
{
    int n = self->n, hw = self->ishape.h * self->ishape.w, c = self->ishape.c;
    const float *sc = self->in2;    //  still the last forward's
    float *ds = self->din2;
    if (!din && !ds)
        return;
    int T = nn_layer_threads (self, (size_t) n * hw * c);
    NN_THREADS_FOR (T, t,
        int n0 = nn_layer_lo (n, T, t), n1 = nn_layer_lo (n, T, t + 1);
        size_t at = (size_t) n0 * hw * c;
        if (n1 > n0)
            nn_channel_scale_backward (din ? din + at : NULL, ds ? ds + (size_t) n0 * c : NULL,
                                       dout + at, self->in_ptr + at, sc + (size_t) n0 * c,
                                       n1 - n0, hw, c);
    );
}

//  ---------------------------------------------------------------------
//  What the model asks of each kind: shapes, parameters, memory.

static int
s_same_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
              char *err, size_t err_size)
{
    *out = in[0];
    return 0;
}

static int
s_conv_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                  char *err, size_t err_size)
{
    nn_conv_shape_t s = { .n = 1, .h = in->h, .w = in->w, .c = in->c,
                          .k = spec->out_channels, .r = spec->kernel, .s = spec->kernel,
                          .stride = spec->stride, .pad = spec->pad, .groups = spec->groups };
    if (spec->out_channels < 1 || spec->groups < 0 || nn_conv_shape_finish (&s))
        return nn_errf (err, err_size,
                        "conv %dx%d stride %d pad %d groups %d to %d channels does not fit "
                        "input %dx%dx%d", spec->kernel, spec->kernel, spec->stride, spec->pad,
                        spec->groups > 1 ? spec->groups : 1, spec->out_channels, in->h, in->w,
                        in->c);
    *out = (nn_shape_t) { s.p, s.q, s.k };
    return 0;
}

static int
s_conv_groups (const nn_layer_spec_t *spec)
{
    return spec->groups > 1 ? spec->groups : 1;
}

static void
s_conv_params (const nn_layer_spec_t *spec, nn_shape_t in, size_t *w, size_t *b,
               size_t *buffers, int dims[4], int *dims_count)
{
    int cg = in.c / s_conv_groups (spec);
    *w = (size_t) spec->out_channels * spec->kernel * spec->kernel * cg;
    *b = spec->bias ? (size_t) spec->out_channels : 0;
    *dims_count = 4;
    dims[0] = spec->out_channels, dims[1] = dims[2] = spec->kernel, dims[3] = cg;
}

static void
s_xavier (float *w, size_t count, double fan_in, double fan_out, nn_rng_t *rng)
{
    double bound = sqrt (6.0 / (fan_in + fan_out));
    for (size_t i = 0; i < count; i++)
        w[i] = (float) ((2.0 * nn_rng_uniform_double (rng) - 1.0) * bound);
}

//  Fans as PyTorch counts them for weights (k, c / groups, r, s).
static void
s_conv_init (nn_layer_t *self, nn_rng_t *rng)
{
    double rs = (double) self->spec.kernel * self->spec.kernel;
    s_xavier (self->w, self->w_count, rs * self->ishape.c / s_conv_groups (&self->spec),
              rs * self->spec.out_channels, rng);
}

static size_t
s_conv_scratch (const nn_layer_t *self, int max_batch)
{
    nn_conv_shape_t s = s_conv_shape (self, max_batch);
    return nn_conv2d_scratch_count (&s);
}

static int
s_pool_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                  char *err, size_t err_size)
{
    nn_pool_shape_t s = { .n = 1, .h = in->h, .w = in->w, .c = in->c,
                          .kernel = spec->kernel, .stride = spec->stride, .pad = spec->pad };
    if (nn_pool_shape_finish (&s))
        return nn_errf (err, err_size, "pool %d stride %d pad %d does not fit input %dx%dx%d",
                        spec->kernel, spec->stride, spec->pad, in->h, in->w, in->c);
    if (spec->kind == NN_LAYER_MAXPOOL && !nn_maxpool_fits (&s))
        return nn_errf (err, err_size, "max-pool windows of %d pixels (at most %d)",
                        spec->kernel ? spec->kernel * spec->kernel : in->h * in->w,
                        NN_POOL_MAX_WINDOW - 1);
    *out = (nn_shape_t) { s.p, s.q, in->c };
    return 0;
}

//  Winners, one byte each.
static size_t
s_maxpool_carve (nn_layer_t *self, float *at, int max_batch, size_t (*align) (size_t))
{
    size_t count = (size_t) max_batch * nn_shape_size (self->oshape);
    if (at)
        self->argmax = (uint8_t *) at;
    return align ((count + sizeof (float) - 1) / sizeof (float));
}

static int
s_dense_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                   char *err, size_t err_size)
{
    if (spec->out_channels < 1)
        return nn_errf (err, err_size, "dense needs at least one unit");
    if (in->h != 1 || in->w != 1)
        return nn_errf (err, err_size, "dense needs a flat input, got %dx%dx%d (add a flatten)",
                        in->h, in->w, in->c);
    *out = (nn_shape_t) { 1, 1, spec->out_channels };
    return 0;
}

static void
s_dense_params (const nn_layer_spec_t *spec, nn_shape_t in, size_t *w, size_t *b,
                size_t *buffers, int dims[4], int *dims_count)
{
    *w = (size_t) spec->out_channels * nn_shape_size (in);
    *b = spec->bias ? (size_t) spec->out_channels : 0;
    *dims_count = 2;
    dims[0] = spec->out_channels, dims[1] = (int) nn_shape_size (in);
}

static void
s_dense_init (nn_layer_t *self, nn_rng_t *rng)
{
    s_xavier (self->w, self->w_count, (double) nn_shape_size (self->ishape),
              self->spec.out_channels, rng);
}

static void
s_bn_params (const nn_layer_spec_t *spec, nn_shape_t in, size_t *w, size_t *b,
             size_t *buffers, int dims[4], int *dims_count)
{
    *w = *b = (size_t) in.c;
    *buffers = 2 * (size_t) in.c;
    *dims_count = 1;
    dims[0] = in.c;
}

//  Weight 1, bias 0, running mean 0, running variance 1.
static void
s_bn_init (nn_layer_t *self, nn_rng_t *rng)
{
    for (int c = 0; c < self->ishape.c; c++)
        self->w[c] = self->buf[1][c] = 1.0f;
}

//  x-hat (over the input in a chain), mean and inverse deviation.
static size_t
s_bn_carve (nn_layer_t *self, float *at, int max_batch, size_t (*align) (size_t))
{
    size_t used = 0;
    if (!self->bn_transient) {
        if (at)
            self->saved = at;
        used = align ((size_t) max_batch * nn_shape_size (self->oshape));
    }
    if (at)
        self->stats = at + used;
    return used + align (2 * (size_t) self->ishape.c);
}

static size_t
s_bn_scratch (const nn_layer_t *self, int max_batch)
{
    if (!self->bn_transient)
        return 0;
    return (size_t) s_bn_chunk (self, max_batch) * nn_shape_size (self->ishape);
}

static size_t
s_bn_sums (const nn_layer_t *self)
{
    return 2 * (size_t) self->ishape.c;
}

static int
s_flatten_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                     char *err, size_t err_size)
{
    *out = (nn_shape_t) { 1, 1, (int) nn_shape_size (*in) };
    return 0;
}

static int
s_dropout_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                     char *err, size_t err_size)
{
    if (!(spec->p >= 0.0f && spec->p < 1.0f))
        return nn_errf (err, err_size, "dropout p must be in [0, 1), got %g", (double) spec->p);
    *out = in[0];
    return 0;
}

//  The mask.
static size_t
s_dropout_carve (nn_layer_t *self, float *at, int max_batch, size_t (*align) (size_t))
{
    if (at)
        self->saved = at;
    return align ((size_t) max_batch * nn_shape_size (self->oshape));
}

static int
s_add_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                 char *err, size_t err_size)
{
    if (in[0].h != in[1].h || in[0].w != in[1].w || in[0].c != in[1].c)
        return nn_errf (err, err_size, "add of %dx%dx%d and %dx%dx%d: shapes differ",
                        in[0].h, in[0].w, in[0].c, in[1].h, in[1].w, in[1].c);
    *out = in[0];
    return 0;
}

static int
s_mul_out_shape (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                 char *err, size_t err_size)
{
    if (in[1].h != 1 || in[1].w != 1 || in[1].c != in[0].c)
        return nn_errf (err, err_size, "channel multiply of %dx%dx%d by %dx%dx%d: the scale "
                        "must be 1x1x%d", in[0].h, in[0].w, in[0].c, in[1].h, in[1].w, in[1].c,
                        in[0].c);
    *out = in[0];
    return 0;
}

static const nn_layer_ops_t s_ops[NN_LAYER_KINDS_END] = {
    [NN_LAYER_CONV] = { .name = "conv", .inputs = 1, .shape = s_conv_out_shape,
        .params = s_conv_params, .init = s_conv_init, .scratch = s_conv_scratch,
        .forward = s_conv_forward, .backward = s_conv_backward },
    [NN_LAYER_BATCHNORM] = { .name = "bn", .inputs = 1, .shape = s_same_shape,
        .params = s_bn_params, .buffer_names = { "running_mean", "running_var" },
        .init = s_bn_init, .carve = s_bn_carve, .scratch = s_bn_scratch, .sums = s_bn_sums,
        .forward = s_bn_forward, .backward = s_bn_backward, .can_inplace = true },
    [NN_LAYER_RELU] = { .name = "relu", .inputs = 1, .shape = s_same_shape,
        .forward = s_relu_forward, .backward = s_relu_backward, .can_inplace = true,
        .needs_output = true },
    [NN_LAYER_MAXPOOL] = { .name = "maxpool", .inputs = 1, .shape = s_pool_out_shape,
        .carve = s_maxpool_carve, .forward = s_maxpool_forward,
        .backward = s_maxpool_backward },
    [NN_LAYER_AVGPOOL] = { .name = "avgpool", .inputs = 1, .shape = s_pool_out_shape,
        .forward = s_avgpool_forward, .backward = s_avgpool_backward },
    [NN_LAYER_DENSE] = { .name = "dense", .inputs = 1, .shape = s_dense_out_shape,
        .params = s_dense_params, .init = s_dense_init, .forward = s_dense_forward,
        .backward = s_dense_backward },
    [NN_LAYER_FLATTEN] = { .name = "flatten", .inputs = 1, .shape = s_flatten_out_shape,
        .forward = s_flatten_forward, .backward = s_flatten_backward, .can_inplace = true,
        .aliases = true },
    [NN_LAYER_DROPOUT] = { .name = "dropout", .inputs = 1, .shape = s_dropout_out_shape,
        .carve = s_dropout_carve, .forward = s_dropout_forward,
        .backward = s_dropout_backward, .can_inplace = true },
    [NN_LAYER_ADD] = { .name = "add", .inputs = 2, .shape = s_add_out_shape,
        .forward = s_add_forward, .backward = s_add_backward, .can_inplace = true },
    [NN_LAYER_MUL] = { .name = "mul", .inputs = 2, .shape = s_mul_out_shape,
        .forward = s_mul_forward, .backward = s_mul_backward },
    [NN_LAYER_HSWISH] = { .name = "hswish", .inputs = 1, .shape = s_same_shape,
        .forward = s_hswish_forward, .backward = s_hswish_backward },
    [NN_LAYER_HSIGMOID] = { .name = "hsigmoid", .inputs = 1, .shape = s_same_shape,
        .forward = s_hsigmoid_forward, .backward = s_hsigmoid_backward },
};

const nn_layer_ops_t *
nn_layer_ops (nn_layer_kind_t kind)
{
    if ((int) kind < NN_LAYER_CONV || (int) kind >= NN_LAYER_KINDS_END || !s_ops[kind].forward)
        return NULL;
    return &s_ops[kind];
}
