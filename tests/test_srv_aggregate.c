/*  test_srv_aggregate: how the server combines the devices' updates
    (server/srv_aggregate.h): the rule a config names, FedAvg's weights,
    the trimmed mean and median's resistance to one outlier, the trim
    bound, and the non-finite scan that guards checkpoints and PARAMS. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "srv_aggregate.h"

TestSuite (srv_aggregate, .timeout = 30);

Test (srv_aggregate, config_names_give_their_rules)
{
    cr_assert_eq (srv_aggregate_rule ("fedavg"), SRV_AGG_FEDAVG);
    cr_assert_eq (srv_aggregate_rule ("trimmed-mean"), SRV_AGG_TRIMMED_MEAN);
    cr_assert_eq (srv_aggregate_rule ("median"), SRV_AGG_MEDIAN);
}

Test (srv_aggregate, fedavg_weighs_by_samples)
{
    const float a[2] = { 0.0f, 10.0f }, b[2] = { 4.0f, 2.0f };
    const float *srcs[2] = { a, b };
    const double w[2] = { 1.0, 3.0 };
    float dst[2];
    srv_agg_t agg = { SRV_AGG_FEDAVG, 0.0 };
    srv_aggregate_combine (dst, srcs, w, 2, 2, &agg);
    cr_assert_float_eq (dst[0], 3.0f, 1e-6);        //  (0 * 1 + 4 * 3) / 4
    cr_assert_float_eq (dst[1], 4.0f, 1e-6);        //  (10 * 1 + 2 * 3) / 4
}

//  Five devices, one of them claiming a huge sample count and sending a
//  far-off value: FedAvg follows it, median and trimmed mean do not.
Test (srv_aggregate, median_and_trimmed_mean_ignore_one_outlier)
{
    const float v[5][1] = { { 1.0f }, { 2.0f }, { 3.0f }, { 4.0f }, { 1000.0f } };
    const float *srcs[5] = { v[0], v[1], v[2], v[3], v[4] };
    const double w[5] = { 1, 1, 1, 1, 1000 };
    float dst[1];
    srv_agg_t fedavg = { SRV_AGG_FEDAVG, 0.0 };
    srv_aggregate_combine (dst, srcs, w, 5, 1, &fedavg);
    cr_assert_gt (dst[0], 900.0f, "FedAvg should follow the heavy device (%g)", dst[0]);
    srv_agg_t median = { SRV_AGG_MEDIAN, 0.0 };
    srv_aggregate_combine (dst, srcs, w, 5, 1, &median);
    cr_assert_float_eq (dst[0], 3.0f, 1e-6);
    srv_agg_t trimmed = { SRV_AGG_TRIMMED_MEAN, 0.2 };     //  one of five at each end
    srv_aggregate_combine (dst, srcs, w, 5, 1, &trimmed);
    cr_assert_float_eq (dst[0], 3.0f, 1e-6);        //  mean of 2, 3, 4
}

Test (srv_aggregate, trim_leaves_at_least_one_value)
{
    cr_assert_eq (srv_aggregate_trim (5, 0.2), 1);
    cr_assert_eq (srv_aggregate_trim (10, 0.1), 1);
    cr_assert_eq (srv_aggregate_trim (4, 0.0), 0);
    //  Asked to trim half or more: (n - 1) / 2, never all of them.
    cr_assert_eq (srv_aggregate_trim (4, 0.5), 1);
    cr_assert_eq (srv_aggregate_trim (3, 0.49), 1);
    cr_assert_eq (srv_aggregate_trim (2, 0.5), 0);
    cr_assert_eq (srv_aggregate_trim (1, 0.5), 0);
}

Test (srv_aggregate, first_nonfinite_finds_nan_and_inf)
{
    float v[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
    cr_assert_eq (srv_first_nonfinite (v, 4), 4);
    v[2] = NAN;
    cr_assert_eq (srv_first_nonfinite (v, 4), 2);
    v[1] = -INFINITY;
    cr_assert_eq (srv_first_nonfinite (v, 4), 1);
    cr_assert_eq (srv_first_nonfinite (v, 1), 1);
    cr_assert_eq (srv_first_nonfinite (v, 0), 0);
}

//  The blockwise check against the plain loop: every position of a
//  non-finite value (NaN of either sign, payloads, infinities) in lengths
//  around the block of 256, the largest finite floats and denormals
//  beside it, and two bad values (the first one counts).
Test (srv_aggregate, first_nonfinite_matches_the_reference_everywhere)
{
    enum { LEN = 256 * 3 + 7 };
    static float v[LEN];
    const uint32_t bad[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,
                             0x7f800000u, 0xff800000u };
    for (size_t i = 0; i < LEN; i++)
        v[i] = (i % 3 == 0) ? FLT_MAX : (i % 3 == 1) ? -FLT_MIN / 4 : (float) i;
    const size_t lens[] = { 0, 1, 255, 256, 257, 511, 512, 513, LEN };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t n = lens[l];
        cr_assert_eq (srv_first_nonfinite (v, n), n);
        for (size_t at = 0; at < n; at++) {
            float keep = v[at];
            uint32_t bits = bad[at % (sizeof bad / sizeof bad[0])];
            memcpy (&v[at], &bits, sizeof bits);
            size_t want = srv_first_nonfinite_ref (v, n);
            cr_assert_eq (want, at);
            cr_assert_eq (srv_first_nonfinite (v, n), want, "n %zu, bad value at %zu", n, at);
            if (at + 300 < n) {
                float keep2 = v[at + 300];
                v[at + 300] = NAN;
                cr_assert_eq (srv_first_nonfinite (v, n), at);
                v[at + 300] = keep2;
            }
            v[at] = keep;
        }
    }
}
