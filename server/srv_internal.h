/*  srv_internal.h: the server's run state, private to the files that make
    up the reactor (srv_main.c, srv_setup.c, srv_session.c, srv_inbox.c,
    srv_step.c, srv_epoch.c, srv_parts.c, srv_timeline.c). The planner
    (srv_planner.c), the compute pool (srv_pool.c), the ROUTER's
    connection monitor (srv_monitor.c) and the pure parts
    (srv_round.c, srv_aggregate.c, srv_link.c, srv_assign.c) do not see it:
    each keeps its own state behind its own interface.

    Who calls whom (never back): srv_main -> srv_inbox, srv_step,
    srv_setup, srv_session, srv_timeline; srv_inbox -> srv_session,
    srv_timeline; srv_step -> srv_epoch, srv_parts, srv_session; srv_epoch
    -> srv_parts, srv_session, srv_timeline; srv_setup -> srv_parts,
    srv_session; srv_parts and srv_session call none of them.
*/
#ifndef SRV_INTERNAL_H_INCLUDED
#define SRV_INTERNAL_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "nn_dataset.h"
#include "nn_model.h"
#include "pl_config.h"
#include "pl_stop.h"
#include "pl_curve.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "proto_msg.h"
#include "srv_abuse.h"
#include "srv_aggregate.h"
#include "srv_assign.h"
#include "srv_bufpool.h"
#include "srv_monitor.h"
#include "srv_planner.h"
#include "srv_pool.h"
#include "srv_wire.h"

//  srv_metrics.h: the live HTTP view (NULL when --metrics is off).
typedef struct _srv_metrics_t srv_metrics_t;

//  Exit status of a run that stopped because training diverged (a
//  non-finite loss on every device left): not a crash, but no model either.
#define SRV_EXIT_DIVERGED 3
#define SRV_EVAL_BATCH  8
//  Device events kept per device and epoch; past it the rest is dropped
//  (with one warning), so a device cannot grow the server without bound.
#define SRV_MAX_EVENTS  (4 * PROTO_EVENTS_MAX)
#define SRV_CKPT_KEEP 3

//  A device slot. joined: a session exists (WELCOME sent). active: it takes
//  part in the current round; a device that (re)joins a running run is
//  joined but not active until the next aggregation point, when it gets
//  the current model. A dropped device loses its session; its slot can be
//  taken again by a device asking for that id.
typedef struct {
    bool joined;
    bool active;
    //  CURVE public key (Z85) of the slot's current or last session; ""
    //  with --insecure. One session per key (srv_session.c).
    char key[PL_CURVE_KEY_TEXT + 1];
    double last_seen;           //  pl_monotonic of its last message
    uint32_t params_iter;       //  iteration its last PARAMS closed
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len;
    //  Its connection's file descriptor (proto_peer_t.fd of its HELLO; -1:
    //  none, inproc): a routing id is one connection's, so this holds for
    //  the whole session. srv_session_transport marks the device closed
    //  when libzmq reports that connection closed.
    int fd;
    //  libzmq reported that connection closed (srv_session_transport);
    //  srv_session_drop_closed drops the device once the ROUTER holds
    //  nothing more, so what it sent before the close is read first.
    bool closed;
    //  Said it is ready (loaded its shard: a HEARTBEAT) before the run
    //  started: the first epoch's clock then starts with the run.
    bool ready;
    char name[PROTO_NAME_MAX + 1];      //  its HELLO's, for the log
    proto_state_t state;
    int replica;                //  its replica in the pool
    float *params;              //  last PARAMS slab (dev_wcount)
    bool params_in;
    uint64_t samples;           //  PARAMS sample_count (this epoch's last; 0 before one)
    //  Samples it trained this epoch as the server saw them, kept when it
    //  is dropped before the epoch closes: split modes, its ACTIVATIONS
    //  whose GRADIENTS went back; fl, the iterations of its accepted rounds
    //  times the batch size.
    uint64_t trained;
    proto_stats_t stats;
    bool stats_in;
    bool reported;              //  stats holds this session's STATS of the epoch
    size_t events_in;           //  device events kept this epoch
    bool events_capped;         //  warned about SRV_MAX_EVENTS this epoch
    int micro;                  //  N its session was last told (WELCOME, PLAN)
    //  To be dropped by the reactor loop (srv_session_drop_pending): a
    //  send to it failed, or its training diverged, while its caller may
    //  be walking the devices.
    bool drop_pending;
    bool drop_diverged;         //  the reason is a non-finite loss
    //  BN calibration (srv_calib.c): its server-side copy of units [P_i, U)
    //  (NULL in fl) and the mini-batch of activations being gathered for
    //  it, its part's buffers from its PARAMS, the micro-batches of
    //  ACTIVATIONS received, and whether its PARAMS came.
    nn_model_t *cal_model;
    float *cal_x;
    float *cal_buf;
    int cal_acts;
    bool cal_in;
    //  The split point it calibrated at (0: none since its last MODEL): it
    //  holds those weights, so its next MODEL carries the buffers alone.
    int cal_split;
    uint32_t drop_code;         //  ERROR code to send it (0: none, it cannot hear)
    char drop_why[160];
} srv_device_t;

