/*  nn_kernels_wino.c: dense 3x3 stride-1 convolutions (NHWC) by Winograd's
    minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
    Convolutional Neural Networks", CVPR 2016): each 2x2 block of output
    pixels (a tile) costs 16 multiply-adds per (input, output) channel pair
    where im2col's GEMM costs 36, so VGG's and ResNet's 3x3 layers do 2.25x
    fewer (1.72x on 7x7 images, whose last tile row and column are half
    wasted). Forward, weight gradient and input gradient all run as 16
    GEMMs (our register tile or OpenBLAS, s_product) over planes of
    transformed tiles:

        forward    Y  = A^T [ sum_c U[k,c] . V[c] ] A          U = G g G^T,  V = B^T d B
        backward   dM = A dY A^T;  dV[c] = sum_k U[k,c] . dM[k];  dd = B dV B^T
                   dU[k,c] = sum_tiles dM[k] . V[c];  dg = G^T dU G

    (. elementwise over the 4x4 transformed tile; the 16 elements xi are
    independent, so each is one GEMM over channels). A tile reads a 4x4
    input window at (2 ti - pad, 2 tj - pad); pixels outside the image read
    zeros, outputs past the image are dropped. The rows kernels take the
    tile rows that hold their output pixels and use only those pixels
    (forward: write them; weight gradient: zero dY elsewhere), so pieces
    cut mid-tile add up like the im2col kernels' pieces.

    Scratch: U (16, k, c), the weights transformed once per call (or dU,
    the weight gradient's, summed over the chunks and folded into dw once
    at the end), then one chunk of T tiles: V (16, T, c), M (16, T, k),
    then a zero row and a sink row (max (c, k) floats each: the pixels
    outside the image read the one and write the other). The transforms
    are vectorised over channels, one body per ISA level
    (nn_kernels_simd.h). */
#include "nn_kernels_conv.h"

#include "nn_kernels_gemm.h"
#include "nn_kernels_simd.h"

#include <cblas.h>
#include <string.h>

//  V and M of one chunk: 512 KiB, a quarter of one core's L2 here (2 MiB
//  chunks ran VGG5's weight and input gradients 25-35% slower, 256 KiB
//  ones its forward); at least 64 tiles, so that each GEMM (which packs
//  its U anew) has rows enough.
#define S_CHUNK_BYTES (512 * 1024)
#define S_CHUNK_MIN 64

//  Calls over fewer tiles take im2col: 16 small GEMMs lost to one over 4x
//  the rows (VGG11's 512 -> 512 on 2x2 images, 13 images, 13 tiles: 3.2 ms
//  forward against 2.1; 25 tiles about even, 50 tiles 5.2 against 8.2).
#define S_TILES_MIN 32

//  The forward transposes U when its 16 planes (k * c floats each) fit in
//  1 MiB, half this core's L2.
#define S_TRANSPOSE_MAX (1024 * 1024 / (16 * sizeof (float)))

//  Tiles down and across.
static int
s_tiles_down (const nn_conv_shape_t *s)
{
    return (s->p + 1) / 2;
}

static int
s_tiles_across (const nn_conv_shape_t *s)
{
    return (s->q + 1) / 2;
}

static int
s_chunk_tiles (const nn_conv_shape_t *s, int total)
{
    int chunk = (int) (S_CHUNK_BYTES / (sizeof (float) * 16 * (size_t) (s->c + s->k)));
    if (chunk < S_CHUNK_MIN)
        chunk = S_CHUNK_MIN;
    return chunk < total ? chunk : total;
}

bool
nn_wino_takes (const nn_conv_shape_t *s)
{
    return s->r == 3 && s->s == 3 && s->stride == 1 && s_groups (s) == 1 && s->c >= 8
           && s->k >= 8 && s->p >= 2 && s->q >= 2;
}

size_t
nn_wino_scratch_count (const nn_conv_shape_t *s)
{
    int total = s->n * s_tiles_down (s) * s_tiles_across (s);
    size_t T = (size_t) s_chunk_tiles (s, total), C = (size_t) s->c, K = (size_t) s->k;
    size_t row = C > K ? C : K;
    return 16 * T * (C + K) + 17 * K * C + 2 * row;
}

//  Tile tg of the batch: image n, tile row ti, tile column tj.
static inline void
s_tile (const nn_conv_shape_t *s, int tg, int *n, int *ti, int *tj)
{
    int tq = s_tiles_across (s), per = s_tiles_down (s) * tq;
    *n = tg / per;
    *ti = tg % per / tq;
    *tj = tg % tq;
}

