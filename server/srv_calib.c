/*  srv_calib.c: re-estimating BN statistics after an epoch. See
    srv_calib.h. */
#include "srv_calib.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_optim.h"
#include "pl_log.h"
#include "srv_aggregate.h"
#include "srv_parts.h"
#include "srv_session.h"

bool
srv_calib_wanted (const srv_t *self)
{
    return self->cfg->bn_calibration_batches > 0 && nn_model_has_bn (self->full);
}

void
srv_calib_release (srv_device_t *d)
{
    nn_model_destroy (&d->cal_model);
    nn_free (d->cal_buf);
    nn_free (d->cal_x);
    d->cal_buf = NULL;
    d->cal_x = NULL;
    d->cal_acts = 0;
    d->cal_in = false;
}

//  Buffer floats of device id's part: what its calibration PARAMS holds.
static size_t
s_part_buffers (srv_t *self, int id)
{
    const nn_model_t *part = srv_parts_device (self, id);
    return nn_model_weights_count (part) - nn_model_params_count (part);
}

//  Micro-batches a device sends up in its calibration (split modes).
static int
s_expected_acts (const srv_t *self, const srv_device_t *d)
{
    if (self->mode == PL_MODE_FL)
        return 0;
    return self->cfg->bn_calibration_batches * d->micro;
}

bool
srv_calib_begin (srv_t *self)
{
    if (!srv_calib_wanted (self))
        return false;
    char err[NN_ERR_SIZE];
    for (int i = 0; i < self->devices; i++) {
        srv_device_t *d = &self->dev[i];
        srv_calib_release (d);
        if (!d->active)
            continue;
        int p = srv_parts_split (self, i);
        d->cal_split = p;
        d->cal_buf = nn_malloc (sizeof (float) * (s_part_buffers (self, i) + 1));
        if (p < self->units) {
            d->cal_model = nn_model_new (&self->spec, p, self->units, self->batch,
                                         err, sizeof err);
            if (!d->cal_model) {
                pl_log_error ("server: BN calibration skipped: %s", err);
                for (int k = 0; k < self->devices; k++) {
                    srv_calib_release (&self->dev[k]);
                    self->dev[k].cal_split = 0;     //  no calibration MODEL went out
                }
                return false;
            }
            nn_model_copy_tensors (d->cal_model, self->full);
            d->cal_x = nn_alloc_aligned (sizeof (float) * (size_t) self->batch
                                         * nn_shape_size (nn_model_input_shape (d->cal_model)));
        }
    }
    //  The calibration is a round of its own: round_timeout_s from now.
    self->calibrating = true;
    self->calib_start = self->round_start = pl_monotonic ();
    return true;
}

//  Drop d if v (count) holds a non-finite value: true when it did.
static bool
s_drop_nonfinite (srv_t *self, srv_device_t *d, const float *v, size_t count,
                  const char *what)
{
    size_t bad = srv_first_nonfinite (v, count);
    if (bad == count)
        return false;
    char why[160];
    snprintf (why, sizeof why, "calibration %s hold non-finite values (value %zu is %g)",
              what, bad, (double) v[bad]);
    srv_drop (self, d, PROTO_ERR_STATE, why);
    return true;
}

