/*  srv_epoch.c: epoch records and final results. See srv_epoch.h. */
#include "srv_epoch.h"

#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_kernels.h"
#include "pl_log.h"
#include "srv_parts.h"
#include "srv_session.h"
#include "srv_timeline.h"

static void
s_evaluate (srv_t *self, double *loss, double *acc)
{
    int b = self->eval_batch;
    int *idx = nn_malloc (sizeof (int) * (size_t) b);
    int *y = nn_malloc (sizeof (int) * (size_t) b);
    size_t sample = nn_shape_size (nn_model_input_shape (self->full));
    float *x = nn_alloc_aligned (sizeof (float) * sample * (size_t) b);
    double total = 0.0;
    int correct = 0;
    const nn_dataset_t *test = self->test;
    for (int start = 0; start < test->count; start += b) {
        int n = test->count - start < b ? test->count - start : b;
        for (int i = 0; i < n; i++)
            idx[i] = start + i;
        nn_dataset_batch (x, y, test, idx, n, NULL, NULL);
        const float *out = nn_model_forward (self->full, x, n, false, NULL);
        total += (double) nn_softmax_xent (NULL, out, y, n, self->spec.classes, 1.0f,
                                           &correct) * n;
    }
    *loss = test->count ? total / test->count : 0.0;
    *acc = test->count ? (double) correct / test->count : 0.0;
    nn_free (idx);
    nn_free (y);
    nn_free (x);
}

//  The epoch's training loss and accuracy: the server's (split modes) or,
//  in fl, what the devices' STATS say.
static void
s_train_stats (const srv_t *self, pl_epoch_stats_t *st, long *samples_p)
{
    long samples = self->samples_seen;
    if (self->mode == PL_MODE_FL) {
        double loss = 0.0;
        uint64_t correct = 0, seen = 0;
        for (int i = 0; i < self->devices; i++) {
            samples += (long) self->dev[i].samples;
            loss += self->dev[i].stats.loss_sum;
            correct += self->dev[i].stats.correct;
            seen += self->dev[i].stats.samples;
        }
        st->train_loss = seen ? loss / (double) seen : 0.0;
        st->train_acc = seen ? (double) correct / (double) seen : 0.0;
    }
    else {
        st->train_loss = self->iterations ? self->loss_sum / self->iterations : 0.0;
        st->train_acc = samples ? (double) self->correct / samples : 0.0;
    }
    *samples_p = samples;
}

//  The epoch entry's "server" object; returns the workers' busy seconds.
static double
s_server_json (srv_t *self, cJSON *ej, double wall)
{
    cJSON *server = cJSON_AddObjectToObject (ej, "server");
    cJSON *per_worker = cJSON_CreateArray ();
    int workers = self->pool ? srv_pool_workers (self->pool) : 0;
    double busy_w[SRV_MAX_DEVICES];
    double busy = self->pool ? srv_pool_busy_s (self->pool, busy_w) : 0.0;
    for (int i = 0; i < workers; i++)
        cJSON_AddItemToArray (per_worker, cJSON_CreateNumber (busy_w[i]));
    cJSON_AddNumberToObject (server, "busy_s", busy);
    cJSON_AddItemToObject (server, "worker_busy_s", per_worker);
    double idle = wall * workers - busy;
    cJSON_AddNumberToObject (server, "idle_s", idle > 0 ? idle : 0.0);
    cJSON_AddNumberToObject (server, "workers", workers);
    return busy;
}

//  The epoch entry's "devices" array; the devices' epoch counters restart.
static void
s_devices_json (srv_t *self, cJSON *ej)
{
    cJSON *devs = cJSON_AddArrayToObject (ej, "devices");
    for (int i = 0; i < self->devices; i++) {
        const proto_stats_t *s = &self->dev[i].stats;
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddNumberToObject (o, "samples", (double) self->dev[i].samples);
        cJSON_AddNumberToObject (o, "forward_s", s->forward_s);
        cJSON_AddNumberToObject (o, "backward_s", s->backward_s);
        cJSON_AddNumberToObject (o, "update_s", s->update_s);
        cJSON_AddNumberToObject (o, "idle_s", s->idle_s);
        cJSON_AddNumberToObject (o, "bytes_up", (double) s->bytes_up);
        cJSON_AddNumberToObject (o, "bytes_down", (double) s->bytes_down);
        //  What its bytes crossed the split in, and the noise on its uploads.
        srv_planner_codecs_json (self->cfg, i, srv_wire_codecs (self->wire, i), o);
        nn_noise_t noise = pl_config_noise (self->cfg, i);
        cJSON *nj = cJSON_AddObjectToObject (o, "noise");
        cJSON_AddStringToObject (nj, "kind", nn_noise_name (noise.kind));
        cJSON_AddNumberToObject (nj, "scale", noise.scale);
        cJSON_AddBoolToObject (o, "active", self->dev[i].active);
        //  What it did before it left, when it left mid-epoch; and whether
        //  the times and bytes above are its own report (STATS) or the 0 of
        //  a device that never sent them.
        cJSON_AddNumberToObject (o, "trained_samples", (double) self->dev[i].trained);
        cJSON_AddBoolToObject (o, "reported", self->dev[i].reported);
        if (self->mode != PL_MODE_FL) {
            //  The split point it ran this epoch (a move takes effect after).
            cJSON_AddNumberToObject (o, "split_point", self->assign.split[i]);
            srv_planner_epoch_json (self->planner, i, self->assign.micro[i], o);
        }
        cJSON_AddItemToArray (devs, o);
        memset (&self->dev[i].stats, 0, sizeof self->dev[i].stats);
        self->dev[i].stats_in = self->dev[i].reported = false;
        self->dev[i].samples = self->dev[i].trained = 0;
        self->dev[i].events_in = 0;
        self->dev[i].events_capped = false;
    }
}

