/*  srv_plan.h: the server's planning (docs/planner.md, proto/PROTOCOL.md
    "Planning").

    With split_point or micro_batches "auto":
    - at setup the server profiles itself and makes a provisional plan for
      the configured link (so the replicas can be built);
    - each device that joins before the start profiles itself (PROFILE)
      and, with measure_link, has its RTT, downlink and uplink measured by
      PROBE round trips;
    - when every device is in, the planner chooses one split point for all
      (replicas are averaged, so they must hold the same units) and each
      device's own micro-batch count, and tells each device its plan
      (PLAN) before the first MODEL;
    - with adaptive, at every epoch end the links are probed again (and
      the training traffic's ACTIVATIONS spacing gives a floor for each
      uplink); a device whose link drifted by more than replan_drift gets
      its micro-batch count re-planned, and the split point moves if the
      estimate gains more than replan_gain. Every re-plan is logged with
      its reason and recorded in summary.json.
*/
#ifndef SRV_PLAN_H_INCLUDED
#define SRV_PLAN_H_INCLUDED

#include <stdbool.h>

#include "srv_state.h"

//  At setup, before the replicas are built: profile this host and make the
//  provisional plan (config split_point / micro_batches become numbers).
//  Records what was "auto". 0 or -1.
int srv_plan_setup (srv_t *self);
//  WELCOME for a device joining now should ask for a PROFILE.
bool srv_plan_profile_wanted (const srv_t *self);
//  A device joined (slot state reset) or was dropped (its probe abandoned;
//  may complete an epoch-end re-plan that waited for it).
void srv_plan_on_join (srv_t *self, srv_device_t *d);
void srv_plan_on_drop (srv_t *self, srv_device_t *d);
//  Messages. Both drop the device on a violation.
void srv_plan_on_profile (srv_t *self, srv_device_t *d, const proto_msg_t *msg);
void srv_plan_on_probe (srv_t *self, srv_device_t *d, const proto_msg_t *msg);
//  Training traffic: one ACTIVATIONS arrived now.
void srv_plan_on_activations (srv_t *self, srv_device_t *d, const proto_msg_t *msg);
//  Every device joined: start now, or once all are profiled and probed.
void srv_plan_maybe_start (srv_t *self);
//  After an epoch's last aggregation, before the next epoch: true when an
//  adaptive re-plan started (probes out); it calls srv_epoch_continue when
//  done. false: the caller goes on at once.
bool srv_plan_epoch_end (srv_t *self);
//  While probes are out.
bool srv_plan_probing (const srv_t *self);
void srv_plan_check_deadlines (srv_t *self);
//  Per-device link figures for the epoch's summary entry (then the
//  epoch's traffic samples are reset).
void srv_plan_epoch_json (srv_t *self, int id, cJSON *device);
//  The epoch's re-plans (an array, ownership moves), or NULL.
cJSON *srv_plan_take_replans (srv_t *self);

#endif
