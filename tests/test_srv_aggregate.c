/*  test_srv_aggregate: how the server combines the devices' updates
    (server/srv_aggregate.h): the rule a config names, FedAvg's weights,
    the trimmed mean and median's resistance to one outlier, the trim
    bound, and the non-finite scan that guards checkpoints and PARAMS. */
#include <criterion/criterion.h>
#include <math.h>

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