bool
srv_epoch_record (srv_t *self)
{
    double wall = pl_monotonic () - self->epoch_start;
    srv_parts_merge (self);
    pl_epoch_stats_t st = { .epoch = self->epoch, .wall_s = wall };
    long samples;
    s_train_stats (self, &st, &samples);
    st.images_per_s = wall > 0 ? samples / wall : 0.0;
    double t0 = pl_monotonic ();
    s_evaluate (self, &st.test_loss, &st.test_acc);
    st.eval_s = pl_monotonic () - t0;
    cJSON *ej = pl_summary_add_epoch (self->summary, &st);
    cJSON *replans = srv_planner_take_replans (self->planner);
    if (replans)
        cJSON_AddItemToObject (ej, "replanned_before", replans);
    double busy = s_server_json (self, ej, wall);
    s_devices_json (self, ej);
    //  Which split point and N each device ran this epoch (a re-plan takes
    //  effect between epochs; "assignment" at the top is the last one).
    cJSON_AddItemToObject (ej, "split_point",
                           cJSON_CreateIntArray (self->assign.split, self->devices));
    cJSON_AddItemToObject (ej, "micro_batches",
                           cJSON_CreateIntArray (self->assign.micro, self->devices));
    //  The BN calibration's share of wall_s (0 when none ran).
    cJSON_AddNumberToObject (ej, "calibration_s", self->calib_s);
    if (!self->quiet) {
        srv_timeline_progress_clear (self);
        if (self->epoch == 1)
            printf ("%5s %10s %10s %10s %10s %10s %8s %8s\n", "epoch", "loss", "train_acc",
                    "test_acc", "images/s", "wall_s", "eval_s", "busy_s");
        printf ("%5d %10.4f %9.2f%% %9.2f%% %10.0f %10.2f %8.2f %8.2f\n", self->epoch,
                st.train_loss, 100.0 * st.train_acc, 100.0 * st.test_acc, st.images_per_s,
                wall, st.eval_s, busy);
        fflush (stdout);
    }
    srv_timeline_flush (self);
    char err[NN_ERR_SIZE];
    bool summary_written = pl_summary_write (self->summary, self->results, err,
                                             sizeof err) == 0;
    if (!summary_written) {
        pl_log_error ("%s", err);
        self->rc = 1;
    }
    self->loss_sum = 0.0;
    self->iterations = self->samples_seen = self->correct = 0;
    return summary_written;
}

void
srv_epoch_finish (srv_t *self, bool summary_written)
{
    char err[NN_ERR_SIZE], path[1024];
    srv_timeline_flush (self);
    snprintf (path, sizeof path, "%s/model.ckpt", self->results);
    bool written = false;
    if (!srv_parts_finite (self)) {
        pl_log_error ("server: the final model holds non-finite weights; %s not written",
                      path);
        self->rc = 1;
    }
    else
    if (nn_checkpoint_save (path, self->full, false, err, sizeof err)) {
        pl_log_error ("%s", err);
        self->rc = 1;
    }
    else
        written = true;
    //  Then the point after the last epoch, which tells --resume the run is
    //  done: only once model.ckpt and summary.json are written. Without it
    //  the newest checkpoint is the last round's, and --resume runs that
    //  again and writes the results (exit 1 here says so).
    if (written && summary_written) {
        self->epoch = self->cfg->epochs + 1;
        self->round_iter = 0;
        srv_parts_checkpoint (self);
        self->epoch = self->cfg->epochs;
    }
    else
        pl_log_error ("server: the results are incomplete; the run is not marked complete "
                      "(--resume runs its last round again)");
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].joined) {
            proto_msg_t *bye = proto_msg_new (PROTO_MSG_BYE);
            srv_send (self, &self->dev[i], &bye);
            self->dev[i].joined = false;
        }
    self->done = true;
}
