/*  nn_kernels.c: BLAS-backed and elementwise kernels (NHWC). */
#include "nn_kernels.h"

#include "nn_isa.h"

#include <assert.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

//  gcc's "no loop-carried dependence" hint; clang has no such pragma (and
//  -Werror would stop it on an unknown one).
#if defined (__GNUC__) && !defined (__clang__)
#   define S_IVDEP _Pragma ("GCC ivdep")
#else
#   define S_IVDEP
#endif

//  Scratch for one chunk of im2col rows: big enough to feed sgemm well,
//  small enough to stay in L2 (2 MiB per core here).
#define S_COLS_TARGET (384 * 1024)

//  Convolutions whose patch (r*s*c) is at most this run as a direct loop:
//  sgemm with an inner dimension of 9 (a 3x3 kernel on one channel) spends
//  its time packing, not multiplying (6.5 GFLOP/s against 55 for conv2).
#define S_DIRECT_PATCH 32

//  Elementwise kernels are compiled twice, for AVX2+FMA (x86-64-v3) and for
//  the baseline, from one body: S_BODY marks the body (always inlined into
//  both), S_DISPATCH defines NAME_avx2, NAME_generic and NAME, which calls
//  the one nn_isa_active () allows. One binary for every x86-64 host, and
//  PIPELEARN_ISA=generic can turn the AVX2 path off (GCC's target_clones
//  picks at load time with no way to say no). LINK is static or extern.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
static inline bool
s_isa_avx2 (void)
{
    nn_isa_t isa = nn_isa_active ();
    return isa == NN_ISA_AVX2 || isa == NN_ISA_AVX512;
}
#   define S_BODY static inline __attribute__ ((always_inline))
#   define S_DISPATCH(LINK, NAME, PARAMS, ARGS)                                 \
    __attribute__ ((target ("arch=x86-64-v3"))) static void                    \
    NAME##_avx2 PARAMS { NAME##_body ARGS; }                                   \
    static void NAME##_generic PARAMS { NAME##_body ARGS; }                    \
    LINK void NAME PARAMS                                                      \
    {                                                                          \
        if (s_isa_avx2 ())                                                     \
            NAME##_avx2 ARGS;                                                  \
        else                                                                   \
            NAME##_generic ARGS;                                               \
    }
#else
#   define S_BODY static inline
#   define S_DISPATCH(LINK, NAME, PARAMS, ARGS)                                 \
    LINK void NAME PARAMS { NAME##_body ARGS; }
#endif

//  Our own sgemm for the convolutions' shapes on AVX-512 CPUs: a 6 x 64
//  register tile of 24 accumulators ran at 200-220 GFLOP/s on one core here
//  (AMD Zen 5), against 95-100 for OpenBLAS with OPENBLAS_CORETYPE=Haswell
//  and 187-190 with its own Cooperlake kernels. Used for every conv gemm
//  whose output width is a multiple of 16 when the CPU has AVX-512 and
//  PIPELEARN_ISA allows it (nn_isa.h; valgrind hides AVX-512: the OpenBLAS
//  path runs there); nothing else changes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#   define S_GEMM16 1
typedef float s_v16 __attribute__ ((vector_size (64), aligned (4)));
#   define s_v16_load(p) (*(const s_v16 *) (p))
#   define s_v16_store(p, v) (*(s_v16 *) (p) = (v))

//  One register tile: c (mr, 16*nv) (+)= a (mr, J) . b (J, 16*nv), where
//  a(r, j) = a[r * lda + j * as] (as = 1: row-major a; lda = 1: a^T),
//  b rows ldb apart, c rows ldc apart; beta: add to c, else overwrite.
//  With mr and nv constants the accumulators stay in registers. The sum
//  runs in blocks of S_GEMM16_KC terms from zero, each added to c: one
//  chain over a 576-long patch lost accuracy (1e-5 relative) that
//  OpenBLAS's blocked sums keep.
#define S_GEMM16_KC 128
static inline __attribute__ ((always_inline)) void
s_tile16 (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
          size_t ldb, int J, int mr, int nv, bool beta)
{
    for (int j0 = 0; j0 < J; j0 += S_GEMM16_KC) {
        int j1 = J - j0 < S_GEMM16_KC ? J : j0 + S_GEMM16_KC;
        s_v16 acc[6][4];
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < nv; v++)
                acc[r][v] = (s_v16) { 0 };
        for (int j = j0; j < j1; j++) {
            s_v16 bv[4];
            for (int v = 0; v < nv; v++)
                bv[v] = s_v16_load (b + j * ldb + 16 * v);
            for (int r = 0; r < mr; r++) {
                s_v16 x = (s_v16) { 0 } + a[r * lda + j * as];
                for (int v = 0; v < nv; v++)
                    acc[r][v] += x * bv[v];
            }
        }
        bool add = beta || j0 > 0;
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < nv; v++) {
                float *o = c + r * ldc + 16 * v;
                s_v16_store (o, add ? s_v16_load (o) + acc[r][v] : acc[r][v]);
            }
    }
}

