/*  Fast (BLAS) kernels agree with their naive references. */
#include <criterion/criterion.h>

#include "nn_alloc.h"
#include "nn_isa.h"
#include "nn_kernels.h"
#include "nn_kernels_conv.h"
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

//  The fast kernels' tolerances, relative to 1 + |naive|: the forward's
//  1e-5, or 4e-5 where F(2x2, 3x3) runs (its terms are sums of up to 4
//  inputs times sums of up to 9 weights halved and quartered, up to 9x the
//  direct products' magnitude, and float rounding grows with them: 256
//  channels at avx2 read 1.1e-5); the gradients' 1e-4. F(4x4, 3x3) needs
//  2e-4 for all three: B^T's coefficients (up to 5) make its transformed
//  inputs up to 100x the pixels, A^T's (up to 8) weigh the products' sums
//  by up to 64, and the GEMMs' rounding, which grows with the channels
//  summed, comes out of the output transform scaled by that, not by the
//  result: random 3x3 convolutions read 5e-5 at 32 channels and 1.4e-4 at
//  64 (2.6e-4 at 128 and 7.5e-4 at 256, so F(4x4) runs only up to 64
//  channels each side, nn_kernels_wino.c).
static float
s_forward_tol (const nn_conv_shape_t *s)
{
    int m = nn_wino_tile (s, 0, s->n * s->p * s->q);
    return m == 4 ? 2e-4f : m == 2 ? 4e-5f : 1e-5f;
}

static float
s_grad_tol (const nn_conv_shape_t *s)
{
    return nn_wino_tile (s, 0, s->n * s->p * s->q) == 4 ? 2e-4f : 1e-4f;
}

//  The fast convolution kernels against the naive ones on shape s (groups
//  and all), with or without bias, to s_forward_tol and s_grad_tol.
//  Scratch is exactly nn_conv2d_scratch_count floats (ASan builds catch an
//  overrun).
static void
s_check_conv_shape (nn_conv_shape_t s, bool bias)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, (uint64_t) (s.n * 1000 + s.h * 100 + s.c * 10 + s.k + s.r + s.stride
                                   + s.pad + 31 * s.groups));
    cr_assert_eq (nn_conv_shape_finish (&s), 0, "%dx%dx%d k%d %dx%d/%d pad %d groups %d",
                  s.h, s.w, s.c, s.k, s.r, s.s, s.stride, s.pad, s.groups);
    int k = s.k;
    size_t in_n = (size_t) s.n * s.h * s.w * s.c, out_n = (size_t) s.n * s.p * s.q * k;
    size_t w_n = (size_t) k * s.r * s.s * (s.c / s.groups);
    float *in = s_random (in_n, &rng), *wt = s_random (w_n, &rng);
    float *b = bias ? s_random (k, &rng) : NULL;
    float *dout = s_random (out_n, &rng);
    float *out1 = nn_calloc (out_n, sizeof (float)), *out2 = nn_calloc (out_n, sizeof (float));
    float *scratch = nn_malloc (sizeof (float) * nn_conv2d_scratch_count (&s));
    nn_conv2d_forward (out1, in, wt, b, &s, scratch);
    nn_conv2d_forward_naive (out2, in, wt, b, &s);
    s_assert_close (out1, out2, out_n, s_forward_tol (&s), "conv forward");

    float *din1 = nn_malloc (sizeof (float) * in_n), *din2 = nn_malloc (sizeof (float) * in_n);
    float *dw1 = nn_calloc (w_n, sizeof (float)), *dw2 = nn_calloc (w_n, sizeof (float));
    float *db1 = nn_calloc (k, sizeof (float)), *db2 = nn_calloc (k, sizeof (float));
    //  Accumulation: start both from the same non-zero gradients; din is
    //  overwritten, so start it from garbage.
    for (size_t i = 0; i < w_n; i++)
        dw1[i] = dw2[i] = 0.5f;
    for (size_t i = 0; i < in_n; i++)
        din1[i] = din2[i] = NAN;
    nn_conv2d_backward (din1, dw1, bias ? db1 : NULL, dout, in, wt, &s, scratch);
    nn_conv2d_backward_naive (din2, dw2, bias ? db2 : NULL, dout, in, wt, &s);
    s_assert_close (din1, din2, in_n, s_grad_tol (&s), "conv din");
    s_assert_close (dw1, dw2, w_n, s_grad_tol (&s), "conv dw");
    s_assert_close (db1, db2, (size_t) k, 1e-4f, "conv db");
    nn_free (in), nn_free (wt), nn_free (b), nn_free (dout), nn_free (out1);
    nn_free (out2), nn_free (scratch), nn_free (din1), nn_free (din2);
    nn_free (dw1), nn_free (dw2), nn_free (db1), nn_free (db2);
}

