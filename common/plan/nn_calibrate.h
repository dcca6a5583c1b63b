/*  nn_calibrate.h: a device's compute costs fitted to what a run measured.

    A profile is measured on the device before training, one unit at a
    time on synthetic data; the run then trains the device's part as a
    chain, on real data, beside whatever else the device (or, in a lab,
    the host) is running. Where the two differ the plan rests on the wrong
    costs: in the lab (docs/headline.md, "The estimate calibrated by the
    run") two VGG5 devices at 10% of a core profiled their split point 3
    at an estimated 0.287 s an iteration and trained at 0.35-0.39 s, while
    split point 2, estimated 1% slower, trained faster.

    nn_calibrate_compute finds the factor f on one device's compute costs
    (every unit's forward, backward, their per-call parts and the update)
    under which the estimate of the (P, N) the device ran equals the
    iteration period the run measured. The period is what the server sees:
    the time between the first micro-batches of consecutive iterations,
    so besides the iteration it holds the aggregation rounds inside the
    epoch (all but the epoch's last), which nn_calibrate_period adds to
    the candidate's iteration.

    Pure: no clock, no I/O, no globals.
*/
#ifndef NN_CALIBRATE_H_INCLUDED
#define NN_CALIBRATE_H_INCLUDED

#include "nn_estimate.h"

//  The factors nn_calibrate_compute searches. The lab's runs measured
//  1.2-1.5x their profiles; a period that needs a factor beyond 4 either
//  way is mostly not the compute's (where the estimate barely depends on
//  the compute - a link or the host bounds it - a few percent of noise
//  would otherwise fit as a factor of 4 or more, as it did on loopback),
//  or a profile to be measured again.
#define NN_CALIBRATE_MIN_FACTOR 0.25
#define NN_CALIBRATE_MAX_FACTOR 4.0

//  Every compute cost of costs (forward, backward, their fixed parts and
//  the update of every unit) times factor (> 0).
void nn_calibrate_scale (nn_estimate_costs_t *costs, double factor);

//  The period between consecutive iterations' first micro-batches that
//  the estimate predicts for candidate c of a plan with input in: its
//  iteration plus its share of the aggregation rounds inside the epoch.
double nn_calibrate_period (const nn_estimate_input_t *in, const nn_estimate_candidate_t *c);

//  The estimate's period (nn_calibrate_period) for device `device` of in
//  at (split_point, micro_batches), pinned for every device (a device's
//  estimate does not depend on the others' choices: each candidate is
//  taken as every device's); -1 with a
//  message when the estimate refuses the input or has no such candidate.
double nn_calibrate_period_at (const nn_estimate_input_t *in, int device, int split_point,
                               int micro_batches, char *err, size_t err_size);

//  Device `device` of input `in` ran (split_point, micro_batches) with
//  the codecs in in->codecs (pin them: auto would choose again) and the
//  server measured period_s between its iterations. 0 with *factor the
//  f in [NN_CALIBRATE_MIN_FACTOR, NN_CALIBRATE_MAX_FACTOR] on the device's
//  compute costs under which the estimate's period is period_s (within
//  0.1%, or the factor where the estimate steps across it: the pipeline's
//  order of events can flip with the costs); 1 when no f in that range gets there (the period is bound by
//  something else: its link, the server, another device's round), with
//  *factor 0; -1 with a message on a bad input.
int nn_calibrate_compute (const nn_estimate_input_t *in, int device, int split_point,
                          int micro_batches, double period_s, double *factor, char *err,
                          size_t err_size);

#endif
