/*  srv_planner_internal.h: the planner's state and the helpers its two
    files share: srv_planner.c (profiles, probes, the start's plan) and
    srv_replan.c (re-planning at epoch ends). Not for the rest of the
    server: it sees srv_planner.h only.
*/
#ifndef SRV_PLANNER_INTERNAL_H_INCLUDED
#define SRV_PLANNER_INTERNAL_H_INCLUDED

#include "nn_estimate.h"
#include "srv_linkrate.h"
#include "srv_planner.h"

//  What the planner knows of a device slot; it outlives the slot's sessions.
typedef struct {
    bool profiled;              //  costs came from its PROFILE
    nn_estimate_costs_t costs;
    srv_linkrate_t link;        //  probes and traffic samples
    bool measured;              //  rtt/up/down hold a finished measurement
    double rtt_s, up_Bps, down_Bps;     //  the last measurement
    double plan_up_Bps, plan_down_Bps;  //  the link its current plan assumed
    double est_iteration_s;     //  the current plan's estimate for it
    double traffic_up_Bps;      //  last epoch's estimate (0: none)
    double compute_scale;       //  its profile's compute costs times this (0 = 1):
                                //  the calibration to measured periods (srv_replan.c)
    double period_s;            //  last epoch's measured iteration period (0: none)
} srv_planner_slot_t;

struct _srv_planner_t {
    srv_planner_args_t args;
    bool auto_split, auto_micro;    //  the config said "auto"
    bool per_device;                //  auto_split in pipelearn or sfl: a split
                                    //  point per device (sl: one replica, one P)
    bool measure;                   //  devices profile and are probed (measure_link)
    bool probing;                   //  epoch-end probes in progress
    int fixed_micro;                //  the config's N when not "auto"
    nn_estimate_costs_t server;         //  this host, one worker thread
    nn_estimate_model_t model;          //  transfer sizes at batch B
    int iterations;                 //  per epoch, for the estimates
    double host_copy_Bps;           //  host_cores > 0: loopback bytes per core-second
    size_t frame_limit;             //  the server's largest frame (0: none)
    srv_planner_slot_t slot[SRV_MAX_DEVICES];
    //  The configured codecs of each device (NN_ESTIMATE_CODEC_AUTO for an
    //  "auto" direction) with its codec speeds: its PROFILE's, this host's
    //  until it sent one; server_codec this host's (one thread). NULL in
    //  the input when every codec is none.
    bool codecs_set;
    bool auto_codec;                //  some device's codec is "auto"
    nn_estimate_codec_t codecs[SRV_MAX_DEVICES];
    nn_estimate_codec_speed_t server_codec;
    pl_codecs_t chosen[SRV_MAX_DEVICES];    //  each device's codecs now (the last
                                            //  decision's, the config's before)
    bool drifted[SRV_MAX_DEVICES];  //  re-planned at the last epoch end (srv_replan.c)
    cJSON *replans;                 //  this epoch's re-plans (summary), or NULL
};

//  The slot's compute factor: its compute_scale, or 1 where no calibration
//  set one (a slot starts zeroed).
static inline double
srv_planner_slot_scale (const srv_planner_slot_t *s)
{
    return s->compute_scale > 0.0 ? s->compute_scale : 1.0;
}

//  Bytes per second in Mbit/s, for the log.
double srv_planner_mbps (double Bps);
//  The planner's input for every device slot: its profile (or this host's
//  until it sent one) and its measured link (or the configured one); devs
//  holds SRV_MAX_DEVICES.
void srv_planner_input (const srv_planner_t *self, nn_estimate_input_t *in,
                        nn_estimate_device_t *devs);
//  A plan for the current input with P pinned (0 = free). NULL logged.
nn_estimate_t *srv_planner_plan_at (const srv_planner_t *self, int split_point);
//  The run's epoch estimate with every device at split_point and device i
//  at n[i] micro-batches (the slowest device's epoch: rounds are barriers).
double srv_planner_epoch_of (const nn_estimate_t *plan, int devices, int split_point,
                             const int *n);
//  Each device's best N at split point P (cur's N if pinned), and its
//  estimate.
void srv_planner_choose_micro (const srv_planner_t *self, const nn_estimate_t *plan,
                               const srv_assign_t *cur, int split_point, int *n, double *est);

//  out->next decided (by srv_planner_start, or srv_planner_next when the
//  plan changed): fill out->codecs. A device with an "auto" direction
//  gets the codec the estimate chose at its (P, N) when it is new to the
//  plan (the start) or was re-planned now (its link drifted, or its plan
//  changed): it is told when its codecs change, the change logged and
//  recorded with the epoch's re-plans. Every other device keeps its
//  codecs.
void srv_planner_choose_codecs (srv_planner_t *self, bool start, int epoch,
                                srv_planner_decision_t *out);

#endif
