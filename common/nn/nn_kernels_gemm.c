/*  nn_kernels_gemm.c: our register-tile sgemm, one per ISA level (see
    nn_kernels_gemm.h). */
#include "nn_kernels_gemm.h"

#include "nn_kernels_simd.h"

//  Levels with a tile: x86-64 with GCC (avx2, avx512 clones) and aarch64.
#if S_X86_CLONES || (defined(__aarch64__) && defined(__GNUC__))
#   define S_HAVE_TILE 1
#else
#   define S_HAVE_TILE 0
#endif

#if S_HAVE_TILE
//  The sum runs in blocks of S_GEMM_KC terms from zero, each added to c:
//  one chain over a 576-long patch lost accuracy (1e-5 relative) that
//  OpenBLAS's blocked sums keep.
#define S_GEMM_KC 128
//  Rows of c per tile.
#define S_GEMM_MR 6
//  Floats of b's block the tiles may stream per 6 rows of c (256 KiB).
#define S_GEMM_B_BLOCK (64 * 1024)

static bool
s_b_block_fits (int n, int J)
{
    return (long) (J < S_GEMM_KC ? J : S_GEMM_KC) * n <= S_GEMM_B_BLOCK;
}

//  One register tile: c (mr, W*nv) (+)= a (mr, J) . b (J, W*nv), J at most
//  S_GEMM_KC, in vectors of type VT (W floats); a, b and c as
//  nn_tile_gemm; add: add to c, else overwrite. With mr and nv constants (the callers are always inlined)
//  the accumulators stay in registers. VT must be a register of the level
//  it runs at: GCC keeps a vector wider than the target's registers (an
//  s_v16 under AVX2) in memory, and the tile ran at a tenth of OpenBLAS's
//  speed that way.
#define S_TILE(NAME, VT, W)                                                     \
static inline __attribute__ ((always_inline)) void                             \
NAME (float *c, size_t ldc, const float *a, size_t lda, size_t as,             \
      const float *b, size_t ldb, int J, int mr, int nv, bool add)             \
{                                                                              \
    VT acc[S_GEMM_MR][4];                                                      \
    for (int r = 0; r < mr; r++)                                               \
        for (int v = 0; v < nv; v++)                                           \
            acc[r][v] = (VT) { 0 };                                            \
    for (int j = 0; j < J; j++) {                                              \
        VT bv[4];                                                              \
        for (int v = 0; v < nv; v++)                                           \
            bv[v] = *(const VT *) (b + j * ldb + W * v);                       \
        for (int r = 0; r < mr; r++) {                                         \
            VT x = a[r * lda + j * as] - (VT) { 0 };  /* x - 0 == x: a broadcast */ \
            for (int v = 0; v < nv; v++)                                       \
                acc[r][v] += x * bv[v];                                        \
        }                                                                      \
    }                                                                          \
    for (int r = 0; r < mr; r++)                                               \
        for (int v = 0; v < nv; v++) {                                         \
            VT *o = (VT *) (c + r * ldc + W * v);                              \
            *o = add ? *o + acc[r][v] : acc[r][v];                             \
        }                                                                      \
}
S_TILE (s_tile16, s_v16, 16)
S_TILE (s_tile8, s_v8, 8)
S_TILE (s_tile4, s_v4, 4)

//  mr rows of c (n wide, n % 8 == 0; NEON n % 4 == 0) over one block of a,
//  in vectors of w floats (the level's register): tiles w * nv wide, then
//  w wide, then (AVX-512) one 8 wide.
static inline __attribute__ ((always_inline)) void
s_gemm_rows (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
             size_t ldb, int mr, int n, int J, bool add, int w, int nv)
{
    int j = 0;
    if (w == 16) {
        for (; j + 16 * nv <= n; j += 16 * nv)
            s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, nv, add);
        for (; j + 16 <= n; j += 16)
            s_tile16 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, add);
    }
    if (w == 4) {
        for (; j + 4 * nv <= n; j += 4 * nv)
            s_tile4 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, nv, add);
        for (; j + 4 <= n; j += 4)
            s_tile4 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, add);
    }
    for (; j + 8 * nv <= n; j += 8 * nv)
        s_tile8 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, nv, add);
    for (; j < n; j += 8)
        s_tile8 (c + j, ldc, a, lda, as, b + j, ldb, J, mr, 1, add);
}

//  All of c, S_GEMM_MR rows at a time (the rows left over one at a time),
//  the sum in blocks of S_GEMM_KC terms, every column tile of a block of
//  rows over one block of terms before the next block: the block of a
//  stays in L1 while the tiles (four 16-wide AVX2 tiles for a 64-wide c)
//  reuse it. With each tile over all J in turn, a^T (the weight gradient,
//  whose 6 values of a per term are a cache line apart from the next
//  term's) ran at 83 GFLOP/s on AVX2 against 104 for OpenBLAS on a Zen 4
//  core. (Packing a into a contiguous block cost more than it saved at
//  these widths: 91 against 115 at avx512.)
//  w, nv: the tile's vectors and how many per row, as many as the level's
//  registers hold (16 floats x 4 of AVX-512's 32 registers; 8 x 2 of
//  AVX2's 16; 4 x 3 of NEON's 32, which also hold the 6 values of a).
static inline __attribute__ ((always_inline)) void
s_gemm_body (float *c, size_t ldc, const float *a, size_t lda, size_t as, const float *b,
             size_t ldb, int m, int n, int J, bool beta, int w, int nv)
{
    for (int i = 0; i < m; i += S_GEMM_MR) {
        int mr = m - i < S_GEMM_MR ? m - i : S_GEMM_MR;
        float *ci = c + i * ldc;
        const float *ai = a + i * lda;
        for (int j0 = 0; j0 < J; j0 += S_GEMM_KC) {
            int kc = J - j0 < S_GEMM_KC ? J - j0 : S_GEMM_KC;
            bool add = beta || j0 > 0;
            const float *aj = ai + j0 * as, *bj = b + j0 * ldb;
            if (mr == S_GEMM_MR)
                s_gemm_rows (ci, ldc, aj, lda, as, bj, ldb, S_GEMM_MR, n, kc, add, w, nv);
            else
                for (int r = 0; r < mr; r++)
                    s_gemm_rows (ci + r * ldc, ldc, aj + r * lda, lda, as, bj, ldb, 1, n, kc,
                                 add, w, nv);
        }
    }
}
#endif

#if S_X86_CLONES
S_TARGET_AVX512 static void
s_gemm_avx512 (float *c, size_t ldc, const float *a, size_t lda, size_t as,
               const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 16, 4);
}

S_TARGET_AVX2 static void
s_gemm_avx2 (float *c, size_t ldc, const float *a, size_t lda, size_t as,
             const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 8, 2);
}

bool
nn_tile_fits (int n, int J)
{
    nn_isa_t isa = nn_isa_active ();
    return n % 8 == 0 && s_b_block_fits (n, J) && (isa == NN_ISA_AVX512 || isa == NN_ISA_AVX2);
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
#elif S_HAVE_TILE
//  Advanced SIMD is part of ARMv8-A: the build's own target has it.
bool
nn_tile_fits (int n, int J)
{
    return n % 4 == 0 && s_b_block_fits (n, J) && nn_isa_active () == NN_ISA_NEON;
}

void
nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
              const float *b, size_t ldb, int m, int n, int J, bool beta)
{
    s_gemm_body (c, ldc, a, lda, as, b, ldb, m, n, J, beta, 4, 3);
}
#else
bool
nn_tile_fits (int n, int J)
{
    (void) n, (void) J;
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
