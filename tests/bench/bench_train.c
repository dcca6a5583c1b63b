/*  pipelearn-bench: training throughput of one of our models against
    PyTorch's twin of it (tests/torch_models.py), measured in the same run,
    on the same shapes, with the same threads.

    pipelearn-bench [--model NAME] [--input HxWxC[,HxWxC...]] [--batch B]
                    [--micro M[,M...]] [--threads T] [--images N]
                    [--repeats R] [--warmup W] [--no-torch] [--json FILE]
                    [--isa LEVEL] [--train-rss]

    For each input shape (default 28x28x1 and 32x32x3; a model that needs
    32x32, VGG11, takes 28x28 padded to 32x32 as "pad_to": 32 does) and
    each setting (batch B whole, and B as B/M micro-batches of M for each M
    of --micro, default 25 and 10: what the PipeLearn pipeline feeds each
    side) it trains R repeats of N images (forward, backward, one SGD step
    with momentum per batch) and prints, for ours and for PyTorch, the
    medians of images per second of wall time and of each side's CPU time,
    the two ratios, and each side's peak RSS. Each side of each setting
    runs in a process of its own (ours: this program with --worker;
    PyTorch: tests/bench/torch_bench.py), one after the other, so that a
    peak RSS is one side's alone and neither side's threads compete with
    the other's. "+" figures are the peak beyond the process's resident set
    before the model was built (the program and its libraries: for PyTorch,
    the interpreter and libtorch).

    On a machine shared with other jobs, time-sharing stretches wall time
    but not CPU time: with --threads 1 the CPU-time figures are each side's
    compute, and the steadier ratio; with more threads CPU time also counts
    OpenMP's spin-waiting.

    --isa generic|avx2|avx512 runs as a CPU of that kind would: our
    kernels at that level (PIPELEARN_ISA), OpenBLAS on that level's cores
    (OPENBLAS_CORETYPE Haswell for avx2, Prescott for generic, unless set)
    and PyTorch restricted to it (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA);
    the process re-executes itself once with those set, since OpenBLAS
    reads its core when it loads. Every row names the kernel level and
    OpenBLAS core our worker ran and PyTorch's ATen level.

    --train-rss also runs pipelearn-train for one epoch on all of
    Fashion-MNIST (VGG5, the default config) and reports its peak RSS
    beyond the dataset's 8-bit size.
*/
#include "bench_train.h"

#include "nn_isa.h"
#include "nn_model.h"
#include "pl_blas.h"
#include "pl_log.h"

#include <cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR "."
#endif
#ifndef PL_BUILD_DIR
#define PL_BUILD_DIR "build"
#endif

#define S_MAX_LIST 8                //  input shapes, micro-batch sizes
#define S_CLASSES 10

typedef struct {
    int h, w, c;
} s_input_t;

//  The figures of one side of one setting, as its process printed them.
typedef struct {
    bool ok;
    double per_s, per_cpu_s;        //  medians, images per second
    double rss_start_kb, peak_rss_kb;
    char level[32];                 //  ours: kernel level; PyTorch: ATen's
    char core[32];                  //  ours: OpenBLAS core; PyTorch: version
    cJSON *json;                    //  the whole line, owned
} s_side_t;

//  "model name" of /proc/cpuinfo (x86), else "CPU part"/"Hardware", else
//  "unknown", into buf.
static void
s_cpu_name (char *buf, size_t size)
{
    snprintf (buf, size, "unknown");
    FILE *f = fopen ("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets (line, sizeof line, f)) {
        char *colon = strchr (line, ':');
        if (!colon || (strncmp (line, "model name", 10) && strncmp (line, "Hardware", 8)))
            continue;
        colon += 1 + strspn (colon + 1, " \t");
        colon[strcspn (colon, "\n")] = '\0';
        snprintf (buf, size, "%s", colon);
        break;
    }
    fclose (f);
}

