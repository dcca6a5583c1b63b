/*  nn_kernels.c: dense layers (BLAS), batch normalisation, ReLU, pooling
    and dropout (NHWC). Convolutions are in nn_kernels_conv.c. */
#include "nn_kernels.h"

#include "nn_kernels_simd.h"

#include <assert.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

void
nn_dense_forward_cols (float *out, const float *in, const float *w, const float *b,
                       int n, int i, int o, int o0, int o1)
{
    int cols = o1 - o0;
    float beta = 0.0f;
    if (b) {
        for (int r = 0; r < n; r++)
            memcpy (out + (size_t) r * o + o0, b + o0, sizeof (float) * cols);
        beta = 1.0f;
    }
    //  out[:, o0:o1] (n, cols) = in (n, i) . w[o0:o1]^T (i, cols)
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, i,
                 1.0f, in, i, w + (size_t) o0 * i, i, beta, out + o0, o);
}

void
nn_dense_forward (float *out, const float *in, const float *w, const float *b,
                  int n, int i, int o)
{
    nn_dense_forward_cols (out, in, w, b, n, i, o, 0, o);
}

void
nn_dense_backward_weights (float *dw, float *db, const float *dout, const float *in,
                           int n, int i, int o, int ldo)
{
    //  dw (o, i) += dout^T (o, n; row stride ldo) . in (n, i)
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, o, i, n,
                 1.0f, dout, ldo, in, i, 1.0f, dw, i);
    if (db)
        for (int r = 0; r < n; r++)
            for (int k = 0; k < o; k++)
                db[k] += dout[(size_t) r * ldo + k];
}

void
nn_dense_backward_input_cols (float *din, const float *dout, const float *w, int n,
                              int i, int o, int i0, int i1)
{
    //  din[:, i0:i1] (n, cols) = dout (n, o) . w[:, i0:i1] (o, cols)
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, i1 - i0, o,
                 1.0f, dout, o, w + i0, i, 0.0f, din + i0, i);
}

void
nn_dense_backward_input (float *din, const float *dout, const float *w, int n, int i,
                         int o)
{
    nn_dense_backward_input_cols (din, dout, w, n, i, o, 0, i);
}

void
nn_dense_backward (float *din, float *dw, float *db, const float *dout,
                   const float *in, const float *w, int n, int i, int o)
{
    nn_dense_backward_weights (dw, db, dout, in, n, i, o, o);
    if (din)
        nn_dense_backward_input (din, dout, w, n, i, o);
}

S_BODY void
nn_batchnorm_moments_body (double *sum, double *sumsq, const float *in, int m, int c)
{
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        for (int k = 0; k < c; k++) {
            sum[k] += x[k];
            sumsq[k] += (double) x[k] * x[k];
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_moments,
            (double *sum, double *sumsq, const float *in, int m, int c),
            (sum, sumsq, in, m, c))

void
nn_batchnorm_finish (float *mean_invstd, float *running_mean, float *running_var,
                     const double *sum, const double *sumsq, int m_total, int c,
                     float momentum, float eps)
{
    float *mean = mean_invstd, *invstd = mean_invstd + c;
    for (int k = 0; k < c; k++) {
        //  E[x^2] - E[x]^2 in double: float activations leave ample headroom.
        double mu = sum[k] / m_total;
        double var = sumsq[k] / m_total - mu * mu;
        if (var < 0.0)
            var = 0.0;
        mean[k] = (float) mu;
        invstd[k] = (float) (1.0 / sqrt (var + eps));
        double unbiased = m_total > 1 ? var * m_total / (m_total - 1) : var;
        running_mean[k] = (1.0f - momentum) * running_mean[k] + momentum * (float) mu;
        running_var[k] = (float) ((1.0 - momentum) * running_var[k] + momentum * unbiased);
    }
}

S_BODY void
nn_batchnorm_normalize_body (float *out, float *xhat, const float *in,
                        const float *mean_invstd, const float *gamma, const float *beta,
                        int m, int c, bool relu)
{
    //  y = x * a + b with a = gamma * invstd, b = beta - mean * a. xhat may
    //  alias in and out may alias in (element for element), so the compiler
    //  is told the iterations are independent.
    const float *mean = mean_invstd, *invstd = mean_invstd + c;
    float a[c], b[c];
    for (int k = 0; k < c; k++) {
        a[k] = gamma[k] * invstd[k];
        b[k] = beta[k] - mean[k] * a[k];
    }
    float floor = relu ? 0.0f : -INFINITY;
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        float *xh = xhat + (size_t) r * c;
        float *y = out + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++) {
            float v = x[k];
            float z = v * a[k] + b[k];
            xh[k] = (v - mean[k]) * invstd[k];
            y[k] = z > floor ? z : floor;
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_normalize,
            (float *out, float *xhat, const float *in, const float *mean_invstd,
             const float *gamma, const float *beta, int m, int c, bool relu),
            (out, xhat, in, mean_invstd, gamma, beta, m, c, relu))

void
nn_batchnorm_forward_train (float *out, float *xhat, float *mean_invstd,
                            float *running_mean, float *running_var,
                            const float *in, const float *gamma, const float *beta,
                            int m, int c, float momentum, float eps)
{
    double sum[c], sq[c];
    for (int k = 0; k < c; k++)
        sum[k] = sq[k] = 0.0;
    nn_batchnorm_moments (sum, sq, in, m, c);
    nn_batchnorm_finish (mean_invstd, running_mean, running_var, sum, sq, m, c,
                         momentum, eps);
    nn_batchnorm_normalize (out, xhat, in, mean_invstd, gamma, beta, m, c, false);
}

S_BODY void
nn_batchnorm_forward_eval_body (float *out, const float *in, const float *gamma,
                           const float *beta, const float *running_mean,
                           const float *running_var, int m, int c, float eps)
{
    float scale[c], shift[c];
    for (int k = 0; k < c; k++) {
        scale[k] = gamma[k] / sqrtf (running_var[k] + eps);
        shift[k] = beta[k] - running_mean[k] * scale[k];
    }
    for (int r = 0; r < m; r++) {
        const float *x = in + (size_t) r * c;
        float *y = out + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++)
            y[k] = x[k] * scale[k] + shift[k];
    }
}
S_DISPATCH (extern, nn_batchnorm_forward_eval,
            (float *out, const float *in, const float *gamma, const float *beta,
             const float *running_mean, const float *running_var, int m, int c,
             float eps),
            (out, in, gamma, beta, running_mean, running_var, m, c, eps))

