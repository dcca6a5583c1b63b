/*  Fast (BLAS) kernels agree with their naive references. */
#include <criterion/criterion.h>

#include "nn_alloc.h"
#include "nn_isa.h"
#include "nn_kernels.h"
#include "nn_optim.h"
#include "nn_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *
s_random (size_t count, nn_rng_t *rng)
{
    float *p = nn_malloc (sizeof (float) * count);
    for (size_t i = 0; i < count; i++)
        p[i] = 2.0f * nn_rng_uniform (rng) - 1.0f;
    return p;
}

static void
s_assert_close (const float *a, const float *b, size_t count, float tol, const char *what)
{
    float worst = 0.0f;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        float d = fabsf (a[i] - b[i]) / (1.0f + fabsf (b[i]));
        if (d > worst)
            worst = d, at = i;
    }
    cr_assert (worst <= tol, "%s: element %zu differs: %g vs %g", what, at,
               (double) a[at], (double) b[at]);
}

static void
s_check_conv (int n, int h, int w, int c, int k, int r, int stride, int pad)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, (uint64_t) (n * 1000 + h * 100 + c * 10 + k + r + stride + pad));
    nn_conv_shape_t s = { .n = n, .h = h, .w = w, .c = c, .k = k, .r = r, .s = r,
                          .stride = stride, .pad = pad };
    cr_assert_eq (nn_conv_shape_finish (&s), 0);
    size_t in_n = (size_t) n * h * w * c, out_n = (size_t) n * s.p * s.q * k;
    size_t w_n = (size_t) k * r * r * c;
    float *in = s_random (in_n, &rng), *wt = s_random (w_n, &rng), *b = s_random (k, &rng);
    float *dout = s_random (out_n, &rng);
    float *out1 = nn_calloc (out_n, sizeof (float)), *out2 = nn_calloc (out_n, sizeof (float));
    float *scratch = nn_calloc (nn_conv2d_scratch_count (&s), sizeof (float));
    nn_conv2d_forward (out1, in, wt, b, &s, scratch);
    nn_conv2d_forward_naive (out2, in, wt, b, &s);
    s_assert_close (out1, out2, out_n, 1e-5f, "conv forward");

    float *din1 = nn_calloc (in_n, sizeof (float)), *din2 = nn_calloc (in_n, sizeof (float));
    float *dw1 = nn_calloc (w_n, sizeof (float)), *dw2 = nn_calloc (w_n, sizeof (float));
    float *db1 = nn_calloc (k, sizeof (float)), *db2 = nn_calloc (k, sizeof (float));
    //  Accumulation: start both from the same non-zero gradients.
    for (size_t i = 0; i < w_n; i++)
        dw1[i] = dw2[i] = 0.5f;
    nn_conv2d_backward (din1, dw1, db1, dout, in, wt, &s, scratch);
    nn_conv2d_backward_naive (din2, dw2, db2, dout, in, wt, &s);
    s_assert_close (din1, din2, in_n, 1e-4f, "conv din");
    s_assert_close (dw1, dw2, w_n, 1e-4f, "conv dw");
    s_assert_close (db1, db2, (size_t) k, 1e-4f, "conv db");
    nn_free (in), nn_free (wt), nn_free (b), nn_free (dout), nn_free (out1);
    nn_free (out2), nn_free (scratch), nn_free (din1), nn_free (din2);
    nn_free (dw1), nn_free (dw2), nn_free (db1), nn_free (db2);
}

Test (kernels, conv_matches_naive_vgg_shapes)
{
    s_check_conv (3, 28, 28, 1, 8, 3, 1, 1);
    s_check_conv (2, 14, 14, 8, 16, 3, 1, 1);
    s_check_conv (5, 7, 7, 16, 4, 3, 1, 1);
    //  Output widths that are multiples of 16 take our AVX-512 sgemm where
    //  the CPU has it: VGG5's second conv (n*p*q = 196, not a multiple of
    //  the 6-row tile), and 80 = 64 + 16 wide with a 576-long patch.
    s_check_conv (1, 14, 14, 32, 64, 3, 1, 1);
    s_check_conv (2, 7, 7, 64, 80, 3, 1, 1);
}

