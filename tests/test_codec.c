/*  The split's codecs (nn_codec.h) and the privacy noise (nn_noise.h):
    fp16 bit-exact against the IEEE rule and the compiler's _Float16, int8
    within half a quantisation step per channel, topk's error feedback
    conserving the gradient, every malformed payload refused without a
    write, the zstd stage lossless (the same floats, residuals and rng
    draws as without it) and its frames checked, and the noise's
    moments. */
#include <criterion/criterion.h>

#include "nn_codec.h"
#include "nn_noise.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#ifdef __FLT16_MAX__
//  The compiler's binary16 (GCC 12 and clang on x86-64 and aarch64): an
//  independent reference for the conversions.
__extension__ typedef _Float16 s_f16_t;
#endif

static float
s_float (uint32_t bits)
{
    float f;
    memcpy (&f, &bits, 4);
    return f;
}

static uint32_t
s_bits (float f)
{
    uint32_t b;
    memcpy (&b, &f, 4);
    return b;
}

static uint16_t
s_half (float f)
{
    uint16_t h;
    nn_codec_fp16_from_float_ref (&h, &f, 1);
    return h;
}

static float
s_unhalf (uint16_t h)
{
    float f;
    nn_codec_fp16_to_float_ref (&f, &h, 1);
    return f;
}

//  A tensor of count values in [-range, range] plus a per-channel offset.
static float *
s_tensor (const nn_codec_shape_t *s, uint64_t seed, float range)
{
    uint64_t count = nn_codec_shape_count (s);
    float *x = malloc (sizeof (float) * count);
    nn_rng_t r;
    nn_rng_seed (&r, seed);
    for (uint64_t i = 0; i < count; i++)
        x[i] = range * (2.0f * nn_rng_uniform (&r) - 1.0f) + (float) (i % s->c);
    return x;
}

//  Encode x with a fresh encoder; the caller frees the buffer.
static uint8_t *
s_encode (const nn_codec_params_t *p, const nn_codec_shape_t *s, const float *x,
          size_t *size)
{
    char err[256];
    nn_codec_encoder_t *e = nn_codec_encoder_new (p, s, err, sizeof err);
    cr_assert (e, "%s", err);
    *size = nn_codec_encoder_bytes (e);
    uint8_t *buf = malloc (*size);
    nn_rng_t r;
    nn_rng_seed (&r, 7);
    cr_assert_eq (nn_codec_encode (e, buf, *size, x, &r, err, sizeof err), 0, "%s", err);
    nn_codec_encoder_destroy (&e);
    cr_assert_null (e);
    return buf;
}

//  ---------------------------------------------------------------------
//  fp16

Test (codec, fp16_decodes_every_half_exactly_on_both_paths)
{
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hh = (uint16_t) h;
        float ref, fast[8];
        nn_codec_fp16_to_float_ref (&ref, &hh, 1);
        uint16_t eight[8];
        for (int i = 0; i < 8; i++)
            eight[i] = hh;
        nn_codec_fp16_to_float (fast, eight, 8);    //  the vector path's width
        cr_assert_eq (s_bits (fast[0]), s_bits (ref), "half 0x%04x", h);
        uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
        if (exp == 0x1F && mant) {
            cr_assert (isnan (ref));
            cr_assert_eq (signbit (ref) != 0, (h & 0x8000) != 0);
            continue;
        }
        //  The value by the definition: (-1)^s 2^(e-15) (1 + m/1024), or
        //  2^-14 m/1024 for subnormals.
        double v = exp == 0x1F ? INFINITY
                 : exp ? ldexp (1.0 + mant / 1024.0, (int) exp - 15)
                       : ldexp (mant / 1024.0, -14);
        if (h & 0x8000)
            v = -v;
        cr_assert_eq (s_bits (ref), s_bits ((float) v), "half 0x%04x", h);
#ifdef __FLT16_MAX__
        s_f16_t c;
        memcpy (&c, &hh, 2);
        cr_assert_eq (s_bits (ref), s_bits ((float) c), "half 0x%04x", h);
#endif
    }
}

//  Every rounding boundary of binary16: each half value, the midpoint to
//  its upper neighbour and the floats either side of that midpoint.
Test (codec, fp16_rounds_to_nearest_even_at_every_boundary)
{
    int checked = 0;
    for (uint32_t h = 0; h < 0x7C00; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t sign = neg ? 0x8000 : 0;
            float v = s_unhalf ((uint16_t) (sign | h));
            //  Above 65504 the next "value" is 2^16, which rounds to inf.
            double up = h + 1 < 0x7C00 ? fabs ((double) s_unhalf ((uint16_t) (h + 1))) : 65536.0;
            double mid = (fabs ((double) v) + up) / 2.0;
            float m = (float) (neg ? -mid : mid);
            cr_assert_eq ((double) fabsf (m), mid, "midpoint above 0x%04x is a float", h);
            uint16_t even = (h & 1) ? (uint16_t) (h + 1) : (uint16_t) h;
            float below = nextafterf (m, 0.0f), above = nextafterf (m, neg ? -INFINITY : INFINITY);
            float in[4] = { v, m, below, above };
            uint16_t want[4] = { (uint16_t) (sign | h), (uint16_t) (sign | even),
                                 (uint16_t) (sign | h), (uint16_t) (sign | (h + 1)) };
            uint16_t ref[4], fast[8];
            nn_codec_fp16_from_float_ref (ref, in, 4);
            float in8[8] = { v, m, below, above, v, m, below, above };
            nn_codec_fp16_from_float (fast, in8, 8);
            for (int i = 0; i < 4; i++) {
                cr_assert_eq (ref[i], want[i], "0x%04x case %d: 0x%04x, want 0x%04x", h, i,
                              ref[i], want[i]);
                cr_assert_eq (fast[i], want[i], "fast 0x%04x case %d", h, i);
                cr_assert_eq (fast[i + 4], want[i]);
            }
            checked++;
        }
    }
    cr_assert_eq (checked, 2 * 0x7C00);
}

Test (codec, fp16_specials_and_both_paths_agree_on_random_bits)
{
    cr_assert_eq (s_half (INFINITY), 0x7C00);
    cr_assert_eq (s_half (-INFINITY), 0xFC00);
    cr_assert_eq (s_half (-0.0f), 0x8000);
    cr_assert_eq (s_half (65504.0f), 0x7BFF);
    cr_assert_eq (s_half (65519.99f), 0x7BFF);
    cr_assert_eq (s_half (65520.0f), 0x7C00);
    cr_assert_eq (s_half (1e30f), 0x7C00);
    cr_assert_eq (s_half (0x1p-24f), 0x0001);
    cr_assert_eq (s_half (0x1p-25f), 0x0000);             //  tie to even (0)
    cr_assert_eq (s_half (nextafterf (0x1p-25f, 1.0f)), 0x0001);
    cr_assert_eq (s_half (0x1p-26f), 0x0000);
    cr_assert_eq (s_half (FLT_TRUE_MIN), 0x0000);
    cr_assert_eq (s_half (s_float (0x7FC00000)), 0x7E00);   //  quiet NaN
    cr_assert_eq (s_half (s_float (0xFF800001)), 0xFE00);   //  signalling: made quiet
    cr_assert_eq (s_half (s_float (0x7FFFE000)), 0x7FFF);   //  payload's top bits kept
    cr_assert (isnan (s_unhalf (0x7C01)));
    cr_assert_eq (s_bits (s_unhalf (0x7C01)), 0x7FC02000u); //  made quiet, payload kept

    //  Random bit patterns (every class: NaN, inf, normal, subnormal) and
    //  random values in the half's range: the fast path (F16C where the
    //  CPU has it) gives the reference's bits, and both the compiler's.
    nn_rng_t r;
    nn_rng_seed (&r, 11);
    enum { N = 1 << 20 };
    float *x = malloc (sizeof (float) * N);
    uint16_t *a = malloc (2 * N), *b = malloc (2 * N);
    for (int i = 0; i < N; i++)
        x[i] = i % 2 ? s_float ((uint32_t) nn_rng_u64 (&r))
                     : ldexpf (nn_rng_uniform (&r) - 0.5f, (int) nn_rng_below (&r, 48) - 30);
    nn_codec_fp16_from_float_ref (a, x, N);
    nn_codec_fp16_from_float (b, x, N);
    cr_assert_eq (memcmp (a, b, 2 * N), 0);
    float *y = malloc (sizeof (float) * N), *z = malloc (sizeof (float) * N);
    nn_codec_fp16_to_float_ref (y, a, N);
    nn_codec_fp16_to_float (z, a, N);
    cr_assert_eq (memcmp (y, z, sizeof (float) * N), 0);
#ifdef __FLT16_MAX__
    for (int i = 0; i < N; i++) {
        if (isnan (x[i]))
            continue;
        s_f16_t c = (s_f16_t) x[i];
        uint16_t cb;
        memcpy (&cb, &c, 2);
        cr_assert_eq (a[i], cb, "float 0x%08x: 0x%04x, _Float16 0x%04x", s_bits (x[i]), a[i], cb);
    }
#endif
    free (x); free (a); free (b); free (y); free (z);
}

