/*  nn_kernels_gemm.c: our register-tile sgemm, one per ISA level (see
    nn_kernels_gemm.h). */
#include "nn_kernels_gemm.h"

#include "nn_kernels_simd.h"

//  The sum runs in blocks of S_GEMM_KC terms from zero, each added to c:
//  one chain over a 576-long patch lost accuracy (1e-5 relative) that
//  OpenBLAS's blocked sums keep.
#define S_GEMM_KC 128
//  Rows of c per tile.
#define S_GEMM_MR 6

//  One register tile: c (mr, W*nv) (+)= a (mr, J) . b (J, W*nv) in
//  vectors of type VT (W floats), a, b, c as nn_tile_gemm. With mr and nv
//  constants (the callers are always inlined) the accumulators stay in
//  registers. A VT wider than the target's registers is split by the
//  compiler: an s_v16 is one AVX-512 register, two AVX ones, four NEON ones.
#define S_TILE(NAME, VT, W)                                                     \
static inline __attribute__ ((always_inline)) void                             \
NAME (float *c, size_t ldc, const float *a, size_t lda, size_t as,             \
      const float *b, size_t ldb, int J, int mr, int nv, bool beta)            \
{                                                                              \
    for (int j0 = 0; j0 < J; j0 += S_GEMM_KC) {                                \
        int j1 = J - j0 < S_GEMM_KC ? J : j0 + S_GEMM_KC;                      \
        VT acc[S_GEMM_MR][4];                                                  \
        for (int r = 0; r < mr; r++)                                           \
            for (int v = 0; v < nv; v++)                                       \
                acc[r][v] = (VT) { 0 };                                        \
        for (int j = j0; j < j1; j++) {                                        \
            VT bv[4];                                                          \
            for (int v = 0; v < nv; v++)                                       \
                bv[v] = *(const VT *) (b + j * ldb + W * v);                   \
            for (int r = 0; r < mr; r++) {                                     \
                VT x = (VT) { 0 } + a[r * lda + j * as];                       \
                for (int v = 0; v < nv; v++)                                   \
                    acc[r][v] += x * bv[v];                                    \
            }                                                                  \
        }                                                                      \
        bool add = beta || j0 > 0;                                             \
        for (int r = 0; r < mr; r++)                                           \
            for (int v = 0; v < nv; v++) {                                     \
                VT *o = (VT *) (c + r * ldc + W * v);                          \
                *o = add ? *o + acc[r][v] : acc[r][v];                         \
            }                                                                  \
    }                                                                          \
}
S_TILE (s_tile16, s_v16, 16)
S_TILE (s_tile8, s_v8, 8)

//  mr rows of c (n wide, n % 8 == 0): tiles 16 * nv wide, then 16-wide
//  ones, then one 8 wide.
static inline __attribute__ ((always_inline)) void
s_gemm_rows (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
             size_t ldb, int mr, int n, int J, bool beta, int nv)
{
    int j = 0;
    for (; j + 16 * nv <= n; j += 16 * nv)
        s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, nv, beta);
    for (; j + 16 <= n; j += 16)
        s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, beta);
    if (j < n)
        s_tile8 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, beta);
}

//  All of c: blocks of S_GEMM_MR rows, then the rows left one at a time.
//  nv: 16-float vectors per tile row, as many as the level's registers hold
//  (4 of AVX-512's 32; 1 of AVX2's 16 registers, 2 each; 1 of NEON's 32, 4 each).
static inline __attribute__ ((always_inline)) void
s_gemm_body (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
             size_t ldb, int m, int n, int J, bool beta, int nv)
{
    int i = 0;
    for (; i + S_GEMM_MR <= m; i += S_GEMM_MR)
        s_gemm_rows (c + i * ldc, ldc, a + i * lda, lda, as, b, ldb, S_GEMM_MR, n, J, beta, nv);
    for (; i < m; i++)
        s_gemm_rows (c + i * ldc, ldc, a + i * lda, lda, as, b, ldb, 1, n, J, beta, nv);
}

#if S_X86_CLONES
S_TARGET_AVX512 static void
s_gemm_avx512 (float *c, size_t ldc, const float *a, size_t lda, size_t as,
               const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 4);
}

S_TARGET_AVX2 static void
s_gemm_avx2 (float *c, size_t ldc, const float *a, size_t lda, size_t as,
             const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 1);
}

bool
nn_tile_fits (int n)
{
    nn_isa_t isa = nn_isa_active ();
    return n % 8 == 0 && (isa == NN_ISA_AVX512 || isa == NN_ISA_AVX2);
}

void
nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
              const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    if (nn_isa_active () == NN_ISA_AVX512)
        s_gemm_avx512 (c, ldc, a, lda, as, b, ldb, m, n, J, beta);
    else
        s_gemm_avx2 (c, ldc, a, lda, as, b, ldb, m, n, J, beta);
}
#elif defined(__aarch64__) && defined(__GNUC__)
//  Advanced SIMD is part of ARMv8-A: the build's own target has it.
bool
nn_tile_fits (int n)
{
    return n % 8 == 0 && nn_isa_active () == NN_ISA_NEON;
}

void
nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
              const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 1);
}
#else
bool
nn_tile_fits (int n)
{
    (void) n;
    return false;
}

void
nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
              const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    (void) c, (void) ldc, (void) a, (void) lda, (void) as, (void) b, (void) ldb;
    (void) m, (void) n, (void) J, (void) beta;
}
#endif
