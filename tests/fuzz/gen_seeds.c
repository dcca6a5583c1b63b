/*  gen_seeds.c: writes the fuzzers' seed corpora from real messages,
    configs and checkpoints.

        fuzz_seeds OUTDIR SRCDIR

    OUTDIR/proto: every message type, encoded by proto's own encoder for
    the run fuzz_common.c describes, in the fuzz_proto layout (each through
    one of the decode paths, with the limits the receiving daemon uses).
    OUTDIR/config: the .json files of SRCDIR/configs, the default config as
    pl_config_to_json prints it, and a PipeLearn-reference style config.
    OUTDIR/checkpoint: nn_checkpoint_save of each fuzz_checkpoint model,
    with and without optimiser state.
    The committed seeds in tests/fuzz/corpus were made with
    `build-fuzz/tests/fuzz_seeds tests/fuzz/corpus .`; run it again after a
    format change. Output is deterministic (fixed seeds and contents).
*/
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "fuzz_common.h"
#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_codec.h"
#include "pl_config.h"

static const char *s_out;

static void
s_mkdir (const char *sub)
{
    char path[1024];
    snprintf (path, sizeof path, "%s/%s", s_out, sub);
    if (mkdir (path, 0755) && errno != EEXIST)
        fuzz_die ("mkdir %s: %s", path, strerror (errno));
}

static FILE *
s_open (const char *sub, const char *name)
{
    char path[1024];
    snprintf (path, sizeof path, "%s/%s/%s", s_out, sub, name);
    FILE *f = fopen (path, "wb");
    if (!f)
        fuzz_die ("%s: %s", path, strerror (errno));
    return f;
}

//  Encode msg (destroying it) and write it as one fuzz_proto input.
static void
s_proto_seed (const char *name, int path, int profile, const uint8_t *custom,
              proto_msg_t *msg)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[NN_ERR_SIZE];
    int n = proto_msg_encode (msg, frames, err, sizeof err);
    if (n < 0)
        fuzz_die ("%s: %s", name, err);
    FILE *f = s_open ("proto", name);
    fuzz_write_prefix (f, path, profile, custom);
    for (int i = 0; i < n; i++) {
        fuzz_write_frame (f, zmq_msg_data (&frames[i]), zmq_msg_size (&frames[i]));
        zmq_msg_close (&frames[i]);
    }
    fclose (f);
    proto_msg_destroy (&msg);
}

static float *
s_floats (size_t count, float scale)
{
    float *x = nn_malloc (sizeof (float) * (count ? count : 1));
    for (size_t i = 0; i < count; i++)
        x[i] = scale * (float) ((int) (i % 17) - 8);
    return x;
}

static proto_msg_t *
s_slab_msg (int type, size_t count, uint64_t samples)
{
    const fuzz_run_t *r = fuzz_run ();
    proto_msg_t *msg = proto_msg_new (type);
    proto_slab_t slab = { .unit_begin = 0, .unit_end = 1, .count = count,
                          .sample_count = samples };
    memcpy (slab.spec_hash, r->spec_hash, PROTO_SPEC_HASH_SIZE);
    float *w = s_floats (count, 0.01f);
    if (proto_msg_set_slab_copy (msg, &slab, w))
        fuzz_die ("slab");
    nn_free (w);
    return msg;
}

static proto_msg_t *
s_tensor_msg (int type, const uint32_t *dims, int rank, uint32_t classes)
{
    proto_msg_t *msg = proto_msg_new (type);
    size_t count = 1;
    for (int i = 0; i < rank; i++)
        count *= dims[i];
    float *x = s_floats (count, 0.25f);
    if (proto_msg_set_tensor_copy (msg, x, dims, rank))
        fuzz_die ("tensor");
    nn_free (x);
    if (type == PROTO_MSG_GRADIENTS) {
        proto_loss_t loss = { 2.25f, dims[0] / 2, dims[0] };
        proto_msg_set_loss (msg, &loss);
    }
    else {
        int32_t labels[256];
        for (uint32_t i = 0; i < dims[0]; i++)
            labels[i] = (int32_t) (i % classes);
        proto_msg_set_labels (msg, labels, dims[0]);
    }
    proto_msg_set_route (msg, 1, 2, 3, 0);
    proto_msg_set_last (msg, true);
    return msg;
}

