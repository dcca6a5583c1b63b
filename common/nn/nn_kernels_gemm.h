/*  nn_kernels_gemm.h: private to the nn_kernels*.c files. Our own sgemm
    for the convolutions' shapes: one register tile per instruction-set
    level, chosen at run time (nn_isa_active ()).

    The AVX-512 tile is 6 x 64 (24 zmm accumulators), the AVX2+FMA one 6 x 16
    (the 12 accumulators Haswell-class cores hold in their 16 registers),
    the NEON one 6 x 12 (18 accumulators, 3 of b and 6 of a in aarch64's 32
    registers). On one core of an AMD EPYC with AVX-512 the AVX-512 tile
    once ran at 200-220 GFLOP/s against 187-190 for OpenBLAS's Cooperlake
    kernels (an idle machine, when it was written); on 2026-11-25, in
    thread CPU time on the same machine shared with other jobs, 114-116
    against 99-101, and the AVX2 tile 104-112 against OpenBLAS Haswell's
    103-106 (docs/performance.md). Where no tile runs (the generic level,
    a width or shape the tile does not cover, valgrind, which cannot execute
    AVX-512) the callers use OpenBLAS; nothing else changes. */
#ifndef NN_KERNELS_GEMM_H_INCLUDED
#define NN_KERNELS_GEMM_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

//  Whether the active level has a tile for c n floats wide (n a multiple
//  of 8; of 4 on NEON) summing over J terms, and it beats OpenBLAS there:
//  the tiles stream one 128-row block of b per 6 rows of c, so b's
//  block must stay in L2 (OpenBLAS packs its own panels and wins on wide
//  products: 300 x 1024 x 576 ran at 50 GFLOP/s in the AVX2 tile).
bool nn_tile_fits (int n, int J);

//  c (m, n) (+)= a (m, J) . b (J, n), where a(r, j) = a[r * lda + j * as]
//  (as = 1: row-major a; lda = 1: a^T), b rows ldb apart, c rows ldc
//  apart; beta: add to c, else overwrite. Only when nn_tile_fits (n, J).
void nn_tile_gemm (float *c, size_t ldc, const float *a, size_t lda, size_t as,
                   const float *b, size_t ldb, int m, int n, int J, bool beta);

#endif