Test (codec, fp16_tensor_round_trip_is_the_half_of_every_element)
{
    nn_codec_shape_t s = { 3, 5, 7, 9 };
    float *x = s_tensor (&s, 1, 100.0f);
    uint64_t count = nn_codec_shape_count (&s);
    x[0] = NAN;
    x[1] = -INFINITY;
    x[2] = 1e9f;
    size_t size;
    uint8_t *buf = s_encode (&(nn_codec_params_t) { .id = NN_CODEC_FP16 }, &s, x, &size);
    cr_assert_eq (size, 24 + 2 * count);
    float *y = malloc (sizeof (float) * count);
    char err[256];
    cr_assert_eq (nn_codec_decode (y, buf, size, NN_CODEC_FP16, &s, err, sizeof err), 0, "%s", err);
    cr_assert (isnan (y[0]));
    cr_assert_eq (y[1], -INFINITY);
    cr_assert_eq (y[2], INFINITY);
    for (uint64_t i = 3; i < count; i++) {
        cr_assert_eq (s_bits (y[i]), s_bits (s_unhalf (s_half (x[i]))));
        //  Half precision: 11 significant bits, error <= 2^-11 relative.
        cr_assert_leq (fabsf (y[i] - x[i]), fabsf (x[i]) * 0x1p-11f + 0x1p-25f);
    }
    free (x); free (y); free (buf);
}

//  ---------------------------------------------------------------------
//  int8

//  Per channel: |x - decoded| <= scale / 2 (plus float rounding), with the
//  scale read back from the payload; scale = range / 255.
static void
s_check_int8 (const nn_codec_shape_t *s, const float *x, const uint8_t *buf, size_t size,
              double steps)
{
    uint64_t count = nn_codec_shape_count (s);
    float *y = malloc (sizeof (float) * count);
    char err[256];
    cr_assert_eq (nn_codec_decode (y, buf, size, NN_CODEC_INT8, s, err, sizeof err), 0, "%s", err);
    for (uint32_t j = 0; j < s->c; j++) {
        float scale, zero;
        memcpy (&scale, buf + 24 + 8 * j, 4);
        memcpy (&zero, buf + 24 + 8 * j + 4, 4);
        double lo = INFINITY, hi = -INFINITY;
        for (uint64_t i = j; i < count; i += s->c) {
            lo = fmin (lo, x[i]);
            hi = fmax (hi, x[i]);
        }
        cr_assert_eq ((double) zero, lo, "channel %u", j);
        if (hi > lo)
            cr_assert_float_eq ((double) scale, (hi - lo) / 255.0,
                                fmax ((hi - lo) / 255.0 * 1e-6, (double) FLT_TRUE_MIN),
                                "channel %u: scale %g, range / 255 %g", j, (double) scale,
                                (hi - lo) / 255.0);
        for (uint64_t i = j; i < count; i += s->c) {
            double e = fabs ((double) y[i] - (double) x[i]);
            //  Float rounding: of the decoded value (relative), and of a
            //  subnormal scale (absolute, 255 codes of it).
            double bound = steps * scale + 1e-6 * fmax (fabs (lo), fabs (hi))
                         + 255.0 * FLT_TRUE_MIN;
            cr_assert_leq (e, bound, "channel %u element %llu: error %g > %g (scale %g)", j,
                           (unsigned long long) i, e, bound, (double) scale);
        }
    }
    free (y);
}

Test (codec, int8_is_within_half_a_step_per_channel)
{
    nn_codec_shape_t s = { 4, 6, 6, 16 };
    uint64_t count = nn_codec_shape_count (&s);
    float *x = s_tensor (&s, 2, 1.0f);
    //  Channels of very different ranges: constant, tiny, huge, negative,
    //  near the float range's ends.
    for (uint64_t i = 0; i < count; i++) {
        uint32_t j = (uint32_t) (i % s.c);
        if (j == 0) x[i] = 3.5f;
        if (j == 1) x[i] *= 1e-30f;
        if (j == 2) x[i] *= 1e6f;
        if (j == 3) x[i] = -fabsf (x[i]) - 1000.0f;
        if (j == 4) x[i] = (i / s.c) % 2 ? FLT_MAX : -FLT_MAX;
        if (j == 5) x[i] = (i / s.c) % 2 ? FLT_MAX : FLT_MAX / 2;
        if (j == 6) x[i] *= 1e-42f;     //  subnormal
    }
    size_t size;
    uint8_t *buf = s_encode (&(nn_codec_params_t) { .id = NN_CODEC_INT8 }, &s, x, &size);
    cr_assert_eq (size, 24 + 8 * s.c + count);
    cr_assert_eq (buf[0], NN_CODEC_INT8);
    cr_assert_eq (buf[1], 0);
    s_check_int8 (&s, x, buf, size, 0.5);
    free (x); free (buf);
}

Test (codec, int8_stochastic_rounding_is_unbiased_seeded_and_within_a_step)
{
    nn_codec_shape_t s = { 2, 3, 3, 4 };
    uint64_t count = nn_codec_shape_count (&s);
    float *x = s_tensor (&s, 3, 2.0f);
    char err[256];
    nn_codec_params_t p = { .id = NN_CODEC_INT8, .stochastic = true };
    nn_codec_encoder_t *e = nn_codec_encoder_new (&p, &s, err, sizeof err);
    size_t size = nn_codec_encoder_bytes (e);
    uint8_t *buf = malloc (size), *again = malloc (size);
    float *y = malloc (sizeof (float) * count);
    double *mean = calloc (count, sizeof (double));
    nn_rng_t r, r2;
    nn_rng_seed (&r, 99);
    enum { T = 4000 };
    for (int t = 0; t < T; t++) {
        nn_rng_t before = r;
        cr_assert_eq (nn_codec_encode (e, buf, size, x, &r, err, sizeof err), 0);
        if (t == 0) {
            cr_assert_eq (buf[1], NN_CODEC_FLAG_STOCHASTIC);
            r2 = before;
            cr_assert_eq (nn_codec_encode (e, again, size, x, &r2, err, sizeof err), 0);
            cr_assert_eq (memcmp (buf, again, size), 0, "same seed, same bytes");
            s_check_int8 (&s, x, buf, size, 1.0);
        }
        cr_assert_eq (nn_codec_decode (y, buf, size, NN_CODEC_INT8, &s, err, sizeof err), 0);
        for (uint64_t i = 0; i < count; i++)
            mean[i] += y[i] / (double) T;
    }
    //  The mean of T draws is x up to sampling noise: each draw is off by
    //  at most a step (variance <= step^2 / 4), so 5 standard errors are
    //  5 step / (2 sqrt T).
    for (uint32_t j = 0; j < s.c; j++) {
        float scale;
        memcpy (&scale, buf + 24 + 8 * j, 4);
        for (uint64_t i = j; i < count; i += s.c)
            cr_assert_leq (fabs (mean[i] - x[i]), 5.0 * scale / (2.0 * sqrt (T)),
                           "element %llu: mean %g, x %g", (unsigned long long) i, mean[i],
                           (double) x[i]);
    }
    nn_codec_encoder_destroy (&e);
    free (x); free (buf); free (again); free (y); free (mean);
}

