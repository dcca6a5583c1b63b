/*  pipelearn-bench: training throughput of our VGG5 against PyTorch's,
    measured in the same run, on the same shapes, with the same threads.

    pipelearn-bench [--threads T] [--images N] [--repeats R] [--no-torch]
                    [--no-rss] [--json FILE] [--micro M] [--isa LEVEL] [--cpu-time]

    For each setting (batch 100 whole; batch 100 as 4 micro-batches of 25;
    as 10 micro-batches of 10 — what the PipeLearn pipeline feeds each
    side) it times R repeats of N images and prints the medians, PyTorch's
    medians and the ratio. With --rss it also runs pipelearn-train for one
    epoch on all of Fashion-MNIST and reports its peak RSS beyond the
    dataset's 8-bit size.

    --isa generic|avx2|avx512 runs as a CPU of that kind would: our
    kernels at that level (PIPELEARN_ISA), OpenBLAS on that level's cores
    (OPENBLAS_CORETYPE Haswell for avx2, Prescott for generic, unless set)
    and PyTorch restricted to it (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA);
    the process re-executes itself once with those set, since OpenBLAS
    reads its core when it loads. It also prints this host's single-core
    OpenBLAS sgemm peak and the share of it VGG5's convolutions reach.

    --cpu-time divides images by each side's process CPU time instead of
    wall time: on a machine shared with other jobs, time-sharing stretches
    wall time but not CPU time. With --threads 1 that is each side's
    compute; with more threads it also counts OpenMP's spin-waiting.
*/
#include "nn_alloc.h"
#include "nn_dataset.h"
#include "nn_kernels.h"
#include "nn_isa.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "pl_blas.h"
#include "pl_log.h"
#include "pl_timeline.h"

#include <cJSON.h>
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR "."
#endif
#ifndef PL_BUILD_DIR
#define PL_BUILD_DIR "build"
#endif

typedef struct {
    int batch, micro;
} s_setting_t;

static const s_setting_t s_settings[] = { { 100, 1 }, { 100, 4 }, { 100, 10 } };
#define S_SETTINGS 3
#define S_MAX_REPEATS 15