static void
s_check_conv (int n, int h, int w, int c, int k, int r, int stride, int pad)
{
    nn_conv_shape_t s = { .n = n, .h = h, .w = w, .c = c, .k = k, .r = r, .s = r,
                          .stride = stride, .pad = pad };
    s_check_conv_shape (s, true);
}

//  Grouped (groups g; g == c == k is depthwise), square kernel r.
static void
s_check_group_conv (int n, int h, int c, int k, int r, int stride, int pad, int g, bool bias)
{
    nn_conv_shape_t s = { .n = n, .h = h, .w = h, .c = c, .k = k, .r = r, .s = r,
                          .stride = stride, .pad = pad, .groups = g };
    s_check_conv_shape (s, bias);
}

Test (kernels, conv_matches_naive_vgg_shapes)
{
    s_check_conv (3, 28, 28, 1, 8, 3, 1, 1);
    s_check_conv (2, 14, 14, 8, 16, 3, 1, 1);
    s_check_conv (5, 7, 7, 16, 4, 3, 1, 1);
    //  Output widths that are multiples of 8 over at least 256 pixels take
    //  our register tile at avx2 and avx512 (4 on neon), others OpenBLAS:
    //  VGG5's second conv (n*p*q = 196: OpenBLAS; 392, not a multiple of the
    //  6-row tile), 80 = 64 + 16 wide with a 576-long patch, 24 = 16 + 8.
    s_check_conv (1, 14, 14, 32, 64, 3, 1, 1);
    s_check_conv (2, 14, 14, 32, 64, 3, 1, 1);
    s_check_conv (2, 7, 7, 64, 80, 3, 1, 1);
    s_check_conv (6, 7, 7, 64, 80, 3, 1, 1);
    s_check_conv (3, 10, 10, 8, 24, 3, 1, 1);
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

static void s_check_conv_rows (int n, int h, int c, int k, int r, int stride, int pad,
                               int pieces);

Test (kernels, direct_conv_every_width_matches_naive)
{
    //  nn_kernels_direct.c compiles one body per K / 8 (1..8) and per
    //  level, with its own pixel and patch blocks: every width, a patch of
    //  27 (3 channels) at stride 2 on odd sizes, a 5x5 on 5x5 images with
    //  a pad of 2 (every window crosses the edge), a window as wide as the
    //  image, and one wider (im2col's).
    for (int k = 8; k <= 64; k += 8) {
        s_check_conv (3, 9, 7, 3, k, 3, 2, 1);
        s_check_conv (2, 5, 5, 1, k, 5, 1, 2);
        s_check_conv_rows (3, 11, 1, k, 3, 1, 1, 5);
    }
    s_check_conv (2, 3, 3, 2, 16, 3, 1, 0);
    s_check_conv (2, 2, 2, 1, 8, 3, 1, 1);
}

//  The row-range kernels, run over pieces cut anywhere (mid-image, mid-row),
//  add up to the naive whole-batch result.
static void
s_check_conv_rows_groups (int n, int h, int c, int k, int r, int stride, int pad, int pieces,
                          int groups)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, (uint64_t) (n * 7 + h * 5 + c * 3 + k + pieces));
    nn_conv_shape_t s = { .n = n, .h = h, .w = h, .c = c, .k = k, .r = r, .s = r,
                          .stride = stride, .pad = pad, .groups = groups };
    cr_assert_eq (nn_conv_shape_finish (&s), 0);
    int rows = n * s.p * s.q;
    size_t in_n = (size_t) n * h * h * c, out_n = (size_t) rows * k;
    size_t w_n = (size_t) k * r * r * (c / s.groups);
    float *in = s_random (in_n, &rng), *wt = s_random (w_n, &rng), *b = s_random (k, &rng);
    float *dout = s_random (out_n, &rng);
    float *out1 = nn_calloc (out_n, sizeof (float)), *out2 = nn_calloc (out_n, sizeof (float));
    float *dw1 = nn_calloc (w_n, sizeof (float)), *dw2 = nn_calloc (w_n, sizeof (float));
    float *db1 = nn_calloc (k, sizeof (float)), *db2 = nn_calloc (k, sizeof (float));
    float *scratch = nn_malloc (sizeof (float) * nn_conv2d_scratch_count (&s));
    for (int i = 0; i < pieces; i++) {
        //  Uneven cuts: piece i ends at rows * (i+1)^2 / pieces^2.
        int r0 = (int) ((long) rows * i * i / ((long) pieces * pieces));
        int r1 = (int) ((long) rows * (i + 1) * (i + 1) / ((long) pieces * pieces));
        nn_conv2d_forward_rows (out1, in, wt, b, &s, r0, r1, scratch);
        nn_conv2d_backward_weights_rows (dw1, db1, dout, in, &s, r0, r1, scratch);
    }
    nn_conv2d_forward_naive (out2, in, wt, b, &s);
    nn_conv2d_backward_naive (NULL, dw2, db2, dout, in, wt, &s);
    //  The pieces run F(4x4) only where the whole batch would.
    s_assert_close (out1, out2, out_n, s_forward_tol (&s), "conv forward by rows");
    s_assert_close (dw1, dw2, w_n, s_grad_tol (&s), "conv dw by rows");
    s_assert_close (db1, db2, (size_t) k, 1e-4f, "conv db by rows");
    nn_free (in), nn_free (wt), nn_free (b), nn_free (dout), nn_free (out1);
    nn_free (out2), nn_free (dw1), nn_free (dw2), nn_free (db1), nn_free (db2);
    nn_free (scratch);
}

