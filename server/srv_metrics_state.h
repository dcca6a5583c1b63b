/*  srv_metrics_state.h: private to srv_metrics*.c. The state the metrics
    serve, as a plain value the reactor fills and the HTTP thread copies
    whole, and the two renderings of a copy (srv_metrics_render.c).
*/
#ifndef SRV_METRICS_STATE_H_INCLUDED
#define SRV_METRICS_STATE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "srv_metrics.h"

#define SRV_METRICS_RING          96      //  Gantt events kept per row
#define SRV_METRICS_EPOCHS        256     //  epochs kept for the curves (the newest)
#define SRV_METRICS_STAGES        16
#define SRV_METRICS_WORKERS       64      //  server workers with their own busy/idle series
#define SRV_METRICS_PENDING       64      //  uplinks waiting for their downlink, per device

typedef struct {
    double start, end;          //  seconds since the run's origin
    int32_t epoch, iteration, micro;
    int32_t stage;              //  index into srv_metrics_state_t.stage
} srv_metrics_event_t;

typedef struct {
    srv_metrics_event_t ev[SRV_METRICS_RING];
    int next, count;
} srv_metrics_ring_t;

typedef struct {
    bool joined, active;
    int split, micro, queue;
    //  The newest epoch's figures (summary) and their sums over the run.
    double forward_s, backward_s, update_s, idle_s;
    double forward_total_s, backward_total_s, update_total_s, idle_total_s;
    double bytes_up_total, bytes_down_total;
    //  Link: the last probe (rtt 0 = none) and the training traffic estimate.
    double rtt_s, up_Bps, down_Bps, traffic_up_Bps;     //  bytes/s
    double drops, rejoins;
    int32_t last_epoch, last_iteration;     //  newest the server sent gradients for
    struct { int32_t epoch, iteration, micro; double t; } pending[SRV_METRICS_PENDING];
} srv_metrics_device_t;

typedef struct {
    int32_t epoch;
    double wall_s, eval_s, train_loss, train_acc, test_loss, test_acc, images_per_s;
    double busy_s, idle_s;
} srv_metrics_epoch_t;

//  Everything served; a plain value, copied whole (its size is fixed at
//  creation by the device count).
typedef struct {
    char mode[16], model[32], dataset[32], aggregation[16], results[64];
    int devices, epochs, batch, split, workers, joined;
    bool started, done;
    int epoch;                  //  1-based; 0 before training
    long iterations;            //  completed this epoch (all devices)
    int epoch_iterations;       //  per device and epoch (0: unknown)
    double loss_sum, correct, samples;      //  this epoch so far
    double epoch_elapsed_s;
    double origin;              //  wall clock of time 0
    double busy_total_s, idle_total_s;
    //  Per worker thread (the first SRV_METRICS_WORKERS): busy over completed epochs,
    //  and idle = their wall time - busy.
    double worker_busy_total_s[SRV_METRICS_WORKERS], worker_idle_total_s[SRV_METRICS_WORKERS];
    double refused[SRV_REFUSED_KINDS];
    int last_summary_epoch;     //  epochs up to this one are counted
    int epochs_count;
    srv_metrics_epoch_t ep[SRV_METRICS_EPOCHS];
    char stage[SRV_METRICS_STAGES][16];
    int stages;
    srv_metrics_device_t dev[SRV_MAX_DEVICES];
    //  Gantt rows: 3 per device (device i, server:d i compute, and
    //  "in server" from ACTIVATIONS arrival to GRADIENTS leaving, live),
    //  then one "server" row (sl: the shared replica's compute).
    int rows;
    srv_metrics_ring_t row[];
} srv_metrics_state_t;

//  What the process costs at a request (srv_metrics.c reads it).
typedef struct {
    double rss_bytes, cpu_s, ckpt_age_s;
    double start_wall;          //  process start (pl_wall_clock)
} srv_metrics_process_t;

//  A copy of the state as Prometheus text 0.0.4 (GET /metrics) or as the
//  dashboard's JSON (GET /api/state.json): a NUL-terminated buffer
//  (nn_malloc, the caller frees it) of *len bytes.
char *srv_metrics_render_text (const srv_metrics_state_t *st, const srv_metrics_process_t *process,
                               size_t *len);
char *srv_metrics_render_json (const srv_metrics_state_t *st, const srv_metrics_process_t *process,
                               size_t *len);

#endif