Test (codec, int8_and_topk_refuse_non_finite_input)
{
    nn_codec_shape_t s = { 1, 1, 2, 3 };
    float x[6] = { 1, 2, 3, 4, NAN, 6 };
    char err[256];
    uint8_t buf[128];
    nn_codec_params_t ps[2] = { { .id = NN_CODEC_INT8 },
                                { .id = NN_CODEC_TOPK, .topk_fraction = 0.5 } };
    for (int i = 0; i < 2; i++) {
        nn_codec_encoder_t *e = nn_codec_encoder_new (&ps[i], &s, err, sizeof err);
        cr_assert_eq (nn_codec_encode (e, buf, sizeof buf, x, NULL, err, sizeof err), -1);
        cr_assert (strstr (err, "non-finite"), "%s", err);
        if (ps[i].id == NN_CODEC_TOPK)
            for (int k = 0; k < 6; k++)
                cr_assert_eq (nn_codec_encoder_residual (e)[k], 0.0f, "residual untouched");
        nn_codec_encoder_destroy (&e);
    }
}

//  ---------------------------------------------------------------------
//  topk

Test (codec, topk_selection_matches_the_sorting_reference)
{
    nn_rng_t r;
    nn_rng_seed (&r, 4);
    uint32_t sizes[] = { 1, 2, 7, 100, 1000, 4097 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint32_t n = sizes[si];
        float *x = malloc (sizeof (float) * n), *scratch = malloc (sizeof (float) * n);
        uint32_t *a = malloc (4 * n), *b = malloc (4 * n);
        for (int kind = 0; kind < 3; kind++) {
            for (uint32_t i = 0; i < n; i++) {
                float v = nn_rng_uniform (&r) - 0.5f;
                //  0: distinct values; 1: mostly zeros; 2: few distinct
                //  magnitudes of both signs (ties everywhere).
                x[i] = kind == 0 ? v : kind == 1 ? (nn_rng_below (&r, 10) ? 0.0f : v)
                     : (float) ((int) nn_rng_below (&r, 7) - 3);
            }
            uint32_t ks[] = { 1, n / 3 + 1, n / 2 + 1, n };
            for (int ki = 0; ki < 4; ki++) {
                uint32_t k = ks[ki] > n ? n : ks[ki];
                nn_codec_topk_select (a, x, n, k, scratch);
                nn_codec_topk_select_ref (b, x, n, k);
                cr_assert_eq (memcmp (a, b, 4 * k), 0, "n %u kind %d k %u", n, kind, k);
            }
        }
        free (x); free (scratch); free (a); free (b);
    }
}

//  Error feedback: over steps, what was sent plus the final residual is
//  the sum of the gradients (to float rounding); the residual stays
//  bounded; fraction 1 sends everything.
Test (codec, topk_error_feedback_sums_to_the_dense_gradient)
{
    nn_codec_shape_t s = { 5, 4, 4, 8 };
    uint32_t count = (uint32_t) nn_codec_shape_count (&s);
    char err[256];
    nn_codec_params_t p = { .id = NN_CODEC_TOPK, .topk_fraction = 0.05 };
    nn_codec_encoder_t *e = nn_codec_encoder_new (&p, &s, err, sizeof err);
    cr_assert (e, "%s", err);
    uint32_t k = nn_codec_topk_k (count, 0.05);
    cr_assert_eq (k, (uint32_t) ceil (0.05 * count));
    size_t size = nn_codec_encoder_bytes (e);
    cr_assert_eq (size, 24 + 8 * (size_t) k);
    uint8_t *buf = malloc (size);
    float *y = malloc (sizeof (float) * count);
    double *sent = calloc (count, sizeof (double)), *input = calloc (count, sizeof (double));
    double *abs_sum = calloc (count, sizeof (double));
    enum { T = 200 };
    for (int t = 0; t < T; t++) {
        float *g = s_tensor (&s, 100 + (uint64_t) t, 1.0f);
        for (uint32_t i = 0; i < count; i++) {
            g[i] *= (i % 3 == 0) ? 10.0f : 0.1f;    //  some coordinates dominate
            input[i] += g[i];
            abs_sum[i] += fabsf (g[i]);
        }
        cr_assert_eq (nn_codec_encode (e, buf, size, g, NULL, err, sizeof err), 0, "%s", err);
        cr_assert_eq (nn_codec_decode (y, buf, size, NN_CODEC_TOPK, &s, err, sizeof err), 0,
                      "%s", err);
        uint32_t nonzero = 0;
        for (uint32_t i = 0; i < count; i++) {
            sent[i] += y[i];
            nonzero += y[i] != 0.0f;
        }
        cr_assert_leq (nonzero, k);
        free (g);
    }
    const float *res = nn_codec_encoder_residual (e);
    for (uint32_t i = 0; i < count; i++) {
        double tol = 1e-5 * abs_sum[i] + 1e-6;
        cr_assert_float_eq (sent[i] + res[i], input[i], tol, "element %u: sent %g + residual "
                            "%g, inputs %g", i, sent[i], (double) res[i], input[i]);
    }
    //  Nothing starves: every coordinate was sent at least once (the
    //  small ones accumulate until they are among the largest).
    double total_sent = 0.0;
    for (uint32_t i = 0; i < count; i++)
        total_sent += fabs (sent[i]);
    cr_assert_gt (total_sent, 0.0);
    nn_codec_encoder_reset (e);
    for (uint32_t i = 0; i < count; i++)
        cr_assert_eq (res[i], 0.0f);
    nn_codec_encoder_destroy (&e);

    //  Fraction 1: every element, exactly; no residual.
    p.topk_fraction = 1.0;
    float *g = s_tensor (&s, 5, 1.0f);
    size_t full;
    uint8_t *all = s_encode (&p, &s, g, &full);
    cr_assert_eq (full, 24 + 8 * (size_t) count);
    cr_assert_eq (nn_codec_decode (y, all, full, NN_CODEC_TOPK, &s, err, sizeof err), 0);
    cr_assert_eq (memcmp (y, g, sizeof (float) * count), 0);
    free (g); free (all); free (buf); free (y); free (sent); free (input); free (abs_sum);
}

