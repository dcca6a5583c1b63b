/*  nn_kernels_wino.c: dense 3x3 stride-1 convolutions (NHWC) by Winograd's
    minimal filtering F(m x m, 3x3), m 2 or 4 (Lavin and Gray, "Fast
    Algorithms for Convolutional Neural Networks", CVPR 2016): each m x m
    block of output pixels (a tile) costs (m+2)^2 multiply-adds per (input,
    output) channel pair, per output pixel 4 for F(2x2) and 2.25 for
    F(4x4) where im2col's GEMM costs 9, more where a tile runs past the
    image (7x7 images: 5.2 and 2.9). Forward, weight gradient and input
    gradient all run as (m+2)^2 GEMMs (our register tile or OpenBLAS,
    s_product) over planes of transformed tiles:

        forward    Y  = A^T [ sum_c U[k,c] . V[c] ] A          U = G g G^T,  V = B^T d B
        backward   dM = A dY A^T;  dV[c] = sum_k U[k,c] . dM[k];  dd = B dV B^T
                   dU[k,c] = sum_tiles dM[k] . V[c];  dg = G^T dU G

    (. elementwise over the transformed tile; its elements xi are
    independent, so each is one GEMM over channels). The tiles and the
    transforms are nn_kernels_wino.h's and nn_kernels_wino_xform.c's. The
    rows kernels take the tile rows that hold their output pixels and use
    only those pixels (forward: write them; weight gradient: zero dY
    elsewhere), so pieces cut mid-tile add up like the im2col kernels'
    pieces, whichever m each piece runs.

    Scratch: U (planes, k, c), the weights transformed once per call (or
    dU, the weight gradient's, summed over the chunks and folded into dw
    once at the end), a (k, c) temporary, then one chunk of T tiles: V
    (planes, T, c), M (planes, T, k), then a zero row and a sink row (max
    (c, k) floats each: the pixels outside the image read the one and
    write the other); nn_wino_scratch_count sizes it for the larger of
    F(2x2)'s and F(4x4)'s. */
#include "nn_kernels_conv.h"

#include "nn_kernels_gemm.h"
#include "nn_kernels_simd.h"
#include "nn_kernels_wino.h"

#include <cblas.h>
#include <string.h>

//  V and M of one chunk: 512 KiB, a quarter of one core's L2 here (2 MiB
//  chunks ran VGG5's weight and input gradients 25-35% slower, 256 KiB
//  ones its forward); at least 64 tiles, so that each GEMM (which packs
//  its U anew) has rows enough.
#define S_CHUNK_BYTES (512 * 1024)
#define S_CHUNK_MIN 64

//  Calls over fewer tiles take im2col: (m+2)^2 small GEMMs lost to one
//  over 4x the rows (VGG11's 512 -> 512 on 2x2 images, 13 images, 13
//  tiles: 3.2 ms forward against 2.1; 25 tiles about even, 50 tiles 5.2
//  against 8.2). F(4x4) needs as many of its own tiles (its GEMMs have a
//  row per tile too), else F(2x2) runs.
#define S_TILES_MIN 32

//  F(4x4) only where both sides have at most this many channels. Its
//  transforms' coefficients (B^T's 4s and 5s, A^T's 8s) scale the GEMMs'
//  rounding, which grows with the channels summed (c forward, k input
//  gradient): on random data its worst error, relative to 1 + |exact|, was
//  5e-5 at 32 channels, 1.4e-4 at 64, 2.6e-4 at 128 and 7.5e-4 at 256
//  (F(2x2): 1.1e-5 at 256). In whole models the larger rounding tips more
//  ReLU and max-pool decisions that sit within rounding of their kink:
//  with F(4x4) up to 128 channels (its 64 -> 128 on 16x16 then took it),
//  VGG11 at 32x32 matched PyTorch on 1 of 8 seeds of tests/torch_parity.py
//  at avx512, against 4 of 8 with F(2x2) only.
#define S_WINO4_CHANNELS 64

//  The forward transposes U when its planes (k * c floats each) fit in
//  1 MiB, half this core's L2.
#define S_TRANSPOSE_BYTES (1024 * 1024)

