/*  srv_state.h: the server's state, shared by srv_main.c (the reactor,
    rounds, aggregation) and srv_plan.c (profiles, probes, planning).
    Internal to server/.
*/
#ifndef SRV_STATE_H_INCLUDED
#define SRV_STATE_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "nn_dataset.h"
#include "nn_model.h"
#include "nn_plan.h"
#include "pl_config.h"
#include "pl_curve.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "proto_msg.h"
#include "srv_bufpool.h"

//  srv_metrics.h: the live HTTP view (NULL when --metrics is off).
typedef struct _srv_metrics_t srv_metrics_t;

#define SRV_MAX_DEVICES 64
//  Exit status of a run that stopped because training diverged (a
//  non-finite loss on every device left): not a crash, but no model either.
#define SRV_EXIT_DIVERGED 3
#define SRV_EVAL_BATCH  8
//  Device events kept per device and epoch; past it the rest is dropped
//  (with one warning), so a device cannot grow the server without bound.
#define SRV_MAX_EVENTS  (4 * PROTO_EVENTS_MAX)

//  A device's link measurement in progress (srv_plan.c): one PROBE
//  outstanding at a time; pings for the RTT, then timed transfers down and
//  up of growing size.
typedef struct {
    int step;                   //  SRV_PROBE_* (srv_plan.c)
    uint32_t id;                //  outstanding probe_id
    uint32_t expect;            //  payload bytes its answer must carry
    double sent;                //  pl_monotonic when it went out
    size_t size;                //  transfer size of the current step
    int pings;
    double rtt_s, down_Bps, up_Bps;
} srv_probe_t;

//  Planning state of a device slot; it outlives the slot's sessions.
typedef struct {
    int micro;                  //  N the slot's plan gives (1 outside pipelearn)
    bool profiled;              //  costs came from its PROFILE
    nn_plan_costs_t costs;
    srv_probe_t probe;
    bool measured;              //  rtt/up/down hold a finished measurement
    double rtt_s, up_Bps, down_Bps;     //  the last measurement
    double plan_up_Bps, plan_down_Bps;  //  the link its current plan assumed
    double est_iteration_s;     //  the current plan's estimate for it
    //  Training traffic: spacing of consecutive ACTIVATIONS of one iteration.
    double act_t;
    uint32_t act_epoch, act_iter, act_mb;
    bool act_valid;
    double rates[64];           //  bytes/s samples this epoch (ring)
    int rates_count;
    double traffic_up_Bps;      //  last epoch's estimate (0: none)
} srv_slot_t;

typedef struct {
    bool auto_split, auto_micro;    //  the config said "auto"
    bool measure;                   //  devices profile and are probed (measure_link)
    bool probing;                   //  epoch-end probes in progress
    nn_plan_costs_t server;         //  this host, one worker thread
    nn_plan_model_t model;          //  transfer sizes at batch B
    int iterations;                 //  per epoch, for the estimates
    double host_copy_Bps;           //  host_cores > 0: loopback bytes per core-second
    srv_slot_t slot[SRV_MAX_DEVICES];
    cJSON *replans;                 //  this epoch's re-plans (summary), or NULL
} srv_planner_t;

#define SRV_ABUSE_SLOTS    64
#define SRV_ABUSE_LIMIT    32          //  ERRORs per window before a block
#define SRV_ABUSE_WINDOW_S 10.0
#define SRV_ABUSE_BLOCK_S  30.0

typedef struct {
    char addr[64];              //  "" = free slot
    double window_start;
    int count;
    double blocked_until;
} srv_abuse_t;

//  A device slot. joined: a session exists (WELCOME sent). active: it takes
//  part in the current round; a device that (re)joins a running run is
//  joined but not active until the next aggregation point, when it gets
//  the current model. A dropped device loses its session; its slot can be
//  taken again by a device asking for that id.
typedef struct {
    bool joined;
    bool active;
    //  CURVE public key (Z85) of the slot's current or last session; ""
    //  with --insecure. One session per key (s_slot_for in srv_main.c).
    char key[PL_CURVE_KEY_TEXT + 1];
    double last_seen;           //  pl_monotonic of its last message
    uint32_t params_iter;       //  iteration its last PARAMS closed
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len;
    proto_state_t state;
    int replica;                //  index into srv_t.rep
    float *params;              //  last PARAMS slab (weights_count)
    bool params_in;
    uint64_t samples;           //  PARAMS sample_count
    proto_stats_t stats;
    bool stats_in;
    size_t events_in;           //  device events kept this epoch
    bool events_capped;         //  warned about SRV_MAX_EVENTS this epoch
    int micro;                  //  N of its session's plan (pipelearn; 1 otherwise)
    //  To be dropped once the current handler returns (s_drop_pending): a
    //  send to it failed, or its training diverged. srv_send and the worker
    //  path cannot drop it themselves: their callers may be walking the
    //  devices or closing a round.
    bool drop_pending;
    bool drop_diverged;         //  the reason is a non-finite loss
    uint32_t drop_code;         //  ERROR code to send it (0: none, it cannot hear)
    char drop_why[160];
} srv_device_t;

