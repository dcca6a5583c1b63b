/*  pl_blas.h: make OpenBLAS use the right kernels and thread count.

    OpenBLAS 0.3.21 (Debian 12) does not recognise some newer CPUs and falls
    back to SSE3 ("Prescott") kernels, several times slower than the
    AVX2/AVX-512 ones the CPU runs fine (docs/architecture.md). The core is chosen when the library loads, from
    OPENBLAS_CORETYPE, so the fix is to re-execute the program once with
    that variable set. A user's own OPENBLAS_CORETYPE is always respected.
*/
#ifndef PL_BLAS_H_INCLUDED
#define PL_BLAS_H_INCLUDED

#include <stdbool.h>

//  The core OpenBLAS should use instead of `corename` on a CPU with the
//  given features, or NULL if corename is already right.
const char *pl_blas_choose_coretype (const char *corename, bool avx2, bool avx512);

//  Call first thing in main. May not return: re-executes argv once with
//  OPENBLAS_CORETYPE set when OpenBLAS picked a generic core on a capable
//  CPU and the user has not set the variable, and with GOMP_SPINCOUNT
//  bounded when neither it nor OMP_WAIT_POLICY is set (see pl_blas.c).
//  Logs the core in use and the level of pipelearn's own kernels
//  (nn_isa.h). Returns -1, having logged why, when PIPELEARN_ISA names no
//  level (the caller exits 2); else 0.
int pl_blas_setup (char **argv);

//  Thread count for OpenBLAS: threads <= 0 means the number of cores.
//  Returns the count set.
int pl_blas_set_threads (int threads);

//  OpenBLAS's name for the kernels in use ("Haswell", "Zen", ...).
const char *pl_blas_corename (void);

#endif