static void
s_check_conv_rows (int n, int h, int c, int k, int r, int stride, int pad, int pieces)
{
    s_check_conv_rows_groups (n, h, c, k, r, stride, pad, pieces, 1);
}

Test (kernels, conv_rows_match_naive)
{
    s_check_conv_rows (5, 14, 8, 16, 3, 1, 1, 2);   //  12.5 images a piece
    s_check_conv_rows (3, 7, 16, 4, 3, 1, 1, 5);
    s_check_conv_rows (3, 7, 32, 64, 3, 1, 1, 2);   //  pieces of 36 and 111 rows
    s_check_conv_rows (12, 7, 32, 64, 3, 1, 1, 2);  //  147 and 441: our tile, if any
    s_check_conv_rows (3, 9, 3, 5, 5, 2, 2, 4);     //  stride 2, 5x5
    s_check_conv_rows (5, 28, 1, 32, 3, 1, 1, 3);   //  direct path, pieces of odd length
    s_check_conv_rows (4, 9, 2, 16, 3, 2, 1, 7);    //  direct path, stride 2
    s_check_conv_rows (3, 6, 24, 40, 1, 1, 0, 4);   //  1x1: a GEMM on the input
    s_check_conv_rows_groups (3, 7, 16, 32, 3, 1, 1, 3, 2);     //  2 groups of 8 -> 16
    s_check_conv_rows_groups (5, 9, 72, 72, 3, 1, 1, 4, 72);    //  depthwise
    s_check_conv_rows_groups (3, 9, 19, 19, 5, 2, 2, 5, 19);    //  depthwise, 5x5/2, odd c
}

//  Every kernel size the paper's models use (1, 3, 5, 7) at stride 1 and 2,
//  unpadded and "same"-padded, with and without bias, on output widths
//  that take our register tile (multiples of 8 and 16) and that do not.
Test (kernels, conv_kernels_strides_pads_bias_match_naive)
{
    static const int kernels[] = { 1, 3, 5, 7 }, widths[] = { 5, 16, 24, 64 };
    for (int i = 0; i < 4; i++)
        for (int stride = 1; stride <= 2; stride++)
            for (int padded = 0; padded <= 1; padded++) {
                int r = kernels[i], pad = padded ? r / 2 : 0;
                int k = widths[(i + stride + padded) % 4];
                int c = 3 + 5 * ((i + padded) % 3);
                s_check_conv (2, 9, 8, c, k, r, stride, pad);
                nn_conv_shape_t s = { .n = 3, .h = 7, .w = 9, .c = c, .k = k, .r = r,
                                      .s = r, .stride = stride, .pad = pad };
                s_check_conv_shape (s, false);
            }
}