//  A server-side replica and the ACTIVATIONS waiting for it. busy: lent to
//  a worker; the reactor does not touch model until the worker replies.
typedef struct {
    nn_model_t *model;          //  owns the slabs; built for batch 1
    zlist_t *queue;             //  proto_msg_t * (ACTIVATIONS), oldest first
    bool busy;
} srv_replica_t;

typedef struct {
    pl_config_t cfg;
    proto_mode_t mode;
    nn_model_spec_t spec;
    int units, split, micro, batch, eval_batch;
    zsock_t *router;
    void *rh;
    pl_curve_t *curve;          //  NULL with --insecure
    zpoller_t *poller;
    proto_limits_t limits;
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    int devices, joined;
    srv_device_t dev[SRV_MAX_DEVICES];
    srv_abuse_t abuse[SRV_ABUSE_SLOTS];
    srv_replica_t rep[SRV_MAX_DEVICES];
    int replicas_count;
    int worker_batch;           //  micro-batch size the workers are built for
    int rr;                     //  replica the next dispatch scan starts at
    zactor_t *workers[SRV_MAX_DEVICES];
    srv_bufpool_t *bufpool;     //  the workers' GRADIENTS tensors (reused mappings)
    int worker_rep[SRV_MAX_DEVICES];    //  replica a worker is training, -1 idle
    int workers_count;
    nn_model_t *devpart;        //  current device part (fl: the whole model)
    nn_model_t *full;           //  merged, evaluated, saved
    size_t dev_wcount, srv_wcount;
    nn_dataset_t *test;
    pl_summary_t *summary;
    pl_timeline_t *timeline;
    bool timeline_written;      //  timeline.csv has this run's header and rows
    bool timeline_pending;      //  the last write failed; its events are still held
    const char *results;
    bool started, done;
    bool clock_wait;            //  epoch clock starts at the first ready device
    bool resumed;               //  epoch / round_iter came from a checkpoint
    int rc;
    int epoch;                  //  1-based
    int sl_turn;
    uint32_t round_iter;        //  iteration the current round starts at
    double round_start;         //  pl_monotonic when the current round began
    double epoch_start;
    double loss_sum;            //  sum of micro-batch losses (scaled 1/N)
    long iterations, samples_seen, correct;
    double last_heartbeat;
    double last_progress;
    bool progress_shown;        //  a progress line is on the terminal
    bool tty;                   //  stdout is a terminal: show progress
    double origin;
    bool quiet;
    srv_planner_t plan;         //  srv_plan.c
    //  What every update is checked against (s_params_check): each device's
    //  shard size and the iterations per epoch, computed from the training
    //  set's labels as the devices compute them. 0: unknown (the server
    //  could not read the training set; weaker bounds apply).
    int shard_size[SRV_MAX_DEVICES];
    int epoch_iterations;
    bool diverging;             //  the drop in progress is for divergence
    int diverged;               //  devices dropped for divergence so far
    srv_metrics_t *metrics;     //  --metrics, or NULL
} srv_t;

//  srv_main.c, for srv_plan.c.
void srv_send (srv_t *self, srv_device_t *d, proto_msg_t **msg_p);
void srv_drop (srv_t *self, srv_device_t *d, uint32_t code, const char *why);
void srv_start (srv_t *self);
//  The rest of an epoch end once the re-plan is done: pending devices,
//  checkpoint, next round.
void srv_epoch_continue (srv_t *self);
//  Move the split to P at an aggregation point (or before the start): the
//  merged model is cut again, replicas and workers rebuilt. 0 or -1.
int srv_resplit (srv_t *self, int split_point);
//  Restart the workers sized for the largest micro-batch of the current
//  plans (after a re-plan lowered some device's N). 0 or -1.
int srv_workers_restart (srv_t *self);
//  The micro-batch size the workers and limits must take: B / smallest N.
int srv_max_micro_batch (const srv_t *self);
//  Compute workers for the run: one per core (config threads), at most
//  one per replica.
int srv_workers_for (const srv_t *self);

#endif