//  mr rows of c (n wide): 64-wide tiles, then 16-wide ones.
static inline __attribute__ ((always_inline)) void
s_gemm16_rows (float *c, size_t ldc, const float *a, size_t lda, size_t as,
               const float *b, size_t ldb, int mr, int n, int J, bool beta)
{
    int j = 0;
    for (; j + 64 <= n; j += 64)
        s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 4, beta);
    for (; j < n; j += 16)
        s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, beta);
}

//  c (m, n) (+)= a (m, J) . b (J, n) with a as in s_tile16; n % 16 == 0.
__attribute__ ((target ("arch=x86-64-v4"))) static void
s_gemm16 (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
          size_t ldb, int m, int n, int J, bool beta)
{
    int i = 0;
    for (; i + 6 <= m; i += 6)
        s_gemm16_rows (c + i * ldc, ldc, a + i * lda, lda, as, b, ldb, 6, n, J, beta);
    for (; i < m; i++)
        s_gemm16_rows (c + i * ldc, ldc, a + i * lda, lda, as, b, ldb, 1, n, J, beta);
}

static bool
s_gemm16_ok (int n)
{
    return n % 16 == 0 && nn_isa_active () == NN_ISA_AVX512;
}
#else
#   define S_GEMM16 0
static bool
s_gemm16_ok (int n)
{
    return false;
}
static void
s_gemm16 (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
          size_t ldb, int m, int n, int J, bool beta)
{
}
#endif

int
nn_conv_shape_finish (nn_conv_shape_t *s)
{
    if (s->stride < 1 || s->pad < 0 || s->r < 1 || s->s < 1)
        return -1;
    int hp = s->h + 2 * s->pad - s->r;
    int wp = s->w + 2 * s->pad - s->s;
    if (hp < 0 || wp < 0)
        return -1;
    s->p = hp / s->stride + 1;
    s->q = wp / s->stride + 1;
    return 0;
}

//  Rows of im2col (each `row_len` floats) per chunk: big enough to feed
//  sgemm well, small enough to stay in L2; at most `rows`.
static int
s_chunk_rows (size_t row_len, size_t rows)
{
    size_t chunk = S_COLS_TARGET / (row_len ? row_len : 1);
    if (chunk < 1)
        chunk = 1;
    return (int) (chunk < rows ? chunk : rows);
}

size_t
nn_conv2d_scratch_count (const nn_conv_shape_t *s)
{
    size_t patch = (size_t) s->r * s->s * s->c;
    size_t cols = (size_t) s_chunk_rows (patch, (size_t) s->n * s->p * s->q) * patch;
    //  s_gemm16 adds w transposed (forward) or dw transposed (backward).
    cols += patch * s->k;
    size_t direct = patch * s->k + 2 * S_DIRECT_PATCH;
    return cols > direct ? cols : direct;
}

//  Gather the (r, s, c) patch of output pixel (p, q) of one image.
static inline void
s_patch (float *patch, const float *in, const nn_conv_shape_t *s, int p, int q)
{
    int j = 0;
    for (int r = 0; r < s->r; r++) {
        int ih = p * s->stride - s->pad + r;
        for (int t = 0; t < s->s; t++) {
            int iw = q * s->stride - s->pad + t;
            bool inside = ih >= 0 && ih < s->h && iw >= 0 && iw < s->w;
            const float *src = in + ((size_t) ih * s->w + iw) * s->c;
            for (int c = 0; c < s->c; c++)
                patch[j++] = inside ? src[c] : 0.0f;
        }
    }
}

//  s_patch, with the common case (the whole window inside the image)
//  copied row by row without bounds checks.
static inline void
s_patch_fast (float *patch, const float *in, const nn_conv_shape_t *s, int p, int q)
{
    int ih0 = p * s->stride - s->pad, iw0 = q * s->stride - s->pad;
    if (ih0 < 0 || iw0 < 0 || ih0 + s->r > s->h || iw0 + s->s > s->w) {
        s_patch (patch, in, s, p, q);
        return;
    }
    size_t run = (size_t) s->s * s->c;
    for (int r = 0; r < s->r; r++) {
        const float *src = in + ((size_t) (ih0 + r) * s->w + iw0) * s->c;
        for (size_t i = 0; i < run; i++)
            patch[r * run + i] = src[i];
    }
}

//  Output row g of a batch (pixel (p, q) of image n), and the next one.
static inline void
s_pixel (const nn_conv_shape_t *s, int g, int *n, int *p, int *q)
{
    int pq = s->p * s->q;
    *n = g / pq;
    *p = g % pq / s->q;
    *q = g % s->q;
}

static inline void
s_pixel_next (const nn_conv_shape_t *s, int *n, int *p, int *q)
{
    if (++*q < s->q)
        return;
    *q = 0;
    if (++*p < s->p)
        return;
    *p = 0;
    ++*n;
}