static int
s_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double
s_median (double *v, int n)
{
    qsort (v, (size_t) n, sizeof (double), s_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

//  One mini-batch of `batch` images as `micro` micro-batches: gradient
//  accumulation with the loss scaled by 1/micro, one SGD step.
static void
s_step (nn_model_t *m, const nn_dataset_t *ds, int *cursor, const s_setting_t *s,
        float *x, int *y, float *d, int *idx)
{
    int mb = s->batch / s->micro;
    nn_sgd_t sgd = { 0.01f, 0.9f, 0.0f };
    nn_model_zero_grad (m);
    for (int k = 0; k < s->micro; k++) {
        for (int i = 0; i < mb; i++)
            idx[i] = (*cursor)++ % ds->count;
        nn_dataset_batch (x, y, ds, idx, mb, NULL, NULL);
        const float *out = nn_model_forward (m, x, mb, true, NULL);
        nn_softmax_xent (d, out, y, mb, 10, 1.0f / s->micro, NULL);
        nn_model_backward (m, d, NULL);
    }
    nn_sgd_step (nn_model_weights (m), nn_model_optim_state (m), nn_model_grads (m),
                 nn_model_params_count (m), &sgd);
}

//  Seconds of this process's CPU time (all threads).
static double
s_cpu_seconds (void)
{
    struct timespec t;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

static double
s_ours (const s_setting_t *s, int threads, int images, int repeats, bool cpu_time,
        double *runs)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    int mb = s->batch / s->micro;
    nn_model_t *m = nn_model_new (&spec, 0, spec.units_count, mb, NULL, 0);
    nn_model_set_threads (m, threads);
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    nn_model_init (m, &rng);
    //  8-bit pixels converted per batch, as in training.
    nn_dataset_t *ds = nn_dataset_synthetic (2000, 28, 28, 1, 10, 1);
    float *x = nn_alloc_aligned (sizeof (float) * 784 * (size_t) mb);
    int *y = nn_malloc (sizeof (int) * (size_t) mb), *idx = nn_malloc (sizeof (int) * (size_t) mb);
    float *d = nn_malloc (sizeof (float) * 10 * (size_t) mb);
    int cursor = 0;
    for (int w = 0; w < 5; w++)
        s_step (m, ds, &cursor, s, x, y, d, idx);
    int steps = (images + s->batch - 1) / s->batch;
    for (int r = 0; r < repeats; r++) {
        double t0 = cpu_time ? s_cpu_seconds () : pl_monotonic ();
        for (int k = 0; k < steps; k++)
            s_step (m, ds, &cursor, s, x, y, d, idx);
        double t1 = cpu_time ? s_cpu_seconds () : pl_monotonic ();
        runs[r] = steps * s->batch / (t1 - t0);
    }
    nn_free (x), nn_free (y), nn_free (idx), nn_free (d);
    nn_dataset_destroy (&ds);
    nn_model_destroy (&m);
    double copy[S_MAX_REPEATS];
    memcpy (copy, runs, sizeof (double) * (size_t) repeats);
    return s_median (copy, repeats);
}

//  PyTorch's figure for the same setting, from tests/bench/torch_vgg5.py.
static double
s_torch (const s_setting_t *s, int threads, int images, int repeats, bool cpu_time,
         char *version, size_t version_size)
{
    char cmd[2048], line[8192] = "";
    snprintf (cmd, sizeof cmd,
              "/usr/bin/python3 %s/tests/bench/torch_vgg5.py --batch %d --micro-batches %d "
              "--threads %d --images %d --repeats %d%s 2>/dev/null",
              PL_SOURCE_DIR, s->batch, s->micro, threads, images, repeats,
              cpu_time ? " --cpu-time" : "");
    FILE *p = popen (cmd, "r");
    if (!p)
        return -1.0;
    char buf[8192];
    while (fgets (buf, sizeof buf, p))
        if (buf[0] == '{')
            snprintf (line, sizeof line, "%s", buf);
    if (pclose (p) != 0)
        return -1.0;
    cJSON *j = cJSON_Parse (line);
    cJSON *v = cJSON_GetObjectItem (j, "images_per_s");
    double rate = cJSON_IsNumber (v) ? v->valuedouble : -1.0;
    cJSON *ver = cJSON_GetObjectItem (j, "version");
    if (cJSON_IsString (ver))
        snprintf (version, version_size, "%s", ver->valuestring);
    cJSON_Delete (j);
    return rate;
}

//  Peak RSS of pipelearn-train over one full Fashion-MNIST epoch, in KiB.
static long
s_train_rss (int threads, double *acc)
{
    char cmd[2048], path[256], buf[1 << 16];
    char dir[] = "/tmp/pl-bench-XXXXXX";
    if (!mkdtemp (dir))
        return -1;
    snprintf (cmd, sizeof cmd, "%s/server/pipelearn-train --threads %d --results %s --quiet "
              ">/dev/null 2>&1", PL_BUILD_DIR, threads, dir);
    if (system (cmd) != 0)
        return -1;
    snprintf (path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen (path, "r");
    if (!f)
        return -1;
    buf[fread (buf, 1, sizeof buf - 1, f)] = '\0';
    fclose (f);
    cJSON *j = cJSON_Parse (buf);
    long rss = (long) cJSON_GetObjectItem (j, "peak_rss_kb")->valuedouble;
    *acc = cJSON_GetObjectItem (cJSON_GetArrayItem (cJSON_GetObjectItem (j, "epochs"), 0),
                                "test_acc")->valuedouble;
    cJSON_Delete (j);
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    if (system (cmd) != 0)
        pl_log_warn ("could not remove %s", dir);
    return rss;
}

//  --isa: the environment a CPU of that kind gives, then one re-exec so
//  that OpenBLAS loads with it. 0 to go on, 2 for a bad level.
static int
s_isa_env (int argc, char **argv)
{
    const char *level = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp (argv[i], "--isa") == 0 && i + 1 < argc)
            level = argv[i + 1];
        else if (strncmp (argv[i], "--isa=", 6) == 0)
            level = argv[i] + 6;
    }
    nn_isa_t isa;
    if (!level)
        return 0;
    if (nn_isa_parse (level, &isa)) {
        fprintf (stderr, "pipelearn-bench: --isa %s: want generic, avx2, avx512 or neon\n",
                 level);
        return 2;
    }
    const char *have = getenv (NN_ISA_ENV);
    if (have && strcmp (have, level) == 0)
        return 0;                       //  set (by us, or by the user): go on
    static const char *blas[] = { "Prescott", "Haswell", NULL, NULL };
    static const char *aten[] = { "default", "avx2", "avx512", NULL };
    static const char *dnnl[] = { "SSE41", "AVX2", "AVX512_CORE", NULL };
    setenv (NN_ISA_ENV, level, 1);
    if (blas[isa] && !getenv ("OPENBLAS_CORETYPE"))
        setenv ("OPENBLAS_CORETYPE", blas[isa], 1);
    if (aten[isa])
        setenv ("ATEN_CPU_CAPABILITY", aten[isa], 1);
    if (dnnl[isa])
        setenv ("DNNL_MAX_CPU_ISA", dnnl[isa], 1);
    execv ("/proc/self/exe", argv);
    fprintf (stderr, "pipelearn-bench: re-exec for --isa failed\n");
    return 2;
}

//  The best of 5 single-thread sgemms of 1024^3, in GFLOP/s.
static double
s_sgemm_peak (void)
{
    const int n = 1024;
    float *a = nn_alloc_aligned (sizeof (float) * n * n);
    float *b = nn_alloc_aligned (sizeof (float) * n * n);
    float *c = nn_alloc_aligned (sizeof (float) * n * n);
    for (int i = 0; i < n * n; i++)
        a[i] = (float) (i % 7) * 0.1f, b[i] = (float) (i % 5) * 0.1f;
    double best = 0.0;
    for (int r = 0; r < 6; r++) {
        double t0 = pl_monotonic ();
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                     0.0f, c, n);
        double rate = 2.0 * n * n * n / (pl_monotonic () - t0) / 1e9;
        if (r > 0 && rate > best)
            best = rate;
    }
    nn_free (a), nn_free (b), nn_free (c);
    return best;
}

