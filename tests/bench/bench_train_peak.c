/*  bench_train_peak.c: what one core's matrix products reach on this host
    (OpenBLAS's sgemm peak, and VGG5's convolutions as a share of it), the
    frame pipelearn-bench puts its training figures in. */
#include "bench_train.h"

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_rng.h"

#include <cblas.h>
#include <stddef.h>
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

//  VGG5's three convolutions at batch 100 on one thread: forward and
//  backward (weights, and input but for the first), the best of 5 in thread
//  CPU time, in
//  GFLOP/s of the matrix work as im2col does it (2 * pixels * k * r*s*c per
//  product): conv2 and conv3 run Winograd's F(2x2, 3x3), which does 2.25x
//  (conv3's 7x7 images: 1.72x) fewer, so the rate can pass the sgemm peak.
double
bench_vgg5_conv_rate (int repeats)
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
            double t0 = s_thread_seconds ();
            nn_conv2d_forward (y, x, w, NULL, &sh, scratch);
            nn_conv2d_backward (first ? NULL : dx, dw, NULL, dy, x, w, &sh, scratch);
            double t = s_thread_seconds () - t0;
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