//  Direct convolution for small patches: per output pixel, out[k] =
//  b[k] + sum_j patch[j] * wt[j][k], with the K outputs held in 8-wide
//  vector registers (GCC vector extensions: AVX in the x86-64-v3 clone).
//  wt (scratch) is w transposed to (r*s*c, k). Needs k % 8 == 0 and
//  k <= S_DIRECT_KMAX.
#define S_DIRECT_KMAX 64
typedef float s_v8 __attribute__ ((vector_size (32), aligned (4)));

static bool
s_conv_direct (const nn_conv_shape_t *s)
{
    return s->r * s->s * s->c <= S_DIRECT_PATCH && s->k % 8 == 0 && s->k <= S_DIRECT_KMAX;
}

//  Unaligned 8-float load and store (macros: a function returning a
//  vector would change ABI between the two clones).
#define s_v8_load(p) (*(const s_v8 *) (p))
#define s_v8_store(p, v) (*(s_v8 *) (p) = (v))

S_BODY void
s_conv_direct_forward_body (float *out, const float *in, const float *w, const float *b,
                       const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    int K = s->k, J = s->r * s->s * s->c, V = K / 8;
    float *wt = scratch, *patch = scratch + (size_t) J * K;
    for (int k = 0; k < K; k++)
        for (int j = 0; j < J; j++)
            wt[(size_t) j * K + k] = w[(size_t) k * J + j];
    s_v8 bias[S_DIRECT_KMAX / 8];
    for (int v = 0; v < V; v++)
        bias[v] = b ? s_v8_load (b + 8 * v) : (s_v8) { 0 };
    size_t in_size = (size_t) s->h * s->w * s->c;
    float *patch2 = patch + S_DIRECT_PATCH;
    int n, p, q;
    s_pixel (s, r0, &n, &p, &q);
    //  Two output pixels at a time: two independent accumulation chains
    //  hide the add latency.
    for (int g = r0; g < r1; g += 2) {
        bool pair = g + 1 < r1;
        s_patch_fast (patch, in + n * in_size, s, p, q);
        s_pixel_next (s, &n, &p, &q);
        if (pair) {
            s_patch_fast (patch2, in + n * in_size, s, p, q);
            s_pixel_next (s, &n, &p, &q);
        }
        s_v8 a0[S_DIRECT_KMAX / 8], a1[S_DIRECT_KMAX / 8];
        for (int v = 0; v < V; v++)
            a0[v] = a1[v] = bias[v];
        for (int j = 0; j < J; j++) {
            s_v8 x0 = (s_v8) { 0 } + patch[j];
            s_v8 x1 = (s_v8) { 0 } + (pair ? patch2[j] : 0.0f);
            const float *wr = wt + (size_t) j * K;
            for (int v = 0; v < V; v++) {
                s_v8 wv = s_v8_load (wr + 8 * v);
                a0[v] += x0 * wv;
                a1[v] += x1 * wv;
            }
        }
        float *o = out + (size_t) g * K;
        for (int v = 0; v < V; v++)
            s_v8_store (o + 8 * v, a0[v]);
        if (pair)
            for (int v = 0; v < V; v++)
                s_v8_store (o + K + 8 * v, a1[v]);
    }
}
S_DISPATCH (static, s_conv_direct_forward,
            (float *out, const float *in, const float *w, const float *b,
             const nn_conv_shape_t *s, int r0, int r1, float *scratch),
            (out, in, w, b, s, r0, r1, scratch))

S_BODY void
s_conv_direct_backward_weights_body (float *dw, float *db, const float *dout, const float *in,
                                const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    int K = s->k, J = s->r * s->s * s->c, V = K / 8;
    float *dwt = scratch, *patch = scratch + (size_t) J * K;
    memset (dwt, 0, sizeof (float) * (size_t) J * K);
    s_v8 dbias[S_DIRECT_KMAX / 8];
    for (int v = 0; v < V; v++)
        dbias[v] = (s_v8) { 0 };
    size_t in_size = (size_t) s->h * s->w * s->c;
    int n, p, q;
    s_pixel (s, r0, &n, &p, &q);
    for (int g = r0; g < r1; g++) {
        const float *d = dout + (size_t) g * K;
        s_v8 gv[S_DIRECT_KMAX / 8];
        for (int v = 0; v < V; v++) {
            gv[v] = s_v8_load (d + 8 * v);
            dbias[v] += gv[v];
        }
        s_patch_fast (patch, in + n * in_size, s, p, q);
        s_pixel_next (s, &n, &p, &q);
        for (int j = 0; j < J; j++) {
            s_v8 x = (s_v8) { 0 } + patch[j];
            float *dr = dwt + (size_t) j * K;
            for (int v = 0; v < V; v++)
                s_v8_store (dr + 8 * v, s_v8_load (dr + 8 * v) + x * gv[v]);
        }
    }
    if (db)
        for (int v = 0; v < V; v++)
            for (int i = 0; i < 8; i++)
                db[8 * v + i] += dbias[v][i];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < J; j++)
            dw[(size_t) k * J + j] += dwt[(size_t) j * K + k];
}
S_DISPATCH (static, s_conv_direct_backward_weights,
            (float *dw, float *db, const float *dout, const float *in,
             const nn_conv_shape_t *s, int r0, int r1, float *scratch),
            (dw, db, dout, in, s, r0, r1, scratch))