//  VGG5's three convolutions at batch 100 on one thread: forward and
//  backward (weights, and input but for the first), the best of 5, in
//  GFLOP/s of the matrix work (2 * pixels * k * r*s*c per product).
static double
s_conv_rate (int repeats)
{
    static const nn_conv_shape_t shapes[] = {
        { .n = 100, .h = 28, .w = 28, .c = 1, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1 },
        { .n = 100, .h = 14, .w = 14, .c = 32, .k = 64, .r = 3, .s = 3, .stride = 1, .pad = 1 },
        { .n = 100, .h = 7, .w = 7, .c = 64, .k = 64, .r = 3, .s = 3, .stride = 1, .pad = 1 },
    };
    double flops = 0.0, secs = 0.0;
    nn_rng_t rng;
    nn_rng_seed (&rng, 7);
    for (int l = 0; l < 3; l++) {
        nn_conv_shape_t sh = shapes[l];
        nn_conv_shape_finish (&sh);
        size_t in = (size_t) sh.n * sh.h * sh.w * sh.c, out = (size_t) sh.n * sh.p * sh.q * sh.k;
        size_t wn = (size_t) sh.k * sh.r * sh.s * sh.c;
        float *x = nn_alloc_aligned (sizeof (float) * in), *dx = nn_alloc_aligned (sizeof (float) * in);
        float *y = nn_alloc_aligned (sizeof (float) * out), *dy = nn_alloc_aligned (sizeof (float) * out);
        float *w = nn_alloc_aligned (sizeof (float) * wn), *dw = nn_alloc_aligned (sizeof (float) * wn);
        float *scratch = nn_alloc_aligned (sizeof (float) * nn_conv2d_scratch_count (&sh));
        for (size_t i = 0; i < in; i++)
            x[i] = (float) nn_rng_normal (&rng);
        for (size_t i = 0; i < out; i++)
            dy[i] = (float) nn_rng_normal (&rng);
        for (size_t i = 0; i < wn; i++)
            w[i] = (float) (0.1 * nn_rng_normal (&rng));
        bool first = l == 0;
        double best = 1e30;
        for (int r = 0; r < repeats + 1; r++) {
            double t0 = pl_monotonic ();
            nn_conv2d_forward (y, x, w, NULL, &sh, scratch);
            nn_conv2d_backward (first ? NULL : dx, dw, NULL, dy, x, w, &sh, scratch);
            double t = pl_monotonic () - t0;
            if (r > 0 && t < best)
                best = t;
        }
        flops += (first ? 2.0 : 3.0) * 2.0 * sh.n * sh.p * sh.q * (double) wn;
        secs += best;
        nn_free (x), nn_free (dx), nn_free (y), nn_free (dy), nn_free (w), nn_free (dw);
        nn_free (scratch);
    }
    return flops / secs / 1e9;
}