//  The tiles holding output pixels [r0, r1): whole tile rows.
static void
s_tile_range (const nn_conv_shape_t *s, int r0, int r1, int *t0, int *t1)
{
    int pq = s->p * s->q, tp = s_tiles_down (s), tq = s_tiles_across (s);
    int last = r1 - 1;
    *t0 = (r0 / pq * tp + r0 % pq / s->q / 2) * tq;
    *t1 = (last / pq * tp + last % pq / s->q / 2 + 1) * tq;
}

bool
nn_wino_pays (const nn_conv_shape_t *s, int r0, int r1)
{
    if (!nn_wino_takes (s) || r1 <= r0)
        return false;
    int t0, t1;
    s_tile_range (s, r0, r1, &t0, &t1);
    return t1 - t0 >= S_TILES_MIN;
}

//  The 16 pixels of tile tg's input window: in's pixel, or zero outside.
static inline void
s_window (const float *px[16], const float *in, const nn_conv_shape_t *s, int tg,
          const float *zero)
{
    int n, ti, tj;
    s_tile (s, tg, &n, &ti, &tj);
    for (int u = 0; u < 4; u++)
        for (int v = 0; v < 4; v++) {
            int y = 2 * ti - s->pad + u, x = 2 * tj - s->pad + v;
            bool inside = y >= 0 && y < s->h && x >= 0 && x < s->w;
            px[u * 4 + v] = inside ? in + (((size_t) n * s->h + y) * s->w + x) * s->c : zero;
        }
}

//  The 4 output pixels of tile tg (rows width floats apart in a buffer of
//  (n, p, q, width)): the pixel when it is inside and in [r0, r1), else
//  `other`.
static inline void
s_outputs (float *po[4], float *base, size_t width, const nn_conv_shape_t *s, int tg, int r0,
           int r1, float *other)
{
    int n, ti, tj;
    s_tile (s, tg, &n, &ti, &tj);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int y = 2 * ti + a, x = 2 * tj + b;
            long g = ((long) n * s->p + y) * s->q + x;
            bool keep = y < s->p && x < s->q && g >= r0 && g < r1;
            po[a * 2 + b] = keep ? base + (size_t) g * width : other;
        }
}

//  V (16, T, c) = B^T d B of tiles [t0, t0 + T).
S_BODY void
s_wino_input_body (float *V, const float *in, const nn_conv_shape_t *s, int t0, int T,
                   const float *zero)
{
    int C = s->c;
    size_t plane = (size_t) T * C;
    for (int t = 0; t < T; t++) {
        const float *px[16];
        s_window (px, in, s, t0 + t, zero);
        float *o = V + (size_t) t * C;
        S_IVDEP
        for (int c = 0; c < C; c++) {
            float e[4][4];
            for (int v = 0; v < 4; v++) {
                float d0 = px[v][c], d1 = px[4 + v][c], d2 = px[8 + v][c], d3 = px[12 + v][c];
                e[0][v] = d0 - d2;
                e[1][v] = d1 + d2;
                e[2][v] = d2 - d1;
                e[3][v] = d1 - d3;
            }
            for (int i = 0; i < 4; i++) {
                o[(size_t) (i * 4 + 0) * plane + c] = e[i][0] - e[i][2];
                o[(size_t) (i * 4 + 1) * plane + c] = e[i][1] + e[i][2];
                o[(size_t) (i * 4 + 2) * plane + c] = e[i][2] - e[i][1];
                o[(size_t) (i * 4 + 3) * plane + c] = e[i][1] - e[i][3];
            }
        }
    }
}

S_DISPATCH (static, s_wino_input,
            (float *V, const float *in, const nn_conv_shape_t *s, int t0, int T,
             const float *zero),
            (V, in, s, t0, T, zero))

//  out's kept pixels of tiles [t0, t0 + T) = A^T M A + b (b: k floats,
//  zeros when the layer has none).
S_BODY void
s_wino_output_body (float *out, const float *M, const float *b, const nn_conv_shape_t *s,
                    int t0, int T, int r0, int r1, float *sink)
{
    int K = s->k;
    size_t plane = (size_t) T * K;
    for (int t = 0; t < T; t++) {
        float *po[4];
        s_outputs (po, out, (size_t) K, s, t0 + t, r0, r1, sink);
        const float *m = M + (size_t) t * K;
        S_IVDEP
        for (int k = 0; k < K; k++) {
            float f[2][4];
            for (int v = 0; v < 4; v++) {
                float m0 = m[(size_t) v * plane + k], m1 = m[(size_t) (4 + v) * plane + k];
                float m2 = m[(size_t) (8 + v) * plane + k], m3 = m[(size_t) (12 + v) * plane + k];
                f[0][v] = m0 + m1 + m2;
                f[1][v] = m1 - m2 - m3;
            }
            for (int a = 0; a < 2; a++) {
                po[a * 2][k] = f[a][0] + f[a][1] + f[a][2] + b[k];
                po[a * 2 + 1][k] = f[a][1] - f[a][2] - f[a][3] + b[k];
            }
        }
    }
}