//  Output rows [g0, g0 + rows) of the batch -> cols (rows, r*s*c), each
//  row laid out (r, s, c) like a weight row.
S_BODY void
s_im2col_rows_body (float *cols, const float *in, const nn_conv_shape_t *s, int g0, int rows)
{
    size_t row_len = (size_t) s->r * s->s * s->c;
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t run = sizeof (float) * s->s * s->c;
    int n, p, q;
    s_pixel (s, g0, &n, &p, &q);
    for (int i = 0; i < rows; i++, s_pixel_next (s, &n, &p, &q)) {
        float *row = cols + (size_t) i * row_len;
        const float *img = in + n * in_size;
        for (int r = 0; r < s->r; r++) {
            int ih = p * s->stride - s->pad + r;
            float *dst = row + (size_t) r * s->s * s->c;
            if (ih < 0 || ih >= s->h) {
                memset (dst, 0, run);
                continue;
            }
            int iw0 = q * s->stride - s->pad;
            if (iw0 >= 0 && iw0 + s->s <= s->w) {
                //  Whole kernel row inside: one contiguous run in NHWC.
                memcpy (dst, img + ((size_t) ih * s->w + iw0) * s->c, run);
                continue;
            }
            for (int k = 0; k < s->s; k++) {
                int iw = iw0 + k;
                if (iw < 0 || iw >= s->w)
                    memset (dst + k * s->c, 0, sizeof (float) * s->c);
                else
                    memcpy (dst + k * s->c, img + ((size_t) ih * s->w + iw) * s->c,
                            sizeof (float) * s->c);
            }
        }
    }
}
S_DISPATCH (static, s_im2col_rows,
            (float *cols, const float *in, const nn_conv_shape_t *s, int g0, int rows),
            (cols, in, s, g0, rows))

//  Adjoint of s_im2col_rows: din (the batch) += scatter of cols, output
//  rows [g0, g0 + rows).
S_BODY void
s_col2im_rows_add_body (float *din, const float *cols, const nn_conv_shape_t *s, int g0,
                   int rows)
{
    size_t row_len = (size_t) s->r * s->s * s->c;
    size_t in_size = (size_t) s->h * s->w * s->c;
    int n, p, q;
    s_pixel (s, g0, &n, &p, &q);
    for (int i = 0; i < rows; i++, s_pixel_next (s, &n, &p, &q)) {
        const float *row = cols + (size_t) i * row_len;
        float *img = din + n * in_size;
        for (int r = 0; r < s->r; r++) {
            int ih = p * s->stride - s->pad + r;
            if (ih < 0 || ih >= s->h)
                continue;
            for (int k = 0; k < s->s; k++) {
                int iw = q * s->stride - s->pad + k;
                if (iw < 0 || iw >= s->w)
                    continue;
                float *dst = img + ((size_t) ih * s->w + iw) * s->c;
                const float *src = row + ((size_t) r * s->s + k) * s->c;
                for (int c = 0; c < s->c; c++)
                    dst[c] += src[c];
            }
        }
    }
}
S_DISPATCH (static, s_col2im_rows_add,
            (float *din, const float *cols, const nn_conv_shape_t *s, int g0, int rows),
            (din, cols, s, g0, rows))

void
nn_conv2d_forward_rows (float *out, const float *in, const float *w, const float *b,
                        const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    if (s_conv_direct (s)) {
        s_conv_direct_forward (out, in, w, b, s, r0, r1, scratch);
        return;
    }
    int row_len = s->r * s->s * s->c, K = s->k;
    int chunk = s_chunk_rows ((size_t) row_len, (size_t) s->n * s->p * s->q);
    bool own = s_gemm16_ok (K);
    float *wt = scratch + (size_t) chunk * row_len;
    if (own)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < row_len; j++)
                wt[(size_t) j * K + k] = w[(size_t) k * row_len + j];
    for (int g = r0; g < r1; g += chunk) {
        int rows = r1 - g < chunk ? r1 - g : chunk;
        s_im2col_rows (scratch, in, s, g, rows);
        float *o = out + (size_t) g * K;
        float beta = 0.0f;
        if (b) {
            for (int i = 0; i < rows; i++)
                memcpy (o + (size_t) i * K, b, sizeof (float) * K);
            beta = 1.0f;
        }
        //  out (rows, k) = cols (rows, row_len) . w^T (row_len, k)
        if (own)
            s_gemm16 (o, K, scratch, row_len, 1, wt, K, rows, K, row_len, b != NULL);
        else
            cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, row_len,
                         1.0f, scratch, row_len, w, row_len, beta, o, K);
    }
}