//  Taps that read only padding are cut from the GEMMs (nn_kernels_conv.c
//  s_live_shape): ResNet18's last stage on 1x1 and 2x2 images. Every
//  path: one live tap (the input is the im2col), a 2x2 window of a 3x3
//  kernel (the live weights in two runs per row), a 7x7/2 stem on a tiny
//  image, groups, and enough pixels for our tile where the CPU has one
//  (>= 256 rows); shapes where one pad cannot express the cut run uncut.
Test (kernels, conv_dead_taps_match_naive)
{
    s_check_conv (3, 1, 1, 16, 24, 3, 1, 1);    //  1x1 image: the centre tap
    s_check_conv (300, 1, 1, 64, 64, 3, 1, 1);  //  the same, 300 rows
    s_check_conv (5, 2, 2, 8, 16, 3, 2, 1);     //  2x2 -> 1x1: taps (1..2, 1..2)
    s_check_group_conv (5, 2, 8, 16, 3, 2, 1, 1, false);     //  the same, no bias
    s_check_conv (300, 2, 2, 16, 64, 3, 2, 1);  //  the same, 300 rows
    s_check_conv (4, 2, 2, 3, 16, 7, 2, 3);     //  7x7/2 on 2x2: 2x2 live
    s_check_conv (2, 1, 1, 5, 7, 5, 1, 2);      //  5x5 on 1x1, odd widths
    s_check_conv (3, 1, 3, 4, 8, 3, 1, 1);      //  1x3: rows cut, columns not
    s_check_conv (2, 3, 1, 4, 8, 3, 1, 1);      //  3x1
    s_check_group_conv (3, 1, 16, 32, 3, 1, 1, 2, true);     //  2 groups, 1x1 image
    s_check_group_conv (300, 2, 16, 64, 3, 2, 1, 4, false);  //  4 groups, 2x2/2
    s_check_conv_rows (7, 1, 32, 64, 3, 1, 1, 3);            //  by row pieces
    s_check_conv_rows (9, 2, 16, 32, 3, 2, 1, 4);
}

//  1x1 stride-1 unpadded convolutions are one GEMM on the input (no
//  im2col), forward and both backward halves; stride 2 or padding is not.
//  Dense 3x3 stride-1 convolutions with 8+ channels each side, over 32
//  tiles or more, run by Winograd (nn_kernels_wino.c): F(4x4, 3x3) where
//  its 4x4 tiles do fewer multiply-adds over the image than F(2x2)'s 2x2
//  ones (7x7, 14x14, 4x4, odd sizes) and the call holds 32 of them, up to
//  64 channels each side (128 and 256 stay on F(2x2)); else F(2x2, 3x3). Both on the smallest images
//  they take, odd sizes whose last tile is partly outside, channel counts
//  that are no vector width's multiple, pads 0, 1 and 2, no bias, tiles
//  that take several chunks (F(2x2): 256 + 8 channels, 64 tiles a chunk,
//  the minimum; F(4x4): 64 + 56, 160 tiles, 64 a chunk), and row pieces
//  cut mid-tile, some under 32 tiles (F(2x2) or im2col) beside F(4x4)'s.
static int
s_wino (int n, int h, int w, int c, int k, int pad)
{
    nn_conv_shape_t s = { .n = n, .h = h, .w = w, .c = c, .k = k, .r = 3, .s = 3,
                          .stride = 1, .pad = pad };
    nn_conv_shape_finish (&s);
    return nn_wino_tile (&s, 0, n * s.p * s.q);
}

Test (kernels, conv_winograd_matches_naive)
{
    static const int shapes[][7] = {    //  n, h, w, c, k, pad, the tile side it takes
        { 40, 2, 2, 8, 8, 1, 2 }, { 3, 5, 7, 13, 19, 1, 2 }, { 8, 6, 6, 9, 11, 0, 2 },
        { 4, 4, 3, 16, 8, 2, 2 }, { 2, 16, 16, 256, 8, 1, 2 }, { 8, 8, 8, 8, 256, 1, 2 },
        { 6, 5, 5, 16, 16, 1, 2 },          //  5x5: 9 x 16 = 4 x 36 multiply-adds, a tie
        { 40, 4, 4, 8, 8, 1, 4 }, { 8, 7, 7, 64, 64, 1, 4 }, { 2, 14, 14, 32, 64, 1, 4 },
        { 4, 9, 11, 13, 19, 1, 4 }, { 8, 10, 10, 16, 24, 0, 4 }, { 4, 9, 9, 24, 16, 2, 4 },
        { 8, 8, 8, 64, 64, 1, 4 }, { 8, 8, 8, 128, 128, 1, 2 }, { 8, 8, 8, 64, 128, 1, 2 },
        { 40, 8, 8, 64, 56, 1, 4 }, { 2, 28, 28, 8, 16, 1, 4 },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        cr_assert_eq (s_wino (v[0], v[1], v[2], v[3], v[4], v[5]), v[6],
                      "shape %zu takes F(%dx%d)", i, v[6], v[6]);
        s_check_conv (v[0], v[1], v[2], v[3], v[4], 3, 1, v[5]);
    }
    nn_conv_shape_t s = { .n = 3, .h = 7, .w = 7, .c = 24, .k = 40, .r = 3, .s = 3,
                          .stride = 1, .pad = 1 };
    s_check_conv_shape (s, false);      //  12 tiles of 4x4: F(2x2)
    s.n = 9;
    s_check_conv_shape (s, false);      //  36: F(4x4)
    s_check_conv_rows (5, 7, 13, 19, 3, 1, 1, 6);
    s_check_conv_rows (6, 9, 8, 16, 3, 1, 1, 3);
    //  Pieces of 8, 16, 28 and 40 tiles of 4x4: im2col, F(2x2) twice, F(4x4)
    s_check_conv_rows (5, 14, 13, 19, 3, 1, 1, 4);
    s_check_conv_rows (20, 7, 32, 64, 3, 1, 1, 3);  //  10, 28, 46: F(2x2) twice, F(4x4)
    s_check_conv_rows (3, 14, 8, 8, 3, 1, 2, 2);    //  pad 2, 16x16 outputs: 12, 36
    //  Not Winograd: under 32 tiles, 7 channels, stride 2, 5x5, groups.
    cr_assert (!s_wino (2, 2, 2, 8, 8, 1));
    cr_assert (!s_wino (40, 8, 8, 7, 8, 1));
    nn_conv_shape_t g = { .n = 40, .h = 8, .w = 8, .c = 16, .k = 16, .r = 3, .s = 3,
                          .stride = 1, .pad = 1, .groups = 2 };
    nn_conv_shape_finish (&g);
    cr_assert (!nn_wino_pays (&g, 0, 40 * 64));
}

