/*  nn_kernels_dwconv.c: depthwise convolution (groups == c == k), NHWC,
    by direct loops vectorised over channels: no im2col, no GEMM (a GEMM per
    1-channel group has an inner dimension of r*s, 9 for 3x3, and would
    spend its time packing). One body per ISA level (nn_kernels_simd.h).

    Channels run in vectors of one register of the level (16 floats for
    AVX-512, 8 for AVX2, 4 for SSE and NEON), four at a time (four
    independent accumulation chains), then one at a time, then (AVX-512) one
    of 8, then single floats for a tail. The weights, w (c, r, s, 1)
    as every convolution's, are first transposed into scratch as (r, s, c),
    so each tap's weights are contiguous across channels like the input. */
#include "nn_kernels_conv.h"

#include "nn_kernels_simd.h"

#include <string.h>

size_t
nn_dwconv_scratch_count (const nn_conv_shape_t *s)
{
    return (size_t) s->r * s->s * s->c;
}

//  w (c, r*s) -> wt (r*s, c).
static void
s_transpose_taps (float *wt, const float *w, const nn_conv_shape_t *s)
{
    int taps = s->r * s->s, C = s->c;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < taps; j++)
            wt[(size_t) j * C + c] = w[(size_t) c * taps + j];
}

//  Call NAME_vW (ARGS, c0, nv) over all C channels: runs of 4 and 1
//  vectors of W floats, W the register of level ISA, then NAME_v8 for one
//  of 8 (AVX-512) and NAME_v1 for single channels.
#define S_RUNS_OF(W, C, NAME, ...)                                              \
    {                                                                          \
        for (; c0_ + 4 * W <= (C); c0_ += 4 * W)                               \
            NAME##_v##W (__VA_ARGS__, c0_, 4);                                 \
        for (; c0_ + W <= (C); c0_ += W)                                       \
            NAME##_v##W (__VA_ARGS__, c0_, 1);                                 \
    }
#define S_CHANNEL_RUNS(ISA, C, NAME, ...)                                       \
    do {                                                                       \
        int c0_ = 0;                                                           \
        if ((ISA) == NN_ISA_AVX512)                                            \
            S_RUNS_OF (16, C, NAME, __VA_ARGS__)                               \
        else if ((ISA) == NN_ISA_AVX2)                                         \
            S_RUNS_OF (8, C, NAME, __VA_ARGS__)                                \
        else                                                                   \
            S_RUNS_OF (4, C, NAME, __VA_ARGS__)                                \
        for (; c0_ + 8 <= (C); c0_ += 8)                                       \
            NAME##_v8 (__VA_ARGS__, c0_, 1);                                   \
        for (; c0_ < (C); c0_++)                                               \
            NAME##_v1 (__VA_ARGS__, c0_, 1);                                   \
    } while (0)

//  Defines NAME_v16, NAME_v8, NAME_v4 and NAME_v1 from one run body over
//  vectors of type VT (W floats; float for W 1): nv vectors from channel c0.
#define S_RUN_VARIANTS(DEFINE)                                                  \
    DEFINE (_v16, s_v16, 16)                                                   \
    DEFINE (_v8, s_v8, 8)                                                      \
    DEFINE (_v4, s_v4, 4)                                                      \
    DEFINE (_v1, float, 1)

#define S_LOAD(VT, p) (*(const VT *) (p))
#define S_STORE(VT, p) (*(VT *) (p))

//  The taps of output pixel (p, q) that fall inside the image: kernel rows
//  [rlo, rhi), columns [tlo, thi), at input (ih0 + r, iw0 + t).
typedef struct {
    int ih0, iw0, rlo, rhi, tlo, thi;
} s_window_t;

static inline s_window_t
s_window (const nn_conv_shape_t *s, int p, int q)
{
    s_window_t win;
    win.ih0 = p * s->stride - s->pad;
    win.iw0 = q * s->stride - s->pad;
    win.rlo = win.ih0 < 0 ? -win.ih0 : 0;
    win.tlo = win.iw0 < 0 ? -win.iw0 : 0;
    win.rhi = s->h - win.ih0 < s->r ? s->h - win.ih0 : s->r;
    win.thi = s->w - win.iw0 < s->s ? s->w - win.iw0 : s->s;
    return win;
}