S_BODY void
nn_batchnorm_backward_sums_body (double *sdy, double *sdyx, const float *dout,
                            const float *xhat, int m, int c)
{
    for (int r = 0; r < m; r++) {
        const float *dy = dout + (size_t) r * c;
        const float *xh = xhat + (size_t) r * c;
        for (int k = 0; k < c; k++) {
            sdy[k] += dy[k];
            sdyx[k] += dy[k] * xh[k];
        }
    }
}
S_DISPATCH (extern, nn_batchnorm_backward_sums,
            (double *sdy, double *sdyx, const float *dout, const float *xhat, int m,
             int c),
            (sdy, sdyx, dout, xhat, m, c))

S_BODY void
nn_batchnorm_backward_apply_body (float *din, const float *dout, const float *xhat,
                             const float *mean_invstd, const float *gamma,
                             const double *sdy, const double *sdyx, int m, int m_total,
                             int c)
{
    //  dx = gamma * invstd / M * (M dy - sum dy - xhat sum(dy xhat))
    const float *invstd = mean_invstd + c;
    float a[c], mdy[c], mdyx[c];
    for (int k = 0; k < c; k++) {
        a[k] = gamma[k] * invstd[k];
        mdy[k] = (float) (sdy[k] / m_total);
        mdyx[k] = (float) (sdyx[k] / m_total);
    }
    for (int r = 0; r < m; r++) {
        const float *dy = dout + (size_t) r * c;
        const float *xh = xhat + (size_t) r * c;
        float *dx = din + (size_t) r * c;
S_IVDEP
        for (int k = 0; k < c; k++)
            dx[k] = a[k] * (dy[k] - mdy[k] - xh[k] * mdyx[k]);
    }
}
S_DISPATCH (extern, nn_batchnorm_backward_apply,
            (float *din, const float *dout, const float *xhat, const float *mean_invstd,
             const float *gamma, const double *sdy, const double *sdyx, int m,
             int m_total, int c),
            (din, dout, xhat, mean_invstd, gamma, sdy, sdyx, m, m_total, c))

void
nn_batchnorm_backward (float *din, float *dgamma, float *dbeta, const float *dout,
                       const float *xhat, const float *mean_invstd, const float *gamma,
                       int m, int c)
{
    double sdy[c], sdyx[c];
    for (int k = 0; k < c; k++)
        sdy[k] = sdyx[k] = 0.0;
    nn_batchnorm_backward_sums (sdy, sdyx, dout, xhat, m, c);
    for (int k = 0; k < c; k++) {
        dgamma[k] += (float) sdyx[k];
        dbeta[k] += (float) sdy[k];
    }
    if (din)
        nn_batchnorm_backward_apply (din, dout, xhat, mean_invstd, gamma, sdy, sdyx, m, m, c);
}

