/*  srv_assign.h: the run's current assignment of work to devices.

    Per device: the split point (units 0..P-1 on the device, P..U on the
    server) and the number of micro-batches N a mini-batch is cut into.
    Devices may train at different split points in pipelearn and sfl: the
    server keeps device i's replica of units P_i..U, and FedAvg works per
    unit over every holder of it (srv_step.c). sl (one replica shared by
    every device) and fl (no split) hold one value for all. The server keeps one of these, written
    only by its step function (srv_step.c) from the planner's decisions; it
    is what WELCOME and PLAN tell a device and what a checkpoint records.
*/
#ifndef SRV_ASSIGN_H_INCLUDED
#define SRV_ASSIGN_H_INCLUDED

#include <stdbool.h>

#define SRV_MAX_DEVICES 64

typedef struct {
    int devices;
    int split[SRV_MAX_DEVICES];     //  P of each device
    int micro[SRV_MAX_DEVICES];     //  N of each device (1 outside pipelearn)
} srv_assign_t;

//  Every device at (split, micro).
void srv_assign_uniform (srv_assign_t *self, int devices, int split, int micro);
//  Device 0's split point: the run's when every device has the same one
//  (what logs, metrics and the planner's common choice name).
int srv_assign_split (const srv_assign_t *self);
//  The devices train at different split points.
bool srv_assign_mixed (const srv_assign_t *self);
//  The smallest and largest split point of any device.
void srv_assign_split_range (const srv_assign_t *self, int *lo, int *hi);
//  The largest micro-batch of any device for mini-batches of batch: B
//  over the smallest N.
int srv_assign_max_micro_batch (const srv_assign_t *self, int batch);
//  The smallest and largest N.
void srv_assign_micro_range (const srv_assign_t *self, int *lo, int *hi);

#endif
