/*  plan_costs.h: pipelearn-plan's cost files (docs/planner.md, "Cost
    files"): per-unit compute costs of the server and the devices, and
    optionally the model's transfer sizes, for one batch size.
*/
#ifndef PLAN_COSTS_H_INCLUDED
#define PLAN_COSTS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "nn_estimate.h"

//  Read a cost file into in (model, server, devices) for batch B. The
//  model's bytes are already filled from the spec; the file may override
//  them. *heterogeneous is set when the file lists devices. -1 with err.
int plan_costs_load (const char *path, int batch, int devices, nn_estimate_input_t *in,
                     nn_estimate_device_t *devs, bool *heterogeneous, char *err,
                     size_t err_size);
//  Write in's model sizes, server costs and device 0's costs (profiled on
//  this host for model at batch) as a cost file, atomically. -1 with err.
int plan_costs_write (const char *path, int batch, const nn_estimate_input_t *in,
                      const char *model, char *err, size_t err_size);
//  Devices f times slower: every device time of devs[0..NN_ESTIMATE_MAX_DEVICES),
//  per-call parts included (f <= 0 or 1: unchanged).
void plan_costs_slow_devices (nn_estimate_device_t *devs, double f);

#endif