//  o[c] = b[c] + sum over the window's taps of x[c] * wt[tap][c].
#define S_FORWARD_RUN(SUFFIX, VT, W)                                            \
static inline __attribute__ ((always_inline)) void                             \
s_forward_run##SUFFIX (float *o, const float *img, const float *wt,            \
                       const float *b, const nn_conv_shape_t *s,               \
                       const s_window_t *win, int c0, int nv)                  \
{                                                                              \
    VT acc[4];                                                                 \
    for (int v = 0; v < nv; v++)                                               \
        acc[v] = b ? S_LOAD (VT, b + c0 + W * v) : (VT) { 0 };                 \
    for (int r = win->rlo; r < win->rhi; r++)                                  \
        for (int t = win->tlo; t < win->thi; t++) {                            \
            const float *x = img + ((size_t) (win->ih0 + r) * s->w + win->iw0 + t) * s->c + c0; \
            const float *wr = wt + ((size_t) r * s->s + t) * s->c + c0;        \
            for (int v = 0; v < nv; v++)                                       \
                acc[v] += S_LOAD (VT, x + W * v) * S_LOAD (VT, wr + W * v);    \
        }                                                                      \
    for (int v = 0; v < nv; v++)                                               \
        S_STORE (VT, o + c0 + W * v) = acc[v];                                 \
}
S_RUN_VARIANTS (S_FORWARD_RUN)

S_BODY void
s_dw_forward_body (float *out, const float *in, const float *wt, const float *b,
                   const nn_conv_shape_t *s, int r0, int r1, nn_isa_t isa)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    int n, p, q;
    s_pixel (s, r0, &n, &p, &q);
    for (int g = r0; g < r1; g++, s_pixel_next (s, &n, &p, &q)) {
        s_window_t win = s_window (s, p, q);
        S_CHANNEL_RUNS (isa, s->c, s_forward_run, out + (size_t) g * s->c, in + n * in_size, wt, b,
                        s, &win);
    }
}
S_DISPATCH_ISA (static, s_dw_forward,
            (float *out, const float *in, const float *wt, const float *b,
             const nn_conv_shape_t *s, int r0, int r1),
            (out, in, wt, b, s, r0, r1))

void
nn_dwconv_forward_rows (float *out, const float *in, const float *w, const float *b,
                        const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    s_transpose_taps (scratch, w, s);
    s_dw_forward (out, in, scratch, b, s, r0, r1);
}

//  dwt[tap][c] += x[c] * d[c] over the window's taps, for one output pixel.
#define S_WEIGHTS_RUN(SUFFIX, VT, W)                                            \
static inline __attribute__ ((always_inline)) void                             \
s_weights_run##SUFFIX (float *dwt, const float *img, const float *d,           \
                       const nn_conv_shape_t *s, const s_window_t *win,        \
                       int c0, int nv)                                         \
{                                                                              \
    VT gv[4];                                                                  \
    for (int v = 0; v < nv; v++)                                               \
        gv[v] = S_LOAD (VT, d + c0 + W * v);                                   \
    for (int r = win->rlo; r < win->rhi; r++)                                  \
        for (int t = win->tlo; t < win->thi; t++) {                            \
            const float *x = img + ((size_t) (win->ih0 + r) * s->w + win->iw0 + t) * s->c + c0; \
            float *dr = dwt + ((size_t) r * s->s + t) * s->c + c0;             \
            for (int v = 0; v < nv; v++)                                       \
                S_STORE (VT, dr + W * v) += S_LOAD (VT, x + W * v) * gv[v];    \
        }                                                                      \
}
S_RUN_VARIANTS (S_WEIGHTS_RUN)

S_BODY void
s_dw_weights_body (float *dwt, float *db, const float *dout, const float *in,
                   const nn_conv_shape_t *s, int r0, int r1, nn_isa_t isa)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    int n, p, q, C = s->c;
    s_pixel (s, r0, &n, &p, &q);
    for (int g = r0; g < r1; g++, s_pixel_next (s, &n, &p, &q)) {
        s_window_t win = s_window (s, p, q);
        const float *d = dout + (size_t) g * C;
        S_CHANNEL_RUNS (isa, C, s_weights_run, dwt, in + n * in_size, d, s, &win);
        if (db) {
S_IVDEP
            for (int c = 0; c < C; c++)
                db[c] += d[c];
        }
    }
}
S_DISPATCH_ISA (static, s_dw_weights,
            (float *dwt, float *db, const float *dout, const float *in,
             const nn_conv_shape_t *s, int r0, int r1),
            (dwt, db, dout, in, s, r0, r1))

