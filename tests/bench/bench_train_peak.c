/*  bench_train_peak.c: what one core's matrix products reach on this host
    (OpenBLAS's sgemm peak, and VGG5's convolutions as a share of it), the
    frame pipelearn-bench puts its training figures in. */
#include "bench_train.h"

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_kernels_conv.h"
#include "nn_rng.h"

#include <cblas.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

//  Seconds of this thread's CPU time: the products run on the calling
//  thread (OpenBLAS and the kernels at one thread), and on a machine shared
//  with other jobs time-sharing stretches wall time but not this.
static double
s_thread_seconds (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

//  The best of 5 single-thread sgemms of 1024^3, in GFLOP/s of thread CPU time.
double
bench_sgemm_peak (void)
{
    const int n = 1024;
    float *a = nn_alloc_aligned (sizeof (float) * n * n);
    float *b = nn_alloc_aligned (sizeof (float) * n * n);
    float *c = nn_alloc_aligned (sizeof (float) * n * n);
    for (int i = 0; i < n * n; i++)
        a[i] = (float) (i % 7) * 0.1f, b[i] = (float) (i % 5) * 0.1f;
    double best = 0.0;
    for (int r = 0; r < 6; r++) {
        double t0 = s_thread_seconds ();
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                     0.0f, c, n);
        double rate = 2.0 * n * n * n / (s_thread_seconds () - t0) / 1e9;
        if (r > 0 && rate > best)
            best = rate;
    }
    nn_free (a), nn_free (b), nn_free (c);
    return best;
}

//  One convolution's forward, weight gradient and (unless first) input
//  gradient on shape sh (finished), each the best of `repeats` after one
//  warm-up, in seconds of thread CPU time: best[0..2].
static void
s_time_conv (nn_conv_shape_t sh, int repeats, bool first, double best[3])
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 7);
    size_t in = (size_t) sh.n * sh.h * sh.w * sh.c, out = (size_t) sh.n * sh.p * sh.q * sh.k;
    size_t wn = (size_t) sh.k * sh.r * sh.s * sh.c;
    int rows = sh.n * sh.p * sh.q;
    float *x = nn_alloc_aligned (sizeof (float) * in), *dx = nn_alloc_aligned (sizeof (float) * in);
    float *y = nn_alloc_aligned (sizeof (float) * out);
    float *dy = nn_alloc_aligned (sizeof (float) * out);
    float *w = nn_alloc_aligned (sizeof (float) * wn), *dw = nn_alloc_aligned (sizeof (float) * wn);
    float *scratch = nn_alloc_aligned (sizeof (float) * nn_conv2d_scratch_count (&sh));
    for (size_t i = 0; i < in; i++)
        x[i] = (float) nn_rng_normal (&rng);
    for (size_t i = 0; i < out; i++)
        dy[i] = (float) nn_rng_normal (&rng);
    for (size_t i = 0; i < wn; i++)
        w[i] = (float) (0.1 * nn_rng_normal (&rng)), dw[i] = 0.0f;
    best[0] = best[1] = best[2] = 1e30;
    for (int r = 0; r < repeats + 1; r++) {
        double t0 = s_thread_seconds ();
        nn_conv2d_forward_rows (y, x, w, NULL, &sh, 0, rows, scratch);
        double t1 = s_thread_seconds ();
        nn_conv2d_backward_weights_rows (dw, NULL, dy, x, &sh, 0, rows, scratch);
        double t2 = s_thread_seconds ();
        if (!first)
            nn_conv2d_backward_input (dx, dy, w, &sh, scratch);
        double t[3] = { t1 - t0, t2 - t1, s_thread_seconds () - t2 };
        for (int i = 0; r > 0 && i < 3; i++)
            best[i] = t[i] < best[i] ? t[i] : best[i];
    }
    if (first)
        best[2] = 0.0;
    nn_free (x), nn_free (dx), nn_free (y), nn_free (dy), nn_free (w), nn_free (dw);
    nn_free (scratch);
}

