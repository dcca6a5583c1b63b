/*  srv_planner.h: the server's planner (docs/planner.md, proto/PROTOCOL.md
    "Planning"). It measures and decides; it never sends, drops or
    re-splits anything itself: each call returns what the server should
    do (a PROBE to send, a device that broke the protocol, a new
    assignment), and the server's step function acts on it.

    With split_point, micro_batches or a codec "auto":
    - at setup the server profiles itself and makes a provisional
      assignment for the configured link (so the replicas can be built);
    - each device that joins before the start profiles itself (PROFILE)
      and, with measure_link, has its RTT, downlink and uplink measured by
      PROBE round trips;
    - when every device is in, the planner chooses each device's own split
      point and micro-batch count in pipelearn and sfl (nn_estimate_chosen:
      the server keeps a replica per device at its split point and
      averages per unit), one split point for all in sl (one replica);
      the server tells each device (PLAN) before the first MODEL;
    - with adaptive, at every epoch end the links are probed again (and
      the training traffic's ACTIVATIONS spacing gives a floor for each
      uplink); a device whose link drifted by more than replan_drift gets
      its plan re-made: in pipelearn and sfl its own split point moves if
      its estimated iteration gains more than replan_gain, and its N is
      re-chosen; (a run with "auto" micro-batches only and a configured
      split point keeps that split point). Every re-plan is logged with
      its reason and recorded in summary.json;
    - in any pipelearn or sfl run, the config's split_point_moves move a
      device's split point at a given epoch's start, recorded the same way
      (srv_planner_next makes both, in that order).
*/
#ifndef SRV_PLANNER_H_INCLUDED
#define SRV_PLANNER_H_INCLUDED

#include <cJSON.h>
#include <stdbool.h>

#include "nn_model.h"
#include "pl_config.h"
#include "proto_msg.h"
#include "srv_assign.h"

typedef struct _srv_planner_t srv_planner_t;

typedef struct {
    const pl_config_t *cfg;         //  borrowed; outlives the planner
    const nn_model_spec_t *spec;    //  borrowed
    pl_mode_t mode;
    int devices;
    int batch;
    int workers;                    //  the server's compute threads
} srv_planner_args_t;

//  A decision: the assignment to apply, each device's codecs (the
//  planner's choice for an "auto" direction, else the config's) and the
//  devices to tell (PLAN).
typedef struct {
    srv_assign_t next;
    pl_codecs_t codecs[SRV_MAX_DEVICES];
    bool tell[SRV_MAX_DEVICES];
} srv_planner_decision_t;

//  At setup, before the replicas are built: with "auto" in the config,
//  profiles this host and makes the provisional assignment (recorded in
//  summary_root's "plan"); otherwise the config's. *assign is filled. NULL
//  (logged) on failure.
srv_planner_t *srv_planner_new (const srv_planner_args_t *args, srv_assign_t *assign,
                                cJSON *summary_root);
void srv_planner_destroy (srv_planner_t **self_p);

//  The config said "auto" for the split point, N or a codec.
bool srv_planner_auto (const srv_planner_t *self);
//  N is "auto": any N that divides the batch may be planned.
bool srv_planner_auto_micro (const srv_planner_t *self);
//  A device joining now (before the start) should send a PROFILE.
bool srv_planner_profile_wanted (const srv_planner_t *self, bool started);
//  The largest PROBE payload: this server's frame limit (0: none).
void srv_planner_set_frame_limit (srv_planner_t *self, size_t max_frame_bytes);

//  Sessions: device id joined (a new device in the slot before the start),
//  or left (its probe is abandoned).
void srv_planner_on_join (srv_planner_t *self, int id, bool started);
void srv_planner_on_drop (srv_planner_t *self, int id);

//  PROFILE and PROBE answers from device id. 0 with *send_p the PROBE to
//  send it next (NULL: none); -1 with why filled when the message breaks
//  the protocol (the server drops the device).
int srv_planner_on_profile (srv_planner_t *self, int id, const proto_msg_t *msg,
                            bool started, int epoch, proto_msg_t **send_p, char *why,
                            size_t why_size);
int srv_planner_on_probe (srv_planner_t *self, int id, const proto_msg_t *msg, int epoch,
                          proto_msg_t **send_p, char *why, size_t why_size);
//  Training traffic: one ACTIVATIONS of device id arrived now.
void srv_planner_on_activations (srv_planner_t *self, int id, const proto_msg_t *msg);
//  A probe of device id has had no answer for timeout seconds: true with
//  why filled (the server drops it).
bool srv_planner_overdue (const srv_planner_t *self, int id, double timeout, char *why,
                          size_t why_size);

//  No probe is out to a device in joined (devices values).
bool srv_planner_settled (const srv_planner_t *self, const bool *joined);

//  Every device has joined, before the start: 1 with *out the assignment
//  to start with (every device told; summary_root's "plan" updated), 0
//  while profiles or probes are missing, -1 when the planner failed.
int srv_planner_start (srv_planner_t *self, const srv_assign_t *cur, cJSON *summary_root,
                       srv_planner_decision_t *out);

//  After an epoch's last aggregation, before the next epoch: with
//  adaptive planning, probes for the devices in active (devices values)
//  into probes[] (NULL for the others). true when any went out: the
//  server waits until srv_planner_settled, then calls srv_planner_next
//  with probed.
bool srv_planner_epoch_end (srv_planner_t *self, const bool *active, int epoch,
                            proto_msg_t **probes);
//  Before epoch begins, the plan that holds for it, chosen in this order
//  (the only place that order is kept): the re-plan of the epoch-end
//  probes when probed (they are in: a device whose link drifted by more
//  than replan_drift is re-planned); then the config's split_point_moves
//  for epoch on top of that (or of cur; a moved device is told when
//  active, each move recorded as a re-plan with its reason); then, when
//  either changed the plan, every device's codecs for it
//  (srv_planner_choose_codecs). 1 with *out the decision to apply; 0 when
//  cur holds unchanged (out->next is cur, no device told).
int srv_planner_next (srv_planner_t *self, const srv_assign_t *cur, const bool *active,
                      bool probed, int epoch, srv_planner_decision_t *out);
//  Device id's codecs into a summary.json device entry: codec_up,
//  codec_down, and codec_up_by / codec_down_by, "planner" for an "auto"
//  direction, else "config".
void srv_planner_codecs_json (const pl_config_t *cfg, int id, pl_codecs_t codecs, cJSON *o);
//  Epoch-end probes are out.
bool srv_planner_probing (const srv_planner_t *self);

//  Per-device link figures for the epoch's summary entry (then the
//  epoch's traffic samples are reset); micro is the device's N.
void srv_planner_epoch_json (srv_planner_t *self, int id, int micro, cJSON *device);
//  The epoch's re-plans (an array, ownership moves), or NULL.
cJSON *srv_planner_take_replans (srv_planner_t *self);

#endif
