/*  srv_metrics_render.c: a copy of the metrics' state as Prometheus text
    and as the dashboard's JSON. Runs on the HTTP thread, on its own copy.
    See srv_metrics_state.h. */
#include "srv_metrics_state.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"

typedef struct {
    char *data;
    size_t len, cap;
} s_buf_t;

static void __attribute__ ((format (printf, 2, 3)))
s_put (s_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start (ap, fmt);
        int n = vsnprintf (b->data + b->len, b->cap - b->len, fmt, ap);
        va_end (ap);
        if (n >= 0 && (size_t) n < b->cap - b->len) {
            b->len += (size_t) n;
            return;
        }
        b->cap = 2 * b->cap + (n > 0 ? (size_t) n : 0);
        b->data = nn_realloc (b->data, b->cap);
    }
}

static void
s_head (s_buf_t *b, const char *name, const char *type, const char *help)
{
    s_put (b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  A sample value: Prometheus text takes NaN and +Inf as words.
static void
s_val (s_buf_t *b, double v)
{
    if (isnan (v))
        s_put (b, " NaN\n");
    else
    if (isinf (v))
        s_put (b, v > 0 ? " +Inf\n" : " -Inf\n");
    else
        s_put (b, " %.17g\n", v);
}

static void
s_gauge (s_buf_t *b, const char *name, const char *type, const char *help, double v)
{
    s_head (b, name, type, help);
    s_put (b, "%s", name);
    s_val (b, v);
}

//  One sample per device of the value at offset off in srv_metrics_device_t.
static void
s_per_device (s_buf_t *b, const srv_metrics_state_t *st, const char *name, const char *type,
              const char *help, size_t off)
{
    s_head (b, name, type, help);
    for (int i = 0; i < st->devices; i++) {
        double v = *(const double *) ((const char *) &st->dev[i] + off);
        s_put (b, "%s{device=\"%d\"}", name, i);
        s_val (b, v);
    }
}

//  Label values are ours (config names, checked by pl_config) but are
//  escaped anyway, as the format asks.
static void
s_label (s_buf_t *b, const char *key, const char *value, bool last)
{
    s_put (b, "%s=\"", key);
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            s_put (b, "\\%c", *p);
        else
        if (*p == '\n')
            s_put (b, "\\n");
        else
            s_put (b, "%c", *p);
    }
    s_put (b, "\"%s", last ? "" : ",");
}

char *
srv_metrics_render_text (const srv_metrics_state_t *st, const srv_metrics_process_t *process,
                         size_t *len)
{
    s_buf_t b = { nn_malloc (16384), 0, 16384 };
    const srv_metrics_process_t p = *process;
    s_head (&b, "pipelearn_run_info", "gauge",
            "The run's configuration as labels; the value is 1.");
    s_put (&b, "pipelearn_run_info{");
    s_label (&b, "mode", st->mode, false);
    s_label (&b, "model", st->model, false);
    s_label (&b, "dataset", st->dataset, false);
    s_label (&b, "aggregation", st->aggregation, false);
    s_label (&b, "codec", "float32", false);
    s_label (&b, "results_dir", st->results, true);
    s_put (&b, "} 1\n");
    s_gauge (&b, "pipelearn_split_point", "gauge",
             "Device 0's split point: the run's when every device has the same one "
             "(each device's: pipelearn_device_split_point).", st->split);
    s_gauge (&b, "pipelearn_batch_size", "gauge", "Samples per iteration and device.",
             st->batch);
    s_gauge (&b, "pipelearn_devices", "gauge", "Devices the run is configured for.",
             st->devices);
    s_gauge (&b, "pipelearn_devices_joined", "gauge", "Devices with a session now.",
             st->joined);
    s_gauge (&b, "pipelearn_server_workers", "gauge", "Server compute worker threads.",
             st->workers);
    s_gauge (&b, "pipelearn_training_started", "gauge",
             "1 once every device joined and training began.", st->started);
    s_gauge (&b, "pipelearn_epochs", "gauge", "Epochs the run is configured for.",
             st->epochs);
    s_gauge (&b, "pipelearn_epoch", "gauge", "The epoch in progress (1-based; 0 before).",
             st->epoch);
    s_gauge (&b, "pipelearn_epochs_completed_total", "counter", "Epochs completed.",
             st->last_summary_epoch);
    s_gauge (&b, "pipelearn_epoch_iterations", "gauge",
             "Iterations per device and epoch (0: unknown).", st->epoch_iterations);
    s_gauge (&b, "pipelearn_epoch_iterations_done", "gauge",
             "Iterations completed in the current epoch, summed over the devices.",
             (double) st->iterations);
    s_gauge (&b, "pipelearn_epoch_elapsed_seconds", "gauge",
             "Training time of the current epoch so far.", st->epoch_elapsed_s);
    s_gauge (&b, "pipelearn_epoch_running_train_loss", "gauge",
             "Mean training loss of the current epoch so far (server side).",
             st->iterations ? st->loss_sum / (double) st->iterations : NAN);
    const srv_metrics_epoch_t *last = st->epochs_count ? &st->ep[st->epochs_count - 1] : NULL;
    s_gauge (&b, "pipelearn_train_loss", "gauge", "Training loss of the last epoch.",
             last ? last->train_loss : NAN);
    s_gauge (&b, "pipelearn_train_accuracy_ratio", "gauge",
             "Training accuracy of the last epoch (0..1).", last ? last->train_acc : NAN);
    s_gauge (&b, "pipelearn_test_loss", "gauge", "Test loss after the last epoch.",
             last ? last->test_loss : NAN);
    s_gauge (&b, "pipelearn_test_accuracy_ratio", "gauge",
             "Test accuracy after the last epoch (0..1).", last ? last->test_acc : NAN);
    s_gauge (&b, "pipelearn_epoch_duration_seconds", "gauge",
             "Training wall time of the last epoch (evaluation excluded).",
             last ? last->wall_s : NAN);
    s_gauge (&b, "pipelearn_images_per_second", "gauge",
             "Training throughput of the last epoch.", last ? last->images_per_s : NAN);
    s_gauge (&b, "pipelearn_server_busy_seconds_total", "counter",
             "Server worker time spent computing, summed over the workers.",
             st->busy_total_s);
    s_gauge (&b, "pipelearn_server_idle_seconds_total", "counter",
             "Server worker time idle (epoch wall time x workers - busy).",
             st->idle_total_s);
    int workers = st->workers < SRV_METRICS_WORKERS ? st->workers : SRV_METRICS_WORKERS;
    s_head (&b, "pipelearn_server_worker_busy_seconds_total", "counter",
            "Time a server worker thread spent computing (completed epochs).");
    for (int w = 0; w < workers; w++)
        s_put (&b, "pipelearn_server_worker_busy_seconds_total{worker=\"%d\"} %.6f\n", w,
               st->worker_busy_total_s[w]);
    s_head (&b, "pipelearn_server_worker_idle_seconds_total", "counter",
            "Time a server worker thread stood idle (completed epochs).");
    for (int w = 0; w < workers; w++)
        s_put (&b, "pipelearn_server_worker_idle_seconds_total{worker=\"%d\"} %.6f\n", w,
               st->worker_idle_total_s[w]);
    s_head (&b, "pipelearn_device_joined", "gauge", "1 while the device has a session.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_joined{device=\"%d\"} %d\n", i, st->dev[i].joined);
    s_head (&b, "pipelearn_device_split_point", "gauge",
            "Units of the model on the device (its split point; fl: all of them).");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_split_point{device=\"%d\"} %d\n", i, st->dev[i].split);
    s_head (&b, "pipelearn_device_micro_batches", "gauge",
            "Micro-batches per iteration in the device's plan.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_micro_batches{device=\"%d\"} %d\n", i, st->dev[i].micro);
    s_head (&b, "pipelearn_device_queue_depth", "gauge",
            "The device's micro-batches at the server: queued plus in compute.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_queue_depth{device=\"%d\"} %d\n", i, st->dev[i].queue);
    s_head (&b, "pipelearn_device_iteration", "gauge",
            "Newest iteration (of the newest epoch) the server sent gradients for.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_iteration{device=\"%d\"} %d\n", i,
               st->dev[i].last_iteration);
#define S_DEV(name, type, help, field) \
    s_per_device (&b, st, name, type, help, offsetof (srv_metrics_device_t, field))
    S_DEV ("pipelearn_device_forward_seconds_total", "counter",
           "Device time in forward passes (completed epochs).", forward_total_s);
    S_DEV ("pipelearn_device_backward_seconds_total", "counter",
           "Device time in backward passes (completed epochs).", backward_total_s);
    S_DEV ("pipelearn_device_update_seconds_total", "counter",
           "Device time in optimiser steps (completed epochs).", update_total_s);
    S_DEV ("pipelearn_device_idle_seconds_total", "counter",
           "Device time waiting for the server (completed epochs).", idle_total_s);
    S_DEV ("pipelearn_device_uplink_bytes_total", "counter",
           "Bytes the device sent (completed epochs).", bytes_up_total);
    S_DEV ("pipelearn_device_downlink_bytes_total", "counter",
           "Bytes the device received (completed epochs).", bytes_down_total);
    S_DEV ("pipelearn_device_rtt_seconds", "gauge",
           "Round-trip time of the last link measurement (0: none).", rtt_s);
    S_DEV ("pipelearn_device_uplink_bytes_per_second", "gauge",
           "Uplink rate of the last link measurement (0: none).", up_Bps);
    S_DEV ("pipelearn_device_downlink_bytes_per_second", "gauge",
           "Downlink rate of the last link measurement (0: none).", down_Bps);
    S_DEV ("pipelearn_device_uplink_traffic_bytes_per_second", "gauge",
           "Uplink rate estimated from the last epoch's training traffic (0: none).",
           traffic_up_Bps);
    S_DEV ("pipelearn_device_drops_total", "counter",
           "Times the device was dropped from the run.", drops);
    S_DEV ("pipelearn_device_rejoins_total", "counter",
           "Times the device rejoined a running run.", rejoins);
#undef S_DEV
    static const char *reasons[SRV_REFUSED_KINDS] = { "malformed", "hello", "curve" };
    s_head (&b, "pipelearn_refused_peers_total", "counter",
            "Peers refused: malformed messages, refused HELLOs, failed CURVE handshakes.");
    for (int i = 0; i < SRV_REFUSED_KINDS; i++)
        s_put (&b, "pipelearn_refused_peers_total{reason=\"%s\"} %.17g\n", reasons[i],
               st->refused[i]);
    s_gauge (&b, "pipelearn_checkpoint_age_seconds", "gauge",
             "Seconds since the newest checkpoint was written (NaN: none).", p.ckpt_age_s);
    s_gauge (&b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
             p.rss_bytes);
    s_gauge (&b, "process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.", p.cpu_s);
    s_gauge (&b, "process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.", p.start_wall);
    *len = b.len;
    return b.data;
}

static cJSON *
s_num_or_null (double v)
{
    return isfinite (v) ? cJSON_CreateNumber (v) : cJSON_CreateNull ();
}

char *
srv_metrics_render_json (const srv_metrics_state_t *st, const srv_metrics_process_t *process,
                         size_t *len)
{
    const srv_metrics_process_t p = *process;
    cJSON *root = cJSON_CreateObject ();
    cJSON *run = cJSON_AddObjectToObject (root, "run");
    cJSON_AddStringToObject (run, "mode", st->mode);
    cJSON_AddStringToObject (run, "model", st->model);
    cJSON_AddStringToObject (run, "dataset", st->dataset);
    cJSON_AddStringToObject (run, "results_dir", st->results);
    cJSON_AddNumberToObject (run, "devices", st->devices);
    cJSON_AddNumberToObject (run, "joined", st->joined);
    cJSON_AddNumberToObject (run, "epochs", st->epochs);
    cJSON_AddNumberToObject (run, "batch_size", st->batch);
    cJSON_AddNumberToObject (run, "split_point", st->split);
    cJSON_AddNumberToObject (run, "workers", st->workers);
    cJSON_AddBoolToObject (run, "started", st->started);
    cJSON_AddBoolToObject (run, "done", st->done);
    cJSON_AddNumberToObject (run, "epoch", st->epoch);
    cJSON_AddNumberToObject (run, "epochs_completed", st->last_summary_epoch);
    cJSON_AddNumberToObject (run, "iterations_done", (double) st->iterations);
    cJSON_AddNumberToObject (run, "epoch_iterations", st->epoch_iterations);
    cJSON_AddNumberToObject (run, "epoch_elapsed_s", st->epoch_elapsed_s);
    cJSON_AddNumberToObject (run, "now_s", pl_wall_clock () - st->origin);
    cJSON_AddItemToObject (run, "running_train_loss",
                           s_num_or_null (st->iterations ? st->loss_sum / st->iterations
                                                         : NAN));
    cJSON_AddItemToObject (run, "running_train_acc",
                           s_num_or_null (st->samples > 0 ? st->correct / st->samples : NAN));
    cJSON *eps = cJSON_AddArrayToObject (root, "epochs");
    for (int i = 0; i < st->epochs_count; i++) {
        const srv_metrics_epoch_t *e = &st->ep[i];
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "epoch", e->epoch);
        cJSON_AddItemToObject (o, "wall_s", s_num_or_null (e->wall_s));
        cJSON_AddItemToObject (o, "train_loss", s_num_or_null (e->train_loss));
        cJSON_AddItemToObject (o, "train_acc", s_num_or_null (e->train_acc));
        cJSON_AddItemToObject (o, "test_loss", s_num_or_null (e->test_loss));
        cJSON_AddItemToObject (o, "test_acc", s_num_or_null (e->test_acc));
        cJSON_AddItemToObject (o, "images_per_s", s_num_or_null (e->images_per_s));
        cJSON_AddItemToObject (o, "server_busy_s", s_num_or_null (e->busy_s));
        cJSON_AddItemToObject (o, "server_idle_s", s_num_or_null (e->idle_s));
        cJSON_AddItemToArray (eps, o);
    }
    cJSON *devs = cJSON_AddArrayToObject (root, "devices");
    for (int i = 0; i < st->devices; i++) {
        const srv_metrics_device_t *d = &st->dev[i];
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddBoolToObject (o, "joined", d->joined);
        cJSON_AddBoolToObject (o, "active", d->active);
        cJSON_AddNumberToObject (o, "split_point", d->split);
        cJSON_AddNumberToObject (o, "micro_batches", d->micro);
        cJSON_AddNumberToObject (o, "queue_depth", d->queue);
        cJSON_AddNumberToObject (o, "epoch", d->last_epoch);
        cJSON_AddNumberToObject (o, "iteration", d->last_iteration);
        cJSON_AddNumberToObject (o, "forward_s", d->forward_s);
        cJSON_AddNumberToObject (o, "backward_s", d->backward_s);
        cJSON_AddNumberToObject (o, "update_s", d->update_s);
        cJSON_AddNumberToObject (o, "idle_s", d->idle_s);
        cJSON_AddNumberToObject (o, "bytes_up_total", d->bytes_up_total);
        cJSON_AddNumberToObject (o, "bytes_down_total", d->bytes_down_total);
        cJSON_AddNumberToObject (o, "rtt_ms", d->rtt_s * 1000.0);
        cJSON_AddNumberToObject (o, "uplink_mbps", d->up_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "downlink_mbps", d->down_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "uplink_traffic_mbps", d->traffic_up_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "drops", d->drops);
        cJSON_AddNumberToObject (o, "rejoins", d->rejoins);
        cJSON_AddItemToArray (devs, o);
    }
    cJSON *ref = cJSON_AddObjectToObject (root, "refused");
    cJSON_AddNumberToObject (ref, "malformed", st->refused[SRV_REFUSED_MALFORMED]);
    cJSON_AddNumberToObject (ref, "hello", st->refused[SRV_REFUSED_HELLO]);
    cJSON_AddNumberToObject (ref, "curve", st->refused[SRV_REFUSED_CURVE]);
    cJSON *proc = cJSON_AddObjectToObject (root, "process");
    cJSON_AddItemToObject (proc, "rss_bytes", s_num_or_null (p.rss_bytes));
    cJSON_AddNumberToObject (proc, "cpu_s", p.cpu_s);
    cJSON_AddItemToObject (proc, "checkpoint_age_s", s_num_or_null (p.ckpt_age_s));
    //  Gantt: rows of [stage, epoch, iteration, micro_batch, start_s, end_s].
    cJSON *g = cJSON_AddObjectToObject (root, "gantt");
    cJSON *stages = cJSON_AddArrayToObject (g, "stages");
    for (int i = 0; i < st->stages; i++)
        cJSON_AddItemToArray (stages, cJSON_CreateString (st->stage[i]));
    cJSON *rows = cJSON_AddArrayToObject (g, "rows");
    for (int r = 0; r < st->rows; r++) {
        const srv_metrics_ring_t *ring = &st->row[r];
        if (!ring->count)
            continue;
        char who[32];
        int d = r / 3;
        if (r == 3 * st->devices)
            snprintf (who, sizeof who, "server");
        else
            snprintf (who, sizeof who, r % 3 == 0 ? "device%d" : r % 3 == 1 ? "server:d%d"
                                                                           : "link:d%d", d);
        cJSON *row = cJSON_CreateObject ();
        cJSON_AddStringToObject (row, "who", who);
        cJSON *evs = cJSON_AddArrayToObject (row, "events");
        int first = (ring->next - ring->count + SRV_METRICS_RING) % SRV_METRICS_RING;
        for (int k = 0; k < ring->count; k++) {
            const srv_metrics_event_t *e = &ring->ev[(first + k) % SRV_METRICS_RING];
            double v[6] = { e->stage, e->epoch, e->iteration, e->micro, e->start, e->end };
            cJSON_AddItemToArray (evs, cJSON_CreateDoubleArray (v, 6));
        }
        cJSON_AddItemToArray (rows, row);
    }
    char *text = cJSON_PrintUnformatted (root);
    cJSON_Delete (root);
    if (!text)              //  cJSON out of memory: as nn_malloc would, abort
        abort ();
    *len = strlen (text);
    return text;
}