Test (kernels, conv_1x1_matches_naive)
{
    s_check_conv (3, 5, 5, 16, 64, 1, 1, 0);    //  tile widths, 75 pixels: OpenBLAS
    s_check_conv (3, 10, 10, 16, 64, 1, 1, 0);  //  300 pixels: the tile
    s_check_conv (2, 4, 6, 64, 16, 1, 1, 0);    //  din 64 wide
    s_check_conv (2, 3, 3, 7, 5, 1, 1, 0);      //  odd widths: OpenBLAS
    s_check_conv (1, 1, 1, 576, 1024, 1, 1, 0); //  1 pixel, MobileNetV3's 1x1 head
    s_check_conv (2, 7, 7, 32, 64, 1, 2, 0);    //  ResNet's projection shortcut
    s_check_conv (2, 4, 4, 8, 8, 1, 1, 1);      //  padded 1x1
    s_check_conv (3, 10, 10, 4, 12, 3, 1, 1);   //  widths 12 and 36: NEON's tile only
    nn_conv_shape_t s = { .n = 2, .h = 4, .w = 5, .c = 24, .k = 40, .r = 1, .s = 1,
                          .stride = 1, .pad = 0, .groups = 4 };
    s_check_conv_shape (s, false);              //  grouped 1x1
}

Test (kernels, grouped_conv_matches_naive)
{
    s_check_group_conv (2, 8, 16, 32, 3, 1, 1, 2, true);     //  groups of 8 -> 16
    s_check_group_conv (3, 10, 16, 32, 3, 1, 1, 2, false);   //  the same on 300 pixels: tiles
    s_check_group_conv (3, 10, 32, 32, 1, 1, 0, 2, true);    //  grouped 1x1, tiles
    s_check_group_conv (2, 9, 12, 8, 3, 2, 1, 4, false);     //  3 -> 2 per group
    s_check_group_conv (3, 6, 6, 9, 5, 1, 2, 3, true);       //  2 -> 3, 5x5
    s_check_group_conv (2, 7, 64, 128, 3, 2, 1, 4, true);    //  16 -> 32, stride 2
    s_check_group_conv (8, 16, 16, 64, 3, 2, 1, 4, true);    //  4 -> 16, 512 pixels
    s_check_group_conv (2, 5, 8, 16, 3, 1, 1, 8, true);      //  depthwise, multiplier 2
}

//  groups == c == k: the direct depthwise kernels. Channel counts around
//  the vector runs (64, 16, 8, single floats), MobileNetV3-Small's kernels
//  and strides, 1-pixel images, and images smaller than the kernel.
Test (kernels, depthwise_conv_matches_naive)
{
    static const int channels[] = { 2, 3, 8, 16, 19, 24, 72, 88, 96, 120 };
    for (int i = 0; i < 10; i++) {
        int c = channels[i];
        s_check_group_conv (2, 7, c, c, 3, 1 + i % 2, 1, c, i % 3 != 0);
        s_check_group_conv (2, 8, c, c, 5, 2 - i % 2, 2, c, i % 3 != 1);
    }
    s_check_group_conv (3, 1, 16, 16, 3, 1, 1, 16, true);    //  1x1 image, 3x3 kernel
    s_check_group_conv (2, 2, 24, 24, 5, 2, 2, 24, true);    //  image smaller than kernel
    s_check_group_conv (2, 9, 40, 40, 7, 2, 3, 40, false);   //  7x7/2
    s_check_group_conv (2, 6, 8, 8, 3, 1, 0, 8, true);       //  unpadded
    s_check_group_conv (2, 6, 8, 8, 3, 3, 1, 8, true);       //  stride 3
    nn_conv_shape_t s = { .n = 2, .h = 5, .w = 11, .c = 17, .k = 17, .r = 3, .s = 5,
                          .stride = 2, .pad = 1, .groups = 17 };
    s_check_conv_shape (s, true);                            //  3x5 kernel, wide image
}