S_DISPATCH (static, s_wino_output,
            (float *out, const float *M, const float *b, const nn_conv_shape_t *s, int t0,
             int T, int r0, int r1, float *sink),
            (out, M, b, s, t0, T, r0, r1, sink))

//  dM (16, T, k) = A dY A^T of tiles [t0, t0 + T), dY zero outside the
//  image and outside [r0, r1).
S_BODY void
s_wino_dout_body (float *dM, const float *dout, const nn_conv_shape_t *s, int t0, int T,
                  int r0, int r1, float *zero)
{
    int K = s->k;
    size_t plane = (size_t) T * K;
    for (int t = 0; t < T; t++) {
        float *pd[4];
        s_outputs (pd, (float *) dout, (size_t) K, s, t0 + t, r0, r1, zero);
        float *o = dM + (size_t) t * K;
        S_IVDEP
        for (int k = 0; k < K; k++) {
            float r[4][2];
            for (int b = 0; b < 2; b++) {
                float y0 = pd[b][k], y1 = pd[2 + b][k];
                r[0][b] = y0;
                r[1][b] = y0 + y1;
                r[2][b] = y0 - y1;
                r[3][b] = -y1;
            }
            for (int i = 0; i < 4; i++) {
                o[(size_t) (i * 4 + 0) * plane + k] = r[i][0];
                o[(size_t) (i * 4 + 1) * plane + k] = r[i][0] + r[i][1];
                o[(size_t) (i * 4 + 2) * plane + k] = r[i][0] - r[i][1];
                o[(size_t) (i * 4 + 3) * plane + k] = -r[i][1];
            }
        }
    }
}

S_DISPATCH (static, s_wino_dout,
            (float *dM, const float *dout, const nn_conv_shape_t *s, int t0, int T, int r0,
             int r1, float *zero),
            (dM, dout, s, t0, T, r0, r1, zero))

//  din's window pixels of tiles [t0, t0 + T) += B dV B^T (dV (16, T, c));
//  the pixels outside the image go to sink.
S_BODY void
s_wino_din_body (float *din, const float *dV, const nn_conv_shape_t *s, int t0, int T,
                 float *sink)
{
    int C = s->c;
    size_t plane = (size_t) T * C;
    for (int t = 0; t < T; t++) {
        const float *cpx[16];
        float *px[16];
        s_window (cpx, din, s, t0 + t, sink);
        memcpy (px, cpx, sizeof px);
        const float *m = dV + (size_t) t * C;
        S_IVDEP
        for (int c = 0; c < C; c++) {
            float q[4][4];
            for (int j = 0; j < 4; j++) {
                float v0 = m[(size_t) j * plane + c], v1 = m[(size_t) (4 + j) * plane + c];
                float v2 = m[(size_t) (8 + j) * plane + c], v3 = m[(size_t) (12 + j) * plane + c];
                q[0][j] = v0;
                q[1][j] = v1 - v2 + v3;
                q[2][j] = v1 + v2 - v0;
                q[3][j] = -v3;
            }
            for (int u = 0; u < 4; u++) {
                px[u * 4 + 0][c] += q[u][0];
                px[u * 4 + 1][c] += q[u][1] - q[u][2] + q[u][3];
                px[u * 4 + 2][c] += q[u][1] + q[u][2] - q[u][0];
                px[u * 4 + 3][c] -= q[u][3];
            }
        }
    }
}

S_DISPATCH (static, s_wino_din,
            (float *din, const float *dV, const nn_conv_shape_t *s, int t0, int T,
             float *sink),
            (din, dV, s, t0, T, sink))

