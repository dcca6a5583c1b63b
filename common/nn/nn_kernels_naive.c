/*  nn_kernels_naive.c: direct-loop references for the BLAS-backed kernels.
    Slow and obvious on purpose; the tests check the fast kernels agree. */
#include "nn_kernels.h"

#include <string.h>

void
nn_conv2d_forward_naive (float *out, const float *in, const float *w,
                         const float *b, const nn_conv_shape_t *s)
{
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    double acc = b ? b[k] : 0.0;
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r;
                            int iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                continue;
                            for (int c = 0; c < s->c; c++)
                                acc += (double) in[(((size_t) n * s->h + ih) * s->w + iw) * s->c + c]
                                     * w[(((size_t) k * s->r + r) * s->s + t) * s->c + c];
                        }
                    out[(((size_t) n * s->p + p) * s->q + q) * s->k + k] = (float) acc;
                }
}

void
nn_conv2d_backward_naive (float *din, float *dw, float *db, const float *dout,
                          const float *in, const float *w, const nn_conv_shape_t *s)
{
    if (din)
        memset (din, 0, sizeof (float) * s->n * s->h * s->w * s->c);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    float g = dout[(((size_t) n * s->p + p) * s->q + q) * s->k + k];
                    if (db)
                        db[k] += g;
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r;
                            int iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                continue;
                            for (int c = 0; c < s->c; c++) {
                                size_t ii = (((size_t) n * s->h + ih) * s->w + iw) * s->c + c;
                                size_t wi = (((size_t) k * s->r + r) * s->s + t) * s->c + c;
                                dw[wi] += g * in[ii];
                                if (din)
                                    din[ii] += g * w[wi];
                            }
                        }
                }
}

void
nn_dense_forward_naive (float *out, const float *in, const float *w,
                        const float *b, int n, int i, int o)
{
    for (int r = 0; r < n; r++)
        for (int k = 0; k < o; k++) {
            double acc = b ? b[k] : 0.0;
            for (int j = 0; j < i; j++)
                acc += (double) in[(size_t) r * i + j] * w[(size_t) k * i + j];
            out[(size_t) r * o + k] = (float) acc;
        }
}

void
nn_dense_backward_naive (float *din, float *dw, float *db, const float *dout,
                         const float *in, const float *w, int n, int i, int o)
{
    for (int k = 0; k < o; k++)
        for (int j = 0; j < i; j++) {
            double acc = 0.0;
            for (int r = 0; r < n; r++)
                acc += (double) dout[(size_t) r * o + k] * in[(size_t) r * i + j];
            dw[(size_t) k * i + j] += (float) acc;
        }
    if (db)
        for (int k = 0; k < o; k++)
            for (int r = 0; r < n; r++)
                db[k] += dout[(size_t) r * o + k];
    if (din)
        for (int r = 0; r < n; r++)
            for (int j = 0; j < i; j++) {
                double acc = 0.0;
                for (int k = 0; k < o; k++)
                    acc += (double) dout[(size_t) r * o + k] * w[(size_t) k * i + j];
                din[(size_t) r * i + j] = (float) acc;
            }
}