static void
s_proto_seeds (void)
{
    const fuzz_run_t *r = fuzz_run ();
    s_mkdir ("proto");

    proto_msg_t *msg = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t hello = { .protocol_version = PROTO_VERSION,
                            .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                            .requested_device_id = -1, .sample_count = 10000 };
    snprintf (hello.name, sizeof hello.name, "edge-device-1");
    proto_msg_set_hello (msg, &hello);
    s_proto_seed ("hello-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL, msg);

    //  WELCOME carries the run's config as the server prints it.
    pl_config_t cfg;
    pl_config_defaults (&cfg);
    cJSON *json = pl_config_to_json (&cfg);
    char *text = cJSON_PrintUnformatted (json);
    msg = proto_msg_new (PROTO_MSG_WELCOME);
    if (proto_msg_set_config (msg, text, strlen (text)))
        fuzz_die ("welcome config");
    proto_assign_t plan = { .device_id = 1, .split_point = 1, .micro_batches = 4,
                          .batch_size = 100, .devices = 2, .mode = PL_MODE_PIPELEARN,
                          .shard_begin = 10000, .shard_count = 10000, .seed = 2,
                          .origin_s = 1700000000.5 };
    proto_msg_set_assign (msg, &plan);
    if (proto_msg_set_frame_cap (msg, 2508800))
        fuzz_die ("welcome frame cap");
    s_proto_seed ("welcome-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_NONE, NULL, msg);
    cJSON_free (text);
    cJSON_Delete (json);

    s_proto_seed ("model-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_CLIENT, NULL,
                  s_slab_msg (PROTO_MSG_MODEL, r->device_weights, 0));
    s_proto_seed ("params-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL,
                  s_slab_msg (PROTO_MSG_PARAMS, r->device_weights, 5000));
    s_proto_seed ("params-frames", FUZZ_PATH_FRAMES, FUZZ_PROFILE_SERVER, NULL,
                  s_slab_msg (PROTO_MSG_PARAMS, r->device_weights, 5000));

    //  Tensors of the real run are 25 KB a sample; small custom limits keep
    //  the tensor seeds small and make every limit check reachable.
    //  max_batch 4, 3x2x5, 10 classes, slab 12, json 0, events 0, frames 0,
    //  frame bytes 0, spec hash yes.
    const uint8_t custom[FUZZ_CUSTOM_SIZE] = { 4, 3, 2, 5, 10, 12, 0, 0, 0, 0, 0, 0, 0, 1 };
    const uint32_t dims[4] = { 4, 3, 2, 5 };
    s_proto_seed ("activations-frames", FUZZ_PATH_FRAMES, FUZZ_PROFILE_CUSTOM, custom,
                  s_tensor_msg (PROTO_MSG_ACTIVATIONS, dims, 4, 10));
    s_proto_seed ("activations-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_CUSTOM, custom,
                  s_tensor_msg (PROTO_MSG_ACTIVATIONS, dims, 4, 10));
    s_proto_seed ("gradients-odd", FUZZ_PATH_FRAMES_ODD, FUZZ_PROFILE_CUSTOM, custom,
                  s_tensor_msg (PROTO_MSG_GRADIENTS, dims, 4, 10));
    s_proto_seed ("gradients-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_CUSTOM, custom,
                  s_tensor_msg (PROTO_MSG_GRADIENTS, dims, 4, 10));
    const uint32_t flat[2] = { 3, 7 };
    s_proto_seed ("eval-bytes", FUZZ_PATH_BYTES, FUZZ_PROFILE_NONE, NULL,
                  s_tensor_msg (PROTO_MSG_EVAL, flat, 2, 10));
    s_proto_seed ("model-custom", FUZZ_PATH_BYTES, FUZZ_PROFILE_CUSTOM, custom,
                  s_slab_msg (PROTO_MSG_MODEL, 12, 0));

    msg = proto_msg_new (PROTO_MSG_EVAL);
    proto_eval_result_t result = { 41.5, 90, 100 };
    proto_msg_set_eval_result (msg, &result);
    s_proto_seed ("eval-result-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_CLIENT, NULL, msg);

    msg = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t stats = { 1.5, 2.25, 0.5, 3.0, 123456, 654321, 1, 812.5, 8000, 10000 };
    proto_msg_set_stats (msg, &stats);
    s_proto_seed ("stats-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL, msg);

    msg = proto_msg_new (PROTO_MSG_EVENTS);
    proto_event_t events[3] = {
        { PROTO_STAGE_FORWARD, 1, 0, 0, 0.5, 0.75 },
        { PROTO_STAGE_WAIT, 1, 0, PROTO_EVENT_NONE, 0.75, 1.0 },
        { PROTO_STAGE_UPDATE, 1, PROTO_EVENT_NONE, PROTO_EVENT_NONE, 1.0, 1.0 },
    };
    if (proto_msg_set_events (msg, events, 3))
        fuzz_die ("events");
    s_proto_seed ("events-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER_FL, NULL, msg);

    //  Planning (protocol 2): a device's profile, a probe each way, a new plan.
    msg = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t profile = { .units = 5, .threads = 1 };
    for (int u = 0; u < 5; u++)
        profile.unit[u] = (proto_unit_cost_t) { 0.02 * (u + 1), 0.04 * (u + 1), 0.001,
                                                0.002, 0.0001 };
    if (proto_msg_set_profile (msg, &profile))
        fuzz_die ("profile");
    s_proto_seed ("profile-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL, msg);
    //  With zstd's ratios at the 4 split points.
    msg = proto_msg_new (PROTO_MSG_PROFILE);
    profile.zstd_rows = 4;
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < PROTO_ZSTD_RATIOS; k++)
            profile.zstd_ratio[r][k] = 0.55 + 0.1 * k;
    if (proto_msg_set_profile (msg, &profile))
        fuzz_die ("profile with zstd ratios");
    s_proto_seed ("profile-zstd-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL, msg);
    msg = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t probe = { .probe_id = 3, .reply_bytes = 0 };
    proto_msg_set_probe (msg, &probe, 64);
    s_proto_seed ("probe-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL, msg);
    msg = proto_msg_new (PROTO_MSG_PROBE);
    probe.reply_bytes = 65536;
    proto_msg_set_probe (msg, &probe, 16);
    s_proto_seed ("probe-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_CLIENT, NULL, msg);
    msg = proto_msg_new (PROTO_MSG_PLAN);
    plan.micro_batches = 10;
    proto_msg_set_assign (msg, &plan);
    s_proto_seed ("plan-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_CLIENT, NULL, msg);

    msg = proto_msg_new (PROTO_MSG_ERROR);
    proto_msg_set_error (msg, PROTO_ERR_MALFORMED, "ACTIVATIONS: batch 26 exceeds limit 25");
    s_proto_seed ("error-client", FUZZ_PATH_CLIENT, FUZZ_PROFILE_NONE, NULL, msg);
    s_proto_seed ("heartbeat-server", FUZZ_PATH_SERVER, FUZZ_PROFILE_SERVER, NULL,
                  proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_proto_seed ("bye-bytes", FUZZ_PATH_BYTES, FUZZ_PROFILE_SERVER_FL, NULL,
                  proto_msg_new (PROTO_MSG_BYE));
    //  Header and descriptor decoders on their own.
    s_proto_seed ("pieces", FUZZ_PATH_PIECES, FUZZ_PROFILE_NONE, NULL,
                  s_tensor_msg (PROTO_MSG_GRADIENTS, dims, 4, 10));
}

static void
s_write_text (const char *sub, const char *name, const char *text)
{
    FILE *f = s_open (sub, name);
    fputs (text, f);
    fclose (f);
}

static void
s_config_seeds (const char *srcdir)
{
    s_mkdir ("config");
    char dirpath[1024];
    snprintf (dirpath, sizeof dirpath, "%s/configs", srcdir);
    DIR *d = opendir (dirpath);
    if (!d)
        fuzz_die ("%s: %s", dirpath, strerror (errno));
    struct dirent *e;
    while ((e = readdir (d)) != NULL) {
        size_t n = strlen (e->d_name);
        if (n < 6 || strcmp (e->d_name + n - 5, ".json"))
            continue;
        char path[2048];
        snprintf (path, sizeof path, "%s/%s", dirpath, e->d_name);
        FILE *in = fopen (path, "rb");
        if (!in)
            fuzz_die ("%s: %s", path, strerror (errno));
        static char buf[1 << 16];
        size_t got = fread (buf, 1, sizeof buf - 1, in);
        fclose (in);
        buf[got] = 0;
        s_write_text ("config", e->d_name, buf);
    }
    closedir (d);

    pl_config_t cfg;
    pl_config_defaults (&cfg);
    cJSON *json = pl_config_to_json (&cfg);
    char *text = cJSON_Print (json);
    s_write_text ("config", "defaults.json", text);
    cJSON_free (text);
    cJSON_Delete (json);
    //  The reference's key names, "auto" and the alias -1 -> 0 rule.
    s_write_text ("config", "reference-keys.json",
                  "{\"model_name\": \"VGG5\", \"dataset_name\": \"CIFAR-10\",\n"
                  " \"data_size\": 10000, \"test_data_size\": 2000, \"epoch_num\": 2,\n"
                  " \"client_num\": 4, \"layer_num_on_client\": 1, \"pipe_batch_num\": \"auto\",\n"
                  " \"lr\": 0.01, \"aggregate_frequency\": -1, \"thread_num\": -1,\n"
                  " \"partition\": \"dirichlet\", \"dirichlet_alpha\": 0.3, \"seed\": 9007199254740992,\n"
                  " \"weight_decay\": 5e-4, \"augment\": true, \"flip\": false}\n");
}

static void
s_checkpoint_seeds (void)
{
    s_mkdir ("checkpoint");
    char tmpdir[] = "/tmp/pl-fuzz-seeds-XXXXXX";
    if (!mkdtemp (tmpdir))
        fuzz_die ("mkdtemp: %s", strerror (errno));
    for (int i = 0; i < FUZZ_CKPT_MODELS; i++) {
        nn_model_t *model = fuzz_ckpt_model_new (i);
        for (int optim = 0; optim <= 1; optim++) {
            //  Momentum that is not all zero, so the optimiser section has content.
            float *o = nn_model_optim_state (model);
            for (size_t k = 0; k < nn_model_params_count (model); k++)
                o[k] = 0.001f * (float) (k % 13);
            char path[512], err[NN_ERR_SIZE];
            snprintf (path, sizeof path, "%s/m.ckpt", tmpdir);
            if (nn_checkpoint_save (path, model, optim, err, sizeof err))
                fuzz_die ("%s", err);
            FILE *in = fopen (path, "rb");
            static uint8_t buf[1 << 20];
            size_t got = fread (buf, 1, sizeof buf, in);
            fclose (in);
            unlink (path);
            //  The same file with and without the checksum fix-up bit:
            //  mutations of the first keep a valid checksum.
            for (int fix = 0; fix <= 1; fix++) {
                if (fix && optim)
                    continue;
                char name[64];
                snprintf (name, sizeof name, "model%d%s%s.ckpt", i, optim ? "-optim" : "",
                          fix ? "-fixsum" : "");
                FILE *f = s_open ("checkpoint", name);
                fputc (i | (fix ? FUZZ_CKPT_FIX_SUM : 0), f);
                fwrite (buf, 1, got, f);
                fclose (f);
            }
        }
        nn_model_destroy (&model);
    }
    rmdir (tmpdir);
}

//  One valid payload per codec for two shapes (fuzz_codec's layout:
//  dims stored as dim - 1, which the harness maps back with mod 8 + 1),
//  and each codec but none with zstd (NN_CODEC_FLAG_ZSTD: the body one
//  zstd frame, for the fuzzer to reach the frame checks and zstd's
//  decoder).
static void
s_codec_seeds (void)
{
    s_mkdir ("codec");
    nn_codec_shape_t shapes[2] = { { 2, 3, 3, 4 }, { 1, 1, 1, 8 } };
    nn_codec_params_t params[] = { { .id = NN_CODEC_NONE }, { .id = NN_CODEC_FP16 },
                                   { .id = NN_CODEC_INT8 },
                                   { .id = NN_CODEC_INT8, .stochastic = true },
                                   { .id = NN_CODEC_TOPK, .topk_fraction = 0.25 },
                                   { .id = NN_CODEC_FP16, .zstd = true },
                                   { .id = NN_CODEC_INT8, .zstd = true },
                                   { .id = NN_CODEC_TOPK, .topk_fraction = 0.25,
                                     .zstd = true } };
    const int n_params = (int) (sizeof params / sizeof params[0]);
    nn_rng_t rng;
    nn_rng_seed (&rng, 3);
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < n_params; p++) {
            char err[NN_ERR_SIZE];
            nn_codec_encoder_t *enc = nn_codec_encoder_new (&params[p], &shapes[s], err,
                                                            sizeof err);
            if (!enc)
                fuzz_die ("codec seed: %s", err);
            size_t count = (size_t) nn_codec_shape_count (&shapes[s]);
            float *x = s_floats (count, 3.0f);
            size_t bytes = nn_codec_encoder_bytes (enc);
            uint8_t *buf = nn_malloc (bytes);
            if (nn_codec_encode (enc, buf, bytes, x, &rng, err, sizeof err))
                fuzz_die ("codec seed: %s", err);
            char name[64];
            snprintf (name, sizeof name, "%s%s%s-%d", nn_codec_name (params[p].id),
                      params[p].stochastic ? "-stochastic" : "",
                      params[p].zstd ? "-zstd" : "", s);
            FILE *f = s_open ("codec", name);
            uint8_t prefix[FUZZ_CODEC_PREFIX] = {
                (uint8_t) params[p].id, (uint8_t) (shapes[s].n - 1), (uint8_t) (shapes[s].h - 1),
                (uint8_t) (shapes[s].w - 1), (uint8_t) (shapes[s].c - 1) };
            fwrite (prefix, 1, sizeof prefix, f);
            //  With zstd, the encoding's own size (bytes is the capacity).
            fwrite (buf, 1, nn_codec_encoder_last_bytes (enc), f);
            fclose (f);
            nn_free (buf);
            nn_free (x);
            nn_codec_encoder_destroy (&enc);
        }
}

int
main (int argc, char **argv)
{
    if (argc != 3) {
        fprintf (stderr, "usage: fuzz_seeds OUTDIR SRCDIR\n");
        return 2;
    }
    s_out = argv[1];
    if (mkdir (s_out, 0755) && errno != EEXIST)
        fuzz_die ("mkdir %s: %s", s_out, strerror (errno));
    s_proto_seeds ();
    s_config_seeds (argv[2]);
    s_checkpoint_seeds ();
    s_codec_seeds ();
    return 0;
}