static int
s_chunk_tiles (const nn_wino_tiles_t *tl, int total)
{
    const nn_conv_shape_t *s = tl->s;
    int chunk = (int) (S_CHUNK_BYTES / (sizeof (float) * tl->planes * (size_t) (s->c + s->k)));
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

static size_t
s_scratch_count (const nn_conv_shape_t *s, int m)
{
    nn_wino_tiles_t tl = s_wino_tiles (s, m);
    int T = s_chunk_tiles (&tl, s->n * tl.down * tl.across), C = s->c, K = s->k;
    size_t P = (size_t) tl.planes, row = (size_t) (C > K ? C : K);
    return P * (s_wino_plane (T, C) + s_wino_plane (T, K) + s_wino_plane (K, C))
           + (size_t) K * C + 2 * row;
}

size_t
nn_wino_scratch_count (const nn_conv_shape_t *s)
{
    size_t two = s_scratch_count (s, 2), four = s_scratch_count (s, 4);
    return two > four ? two : four;
}

//  The tiles holding output pixels [r0, r1): whole tile rows.
static void
s_tile_range (const nn_wino_tiles_t *tl, int r0, int r1, int *t0, int *t1)
{
    const nn_conv_shape_t *s = tl->s;
    int pq = s->p * s->q, last = r1 - 1;
    *t0 = (r0 / pq * tl->down + r0 % pq / s->q / tl->m) * tl->across;
    *t1 = (last / pq * tl->down + last % pq / s->q / tl->m + 1) * tl->across;
}

static int
s_tile_count (const nn_conv_shape_t *s, int m, int r0, int r1)
{
    nn_wino_tiles_t tl = s_wino_tiles (s, m);
    int t0, t1;
    s_tile_range (&tl, r0, r1, &t0, &t1);
    return t1 - t0;
}

int
nn_wino_tile (const nn_conv_shape_t *s, int r0, int r1)
{
    if (!nn_wino_takes (s) || r1 <= r0 || s_tile_count (s, 2, r0, r1) < S_TILES_MIN)
        return 0;
    if (s->c > S_WINO4_CHANNELS || s->k > S_WINO4_CHANNELS)
        return 2;
    //  Multiply-adds per image: (m+2)^2 per tile, the tiles past the
    //  image's edge included (7x7: 16 x 16 against 4 x 36).
    nn_wino_tiles_t two = s_wino_tiles (s, 2), four = s_wino_tiles (s, 4);
    long cost2 = (long) two.down * two.across * two.planes;
    long cost4 = (long) four.down * four.across * four.planes;
    if (cost4 < cost2 && s_tile_count (s, 4, r0, r1) >= S_TILES_MIN)
        return 4;
    return 2;
}

bool
nn_wino_pays (const nn_conv_shape_t *s, int r0, int r1)
{
    return nn_wino_tile (s, r0, r1) != 0;
}

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
    size_t pu;      //  U's plane xi: xi * pu floats on
    int chunk;
} s_parts_t;

static s_parts_t
s_parts (float *scratch, const nn_wino_tiles_t *tl, int total)
{
    s_parts_t p;
    p.chunk = s_chunk_tiles (tl, total);
    int T = p.chunk, C = tl->s->c, K = tl->s->k;
    size_t P = (size_t) tl->planes, row = (size_t) (C > K ? C : K);
    p.pu = s_wino_plane (K, C);
    p.U = scratch;
    p.temp = p.U + P * p.pu;
    p.V = p.temp + (size_t) K * C;
    p.M = p.V + P * s_wino_plane (T, C);
    p.zero = p.M + P * s_wino_plane (T, K);
    p.sink = p.zero + row;
    memset (p.zero, 0, sizeof (float) * row);
    return p;
}

