/*  nn_kernels_direct.c: dense convolutions whose patch (r*s*c) is small,
    a model's first layer on 1- or 3-channel images (VGG5's 3x3 on 1 or 3
    channels, VGG11's 3x3 on 3, MobileNetV3's 3x3/2 stem), as direct loops
    with the output channels in vector registers. sgemm with an inner
    dimension of 9 spends its time packing, not multiplying (6.5 GFLOP/s
    against 55 for VGG5's conv2); im2col's copies cost as much again.

    Forward: a block of PX output pixels at a time, PX x K/8 accumulators,
    each patch value read where it lies in the input (no patch copy)
    unless the window crosses the image's edge. Weight gradient: a chunk of
    pixels' patches gathered, then a block of JB patch positions x K
    outputs accumulated over the chunk in registers. PX and JB are compile
    time constants per instruction-set level and K, so the accumulators
    live in registers (a run-time K had kept them on the stack: 11 GMAC/s
    for VGG5's conv1). The naive reference is nn_conv2d_naive_* and
    test_kernels compares both at every level. */
#include "nn_kernels.h"

#include "nn_kernels_conv.h"
#include "nn_kernels_simd.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define S_DIRECT_PATCH 32
#define S_DIRECT_KMAX 64
#define S_V_MAX (S_DIRECT_KMAX / 8)
//  Pixels per forward block, patch positions per weight-gradient block.
#define S_PX_MAX 4
#define S_JB_MAX 6
//  Pixels whose patches the weight gradient gathers at a time (8 KiB of
//  patches and 16 KiB of output gradient at most: L1).
#define S_CHUNK 64

//  x in every lane of an s_v8: a broadcast ((s_v8) { 0 } + x is an add, 0 +
//  -0 being +0; x * 1 is x, which the compiler folds). The generic clone
//  holds an s_v8 in two SSE registers and built that broadcast through the
//  stack (a store-forwarding stall per value: 2.4 ms for VGG5's conv1 on
//  25 images against 0.2 at avx2); there it is two 4-lane broadcasts.
typedef union {
    s_v8 v8;
    s_v4 v4[2];
} s_halves_t;
#define s_splat4(x) ((s_v4) { 1, 1, 1, 1 } * (x))
#define s_splat(x, level)                                                              \
    ((level) == NN_ISA_GENERIC ? ((s_halves_t) { .v4 = { s_splat4 (x), s_splat4 (x) } }).v8 \
                               : (s_v8) { 1, 1, 1, 1, 1, 1, 1, 1 } * (x))

bool
nn_direct_takes (const nn_conv_shape_t *s)
{
    return s_groups (s) == 1 && s->r * s->s * s->c <= S_DIRECT_PATCH && s->k % 8 == 0
           && s->k <= S_DIRECT_KMAX && s->s <= s->w;
}

size_t
nn_direct_scratch_count (const nn_conv_shape_t *s)
{
    size_t J = (size_t) s->r * s->s * s->c;
    size_t window = (size_t) s->r * s->w * s->c;
    size_t windows = S_PX_MAX * window, patches = (size_t) S_CHUNK * J + window;
    return J * s->k + (windows > patches ? windows : patches);
}

//  switch (V) over the widths 1..8 (K = 8..64), CASE (VV) calling a body
//  with VV a constant.
#define S_SWITCH_V(V, CASE)                                                            \
    switch (V) {                                                                       \
        CASE (1) CASE (2) CASE (3) CASE (4) CASE (5) CASE (6) CASE (7) CASE (8)        \
        default: break;                                                                \
    }

//  Accumulators a level keeps in registers (s_v8 each): 32 ymm at avx512,
//  16 at avx2 (the rest hold the broadcast inputs and a weight vector), 16
//  xmm in the generic clone (an s_v8 is two).
static inline int
s_budget (nn_isa_t level)
{
    return level == NN_ISA_AVX512 ? 24 : level == NN_ISA_AVX2 ? 12 : 4;
}

static inline int
s_fit (int budget, int V, int max)
{
    int n = budget / V;
    return n < 1 ? 1 : n > max ? max : n;
}

//  Where patch element j (tap (r, t), channel ch) of a window lies from the
//  window's first element, in the input's layout: (r*w + t)*c + ch.
static int
s_offsets (int *off, const nn_conv_shape_t *s)
{
    int j = 0;
    for (int r = 0; r < s->r; r++)
        for (int t = 0; t < s->s; t++)
            for (int ch = 0; ch < s->c; ch++)
                off[j++] = (r * s->w + t) * s->c + ch;
    return j;
}