//  Runs cmd (stderr folded into stdout) and parses the last line that
//  starts with '{'. On failure prints what the command said and returns a
//  side with ok false.
static s_side_t
s_run_side (const char *cmd, const char *level_key, const char *core_key)
{
    s_side_t side = { .ok = false };
    char full[8300], said[8192] = "", line[8192], json[8192] = "";
    snprintf (full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen (full, "r");
    if (!p)
        return side;
    while (fgets (line, sizeof line, p)) {
        if (line[0] == '{')
            snprintf (json, sizeof json, "%s", line);
        else if (strlen (said) + strlen (line) < sizeof said)
            strcat (said, line);
    }
    int rc = pclose (p);
    cJSON *j = rc == 0 ? cJSON_Parse (json) : NULL;
    const cJSON *rate = cJSON_GetObjectItem (j, "images_per_s");
    const cJSON *cpu = cJSON_GetObjectItem (j, "images_per_cpu_s");
    const cJSON *start = cJSON_GetObjectItem (j, "rss_start_kb");
    const cJSON *peak = cJSON_GetObjectItem (j, "peak_rss_kb");
    const cJSON *level = cJSON_GetObjectItem (j, level_key);
    const cJSON *core = cJSON_GetObjectItem (j, core_key);
    if (!cJSON_IsNumber (rate) || !cJSON_IsNumber (cpu) || !cJSON_IsNumber (start)
        || !cJSON_IsNumber (peak) || !cJSON_IsString (level) || !cJSON_IsString (core)) {
        fprintf (stderr, "pipelearn-bench: `%s` failed (exit %d):\n%s%s", cmd, rc, said, json);
        cJSON_Delete (j);
        return side;
    }
    side.ok = true;
    side.per_s = rate->valuedouble, side.per_cpu_s = cpu->valuedouble;
    side.rss_start_kb = start->valuedouble, side.peak_rss_kb = peak->valuedouble;
    snprintf (side.level, sizeof side.level, "%s", level->valuestring);
    snprintf (side.core, sizeof side.core, "%s", core->valuestring);
    side.json = j;
    return side;
}

//  "28x28x1,32x32x3" into list; the count, or -1 if malformed.
static int
s_parse_inputs (const char *text, s_input_t *list)
{
    int n = 0;
    for (const char *p = text; *p && n < S_MAX_LIST; n++) {
        int used = 0;
        if (sscanf (p, "%dx%dx%d%n", &list[n].h, &list[n].w, &list[n].c, &used) != 3
            || list[n].h < 1 || list[n].w < 1 || list[n].c < 1)
            return -1;
        p += used;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return n;
}

//  "25,10" into list; the count, or -1 if malformed.
static int
s_parse_ints (const char *text, int *list)
{
    int n = 0;
    for (const char *p = text; *p && n < S_MAX_LIST; n++) {
        char *end;
        long v = strtol (p, &end, 10);
        if (end == p || v < 1 || v > 100000)
            return -1;
        list[n] = (int) v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

//  The shape the model is timed on for `in`: `in` itself, or padded up to
//  a multiple of 32 when the model refuses it and takes that (VGG11 on
//  28x28, as "pad_to": 32 does). -1 with the model's message if neither.
static int
s_fit_input (const char *model, s_input_t in, s_input_t *fit, char *err, size_t err_size)
{
    nn_model_spec_t spec;
    *fit = in;
    if (nn_model_spec_by_name (&spec, model, in.c, in.h, in.w, S_CLASSES, err, err_size) == 0)
        return 0;
    s_input_t pad = { (in.h + 31) / 32 * 32, (in.w + 31) / 32 * 32, in.c };
    char ignored[256];
    if (nn_model_spec_by_name (&spec, model, pad.c, pad.h, pad.w, S_CLASSES, ignored,
                               sizeof ignored))
        return -1;
    *fit = pad;
    return 0;
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

static void
s_add_side (cJSON *row, const char *key, s_side_t *side)
{
    if (side->ok) {
        cJSON_AddItemToObject (row, key, side->json);
        side->json = NULL;
    }
}

static int
s_usage (void)
{
    fprintf (stderr, "usage: pipelearn-bench [--model NAME] [--input HxWxC[,HxWxC...]] "
             "[--batch B] [--micro M[,M...]] [--threads T] [--images N] [--repeats R] "
             "[--warmup W] [--no-torch] [--json FILE] [--isa LEVEL] [--train-rss]\n"
             "       pipelearn-bench --conv-calls [--isa LEVEL] [--repeats R]: time each 3x3 "
             "convolution shape of docs/performance.md's Winograd table per call\n");
    return 2;
}

int
main (int argc, char **argv)
{
    int isa_rc = s_isa_env (argc, argv);
    if (isa_rc)
        return isa_rc;
    if (pl_blas_setup (argv))
        return 2;
    if (argc > 1 && strcmp (argv[1], "--worker") == 0)
        return bench_worker_main (argc - 1, argv + 1);
    const char *model_arg = "vgg5", *json_path = NULL;
    const char *inputs_arg = "28x28x1,32x32x3", *micro_arg = "25,10";
    int threads = 1, images = 500, repeats = 3, warmup = 2, batch = 100;
    bool torch = true, train_rss = false, conv_calls = false;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "input", required_argument, NULL, 'I' },
        { "batch", required_argument, NULL, 'b' }, { "micro", required_argument, NULL, 'm' },
        { "threads", required_argument, NULL, 't' }, { "images", required_argument, NULL, 'n' },
        { "repeats", required_argument, NULL, 'r' }, { "warmup", required_argument, NULL, 'w' },
        { "no-torch", no_argument, NULL, 'T' }, { "json", required_argument, NULL, 'j' },
        { "isa", required_argument, NULL, 'i' }, { "train-rss", no_argument, NULL, 'R' },
        { "conv-calls", no_argument, NULL, 'C' }, { NULL, 0, NULL, 0 }
    };
    int opt;
    while ((opt = getopt_long (argc, argv, "", opts, NULL)) != -1)
        switch (opt) {
            case 'M': model_arg = optarg; break;
            case 'I': inputs_arg = optarg; break;
            case 'b': batch = atoi (optarg); break;
            case 'm': micro_arg = optarg; break;
            case 't': threads = atoi (optarg); break;
            case 'n': images = atoi (optarg); break;
            case 'r': repeats = atoi (optarg); break;
            case 'w': warmup = atoi (optarg); break;
            case 'T': torch = false; break;
            case 'j': json_path = optarg; break;
            case 'i': break;            //  taken by s_isa_env
            case 'R': train_rss = true; break;
            case 'C': conv_calls = true; break;
            default: return s_usage ();
        }
    if (optind < argc)
        return s_usage ();
    const nn_model_entry_t *entry = nn_model_registry_find (model_arg);
    if (!entry) {
        char names[512];
        fprintf (stderr, "pipelearn-bench: --model %s: not a model (known: %s)\n", model_arg,
                 nn_model_registry_names (names, sizeof names));
        return 2;
    }
    const char *model = entry->name;
    s_input_t inputs[S_MAX_LIST];
    int micros[S_MAX_LIST];
    int inputs_count = s_parse_inputs (inputs_arg, inputs);
    int micros_count = s_parse_ints (micro_arg, micros);
    if (inputs_count < 1 || micros_count < 1 || threads < 1 || batch < 1 || images < 1
        || repeats < 1 || repeats > BENCH_MAX_REPEATS || warmup < 0) {
        fprintf (stderr, "pipelearn-bench: need --input HxWxC[,...], --micro M[,...], "
                 "threads, batch, images >= 1, warmup >= 0, 1 <= repeats <= %d\n",
                 BENCH_MAX_REPEATS);
        return 2;
    }
    //  The settings: the whole batch, then each micro-batch size that
    //  divides it into more than one piece.
    int settings[S_MAX_LIST + 1], settings_count = 0;
    settings[settings_count++] = batch;
    for (int i = 0; i < micros_count; i++) {
        if (micros[i] < batch && batch % micros[i] == 0)
            settings[settings_count++] = micros[i];
        else if (micros[i] != batch)
            fprintf (stderr, "pipelearn-bench: micro-batch %d does not divide batch %d into "
                     "pieces; skipped\n", micros[i], batch);
    }
    char self[4096];
    ssize_t len = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || (size_t) len >= sizeof self - 1) {
        fprintf (stderr, "pipelearn-bench: cannot read /proc/self/exe\n");
        return 2;
    }
    self[len] = '\0';
    pl_blas_set_threads (1);

    char cpu[256];
    s_cpu_name (cpu, sizeof cpu);
    if (conv_calls) {
        printf ("CPU: %s; kernels %s, OpenBLAS core %s; one thread\n", cpu,
                nn_isa_name (nn_isa_active ()), pl_blas_corename ());
        bench_conv_calls (repeats > 3 ? repeats : 20);
        return 0;
    }
    const char *aten = getenv ("ATEN_CPU_CAPABILITY");
    cJSON *out = cJSON_CreateObject ();
    cJSON_AddStringToObject (out, "cpu", cpu);
    cJSON_AddStringToObject (out, "model", model);
    cJSON_AddStringToObject (out, "openblas_core", pl_blas_corename ());
    cJSON_AddStringToObject (out, "kernels", nn_isa_name (nn_isa_active ()));
    cJSON_AddNumberToObject (out, "threads", threads);
    cJSON_AddNumberToObject (out, "images", images);
    cJSON_AddNumberToObject (out, "repeats", repeats);
    printf ("%s training, %d thread(s), median of %d x %d images, batch %d\n"
            "CPU: %s; kernels %s (%s=%s), OpenBLAS core %s; PyTorch ATEN_CPU_CAPABILITY=%s\n",
            model, threads, repeats, images, batch, cpu, nn_isa_name (nn_isa_active ()),
            NN_ISA_ENV, getenv (NN_ISA_ENV) ? getenv (NN_ISA_ENV) : "unset",
            pl_blas_corename (), aten ? aten : "unset");
    double peak = bench_sgemm_peak ();
    cJSON_AddNumberToObject (out, "sgemm_peak_gflops", peak);
    printf ("one core, thread CPU time: OpenBLAS sgemm 1024^3 %.1f GFLOP/s", peak);
    if (strcmp (model, "vgg5") == 0) {
        double conv = bench_vgg5_conv_rate (5);
        cJSON_AddNumberToObject (out, "conv_gflops", conv);
        printf ("; VGG5's convolutions at batch 100 (forward + backward) %.1f GFLOP/s = "
                "%.0f%% of it (counted as im2col's multiply-adds: conv2 and conv3 run "
                "Winograd's F(4x4), 3.1x fewer)", conv, 100.0 * conv / peak);
    }
    printf ("\nimages/s of wall time and of each side's CPU time (img/CPU-s); ratio = ours / "
            "PyTorch's; peak RSS in MiB (+ beyond the process before the model)\n");
    printf ("%-9s %-6s %-5s %9s %9s %9s %9s %6s %6s %14s %14s  %s\n", "input", "batch", "micro",
            "ours/s", "ours/CPUs", "torch/s", "torch/CPUs", "ratio", "CPU", "ours RSS",
            "torch RSS", "ours kernels/OpenBLAS, torch ATen");
    cJSON *rows = cJSON_AddArrayToObject (out, "settings");
    int failed = 0;
    for (int s = 0; s < inputs_count; s++) {
        s_input_t in;
        char err[256];
        if (inputs[s].h != inputs[s].w || s_fit_input (model, inputs[s], &in, err, sizeof err)) {
            fprintf (stderr, "pipelearn-bench: %s on %dx%dx%d: %s\n", model, inputs[s].h,
                     inputs[s].w, inputs[s].c,
                     inputs[s].h != inputs[s].w ? "square inputs only" : err);
            failed++;
            continue;
        }
        char in_s[32];
        snprintf (in_s, sizeof in_s, "%dx%dx%d", in.h, in.w, in.c);
        if (in.h != inputs[s].h)
            printf ("(%dx%dx%d padded to %s: %s needs it)\n", inputs[s].h, inputs[s].w,
                    inputs[s].c, in_s, model);
        for (int k = 0; k < settings_count; k++) {
            int mb = settings[k], pieces = batch / mb;
            char cmd[8192];
            snprintf (cmd, sizeof cmd, "'%s' --worker --model %s --input %s --batch %d "
                      "--micro-batches %d --threads %d --images %d --repeats %d --warmup %d",
                      self, model, in_s, batch, pieces, threads, images, repeats, warmup);
            s_side_t ours = s_run_side (cmd, "kernels", "openblas_core");
            s_side_t peer = { .ok = false };
            if (torch) {
                snprintf (cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/bench/torch_bench.py' "
                          "--model %s --in-c %d --side %d --batch %d --micro-batches %d "
                          "--threads %d --images %d --repeats %d --warmup %d", PL_SOURCE_DIR,
                          model, in.c, in.h, batch, pieces, threads, images, repeats, warmup);
                peer = s_run_side (cmd, "cpu_capability", "version");
            }
            failed += !ours.ok + (torch && !peer.ok);
            char f[8][32];
            for (int i = 0; i < 8; i++)
                snprintf (f[i], sizeof f[i], "-");
            if (ours.ok) {
                snprintf (f[0], 32, "%.0f", ours.per_s);
                snprintf (f[1], 32, "%.0f", ours.per_cpu_s);
                snprintf (f[6], 32, "%.1f(+%.1f)", ours.peak_rss_kb / 1024.0,
                          (ours.peak_rss_kb - ours.rss_start_kb) / 1024.0);
            }
            if (peer.ok) {
                snprintf (f[2], 32, "%.0f", peer.per_s);
                snprintf (f[3], 32, "%.0f", peer.per_cpu_s);
                snprintf (f[7], 32, "%.1f(+%.1f)", peer.peak_rss_kb / 1024.0,
                          (peer.peak_rss_kb - peer.rss_start_kb) / 1024.0);
            }
            cJSON *row = cJSON_CreateObject ();
            cJSON_AddStringToObject (row, "input", in_s);
            cJSON_AddNumberToObject (row, "batch", batch);
            cJSON_AddNumberToObject (row, "micro_batch", mb);
            if (ours.ok && peer.ok) {
                snprintf (f[4], 32, "%.2fx", ours.per_s / peer.per_s);
                snprintf (f[5], 32, "%.2fx", ours.per_cpu_s / peer.per_cpu_s);
                cJSON_AddNumberToObject (row, "ratio", ours.per_s / peer.per_s);
                cJSON_AddNumberToObject (row, "ratio_cpu", ours.per_cpu_s / peer.per_cpu_s);
            }
            printf ("%-9s %-6d %-5d %9s %9s %9s %9s %6s %6s %14s %14s  %s/%s, %s\n", in_s,
                    batch, mb, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
                    ours.ok ? ours.level : "-", ours.ok ? ours.core : "-",
                    peer.ok ? peer.level : "-");
            fflush (stdout);
            s_add_side (row, "ours", &ours);
            s_add_side (row, "torch", &peer);
            if (peer.ok && !cJSON_GetObjectItem (out, "torch_version"))
                cJSON_AddStringToObject (out, "torch_version", peer.core);
            cJSON_AddItemToArray (rows, row);
        }
    }
    const cJSON *version = cJSON_GetObjectItem (out, "torch_version");
    if (cJSON_IsString (version))
        printf ("PyTorch %s (python3-torch, tests/torch_models.py, channels_last), same "
                "threads, one BLAS thread, same batch shapes\n", version->valuestring);
    if (train_rss) {
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
        else {
            printf ("pipelearn-train RSS run failed (is dataset-fashion-mnist installed?)\n");
            failed++;
        }
    }
    if (json_path) {
        char *text = cJSON_Print (out);
        FILE *f = fopen (json_path, "w");
        if (f) {
            fprintf (f, "%s\n", text);
            fclose (f);
        }
        else {
            fprintf (stderr, "pipelearn-bench: cannot write %s\n", json_path);
            failed++;
        }
        free (text);
    }
    cJSON_Delete (out);
    return failed ? 1 : 0;
}