void
srv_calib_on_activations (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    const proto_tensor_desc_t *td = proto_msg_tensor (msg);
    char why[192];
    if (!self->calibrating || !d->active || !d->cal_model
    ||  h->epoch != (uint32_t) self->epoch || d->cal_acts >= s_expected_acts (self, d)) {
        srv_drop (self, d, PROTO_ERR_STATE, "ACTIVATIONS with CALIBRATE out of place");
        return;
    }
    nn_shape_t in = nn_model_input_shape (d->cal_model);
    if (td->rank != 4 || td->dims[0] != (uint32_t) (self->batch / d->micro)
    ||  td->dims[1] != (uint32_t) in.h || td->dims[2] != (uint32_t) in.w
    ||  td->dims[3] != (uint32_t) in.c) {
        snprintf (why, sizeof why, "calibration ACTIVATIONS of another shape than "
                  "micro-batches of %d at split point %d (%dx%dx%d)", self->batch / d->micro,
                  srv_parts_split (self, id), in.h, in.w, in.c);
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    if (srv_wire_check_activations (self->wire, id, msg, why, sizeof why)) {
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    const float *x = proto_msg_tensor_data (msg);
    if (s_drop_nonfinite (self, d, x, proto_msg_tensor_count (msg), "ACTIVATIONS"))
        return;
    //  The device sends each batch's micro-batches in order; they are
    //  forwarded together, as one mini-batch, once all are in: batch
    //  statistics over the mini-batch, as the device part's were.
    int mb = self->batch / d->micro, j = d->cal_acts / d->micro, i = d->cal_acts % d->micro;
    if (h->iteration != (uint32_t) j || h->micro_batch != (uint32_t) i) {
        snprintf (why, sizeof why, "calibration ACTIVATIONS for batch %u, micro-batch %u; "
                  "expected batch %d, micro-batch %d", h->iteration, h->micro_batch, j, i);
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    size_t row = nn_shape_size (in);
    memcpy (d->cal_x + (size_t) i * mb * row, x, sizeof (float) * (size_t) mb * row);
    d->cal_acts++;
    if (i == d->micro - 1) {
        //  Each mini-batch weighs the same in the running statistics;
        //  dropout (vgg11's dense units) draws from a stream named by it.
        nn_model_set_bn_momentum (d->cal_model, 1.0f / (float) (j + 1));
        nn_rng_t base, rng;
        nn_rng_seed (&base, self->cfg->seed ^ UINT64_C (0xCA11B0A7E0000000));
        rng = nn_rng_split (&base, ((uint64_t) id << 32) | (uint64_t) j);
        nn_model_forward (d->cal_model, d->cal_x, self->batch, true, &rng);
    }
    //  A part without buffers sends no PARAMS: its last micro-batch ends it.
    if (d->cal_acts == s_expected_acts (self, d) && s_part_buffers (self, id) == 0)
        d->cal_in = true;
}

void
srv_calib_on_params (srv_t *self, srv_device_t *d, const proto_msg_t *msg)
{
    const int id = (int) (d - self->dev);
    const proto_slab_t *slab = proto_msg_slab (msg);
    const proto_header_t *h = proto_msg_header (msg);
    size_t count = s_part_buffers (self, id);
    char why[192];
    if (!self->calibrating || !d->active || d->cal_in || !d->cal_buf
    ||  h->epoch != (uint32_t) self->epoch || slab->unit_begin != 0
    ||  slab->unit_end != (uint32_t) srv_parts_split (self, id)) {
        srv_drop (self, d, PROTO_ERR_STATE, "PARAMS with CALIBRATE out of place");
        return;
    }
    if (d->cal_acts != s_expected_acts (self, d)) {
        snprintf (why, sizeof why, "calibration PARAMS after %d of its %d micro-batches",
                  d->cal_acts, s_expected_acts (self, d));
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    if (slab->count != count) {
        snprintf (why, sizeof why, "calibration PARAMS of %" PRIu64 " floats; the buffers "
                  "of device %d's part hold %zu", slab->count, id, count);
        srv_drop (self, d, PROTO_ERR_STATE, why);
        return;
    }
    const float *v = proto_msg_tensor_data (msg);
    if (s_drop_nonfinite (self, d, v, count, "PARAMS"))
        return;
    memcpy (d->cal_buf, v, sizeof (float) * count);
    d->cal_in = true;
}

bool
srv_calib_complete (const srv_t *self)
{
    for (int i = 0; i < self->devices; i++)
        if (self->dev[i].active && !self->dev[i].cal_in)
            return false;
    return true;
}

//  Offset of the tensor named name in m's weights slab, or SIZE_MAX.
static size_t
s_offset (const nn_model_t *m, const char *name)
{
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        if (strcmp (info.name, name) == 0)
            return info.offset;
    }
    return SIZE_MAX;
}

//  Where device id's estimate of the buffer tensor `name` is: its PARAMS'
//  buffers when its part holds the tensor, else its server-side copy.
static const float *
s_source (srv_t *self, int id, const char *name)
{
    srv_device_t *d = &self->dev[id];
    const nn_model_t *part = srv_parts_device (self, id);
    size_t off = s_offset (part, name);
    if (off != SIZE_MAX)
        return d->cal_buf + (off - nn_model_params_count (part));
    off = d->cal_model ? s_offset (d->cal_model, name) : SIZE_MAX;
    return off == SIZE_MAX ? NULL : nn_model_weights_const (d->cal_model) + off;
}

void
srv_calib_finish (srv_t *self)
{
    double weights[SRV_MAX_DEVICES];
    int act[SRV_MAX_DEVICES], n = 0;
    for (int i = 0; i < self->devices; i++) {
        const srv_device_t *d = &self->dev[i];
        if (!d->active || !d->cal_in)
            continue;
        //  As FedAvg weighs it: the device's shard.
        weights[n] = self->shard_size[i] > 0 ? (double) self->shard_size[i]
                   : d->samples > 0 ? (double) d->samples : 1.0;
        act[n++] = i;
    }
    float *dst = nn_model_weights (self->full);
    int tensors = nn_model_tensors_count (self->full), pooled = 0;
    for (int t = 0; n > 0 && t + 1 < tensors; t++) {
        nn_tensor_info_t mi, vi;
        nn_model_tensor (self->full, t, &mi);
        nn_model_tensor (self->full, t + 1, &vi);
        const char *suffix = ".running_mean";
        size_t len = strlen (mi.name), sl = strlen (suffix);
        if (len < sl || strcmp (mi.name + len - sl, suffix) != 0 || vi.count != mi.count)
            continue;
        const float *means[SRV_MAX_DEVICES], *vars[SRV_MAX_DEVICES];
        bool found = true;
        for (int k = 0; k < n && found; k++) {
            means[k] = s_source (self, act[k], mi.name);
            vars[k] = s_source (self, act[k], vi.name);
            found = means[k] && vars[k];
        }
        //  Every device holds every unit once, on one side or the other.
        assert (found);
        nn_bn_pool (dst + mi.offset, dst + vi.offset, means, vars, weights, n, mi.count);
        pooled++;
    }
    for (int p = 0; p <= NN_MAX_UNITS; p++)
        if (self->part[p])
            nn_model_copy_tensors (self->part[p], self->full);
    for (int i = 0; self->pool && i < self->devices; i++)
        if (self->dev[i].active)
            nn_model_copy_tensors (srv_pool_model (self->pool, self->dev[i].replica),
                                   self->full);
    for (int i = 0; i < self->devices; i++)
        srv_calib_release (&self->dev[i]);
    self->calibrating = false;
    self->calib_s = pl_monotonic () - self->calib_start;
    pl_log_info ("server: epoch %d: BN statistics of %d layer(s) re-estimated on %d "
                 "device(s) x %d batch(es) in %.2f s", self->epoch, pooled, n,
                 self->cfg->bn_calibration_batches, self->calib_s);
}
