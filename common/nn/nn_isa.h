/*  nn_isa.h: which instruction-set path the core's own kernels take.

    The kernels in nn_kernels*.c have paths for three levels of x86-64:
    generic (the x86-64 baseline, SSE2), avx2 (x86-64-v3: AVX2 + FMA, our
    6 x 16 register-tile sgemm) and avx512 (x86-64-v4: our 6 x 64 tile); on
    aarch64, neon (Advanced SIMD, which every ARMv8-A CPU has, so generic
    there is the same code; a 6 x 12 tile). See nn_kernels_simd.h and
    nn_kernels_gemm.h. The level used is the highest the CPU runs, or the one the
    environment variable PIPELEARN_ISA names, so one host can run as a
    slower CPU kind would: `PIPELEARN_ISA=avx2 OPENBLAS_CORETYPE=Haswell` is
    how an AVX2-only machine runs. The level is read once per process, on
    the first call, and never changes after (a constant of the process,
    like the CPU's own feature bits); set the variable before the process
    starts. OpenBLAS chooses its own kernels (OPENBLAS_CORETYPE; pl_blas.h). */
#ifndef NN_ISA_H
#define NN_ISA_H

#include <stdbool.h>

typedef enum {
    NN_ISA_GENERIC = 0,
    NN_ISA_AVX2 = 1,
    NN_ISA_AVX512 = 2,
    NN_ISA_NEON = 3,
} nn_isa_t;

#define NN_ISA_ENV "PIPELEARN_ISA"

//  The highest level this CPU runs.
nn_isa_t nn_isa_cpu (void);

//  Whether this CPU runs that level.
bool nn_isa_runs (nn_isa_t isa);

//  "generic", "avx2", "avx512" or "neon" -> *isa, 0; anything else -1.
int nn_isa_parse (const char *name, nn_isa_t *isa);

const char *nn_isa_name (nn_isa_t isa);

//  What a process with PIPELEARN_ISA = request (NULL or empty: unset) runs
//  on this CPU: the level requested if the CPU runs it, else the CPU's.
//  *valid (if not NULL) is false when request names no level or one the
//  CPU cannot run (the daemons refuse to start then; see pl_blas_setup).
nn_isa_t nn_isa_resolve (const char *request, bool *valid);

//  The level the kernels use in this process (nn_isa_resolve of the
//  environment, read once).
nn_isa_t nn_isa_active (void);

#endif