void
nn_conv2d_backward_weights_rows (float *dw, float *db, const float *dout, const float *in,
                                 const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    if (s_conv_direct (s)) {
        s_conv_direct_backward_weights (dw, db, dout, in, s, r0, r1, scratch);
        return;
    }
    if (db)
        for (int g = r0; g < r1; g++) {
            const float *d = dout + (size_t) g * s->k;
            for (int k = 0; k < s->k; k++)
                db[k] += d[k];
        }
    int row_len = s->r * s->s * s->c, K = s->k;
    int chunk = s_chunk_rows ((size_t) row_len, (size_t) s->n * s->p * s->q);
    bool own = s_gemm16_ok (K);
    float *dwt = scratch + (size_t) chunk * row_len;
    if (own)
        memset (dwt, 0, sizeof (float) * row_len * K);
    for (int g = r0; g < r1; g += chunk) {
        int rows = r1 - g < chunk ? r1 - g : chunk;
        s_im2col_rows (scratch, in, s, g, rows);
        //  dw (k, row_len) += dout^T (k, rows) . cols (rows, row_len); ours
        //  makes dw^T (row_len, k) += cols^T . dout, k wide like its tiles.
        if (own)
            s_gemm16 (dwt, K, scratch, 1, row_len, dout + (size_t) g * K, K, row_len, K,
                      rows, true);
        else
            cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, K, row_len, rows,
                         1.0f, dout + (size_t) g * K, K, scratch, row_len, 1.0f, dw,
                         row_len);
    }
    if (own)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < row_len; j++)
                dw[(size_t) k * row_len + j] += dwt[(size_t) j * K + k];
}

void
nn_conv2d_backward_input (float *din, const float *dout, const float *w,
                          const nn_conv_shape_t *s, float *scratch)
{
    int row_len = s->r * s->s * s->c, total = s->n * s->p * s->q;
    int chunk = s_chunk_rows ((size_t) row_len, (size_t) total);
    memset (din, 0, sizeof (float) * s->n * s->h * s->w * s->c);
    for (int g = 0; g < total; g += chunk) {
        int rows = total - g < chunk ? total - g : chunk;
        //  dcols (rows, row_len) = dout (rows, k) . w (k, row_len)
        if (s_gemm16_ok (row_len))
            s_gemm16 (scratch, row_len, dout + (size_t) g * s->k, s->k, 1, w, row_len, rows,
                      row_len, s->k, false);
        else
            cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, row_len, s->k,
                         1.0f, dout + (size_t) g * s->k, s->k, w, row_len, 0.0f, scratch,
                         row_len);
        s_col2im_rows_add (din, scratch, s, g, rows);
    }
}

void
nn_conv2d_forward (float *out, const float *in, const float *w, const float *b,
                   const nn_conv_shape_t *s, float *scratch)
{
    nn_conv2d_forward_rows (out, in, w, b, s, 0, s->n * s->p * s->q, scratch);
}

void
nn_conv2d_backward (float *din, float *dw, float *db, const float *dout,
                    const float *in, const float *w, const nn_conv_shape_t *s,
                    float *scratch)
{
    nn_conv2d_backward_weights_rows (dw, db, dout, in, s, 0, s->n * s->p * s->q, scratch);
    if (din)
        nn_conv2d_backward_input (din, dout, w, s, scratch);
}

void
nn_dense_forward_cols (float *out, const float *in, const float *w, const float *b,
                       int n, int i, int o, int o0, int o1)
{
    int cols = o1 - o0;
    float beta = 0.0f;
    if (b) {
        for (int r = 0; r < n; r++)
            memcpy (out + (size_t) r * o + o0, b + o0, sizeof (float) * cols);
        beta = 1.0f;
    }
    //  out[:, o0:o1] (n, cols) = in (n, i) . w[o0:o1]^T (i, cols)
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, i,
                 1.0f, in, i, w + (size_t) o0 * i, i, beta, out + o0, o);
}

void
nn_dense_forward (float *out, const float *in, const float *w, const float *b,
                  int n, int i, int o)
{
    nn_dense_forward_cols (out, in, w, b, n, i, o, 0, o);
}

void
nn_dense_backward_weights (float *dw, float *db, const float *dout, const float *in,
                           int n, int i, int o, int ldo)
{
    //  dw (o, i) += dout^T (o, n; row stride ldo) . in (n, i)
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, o, i, n,
                 1.0f, dout, ldo, in, i, 1.0f, dw, i);
    if (db)
        for (int r = 0; r < n; r++)
            for (int k = 0; k < o; k++)
                db[k] += dout[(size_t) r * ldo + k];
}

void
nn_dense_backward_input_cols (float *din, const float *dout, const float *w, int n,
                              int i, int o, int i0, int i1)
{
    //  din[:, i0:i1] (n, cols) = dout (n, o) . w[:, i0:i1] (o, cols)
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, i1 - i0, o,
                 1.0f, dout, o, w + i0, i, 0.0f, din + i0, i);
}