Test (codec, none_is_exact_and_encoders_check_their_parameters)
{
    nn_codec_shape_t s = { 2, 1, 1, 5 };
    float x[10] = { 1, -0.0f, NAN, INFINITY, FLT_TRUE_MIN, 3, 4, 5, 6, 7 };
    size_t size;
    uint8_t *buf = s_encode (&(nn_codec_params_t) { .id = NN_CODEC_NONE }, &s, x, &size);
    cr_assert_eq (size, 24 + 40);
    float y[10];
    char err[256];
    cr_assert_eq (nn_codec_decode (y, buf, size, NN_CODEC_NONE, &s, err, sizeof err), 0);
    cr_assert_eq (memcmp (x, y, sizeof x), 0);
    free (buf);

    nn_codec_params_t bad[] = { { .id = NN_CODEC_TOPK, .topk_fraction = 0.0 },
                                { .id = NN_CODEC_TOPK, .topk_fraction = 1.5 },
                                { .id = NN_CODEC_TOPK, .topk_fraction = NAN },
                                { .id = (nn_codec_id_t) 9 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_assert_null (nn_codec_encoder_new (&bad[i], &s, err, sizeof err));
        cr_assert_neq (err[0], 0);
    }
    nn_codec_shape_t empty = { 2, 0, 1, 5 }, huge = { 65536, 65536, 2, 1 };
    cr_assert_null (nn_codec_encoder_new (&(nn_codec_params_t) { .id = NN_CODEC_FP16 }, &empty,
                                          err, sizeof err));
    cr_assert_null (nn_codec_encoder_new (&(nn_codec_params_t) { .id = NN_CODEC_FP16 }, &huge,
                                          err, sizeof err));
    nn_codec_id_t id;
    cr_assert_eq (nn_codec_parse ("int8", &id), 0);
    cr_assert_eq (id, NN_CODEC_INT8);
    cr_assert_eq (nn_codec_parse ("int4", &id), -1);
    cr_assert_eq (nn_codec_parse (NULL, &id), -1);
    cr_assert_str_eq (nn_codec_name (NN_CODEC_TOPK), "topk");
}

//  ---------------------------------------------------------------------
//  Malformed payloads: refused with a message, out untouched.

static void
s_refused (const uint8_t *buf, size_t size, nn_codec_id_t id, const nn_codec_shape_t *s,
           const char *why, const char *needle)
{
    uint64_t count = nn_codec_shape_count (s);
    float *out = malloc (sizeof (float) * count);
    for (uint64_t i = 0; i < count; i++)
        out[i] = 12345.0f;
    char err[256] = "";
    cr_assert_eq (nn_codec_decode (out, buf, size, id, s, err, sizeof err), -1,
                  "%s: accepted", why);
    cr_assert (strstr (err, needle), "%s: message '%s' lacks '%s'", why, err, needle);
    for (uint64_t i = 0; i < count; i++)
        cr_assert_eq (out[i], 12345.0f, "%s: out written", why);
    free (out);
}

static void
s_put32 (uint8_t *p, uint32_t v)
{
    memcpy (p, &v, 4);      //  the test host is little-endian (x86-64, aarch64)
}

Test (codec, malformed_payloads_are_refused)
{
    nn_codec_shape_t s = { 2, 3, 3, 4 };
    uint32_t count = (uint32_t) nn_codec_shape_count (&s);
    float *x = s_tensor (&s, 8, 1.0f);
    nn_codec_params_t ps[4] = { { .id = NN_CODEC_NONE }, { .id = NN_CODEC_FP16 },
                                { .id = NN_CODEC_INT8 },
                                { .id = NN_CODEC_TOPK, .topk_fraction = 0.25 } };
    for (int c = 0; c < 4; c++) {
        nn_codec_id_t id = ps[c].id;
        size_t size;
        uint8_t *good = s_encode (&ps[c], &s, x, &size);
        uint8_t *b = malloc (size + 8);
        float *y = malloc (sizeof (float) * count);
        char err[256];
        cr_assert_eq (nn_codec_decode (y, good, size, id, &s, err, sizeof err), 0, "%s", err);

        //  Truncated at every length, and one byte too long.
        for (size_t len = 0; len < size; len++)
            s_refused (good, len, id, &s, "truncated", len < 24 ? "header" : "bytes");
        memcpy (b, good, size);
        b[size] = 0;
        s_refused (b, size + 1, id, &s, "one byte too long", "bytes");

        //  Header fields.
        memcpy (b, good, size);
        b[0] = 7;
        s_refused (b, size, id, &s, "unknown codec", "unknown codec");
        b[0] = (uint8_t) ((id + 1) % 4);
        s_refused (b, size, id, &s, "other codec", "the plan says");
        memcpy (b, good, size);
        b[1] = 0x80;
        s_refused (b, size, id, &s, "flags", "flags");
        memcpy (b, good, size);
        b[3] = 1;
        s_refused (b, size, id, &s, "reserved", "reserved");
        //  A lying shape: the same element count, other dims; and a batch
        //  larger than the receiver's.
        memcpy (b, good, size);
        s_put32 (b + 8, 9);
        s_put32 (b + 12, 1);
        s_refused (b, size, id, &s, "other dims", "expected");
        memcpy (b, good, size);
        s_put32 (b + 4, 200000);
        s_refused (b, size, id, &s, "larger batch", "expected");
        //  A lying k.
        memcpy (b, good, size);
        s_put32 (b + 20, id == NN_CODEC_TOPK ? count + 1 : 1);
        s_refused (b, size, id, &s, "k", id == NN_CODEC_TOPK ? "exceeds" : "k must be 0");
        if (id == NN_CODEC_TOPK) {
            uint32_t k;
            memcpy (&k, good + 20, 4);
            memcpy (b, good, size);
            s_put32 (b + 20, k - 1);        //  k smaller than the body
            s_refused (b, size, id, &s, "k below the body", "bytes");
            //  Indices: out of range, repeated, descending.
            memcpy (b, good, size);
            s_put32 (b + 24 + 4 * (k - 1), count);
            s_refused (b, size, id, &s, "index out of range", "out of range");
            memcpy (b, good, size);
            memcpy (b + 24 + 4, b + 24, 4);
            s_refused (b, size, id, &s, "repeated index", "strictly increasing");
            memcpy (b, good, size);
            memcpy (b + 24, good + 28, 4);
            memcpy (b + 28, good + 24, 4);
            s_refused (b, size, id, &s, "swapped indices", "strictly increasing");
        }
        if (id == NN_CODEC_INT8) {
            float bad_scales[] = { NAN, INFINITY, 0.0f, -1.0f, -0.0f };
            for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
                memcpy (b, good, size);
                memcpy (b + 24 + 8 * 2, &bad_scales[i], 4);     //  channel 2's scale
                s_refused (b, size, id, &s, "bad scale", "scale");
            }
            float bad_zero[] = { NAN, -INFINITY };
            for (size_t i = 0; i < 2; i++) {
                memcpy (b, good, size);
                memcpy (b + 24 + 8 * 3 + 4, &bad_zero[i], 4);
                s_refused (b, size, id, &s, "bad zero", "zero");
            }
            //  Finite fields whose largest code overflows float.
            float big = 1e37f, zero = 3e38f;
            memcpy (b, good, size);
            memcpy (b + 24, &big, 4);
            memcpy (b + 28, &zero, 4);
            s_refused (b, size, id, &s, "overflowing range", "finite float");
        }
        free (good); free (b); free (y);
    }
    free (x);
}

//  ---------------------------------------------------------------------
//  zstd: a lossless stage after the codec (params.zstd, NN_CODEC_FLAG_ZSTD)