//  U (16, k, c) = G g G^T of every (k, c) pair's 3x3 taps g, w (k, 3, 3, c):
//  G's rows (1 0 0), (.5 .5 .5), (.5 -.5 .5), (0 0 1), down then across.
S_BODY void
s_wino_weights_body (float *U, const float *w, int K, int C)
{
    size_t plane = (size_t) K * C;
    for (int k = 0; k < K; k++) {
        const float *wk = w + (size_t) k * 9 * C;
        float *u = U + (size_t) k * C;
        S_IVDEP
        for (int c = 0; c < C; c++) {
            float t[4][3];
            for (int b = 0; b < 3; b++) {
                float g0 = wk[(size_t) b * C + c], g1 = wk[(size_t) (3 + b) * C + c];
                float g2 = wk[(size_t) (6 + b) * C + c];
                t[0][b] = g0;
                t[1][b] = 0.5f * (g0 + g1 + g2);
                t[2][b] = 0.5f * (g0 - g1 + g2);
                t[3][b] = g2;
            }
            for (int i = 0; i < 4; i++) {
                u[(size_t) (i * 4 + 0) * plane + c] = t[i][0];
                u[(size_t) (i * 4 + 1) * plane + c] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                u[(size_t) (i * 4 + 2) * plane + c] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                u[(size_t) (i * 4 + 3) * plane + c] = t[i][2];
            }
        }
    }
}

S_DISPATCH (static, s_wino_weights, (float *U, const float *w, int K, int C), (U, w, K, C))

//  dw (k, 3, 3, c) += G^T dU G of every (k, c) pair, dU (16, k, c).
S_BODY void
s_wino_dweights_body (float *dw, const float *dU, int K, int C)
{
    size_t plane = (size_t) K * C;
    for (int k = 0; k < K; k++) {
        const float *u = dU + (size_t) k * C;
        float *d = dw + (size_t) k * 9 * C;
        S_IVDEP
        for (int c = 0; c < C; c++) {
            float s[4][3];
            for (int i = 0; i < 4; i++) {
                const float *ui = u + (size_t) i * 4 * plane + c;
                float d0 = ui[0], d1 = ui[plane], d2 = ui[2 * plane], d3 = ui[3 * plane];
                s[i][0] = d0 + 0.5f * (d1 + d2);
                s[i][1] = 0.5f * (d1 - d2);
                s[i][2] = 0.5f * (d1 + d2) + d3;
            }
            for (int b = 0; b < 3; b++) {
                d[(size_t) b * C + c] += s[0][b] + 0.5f * (s[1][b] + s[2][b]);
                d[(size_t) (3 + b) * C + c] += 0.5f * (s[1][b] - s[2][b]);
                d[(size_t) (6 + b) * C + c] += 0.5f * (s[1][b] + s[2][b]) + s[3][b];
            }
        }
    }
}

S_DISPATCH (static, s_wino_dweights, (float *dw, const float *dU, int K, int C), (dw, dU, K, C))

//  c (m, n) = a (m, J) . b (J, n), rows lda, ldb and n apart: our tile
//  where it beat OpenBLAS (which packs both operands of every product;
//  these are small, J a channel count), else OpenBLAS. Measured per call
//  on the Intel Xeon: the AVX-512 tile won at n 64-512 (VGG11's input
//  gradient on 4x4 images: 14.2 ms against 19.4) and lost at n 32 (VGG5's
//  conv2: 0.83 against 0.72); the AVX2 tile won at n 32-64 (VGG5's conv2
//  and conv3 forward and input gradient: 20-25% less time) and lost at n
//  128-512 (VGG11's 512 -> 512, 4x4: 25.5 against 21.3). NEON: not
//  measured, OpenBLAS.
static void
s_product (float *c, const float *a, size_t lda, size_t as, const float *b, int ldb, int m,
           int n, int J, bool beta)
{
    nn_isa_t isa = nn_isa_active ();
    bool own = (isa == NN_ISA_AVX512 && n >= 64) || (isa == NN_ISA_AVX2 && n <= 64);
    if (own && nn_tile_fits (n, J))
        nn_tile_gemm (c, (size_t) n, a, lda, as, b, (size_t) ldb, m, n, J, beta);
    else if (as == 1)
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, J, 1.0f, a, (int) lda, b,
                     ldb, beta ? 1.0f : 0.0f, c, n);
    else
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, m, n, J, 1.0f, a, (int) as, b,
                     ldb, beta ? 1.0f : 0.0f, c, n);
}

//  Where each part of a chunk sits in scratch.
typedef struct {
    float *V, *M, *U, *temp, *zero, *sink;
    int chunk;
} s_parts_t;