void
nn_wino_forward_rows (float *out, const float *in, const float *w, const float *b,
                      const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    nn_wino_tiles_t tl = s_wino_tiles (s, nn_wino_tile (s, r0, r1));
    int t0, t1, C = s->c, K = s->k, P = tl.planes;
    s_tile_range (&tl, r0, r1, &t0, &t1);
    s_parts_t p = s_parts (scratch, &tl, t1 - t0);
    //  U_xi^T (c, k) for each xi when the planes fit in L2: OpenBLAS's
    //  NN product ran these shapes faster than NT on U_xi (VGG5's 64 -> 64
    //  at 7x7, batch 25: 0.43 ms against 0.59). VGG11's 512 x 512 planes
    //  (16 MiB) cost more to transpose than NT loses (4x4 images, batch 50:
    //  22.3 ms against 17.3).
    nn_wino_weights (p.U, w, tl.m, K, C);
    bool nn = sizeof (float) * P * K * C <= S_TRANSPOSE_BYTES;
    for (int xi = 0; nn && xi < P; xi++) {
        float *u = p.U + xi * p.pu;
        nn_conv_transpose (p.temp, (size_t) K, u, (size_t) C, K, C, false);
        memcpy (u, p.temp, sizeof (float) * K * C);
    }
    for (int t = t0; t < t1; t += p.chunk) {
        int T = t1 - t < p.chunk ? t1 - t : p.chunk;
        size_t pv = s_wino_plane (T, C), pm = s_wino_plane (T, K);
        nn_wino_input (p.V, in, &tl, t, T, p.zero);
        for (int xi = 0; xi < P; xi++) {
            //  M_xi (T, k) = V_xi (T, c) . U_xi^T (c, k)
            const float *v = p.V + xi * pv, *u = p.U + xi * p.pu;
            float *m = p.M + xi * pm;
            if (nn)
                s_product (m, v, (size_t) C, 1, u, K, T, K, C, false);
            else
                cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, T, K, C, 1.0f, v, C, u, C,
                             0.0f, m, K);
        }
        //  The zero row doubles as a missing bias: K floats of zeros.
        nn_wino_output (out, p.M, b ? b : p.zero, &tl, t, T, r0, r1, p.sink);
    }
}

void
nn_wino_backward_weights_rows (float *dw, const float *dout, const float *in,
                               const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    nn_wino_tiles_t tl = s_wino_tiles (s, nn_wino_tile (s, r0, r1));
    int t0, t1, C = s->c, K = s->k;
    s_tile_range (&tl, r0, r1, &t0, &t1);
    s_parts_t p = s_parts (scratch, &tl, t1 - t0);
    for (int t = t0; t < t1; t += p.chunk) {
        int T = t1 - t < p.chunk ? t1 - t : p.chunk;
        nn_wino_input (p.V, in, &tl, t, T, p.zero);
        nn_wino_dout (p.M, dout, &tl, t, T, r0, r1, p.zero);
        size_t pv = s_wino_plane (T, C), pm = s_wino_plane (T, K);
        for (int xi = 0; xi < tl.planes; xi++)
            //  dU_xi (k, c) (+)= dM_xi^T (k, T) . V_xi (T, c)
            s_product (p.U + xi * p.pu, p.M + xi * pm, 1, (size_t) K, p.V + xi * pv, C,
                       K, C, T, t > t0);
    }
    nn_wino_dweights (dw, p.U, tl.m, K, C);
}

void
nn_wino_backward_input (float *din, const float *dout, const float *w,
                        const nn_conv_shape_t *s, float *scratch)
{
    int rows = s->n * s->p * s->q, C = s->c, K = s->k;
    nn_wino_tiles_t tl = s_wino_tiles (s, nn_wino_tile (s, 0, rows));
    int total = s->n * tl.down * tl.across;
    s_parts_t p = s_parts (scratch, &tl, total);
    memset (din, 0, sizeof (float) * s->n * s->h * s->w * C);
    nn_wino_weights (p.U, w, tl.m, K, C);
    for (int t = 0; t < total; t += p.chunk) {
        int T = total - t < p.chunk ? total - t : p.chunk;
        nn_wino_dout (p.M, dout, &tl, t, T, 0, rows, p.zero);
        size_t pv = s_wino_plane (T, C), pm = s_wino_plane (T, K);
        for (int xi = 0; xi < tl.planes; xi++)
            //  dV_xi (T, c) = dM_xi (T, k) . U_xi (k, c)
            s_product (p.V + xi * pv, p.M + xi * pm, (size_t) K, 1, p.U + xi * p.pu, C, T,
                       C, K, false);
        nn_wino_din (din, p.V, &tl, t, T, p.sink);
    }
}