S_BODY void
nn_relu_forward_body (float *out, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}
S_DISPATCH (extern, nn_relu_forward,
            (float *out, const float *in, size_t count),
            (out, in, count))

S_BODY void
nn_relu_backward_body (float *din, const float *dout, const float *out, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++)
        din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
S_DISPATCH (extern, nn_relu_backward,
            (float *din, const float *dout, const float *out, size_t count),
            (din, dout, out, count))

int
nn_pool_shape_finish (nn_pool_shape_t *s)
{
    if (s->kernel == 0) {
        s->p = s->q = 1;
        return 0;
    }
    if (s->stride < 1 || s->pad < 0 || s->kernel < 1 || s->pad * 2 > s->kernel)
        return -1;
    int hp = s->h + 2 * s->pad - s->kernel;
    int wp = s->w + 2 * s->pad - s->kernel;
    if (hp < 0 || wp < 0)
        return -1;
    s->p = hp / s->stride + 1;
    s->q = wp / s->stride + 1;
    return 0;
}

//  Window of output (p, q) clipped to the input: rows [*h0, *h1), cols [*w0, *w1).
static void
s_pool_window (const nn_pool_shape_t *s, int p, int q,
               int *h0, int *h1, int *w0, int *w1)
{
    if (s->kernel == 0) {
        *h0 = 0, *h1 = s->h, *w0 = 0, *w1 = s->w;
        return;
    }
    int hs = p * s->stride - s->pad, ws = q * s->stride - s->pad;
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = hs + s->kernel > s->h ? s->h : hs + s->kernel;
    *w1 = ws + s->kernel > s->w ? s->w : ws + s->kernel;
}

//  Pixels in a window: kernel x kernel, or the whole image (global pooling).
static long
s_pool_cells (const nn_pool_shape_t *s)
{
    return s->kernel == 0 ? (long) s->h * s->w : (long) s->kernel * s->kernel;
}

bool
nn_maxpool_fits (const nn_pool_shape_t *s)
{
    return s_pool_cells (s) <= NN_POOL_MAX_WINDOW - 1;  //  one code is NN_POOL_NO_WINNER
}

//  The unpadded corner of window (p, q) and its row width, for win codes.
static void
s_pool_corner (const nn_pool_shape_t *s, int p, int q, int *hs, int *ws, int *width)
{
    if (s->kernel == 0) {
        *hs = *ws = 0;
        *width = s->w;
        return;
    }
    *hs = p * s->stride - s->pad;
    *ws = q * s->stride - s->pad;
    *width = s->kernel;
}

S_BODY void
nn_maxpool_forward_body (float *out, uint8_t *win, const float *in, const nn_pool_shape_t *s,
                    bool drop_nonpositive)
{
    assert (nn_maxpool_fits (s));
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    int C = s->c;
    for (int n = 0; n < s->n; n++) {
        const float *x = in + n * in_size;
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                float *restrict o = out + n * out_size + ((size_t) p * s->q + q) * C;
                uint8_t *restrict a = win + n * out_size + ((size_t) p * s->q + q) * C;
                int h0, h1, w0, w1, hs, ws, width;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                s_pool_corner (s, p, q, &hs, &ws, &width);
                const float *first = x + ((size_t) h0 * s->w + w0) * C;
                uint8_t code0 = (uint8_t) ((h0 - hs) * width + (w0 - ws));
                for (int c = 0; c < C; c++) {
                    o[c] = first[c];
                    a[c] = code0;
                }
                //  Branch-free over channels so the compiler vectorises it;
                //  strict > keeps the first maximum, as PyTorch does.
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        const float *restrict xv = x + ((size_t) h * s->w + w) * C;
                        uint8_t code = (uint8_t) ((h - hs) * width + (w - ws));
                        for (int c = 0; c < C; c++) {
                            bool take = xv[c] > o[c];
                            o[c] = take ? xv[c] : o[c];
                            a[c] = take ? code : a[c];
                        }
                    }
                if (drop_nonpositive)
                    for (int c = 0; c < C; c++)
                        a[c] = o[c] > 0.0f ? a[c] : NN_POOL_NO_WINNER;
            }
    }
}
S_DISPATCH (extern, nn_maxpool_forward,
            (float *out, uint8_t *win, const float *in, const nn_pool_shape_t *s,
             bool drop_nonpositive),
            (out, win, in, s, drop_nonpositive))

