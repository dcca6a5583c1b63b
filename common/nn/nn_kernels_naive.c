/*  nn_kernels_naive.c: direct-loop references for the BLAS-backed and
    vectorised kernels. Slow and obvious on purpose; the tests check the
    fast kernels agree. */
#include "nn_kernels.h"

#include <string.h>

//  Groups: output channel k reads the cg input channels of its group, from
//  c0 = k / (K / groups) * cg; weights (k, r, s, cg).
static int
s_groups (const nn_conv_shape_t *s)
{
    return s->groups > 1 ? s->groups : 1;
}

void
nn_conv2d_forward_naive (float *out, const float *in, const float *w,
                         const float *b, const nn_conv_shape_t *s)
{
    int cg = s->c / s_groups (s), kg = s->k / s_groups (s);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    double acc = b ? b[k] : 0.0;
                    int c0 = k / kg * cg;
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r;
                            int iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                continue;
                            for (int c = 0; c < cg; c++)
                                acc += (double) in[(((size_t) n * s->h + ih) * s->w + iw) * s->c + c0 + c]
                                     * w[(((size_t) k * s->r + r) * s->s + t) * cg + c];
                        }
                    out[(((size_t) n * s->p + p) * s->q + q) * s->k + k] = (float) acc;
                }
}

void
nn_conv2d_backward_naive (float *din, float *dw, float *db, const float *dout,
                          const float *in, const float *w, const nn_conv_shape_t *s)
{
    int cg = s->c / s_groups (s), kg = s->k / s_groups (s);
    if (din)
        memset (din, 0, sizeof (float) * s->n * s->h * s->w * s->c);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    float g = dout[(((size_t) n * s->p + p) * s->q + q) * s->k + k];
                    int c0 = k / kg * cg;
                    if (db)
                        db[k] += g;
                    for (int r = 0; r < s->r; r++)
                        for (int t = 0; t < s->s; t++) {
                            int ih = p * s->stride - s->pad + r;
                            int iw = q * s->stride - s->pad + t;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                continue;
                            for (int c = 0; c < cg; c++) {
                                size_t ii = (((size_t) n * s->h + ih) * s->w + iw) * s->c + c0 + c;
                                size_t wi = (((size_t) k * s->r + r) * s->s + t) * cg + c;
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

void
nn_hswish_forward_naive (float *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float x = in[i];
        out[i] = x <= -3.0f ? 0.0f : x >= 3.0f ? x : x * (x + 3.0f) / 6.0f;
    }
}

void
nn_hswish_backward_naive (float *din, const float *dout, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float x = in[i];
        if (x < -3.0f)
            din[i] = 0.0f;
        else if (x <= 3.0f)
            din[i] = dout[i] * (x / 3.0f + 0.5f);
        else
            din[i] = dout[i];
    }
}

void
nn_hsigmoid_forward_naive (float *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float x = in[i];
        out[i] = x <= -3.0f ? 0.0f : x >= 3.0f ? 1.0f : (x + 3.0f) / 6.0f;
    }
}

void
nn_hsigmoid_backward_naive (float *din, const float *dout, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++)
        din[i] = in[i] > -3.0f && in[i] < 3.0f ? dout[i] / 6.0f : 0.0f;
}

void
nn_channel_scale_forward_naive (float *out, const float *x, const float *s, int n, int hw,
                                int c)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < hw; j++)
            for (int k = 0; k < c; k++) {
                size_t at = ((size_t) i * hw + j) * c + k;
                out[at] = x[at] * s[(size_t) i * c + k];
            }
}

void
nn_channel_scale_backward_naive (float *dx, float *ds, const float *dout, const float *x,
                                 const float *s, int n, int hw, int c)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c; k++) {
            double acc = 0.0;
            for (int j = 0; j < hw; j++) {
                size_t at = ((size_t) i * hw + j) * c + k;
                acc += (double) dout[at] * x[at];
                if (dx)
                    dx[at] = dout[at] * s[(size_t) i * c + k];
            }
            if (ds)
                ds[(size_t) i * c + k] = (float) acc;
        }
}
