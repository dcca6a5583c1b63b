/*  srv_aggregate.h: how the server combines the devices' updates (pure:
    no sockets, no logging, no state).

    A round's PARAMS slabs (and in split modes the server replicas) are
    combined by the run's rule (config "aggregation"): FedAvg weighted by
    sample counts, or the coordinate-wise trimmed mean or median, which are
    unweighted so that no sample-count claim can pull them.
*/
#ifndef SRV_AGGREGATE_H_INCLUDED
#define SRV_AGGREGATE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

//  At most this many slabs per combine (the server's device limit).
#define SRV_AGGREGATE_MAX 64

typedef enum {
    SRV_AGG_FEDAVG = 0,
    SRV_AGG_TRIMMED_MEAN,
    SRV_AGG_MEDIAN
} srv_agg_rule_t;

typedef struct {
    srv_agg_rule_t rule;
    double trim_fraction;       //  trimmed-mean: share trimmed at each end
} srv_agg_t;

//  The rule a checked config names ("fedavg", "trimmed-mean", "median");
//  any other name is FedAvg (pl_config_check refuses other names).
srv_agg_rule_t srv_aggregate_rule (const char *name);

//  Slabs trimmed at each end of n for trim_fraction: at most (n - 1) / 2,
//  so at least one value is left.
int srv_aggregate_trim (int n, double trim_fraction);

//  dst (count) from srcs[0..n) (each count floats) by agg; weights (n)
//  are used by FedAvg only. n <= SRV_AGGREGATE_MAX.
void srv_aggregate_combine (float *dst, const float *const *srcs, const double *weights,
                            int n, size_t count, const srv_agg_t *agg);

//  Index of the first non-finite value of v (count), or count if all are
//  finite. The reference is the plain loop the fast one is tested against.
size_t srv_first_nonfinite (const float *v, size_t count);
size_t srv_first_nonfinite_ref (const float *v, size_t count);

#endif