//  VGG5's three convolutions at batch 100 on one thread: forward and
//  backward (weights, and input but for the first), the best of 5 in thread
//  CPU time, in GFLOP/s of the matrix work as im2col does it (2 * pixels *
//  k * r*s*c per product): conv2 and conv3 run Winograd's F(4x4, 3x3),
//  which does 3.1x fewer on their 14x14 and 7x7 images (16 and 4 tiles of
//  36 against 196 and 49 pixels of 9), so the rate can pass the sgemm peak.
double
bench_vgg5_conv_rate (int repeats)
{
    static const nn_conv_shape_t shapes[] = {
        { .n = 100, .h = 28, .w = 28, .c = 1, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1 },
        { .n = 100, .h = 14, .w = 14, .c = 32, .k = 64, .r = 3, .s = 3, .stride = 1, .pad = 1 },
        { .n = 100, .h = 7, .w = 7, .c = 64, .k = 64, .r = 3, .s = 3, .stride = 1, .pad = 1 },
    };
    double flops = 0.0, secs = 0.0;
    for (int l = 0; l < 3; l++) {
        nn_conv_shape_t sh = shapes[l];
        nn_conv_shape_finish (&sh);
        double best[3];
        s_time_conv (sh, repeats, l == 0, best);
        double macs = (double) sh.n * sh.p * sh.q * sh.k * sh.r * sh.s * sh.c;
        flops += (l == 0 ? 2.0 : 3.0) * 2.0 * macs;
        secs += best[0] + best[1] + best[2];
    }
    return flops / secs / 1e9;
}

//  The 3x3 stride-1 convolutions of docs/performance.md's "Winograd"
//  table: (images, side, c, k) as one thread of a batch or micro-batch sees
//  them in VGG5, VGG11 and ResNet18, then VGG5's first convolution (a
//  direct loop: its patch is 9 floats; no input gradient, as in a model).
void
bench_conv_calls (int repeats)
{
    static const int shapes[][4] = {
        { 25, 14, 32, 64 }, { 25, 7, 64, 64 }, { 100, 14, 32, 64 }, { 100, 7, 64, 64 },
        { 50, 4, 512, 512 }, { 13, 2, 512, 512 }, { 50, 8, 128, 256 }, { 50, 2, 512, 512 },
        { 13, 4, 512, 512 }, { 13, 4, 256, 256 }, { 25, 4, 128, 128 }, { 13, 7, 64, 64 },
        { 6, 7, 64, 64 }, { 25, 2, 256, 256 }, { 25, 28, 1, 32 }, { 100, 28, 1, 32 },
    };
    printf ("%-6s %-6s %-10s %-9s %9s %9s %9s  (ms of thread CPU time, best of %d)\n",
            "images", "image", "channels", "path", "forward", "weights", "input", repeats);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        nn_conv_shape_t sh = { .n = shapes[i][0], .h = shapes[i][1], .w = shapes[i][1],
                               .c = shapes[i][2], .k = shapes[i][3], .r = 3, .s = 3,
                               .stride = 1, .pad = 1 };
        nn_conv_shape_finish (&sh);
        double best[3];
        bool first = sh.c == 1;
        s_time_conv (sh, repeats, first, best);
        char side[16], ch[24];
        snprintf (side, sizeof side, "%dx%d", sh.h, sh.w);
        snprintf (ch, sizeof ch, "%d->%d", sh.c, sh.k);
        int m = first ? 0 : nn_wino_tile (&sh, 0, sh.n * sh.p * sh.q);
        const char *path = first ? "direct" : m == 4 ? "wino4" : m == 2 ? "winograd" : "im2col";
        printf ("%-6d %-6s %-10s %-9s %9.3f %9.3f %9.3f\n", sh.n, side, ch, path,
                1e3 * best[0], 1e3 * best[1], 1e3 * best[2]);
    }
}