Test (kernels, conv_shape_checks_groups)
{
    nn_conv_shape_t s = { .n = 1, .h = 4, .w = 4, .c = 6, .k = 4, .r = 3, .s = 3,
                          .stride = 1, .pad = 1 };
    cr_assert_eq (nn_conv_shape_finish (&s), 0);
    cr_assert_eq (s.groups, 1, "0 groups is a dense convolution");
    s.groups = 2;
    cr_assert_eq (nn_conv_shape_finish (&s), 0);
    s.groups = 4;       //  divides k, not c
    cr_assert_eq (nn_conv_shape_finish (&s), -1);
    s.groups = 3;       //  divides c, not k
    cr_assert_eq (nn_conv_shape_finish (&s), -1);
    s.groups = -2;
    cr_assert_eq (nn_conv_shape_finish (&s), -1);
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

//  Max-pool backward against the winners' codes, by hand: windows that tile
//  the image (2x2/2, 3x3/3), ones that leave a row and a column uncovered
//  (5x7 under 2x2/2), overlapping and padded ones (3x3/2 pad 1), with and
//  without dropped non-positive winners; din starts as NaN, so a pixel the
//  kernel forgets to write fails.
Test (kernels, maxpool_backward_matches_the_winners)
{
    static const int shapes[][5] = {    //  h, w, kernel, stride, pad
        { 6, 8, 2, 2, 0 }, { 5, 7, 2, 2, 0 }, { 9, 6, 3, 3, 0 }, { 7, 7, 3, 2, 1 },
        { 1, 1, 2, 2, 1 },
    };
    nn_rng_t rng;
    nn_rng_seed (&rng, 77);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int drop = 0; drop <= 1; drop++) {
            nn_pool_shape_t s = { .n = 3, .h = shapes[i][0], .w = shapes[i][1], .c = 19,
                                  .kernel = shapes[i][2], .stride = shapes[i][3],
                                  .pad = shapes[i][4] };
            cr_assert_eq (nn_pool_shape_finish (&s), 0);
            size_t in_n = (size_t) s.n * s.h * s.w * s.c, out_n = (size_t) s.n * s.p * s.q * s.c;
            float *in = s_random (in_n, &rng), *dout = s_random (out_n, &rng);
            float *out = nn_malloc (sizeof (float) * out_n);
            float *din = nn_malloc (sizeof (float) * in_n);
            float *want = nn_calloc (in_n, sizeof (float));
            uint8_t *win = nn_malloc (out_n);
            nn_maxpool_forward (out, win, in, &s, drop);
            for (int n = 0; n < s.n; n++)
                for (int p = 0; p < s.p; p++)
                    for (int q = 0; q < s.q; q++)
                        for (int c = 0; c < s.c; c++) {
                            size_t at = (((size_t) n * s.p + p) * s.q + q) * s.c + c;
                            if (win[at] == NN_POOL_NO_WINNER)
                                continue;
                            int y = p * s.stride - s.pad + win[at] / s.kernel;
                            int x = q * s.stride - s.pad + win[at] % s.kernel;
                            cr_assert (y >= 0 && y < s.h && x >= 0 && x < s.w);
                            want[(((size_t) n * s.h + y) * s.w + x) * s.c + c] += dout[at];
                        }
            for (size_t j = 0; j < in_n; j++)
                din[j] = NAN;
            nn_maxpool_backward (din, dout, win, &s);
            for (size_t j = 0; j < in_n; j++)
                cr_assert_float_eq (din[j], want[j], 1e-6f, "shape %zu drop %d pixel %zu: %g vs %g",
                                    i, drop, j, (double) din[j], (double) want[j]);
            nn_free (in), nn_free (dout), nn_free (out), nn_free (din), nn_free (want);
            nn_free (win);
        }
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

//  The activations' fast kernels against the naive ones on N floats spread
//  over [-5, 5] (past both kinks), with the kink points at S_AT (i).
//  N is not a multiple of any vector width: the tails run too.
enum { S_ACT_N = 1003, S_KINKS = 6 };
#define S_AT(i) (100 + 37 * (i))
static const float s_kinks[S_KINKS] = { -3.0f, 3.0f, 0.0f, -4.0f, 4.0f, -1.0f };

typedef void (*s_unary_fn) (float *out, const float *in, size_t count);
typedef void (*s_unary_grad_fn) (float *din, const float *dout, const float *in, size_t count);

//  f and df against their naive twins, and against PyTorch's values at
//  s_kinks (want: f; want_d: f' for an upstream gradient of 1), in place too.
static void
s_check_activation (s_unary_fn f, s_unary_fn f_naive, s_unary_grad_fn df,
                    s_unary_grad_fn df_naive, const float *want, const float *want_d,
                    const char *what)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 11);
    float x[S_ACT_N], dout[S_ACT_N], y1[S_ACT_N], y2[S_ACT_N], d1[S_ACT_N], d2[S_ACT_N];
    for (int i = 0; i < S_ACT_N; i++) {
        x[i] = 10.0f * nn_rng_uniform (&rng) - 5.0f;
        dout[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    }
    for (int i = 0; i < S_KINKS; i++)
        x[S_AT (i)] = s_kinks[i], dout[S_AT (i)] = 1.0f;
    f (y1, x, S_ACT_N);
    f_naive (y2, x, S_ACT_N);
    s_assert_close (y1, y2, S_ACT_N, 1e-6f, what);
    df (d1, dout, x, S_ACT_N);
    df_naive (d2, dout, x, S_ACT_N);
    s_assert_close (d1, d2, S_ACT_N, 1e-6f, what);
    for (int i = 0; i < S_KINKS; i++) {
        cr_assert_float_eq (y1[S_AT (i)], want[i], 1e-6f, "%s (%g)", what, s_kinks[i]);
        cr_assert_float_eq (d1[S_AT (i)], want_d[i], 1e-6f, "%s' (%g)", what, s_kinks[i]);
    }
    //  In place: out may alias in; din may alias dout.
    memcpy (y1, x, sizeof x);
    f (y1, y1, S_ACT_N);
    s_assert_close (y1, y2, S_ACT_N, 1e-6f, what);
    memcpy (d1, dout, sizeof dout);
    df (d1, d1, x, S_ACT_N);
    s_assert_close (d1, d2, S_ACT_N, 1e-6f, what);
}