Test (kernels, conv_matches_naive_odd_shapes)
{
    s_check_conv (2, 9, 7, 3, 5, 5, 2, 2);      //  stride 2, 5x5, non-square
    s_check_conv (1, 8, 8, 4, 3, 1, 1, 0);      //  1x1
    s_check_conv (3, 11, 11, 2, 6, 7, 2, 3);    //  7x7/2 like a ResNet stem
    s_check_conv (2, 6, 6, 3, 2, 3, 3, 0);      //  stride 3, no pad
    s_check_conv (40, 5, 5, 2, 3, 3, 1, 1);     //  several chunks
}

Test (kernels, direct_small_patch_conv_matches_naive)
{
    //  Patches of at most 32 values with k % 8 == 0 take the direct path.
    s_check_conv (3, 28, 28, 1, 32, 3, 1, 1);   //  VGG5's first conv
    s_check_conv (4, 9, 9, 2, 16, 3, 2, 1);     //  stride 2, 2 channels
    s_check_conv (3, 8, 7, 1, 8, 5, 1, 2);      //  5x5, non-square input
    s_check_conv (2, 6, 6, 3, 64, 3, 1, 0);     //  3 channels, no padding
}

//  The row-range kernels, run over pieces cut anywhere (mid-image, mid-row),
//  add up to the naive whole-batch result.
static void
s_check_conv_rows (int n, int h, int c, int k, int r, int stride, int pad, int pieces)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, (uint64_t) (n * 7 + h * 5 + c * 3 + k + pieces));
    nn_conv_shape_t s = { .n = n, .h = h, .w = h, .c = c, .k = k, .r = r, .s = r,
                          .stride = stride, .pad = pad };
    cr_assert_eq (nn_conv_shape_finish (&s), 0);
    int rows = n * s.p * s.q;
    size_t in_n = (size_t) n * h * h * c, out_n = (size_t) rows * k;
    size_t w_n = (size_t) k * r * r * c;
    float *in = s_random (in_n, &rng), *wt = s_random (w_n, &rng), *b = s_random (k, &rng);
    float *dout = s_random (out_n, &rng);
    float *out1 = nn_calloc (out_n, sizeof (float)), *out2 = nn_calloc (out_n, sizeof (float));
    float *dw1 = nn_calloc (w_n, sizeof (float)), *dw2 = nn_calloc (w_n, sizeof (float));
    float *db1 = nn_calloc (k, sizeof (float)), *db2 = nn_calloc (k, sizeof (float));
    float *scratch = nn_calloc (nn_conv2d_scratch_count (&s), sizeof (float));
    for (int i = 0; i < pieces; i++) {
        //  Uneven cuts: piece i ends at rows * (i+1)^2 / pieces^2.
        int r0 = (int) ((long) rows * i * i / ((long) pieces * pieces));
        int r1 = (int) ((long) rows * (i + 1) * (i + 1) / ((long) pieces * pieces));
        nn_conv2d_forward_rows (out1, in, wt, b, &s, r0, r1, scratch);
        nn_conv2d_backward_weights_rows (dw1, db1, dout, in, &s, r0, r1, scratch);
    }
    nn_conv2d_forward_naive (out2, in, wt, b, &s);
    nn_conv2d_backward_naive (NULL, dw2, db2, dout, in, wt, &s);
    s_assert_close (out1, out2, out_n, 1e-5f, "conv forward by rows");
    s_assert_close (dw1, dw2, w_n, 1e-4f, "conv dw by rows");
    s_assert_close (db1, db2, (size_t) k, 1e-4f, "conv db by rows");
    nn_free (in), nn_free (wt), nn_free (b), nn_free (dout), nn_free (out1);
    nn_free (out2), nn_free (dw1), nn_free (dw2), nn_free (db1), nn_free (db2);
    nn_free (scratch);
}

