/*  nn_isa.c: the kernels' instruction-set level (see nn_isa.h). */
#include "nn_isa.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *s_names[] = { "generic", "avx2", "avx512", "neon" };

nn_isa_t
nn_isa_cpu (void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init ();
    if (__builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512bw")
        && __builtin_cpu_supports ("avx512dq") && __builtin_cpu_supports ("avx512vl"))
        return NN_ISA_AVX512;
    if (__builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma"))
        return NN_ISA_AVX2;
#elif defined(__aarch64__)
    return NN_ISA_NEON;
#endif
    return NN_ISA_GENERIC;
}

bool
nn_isa_runs (nn_isa_t isa)
{
    nn_isa_t cpu = nn_isa_cpu ();
    if (isa == NN_ISA_GENERIC || isa == cpu)
        return true;
    //  The x86 levels nest; neon is aarch64's only one.
    return cpu != NN_ISA_NEON && isa != NN_ISA_NEON && isa < cpu;
}

int
nn_isa_parse (const char *name, nn_isa_t *isa)
{
    for (int i = 0; i < (int) (sizeof s_names / sizeof s_names[0]); i++)
        if (name && strcmp (name, s_names[i]) == 0) {
            *isa = (nn_isa_t) i;
            return 0;
        }
    return -1;
}

const char *
nn_isa_name (nn_isa_t isa)
{
    return isa >= NN_ISA_GENERIC && isa <= NN_ISA_NEON ? s_names[isa] : "unknown";
}

nn_isa_t
nn_isa_resolve (const char *request, bool *valid)
{
    nn_isa_t cpu = nn_isa_cpu (), want = cpu;
    bool ok = true;
    if (request && *request)
        ok = nn_isa_parse (request, &want) == 0 && nn_isa_runs (want);
    if (valid)
        *valid = ok;
    return ok ? want : cpu;
}

//  -1 until the first call; then the level, for the life of the process.
//  Written once (every writer computes the same value from the same
//  environment and CPU), so it is a cached constant, not state.
static atomic_int s_active = -1;

nn_isa_t
nn_isa_active (void)
{
    int isa = atomic_load_explicit (&s_active, memory_order_relaxed);
    if (isa < 0) {
        isa = (int) nn_isa_resolve (getenv (NN_ISA_ENV), NULL);
        atomic_store_explicit (&s_active, isa, memory_order_relaxed);
    }
    return (nn_isa_t) isa;
}