S_BODY void
nn_maxpool_backward_body (float *din, const float *dout, const uint8_t *win,
                     const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    int C = s->c;
    //  Input offset of each code from the window's corner, channel 0.
    ptrdiff_t offset[NN_POOL_MAX_WINDOW];
    int width = s->kernel == 0 ? s->w : s->kernel;
    int cells = (int) s_pool_cells (s);
    for (int k = 0; k < cells; k++)
        offset[k] = ((ptrdiff_t) (k / width) * s->w + k % width) * C;
    //  Windows that tile the image (VGG's 2x2/2): each input pixel is in
    //  one window at most, so each cell is written once, its gradient or
    //  zero, branch-free over channels (the scatter below, one add per
    //  channel through a code, does not vectorise: 11% of a VGG5 step).
    //  Only rows and columns no window covers need the memset.
    if (s->kernel > 0 && s->stride == s->kernel && s->pad == 0) {
        if (s->p * s->kernel != s->h || s->q * s->kernel != s->w)
            memset (din, 0, sizeof (float) * in_size * s->n);
        for (int n = 0; n < s->n; n++)
            for (int p = 0; p < s->p; p++)
                for (int q = 0; q < s->q; q++) {
                    size_t at = n * out_size + ((size_t) p * s->q + q) * C;
                    const float *dy = dout + at;
                    const uint8_t *a = win + at;
                    float *corner = din + n * in_size
                                    + ((size_t) p * s->kernel * s->w + (size_t) q * s->kernel) * C;
                    for (int k = 0; k < cells; k++) {
                        float *restrict dx = corner + offset[k];
                        for (int c = 0; c < C; c++)
                            dx[c] = a[c] == k ? dy[c] : 0.0f;
                    }
                }
        return;
    }
    memset (din, 0, sizeof (float) * in_size * s->n);
    for (int n = 0; n < s->n; n++) {
        float *dx = din + n * in_size;
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                size_t at = n * out_size + ((size_t) p * s->q + q) * C;
                const float *dy = dout + at;
                const uint8_t *a = win + at;
                int hs, ws, width_unused;
                s_pool_corner (s, p, q, &hs, &ws, &width_unused);
                ptrdiff_t corner = ((ptrdiff_t) hs * s->w + ws) * C;
                for (int c = 0; c < C; c++)
                    if (a[c] != NN_POOL_NO_WINNER)
                        dx[corner + offset[a[c]] + c] += dy[c];
            }
    }
}
S_DISPATCH (extern, nn_maxpool_backward,
            (float *din, const float *dout, const uint8_t *win, const nn_pool_shape_t *s),
            (din, dout, win, s))

static float
s_pool_divisor (const nn_pool_shape_t *s)
{
    return s->kernel == 0 ? (float) s->h * s->w : (float) s->kernel * s->kernel;
}

void
nn_avgpool_forward (float *out, const float *in, const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    float inv = 1.0f / s_pool_divisor (s);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                float *o = out + n * out_size + ((size_t) p * s->q + q) * s->c;
                int h0, h1, w0, w1;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                for (int c = 0; c < s->c; c++)
                    o[c] = 0.0f;
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        const float *x = in + n * in_size + ((size_t) h * s->w + w) * s->c;
                        for (int c = 0; c < s->c; c++)
                            o[c] += x[c];
                    }
                for (int c = 0; c < s->c; c++)
                    o[c] *= inv;
            }
}

void
nn_avgpool_backward (float *din, const float *dout, const nn_pool_shape_t *s)
{
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t out_size = (size_t) s->p * s->q * s->c;
    float inv = 1.0f / s_pool_divisor (s);
    memset (din, 0, sizeof (float) * in_size * s->n);
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++) {
                const float *dy = dout + n * out_size + ((size_t) p * s->q + q) * s->c;
                int h0, h1, w0, w1;
                s_pool_window (s, p, q, &h0, &h1, &w0, &w1);
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        float *dx = din + n * in_size + ((size_t) h * s->w + w) * s->c;
                        for (int c = 0; c < s->c; c++)
                            dx[c] += dy[c] * inv;
                    }
            }
}

void
nn_dropout_forward (float *out, float *mask, const float *in, size_t count,
                    float p, nn_rng_t *rng)
{
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < count; i++) {
        mask[i] = nn_rng_uniform (rng) < p ? 0.0f : keep;
        out[i] = in[i] * mask[i];
    }
}

void
nn_dropout_backward (float *din, const float *dout, const float *mask, size_t count)
{
    for (size_t i = 0; i < count; i++)
        din[i] = dout[i] * mask[i];
}
