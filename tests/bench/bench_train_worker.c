/*  bench_train_worker.c: our side of one pipelearn-bench setting, in a
    process of its own.

    pipelearn-bench --worker --model NAME --input HxWxC --batch B
                    --micro-batches M --threads T --images N --repeats R
                    [--warmup W]

    Builds the whole model for micro-batches of B/M samples, trains W
    untimed steps, then R repeats of ceil(N/B) steps (each: M forward and
    backward passes with the loss scaled by 1/M, gradients accumulated, one
    SGD step with momentum), on synthetic 8-bit images converted per batch
    as in training. Prints one JSON line: the medians of images per second
    of wall time and of this process's CPU time, each repeat's figures,
    the resident set before the model is built and this process's peak
    (getrusage: the parent's memory is not in it), and the kernel level
    and OpenBLAS core that ran.
*/
#include "bench_train.h"

#include "nn_alloc.h"
#include "nn_dataset.h"
#include "nn_isa.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "pl_blas.h"
#include "pl_clock.h"

#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define S_POOL 2000                 //  synthetic images, cycled through
#define S_CLASSES 10

typedef struct {
    nn_model_t *model;
    nn_dataset_t *ds;
    float *x, *d;
    int *y, *idx;
    int cursor, batch, micro;
    nn_rng_t rng;                   //  dropout masks (VGG11)
} s_trainer_t;

static int
s_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