void
nn_dense_backward_input (float *din, const float *dout, const float *w, int n, int i,
                         int o)
{
    nn_dense_backward_input_cols (din, dout, w, n, i, o, 0, i);
}

void
nn_dense_backward (float *din, float *dw, float *db, const float *dout,
                   const float *in, const float *w, int n, int i, int o)
{
    nn_dense_backward_weights (dw, db, dout, in, n, i, o, o);
    if (din)
        nn_dense_backward_input (din, dout, w, n, i, o);
}

S_BODY void
nn_batchnorm_moments_body (double *sum, double *sumsq, const float *in, int m, int c)
{
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        for (int k = 0; k < c; k++) {
            sum[k] += x[k];
            sumsq[k] += (double) x[k] * x[k];
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_moments,
            (double *sum, double *sumsq, const float *in, int m, int c),
            (sum, sumsq, in, m, c))

void
nn_batchnorm_finish (float *mean_invstd, float *running_mean, float *running_var,
                     const double *sum, const double *sumsq, int m_total, int c,
                     float momentum, float eps)
{
    float *mean = mean_invstd, *invstd = mean_invstd + c;
    for (int k = 0; k < c; k++) {
        //  E[x^2] - E[x]^2 in double: float activations leave ample headroom.
        double mu = sum[k] / m_total;
        double var = sumsq[k] / m_total - mu * mu;
        if (var < 0.0)
            var = 0.0;
        mean[k] = (float) mu;
        invstd[k] = (float) (1.0 / sqrt (var + eps));
        double unbiased = m_total > 1 ? var * m_total / (m_total - 1) : var;
        running_mean[k] = (1.0f - momentum) * running_mean[k] + momentum * (float) mu;
        running_var[k] = (float) ((1.0 - momentum) * running_var[k] + momentum * unbiased);
    }
}

S_BODY void
nn_batchnorm_normalize_body (float *out, float *xhat, const float *in,
                        const float *mean_invstd, const float *gamma, const float *beta,
                        int m, int c, bool relu)
{
    //  y = x * a + b with a = gamma * invstd, b = beta - mean * a. xhat may
    //  alias in and out may alias in (element for element), so the compiler
    //  is told the iterations are independent.
    const float *mean = mean_invstd, *invstd = mean_invstd + c;
    float a[c], b[c];
    for (int k = 0; k < c; k++) {
        a[k] = gamma[k] * invstd[k];
        b[k] = beta[k] - mean[k] * a[k];
    }
    float floor = relu ? 0.0f : -INFINITY;
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        float *xh = xhat + (size_t) r * c;
        float *y = out + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++) {
            float v = x[k];
            float z = v * a[k] + b[k];
            xh[k] = (v - mean[k]) * invstd[k];
            y[k] = z > floor ? z : floor;
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_normalize,
            (float *out, float *xhat, const float *in, const float *mean_invstd,
             const float *gamma, const float *beta, int m, int c, bool relu),
            (out, xhat, in, mean_invstd, gamma, beta, m, c, relu))

void
nn_batchnorm_forward_train (float *out, float *xhat, float *mean_invstd,
                            float *running_mean, float *running_var,
                            const float *in, const float *gamma, const float *beta,
                            int m, int c, float momentum, float eps)
{
    double sum[c], sq[c];
    for (int k = 0; k < c; k++)
        sum[k] = sq[k] = 0.0;
    nn_batchnorm_moments (sum, sq, in, m, c);
    nn_batchnorm_finish (mean_invstd, running_mean, running_var, sum, sq, m, c,
                         momentum, eps);
    nn_batchnorm_normalize (out, xhat, in, mean_invstd, gamma, beta, m, c, false);
}

S_BODY void
nn_batchnorm_forward_eval_body (float *out, const float *in, const float *gamma,
                           const float *beta, const float *running_mean,
                           const float *running_var, int m, int c, float eps)
{
    float scale[c], shift[c];
    for (int k = 0; k < c; k++) {
        scale[k] = gamma[k] / sqrtf (running_var[k] + eps);
        shift[k] = beta[k] - running_mean[k] * scale[k];
    }
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        float *y = out + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++)
            y[k] = x[k] * scale[k] + shift[k];
    }
}
S_DISPATCH (extern, nn_batchnorm_forward_eval,
            (float *out, const float *in, const float *gamma, const float *beta,
             const float *running_mean, const float *running_var, int m, int c,
             float eps),
            (out, in, gamma, beta, running_mean, running_var, m, c, eps))

