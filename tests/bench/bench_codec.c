/*  pipelearn-bench-codec: encode and decode throughput of the split's
    codecs (common/nn/nn_codec.h), for the planner's codec costs.

    pipelearn-bench-codec [-r RUNS] [-n N -H H -W W -C C]

    The tensor is one PipeLearn micro-batch of VGG5 split after unit 1 on
    28x28 inputs by default: 25 x 14 x 14 x 32 floats of activations (ReLU
    outputs: half zeros, half uniform in (0, 2)). Each codec is timed over
    enough repetitions for about 2 ms, RUNS times (default 31), codecs
    interleaved run by run. Printed as MB/s of float32 input (10^6 bytes of
    the f32 tensor per second, the scale the planner uses: bytes of
    activations per second of CPU): the median, its ratio to none (a copy),
    and the fastest run (on a shared host other load only adds time, so
    the fastest moves least), then the bytes on the wire. fp16 is also
    timed on its reference path (integer rounding) beside the fast one. The
    CPU, the ISA path (PIPELEARN_ISA) and the thread count (one) come first.
*/
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn_codec.h"
#include "nn_isa.h"

#define S_MAX_RUNS 101

static double
s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
s_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double
s_median (double *v, int n)
{
    qsort (v, (size_t) n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
    const char *label;
    nn_codec_params_t params;
    bool reference;             //  fp16 on the reference path
    nn_codec_encoder_t *enc;
    uint8_t *wire;
    int reps;
    double enc_s[S_MAX_RUNS], dec_s[S_MAX_RUNS];
} s_case_t;

static void
s_die (const char *what)
{
    fprintf (stderr, "pipelearn-bench-codec: %s\n", what);
    exit (1);
}

//  The reference fp16 path, timed the way nn_codec_encode/decode would run
//  it (the conversion is all they do besides the header).
static void
s_fp16_ref_encode (uint8_t *wire, const float *x, size_t count)
{
    nn_codec_fp16_from_float_ref ((uint16_t *) (void *) (wire + NN_CODEC_HEADER_BYTES), x, count);
}

static void
s_fp16_ref_decode (float *y, const uint8_t *wire, size_t count)
{
    nn_codec_fp16_to_float_ref (y, (const uint16_t *) (const void *) (wire + NN_CODEC_HEADER_BYTES),
                                count);
}

int
main (int argc, char **argv)
{
    int runs = 31;
    nn_codec_shape_t shape = { 25, 14, 14, 32 };
    int opt;
    while ((opt = getopt (argc, argv, "r:n:H:W:C:")) != -1) {
        long v = strtol (optarg, NULL, 10);
        if (v < 1)
            s_die ("options take positive integers");
        switch (opt) {
            case 'r': runs = v > S_MAX_RUNS ? S_MAX_RUNS : (int) v; break;
            case 'n': shape.n = (uint32_t) v; break;
            case 'H': shape.h = (uint32_t) v; break;
            case 'W': shape.w = (uint32_t) v; break;
            case 'C': shape.c = (uint32_t) v; break;
            default: s_die ("usage: pipelearn-bench-codec [-r RUNS] [-n N -H H -W W -C C]");
        }
    }
    size_t count = (size_t) nn_codec_shape_count (&shape);
    if (count == 0 || count > (1u << 28))
        s_die ("the tensor must have 1..2^28 elements");

    char cpu[512] = "unknown";
    FILE *f = fopen ("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets (line, sizeof line, f))
            if (strncmp (line, "model name", 10) == 0) {
                char *c = strchr (line, ':');
                snprintf (cpu, sizeof cpu, "%s", c ? c + 2 : line);
                cpu[strcspn (cpu, "\n")] = 0;
                break;
            }
        fclose (f);
    }
    printf ("cpu: %s\nisa: %s (PIPELEARN_ISA=%s)\nthreads: 1\n", cpu,
            nn_isa_name (nn_isa_active ()), getenv (NN_ISA_ENV) ? getenv (NN_ISA_ENV) : "");
    printf ("tensor: %u x %u x %u x %u floats (%.1f KB as f32), %d runs, median\n",
            shape.n, shape.h, shape.w, shape.c, 4.0 * count / 1e3, runs);

    float *x = malloc (sizeof (float) * count), *y = malloc (sizeof (float) * count);
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    for (size_t i = 0; i < count; i++)
        x[i] = nn_rng_below (&rng, 2) ? 2.0f * nn_rng_uniform (&rng) : 0.0f;

    s_case_t cases[] = {
        { "none", { .id = NN_CODEC_NONE }, false, NULL, NULL, 0, { 0 }, { 0 } },
        { "fp16", { .id = NN_CODEC_FP16 }, false, NULL, NULL, 0, { 0 }, { 0 } },
        { "fp16 (reference path)", { .id = NN_CODEC_FP16 }, true, NULL, NULL, 0, { 0 }, { 0 } },
        { "int8", { .id = NN_CODEC_INT8 }, false, NULL, NULL, 0, { 0 }, { 0 } },
        { "int8 stochastic", { .id = NN_CODEC_INT8, .stochastic = true }, false, NULL, NULL,
          0, { 0 }, { 0 } },
        { "int8 + zstd", { .id = NN_CODEC_INT8, .zstd = true }, false, NULL, NULL, 0, { 0 },
          { 0 } },
        { "fp16 + zstd", { .id = NN_CODEC_FP16, .zstd = true }, false, NULL, NULL, 0, { 0 },
          { 0 } },
        { "topk 0.01", { .id = NN_CODEC_TOPK, .topk_fraction = 0.01 }, false, NULL, NULL,
          0, { 0 }, { 0 } },
        { "topk 0.1", { .id = NN_CODEC_TOPK, .topk_fraction = 0.1 }, false, NULL, NULL,
          0, { 0 }, { 0 } },
    };
    int ncases = (int) (sizeof cases / sizeof cases[0]);
    char err[256];
    for (int c = 0; c < ncases; c++) {
        cases[c].enc = nn_codec_encoder_new (&cases[c].params, &shape, err, sizeof err);
        if (!cases[c].enc)
            s_die (err);
        //  64-byte aligned, as a zmq frame of this size is.
        cases[c].wire = aligned_alloc (64, (nn_codec_encoder_bytes (cases[c].enc) + 63) / 64 * 64);
    }
    //  Repetitions for about 2 ms per timing, from one untimed encode of
    //  each case (which also warms its buffers): short enough that many
    //  timings fall between the scheduler's preemptions on a busy host.
    for (int c = 0; c < ncases; c++) {
        double t0 = s_now ();
        if (nn_codec_encode (cases[c].enc, cases[c].wire, nn_codec_encoder_bytes (cases[c].enc),
                             x, &rng, err, sizeof err))
            s_die (err);
        double once = s_now () - t0;
        int reps = once > 0 ? (int) (0.002 / once) : 100;
        cases[c].reps = reps < 1 ? 1 : reps > 5000 ? 5000 : reps;
    }

    for (int r = 0; r < runs; r++)
        for (int c = 0; c < ncases; c++) {
            s_case_t *k = &cases[c];
            int reps = k->reps;
            size_t bytes = nn_codec_encoder_bytes (k->enc);
            double start = s_now ();
            for (int i = 0; i < reps; i++) {
                if (k->reference)
                    s_fp16_ref_encode (k->wire, x, count);
                else
                if (nn_codec_encode (k->enc, k->wire, bytes, x, &rng, err, sizeof err))
                    s_die (err);
            }
            k->enc_s[r] = (s_now () - start) / reps;
            if (k->reference)   //  a real header for the decoder's checks
                nn_codec_encode (cases[1].enc, k->wire, bytes, x, &rng, err, sizeof err);
            start = s_now ();
            for (int i = 0; i < reps; i++) {
                if (k->reference)
                    s_fp16_ref_decode (y, k->wire, count);
                else
                if (nn_codec_decode (y, k->wire, nn_codec_encoder_last_bytes (k->enc),
                                     k->params.id, &shape, err, sizeof err))
                    s_die (err);
            }
            k->dec_s[r] = (s_now () - start) / reps;
        }

    //  Medians, and the fastest run: on a shared host other load only adds
    //  time, so the fastest moves least from run to run (as nn_profile).
    double none_enc = 0, none_dec = 0;
    printf ("%-22s %12s %12s %10s %10s %10s %10s %12s\n", "codec", "encode MB/s",
            "decode MB/s", "enc/none", "dec/none", "enc best", "dec best", "wire bytes");
    for (int c = 0; c < ncases; c++) {
        s_case_t *k = &cases[c];
        double e = s_median (k->enc_s, runs), d = s_median (k->dec_s, runs);
        double eb = k->enc_s[0], db = k->dec_s[0];     //  sorted by s_median
        if (c == 0) {
            none_enc = e;
            none_dec = d;
        }
        printf ("%-22s %12.0f %12.0f %10.2f %10.2f %10.0f %10.0f %12zu\n", k->label,
                4.0 * count / e / 1e6, 4.0 * count / d / 1e6, none_enc / e, none_dec / d,
                4.0 * count / eb / 1e6, 4.0 * count / db / 1e6,
                k->reference ? nn_codec_encoder_bytes (k->enc)
                             : nn_codec_encoder_last_bytes (k->enc));
    }
    for (int c = 0; c < ncases; c++) {
        nn_codec_encoder_destroy (&cases[c].enc);
        free (cases[c].wire);
    }
    free (x);
    free (y);
    return 0;
}