Test (kernels, hswish_hsigmoid_match_naive_and_pytorch_kinks)
{
    //  PyTorch 1.13's F.hardswish / F.hardsigmoid at s_kinks, and their
    //  gradients.
    static const float hswish[] = { 0.0f, 3.0f, 0.0f, 0.0f, 4.0f, -1.0f / 3.0f };
    static const float hswish_d[] = { -0.5f, 1.5f, 0.5f, 0.0f, 1.0f, 1.0f / 6.0f };
    static const float hsig[] = { 0.0f, 1.0f, 0.5f, 0.0f, 1.0f, 1.0f / 3.0f };
    static const float hsig_d[] = { 0.0f, 0.0f, 1.0f / 6.0f, 0.0f, 0.0f, 1.0f / 6.0f };
    s_check_activation (nn_hswish_forward, nn_hswish_forward_naive, nn_hswish_backward,
                        nn_hswish_backward_naive, hswish, hswish_d, "hswish");
    s_check_activation (nn_hsigmoid_forward, nn_hsigmoid_forward_naive, nn_hsigmoid_backward,
                        nn_hsigmoid_backward_naive, hsig, hsig_d, "hsigmoid");
}

//  Central differences of L = sum (g * f (x)) against the backward kernel,
//  at points at least 0.05 from the kinks (where f is smooth).

static void
s_check_unary_gradient (s_unary_fn f, s_unary_grad_fn df, const char *what)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 5);
    enum { N = 61 };
    float x[N], g[N], d[N];
    for (int i = 0; i < N; i++) {
        do
            x[i] = 10.0f * nn_rng_uniform (&rng) - 5.0f;
        while (fabsf (fabsf (x[i]) - 3.0f) < 0.05f);
        g[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    }
    df (d, g, x, N);
    double biggest = 0.0;
    for (int i = 0; i < N; i++) {
        float h = 1e-2f, xp = x[i] + h, xm = x[i] - h, fp, fm;
        f (&fp, &xp, 1);
        f (&fm, &xm, 1);
        double num = g[i] * ((double) fp - fm) / (2.0 * h);
        cr_assert (fabs (num - d[i]) <= 1e-3 * (1.0 + fabs (num)),
                   "%s: x %g: numerical %g, backward %g", what, (double) x[i], num,
                   (double) d[i]);
        biggest = fmax (biggest, fabs (num));
    }
    cr_assert (biggest > 0.1, "%s: the gradient is all but zero", what);
}