Test (kernels, conv_rows_match_naive)
{
    s_check_conv_rows (5, 14, 8, 16, 3, 1, 1, 2);   //  12.5 images a piece
    s_check_conv_rows (3, 7, 16, 4, 3, 1, 1, 5);
    s_check_conv_rows (3, 7, 32, 64, 3, 1, 1, 2);   //  our AVX-512 sgemm, if any
    s_check_conv_rows (3, 9, 3, 5, 5, 2, 2, 4);     //  stride 2, 5x5
    s_check_conv_rows (5, 28, 1, 32, 3, 1, 1, 3);   //  direct path, pieces of odd length
    s_check_conv_rows (4, 9, 2, 16, 3, 2, 1, 7);    //  direct path, stride 2
}

Test (kernels, conv_shape_rejects_kernel_larger_than_input)
{
    nn_conv_shape_t s = { .n = 1, .h = 2, .w = 2, .c = 1, .k = 1, .r = 5, .s = 5,
                          .stride = 1, .pad = 0 };
    cr_assert_eq (nn_conv_shape_finish (&s), -1);
}

Test (kernels, dense_matches_naive)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 7);
    int n = 13, i = 57, o = 11;
    float *in = s_random ((size_t) n * i, &rng), *w = s_random ((size_t) o * i, &rng);
    float *b = s_random ((size_t) o, &rng), *dout = s_random ((size_t) n * o, &rng);
    float out1[13 * 11], out2[13 * 11];
    nn_dense_forward (out1, in, w, b, n, i, o);
    nn_dense_forward_naive (out2, in, w, b, n, i, o);
    s_assert_close (out1, out2, (size_t) n * o, 1e-5f, "dense forward");
    float *din1 = nn_calloc ((size_t) n * i, 4), *din2 = nn_calloc ((size_t) n * i, 4);
    float *dw1 = nn_calloc ((size_t) o * i, 4), *dw2 = nn_calloc ((size_t) o * i, 4);
    float db1[11] = { 0 }, db2[11] = { 0 };
    nn_dense_backward (din1, dw1, db1, dout, in, w, n, i, o);
    nn_dense_backward_naive (din2, dw2, db2, dout, in, w, n, i, o);
    s_assert_close (din1, din2, (size_t) n * i, 1e-5f, "dense din");
    s_assert_close (dw1, dw2, (size_t) o * i, 1e-5f, "dense dw");
    s_assert_close (db1, db2, (size_t) o, 1e-5f, "dense db");
    //  Second call accumulates parameter gradients.
    nn_dense_backward (NULL, dw1, db1, dout, in, w, n, i, o);
    for (int k = 0; k < o; k++)
        cr_assert_float_eq (db1[k], 2.0f * db2[k], 1e-5f);
    //  Column slices (as the layer splits units across threads), cut unevenly.
    int ocut[] = { 0, 1, 6, 11 }, icut[] = { 0, 28, 29, 57 };
    memset (out1, 0, sizeof out1);
    memset (din1, 0, sizeof (float) * (size_t) n * i);
    for (int k = 0; k < 3; k++) {
        nn_dense_forward_cols (out1, in, w, b, n, i, o, ocut[k], ocut[k + 1]);
        nn_dense_backward_input_cols (din1, dout, w, n, i, o, icut[k], icut[k + 1]);
    }
    s_assert_close (out1, out2, (size_t) n * o, 1e-5f, "dense forward by columns");
    s_assert_close (din1, din2, (size_t) n * i, 1e-5f, "dense din by columns");
    nn_free (in), nn_free (w), nn_free (b), nn_free (dout);
    nn_free (din1), nn_free (din2), nn_free (dw1), nn_free (dw2);
}