typedef struct {
    //  The run's config, read-only once checked: what changes during a run
    //  (the split point, N) is the assignment below.
    const pl_config_t *cfg;
    pl_stop_t stop;             //  the signals' flags for this run (pl_stop.h)
    pl_mode_t mode;
    nn_model_spec_t spec;
    int units, batch, eval_batch;
    srv_agg_t agg;
    srv_assign_t assign;        //  written by srv_step.c (and at setup/resume) only
    zsock_t *router;
    void *rh;
    pl_curve_t *curve;          //  NULL with --insecure
    zpoller_t *poller;
    srv_monitor_t *monitor;     //  the ROUTER's connection events; NULL if unavailable
    proto_limits_t limits;
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    int devices, joined;
    srv_device_t dev[SRV_MAX_DEVICES];
    srv_abuse_t *abuse;
    srv_pool_t *pool;           //  NULL in fl
    srv_bufpool_t *bufpool;     //  the workers' GRADIENTS tensors (reused mappings)
    srv_planner_t *planner;
    //  The device part for each split point some device trains at (units
    //  0..P-1; fl: the whole model, at P = units), NULL at the others:
    //  devices at one split point share it (srv_parts_device). After
    //  FedAvg every part and every active replica holds the aggregate's
    //  values of its units.
    nn_model_t *part[NN_MAX_UNITS + 1];
    nn_model_t *full;           //  aggregated, merged, evaluated, saved
    nn_dataset_t *test;
    pl_summary_t *summary;
    pl_timeline_t *timeline;
    bool timeline_written;      //  timeline.csv has this run's header and rows
    bool timeline_pending;      //  the last write failed; its events are still held
    const char *results;
    bool started, done;
    bool replanning;            //  epoch-end probes out; the next epoch waits
    bool calibrating;           //  BN calibration out (srv_calib.h); the epoch's
                                //  evaluation waits
    double calib_start, calib_s;    //  when it began; what the last one took
    bool clock_wait;            //  epoch clock starts at the first ready device
    bool resumed;               //  epoch / round_iter came from a checkpoint
    int rc;
    int epoch;                  //  1-based
    int sl_turn;
    uint32_t round_iter;        //  iteration the current round starts at
    double round_start;         //  pl_monotonic when the current round began
    double last_join;           //  pl_monotonic of the last HELLO taken before the
                                //  start (the start waits SRV_START_SETTLE_S after it)
    double epoch_start;
    double loss_sum;            //  sum of micro-batch losses (scaled 1/N)
    long iterations, samples_seen, correct;
    double last_heartbeat;
    double last_progress;
    bool progress_shown;        //  a progress line is on the terminal
    bool tty;                   //  stdout is a terminal: show progress
    double origin;
    bool quiet;
    //  What every update is checked against (srv_inbox.c): each device's
    //  shard size and the iterations per epoch, computed from the training
    //  set's labels as the devices compute them. 0: unknown (the server
    //  could not read the training set; weaker bounds apply).
    int shard_size[SRV_MAX_DEVICES];
    int epoch_iterations;
    bool diverging;             //  the drop in progress is for divergence
    int diverged;               //  devices dropped for divergence so far
    srv_metrics_t *metrics;     //  --metrics, or NULL
    srv_wire_t *wire;           //  codecs and gradient encoders (srv_wire.h)
} srv_t;

#endif