Test (kernels, hswish_hsigmoid_gradients_match_finite_differences)
{
    s_check_unary_gradient (nn_hswish_forward, nn_hswish_backward, "hswish");
    s_check_unary_gradient (nn_hsigmoid_forward, nn_hsigmoid_backward, "hsigmoid");
}

Test (kernels, channel_scale_matches_naive)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 17);
    static const int shapes[][3] = { { 3, 49, 72 }, { 2, 1, 576 }, { 2, 9, 19 }, { 1, 784, 16 } };
    for (int t = 0; t < 4; t++) {
        int n = shapes[t][0], hw = shapes[t][1], c = shapes[t][2];
        size_t xn = (size_t) n * hw * c, sn = (size_t) n * c;
        float *x = s_random (xn, &rng), *s = s_random (sn, &rng), *dout = s_random (xn, &rng);
        float *y1 = nn_malloc (sizeof (float) * xn), *y2 = nn_malloc (sizeof (float) * xn);
        float *dx1 = nn_malloc (sizeof (float) * xn), *dx2 = nn_malloc (sizeof (float) * xn);
        float *ds1 = nn_malloc (sizeof (float) * sn), *ds2 = nn_malloc (sizeof (float) * sn);
        nn_channel_scale_forward (y1, x, s, n, hw, c);
        nn_channel_scale_forward_naive (y2, x, s, n, hw, c);
        s_assert_close (y1, y2, xn, 1e-6f, "channel scale forward");
        //  Overwritten, not accumulated: start from garbage.
        for (size_t i = 0; i < sn; i++)
            ds1[i] = NAN;
        nn_channel_scale_backward (dx1, ds1, dout, x, s, n, hw, c);
        nn_channel_scale_backward_naive (dx2, ds2, dout, x, s, n, hw, c);
        s_assert_close (dx1, dx2, xn, 1e-6f, "channel scale dx");
        s_assert_close (ds1, ds2, sn, 1e-5f, "channel scale ds");
        //  Either output may be NULL; dx may alias dout.
        for (size_t i = 0; i < sn; i++)
            ds1[i] = NAN;
        nn_channel_scale_backward (NULL, ds1, dout, x, s, n, hw, c);
        s_assert_close (ds1, ds2, sn, 1e-5f, "channel scale ds alone");
        memcpy (dx1, dout, sizeof (float) * xn);
        nn_channel_scale_backward (dx1, NULL, dx1, x, s, n, hw, c);
        s_assert_close (dx1, dx2, xn, 1e-6f, "channel scale dx in place");
        nn_free (x), nn_free (s), nn_free (dout), nn_free (y1), nn_free (y2);
        nn_free (dx1), nn_free (dx2), nn_free (ds1), nn_free (ds2);
    }
}

//  L = sum (g * x * s): central differences in every x and s element.
Test (kernels, channel_scale_gradient_matches_finite_differences)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 23);
    enum { N = 2, HW = 5, C = 11 };
    float x[N * HW * C], s[N * C], g[N * HW * C], dx[N * HW * C], ds[N * C];
    float y[N * HW * C];
    for (int i = 0; i < N * HW * C; i++) {
        x[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
        g[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    }
    for (int i = 0; i < N * C; i++)
        s[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    nn_channel_scale_backward (dx, ds, g, x, s, N, HW, C);
    float h = 1e-2f;
    //  One perturbed element of x (which 0) or s (which 1) at a time.
    for (int which = 0; which < 2; which++) {
        float *v = which ? s : x, *grad = which ? ds : dx;
        int count = which ? N * C : N * HW * C;
        double biggest = 0.0;
        for (int i = 0; i < count; i++) {
            double l[2];
            float keep = v[i];
            for (int side = 0; side < 2; side++) {
                v[i] = keep + (side ? -h : h);
                nn_channel_scale_forward (y, x, s, N, HW, C);
                l[side] = 0.0;
                for (int j = 0; j < N * HW * C; j++)
                    l[side] += (double) g[j] * y[j];
            }
            v[i] = keep;
            double num = (l[0] - l[1]) / (2.0 * h);
            cr_assert (fabs (num - grad[i]) <= 1e-3 * (1.0 + fabs (num)),
                       "channel scale d%s[%d]: numerical %g, backward %g", which ? "s" : "x",
                       i, num, (double) grad[i]);
            biggest = fmax (biggest, fabs (num));
        }
        cr_assert (biggest > 0.1, "channel scale: the gradient is all but zero");
    }
}