Test (kernels, softmax_xent_matches_formula_and_scale)
{
    float logits[2 * 3] = { 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 0.0f };
    int labels[2] = { 2, 0 };
    float d[6];
    int correct = 0;
    float loss = nn_softmax_xent (d, logits, labels, 2, 3, 1.0f, &correct);
    double l0 = log (exp (1.0) + exp (2.0) + exp (3.0)) - 3.0;
    double l1 = log (exp (-1.0) + exp (0.5) + exp (0.0)) + 1.0;
    cr_assert_float_eq (loss, (l0 + l1) / 2.0, 1e-5);
    cr_assert_eq (correct, 1);
    double p02 = exp (3.0) / (exp (1.0) + exp (2.0) + exp (3.0));
    cr_assert_float_eq (d[2], (p02 - 1.0) / 2.0, 1e-6);
    //  scale = 1/N divides loss and gradient.
    float d4[6];
    float loss4 = nn_softmax_xent (d4, logits, labels, 2, 3, 0.25f, NULL);
    cr_assert_float_eq (loss4, loss / 4.0f, 1e-6);
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq (d4[i], d[i] / 4.0f, 1e-7);
}

Test (kernels, softmax_xent_is_stable_for_large_logits)
{
    float logits[3] = { 1000.0f, -1000.0f, 999.0f };
    int label = 2;
    float d[3];
    float loss = nn_softmax_xent (d, logits, &label, 1, 3, 1.0f, NULL);
    cr_assert (isfinite (loss));
    cr_assert_float_eq (loss, log (1.0 + exp (-1.0)) + 1.0 - 0.0, 1e-4);
}

Test (kernels, maxpool_padding_never_wins)
{
    //  All inputs negative: a padded -inf cell must not be chosen.
    float in[4] = { -5.0f, -4.0f, -3.0f, -2.0f };
    nn_pool_shape_t s = { .n = 1, .h = 2, .w = 2, .c = 1, .kernel = 2, .stride = 2, .pad = 1 };
    cr_assert_eq (nn_pool_shape_finish (&s), 0);
    cr_assert_eq (s.p, 2);
    float out[4];
    uint8_t arg[4];
    nn_maxpool_forward (out, arg, in, &s, false);
    cr_assert_float_eq (out[0], -5.0f, 0.0f);
    cr_assert_float_eq (out[3], -2.0f, 0.0f);
}

Test (kernels, sgd_step_matches_pytorch_semantics)
{
    //  Two steps of torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
    //  on p=1 with grads 0.5 then -0.2, by hand.
    float p = 1.0f, v = 0.0f;
    nn_sgd_t hp = { 0.1f, 0.9f, 0.01f };
    float g = 0.5f;
    nn_sgd_step (&p, &v, &g, 1, &hp);
    double d1 = 0.5 + 0.01 * 1.0, v1 = d1, p1 = 1.0 - 0.1 * v1;
    cr_assert_float_eq (p, p1, 1e-6);
    g = -0.2f;
    nn_sgd_step (&p, &v, &g, 1, &hp);
    double d2 = -0.2 + 0.01 * p1, v2 = 0.9 * v1 + d2, p2 = p1 - 0.1 * v2;
    cr_assert_float_eq (p, p2, 1e-6);
}

