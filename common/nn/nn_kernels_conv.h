/*  nn_kernels_conv.h: private to the nn_kernels*.c files. What the dense
    and grouped convolutions (nn_kernels_conv.c) share with the depthwise
    ones (nn_kernels_dwconv.c). */
#ifndef NN_KERNELS_CONV_H_INCLUDED
#define NN_KERNELS_CONV_H_INCLUDED

#include "nn_kernels.h"

#include <stdbool.h>
#include <stddef.h>

//  groups as the kernels read it: 0 (a shape nn_conv_shape_finish has not
//  seen) is a dense convolution, as 1.
static inline int
s_groups (const nn_conv_shape_t *s)
{
    return s->groups > 1 ? s->groups : 1;
}

//  One filter per channel (groups == c == k): the direct kernels of
//  nn_kernels_dwconv.c, not a GEMM of 1-channel groups.
static inline bool
s_depthwise (const nn_conv_shape_t *s)
{
    return s_groups (s) == s->c && s->k == s->c && s->c > 1;
}

//  Output row g of a batch (pixel (p, q) of image n), and the next one.
static inline void
s_pixel (const nn_conv_shape_t *s, int g, int *n, int *p, int *q)
{
    int pq = s->p * s->q;
    *n = g / pq;
    *p = g % pq / s->q;
    *q = g % s->q;
}

static inline void
s_pixel_next (const nn_conv_shape_t *s, int *n, int *p, int *q)
{
    if (++*q < s->q)
        return;
    *q = 0;
    if (++*p < s->p)
        return;
    *p = 0;
    ++*n;
}

//  Depthwise convolutions (s_depthwise): the contracts of
//  nn_conv2d_forward_rows, nn_conv2d_backward_weights_rows and
//  nn_conv2d_backward_input, with w (c, r, s, 1) and scratch of
//  nn_dwconv_scratch_count floats.
size_t nn_dwconv_scratch_count (const nn_conv_shape_t *s);
void nn_dwconv_forward_rows (float *out, const float *in, const float *w, const float *b,
                             const nn_conv_shape_t *s, int r0, int r1, float *scratch);
void nn_dwconv_backward_weights_rows (float *dw, float *db, const float *dout,
                                      const float *in, const nn_conv_shape_t *s, int r0,
                                      int r1, float *scratch);
void nn_dwconv_backward_input (float *din, const float *dout, const float *w,
                               const nn_conv_shape_t *s, float *scratch);

//  Dense convolutions with a small patch (r*s*c <= 32; K a multiple of 8
//  up to 64; s <= w): direct loops (nn_kernels_direct.c), the contracts
//  of nn_conv2d_forward_rows and nn_conv2d_backward_weights_rows (db
//  included), with scratch of nn_direct_scratch_count floats. The input
//  gradient is im2col's (a first layer has none).
bool nn_direct_takes (const nn_conv_shape_t *s);
size_t nn_direct_scratch_count (const nn_conv_shape_t *s);
void nn_direct_forward_rows (float *out, const float *in, const float *w, const float *b,
                             const nn_conv_shape_t *s, int r0, int r1, float *scratch);
void nn_direct_backward_weights_rows (float *dw, float *db, const float *dout,
                                      const float *in, const nn_conv_shape_t *s, int r0,
                                      int r1, float *scratch);

//  dst[j * ldd + i] (+)= src[i * lds + j] for i < rows, j < cols, in 16 x
//  16 blocks (add: accumulate, else overwrite).
void nn_conv_transpose (float *dst, size_t ldd, const float *src, size_t lds, int rows,
                        int cols, bool add);

//  Dense 3x3 stride-1 convolutions on images of at least 2x2 outputs, 8+
//  channels each side: Winograd's F(2x2, 3x3) or F(4x4, 3x3)
//  (nn_kernels_wino.c), the contracts of the nn_conv2d_*_rows kernels and
//  nn_conv2d_backward_input (the weight gradient without db, which the
//  caller adds), with scratch of nn_wino_scratch_count floats.
bool nn_wino_takes (const nn_conv_shape_t *s);
//  The output tile side Winograd runs output pixels [r0, r1) of shape s
//  with: 4 (F(4x4)) where that does fewer multiply-adds over the image's
//  tiles and the pixels hold enough of its tiles, else 2 (F(2x2)) where
//  they hold enough of those, else 0 (not Winograd: im2col).
int nn_wino_tile (const nn_conv_shape_t *s, int r0, int r1);
//  Whether Winograd runs output pixels [r0, r1) of shape s (nn_wino_tile
//  is not 0).
bool nn_wino_pays (const nn_conv_shape_t *s, int r0, int r1);
size_t nn_wino_scratch_count (const nn_conv_shape_t *s);
void nn_wino_forward_rows (float *out, const float *in, const float *w, const float *b,
                           const nn_conv_shape_t *s, int r0, int r1, float *scratch);
void nn_wino_backward_weights_rows (float *dw, const float *dout, const float *in,
                                    const nn_conv_shape_t *s, int r0, int r1,
                                    float *scratch);
void nn_wino_backward_input (float *din, const float *dout, const float *w,
                             const nn_conv_shape_t *s, float *scratch);

#endif