//  The window of output pixel (p, q) of image img: the input itself when
//  it lies inside, else win (r rows of w*c floats, the input's layout,
//  zeros outside the image; s <= w keeps the rows apart).
static inline const float *
s_window (float *win, const float *img, const nn_conv_shape_t *s, int p, int q)
{
    int ih0 = p * s->stride - s->pad, iw0 = q * s->stride - s->pad;
    size_t row = (size_t) s->w * s->c;
    if (ih0 >= 0 && iw0 >= 0 && ih0 + s->r <= s->h && iw0 + s->s <= s->w)
        return img + (size_t) ih0 * row + (size_t) iw0 * s->c;
    for (int r = 0; r < s->r; r++) {
        int ih = ih0 + r;
        for (int t = 0; t < s->s; t++) {
            int iw = iw0 + t;
            float *dst = win + r * row + (size_t) t * s->c;
            if (ih >= 0 && ih < s->h && iw >= 0 && iw < s->w)
                memcpy (dst, img + (size_t) ih * row + (size_t) iw * s->c,
                        sizeof (float) * s->c);
            else
                memset (dst, 0, sizeof (float) * s->c);
        }
    }
    return win;
}

//  out (PX, K) = bias + the PX windows' patches . wt (J, K).
S_BODY void
s_forward_block (float *out, const float *const *base, const int *off, int J,
                 const float *wt, const s_v8 *bias, int V, int PX, nn_isa_t level)
{
    int K = 8 * V;
    s_v8 acc[S_PX_MAX][S_V_MAX];
#pragma GCC unroll 8
    for (int i = 0; i < PX; i++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            acc[i][v] = bias[v];
    for (int j = 0; j < J; j++) {
        const float *wr = wt + (size_t) j * K;
        int o = off[j];
        //  (the broadcasts are hoisted out of the v loop once unrolled; an
        //  array of them warned "maybe uninitialized" in GCC 12)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++) {
            s_v8 wv = s_v8_load (wr + 8 * v);
#pragma GCC unroll 8
            for (int i = 0; i < PX; i++)
                acc[i][v] += s_splat (base[i][o], level) * wv;
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < PX; i++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            s_v8_store (out + (size_t) i * K + 8 * v, acc[i][v]);
}

S_BODY void
s_forward_rows (float *out, const float *in, const float *wt, const s_v8 *bias,
                const nn_conv_shape_t *s, int r0, int r1, float *win, int V, int PX,
                nn_isa_t level)
{
    int K = 8 * V, off[S_DIRECT_PATCH];
    int J = s_offsets (off, s);
    size_t in_size = (size_t) s->h * s->w * s->c, win_size = (size_t) s->r * s->w * s->c;
    int n, p, q;
    s_pixel (s, r0, &n, &p, &q);
    for (int g = r0; g < r1;) {
        int m = r1 - g >= PX ? PX : 1;
        const float *base[S_PX_MAX];
        for (int i = 0; i < m; i++) {
            base[i] = s_window (win + i * win_size, in + n * in_size, s, p, q);
            s_pixel_next (s, &n, &p, &q);
        }
        if (m == PX)
            s_forward_block (out + (size_t) g * K, base, off, J, wt, bias, V, PX, level);
        else
            s_forward_block (out + (size_t) g * K, base, off, J, wt, bias, V, 1, level);
        g += m;
    }
}

S_BODY void
s_forward_body (float *out, const float *in, const float *w, const float *b,
                const nn_conv_shape_t *s, int r0, int r1, float *scratch, nn_isa_t level)
{
    int K = s->k, J = s->r * s->s * s->c, V = K / 8;
    float *wt = scratch, *win = scratch + (size_t) J * K;
    for (int k = 0; k < K; k++)
        for (int j = 0; j < J; j++)
            wt[(size_t) j * K + k] = w[(size_t) k * J + j];
    s_v8 bias[S_V_MAX];
    for (int v = 0; v < V; v++)
        bias[v] = b ? s_v8_load (b + 8 * v) : (s_v8) { 0 };
    int budget = s_budget (level);
#define S_CASE(VV)                                                                     \
    case VV:                                                                           \
        s_forward_rows (out, in, wt, bias, s, r0, r1, win, VV,                         \
                        s_fit (budget, VV, S_PX_MAX), level);                          \
        break;
    S_SWITCH_V (V, S_CASE)
#undef S_CASE
}
S_DISPATCH_ISA (static, s_forward,
                (float *out, const float *in, const float *w, const float *b,
                 const nn_conv_shape_t *s, int r0, int r1, float *scratch),
                (out, in, w, b, s, r0, r1, scratch))

void
nn_direct_forward_rows (float *out, const float *in, const float *w, const float *b,
                        const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    s_forward (out, in, w, b, s, r0, r1, scratch);
}

//  dwt rows [j0, j0 + JB) (each K) += patches[:, j0 + jj]^T . dout over
//  m pixels (patches (m, J), dout (m, K)).
S_BODY void
s_weights_block (float *dwt, const float *patches, int J, const float *dout, int m, int V,
                 int JB, nn_isa_t level)
{
    int K = 8 * V;
    s_v8 acc[S_JB_MAX][S_V_MAX];
#pragma GCC unroll 8
    for (int jj = 0; jj < JB; jj++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            acc[jj][v] = s_v8_load (dwt + (size_t) jj * K + 8 * v);
    for (int i = 0; i < m; i++) {
        const float *pr = patches + (size_t) i * J, *d = dout + (size_t) i * K;
#pragma GCC unroll 8
        for (int v = 0; v < V; v++) {
            s_v8 dv = s_v8_load (d + 8 * v);
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++)
                acc[jj][v] += s_splat (pr[jj], level) * dv;
        }
    }
#pragma GCC unroll 8
    for (int jj = 0; jj < JB; jj++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            s_v8_store (dwt + (size_t) jj * K + 8 * v, acc[jj][v]);
}

S_BODY void
s_weights_rows (float *dwt, s_v8 *dbias, const float *dout, const float *in,
                const nn_conv_shape_t *s, int r0, int r1, float *patches, int V, int JB,
                nn_isa_t level)
{
    int K = 8 * V, off[S_DIRECT_PATCH];
    int J = s_offsets (off, s);
    size_t in_size = (size_t) s->h * s->w * s->c;
    float *win = patches + (size_t) S_CHUNK * J;
    int n, p, q;
    s_pixel (s, r0, &n, &p, &q);
    for (int g = r0; g < r1; g += S_CHUNK) {
        int m = r1 - g < S_CHUNK ? r1 - g : S_CHUNK;
        const float *d = dout + (size_t) g * K;
        for (int i = 0; i < m; i++) {
            const float *base = s_window (win, in + n * in_size, s, p, q);
            float *patch = patches + (size_t) i * J;
            for (int j = 0; j < J; j++)
                patch[j] = base[off[j]];
            s_pixel_next (s, &n, &p, &q);
#pragma GCC unroll 8
            for (int v = 0; v < V; v++)
                dbias[v] += s_v8_load (d + (size_t) i * K + 8 * v);
        }
        int j0 = 0;
        for (; j0 + JB <= J; j0 += JB)
            s_weights_block (dwt + (size_t) j0 * K, patches + j0, J, d, m, V, JB, level);
        for (; j0 < J; j0++)
            s_weights_block (dwt + (size_t) j0 * K, patches + j0, J, d, m, V, 1, level);
    }
}

S_BODY void
s_weights_body (float *dw, float *db, const float *dout, const float *in,
                const nn_conv_shape_t *s, int r0, int r1, float *scratch, nn_isa_t level)
{
    int K = s->k, J = s->r * s->s * s->c, V = K / 8;
    float *dwt = scratch, *patches = scratch + (size_t) J * K;
    memset (dwt, 0, sizeof (float) * (size_t) J * K);
    s_v8 dbias[S_V_MAX];
    for (int v = 0; v < V; v++)
        dbias[v] = (s_v8) { 0 };
    int budget = s_budget (level);
#define S_CASE(VV)                                                                     \
    case VV:                                                                           \
        s_weights_rows (dwt, dbias, dout, in, s, r0, r1, patches, VV,                  \
                        s_fit (budget, VV, S_JB_MAX), level);                          \
        break;
    S_SWITCH_V (V, S_CASE)
#undef S_CASE
    if (db)
        for (int v = 0; v < V; v++)
            for (int i = 0; i < 8; i++)
                db[8 * v + i] += dbias[v][i];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < J; j++)
            dw[(size_t) k * J + j] += dwt[(size_t) j * K + k];
}
S_DISPATCH_ISA (static, s_weights,
                (float *dw, float *db, const float *dout, const float *in,
                 const nn_conv_shape_t *s, int r0, int r1, float *scratch),
                (dw, db, dout, in, s, r0, r1, scratch))

void
nn_direct_backward_weights_rows (float *dw, float *db, const float *dout, const float *in,
                                 const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    s_weights (dw, db, dout, in, s, r0, r1, scratch);
}