double
bench_median (double *v, int n)
{
    qsort (v, (size_t) n, sizeof (double), s_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

//  One mini-batch as `micro` micro-batches: gradient accumulation with the
//  loss scaled by 1/micro, one SGD step (lr 0.01, momentum 0.9, as
//  PyTorch's peer).
static void
s_step (s_trainer_t *t)
{
    int mb = t->batch / t->micro;
    nn_sgd_t sgd = { 0.01f, 0.9f, 0.0f };
    nn_model_zero_grad (t->model);
    for (int k = 0; k < t->micro; k++) {
        for (int i = 0; i < mb; i++)
            t->idx[i] = t->cursor++ % t->ds->count;
        nn_dataset_batch (t->x, t->y, t->ds, t->idx, mb, NULL, NULL);
        const float *out = nn_model_forward (t->model, t->x, mb, true, &t->rng);
        nn_softmax_xent (t->d, out, t->y, mb, S_CLASSES, 1.0f / t->micro, NULL);
        nn_model_backward (t->model, t->d, NULL);
    }
    nn_sgd_step (nn_model_weights (t->model), nn_model_optim_state (t->model),
                 nn_model_grads (t->model), nn_model_params_count (t->model), &sgd);
}

//  Seconds of this process's CPU time (all threads).
static double
s_cpu_seconds (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

//  This process's resident set now, in KiB (0 if /proc says nothing).
static long
s_rss_now_kb (void)
{
    FILE *f = fopen ("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    long kb = 0;
    while (fgets (line, sizeof line, f))
        if (strncmp (line, "VmRSS:", 6) == 0)
            kb = atol (line + 6);
    fclose (f);
    return kb;
}

static int
s_usage (const char *why)
{
    fprintf (stderr, "pipelearn-bench --worker: %s\n", why);
    return 2;
}

int
bench_worker_main (int argc, char **argv)
{
    const char *model = NULL;
    int h = 0, w = 0, c = 0, batch = 0, micro = 1, threads = 1, images = 0, repeats = 0;
    int warmup = 2;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' }, { "input", required_argument, NULL, 'i' },
        { "batch", required_argument, NULL, 'b' },
        { "micro-batches", required_argument, NULL, 'k' },
        { "threads", required_argument, NULL, 't' }, { "images", required_argument, NULL, 'n' },
        { "repeats", required_argument, NULL, 'r' }, { "warmup", required_argument, NULL, 'w' },
        { NULL, 0, NULL, 0 }
    };
    int opt;
    while ((opt = getopt_long (argc, argv, "", opts, NULL)) != -1)
        switch (opt) {
            case 'm': model = optarg; break;
            case 'i':
                if (sscanf (optarg, "%dx%dx%d", &h, &w, &c) != 3)
                    return s_usage ("--input wants HxWxC");
                break;
            case 'b': batch = atoi (optarg); break;
            case 'k': micro = atoi (optarg); break;
            case 't': threads = atoi (optarg); break;
            case 'n': images = atoi (optarg); break;
            case 'r': repeats = atoi (optarg); break;
            case 'w': warmup = atoi (optarg); break;
            default: return s_usage ("unknown option");
        }
    if (!model || h < 1 || w < 1 || c < 1 || batch < 1 || micro < 1 || batch % micro
        || threads < 1 || images < 1 || repeats < 1 || repeats > BENCH_MAX_REPEATS
        || warmup < 0)
        return s_usage ("need --model, --input, --batch, --micro-batches dividing it, "
                        "--threads, --images, --repeats");
    char err[256];
    nn_model_spec_t spec;
    if (nn_model_spec_by_name (&spec, model, c, h, w, S_CLASSES, err, sizeof err))
        return s_usage (err);
    long rss_start = s_rss_now_kb ();
    s_trainer_t t = { .batch = batch, .micro = micro };
    int mb = batch / micro;
    t.model = nn_model_new (&spec, 0, spec.units_count, mb, err, sizeof err);
    if (!t.model)
        return s_usage (err);
    //  The model's threads split each layer's batch; OpenBLAS under them
    //  runs one (nn_model_set_threads's contract), as in pipelearn's
    //  daemons and the PyTorch peer (torch_bench.py). Left at its default
    //  (a thread per core) it spins in sched_yield between products and
    //  that CPU time lands in our figure.
    pl_blas_set_threads (1);
    nn_model_set_threads (t.model, threads);
    nn_rng_seed (&t.rng, 1);
    nn_model_init (t.model, &t.rng);
    t.ds = nn_dataset_synthetic (S_POOL, h, w, c, S_CLASSES, 1);
    t.x = nn_alloc_aligned (sizeof (float) * (size_t) h * w * c * (size_t) mb);
    t.y = nn_malloc (sizeof (int) * (size_t) mb);
    t.idx = nn_malloc (sizeof (int) * (size_t) mb);
    t.d = nn_malloc (sizeof (float) * S_CLASSES * (size_t) mb);
    for (int i = 0; i < warmup; i++)
        s_step (&t);
    int steps = (images + batch - 1) / batch;
    double wall[BENCH_MAX_REPEATS], cpu[BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        double t0 = pl_monotonic (), c0 = s_cpu_seconds ();
        for (int k = 0; k < steps; k++)
            s_step (&t);
        double t1 = pl_monotonic (), c1 = s_cpu_seconds ();
        wall[r] = steps * batch / (t1 - t0);
        cpu[r] = steps * batch / (c1 - c0);
    }
    struct rusage ru;
    getrusage (RUSAGE_SELF, &ru);
    cJSON *out = cJSON_CreateObject ();
    cJSON_AddStringToObject (out, "impl", "pipelearn");
    cJSON_AddStringToObject (out, "model", spec.name);
    cJSON_AddItemToObject (out, "runs_wall", cJSON_CreateDoubleArray (wall, repeats));
    cJSON_AddItemToObject (out, "runs_cpu", cJSON_CreateDoubleArray (cpu, repeats));
    cJSON_AddNumberToObject (out, "images_per_s", bench_median (wall, repeats));
    cJSON_AddNumberToObject (out, "images_per_cpu_s", bench_median (cpu, repeats));
    cJSON_AddNumberToObject (out, "rss_start_kb", (double) rss_start);
    cJSON_AddNumberToObject (out, "peak_rss_kb", (double) ru.ru_maxrss);
    cJSON_AddNumberToObject (out, "params", (double) nn_model_params_count (t.model));
    cJSON_AddStringToObject (out, "kernels", nn_isa_name (nn_isa_active ()));
    cJSON_AddStringToObject (out, "openblas_core", pl_blas_corename ());
    char *text = cJSON_PrintUnformatted (out);
    printf ("%s\n", text);
    free (text);
    cJSON_Delete (out);
    nn_free (t.x), nn_free (t.y), nn_free (t.idx), nn_free (t.d);
    nn_dataset_destroy (&t.ds);
    nn_model_destroy (&t.model);
    return 0;
}
