/*  cli_planning.c: the device's side of planning (proto/PROTOCOL.md,
    "Planning"; docs/planner.md).

    - PROFILE: when WELCOME asks, the device times every split unit of the
      model on its own hardware at the run's batch size (nn_profile, the
      same measurement pipelearn-plan makes) and sends the costs, so the
      server plans from what this device really does, not from its own
      speed. With codec_zstd it adds zstd's ratios at every split point,
      measured on a batch of its own samples (nn_squeeze).
    - PROBE: answered at once, with the payload size the server asked
      for; the server times the round trips.
    - PLAN: a new split point or micro-batch count from the next MODEL on;
      the contexts are rebuilt for it.
*/
#include <stdio.h>
#include <string.h>

#include "cli_state.h"
#include "nn_alloc.h"
#include "nn_profile.h"
#include "nn_squeeze.h"
#include "pl_log.h"
#include "pl_timeline.h"

//  zstd's ratios at every split point (nn_squeeze) into p, on the first
//  samples of this device's shard (up to NN_SQUEEZE_SAMPLES, no
//  augmentation). -1 with a message.
static int
s_squeeze (cli_t *self, proto_profile_t *p, char *err, size_t err_size)
{
    int n = self->batch < self->shard_count ? self->batch : self->shard_count;
    if (n > NN_SQUEEZE_SAMPLES)
        n = NN_SQUEEZE_SAMPLES;
    if (n < 1 || self->spec.units_count < 2)
        return 0;
    size_t sample = nn_shape_size (nn_model_spec_input (&self->spec));
    float *x = nn_alloc_aligned (sizeof (float) * sample * (size_t) n);
    int *y = nn_malloc (sizeof (int) * (size_t) n);
    nn_dataset_batch (x, y, self->train, self->shard, n, NULL, NULL);
    nn_squeeze_t q;
    int rc = nn_squeeze_measure (&q, &self->spec, x, y, n, self->assign.seed,
                                 self->cfg.int8_stochastic, self->args.threads, err, err_size);
    nn_free (x);
    nn_free (y);
    if (rc)
        return -1;
    p->zstd_rows = (uint32_t) q.boundaries;
    for (int b = 0; b < q.boundaries; b++)
        for (int k = 0; k < NN_SQUEEZE_KINDS; k++)
            p->zstd_ratio[b][k] = q.ratio[b][k];
    return 0;
}

int
cli_planning_profile (cli_t *self)
{
    char err[NN_ERR_SIZE];
    //  One compute thread: its CPU clock gives each unit's parts their own
    //  time and the quota one factor (nn_profile_args_t.cpu_now).
    nn_profile_args_t args = { .batch_size = self->batch, .threads = self->args.threads,
                               .small_batch = nn_profile_fit_batch (&self->spec, self->batch,
                                                                    self->cfg.min_micro_batch),
                               .seed = self->assign.seed, .now = pl_monotonic_clock,
                               .int8_stochastic = self->cfg.int8_stochastic,
                               .zstd = self->cfg.codec_zstd,
                               .cpu_now = self->args.threads <= 1 ? pl_thread_cpu_clock
                                                                  : NULL };
    nn_estimate_costs_t costs;
    double t0 = pl_monotonic ();
    if (nn_profile_run (&self->spec, &args, &costs, NULL, NULL, err, sizeof err)) {
        pl_log_error ("client: profiling: %s", err);
        cli_send_error (self, PROTO_ERR_INTERNAL, err);
        return -1;
    }
    proto_profile_t p = { .units = (uint32_t) costs.units_count,
                          .threads = (uint32_t) (self->args.threads > 0 ? self->args.threads
                                                                        : 1) };
    double fwd = 0.0, bwd = 0.0;
    for (int u = 0; u < costs.units_count; u++) {
        const nn_estimate_unit_cost_t *c = &costs.unit[u];
        p.unit[u] = (proto_unit_cost_t) { c->fwd_s, c->bwd_s, c->fwd_fixed_s, c->bwd_fixed_s,
                                          c->upd_s };
        fwd += c->fwd_s;
        bwd += c->bwd_s;
    }
    //  The codecs on the tensor it will send: the provisional split's
    //  boundary at the provisional micro-batch size (speeds in bytes per
    //  second carry over to the other split points' tensors).
    int split = (int) self->assign.split_point;
    int micro = self->micro > 0 ? self->micro : 1;
    nn_shape_t bs = nn_model_spec_unit_output (&self->spec, split >= 1 ? split - 1 : 0);
    nn_codec_shape_t shape = { (uint32_t) (self->batch / micro > 0 ? self->batch / micro : 1),
                               (uint32_t) bs.h, (uint32_t) bs.w, (uint32_t) bs.c };
    nn_estimate_codec_speed_t speed;
    if (nn_profile_codecs (&shape, &args, &speed, err, sizeof err)) {
        pl_log_error ("client: profiling the codecs: %s", err);
        cli_send_error (self, PROTO_ERR_INTERNAL, err);
        return -1;
    }
    for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
        p.encode_Bps[c] = speed.encode_Bps[NN_CODEC_FP16 + c];
        p.decode_Bps[c] = speed.decode_Bps[NN_CODEC_FP16 + c];
    }
    //  With zstd on the split's payloads, how much it saves at each split
    //  point (the planner's bytes): measured on this device's samples.
    if (self->cfg.codec_zstd && s_squeeze (self, &p, err, sizeof err)) {
        pl_log_error ("client: measuring zstd's ratios: %s", err);
        cli_send_error (self, PROTO_ERR_INTERNAL, err);
        return -1;
    }
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PROFILE);
    proto_msg_set_route (msg, (uint32_t) self->id, 0, 0, 0);
    if (proto_msg_set_profile (msg, &p)) {
        proto_msg_destroy (&msg);
        pl_log_error ("client: profiling gave costs out of range");
        cli_send_error (self, PROTO_ERR_INTERNAL, "profile out of range");
        return -1;
    }
    if (p.zstd_rows) {
        int at = split >= 1 && split <= (int) p.zstd_rows ? split - 1 : 0;
        pl_log_info ("client: zstd's ratios at split point %d (of %u measured): int8 up "
                     "%.3f, down %.3f; fp16 up %.3f, down %.3f", at + 1, p.zstd_rows,
                     p.zstd_ratio[at][NN_SQUEEZE_INT8_UP], p.zstd_ratio[at][NN_SQUEEZE_INT8_DOWN],
                     p.zstd_ratio[at][NN_SQUEEZE_FP16_UP], p.zstd_ratio[at][NN_SQUEEZE_FP16_DOWN]);
    }
    pl_log_info ("client: profiled %d units at batch %d in %.1f s: forward %.3f s, "
                 "backward %.3f s per batch (whole model); codecs on %ux%ux%ux%u (MB/s of "
                 "float32, encode / decode): fp16 %.0f / %.0f, int8 %.0f / %.0f, topk %.0f / "
                 "%.0f", costs.units_count, self->batch, pl_monotonic () - t0, fwd, bwd,
                 shape.n, shape.h, shape.w, shape.c, p.encode_Bps[0] / 1e6,
                 p.decode_Bps[0] / 1e6, p.encode_Bps[1] / 1e6, p.decode_Bps[1] / 1e6,
                 p.encode_Bps[2] / 1e6, p.decode_Bps[2] / 1e6);
    return cli_send (self, &msg);
}

