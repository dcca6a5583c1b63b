/*  pipelearn-plan: choose the split point and micro-batch count for a
    config, and estimate FL / SL / SFL / PipeLearn epoch times.

    pipelearn-plan --config FILE [--set KEY=VALUE]... [--link 4g|4g-plus|wifi]
                   [--uplink-mbps X] [--downlink-mbps Y] [--rtt-ms R]
                   [--devices D] [--costs FILE.json] [--write-costs FILE.json]
                   [--device-slowdown F] [--forward-first] [--json]
                   [--host-cores C] [--host-copy-mbps X]

    Without --costs it profiles this host (nn_profile) and uses the same
    costs for the devices and the server. The model is nn_estimate.h's;
    docs/planner.md explains it and the cost file format.
*/
#include "nn_alloc.h"
#include "nn_dataset.h"
#include "nn_estimate.h"
#include "nn_model.h"
#include "nn_profile.h"
#include "nn_squeeze.h"
#include "pl_blas.h"
#include "pl_config.h"
#include "pl_hostcopy.h"
#include "pl_log.h"
#include "pl_shards.h"
#include "pl_summary.h"
#include "pl_timeline.h"
#include "plan_args.h"
#include "plan_costs.h"
#include "plan_report.h"

#include <stdio.h>
#include <unistd.h>

//  pl_shards_each's callback: keep every device's shard and its size.
typedef struct {
    int **shards;
    int *counts;
} s_kept_t;

static int
s_keep (int device, int *shard, int count, void *arg)
{
    s_kept_t *k = arg;
    k->shards[device] = shard;
    k->counts[device] = count;
    return 0;
}

//  Every device's shard of train, as the devices draw them (pl_shards_each),
//  into shards[d] (the caller frees each) and counts[d]; the iterations per
//  epoch as the devices compute them: every device runs as many as the
//  largest shard needs (cli_main.c's s_prepare). -1 with a message.
static int
s_shards (const pl_config_t *cfg, const nn_dataset_t *train, int **shards, int *counts,
          char *err, size_t err_size)
{
    s_kept_t kept = { shards, counts };
    if (pl_shards_each (cfg, cfg->devices, train, s_keep, &kept, err, err_size))
        return -1;
    int max_count = 0;
    for (int d = 0; d < cfg->devices; d++) {
        if (counts[d] == 0)
            return nn_errf (err, err_size, "device %d's shard is empty (%d devices, %d "
                            "samples)", d, cfg->devices, cfg->samples);
        max_count = counts[d] > max_count ? counts[d] : max_count;
    }
    return (max_count + cfg->batch_size - 1) / cfg->batch_size;
}

//  With codec_zstd: zstd's ratios at every split point for each device
//  (the first NN_ESTIMATE_MAX_DEVICES; the estimate takes no more) into
//  squeeze[d], measured as its pipelearn-client measures them (nn_squeeze
//  on the first NN_SQUEEZE_SAMPLES of its shard, the run's seed, one
//  thread): the plan then counts the bytes zstd saves as the server's does.
//  0, or -1 with a message.
static int
s_squeeze (const pl_config_t *cfg, const nn_model_spec_t *spec, const nn_dataset_t *train,
           int *const *shards, const int *counts, nn_squeeze_t *squeeze, char *err,
           size_t err_size)
{
    if (!cfg->codec_zstd || spec->units_count < 2)
        return 0;
    size_t sample = nn_shape_size (nn_model_spec_input (spec));
    float *x = nn_alloc_aligned (sizeof (float) * sample * NN_SQUEEZE_SAMPLES);
    int y[NN_SQUEEZE_SAMPLES], rc = 0, n0 = 0;
    for (int d = 0; d < cfg->devices && d < NN_ESTIMATE_MAX_DEVICES && rc == 0; d++) {
        int n = cfg->batch_size < counts[d] ? cfg->batch_size : counts[d];
        n = n < NN_SQUEEZE_SAMPLES ? n : NN_SQUEEZE_SAMPLES;
        n0 = d == 0 ? n : n0;
        nn_dataset_batch (x, y, train, shards[d], n, NULL, NULL);
        rc = nn_squeeze_measure (&squeeze[d], spec, x, y, n, cfg->seed, cfg->int8_stochastic,
                                 1, err, err_size);
    }
    nn_free (x);
    if (rc)
        return -1;
    const nn_squeeze_t *q = &squeeze[0];
    char line[512] = "";
    size_t used = 0;
    for (int b = 0; b < q->boundaries && used < sizeof line; b++)
        used += (size_t) snprintf (line + used, sizeof line - used, "%s%d: %.2f / %.2f",
                                   b ? ", " : "", b + 1, q->ratio[b][NN_SQUEEZE_INT8_UP],
                                   q->ratio[b][NN_SQUEEZE_INT8_DOWN]);
    pl_log_info ("zstd ratios (body after / before) on device 0's first %d samples, int8 "
                 "up / down by split point: %s", n0, line);
    return 0;
}

