/*  srv_aggregate.c: FedAvg, trimmed mean and median over slabs. See
    srv_aggregate.h. */
#include "srv_aggregate.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn_optim.h"

srv_agg_rule_t
srv_aggregate_rule (const char *name)
{
    if (strcmp (name, "median") == 0)
        return SRV_AGG_MEDIAN;
    if (strcmp (name, "trimmed-mean") == 0)
        return SRV_AGG_TRIMMED_MEAN;
    return SRV_AGG_FEDAVG;
}

int
srv_aggregate_trim (int n, double trim_fraction)
{
    int trim = (int) (trim_fraction * n);
    if (2 * trim >= n)
        trim = (n - 1) / 2;
    return trim;
}

void
srv_aggregate_combine (float *dst, const float *const *srcs, const double *weights, int n,
                       size_t count, const srv_agg_t *agg)
{
    assert (n <= SRV_AGGREGATE_MAX);
    float scratch[SRV_AGGREGATE_MAX];
    if (agg->rule == SRV_AGG_MEDIAN)
        nn_median (dst, srcs, n, count, scratch);
    else
    if (agg->rule == SRV_AGG_TRIMMED_MEAN)
        nn_trimmed_mean (dst, srcs, n, srv_aggregate_trim (n, agg->trim_fraction), count,
                         scratch);
    else
        nn_fedavg (dst, srcs, weights, n, count);
}

size_t
srv_first_nonfinite_ref (const float *v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite (v[i]))
            return i;
    return count;
}

//  Floats a block of the fast check looks at before it branches.
#define S_FINITE_BLOCK 256

size_t
srv_first_nonfinite (const float *v, size_t count)
{
    //  A float is inf or NaN when its exponent bits are all ones. The
    //  reference's early exit keeps GCC from vectorising it (0.1 CPU-s an
    //  epoch on a loopback run's main thread, which checks every received
    //  activation); here a block's bits are OR-ed without a branch, and
    //  only a block that holds a non-finite value is scanned again.
    size_t i = 0;
    for (; i + S_FINITE_BLOCK <= count; i += S_FINITE_BLOCK) {
        uint32_t bad = 0;
        for (size_t j = 0; j < S_FINITE_BLOCK; j++) {
            uint32_t bits;
            memcpy (&bits, v + i + j, sizeof bits);
            bad |= (uint32_t) ((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            break;
    }
    return i + srv_first_nonfinite_ref (v + i, count - i);
}