int
cli_planning_probe_answer (cli_t *self, const proto_msg_t *probe)
{
    const proto_probe_t *p = proto_msg_probe (probe);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t answer = { .probe_id = p->probe_id, .reply_bytes = 0 };
    proto_msg_set_route (msg, (uint32_t) self->id, 0, 0, 0);
    //  proto checked reply_bytes <= PROTO_PROBE_MAX_BYTES.
    proto_msg_set_probe (msg, &answer, p->reply_bytes);
    return cli_send (self, &msg);
}

int
cli_planning_apply (cli_t *self, const proto_assign_t *plan)
{
    const proto_assign_t *cur = &self->assign;
    char err[NN_ERR_SIZE];
    if (plan->device_id != cur->device_id || plan->batch_size != cur->batch_size
    ||  plan->devices != cur->devices || plan->mode != cur->mode) {
        snprintf (err, sizeof err, "PLAN changes the session (device %u of %u, batch %u, "
                  "mode %u; this session: device %u of %u, batch %u, mode %u)",
                  plan->device_id, plan->devices, plan->batch_size, plan->mode,
                  cur->device_id, cur->devices, cur->batch_size, cur->mode);
        pl_log_error ("client: %s", err);
        cli_send_error (self, PROTO_ERR_STATE, err);
        return -1;
    }
    //  The codecs hold from the next MODEL on, as the split point does
    //  (proto checked them); the upload encoder follows at the next upload.
    if (plan->codec_up != cur->codec_up || plan->codec_down != cur->codec_down)
        pl_log_info ("client: new plan: codecs up %s -> %s, down %s -> %s",
                     nn_codec_name ((nn_codec_id_t) cur->codec_up),
                     nn_codec_name ((nn_codec_id_t) plan->codec_up),
                     nn_codec_name ((nn_codec_id_t) cur->codec_down),
                     nn_codec_name ((nn_codec_id_t) plan->codec_down));
    self->assign.codec_up = plan->codec_up;
    self->assign.codec_down = plan->codec_down;
    self->assign.codec_flags = plan->codec_flags;
    self->assign.topk_fraction = plan->topk_fraction;
    if (plan->split_point == cur->split_point && (int) plan->micro_batches == self->micro)
        return 0;
    if (cli_contexts_build (self, (int) plan->split_point, (int) plan->micro_batches, err,
                            sizeof err)) {
        pl_log_error ("client: PLAN: %s", err);
        cli_send_error (self, PROTO_ERR_REFUSED, err);
        return -1;
    }
    pl_log_info ("client: new plan: split %u -> %u, micro-batches %u -> %u",
                 cur->split_point, plan->split_point, cur->micro_batches,
                 plan->micro_batches);
    self->assign.split_point = plan->split_point;
    self->assign.micro_batches = plan->micro_batches;
    return 0;
}