//  The config's codecs ("auto": the planner's choice) with this host's
//  codec speeds (one thread, on the first boundary's tensor at batch B,
//  as pipelearn-server measures them) for the server and the devices, the
//  devices' divided by the slowdown. Nothing when every codec is none.
//  0 or -1 (logged).
static int
s_codecs (const pl_config_t *cfg, const nn_model_spec_t *spec, double slowdown,
          const nn_squeeze_t *squeeze, nn_estimate_input_t *in, nn_estimate_codec_t *codecs)
{
    bool any = false;
    for (int d = 0; d < cfg->devices; d++) {
        pl_codecs_t c = pl_config_codecs (cfg, d);
        codecs[d] = (nn_estimate_codec_t) {
            .up = c.auto_up ? NN_ESTIMATE_CODEC_AUTO : (int) c.up,
            .down = c.auto_down ? NN_ESTIMATE_CODEC_AUTO : (int) c.down,
            .topk_fraction = cfg->topk_fraction, .zstd = cfg->codec_zstd };
        if (cfg->codec_zstd)
            codecs[d].squeeze = squeeze[d];
        any |= c.up != NN_CODEC_NONE || c.down != NN_CODEC_NONE || c.auto_up || c.auto_down;
    }
    if (!any)
        return 0;
    char err[NN_ERR_SIZE];
    nn_shape_t s = nn_model_spec_unit_output (spec, 0);
    nn_codec_shape_t shape = { (uint32_t) cfg->batch_size, (uint32_t) s.h, (uint32_t) s.w,
                               (uint32_t) s.c };
    nn_profile_args_t pa = { .batch_size = cfg->batch_size, .seed = cfg->seed,
                             .now = pl_monotonic_clock,
                             .int8_stochastic = cfg->int8_stochastic, .zstd = cfg->codec_zstd };
    if (nn_profile_codecs (&shape, &pa, &in->server_codec, err, sizeof err)) {
        pl_log_error ("codec speeds: %s", err);
        return -1;
    }
    double f = slowdown > 0.0 ? slowdown : 1.0;
    for (int d = 0; d < cfg->devices; d++)
        for (int c = 0; c < NN_CODEC_COUNT; c++) {
            codecs[d].speed.encode_Bps[c] = in->server_codec.encode_Bps[c] / f;
            codecs[d].speed.decode_Bps[c] = in->server_codec.decode_Bps[c] / f;
        }
    in->codecs = codecs;
    pl_log_info ("codec speeds of this host (MB/s of float32, encode / decode): fp16 %.0f / "
                 "%.0f, int8 %.0f / %.0f, topk %.0f / %.0f%s",
                 in->server_codec.encode_Bps[NN_CODEC_FP16] / 1e6,
                 in->server_codec.decode_Bps[NN_CODEC_FP16] / 1e6,
                 in->server_codec.encode_Bps[NN_CODEC_INT8] / 1e6,
                 in->server_codec.decode_Bps[NN_CODEC_INT8] / 1e6,
                 in->server_codec.encode_Bps[NN_CODEC_TOPK] / 1e6,
                 in->server_codec.decode_Bps[NN_CODEC_TOPK] / 1e6,
                 f != 1.0 ? "; the devices' divided by the slowdown" : "");
    return 0;
}