S_BODY void
nn_batchnorm_backward_sums_body (double *sdy, double *sdyx, const float *dout,
                            const float *xhat, int m, int c)
{
    for (int r = 0; r < m; r++) {
        const float *dy = dout + (size_t) r * c;
        const float *xh = xhat + (size_t) r * c;
        for (int k = 0; k < c; k++) {
            sdy[k] += dy[k];
            sdyx[k] += dy[k] * xh[k];
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_backward_sums,
            (double *sdy, double *sdyx, const float *dout, const float *xhat, int m,
             int c),
            (sdy, sdyx, dout, xhat, m, c))

S_BODY void
nn_batchnorm_backward_apply_body (float *din, const float *dout, const float *xhat,
                             const float *mean_invstd, const float *gamma,
                             const double *sdy, const double *sdyx, int m, int m_total,
                             int c)
{
    //  dx = gamma * invstd / M * (M dy - sum dy - xhat sum(dy xhat))
    const float *invstd = mean_invstd + c;
    float a[c], mdy[c], mdyx[c];
    for (int k = 0; k < c; k++) {
        a[k] = gamma[k] * invstd[k];
        mdy[k] = (float) (sdy[k] / m_total);
        mdyx[k] = (float) (sdyx[k] / m_total);
    }
    for (int r = 0; r < m; r++) {
        const float *dy = dout + (size_t) r * c;
        const float *xh = xhat + (size_t) r * c;
        float *dx = din + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++)
            dx[k] = a[k] * (dy[k] - mdy[k] - xh[k] * mdyx[k]);
    }
}
S_DISPATCH (extern, nn_batchnorm_backward_apply,
            (float *din, const float *dout, const float *xhat, const float *mean_invstd,
             const float *gamma, const double *sdy, const double *sdyx, int m,
             int m_total, int c),
            (din, dout, xhat, mean_invstd, gamma, sdy, sdyx, m, m_total, c))

void
nn_batchnorm_backward (float *din, float *dgamma, float *dbeta, const float *dout,
                       const float *xhat, const float *mean_invstd, const float *gamma,
                       int m, int c)
{
    double sdy[c], sdyx[c];
    for (int k = 0; k < c; k++)
        sdy[k] = sdyx[k] = 0.0;
    nn_batchnorm_backward_sums (sdy, sdyx, dout, xhat, m, c);
    for (int k = 0; k < c; k++) {
        dgamma[k] += (float) sdyx[k];
        dbeta[k] += (float) sdy[k];
    }
    if (din)
        nn_batchnorm_backward_apply (din, dout, xhat, mean_invstd, gamma, sdy, sdyx, m, m, c);
}

S_BODY void
nn_relu_forward_body (float *out, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}
S_DISPATCH (extern, nn_relu_forward,
            (float *out, const float *in, size_t count),
            (out, in, count))

S_BODY void
nn_relu_backward_body (float *din, const float *dout, const float *out, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++)
        din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
S_DISPATCH (extern, nn_relu_backward,
            (float *din, const float *dout, const float *out, size_t count),
            (din, dout, out, count))

int
nn_pool_shape_finish (nn_pool_shape_t *s)
{
    if (s->kernel == 0) {
        s->p = s->q = 1;
        return 0;
    }
    if (s->stride < 1 || s->pad < 0 || s->kernel < 1 || s->pad * 2 > s->kernel)
        return -1;
    int hp = s->h + 2 * s->pad - s->kernel;
    int wp = s->w + 2 * s->pad - s->kernel;
    if (hp < 0 || wp < 0)
        return -1;
    s->p = hp / s->stride + 1;
    s->q = wp / s->stride + 1;
    return 0;
}

//  Window of output (p, q) clipped to the input: rows [*h0, *h1), cols [*w0, *w1).
static void
s_pool_window (const nn_pool_shape_t *s, int p, int q,
               int *h0, int *h1, int *w0, int *w1)
{
    if (s->kernel == 0) {
        *h0 = 0, *h1 = s->h, *w0 = 0, *w1 = s->w;
        return;
    }
    int hs = p * s->stride - s->pad, ws = q * s->stride - s->pad;
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = hs + s->kernel > s->h ? s->h : hs + s->kernel;
    *w1 = ws + s->kernel > s->w ? s->w : ws + s->kernel;
}

//  Pixels in a window: kernel x kernel, or the whole image (global pooling).
static long
s_pool_cells (const nn_pool_shape_t *s)
{
    return s->kernel == 0 ? (long) s->h * s->w : (long) s->kernel * s->kernel;
}

bool
nn_maxpool_fits (const nn_pool_shape_t *s)
{
    return s_pool_cells (s) <= NN_POOL_MAX_WINDOW - 1;  //  one code is NN_POOL_NO_WINNER
}

//  The unpadded corner of window (p, q) and its row width, for win codes.
static void
s_pool_corner (const nn_pool_shape_t *s, int p, int q, int *hs, int *ws, int *width)
{
    if (s->kernel == 0) {
        *hs = *ws = 0;
        *width = s->w;
        return;
    }
    *hs = p * s->stride - s->pad;
    *ws = q * s->stride - s->pad;
    *width = s->kernel;
}

S_BODY void
nn_maxpool_forward_body (float *out, uint8_t *win, const float *in, const nn_pool_shape_t *s,
                    bool drop_nonpositive)
{
    assert (nn_maxpool_fits (s));
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    int C = s->c;
    for (int n = 0; n < s->n; n++) {
        const float *x = in + n * in_size;
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                float *restrict o = out + n * out_size + ((size_t) p * s->q + q) * C;
                uint8_t *restrict a = win + n * out_size + ((size_t) p * s->q + q) * C;
                int h0, h1, w0, w1, hs, ws, width;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                s_pool_corner (s, p, q, &hs, &ws, &width);
                const float *first = x + ((size_t) h0 * s->w + w0) * C;
                uint8_t code0 = (uint8_t) ((h0 - hs) * width + (w0 - ws));
                for (int c = 0; c < C; c++) {
                    o[c] = first[c];
                    a[c] = code0;
                }
                //  Branch-free over channels so the compiler vectorises it;
                //  strict > keeps the first maximum, as PyTorch does.
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        const float *restrict xv = x + ((size_t) h * s->w + w) * C;
                        uint8_t code = (uint8_t) ((h - hs) * width + (w - ws));
                        for (int c = 0; c < C; c++) {
                            bool take = xv[c] > o[c];
                            o[c] = take ? xv[c] : o[c];
                            a[c] = take ? code : a[c];
                        }
                    }
                if (drop_nonpositive)
                    for (int c = 0; c < C; c++)
                        a[c] = o[c] > 0.0f ? a[c] : NN_POOL_NO_WINNER;
            }
    }
}
S_DISPATCH (extern, nn_maxpool_forward,
            (float *out, uint8_t *win, const float *in, const nn_pool_shape_t *s,
             bool drop_nonpositive),
            (out, win, in, s, drop_nonpositive))

