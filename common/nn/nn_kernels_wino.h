/*  nn_kernels_wino.h: private to nn_kernels_wino.c and
    nn_kernels_wino_xform.c. How a Winograd convolution cuts its output
    into tiles, and the transforms (one clone per ISA level each) that
    take tiles into and out of the planes the GEMMs run on.

    F(m x m, 3x3), m 2 or 4: an m x m output tile reads an a x a input
    window, a = m + 2, at (m ti - pad, m tj - pad); its transformed tile
    has a*a elements xi = i * a + j, and element xi of every tile of a
    chunk of T forms plane xi, (T, channels). Pixels outside the image
    read zeros (the zero row), outputs past the image go to a sink row. */
#ifndef NN_KERNELS_WINO_H_INCLUDED
#define NN_KERNELS_WINO_H_INCLUDED

#include "nn_kernels_conv.h"

typedef struct {
    const nn_conv_shape_t *s;
    int m;              //  output tile side, 2 or 4
    int a;              //  input window side, m + 2
    int planes;         //  a * a
    int down, across;   //  tiles per image
} nn_wino_tiles_t;

static inline nn_wino_tiles_t
s_wino_tiles (const nn_conv_shape_t *s, int m)
{
    nn_wino_tiles_t tl = { .s = s, .m = m, .a = m + 2, .planes = (m + 2) * (m + 2),
                           .down = (s->p + m - 1) / m, .across = (s->q + m - 1) / m };
    return tl;
}

//  Plane xi of rows x cols floats starts at xi * s_wino_plane (rows,
//  cols): a cache line past the packed size, so that the transforms'
//  (m+2)^2 streams (a power of two apart at 64 tiles or k * c = 2048,
//  which put F(4x4)'s 36 in one L1 set) fall in different sets.
static inline size_t
s_wino_plane (int rows, int cols)
{
    return (size_t) rows * cols + 16;
}

//  V (planes, T, c) = B^T d B of tiles [t0, t0 + T) of in (n, h, w, c).
void nn_wino_input (float *V, const float *in, const nn_wino_tiles_t *tl, int t0, int T,
                    const float *zero);
//  out's kept pixels (inside the image and in [r0, r1)) of tiles [t0, t0 +
//  T) = A^T M A + b, M (planes, T, k), b k floats (zeros when the layer
//  has none).
void nn_wino_output (float *out, const float *M, const float *b, const nn_wino_tiles_t *tl,
                     int t0, int T, int r0, int r1, float *sink);
//  dM (planes, T, k) = A dY A^T of tiles [t0, t0 + T), dY (dout's pixels)
//  zero outside the image and outside [r0, r1).
void nn_wino_dout (float *dM, const float *dout, const nn_wino_tiles_t *tl, int t0, int T,
                   int r0, int r1, float *zero);
//  din's window pixels of tiles [t0, t0 + T) += B dV B^T, dV (planes, T, c).
void nn_wino_din (float *din, const float *dV, const nn_wino_tiles_t *tl, int t0, int T,
                  float *sink);
//  U (planes, k, c) = G g G^T of every (k, c) pair's taps g, w (k, 3, 3, c).
void nn_wino_weights (float *U, const float *w, int m, int K, int C);
//  dw (k, 3, 3, c) += G^T dU G of every (k, c) pair, dU (planes, k, c).
void nn_wino_dweights (float *dw, const float *dU, int m, int K, int C);

#endif