static s_parts_t
s_parts (float *scratch, const nn_conv_shape_t *s, int total)
{
    s_parts_t p;
    p.chunk = s_chunk_tiles (s, total);
    size_t T = (size_t) p.chunk, C = (size_t) s->c, K = (size_t) s->k;
    size_t row = C > K ? C : K;
    p.U = scratch;
    p.temp = p.U + 16 * K * C;
    p.V = p.temp + K * C;
    p.M = p.V + 16 * T * C;
    p.zero = p.M + 16 * T * K;
    p.sink = p.zero + row;
    memset (p.zero, 0, sizeof (float) * row);
    return p;
}

void
nn_wino_forward_rows (float *out, const float *in, const float *w, const float *b,
                      const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    int t0, t1, C = s->c, K = s->k;
    s_tile_range (s, r0, r1, &t0, &t1);
    s_parts_t p = s_parts (scratch, s, t1 - t0);
    //  U_xi^T (c, k) for each xi when the 16 planes fit in L2: OpenBLAS's
    //  NN product ran these shapes faster than NT on U_xi (VGG5's 64 -> 64
    //  at 7x7, batch 25: 0.43 ms against 0.59). VGG11's 512 x 512 planes
    //  (16 MiB) cost more to transpose than NT loses (4x4 images, batch 50:
    //  22.3 ms against 17.3).
    s_wino_weights (p.U, w, K, C);
    bool nn = (size_t) K * C <= S_TRANSPOSE_MAX;
    for (int xi = 0; nn && xi < 16; xi++) {
        float *u = p.U + (size_t) xi * K * C;
        nn_conv_transpose (p.temp, (size_t) K, u, (size_t) C, K, C, false);
        memcpy (u, p.temp, sizeof (float) * K * C);
    }
    for (int t = t0; t < t1; t += p.chunk) {
        int T = t1 - t < p.chunk ? t1 - t : p.chunk;
        s_wino_input (p.V, in, s, t, T, p.zero);
        for (int xi = 0; xi < 16; xi++) {
            //  M_xi (T, k) = V_xi (T, c) . U_xi^T (c, k)
            const float *v = p.V + (size_t) xi * T * C, *u = p.U + (size_t) xi * K * C;
            float *m = p.M + (size_t) xi * T * K;
            if (nn)
                s_product (m, v, (size_t) C, 1, u, K, T, K, C, false);
            else
                cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, T, K, C, 1.0f, v, C, u, C,
                             0.0f, m, K);
        }
        //  The zero row doubles as a missing bias: K floats of zeros.
        s_wino_output (out, p.M, b ? b : p.zero, s, t, T, r0, r1, p.sink);
    }
}

void
nn_wino_backward_weights_rows (float *dw, const float *dout, const float *in,
                               const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    int t0, t1, C = s->c, K = s->k;
    s_tile_range (s, r0, r1, &t0, &t1);
    s_parts_t p = s_parts (scratch, s, t1 - t0);
    for (int t = t0; t < t1; t += p.chunk) {
        int T = t1 - t < p.chunk ? t1 - t : p.chunk;
        s_wino_input (p.V, in, s, t, T, p.zero);
        s_wino_dout (p.M, dout, s, t, T, r0, r1, p.zero);
        for (int xi = 0; xi < 16; xi++)
            //  dU_xi (k, c) (+)= dM_xi^T (k, T) . V_xi (T, c)
            s_product (p.U + (size_t) xi * K * C, p.M + (size_t) xi * T * K, 1, (size_t) K,
                       p.V + (size_t) xi * T * C, C, K, C, T, t > t0);
    }
    s_wino_dweights (dw, p.U, K, C);
}

void
nn_wino_backward_input (float *din, const float *dout, const float *w,
                        const nn_conv_shape_t *s, float *scratch)
{
    int C = s->c, K = s->k, total = s->n * s_tiles_down (s) * s_tiles_across (s);
    int rows = s->n * s->p * s->q;
    s_parts_t p = s_parts (scratch, s, total);
    memset (din, 0, sizeof (float) * s->n * s->h * s->w * C);
    s_wino_weights (p.U, w, K, C);
    for (int t = 0; t < total; t += p.chunk) {
        int T = total - t < p.chunk ? total - t : p.chunk;
        s_wino_dout (p.M, dout, s, t, T, 0, rows, p.zero);
        for (int xi = 0; xi < 16; xi++)
            //  dV_xi (T, c) = dM_xi (T, k) . U_xi (k, c)
            s_product (p.V + (size_t) xi * T * C, p.M + (size_t) xi * T * K, (size_t) K, 1,
                       p.U + (size_t) xi * K * C, C, T, C, K, false);
        s_wino_din (din, p.V, s, t, T, p.sink);
    }
}
