/*  nn_kernels_wino_xform.c: the Winograd transforms of nn_kernels_wino.c
    (contracts in nn_kernels_wino.h), F(2x2, 3x3) and F(4x4, 3x3) (Lavin
    and Gray 2016; F(4x4)'s interpolation points 0, +-1, +-2 and infinity):

        F(2x2)  B^T (4x4)  1  0 -1  0     G (4x3)  1   0   0     A^T (2x4)  1  1  1  0
                           0  1  1  0             .5  .5  .5                0  1 -1 -1
                           0 -1  1  0             .5 -.5  .5
                           0  1  0 -1              0   0   1

        F(4x4)  B^T (6x6)  4  0 -5  0  1  0   G (6x3)  1/4     0    0   A^T (4x6)  1  1  1  1  1  0
                           0 -4 -4  1  1  0           -1/6  -1/6 -1/6              0  1 -1  2 -2  0
                           0  4 -4 -1  1  0           -1/6   1/6 -1/6              0  1  1  4  4  0
                           0 -2 -1  2  1  0           1/24  1/12  1/6              0  1 -1  8 -8  1
                           0  2 -1 -2  1  0           1/24 -1/12  1/6
                           0  4  0 -5  0  1              0     0    1

    Each 2-D transform is the 1-D one down the columns, then along the
    rows (s_2d). The bodies run over channels in explicit vectors (one
    clone per ISA level, nn_kernels_simd.h) and are specialised per m:
    S_PER_M calls a body with m a constant, so each 1-D transform folds to
    its own adds. */
#include "nn_kernels_wino.h"

#include "nn_kernels_simd.h"

#include <string.h>

//  The bodies' vectors: 16 channels (one zmm at avx512, two ymm at avx2,
//  four xmm in the generic clone). 8-channel ones ran F(4x4)'s VGG5 shapes
//  per call 10-30% slower at avx512 and generic, 7-15% at avx2.
typedef s_v16 s_vec;
#define S_LANES 16
#define S_VLOAD s_v16_load
#define S_VSTORE s_v16_store

//  The largest window side and plane count (F(4x4)).
#define S_A_MAX 6
#define S_PLANES_MAX (S_A_MAX * S_A_MAX)