//  Bytes of the codec's body without zstd (what the zstd frame holds).
static size_t
s_raw_body (const nn_codec_params_t *p, const nn_codec_shape_t *s)
{
    uint64_t count = nn_codec_shape_count (s);
    uint32_t k = p->id == NN_CODEC_TOPK ? nn_codec_topk_k (count, p->topk_fraction) : 0;
    return (size_t) nn_codec_wire_bytes (p->id, count, s->c, k) - NN_CODEC_HEADER_BYTES;
}

//  A post-ReLU activation tensor: max (0, N(0, 1)), half of it zeros.
static float *
s_relu_tensor (const nn_codec_shape_t *s, uint64_t seed)
{
    uint64_t count = nn_codec_shape_count (s);
    float *x = malloc (sizeof (float) * count);
    nn_rng_t r;
    nn_rng_seed (&r, seed);
    for (uint64_t i = 0; i < count; i++) {
        float v = (float) nn_rng_normal (&r);
        x[i] = v > 0.0f ? v : 0.0f;
    }
    return x;
}

//  One encoder with zstd and one without, fed the same tensors (and rngs
//  seeded alike): every zstd encoding is the plain one's header with the
//  flag, its body one frame holding the plain body byte for byte, at most
//  the encoder's bytes, and decodes to the same float bits; topk's
//  residuals stay equal. An all-zero tensor first: the encoding's size is
//  its own (a few bytes of frame), not the capacity.
static void
s_check_zstd_lossless (const nn_codec_params_t *p, const nn_codec_shape_t *s)
{
    uint64_t count = nn_codec_shape_count (s);
    size_t raw_body = s_raw_body (p, s);
    nn_codec_params_t pz = *p;
    pz.zstd = true;
    char err[256];
    nn_codec_encoder_t *plain = nn_codec_encoder_new (p, s, err, sizeof err);
    cr_assert (plain, "%s", err);
    nn_codec_encoder_t *zenc = nn_codec_encoder_new (&pz, s, err, sizeof err);
    cr_assert (zenc, "%s", err);
    size_t size = nn_codec_encoder_bytes (plain), cap = nn_codec_encoder_bytes (zenc);
    cr_assert_eq (size, NN_CODEC_HEADER_BYTES + raw_body);
    cr_assert_eq (cap, nn_codec_zstd_wire_bytes_max (size));
    cr_assert_eq (nn_codec_encoder_last_bytes (zenc), 0, "nothing encoded yet");
    uint8_t *a = malloc (size), *b = malloc (cap), *inner = malloc (raw_body);
    float *ya = malloc (sizeof (float) * count), *yb = malloc (sizeof (float) * count);
    nn_rng_t ra, rb;
    nn_rng_seed (&ra, 7);
    nn_rng_seed (&rb, 7);
    enum { T = 6 };
    for (int t = 0; t < T; t++) {
        float *x = t == 0 ? calloc (count, sizeof (float))
                 : t % 2 ? s_relu_tensor (s, 40 + (uint64_t) t)
                         : s_tensor (s, 40 + (uint64_t) t, 3.0f);
        const char *what = t == 0 ? "zeros" : t % 2 ? "relu" : "dense";
        cr_assert_eq (nn_codec_encode (plain, a, size, x, &ra, err, sizeof err), 0, "%s", err);
        cr_assert_eq (nn_codec_encode (zenc, b, cap, x, &rb, err, sizeof err), 0, "%s", err);
        cr_assert_eq (nn_codec_encoder_last_bytes (plain), size);
        size_t zsize = nn_codec_encoder_last_bytes (zenc);
        cr_assert_gt (zsize, NN_CODEC_HEADER_BYTES, "step %d", t);
        cr_assert_leq (zsize, cap, "step %d", t);
        cr_assert_eq (b[0], a[0]);
        cr_assert_eq (b[1], a[1] | NN_CODEC_FLAG_ZSTD, "flags 0x%02x, plain 0x%02x", b[1],
                      a[1]);
        cr_assert_eq (memcmp (b + 2, a + 2, NN_CODEC_HEADER_BYTES - 2), 0, "header");
        const uint8_t *body = b + NN_CODEC_HEADER_BYTES;
        size_t zbody = zsize - NN_CODEC_HEADER_BYTES;
        cr_assert_eq (ZSTD_findFrameCompressedSize (body, zbody), zbody, "one frame");
        cr_assert_eq (ZSTD_getFrameContentSize (body, zbody), (unsigned long long) raw_body);
        cr_assert_eq (ZSTD_decompress (inner, raw_body, body, zbody), raw_body);
        cr_assert_eq (memcmp (inner, a + NN_CODEC_HEADER_BYTES, raw_body), 0,
                      "%s step %d (%s): the frame holds another body", nn_codec_name (p->id),
                      t, what);
        if (t == 0 && p->id != NN_CODEC_TOPK)
            //  An all-zero body (int8: and 16 equal channel parameters) is
            //  a frame header and a block or two.
            cr_assert_lt (zsize, NN_CODEC_HEADER_BYTES + 64, "zeros: %zu bytes", zsize);
        for (uint64_t i = 0; i < count; i++)
            ya[i] = yb[i] = 12345.0f;
        cr_assert_eq (nn_codec_decode (ya, a, size, p->id, s, err, sizeof err), 0, "%s", err);
        cr_assert_eq (nn_codec_decode (yb, b, zsize, p->id, s, err, sizeof err), 0,
                      "%s step %d: %s", nn_codec_name (p->id), t, err);
        cr_assert_eq (memcmp (ya, yb, sizeof (float) * count), 0,
                      "%s step %d (%s): floats differ", nn_codec_name (p->id), t, what);
        if (p->id == NN_CODEC_TOPK)
            cr_assert_eq (memcmp (nn_codec_encoder_residual (plain),
                                  nn_codec_encoder_residual (zenc), sizeof (float) * count),
                          0, "step %d: residuals differ", t);
        free (x);
    }
    cr_assert_eq (memcmp (&ra, &rb, sizeof ra), 0, "the rngs advanced alike");
    //  A refused encoding (int8, topk: a NaN) changes neither the last
    //  size nor, for topk, the residual.
    if (p->id == NN_CODEC_INT8 || p->id == NN_CODEC_TOPK) {
        size_t last = nn_codec_encoder_last_bytes (zenc);
        float *res = NULL;
        if (p->id == NN_CODEC_TOPK) {
            res = malloc (sizeof (float) * count);
            memcpy (res, nn_codec_encoder_residual (zenc), sizeof (float) * count);
        }
        float *x = s_tensor (s, 9, 1.0f);
        x[count / 2] = NAN;
        cr_assert_eq (nn_codec_encode (zenc, b, cap, x, &rb, err, sizeof err), -1);
        cr_assert (strstr (err, "non-finite"), "%s", err);
        cr_assert_eq (nn_codec_encoder_last_bytes (zenc), last);
        if (res)
            cr_assert_eq (memcmp (res, nn_codec_encoder_residual (zenc),
                                  sizeof (float) * count), 0, "residual untouched");
        free (res);
        //  A refused first encoding leaves nothing to send (0), with
        //  zstd or without.
        for (int z = 0; z < 2; z++) {
            nn_codec_encoder_t *fresh = nn_codec_encoder_new (z ? &pz : p, s, err, sizeof err);
            cr_assert_eq (nn_codec_encode (fresh, b, cap, x, &rb, err, sizeof err), -1);
            cr_assert_eq (nn_codec_encoder_last_bytes (fresh), 0, "zstd %d", z);
            nn_codec_encoder_destroy (&fresh);
        }
        free (x);
    }
    nn_codec_encoder_destroy (&plain);
    nn_codec_encoder_destroy (&zenc);
    cr_assert_null (zenc);
    free (a); free (b); free (inner); free (ya); free (yb);
}

