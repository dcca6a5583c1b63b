/*  nn_kernels_act.c: MobileNetV3's elementwise kernels: hard-swish,
    hard-sigmoid and the squeeze-excite channel scale, one body per ISA
    level (nn_kernels_simd.h). Branch-free selects so each loop vectorises. */
#include "nn_kernels.h"

#include "nn_kernels_simd.h"

#include <string.h>

S_BODY void
nn_hswish_forward_body (float *out, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++) {
        float x = in[i], r = x + 3.0f;
        r = r < 0.0f ? 0.0f : r;
        r = r > 6.0f ? 6.0f : r;
        out[i] = x * r * (1.0f / 6.0f);
    }
}
S_DISPATCH (extern, nn_hswish_forward,
            (float *out, const float *in, size_t count),
            (out, in, count))

S_BODY void
nn_hswish_backward_body (float *din, const float *dout, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++) {
        float x = in[i];
        float g = x < -3.0f ? 0.0f : x <= 3.0f ? x * (1.0f / 3.0f) + 0.5f : 1.0f;
        din[i] = dout[i] * g;
    }
}
S_DISPATCH (extern, nn_hswish_backward,
            (float *din, const float *dout, const float *in, size_t count),
            (din, dout, in, count))

S_BODY void
nn_hsigmoid_forward_body (float *out, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++) {
        float r = in[i] + 3.0f;
        r = r < 0.0f ? 0.0f : r;
        r = r > 6.0f ? 6.0f : r;
        out[i] = r * (1.0f / 6.0f);
    }
}
S_DISPATCH (extern, nn_hsigmoid_forward,
            (float *out, const float *in, size_t count),
            (out, in, count))

S_BODY void
nn_hsigmoid_backward_body (float *din, const float *dout, const float *in, size_t count)
{
S_IVDEP
    for (size_t i = 0; i < count; i++) {
        float x = in[i];
        din[i] = x > -3.0f && x < 3.0f ? dout[i] * (1.0f / 6.0f) : 0.0f;
    }
}
S_DISPATCH (extern, nn_hsigmoid_backward,
            (float *din, const float *dout, const float *in, size_t count),
            (din, dout, in, count))

S_BODY void
nn_channel_scale_forward_body (float *out, const float *x, const float *s, int n, int hw,
                               int c)
{
    for (int i = 0; i < n; i++) {
        const float *si = s + (size_t) i * c;
        for (int j = 0; j < hw; j++) {
            size_t at = ((size_t) i * hw + j) * c;
S_IVDEP
            for (int k = 0; k < c; k++)
                out[at + k] = x[at + k] * si[k];
        }
    }
}
S_DISPATCH (extern, nn_channel_scale_forward,
            (float *out, const float *x, const float *s, int n, int hw, int c),
            (out, x, s, n, hw, c))

//  ds sums in float across hw (vectorised over channels, one running sum
//  per channel): hw is at most a few thousand pixels per image.
S_BODY void
nn_channel_scale_backward_body (float *dx, float *ds, const float *dout, const float *x,
                                const float *s, int n, int hw, int c)
{
    for (int i = 0; i < n; i++) {
        const float *si = s + (size_t) i * c;
        float *dsi = ds ? ds + (size_t) i * c : NULL;
        if (dsi)
            memset (dsi, 0, sizeof (float) * c);
        for (int j = 0; j < hw; j++) {
            size_t at = ((size_t) i * hw + j) * c;
            if (dsi) {
S_IVDEP
                for (int k = 0; k < c; k++)
                    dsi[k] += dout[at + k] * x[at + k];
            }
            if (dx) {
S_IVDEP
                for (int k = 0; k < c; k++)
                    dx[at + k] = dout[at + k] * si[k];
            }
        }
    }
}
S_DISPATCH (extern, nn_channel_scale_backward,
            (float *dx, float *ds, const float *dout, const float *x, const float *s, int n,
             int hw, int c),
            (dx, ds, dout, x, s, n, hw, c))