//  o (a) = B^T d (a).
S_BODY void
s_bt (s_vec *o, const s_vec *d, int m)
{
    if (m == 2) {
        o[0] = d[0] - d[2];
        o[1] = d[1] + d[2];
        o[2] = d[2] - d[1];
        o[3] = d[1] - d[3];
        return;
    }
    s_vec p = d[4] - 4.0f * d[2], q = d[3] - 4.0f * d[1];
    s_vec r = d[4] - d[2], t = 2.0f * (d[3] - d[1]);
    o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    o[1] = p + q;
    o[2] = p - q;
    o[3] = r + t;
    o[4] = r - t;
    o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

//  o (a) = B v (a), B^T's adjoint.
S_BODY void
s_b (s_vec *o, const s_vec *v, int m)
{
    if (m == 2) {
        o[0] = v[0];
        o[1] = v[1] - v[2] + v[3];
        o[2] = v[1] + v[2] - v[0];
        o[3] = -v[3];
        return;
    }
    o[0] = 4.0f * v[0];
    o[1] = 4.0f * (v[2] - v[1] + v[5]) + 2.0f * (v[4] - v[3]);
    o[2] = -5.0f * v[0] - 4.0f * (v[1] + v[2]) - (v[3] + v[4]);
    o[3] = (v[1] - v[2]) + 2.0f * (v[3] - v[4]) - 5.0f * v[5];
    o[4] = v[0] + v[1] + v[2] + v[3] + v[4];
    o[5] = v[5];
}

//  o (m) = A^T d (a).
S_BODY void
s_at (s_vec *o, const s_vec *d, int m)
{
    if (m == 2) {
        o[0] = d[0] + d[1] + d[2];
        o[1] = d[1] - d[2] - d[3];
        return;
    }
    s_vec s12 = d[1] + d[2], d12 = d[1] - d[2], s34 = d[3] + d[4], d34 = d[3] - d[4];
    o[0] = d[0] + s12 + s34;
    o[1] = d12 + 2.0f * d34;
    o[2] = s12 + 4.0f * s34;
    o[3] = d12 + 8.0f * d34 + d[5];
}

//  o (a) = A y (m), A^T's adjoint.
S_BODY void
s_a (s_vec *o, const s_vec *y, int m)
{
    if (m == 2) {
        o[0] = y[0];
        o[1] = y[0] + y[1];
        o[2] = y[0] - y[1];
        o[3] = -y[1];
        return;
    }
    s_vec e1 = y[0] + y[2], o1 = y[1] + y[3];
    s_vec e2 = y[0] + 4.0f * y[2], o2 = 2.0f * y[1] + 8.0f * y[3];
    o[0] = y[0];
    o[1] = e1 + o1;
    o[2] = e1 - o1;
    o[3] = e2 + o2;
    o[4] = e2 - o2;
    o[5] = y[3];
}

//  o (a) = G g (3).
S_BODY void
s_g (s_vec *o, const s_vec *g, int m)
{
    if (m == 2) {
        o[0] = g[0];
        o[1] = 0.5f * (g[0] + g[1] + g[2]);
        o[2] = 0.5f * (g[0] - g[1] + g[2]);
        o[3] = g[2];
        return;
    }
    s_vec s = g[0] + g[2], t = g[0] * (1.0f / 24) + g[2] * (1.0f / 6);
    o[0] = 0.25f * g[0];
    o[1] = (s + g[1]) * (-1.0f / 6);
    o[2] = (s - g[1]) * (-1.0f / 6);
    o[3] = t + g[1] * (1.0f / 12);
    o[4] = t - g[1] * (1.0f / 12);
    o[5] = g[2];
}

//  o (3) = G^T u (a), G's adjoint.
S_BODY void
s_gt (s_vec *o, const s_vec *u, int m)
{
    if (m == 2) {
        o[0] = u[0] + 0.5f * (u[1] + u[2]);
        o[1] = 0.5f * (u[1] - u[2]);
        o[2] = 0.5f * (u[1] + u[2]) + u[3];
        return;
    }
    s_vec s12 = u[1] + u[2], s34 = u[3] + u[4];
    o[0] = 0.25f * u[0] - s12 * (1.0f / 6) + s34 * (1.0f / 24);
    o[1] = (u[2] - u[1]) * (1.0f / 6) + (u[3] - u[4]) * (1.0f / 12);
    o[2] = (s34 - s12) * (1.0f / 6) + u[5];
}

//  Tile tg of the batch: image n, tile row ti, tile column tj.
static inline void
s_tile (const nn_wino_tiles_t *tl, int tg, int *n, int *ti, int *tj)
{
    int per = tl->down * tl->across;
    *n = tg / per;
    *ti = tg % per / tl->across;
    *tj = tg % tl->across;
}

//  The a*a pixels of tile tg's input window: in's pixel, or zero outside.
static inline void
s_window (const float *px[S_PLANES_MAX], const float *in, const nn_wino_tiles_t *tl, int tg,
          const float *zero)
{
    const nn_conv_shape_t *s = tl->s;
    int n, ti, tj;
    s_tile (tl, tg, &n, &ti, &tj);
    for (int u = 0; u < tl->a; u++)
        for (int v = 0; v < tl->a; v++) {
            int y = tl->m * ti - s->pad + u, x = tl->m * tj - s->pad + v;
            bool inside = y >= 0 && y < s->h && x >= 0 && x < s->w;
            px[u * tl->a + v] =
                inside ? in + (((size_t) n * s->h + y) * s->w + x) * s->c : zero;
        }
}

//  The m*m output pixels of tile tg (rows width floats apart in a buffer
//  of (n, p, q, width)): the pixel when it is inside and in [r0, r1), else
//  `other`.
static inline void
s_outputs (float *po[16], float *base, size_t width, const nn_wino_tiles_t *tl, int tg,
           int r0, int r1, float *other)
{
    const nn_conv_shape_t *s = tl->s;
    int n, ti, tj;
    s_tile (tl, tg, &n, &ti, &tj);
    for (int a = 0; a < tl->m; a++)
        for (int b = 0; b < tl->m; b++) {
            int y = tl->m * ti + a, x = tl->m * tj + b;
            long g = ((long) n * s->p + y) * s->q + x;
            bool keep = y < s->p && x < s->q && g >= r0 && g < r1;
            po[a * tl->m + b] = keep ? base + (size_t) g * width : other;
        }
}

//  The 1-D transforms, and how many values each takes and makes.
enum { S_BT, S_B, S_AT, S_A, S_G, S_GT };

S_BODY int
s_len_in (int kind, int m)
{
    return kind == S_A ? m : kind == S_G ? 3 : m + 2;
}

S_BODY int
s_len_out (int kind, int m)
{
    return kind == S_AT ? m : kind == S_GT ? 3 : m + 2;
}

S_BODY void
s_1d (s_vec *o, const s_vec *d, int kind, int m)
{
    switch (kind) {
        case S_BT: s_bt (o, d, m); break;
        case S_B: s_b (o, d, m); break;
        case S_AT: s_at (o, d, m); break;
        case S_A: s_a (o, d, m); break;
        case S_G: s_g (o, d, m); break;
        default: s_gt (o, d, m); break;
    }
}

//  y (no, no) = X x X^T, x (ni, ni) row-major, X the 1-D transform `kind`
//  (ni -> no): down the columns, then along the rows.
S_BODY void
s_2d (s_vec *y, const s_vec *x, int kind, int m)
{
    int ni = s_len_in (kind, m), no = s_len_out (kind, m);
    s_vec e[S_PLANES_MAX], col[S_A_MAX], r[S_A_MAX];
    for (int v = 0; v < ni; v++) {
        for (int u = 0; u < ni; u++)
            col[u] = x[u * ni + v];
        s_1d (r, col, kind, m);
        for (int i = 0; i < no; i++)
            e[i * ni + v] = r[i];
    }
    for (int i = 0; i < no; i++)
        s_1d (y + i * no, e + i * ni, kind, m);
}

//  n <= S_LANES channels from p into v (zeros past n), from v to p, added
//  to p.
S_BODY void
s_ld (s_vec *v, const float *p, int n)
{
    if (n == S_LANES) {
        *v = S_VLOAD (p);
        return;
    }
    *v = (s_vec) { 0 };
    memcpy (v, p, sizeof (float) * n);
}

S_BODY void
s_st (float *p, const s_vec *v, int n)
{
    if (n == S_LANES)
        S_VSTORE (p, *v);
    else
        memcpy (p, v, sizeof (float) * n);
}

S_BODY void
s_acc (float *p, const s_vec *v, int n)
{
    s_vec x;
    s_ld (&x, p, n);
    x += *v;
    s_st (p, &x, n);
}

//  A body's channels S_LANES at a time, then the rest: call (..., c, n),
//  n = S_LANES a constant in the first. Explicit vectors: GCC vectorised
//  F(2x2)'s loops over channels by itself but not F(4x4)'s 6x6 ones
//  ("loop nest containing two or more consecutive inner loops"), which
//  ran scalar, 3-5x slower than F(2x2) per call.
#define S_CHANNELS(C, call, ...)                                                \
    do {                                                                        \
        int c_ = 0;                                                             \
        for (; c_ + S_LANES <= (C); c_ += S_LANES)                                          \
            call (__VA_ARGS__, c_, S_LANES);                                          \
        if (c_ < (C))                                                           \
            call (__VA_ARGS__, c_, (C) - c_);                                   \
    } while (0)

//  F(m x m)'s body NAME_m with m a constant (its 1-D transforms fold),
//  called from NAME_body with tl's m.
#define S_PER_M(m, call, ...)                                                   \
    do {                                                                        \
        if ((m) == 4)                                                           \
            call (__VA_ARGS__, 4);                                              \
        else                                                                    \
            call (__VA_ARGS__, 2);                                              \
    } while (0)

S_BODY void
s_input_c (float *o, size_t plane, const float *const *px, int m, int c, int n)
{
    s_vec x[S_PLANES_MAX], y[S_PLANES_MAX];
    int P = (m + 2) * (m + 2);
    for (int i = 0; i < P; i++)
        s_ld (&x[i], px[i] + c, n);
    s_2d (y, x, S_BT, m);
    for (int i = 0; i < P; i++)
        s_st (o + (size_t) i * plane + c, &y[i], n);
}

S_BODY void
s_input_m (float *V, const float *in, const nn_wino_tiles_t *tl, int t0, int T,
           const float *zero, int m)
{
    int C = tl->s->c;
    for (int t = 0; t < T; t++) {
        const float *px[S_PLANES_MAX];
        s_window (px, in, tl, t0 + t, zero);
        S_CHANNELS (C, s_input_c, V + (size_t) t * C, s_wino_plane (T, C), px, m);
    }
}

S_BODY void
nn_wino_input_body (float *V, const float *in, const nn_wino_tiles_t *tl, int t0, int T,
                    const float *zero)
{
    S_PER_M (tl->m, s_input_m, V, in, tl, t0, T, zero);
}

S_DISPATCH (extern, nn_wino_input,
            (float *V, const float *in, const nn_wino_tiles_t *tl, int t0, int T,
             const float *zero),
            (V, in, tl, t0, T, zero))

S_BODY void
s_output_c (float *const *po, const float *mt, size_t plane, const float *b, int m, int c,
            int n)
{
    s_vec x[S_PLANES_MAX], y[16], bias;
    int P = (m + 2) * (m + 2);
    for (int i = 0; i < P; i++)
        s_ld (&x[i], mt + (size_t) i * plane + c, n);
    s_2d (y, x, S_AT, m);
    s_ld (&bias, b + c, n);
    for (int j = 0; j < m * m; j++) {
        y[j] += bias;
        s_st (po[j] + c, &y[j], n);
    }
}

S_BODY void
s_output_m (float *out, const float *M, const float *b, const nn_wino_tiles_t *tl, int t0,
            int T, int r0, int r1, float *sink, int m)
{
    int K = tl->s->k;
    for (int t = 0; t < T; t++) {
        float *po[16];
        s_outputs (po, out, (size_t) K, tl, t0 + t, r0, r1, sink);
        S_CHANNELS (K, s_output_c, po, M + (size_t) t * K, s_wino_plane (T, K), b, m);
    }
}

S_BODY void
nn_wino_output_body (float *out, const float *M, const float *b, const nn_wino_tiles_t *tl,
                     int t0, int T, int r0, int r1, float *sink)
{
    S_PER_M (tl->m, s_output_m, out, M, b, tl, t0, T, r0, r1, sink);
}

S_DISPATCH (extern, nn_wino_output,
            (float *out, const float *M, const float *b, const nn_wino_tiles_t *tl, int t0,
             int T, int r0, int r1, float *sink),
            (out, M, b, tl, t0, T, r0, r1, sink))

S_BODY void
s_dout_c (float *o, size_t plane, float *const *pd, int m, int c, int n)
{
    s_vec x[16], y[S_PLANES_MAX];
    int P = (m + 2) * (m + 2);
    for (int j = 0; j < m * m; j++)
        s_ld (&x[j], pd[j] + c, n);
    s_2d (y, x, S_A, m);
    for (int i = 0; i < P; i++)
        s_st (o + (size_t) i * plane + c, &y[i], n);
}

S_BODY void
s_dout_m (float *dM, const float *dout, const nn_wino_tiles_t *tl, int t0, int T, int r0,
          int r1, float *zero, int m)
{
    int K = tl->s->k;
    for (int t = 0; t < T; t++) {
        float *pd[16];
        s_outputs (pd, (float *) dout, (size_t) K, tl, t0 + t, r0, r1, zero);
        S_CHANNELS (K, s_dout_c, dM + (size_t) t * K, s_wino_plane (T, K), pd, m);
    }
}

S_BODY void
nn_wino_dout_body (float *dM, const float *dout, const nn_wino_tiles_t *tl, int t0, int T,
                   int r0, int r1, float *zero)
{
    S_PER_M (tl->m, s_dout_m, dM, dout, tl, t0, T, r0, r1, zero);
}

S_DISPATCH (extern, nn_wino_dout,
            (float *dM, const float *dout, const nn_wino_tiles_t *tl, int t0, int T, int r0,
             int r1, float *zero),
            (dM, dout, tl, t0, T, r0, r1, zero))

S_BODY void
s_din_c (float *const *px, const float *mt, size_t plane, int m, int c, int n)
{
    s_vec x[S_PLANES_MAX], y[S_PLANES_MAX];
    int P = (m + 2) * (m + 2);
    for (int i = 0; i < P; i++)
        s_ld (&x[i], mt + (size_t) i * plane + c, n);
    s_2d (y, x, S_B, m);
    for (int i = 0; i < P; i++)
        s_acc (px[i] + c, &y[i], n);
}

S_BODY void
s_din_m (float *din, const float *dV, const nn_wino_tiles_t *tl, int t0, int T, float *sink,
         int m)
{
    int C = tl->s->c;
    for (int t = 0; t < T; t++) {
        const float *cpx[S_PLANES_MAX];
        float *px[S_PLANES_MAX];
        s_window (cpx, din, tl, t0 + t, sink);
        memcpy (px, cpx, sizeof px);
        S_CHANNELS (C, s_din_c, px, dV + (size_t) t * C, s_wino_plane (T, C), m);
    }
}

S_BODY void
nn_wino_din_body (float *din, const float *dV, const nn_wino_tiles_t *tl, int t0, int T,
                  float *sink)
{
    S_PER_M (tl->m, s_din_m, din, dV, tl, t0, T, sink);
}

S_DISPATCH (extern, nn_wino_din,
            (float *din, const float *dV, const nn_wino_tiles_t *tl, int t0, int T,
             float *sink),
            (din, dV, tl, t0, T, sink))

//  One (k, c-block)'s 3x3 taps wk (3, 3, C) -> u's planes, plane floats
//  apart.
S_BODY void
s_weights_c (float *u, size_t plane, const float *wk, int C, int m, int c, int n)
{
    s_vec x[9], y[S_PLANES_MAX];
    int P = (m + 2) * (m + 2);
    for (int i = 0; i < 9; i++)
        s_ld (&x[i], wk + (size_t) i * C + c, n);
    s_2d (y, x, S_G, m);
    for (int i = 0; i < P; i++)
        s_st (u + (size_t) i * plane + c, &y[i], n);
}

S_BODY void
s_weights_m (float *U, const float *w, int K, int C, int m)
{
    for (int k = 0; k < K; k++)
        S_CHANNELS (C, s_weights_c, U + (size_t) k * C, s_wino_plane (K, C),
                    w + (size_t) k * 9 * C, C, m);
}

S_BODY void
nn_wino_weights_body (float *U, const float *w, int m, int K, int C)
{
    S_PER_M (m, s_weights_m, U, w, K, C);
}

S_DISPATCH (extern, nn_wino_weights, (float *U, const float *w, int m, int K, int C),
            (U, w, m, K, C))

S_BODY void
s_dweights_c (float *dk, const float *u, size_t plane, int C, int m, int c, int n)
{
    s_vec x[S_PLANES_MAX], y[9];
    int P = (m + 2) * (m + 2);
    for (int i = 0; i < P; i++)
        s_ld (&x[i], u + (size_t) i * plane + c, n);
    s_2d (y, x, S_GT, m);
    for (int i = 0; i < 9; i++)
        s_acc (dk + (size_t) i * C + c, &y[i], n);
}

S_BODY void
s_dweights_m (float *dw, const float *dU, int K, int C, int m)
{
    for (int k = 0; k < K; k++)
        S_CHANNELS (C, s_dweights_c, dw + (size_t) k * 9 * C, dU + (size_t) k * C,
                    s_wino_plane (K, C), C, m);
}

S_BODY void
nn_wino_dweights_body (float *dw, const float *dU, int m, int K, int C)
{
    S_PER_M (m, s_dweights_m, dw, dU, K, C);
}

S_DISPATCH (extern, nn_wino_dweights, (float *dw, const float *dU, int m, int K, int C),
            (dw, dU, m, K, C))