Test (codec, zstd_fp16_decodes_to_the_same_floats)
{
    s_check_zstd_lossless (&(nn_codec_params_t) { .id = NN_CODEC_FP16 },
                           &(nn_codec_shape_t) { 4, 6, 6, 16 });
}

Test (codec, zstd_int8_decodes_to_the_same_floats)
{
    s_check_zstd_lossless (&(nn_codec_params_t) { .id = NN_CODEC_INT8 },
                           &(nn_codec_shape_t) { 4, 6, 6, 16 });
}

Test (codec, zstd_int8_stochastic_decodes_to_the_same_floats)
{
    s_check_zstd_lossless (&(nn_codec_params_t) { .id = NN_CODEC_INT8, .stochastic = true },
                           &(nn_codec_shape_t) { 4, 6, 6, 16 });
}

Test (codec, zstd_topk_decodes_to_the_same_floats_and_residuals)
{
    s_check_zstd_lossless (&(nn_codec_params_t) { .id = NN_CODEC_TOPK, .topk_fraction = 0.05 },
                           &(nn_codec_shape_t) { 4, 6, 6, 16 });
}

//  A split's activations after a ReLU (100 x 7 x 7 x 64, half zeros, the
//  rest half-normal) compress. The bound is the zeros' share, not a
//  measurement: at least half the body's bytes are 0 (fp16: a zero is two
//  0 bytes; int8: a zero is its channel's minimum, code 0), at random
//  places, so the bytes' order-0 entropy is at most H(1/2) + 8/2 = 5 bits
//  of 8, which zstd's Huffman literals reach (0 has probability 1/2: a
//  1-bit code): 0.625 of the body plus block headers. 0.7 leaves those
//  headers their room. (Measured, zstd 1.5.4 at level 1: fp16 0.591,
//  int8 0.598; the log has them.)
Test (codec, zstd_compresses_post_relu_activations)
{
    nn_codec_shape_t s = { 100, 7, 7, 64 };
    uint64_t count = nn_codec_shape_count (&s);
    float *x = s_relu_tensor (&s, 77);
    uint64_t zeros = 0;
    for (uint64_t i = 0; i < count; i++)
        zeros += x[i] == 0.0f;
    cr_assert_geq (zeros, count * 49 / 100, "a ReLU's output is half zeros");
    float *y = malloc (sizeof (float) * count), *yz = malloc (sizeof (float) * count);
    nn_codec_id_t ids[2] = { NN_CODEC_FP16, NN_CODEC_INT8 };
    for (int i = 0; i < 2; i++) {
        nn_codec_params_t p = { .id = ids[i] }, pz = { .id = ids[i], .zstd = true };
        char err[256];
        nn_codec_encoder_t *e = nn_codec_encoder_new (&pz, &s, err, sizeof err);
        cr_assert (e, "%s", err);
        size_t cap = nn_codec_encoder_bytes (e), raw;
        uint8_t *plain = s_encode (&p, &s, x, &raw);
        uint8_t *buf = malloc (cap);
        cr_assert_eq (nn_codec_encode (e, buf, cap, x, NULL, err, sizeof err), 0, "%s", err);
        size_t z = nn_codec_encoder_last_bytes (e);
        double ratio = (double) z / (double) raw;
        cr_log_info ("zstd %s on a post-ReLU tensor of %llu floats: %zu of %zu bytes (%.3f)",
                     nn_codec_name (ids[i]), (unsigned long long) count, z, raw, ratio);
        cr_assert_leq (z, cap);
        cr_assert_lt (ratio, 0.9, "%s: %zu of %zu bytes", nn_codec_name (ids[i]), z, raw);
        cr_assert_lt (ratio, 0.7, "%s: %zu of %zu bytes (%.3f), above the zeros' bound",
                      nn_codec_name (ids[i]), z, raw, ratio);
        cr_assert_eq (nn_codec_decode (y, plain, raw, ids[i], &s, err, sizeof err), 0);
        cr_assert_eq (nn_codec_decode (yz, buf, z, ids[i], &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq (memcmp (y, yz, sizeof (float) * count), 0);
        nn_codec_encoder_destroy (&e);
        free (plain); free (buf);
    }
    free (x); free (y); free (yz);
}

Test (codec, zstd_with_codec_none_is_refused)
{
    nn_codec_shape_t s = { 2, 1, 1, 5 };
    char err[256] = "";
    cr_assert_null (nn_codec_encoder_new (&(nn_codec_params_t) { .id = NN_CODEC_NONE,
                                                                 .zstd = true },
                                          &s, err, sizeof err));
    cr_assert (strstr (err, "zstd"), "message '%s'", err);
    //  A none payload with the flag: refused on the flags, whether its body
    //  is f32 or a zstd frame of them.
    float x[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    size_t size;
    uint8_t *none = s_encode (&(nn_codec_params_t) { .id = NN_CODEC_NONE }, &s, x, &size);
    none[1] = NN_CODEC_FLAG_ZSTD;
    s_refused (none, size, NN_CODEC_NONE, &s, "none with the zstd flag", "flags 0x02 not allowed");
    uint8_t framed[NN_CODEC_HEADER_BYTES + 128];
    memcpy (framed, none, NN_CODEC_HEADER_BYTES);
    size_t z = ZSTD_compress (framed + NN_CODEC_HEADER_BYTES, 128, none + NN_CODEC_HEADER_BYTES,
                              size - NN_CODEC_HEADER_BYTES, 1);
    cr_assert_not (ZSTD_isError (z));
    s_refused (framed, NN_CODEC_HEADER_BYTES + z, NN_CODEC_NONE, &s, "none, zstd body",
               "flags 0x02 not allowed");
    free (none);
}

//  hdr's header with the zstd flag, then body (body_size bytes) as one
//  frame made by cctx (NULL: ZSTD_compress at level 1); *size its bytes.
static uint8_t *
s_zstd_payload (const uint8_t *hdr, const void *body, size_t body_size, ZSTD_CCtx *cctx,
                size_t *size)
{
    size_t cap = ZSTD_compressBound (body_size);
    uint8_t *p = malloc (NN_CODEC_HEADER_BYTES + cap);
    memcpy (p, hdr, NN_CODEC_HEADER_BYTES);
    p[1] |= NN_CODEC_FLAG_ZSTD;
    size_t z = cctx ? ZSTD_compress2 (cctx, p + NN_CODEC_HEADER_BYTES, cap, body, body_size)
                    : ZSTD_compress (p + NN_CODEC_HEADER_BYTES, cap, body, body_size, 1);
    cr_assert_not (ZSTD_isError (z), "%s", ZSTD_getErrorName (z));
    *size = NN_CODEC_HEADER_BYTES + z;
    return p;
}

//  good (size bytes, with the zstd flag) with each byte of its body
//  flipped in turn (xor 0xFF): each decodes (rc 0) or is refused (rc -1)
//  with a message and out as it was; nothing is read outside the payload
//  or written outside out (ASan). The frames carry no checksum (the
//  encoders' ZSTD_c_checksumFlag 0), so a flipped literal, and often a
//  flipped Huffman-coded byte (the code resynchronises), inflates to
//  another body of the right size that the codec's checks cannot tell
//  from a real one, as a flipped byte of a payload without zstd. The
//  count refused.
static int
s_flips (const uint8_t *good, size_t size, nn_codec_id_t id, const nn_codec_shape_t *s)
{
    uint64_t count = nn_codec_shape_count (s);
    uint8_t *b = malloc (size);
    float *y = malloc (sizeof (float) * count);
    int refused = 0;
    for (size_t i = NN_CODEC_HEADER_BYTES; i < size; i++) {
        memcpy (b, good, size);
        b[i] ^= 0xFF;
        for (uint64_t j = 0; j < count; j++)
            y[j] = 12345.0f;
        char err[256] = "";
        int rc = nn_codec_decode (y, b, size, id, s, err, sizeof err);
        cr_assert (rc == 0 || rc == -1, "rc %d", rc);
        if (rc == 0)
            continue;
        cr_assert_neq (err[0], 0, "%s: flip at %zu refused without a message",
                       nn_codec_name (id), i);
        for (uint64_t j = 0; j < count; j++)
            cr_assert_eq (y[j], 12345.0f, "%s: flip at %zu (%s): out written",
                          nn_codec_name (id), i, err);
        refused++;
    }
    free (b);
    free (y);
    return refused;
}

//  Every byte of a body of real data (post-ReLU activations; topk's
//  gradient), whose literals are Huffman-coded and whose sequences are
//  FSE-coded, flipped in turn: s_flips, through more of zstd's decoder
//  than the small payloads above.
Test (codec, zstd_flipped_bytes_never_crash_or_write_when_refused)
{
    nn_codec_shape_t s = { 4, 6, 6, 16 };
    float *x = s_relu_tensor (&s, 5);
    nn_codec_params_t ps[3] = { { .id = NN_CODEC_FP16, .zstd = true },
                                { .id = NN_CODEC_INT8, .zstd = true },
                                { .id = NN_CODEC_TOPK, .topk_fraction = 0.05, .zstd = true } };
    for (int c = 0; c < 3; c++) {
        char err[256];
        nn_codec_encoder_t *e = nn_codec_encoder_new (&ps[c], &s, err, sizeof err);
        cr_assert (e, "%s", err);
        uint8_t *buf = malloc (nn_codec_encoder_bytes (e));
        cr_assert_eq (nn_codec_encode (e, buf, nn_codec_encoder_bytes (e), x, NULL, err,
                                       sizeof err), 0, "%s", err);
        size_t size = nn_codec_encoder_last_bytes (e);
        int refused = s_flips (buf, size, ps[c].id, &s);
        cr_log_info ("zstd %s, %zu-byte body: %d flips refused", nn_codec_name (ps[c].id),
                     size - NN_CODEC_HEADER_BYTES, refused);
        //  At least the frame header's: magic number, descriptor, block header.
        cr_assert_geq (refused, 4);
        nn_codec_encoder_destroy (&e);
        free (buf);
    }
    free (x);
}

//  Payloads with the flag that are not what the flag promises: each
//  refused with a message, out untouched (s_refused), under ASan too.
//  The tensor repeats a few values, so that two frames and some garbage
//  fit under the size bound and the frame checks, not the size, refuse.
Test (codec, zstd_malformed_payloads_are_refused)
{
    nn_codec_shape_t s = { 2, 3, 3, 4 };
    uint64_t count = nn_codec_shape_count (&s);
    float *x = malloc (sizeof (float) * count);
    for (uint64_t i = 0; i < count; i++)
        x[i] = (float) (i % 3) - 0.5f * (float) (i % 2);
    nn_codec_params_t ps[3] = { { .id = NN_CODEC_FP16 }, { .id = NN_CODEC_INT8 },
                                { .id = NN_CODEC_TOPK, .topk_fraction = 0.25 } };
    for (int c = 0; c < 3; c++) {
        nn_codec_id_t id = ps[c].id;
        const char *name = nn_codec_name (id);
        nn_codec_params_t pz = ps[c];
        pz.zstd = true;
        size_t raw, size;
        uint8_t *plain = s_encode (&ps[c], &s, x, &raw);
        size_t raw_body = raw - NN_CODEC_HEADER_BYTES;
        const uint8_t *rbody = plain + NN_CODEC_HEADER_BYTES;
        uint64_t max = nn_codec_zstd_wire_bytes_max (raw);
        cr_assert_lt (max, UINT64_MAX);
        //  The encoder's payload, and one made here: both decode.
        char err[256];
        nn_codec_encoder_t *e = nn_codec_encoder_new (&pz, &s, err, sizeof err);
        cr_assert (e, "%s", err);
        uint8_t *enc = malloc (nn_codec_encoder_bytes (e));
        cr_assert_eq (nn_codec_encode (e, enc, nn_codec_encoder_bytes (e), x, NULL, err,
                                       sizeof err), 0, "%s", err);
        size_t enc_size = nn_codec_encoder_last_bytes (e);
        nn_codec_encoder_destroy (&e);
        uint8_t *good = s_zstd_payload (plain, rbody, raw_body, NULL, &size);
        size_t zbody = size - NN_CODEC_HEADER_BYTES;
        cr_assert_leq (size + zbody + 8, max, "%s: two frames fit under the bound", name);
        float *want = malloc (sizeof (float) * count), *y = malloc (sizeof (float) * count);
        cr_assert_eq (nn_codec_decode (want, plain, raw, id, &s, err, sizeof err), 0);
        cr_assert_eq (nn_codec_decode (y, enc, enc_size, id, &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq (memcmp (y, want, sizeof (float) * count), 0);
        cr_assert_eq (nn_codec_decode (y, good, size, id, &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq (memcmp (y, want, sizeof (float) * count), 0);
        uint8_t *b = malloc (max + 16);

        //  Cut short: to every length down to the header, and below it.
        for (size_t len = 0; len < size; len++)
            s_refused (good, len, id, &s, "truncated",
                       len < NN_CODEC_HEADER_BYTES ? "header" : "not one whole zstd frame");
        //  The flag on a body that is no zstd frame (the plain body).
        memcpy (b, plain, raw);
        b[1] |= NN_CODEC_FLAG_ZSTD;
        s_refused (b, raw, id, &s, "flag on a plain body", "not one whole zstd frame");
        //  Another flag bit beside it.
        memcpy (b, good, size);
        b[1] |= 0x80;
        s_refused (b, size, id, &s, "unknown flag", "not allowed");
        //  After the frame: garbage, one zero byte, a skippable frame (which
        //  ZSTD_decompress alone would skip), and a second valid frame.
        memcpy (b, good, size);
        memcpy (b + size, "\xde\xad\xbe\xef", 4);
        s_refused (b, size + 4, id, &s, "trailing garbage", "not one whole zstd frame");
        b[size] = 0;
        s_refused (b, size + 1, id, &s, "a trailing zero byte", "not one whole zstd frame");
        const uint8_t skippable[12] = { 0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4 };
        memcpy (b + size, skippable, sizeof skippable);
        s_refused (b, size + sizeof skippable, id, &s, "a skippable frame after",
                   "not one whole zstd frame");
        memcpy (b + size, good + NN_CODEC_HEADER_BYTES, zbody);
        s_refused (b, size + zbody, id, &s, "two frames", "not one whole zstd frame");
        //  Over the bound: refused on the size (the frame checks would too).
        memcpy (b, good, size);
        memset (b + size, 0, max + 1 - size);
        s_refused (b, (size_t) max + 1, id, &s, "over the bound", "more than");
        s_refused (b, (size_t) max, id, &s, "at the bound, padded", "not one whole zstd frame");

        //  Frames of one byte less and one more than the header and shape
        //  need (the frame's own content size is right for what it holds).
        uint8_t *more = malloc (raw_body + 1);
        memcpy (more, rbody, raw_body);
        more[raw_body] = 0;
        size_t fsize;
        uint8_t *f = s_zstd_payload (plain, rbody, raw_body - 1, NULL, &fsize);
        s_refused (f, fsize, id, &s, "content one byte short", "declares");
        free (f);
        f = s_zstd_payload (plain, more, raw_body + 1, NULL, &fsize);
        s_refused (f, fsize, id, &s, "content one byte long", "declares");
        free (f);
        free (more);
        //  A frame without its content size: refused before inflating.
        ZSTD_CCtx *cctx = ZSTD_createCCtx ();
        cr_assert_not (ZSTD_isError (ZSTD_CCtx_setParameter (cctx, ZSTD_c_contentSizeFlag, 0)));
        f = s_zstd_payload (plain, rbody, raw_body, cctx, &fsize);
        cr_assert_eq (ZSTD_getFrameContentSize (f + NN_CODEC_HEADER_BYTES,
                                                fsize - NN_CODEC_HEADER_BYTES),
                      ZSTD_CONTENTSIZE_UNKNOWN, "the frame must lack its content size");
        s_refused (f, fsize, id, &s, "no content size", "declares no content size");
        free (f);
        //  Another sender's frame (level 19, a checksum) is a frame like
        //  any: accepted; a wrong checksum is refused.
        ZSTD_CCtx_reset (cctx, ZSTD_reset_session_and_parameters);
        ZSTD_CCtx_setParameter (cctx, ZSTD_c_compressionLevel, 19);
        ZSTD_CCtx_setParameter (cctx, ZSTD_c_checksumFlag, 1);
        f = s_zstd_payload (plain, rbody, raw_body, cctx, &fsize);
        cr_assert_eq (nn_codec_decode (y, f, fsize, id, &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq (memcmp (y, want, sizeof (float) * count), 0);
        f[fsize - 1] ^= 0x01;
        s_refused (f, fsize, id, &s, "wrong checksum", "checksum");
        free (f);
        ZSTD_freeCCtx (cctx);

        //  The body inside a valid frame still gets the codec's checks.
        uint8_t *bad = malloc (raw_body);
        memcpy (bad, rbody, raw_body);
        if (id == NN_CODEC_INT8) {
            float nan = NAN;
            memcpy (bad + 8 * 2, &nan, 4);          //  channel 2's scale
            f = s_zstd_payload (plain, bad, raw_body, NULL, &fsize);
            s_refused (f, fsize, id, &s, "NaN scale in the frame", "scale nan");
            free (f);
        }
        if (id == NN_CODEC_TOPK) {
            memcpy (bad + 4, bad, 4);               //  a repeated index
            f = s_zstd_payload (plain, bad, raw_body, NULL, &fsize);
            s_refused (f, fsize, id, &s, "repeated index in the frame", "strictly increasing");
            free (f);
        }
        free (bad);

        //  Every byte of the body flipped in turn (s_flips); the frame's
        //  magic number flipped is no frame.
        int refused = s_flips (good, size, id, &s);
        cr_log_info ("zstd %s, %zu-byte body of a %zu-byte encoding: %d flips refused",
                     name, zbody, raw_body, refused);
        for (size_t i = 0; i < 4; i++) {
            memcpy (b, good, size);
            b[NN_CODEC_HEADER_BYTES + i] ^= 0xFF;
            s_refused (b, size, id, &s, "magic number flipped", "not one whole zstd frame");
        }

        free (plain); free (enc); free (good); free (want); free (y); free (b);
    }
    free (x);
}

//  ---------------------------------------------------------------------
//  Privacy noise

static void
s_moments (const nn_noise_t *noise, uint64_t seed, double *mean, double *var, double *mad)
{
    enum { N = 1 << 20 };
    float *x = calloc (N, sizeof (float));
    nn_rng_t r;
    nn_rng_seed (&r, seed);
    nn_noise_add (x, N, noise, &r);
    double s = 0.0, s2 = 0.0, sa = 0.0;
    for (int i = 0; i < N; i++) {
        s += x[i];
        s2 += (double) x[i] * x[i];
        sa += fabs (x[i]);
    }
    *mean = s / N;
    *var = s2 / N - *mean * *mean;
    *mad = sa / N;
    free (x);
}

//  2^20 draws, seed fixed. Tolerances, in standard errors of the estimate:
//  mean within 0.01 sd (10 SE); variance within 2% (Gaussian: SE 0.14%,
//  Laplace: 0.22%, so about 9 SE); E|x| within 1% (sigma sqrt(2/pi) for
//  the Gaussian, b for Laplace; SE below 0.1%).
Test (codec, noise_has_mean_zero_and_the_configured_variance)
{
    double scales[] = { 0.1, 1.0, 3.0 };
    for (int k = NN_NOISE_LAPLACE; k <= NN_NOISE_GAUSSIAN; k++)
        for (int i = 0; i < 3; i++) {
            nn_noise_t n = { (nn_noise_kind_t) k, scales[i] };
            cr_assert_eq (nn_noise_check (&n, NULL, 0), 0);
            double mean, var, mad, want = nn_noise_variance (&n), sd = sqrt (want);
            cr_assert_float_eq (want, k == NN_NOISE_LAPLACE ? 2 * scales[i] * scales[i]
                                                           : scales[i] * scales[i], 1e-12);
            s_moments (&n, 31 + (uint64_t) i, &mean, &var, &mad);
            cr_assert_leq (fabs (mean), 0.01 * sd, "%s %g: mean %g", nn_noise_name (n.kind),
                           scales[i], mean);
            cr_assert_leq (fabs (var / want - 1.0), 0.02, "%s %g: variance %g, want %g",
                           nn_noise_name (n.kind), scales[i], var, want);
            double mad_want = k == NN_NOISE_LAPLACE ? scales[i] : scales[i] * sqrt (2 / M_PI);
            cr_assert_leq (fabs (mad / mad_want - 1.0), 0.01, "%s %g: E|x| %g, want %g",
                           nn_noise_name (n.kind), scales[i], mad, mad_want);
        }
}

Test (codec, noise_is_seeded_and_checked)
{
    float a[101] = { 0 }, b[101] = { 0 }, c[101] = { 0 };
    nn_noise_t n = { NN_NOISE_GAUSSIAN, 0.5 };
    nn_rng_t r1, r2, r3;
    nn_rng_seed (&r1, 5);
    nn_rng_seed (&r2, 5);
    nn_rng_seed (&r3, 6);
    nn_noise_add (a, 101, &n, &r1);     //  odd: the last pair's second value unused
    nn_noise_add (b, 101, &n, &r2);
    nn_noise_add (c, 101, &n, &r3);
    cr_assert_eq (memcmp (a, b, sizeof a), 0);
    cr_assert_neq (memcmp (a, c, sizeof a), 0);
    cr_assert_neq (a[100], 0.0f);
    nn_noise_t none = { NN_NOISE_NONE, 0.0 };
    float d[4] = { 1, 2, 3, 4 };
    nn_noise_add (d, 4, &none, &r1);
    cr_assert (d[0] == 1 && d[3] == 4);
    char err[128];
    nn_noise_t bad[] = { { NN_NOISE_LAPLACE, 0.0 }, { NN_NOISE_GAUSSIAN, -1.0 },
                         { NN_NOISE_GAUSSIAN, INFINITY }, { (nn_noise_kind_t) 5, 1.0 } };
    for (int i = 0; i < 4; i++)
        cr_assert_eq (nn_noise_check (&bad[i], err, sizeof err), -1);
    nn_noise_kind_t kind;
    cr_assert_eq (nn_noise_parse ("laplace", &kind), 0);
    cr_assert_eq (kind, NN_NOISE_LAPLACE);
    cr_assert_eq (nn_noise_parse ("uniform", &kind), -1);
}