int
main (int argc, char **argv)
{
    pl_memory_setup ();                 //  as the daemons: the copy cost matches theirs
    if (pl_blas_setup (argv))
        return 2;
    pl_config_t cfg;
    pl_config_defaults (&cfg);
    plan_args_t args = { 0 };
    if (plan_args_parse (argc, argv, &args, &cfg))
        return 2;
    //  As pipelearn-server refuses them (srv_main.c): the estimate and the
    //  per-device arrays below hold this many.
    if (cfg.devices > NN_ESTIMATE_MAX_DEVICES) {
        pl_log_error ("config: devices: at most %d, got %d", NN_ESTIMATE_MAX_DEVICES,
                      cfg.devices);
        return 2;
    }
    pl_blas_set_threads (1);

    char err[NN_ERR_SIZE];
    const char *dir = cfg.data_dir[0] ? cfg.data_dir : NULL;
    nn_dataset_t *train = nn_dataset_load_named (cfg.dataset, dir, true, cfg.samples, err,
                                                 sizeof err);
    if (train && cfg.pad_to > 0 && nn_dataset_pad (train, cfg.pad_to, err, sizeof err))
        nn_dataset_destroy (&train);
    if (!train) {
        pl_log_error ("%s", err);
        return 1;
    }
    nn_model_spec_t spec;
    int iterations = -1;
    int **shards = nn_calloc ((size_t) cfg.devices, sizeof *shards);
    int *counts = nn_calloc ((size_t) cfg.devices, sizeof *counts);
    static nn_squeeze_t squeeze[NN_ESTIMATE_MAX_DEVICES];
    bool failed = nn_model_spec_by_name (&spec, cfg.model, train->c, train->h, train->w,
                                         train->classes, err, sizeof err)
               || (iterations = s_shards (&cfg, train, shards, counts, err, sizeof err)) < 0
               || s_squeeze (&cfg, &spec, train, shards, counts, squeeze, err, sizeof err);
    for (int d = 0; d < cfg.devices; d++)
        nn_free (shards[d]);
    nn_free (shards);
    nn_free (counts);
    nn_dataset_destroy (&train);
    if (failed) {
        pl_log_error ("config: %s", err);
        return 1;
    }

    static nn_estimate_device_t devs[NN_ESTIMATE_MAX_DEVICES];
    nn_estimate_input_t in = { 0 };
    in.batch_size = cfg.batch_size;
    in.iterations = iterations;
    in.aggregation_frequency = cfg.aggregation_frequency;
    in.min_micro_batch = nn_estimate_min_micro_batch (&spec, cfg.min_micro_batch);
    in.devices_count = cfg.devices;
    in.devices = devs;
    //  The server's pool: one worker per core (threads), at most one per
    //  device (srv_parts.c, srv_parts_workers).
    int cores = cfg.threads > 0 ? cfg.threads : (int) sysconf (_SC_NPROCESSORS_ONLN);
    in.server_workers = cores < 1 ? 1 : cores > cfg.devices ? cfg.devices : cores;
    in.forward_first = args.forward_first;
    in.split_point = cfg.split_point > 0 ? cfg.split_point : 0;
    in.micro_batches = cfg.micro_batches == PL_AUTO ? 0 : cfg.micro_batches;
    if (nn_profile_model_bytes (&spec, cfg.batch_size, &in.model, err, sizeof err)) {
        pl_log_error ("%s", err);
        return 1;
    }
    for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++) {
        devs[d].uplink_Bps = nn_estimate_link_payload_Bps (args.up_mbps);
        devs[d].downlink_Bps = nn_estimate_link_payload_Bps (args.down_mbps);
        devs[d].rtt_s = args.rtt_ms / 1e3;
    }
    bool heterogeneous = false;
    if (args.costs_path) {
        if (plan_costs_load (args.costs_path, cfg.batch_size, cfg.devices, &in, devs,
                             &heterogeneous, err, sizeof err)) {
            pl_log_error ("%s", err);
            return 1;
        }
        plan_costs_slow_devices (devs, args.device_slowdown);
    }
    else {
        pl_log_info ("profiling %s at batch %d on this host (1 thread, OpenBLAS core %s); "
                     "the same costs stand for the devices and the server", cfg.model,
                     cfg.batch_size, pl_blas_corename ());
        nn_profile_args_t pa = { .batch_size = cfg.batch_size, .seed = cfg.seed,
                                 .small_batch = nn_profile_fit_batch (&spec, cfg.batch_size,
                                                                      cfg.min_micro_batch),
                                 .now = pl_monotonic_clock };
        nn_profile_report_t rep;
        if (nn_profile_run (&spec, &pa, &in.server, NULL, &rep, err, sizeof err)) {
            pl_log_error ("%s", err);
            return 1;
        }
        for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++)
            devs[d].costs = in.server;
        pl_log_info ("profile: units forward %.4f s + backward %.4f s per batch; the whole "
                     "model %.4f s + %.4f s", rep.units_fwd_s, rep.units_bwd_s,
                     rep.whole_fwd_s, rep.whole_bwd_s);
        //  The units and the whole model do the same work; far apart, the
        //  host was busy while one of them ran and the plan rests on noise.
        double units = rep.units_fwd_s + rep.units_bwd_s;
        double whole = rep.whole_fwd_s + rep.whole_bwd_s;
        if (units > 1.3 * whole || whole > 1.3 * units)
            pl_log_warn ("profile: the units and the whole model differ by more than 30%%; "
                         "the host looks busy, so the costs are noisy (profile on a quiet "
                         "host and save them with --write-costs)");
        //  The file holds what was profiled: --device-slowdown applies when
        //  it is read again, not twice.
        if (args.write_costs_path) {
            if (plan_costs_write (args.write_costs_path, cfg.batch_size, &in, cfg.model,
                                  err, sizeof err)) {
                pl_log_error ("%s", err);
                return 1;
            }
            pl_log_info ("costs written to %s", args.write_costs_path);
        }
        plan_costs_slow_devices (devs, args.device_slowdown);
    }
    if (args.write_costs_path && args.costs_path)
        pl_log_warn ("--write-costs is ignored with --costs (nothing was profiled)");

    if (cfg.host_cores > 0) {
        in.host_cores = cfg.host_cores;
        in.host_copy_Bps = pl_hostcopy_rate (cfg.host_copy_mbps, in.model.out_bytes[0],
                                             err, sizeof err);
        if (in.host_copy_Bps < 0.0) {
            pl_log_error ("%s", err);
            return 1;
        }
        pl_log_info ("one host: the server and %d device(s) share %d core(s); moving bytes "
                     "costs a core %.0f Mbit/s%s", in.devices_count, in.host_cores,
                     in.host_copy_Bps * 8e-6, cfg.host_copy_mbps > 0.0 ? "" : " (measured)");
    }

    static nn_estimate_codec_t codecs[NN_ESTIMATE_MAX_DEVICES];
    if (s_codecs (&cfg, &spec, args.device_slowdown, squeeze, &in, codecs))
        return 1;

    nn_estimate_t *plan = nn_estimate_new (&in, err, sizeof err);
    if (!plan) {
        pl_log_error ("%s", err);
        return 1;
    }
    if (in.split_point || in.micro_batches)
        pl_log_info ("config pins%s%s; set them to \"auto\" to let the planner choose",
                     in.split_point ? " split_point" : "",
                     in.micro_batches ? " micro_batches" : "");
    if (args.json)
        plan_report_json (plan, &in, heterogeneous);
    else
        plan_report_text (plan, &in, heterogeneous);
    nn_estimate_destroy (&plan);
    return 0;
}