Test (kernels, maxpool_winner_bytes_route_the_gradient)
{
    //  Global max-pool over 5x5x2: the winner's code is its pixel index;
    //  backward puts the gradient there and nowhere else.
    float in[50], out[2], dout[2] = { 3.0f, -7.0f }, din[50];
    for (int i = 0; i < 50; i++)
        in[i] = (float) ((i * 37) % 50) - 25.0f;
    nn_pool_shape_t s = { .n = 1, .h = 5, .w = 5, .c = 2, .kernel = 0 };
    cr_assert_eq (nn_pool_shape_finish (&s), 0);
    cr_assert (nn_maxpool_fits (&s));
    uint8_t win[2];
    nn_maxpool_forward (out, win, in, &s, false);
    for (int c = 0; c < 2; c++) {
        int best = c;
        for (int i = c; i < 50; i += 2)
            best = in[i] > in[best] ? i : best;
        cr_assert_eq (win[c], best / 2, "channel %d", c);
        cr_assert_float_eq (out[c], in[best], 0.0f);
    }
    nn_maxpool_backward (din, dout, win, &s);
    float sum = 0.0f;
    for (int i = 0; i < 50; i++)
        sum += din[i];
    cr_assert_float_eq (sum, -4.0f, 0.0f);
    cr_assert_float_eq (din[2 * win[0]], 3.0f, 0.0f);
    cr_assert_float_eq (din[2 * win[1] + 1], -7.0f, 0.0f);
    //  Windows past a byte's codes are refused (by the layer shape check).
    nn_pool_shape_t big = { .n = 1, .h = 16, .w = 16, .c = 1, .kernel = 0 };
    nn_pool_shape_finish (&big);
    cr_assert (!nn_maxpool_fits (&big));
    big.kernel = 16, big.stride = 16;
    nn_pool_shape_finish (&big);
    cr_assert (!nn_maxpool_fits (&big));
    big.kernel = 15, big.stride = 1;
    nn_pool_shape_finish (&big);
    cr_assert (nn_maxpool_fits (&big));
}

//  The kernel level: names, the cap a request puts on the CPU's level, and
//  the level this process runs. meson registers this suite (and layers,
//  model) once per level with PIPELEARN_ISA set, so every path the kernels
//  have is compared with the naive references on this host.
Test (kernels, isa_names_and_levels_the_cpu_runs)
{
    nn_isa_t isa;
    cr_assert_eq (nn_isa_parse ("generic", &isa), 0);
    cr_assert_eq (isa, NN_ISA_GENERIC);
    cr_assert_eq (nn_isa_parse ("avx2", &isa), 0);
    cr_assert_eq (isa, NN_ISA_AVX2);
    cr_assert_eq (nn_isa_parse ("avx512", &isa), 0);
    cr_assert_eq (isa, NN_ISA_AVX512);
    cr_assert_eq (nn_isa_parse ("neon", &isa), 0);
    cr_assert_eq (isa, NN_ISA_NEON);
    cr_assert_eq (nn_isa_parse ("AVX2", &isa), -1);
    cr_assert_eq (nn_isa_parse ("", &isa), -1);
    cr_assert_str_eq (nn_isa_name (NN_ISA_AVX2), "avx2");
    nn_isa_t cpu = nn_isa_cpu ();
    cr_assert (nn_isa_runs (cpu));
    cr_assert (nn_isa_runs (NN_ISA_GENERIC));
    bool valid;
    cr_assert_eq (nn_isa_resolve (NULL, &valid), cpu);
    cr_assert (valid);
    cr_assert_eq (nn_isa_resolve ("", &valid), cpu);
    cr_assert_eq (nn_isa_resolve ("generic", &valid), NN_ISA_GENERIC);
    cr_assert (valid);
    cr_assert_eq (nn_isa_resolve ("sse9", &valid), cpu);
    cr_assert (!valid);
#if defined(__x86_64__)
    //  x86 levels nest; neon is not one of them.
    cr_assert (!nn_isa_runs (NN_ISA_NEON));
    cr_assert_eq (nn_isa_resolve ("neon", &valid), cpu);
    cr_assert (!valid);
    if (cpu == NN_ISA_AVX512)
        cr_assert (nn_isa_runs (NN_ISA_AVX2));
    //  A level above the CPU's is not valid, and the CPU's runs.
    if (cpu < NN_ISA_AVX512) {
        cr_assert_eq (nn_isa_resolve ("avx512", &valid), cpu);
        cr_assert (!valid);
    }
#endif
}

Test (kernels, isa_active_follows_the_environment)
{
    const char *request = getenv (NN_ISA_ENV);
    cr_assert_eq (nn_isa_active (), nn_isa_resolve (request, NULL),
                  "PIPELEARN_ISA=%s, CPU %s, active %s", request ? request : "(unset)",
                  nn_isa_name (nn_isa_cpu ()), nn_isa_name (nn_isa_active ()));
}