S_BODY void
nn_maxpool_backward_body (float *din, const float *dout, const uint8_t *win,
                     const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    int C = s->c;
    memset (din, 0, sizeof (float) * in_size * s->n);
    //  Input offset of each code from the window's corner, channel 0.
    ptrdiff_t offset[NN_POOL_MAX_WINDOW];
    int width = s->kernel == 0 ? s->w : s->kernel;
    int cells = (int) s_pool_cells (s);
    for (int k = 0; k < cells; k++)
        offset[k] = ((ptrdiff_t) (k / width) * s->w + k % width) * C;
    for (int n = 0; n < s->n; n++) {
        float *dx = din + n * in_size;
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                size_t at = n * out_size + ((size_t) p * s->q + q) * C;
                const float *dy = dout + at;
                const uint8_t *a = win + at;
                int hs, ws, width_unused;
                s_pool_corner (s, p, q, &hs, &ws, &width_unused);
                ptrdiff_t corner = ((ptrdiff_t) hs * s->w + ws) * C;
                for (int c = 0; c < C; c++)
                    if (a[c] != NN_POOL_NO_WINNER)
                        dx[corner + offset[a[c]] + c] += dy[c];
            }
    }
}
S_DISPATCH (extern, nn_maxpool_backward,
            (float *din, const float *dout, const uint8_t *win, const nn_pool_shape_t *s),
            (din, dout, win, s))

static float
s_pool_divisor (const nn_pool_shape_t *s)
{
    return s->kernel == 0 ? (float) s->h * s->w : (float) s->kernel * s->kernel;
}

void
nn_avgpool_forward (float *out, const float *in, const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    float inv = 1.0f / s_pool_divisor (s);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                float *o = out + n * out_size + ((size_t) p * s->q + q) * s->c;
                int h0, h1, w0, w1;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                for (int c = 0; c < s->c; c++)
                    o[c] = 0.0f;
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        const float *x = in + n * in_size + ((size_t) h * s->w + w) * s->c;
                        for (int c = 0; c < s->c; c++)
                            o[c] += x[c];
                    }
                for (int c = 0; c < s->c; c++)
                    o[c] *= inv;
            }
}

void
nn_avgpool_backward (float *din, const float *dout, const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    float inv = 1.0f / s_pool_divisor (s);
    memset (din, 0, sizeof (float) * in_size * s->n);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                const float *dy = dout + n * out_size + ((size_t) p * s->q + q) * s->c;
                int h0, h1, w0, w1;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        float *dx = din + n * in_size + ((size_t) h * s->w + w) * s->c;
                        for (int c = 0; c < s->c; c++)
                            dx[c] += dy[c] * inv;
                    }
            }
}

void
nn_dropout_forward (float *out, float *mask, const float *in, size_t count,
                    float p, nn_rng_t *rng)
{
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < count; i++) {
        mask[i] = nn_rng_uniform (rng) < p ? 0.0f : keep;
        out[i] = in[i] * mask[i];
    }
}

void
nn_dropout_backward (float *din, const float *dout, const float *mask, size_t count)
{
    for (size_t i = 0; i < count; i++)
        din[i] = dout[i] * mask[i];
}
