/*  nn_kernels_simd.h: private to the nn_kernels*.c files. How one kernel
    body is compiled once per instruction-set level and picked at run time
    by nn_isa_active () (nn_isa.h), and the vector types the bodies use.

    S_BODY marks a body NAME_body (always inlined into each clone);
    S_DISPATCH (LINK, NAME, PARAMS, ARGS) defines NAME_avx512 (x86-64-v4),
    NAME_avx2 (x86-64-v3: AVX2 + FMA), NAME_generic (the baseline) and NAME,
    which calls the one the active level allows. One binary for every
    x86-64 host, and PIPELEARN_ISA=generic|avx2 can turn the higher paths off
    (GCC's target_clones picks at load time with no way to say no). LINK is
    static or extern. Elsewhere (aarch64, where neon is the baseline, and
    clang) NAME is the body compiled for the build's own target. */
#ifndef NN_KERNELS_SIMD_H_INCLUDED
#define NN_KERNELS_SIMD_H_INCLUDED

#include "nn_isa.h"

//  gcc's "no loop-carried dependence" hint; clang has no such pragma (and
//  -Werror would stop it on an unknown one).
#if defined (__GNUC__) && !defined (__clang__)
#   define S_IVDEP _Pragma ("GCC ivdep")
#else
#   define S_IVDEP
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#   define S_X86_CLONES 1
//  prefer-vector-width=512: the auto-vectoriser otherwise keeps to 256-bit
//  vectors under GCC's generic tuning, and the avx512 clone would be the
//  avx2 one again.
#   define S_TARGET_AVX512 __attribute__ ((target ("arch=x86-64-v4,prefer-vector-width=512")))
#   define S_TARGET_AVX2 __attribute__ ((target ("arch=x86-64-v3")))
#   define S_BODY static inline __attribute__ ((always_inline))
//  The three clones of NAME_body and NAME calling one of them. LEVEL_ARG
//  (level) is what follows ARGS in each clone's call of the body: nothing
//  (S_NO_LEVEL) or ", level" (S_WITH_LEVEL).
#   define S_CLONES(LINK, NAME, PARAMS, ARGS, LEVEL_ARG)                         \
    S_TARGET_AVX512 static void NAME##_avx512 PARAMS                           \
    { NAME##_body (S_EXPAND ARGS LEVEL_ARG (NN_ISA_AVX512)); }                 \
    S_TARGET_AVX2 static void NAME##_avx2 PARAMS                               \
    { NAME##_body (S_EXPAND ARGS LEVEL_ARG (NN_ISA_AVX2)); }                   \
    static void NAME##_generic PARAMS                                          \
    { NAME##_body (S_EXPAND ARGS LEVEL_ARG (NN_ISA_GENERIC)); }                \
    LINK void NAME PARAMS                                                      \
    {                                                                          \
        switch (nn_isa_active ()) {                                            \
            case NN_ISA_AVX512: NAME##_avx512 ARGS; break;                     \
            case NN_ISA_AVX2: NAME##_avx2 ARGS; break;                         \
            default: NAME##_generic ARGS; break;                               \
        }                                                                      \
    }
#   define S_NO_LEVEL(level)
#   define S_WITH_LEVEL(level) , level
#   define S_DISPATCH(LINK, NAME, PARAMS, ARGS)                                 \
    S_CLONES (LINK, NAME, PARAMS, ARGS, S_NO_LEVEL)
#   define S_DISPATCH_ISA(LINK, NAME, PARAMS, ARGS)                             \
    S_CLONES (LINK, NAME, PARAMS, ARGS, S_WITH_LEVEL)
#else
#   define S_X86_CLONES 0
#   define S_BODY static inline
#   define S_DISPATCH(LINK, NAME, PARAMS, ARGS)                                 \
    LINK void NAME PARAMS { NAME##_body ARGS; }
//  aarch64: NEON's 4-float registers, as x86's generic (SSE) level.
#   define S_DISPATCH_ISA(LINK, NAME, PARAMS, ARGS)                             \
    LINK void NAME PARAMS { NAME##_body (S_EXPAND ARGS, NN_ISA_GENERIC); }
#endif
#define S_EXPAND(...) __VA_ARGS__

//  GCC vector extensions (clang has them too): 4, 8 and 16 floats, each
//  compiled to what the clone's target has (two SSE registers for an s_v8
//  in the generic clone, one AVX register in the others). aligned (4): any
//  float pointer may be loaded. Loads and stores are macros, not functions:
//  a function returning a vector would change ABI between the clones.
typedef float s_v4 __attribute__ ((vector_size (16), aligned (4)));
typedef float s_v8 __attribute__ ((vector_size (32), aligned (4)));
typedef float s_v16 __attribute__ ((vector_size (64), aligned (4)));
#define s_v8_load(p) (*(const s_v8 *) (p))
#define s_v8_store(p, v) (*(s_v8 *) (p) = (v))
#define s_v16_load(p) (*(const s_v16 *) (p))
#define s_v16_store(p, v) (*(s_v16 *) (p) = (v))

#endif
