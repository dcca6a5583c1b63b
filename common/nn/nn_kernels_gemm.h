/*  nn_kernels_gemm.h: private to the nn_kernels*.c files. Our own sgemm
    for the convolutions' shapes: one register tile per instruction-set
    level, chosen at run time (nn_isa_active ()).

    Measured on one core of an AMD EPYC (Zen 5) with AVX-512: the 6 x 64
    AVX-512 tile ran at 200-220 GFLOP/s against 95-100 for OpenBLAS with
    OPENBLAS_CORETYPE=Haswell and 187-190 with its own Cooperlake kernels.
    The AVX2+FMA tile (6 x 16, the 12 accumulators Haswell-class cores
    hold in their 16 registers) and the NEON one (6 x 12: 18 accumulators,
    3 of b and 6 of a in aarch64's 32 registers) follow the same plan. Where no tile runs (the generic
    level, a width the tile does not cover, valgrind, which cannot execute
    AVX-512) the callers use OpenBLAS; nothing else changes. */
#ifndef NN_KERNELS_GEMM_H_INCLUDED
#define NN_KERNELS_GEMM_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

//  Whether the active level has a tile for c n floats wide (n a multiple
//  of 8; of 4 on NEON) summing over J terms, and it beats OpenBLAS there:
//  the tiles stream one S_GEMM_KC-row block of b per 6 rows of c, so b's
//  block must stay in L2 (OpenBLAS packs its own panels and wins on wide
//  products: 300 x 1024 x 576 ran at 50 GFLOP/s in the AVX2 tile).
bool nn_tile_fits (int n, int J);

//  c (m, n) (+)= a (m, J) . b (J, n), where a(r, j) = a[r * lda + j * as]
//  (as = 1: row-major a; lda = 1: a^T), b rows ldb apart, c rows ldc
//  apart; beta: add to c, else overwrite. Only when nn_tile_fits (n, J).
void nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
                   const float *b, size_t ldb, int m, int n, int J, bool beta);

#endif