void
nn_dwconv_backward_weights_rows (float *dw, float *db, const float *dout, const float *in,
                                 const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    int taps = s->r * s->s, C = s->c;
    memset (scratch, 0, sizeof (float) * taps * C);
    s_dw_weights (scratch, db, dout, in, s, r0, r1);
    for (int c = 0; c < C; c++)
        for (int j = 0; j < taps; j++)
            dw[(size_t) c * taps + j] += scratch[(size_t) j * C + c];
}

//  The taps that reach input row ih (or column): kernel offsets off[i] and
//  output rows at[i] with at * stride - pad + off == ih, i < the count
//  returned (at most `taps`, the kernel's height or width).
static int
s_reach (int *off, int *at, int ih, int taps, int stride, int pad, int outs)
{
    int m = 0;
    for (int r = 0; r < taps; r++) {
        int num = ih + pad - r;
        if (num < 0 || num % stride)
            continue;
        if (num / stride >= outs)
            continue;
        off[m] = r;
        at[m++] = num / stride;
    }
    return m;
}

//  The output pixels and taps that read one input pixel.
typedef struct {
    int nr, nt;
    const int *roff, *rat, *toff, *tat;
} s_reach_t;

//  dx[c] = sum over the taps reaching this input pixel of
//  dout[p, q][c] * wt[tap][c] (dimg: this image's dout).
#define S_INPUT_RUN(SUFFIX, VT, W)                                              \
static inline __attribute__ ((always_inline)) void                             \
s_input_run##SUFFIX (float *dx, const float *dimg, const float *wt,            \
                     const nn_conv_shape_t *s, const s_reach_t *re,            \
                     int c0, int nv)                                           \
{                                                                              \
    VT acc[4];                                                                 \
    for (int v = 0; v < nv; v++)                                               \
        acc[v] = (VT) { 0 };                                                   \
    for (int i = 0; i < re->nr; i++)                                           \
        for (int j = 0; j < re->nt; j++) {                                     \
            const float *d = dimg + ((size_t) re->rat[i] * s->q + re->tat[j]) * s->c + c0; \
            const float *wr = wt + ((size_t) re->roff[i] * s->s + re->toff[j]) * s->c + c0; \
            for (int v = 0; v < nv; v++)                                       \
                acc[v] += S_LOAD (VT, d + W * v) * S_LOAD (VT, wr + W * v);    \
        }                                                                      \
    for (int v = 0; v < nv; v++)                                               \
        S_STORE (VT, dx + c0 + W * v) = acc[v];                                \
}
S_RUN_VARIANTS (S_INPUT_RUN)

//  Gathers (each input pixel sums what reaches it) rather than scatters:
//  every din element is written once, from registers, with no zeroing pass.
//  roff .. tat: scratch of the kernel's height (2 arrays) and width (2).
S_BODY void
s_dw_input_body (float *din, const float *dout, const float *wt, const nn_conv_shape_t *s,
                 int *roff, int *rat, int *toff, int *tat, nn_isa_t isa)
{
    size_t in_size = (size_t) s->h * s->w * s->c, out_size = (size_t) s->p * s->q * s->c;
    for (int n = 0; n < s->n; n++)
        for (int ih = 0; ih < s->h; ih++) {
            s_reach_t re = { 0, 0, roff, rat, toff, tat };
            re.nr = s_reach (roff, rat, ih, s->r, s->stride, s->pad, s->p);
            for (int iw = 0; iw < s->w; iw++) {
                re.nt = s_reach (toff, tat, iw, s->s, s->stride, s->pad, s->q);
                float *dx = din + n * in_size + ((size_t) ih * s->w + iw) * s->c;
                S_CHANNEL_RUNS (isa, s->c, s_input_run, dx, dout + n * out_size, wt, s, &re);
            }
        }
}
S_DISPATCH_ISA (static, s_dw_input,
            (float *din, const float *dout, const float *wt, const nn_conv_shape_t *s,
             int *roff, int *rat, int *toff, int *tat),
            (din, dout, wt, s, roff, rat, toff, tat))

void
nn_dwconv_backward_input (float *din, const float *dout, const float *w,
                          const nn_conv_shape_t *s, float *scratch)
{
    s_transpose_taps (scratch, w, s);
    int roff[s->r], rat[s->r], toff[s->s], tat[s->s];
    s_dw_input (din, dout, scratch, s, roff, rat, toff, tat);
}
