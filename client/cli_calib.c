/*  cli_calib.c: this device's share of the BN calibration after an epoch
    (server/srv_calib.h; PROTOCOL.md, "Calibration"). */
#include <string.h>

#include "cli_state.h"
#include "nn_alloc.h"
#include "pl_log.h"

//  PARAMS with CALIBRATE: the buffers of this device's part (the tail of
//  its weights slab). A part without buffers sends none.
static int
s_send_buffers (cli_t *self, uint32_t epoch)
{
    const nn_model_t *m = self->ctx[0];
    size_t params = nn_model_params_count (m), count = nn_model_weights_count (m) - params;
    if (count == 0)
        return 0;
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PARAMS);
    proto_slab_t slab = { .unit_begin = 0, .unit_end = (uint32_t) nn_model_unit_end (m),
                          .count = count, .sample_count = (uint64_t) self->shard_count };
    memcpy (slab.spec_hash, self->spec_hash, PROTO_SPEC_HASH_SIZE);
    proto_msg_set_route (msg, (uint32_t) self->id, epoch, 0, 0);
    proto_msg_set_calibrate (msg, true);
    proto_msg_set_slab_copy (msg, &slab, nn_model_weights_const (m) + params);
    return cli_send (self, &msg);
}

//  Micro-batch i of calibration batch j (out, labels y: its rows) as
//  ACTIVATIONS with CALIBRATE.
static int
s_send_activations (cli_t *self, uint32_t epoch, const float *out, const int *y, int j,
                    int i)
{
    nn_shape_t s = nn_model_output_shape (self->ctx[0]);
    uint32_t dims[4] = { (uint32_t) self->mb, (uint32_t) s.h, (uint32_t) s.w,
                         (uint32_t) s.c };
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (msg, (uint32_t) self->id, epoch, (uint32_t) j,
                         (uint32_t) i);
    proto_msg_set_last (msg, i == self->micro - 1);
    proto_msg_set_calibrate (msg, true);
    char err[NN_ERR_SIZE];
    if (cli_wire_set_activations (self, msg, out, dims, err, sizeof err)) {
        proto_msg_destroy (&msg);
        pl_log_error ("client: cannot build calibration ACTIVATIONS: %s", err);
        cli_send_error (self, PROTO_ERR_INTERNAL, err);
        return -1;
    }
    for (int k = 0; k < self->mb; k++)
        self->labels[k] = y[k];
    proto_msg_set_labels (msg, self->labels, (size_t) self->mb);
    return cli_send (self, &msg);
}

int
cli_calibrate (cli_t *self, const proto_msg_t *model)
{
    double t0 = pl_monotonic ();
    //  The epoch the server calibrates (sl's devices already wait for the
    //  next one's turn).
    uint32_t epoch = proto_msg_header (model)->epoch;
    //  proto checked the count against our weights (the MODEL's limits).
    memcpy (nn_model_weights (self->ctx[0]), proto_msg_tensor_data (model),
            sizeof (float) * nn_model_weights_count (self->ctx[0]));
    int batches = self->cfg.bn_calibration_batches;
    //  Whole mini-batches through the part, as fl trains and as the server
    //  forwards the gathered micro-batches: population statistics are
    //  estimated best from the largest batches the run has. In the split
    //  modes the contexts hold micro-batches, so a context for the whole
    //  batch borrows ctx[0]'s weights for the calibration.
    nn_model_t *m = self->ctx[0];
    float *x = self->x[0];
    int *y = self->y[0];
    if (self->mode != PL_MODE_FL) {
        char err[NN_ERR_SIZE];
        m = nn_model_new (&self->spec, 0, nn_model_unit_end (self->ctx[0]), self->batch,
                          err, sizeof err);
        if (!m) {
            pl_log_error ("client: BN calibration: %s", err);
            cli_send_error (self, PROTO_ERR_INTERNAL, err);
            return -1;
        }
        nn_model_use_slabs (m, self->ctx[0]);
        nn_model_set_threads (m, nn_model_threads (self->ctx[0]));
        size_t sample = nn_shape_size (nn_model_input_shape (m));
        x = nn_alloc_aligned (sizeof (float) * sample * (size_t) self->batch);
        y = nn_malloc (sizeof (int) * (size_t) self->batch);
    }
    //  The shard in an order of its own (not the next epoch's), gone
    //  through again, reshuffled, if it is smaller than the calibration; no
    //  augmentation: statistics for the images as evaluated.
    int *order = nn_malloc (sizeof (int) * (size_t) self->shard_count);
    int *idx = nn_malloc (sizeof (int) * (size_t) self->batch);
    nn_rng_t rng = nn_rng_split (&self->data_base, UINT64_C (0xCA11B0A7E0000000)
                                                   | epoch);
    int pos = self->shard_count;
    //  Dropout (vgg11's dense units) draws from a stream of its own, so that
    //  calibrating leaves the training's masks as they would have been.
    nn_rng_t drop = nn_rng_split (&self->data_base, UINT64_C (0xCA11B0A7D0000000) | epoch);
    nn_shape_t os = nn_model_output_shape (m);
    size_t orow = nn_shape_size (os);
    int rc = 0;
    for (int j = 0; rc == 0 && j < batches; j++) {
        for (int k = 0; k < self->batch; k++) {
            if (pos == self->shard_count) {
                memcpy (order, self->shard, sizeof (int) * (size_t) self->shard_count);
                nn_rng_shuffle_int (&rng, order, self->shard_count);
                pos = 0;
            }
            idx[k] = order[pos++];
        }
        nn_dataset_batch (x, y, self->train, idx, self->batch, NULL, NULL);
        nn_model_set_bn_momentum (m, 1.0f / (float) (j + 1));
        const float *out = nn_model_forward (m, x, self->batch, true, &drop);
        //  Split modes: up in the run's micro-batches (its frame limits).
        for (int i = 0; rc == 0 && self->mode != PL_MODE_FL && i < self->micro; i++)
            rc = s_send_activations (self, epoch, out + (size_t) i * self->mb * orow,
                                     y + (size_t) i * self->mb, j, i);
    }
    nn_model_set_bn_momentum (m, NN_BN_MOMENTUM);
    if (m != self->ctx[0]) {
        nn_model_destroy (&m);
        nn_free (x);
        nn_free (y);
    }
    nn_free (order);
    nn_free (idx);
    if (rc == 0)
        rc = s_send_buffers (self, epoch);
    self->calibrated = rc == 0;
    pl_log_info ("client %s: epoch %u: BN statistics re-estimated on %d batch(es) in %.2f s",
                 self->who, epoch, batches, pl_monotonic () - t0);
    return rc;
}

bool
cli_calib_request (const cli_t *self, const proto_msg_t *model)
{
    return proto_msg_is_calibrate (model)
        && proto_msg_slab (model)->count == nn_model_weights_count (self->ctx[0]);
}

int
cli_calib_load (cli_t *self, const proto_msg_t *model)
{
    nn_model_t *m = self->ctx[0];
    size_t count = proto_msg_slab (model)->count, params = nn_model_params_count (m);
    bool buffers = proto_msg_is_calibrate (model);
    //  proto checked count: the whole slab, or with CALIBRATE the buffers.
    if (buffers && !self->calibrated) {
        pl_log_error ("client: MODEL with the buffers alone, but no calibration before it");
        cli_send_error (self, PROTO_ERR_STATE, "MODEL of buffers without a calibration");
        return -1;
    }
    memcpy (nn_model_weights (m) + (buffers ? params : 0), proto_msg_tensor_data (model),
            sizeof (float) * count);
    self->calibrated = false;
    return 0;
}