int
main (int argc, char **argv)
{
    int isa_rc = s_isa_env (argc, argv);
    if (isa_rc)
        return isa_rc;
    if (pl_blas_setup (argv))
        return 2;
    int threads = 2, images = 2000, repeats = 5;
    bool torch = true, rss = true, cpu_time = false;
    int only_micro = 0;             //  0: every setting; else that micro-batch size
    const char *json_path = NULL;
    static const struct option opts[] = {
        { "threads", required_argument, NULL, 't' }, { "images", required_argument, NULL, 'n' },
        { "repeats", required_argument, NULL, 'r' }, { "no-torch", no_argument, NULL, 'T' },
        { "no-rss", no_argument, NULL, 'R' }, { "json", required_argument, NULL, 'j' },
        { "micro", required_argument, NULL, 'm' }, { "isa", required_argument, NULL, 'i' },
        { "cpu-time", no_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 }
    };
    int c;
    while ((c = getopt_long (argc, argv, "t:n:r:TRj:m:i:c", opts, NULL)) != -1)
        switch (c) {
            case 't': threads = atoi (optarg); break;
            case 'n': images = atoi (optarg); break;
            case 'r': repeats = atoi (optarg); break;
            case 'T': torch = false; break;
            case 'c': cpu_time = true; break;
            case 'R': rss = false; break;
            case 'j': json_path = optarg; break;
            case 'm': only_micro = atoi (optarg); break;
            case 'i': break;            //  taken by s_isa_env
            default:
                fprintf (stderr, "usage: pipelearn-bench [--threads T] [--images N] "
                         "[--repeats R] [--no-torch] [--no-rss] [--json FILE] [--micro M] "
                         "[--isa LEVEL] [--cpu-time]\n");
                return 2;
        }
    if (threads < 1 || images < 100 || repeats < 1 || repeats > S_MAX_REPEATS) {
        fprintf (stderr, "pipelearn-bench: need threads >= 1, images >= 100, 1 <= repeats <= %d\n",
                 S_MAX_REPEATS);
        return 2;
    }
    pl_blas_set_threads (1);
    char version[64] = "-";
    cJSON *out = cJSON_CreateObject ();
    cJSON_AddStringToObject (out, "openblas_core", pl_blas_corename ());
    cJSON_AddStringToObject (out, "kernels", nn_isa_name (nn_isa_active ()));
    cJSON_AddNumberToObject (out, "threads", threads);
    cJSON_AddStringToObject (out, "clock", cpu_time ? "cpu" : "wall");
    cJSON *rows = cJSON_AddArrayToObject (out, "settings");
    printf ("VGG5 training, 28x28x1, %d thread(s), OpenBLAS core %s, kernels %s, "
            "median of %d x %d images%s\n", threads, pl_blas_corename (),
            nn_isa_name (nn_isa_active ()), repeats, images,
            cpu_time ? ", images per second of CPU time" : "");
    double peak = s_sgemm_peak (), conv = s_conv_rate (5);
    cJSON_AddNumberToObject (out, "sgemm_peak_gflops", peak);
    cJSON_AddNumberToObject (out, "conv_gflops", conv);
    printf ("one core: OpenBLAS sgemm 1024^3 %.1f GFLOP/s; VGG5's convolutions at batch 100 "
            "(forward + backward) %.1f GFLOP/s = %.0f%% of it\n", peak, conv,
            100.0 * conv / peak);
    printf ("%-8s %-6s %14s %14s %8s\n", "batch", "micro", "ours img/s", "torch img/s", "ratio");
    for (int i = 0; i < S_SETTINGS; i++) {
        const s_setting_t *s = &s_settings[i];
        if (only_micro && s->batch / s->micro != only_micro)
            continue;
        double runs[S_MAX_REPEATS];
        //  Interleave: ours, then PyTorch, per setting, so drift hits both.
        double ours = s_ours (s, threads, images, repeats, cpu_time, runs);
        double peer = torch ? s_torch (s, threads, images, repeats, cpu_time, version,
                                       sizeof version)
                            : -1.0;
        char peer_s[32] = "-", ratio_s[32] = "-";
        if (peer > 0) {
            snprintf (peer_s, sizeof peer_s, "%.0f", peer);
            snprintf (ratio_s, sizeof ratio_s, "%.2fx", ours / peer);
        }
        printf ("%-8d %-6d %14.0f %14s %8s\n", s->batch, s->batch / s->micro, ours, peer_s, ratio_s);
        fflush (stdout);
        cJSON *row = cJSON_CreateObject ();
        cJSON_AddNumberToObject (row, "batch", s->batch);
        cJSON_AddNumberToObject (row, "micro_batch", s->batch / s->micro);
        cJSON_AddNumberToObject (row, "ours_images_per_s", ours);
        cJSON_AddItemToObject (row, "ours_runs", cJSON_CreateDoubleArray (runs, repeats));
        if (peer > 0) {
            cJSON_AddNumberToObject (row, "torch_images_per_s", peer);
            cJSON_AddNumberToObject (row, "ratio", ours / peer);
        }
        cJSON_AddItemToArray (rows, row);
    }
    if (torch)
        printf ("PyTorch %s (python3-torch), same threads, same model and batch shapes\n", version);
    if (rss) {
        double acc = 0.0;
        long kb = s_train_rss (threads, &acc);
        //  70000 images of 784 bytes plus their labels, as stored.
        long dataset_kb = (70000L * 785L) / 1024;
        if (kb > 0) {
            printf ("pipelearn-train, 1 epoch of Fashion-MNIST: peak RSS %ld KiB = dataset %ld "
                    "KiB + %ld KiB (%.1f MiB); test accuracy %.2f%%\n", kb, dataset_kb,
                    kb - dataset_kb, (kb - dataset_kb) / 1024.0, 100.0 * acc);
            cJSON_AddNumberToObject (out, "train_peak_rss_kb", (double) kb);
            cJSON_AddNumberToObject (out, "train_rss_beyond_dataset_kb", (double) (kb - dataset_kb));
            cJSON_AddNumberToObject (out, "train_test_acc", acc);
        }
        else
            printf ("pipelearn-train RSS run failed (is dataset-fashion-mnist installed?)\n");
    }
    if (json_path) {
        char *text = cJSON_Print (out);
        FILE *f = fopen (json_path, "w");
        if (f) {
            fprintf (f, "%s\n", text);
            fclose (f);
        }
        free (text);
    }
    cJSON_Delete (out);
    return 0;
}
