/*  pl_blas.c: OpenBLAS core detection and re-exec (see pl_blas.h). */
#include "pl_blas.h"

#include "nn_isa.h"
#include "pl_log.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

//  Declared by OpenBLAS but not in every cblas.h.
char *openblas_get_corename (void);
void openblas_set_num_threads (int);

#define S_REEXEC_MARK "PIPELEARN_BLAS_REEXEC"

//  Cores older than AVX2: on a CPU with AVX2 these leave most speed unused.
static const char *s_pre_avx2[] = {
    "prescott", "katmai", "coppermine", "northwood", "banias", "core2", "penryn",
    "dunnington", "nehalem", "atom", "barcelona", "opteron", "opteron_sse3",
    "bobcat", "sandybridge", "bulldozer", "piledriver", "steamroller",
    "excavator", "generic", "unknown", NULL
};

static bool
s_is_pre_avx2 (const char *corename)
{
    for (int i = 0; s_pre_avx2[i]; i++)
        if (strcasecmp (corename, s_pre_avx2[i]) == 0)
            return true;
    return false;
}

const char *
pl_blas_choose_coretype (const char *corename, bool avx2, bool avx512)
{
    if (!corename || !avx2 || !s_is_pre_avx2 (corename))
        return NULL;
    return avx512 ? "SkylakeX" : "Haswell";
}

const char *
pl_blas_corename (void)
{
    const char *name = openblas_get_corename ();
    return name ? name : "unknown";
}

//  libgomp's default wait policy spins idle threads for a long time; on a
//  host shared with other processes (a server and its devices, a client
//  and its I/O threads) the spinning steals the core the working thread
//  needs (docs/architecture.md, "Measurements"). A bounded spin keeps the fast
//  hand-off without the theft. Like OPENBLAS_CORETYPE, it is read when the
//  library loads, so it is set by re-executing.
#define S_GOMP_SPINCOUNT "100000"

//  The level of our own kernels, and why.
static void
s_log_isa (void)
{
    const char *request = getenv (NN_ISA_ENV);
    nn_isa_t cpu = nn_isa_cpu (), isa = nn_isa_active ();
    if (request && *request)
        pl_log_info ("kernels: %s (%s=%s; the CPU runs %s)", nn_isa_name (isa), NN_ISA_ENV,
                     request, nn_isa_name (cpu));
    else
        pl_log_info ("kernels: %s", nn_isa_name (isa));
}

int
pl_blas_setup (char **argv)
{
    const char *core = pl_blas_corename ();
    const char *user = getenv ("OPENBLAS_CORETYPE");
    const char *request = getenv (NN_ISA_ENV);
    nn_isa_t want;
    if (request && *request && nn_isa_parse (request, &want)) {
        pl_log_error ("%s=%s: not a kernel level (generic, avx2, avx512, neon)", NN_ISA_ENV,
                      request);
        return -1;
    }
    if (request && *request && !nn_isa_runs (want)) {
        pl_log_error ("%s=%s: this CPU cannot run that level (it runs %s)", NN_ISA_ENV,
                      request, nn_isa_name (nn_isa_cpu ()));
        return -1;
    }
    if (getenv (S_REEXEC_MARK)) {
        const char *mark = getenv (S_REEXEC_MARK);
        if (strcmp (mark, "blas") == 0)
            pl_log_info ("openblas: core %s (selected by pipelearn: this OpenBLAS does "
                         "not recognise the CPU)", core);
        else
            pl_log_info ("openblas: core %s", core);
        unsetenv (S_REEXEC_MARK);
        s_log_isa ();
        return 0;
    }
    bool reexec = false;
    const char *mark = "omp";
    if (!getenv ("OMP_WAIT_POLICY") && !getenv ("GOMP_SPINCOUNT")) {
        setenv ("GOMP_SPINCOUNT", S_GOMP_SPINCOUNT, 1);
        reexec = true;
    }
    if (user && *user)
        pl_log_info ("openblas: core %s (OPENBLAS_CORETYPE=%s set by the user)", core, user);
    else {
        //  The correction is for x86 cores only; elsewhere (aarch64) OpenBLAS's
        //  own choice stands.
        bool avx2 = false, avx512 = false;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init ();
        avx2 = __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma");
        avx512 = __builtin_cpu_supports ("avx512f");
#endif
        const char *want = pl_blas_choose_coretype (core, avx2, avx512);
        if (want) {
            pl_log_info ("openblas: core %s on a CPU with %s; re-running with "
                         "OPENBLAS_CORETYPE=%s", core, avx512 ? "AVX-512" : "AVX2", want);
            setenv ("OPENBLAS_CORETYPE", want, 1);
            reexec = true;
            mark = "blas";
        }
        else if (!reexec)
            pl_log_info ("openblas: core %s", core);
    }
    if (!reexec) {
        s_log_isa ();
        return 0;
    }
    setenv (S_REEXEC_MARK, mark, 1);
    //  Through the binary's real path, not /proc/self/exe: the kernel names
    //  a process after the file it executes, and a daemon named "exe" is
    //  one that `systemctl status` and `pgrep pipelearn-server` cannot find.
    char self[4096];
    ssize_t len = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (len > 0 && (size_t) len < sizeof self - 1) {
        self[len] = '\0';
        execv (self, argv);
    }
    execv ("/proc/self/exe", argv);
    //  Still here: carry on with what we have rather than fail.
    pl_log_warn ("re-exec failed (%s); continuing with OpenBLAS core %s",
                 strerror (errno), core);
    unsetenv (S_REEXEC_MARK);
    s_log_isa ();
    return 0;
}

int
pl_blas_set_threads (int threads)
{
    if (threads <= 0) {
        long n = sysconf (_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int) n : 1;
    }
    openblas_set_num_threads (threads);
    return threads;
}
