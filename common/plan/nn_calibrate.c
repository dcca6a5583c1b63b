/*  nn_calibrate.c: a device's compute costs fitted to a measured period.
    See nn_calibrate.h. */
#include "nn_calibrate.h"

#include "nn_alloc.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void
nn_calibrate_scale (nn_estimate_costs_t *costs, double factor)
{
    assert (costs && factor > 0.0);
    for (int u = 0; u < costs->units_count; u++) {
        nn_estimate_unit_cost_t *k = &costs->unit[u];
        k->fwd_s *= factor;
        k->bwd_s *= factor;
        k->fwd_fixed_s *= factor;
        k->bwd_fixed_s *= factor;
        k->upd_s *= factor;
    }
}

double
nn_calibrate_period (const nn_estimate_input_t *in, const nn_estimate_candidate_t *c)
{
    assert (in && c && in->iterations >= 1);
    int inside = nn_estimate_rounds (in) - 1;
    return c->iteration_s + inside * c->aggregation_s / in->iterations;
}

double
nn_calibrate_period_at (const nn_estimate_input_t *in, int device, int split_point,
                        int micro_batches, char *err, size_t err_size)
{
    assert (in);
    nn_estimate_input_t pinned = *in;
    pinned.split_point = split_point;
    pinned.micro_batches = micro_batches;
    nn_estimate_t *plan = nn_estimate_new (&pinned, err, err_size);
    if (!plan)
        return -1.0;
    const nn_estimate_candidate_t *c = nn_estimate_find (plan, device, split_point,
                                                         micro_batches);
    double period = c ? nn_calibrate_period (&pinned, c) : -1.0;
    if (!c)
        nn_errf (err, err_size, "calibrate: device %d: the estimate has no candidate P %d, "
                 "N %d", device, split_point, micro_batches);
    nn_estimate_destroy (&plan);
    return period;
}

//  The estimate's period for the device with its compute scaled by f
//  (in's devices are devs); -1 when the estimate refuses the input.
static double
s_period_at (nn_estimate_input_t *in, nn_estimate_device_t *devs,
             const nn_estimate_costs_t *base, int device, int p, int n, double f, char *err,
             size_t err_size)
{
    devs[device].costs = *base;
    nn_calibrate_scale (&devs[device].costs, f);
    return nn_calibrate_period_at (in, device, p, n, err, err_size);
}

int
nn_calibrate_compute (const nn_estimate_input_t *in, int device, int split_point,
                      int micro_batches, double period_s, double *factor, char *err,
                      size_t err_size)
{
    assert (in && factor);
    *factor = 0.0;
    if (device < 0 || device >= in->devices_count || !in->devices)
        return nn_errf (err, err_size, "calibrate: device %d of %d", device,
                        in->devices_count);
    if (!(period_s > 0.0) || !isfinite (period_s))
        return nn_errf (err, err_size, "calibrate: device %d: measured period %g s; need a "
                        "positive number", device, period_s);
    //  The input over a copy of its devices, whose costs each step scales.
    nn_estimate_input_t scaled = *in;
    nn_estimate_device_t *devs = nn_malloc (sizeof *devs * (size_t) in->devices_count);
    memcpy (devs, in->devices, sizeof *devs * (size_t) in->devices_count);
    scaled.devices = devs;
    const nn_estimate_costs_t base = in->devices[device].costs;
    int rc = 1;
    double lo = log (NN_CALIBRATE_MIN_FACTOR), hi = log (NN_CALIBRATE_MAX_FACTOR);
    double at_lo = s_period_at (&scaled, devs, &base, device, split_point, micro_batches,
                                exp (lo), err, err_size);
    double at_hi = at_lo < 0.0 ? -1.0
                 : s_period_at (&scaled, devs, &base, device, split_point, micro_batches,
                                exp (hi), err, err_size);
    if (at_lo < 0.0 || at_hi < 0.0)
        rc = -1;
    else
    if (period_s >= at_lo && period_s <= at_hi) {
        //  The estimate grows with the device's compute (monotone, not
        //  strictly: a link-bound stretch is flat; and not continuously:
        //  the pipeline's order of events can flip, a step up), so bisect
        //  on log f until the estimate is within 0.1% of the period, or
        //  the bracket closes on a step across it (then the factor at the
        //  step's top: the smallest that reaches the period).
        for (int k = 0; k < 100 && rc == 1; k++) {
            double mid = 0.5 * (lo + hi);
            double at = s_period_at (&scaled, devs, &base, device, split_point,
                                     micro_batches, exp (mid), err, err_size);
            if (at < 0.0)
                rc = -1;
            else
            if (fabs (at - period_s) <= 1e-3 * period_s || hi - lo < 1e-9) {
                *factor = exp (mid);
                rc = 0;
            }
            else
            if (at < period_s)
                lo = mid;
            else
                hi = mid;
        }
    }
    nn_free (devs);
    return rc;
}
