/*  test_wire.c: codecs and privacy noise across the split in the daemons
    (suite 'net'): a real server and two real clients over loopback, VGG5
    at split point 1 on synthetic data (no dataset package needed).

    The bytes each device reports per epoch (summary.json, from its STATS)
    must shrink by exactly what the codec's arithmetic says: against the
    same run with codec none, every ACTIVATIONS (GRADIENTS) data frame of
    4 x count bytes becomes a codec payload of nn_codec_wire_bytes (24-byte
    header included) and nothing else changes, so

        bytes_up(none) - bytes_up(codec) = M x (4 count - wire(codec up))

    with M = iterations x N messages per device and epoch (likewise down).
    The server's periodic HEARTBEATs are kept out of the runs by a long
    heartbeat_s; one it sends when the last slot fills (to check the
    joined devices' connections, PROTOCOL.md) goes to whichever device
    joined first, so a device's bytes_down may differ by one or two
    40-byte headers from run to run: s_expect_bytes allows whole headers
    of difference, at most two, and nothing else. bytes_up is compared
    without the device's EVENTS records, whose count depends on timing
    (s_device_events). Each run must also train (a finite test
    loss below the untrained one) and say in summary.json which codecs and
    which noise each device ran with. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_codec.h"
#include "nn_model.h"
#include "pltest.h"
#include "proto_msg.h"

//  400 samples on 2 devices, batch 20: 10 iterations per device and epoch.
#define ITERATIONS 10
#define BATCH 20
#define TOPK_FRACTION 0.01

static void
s_config (char *out, size_t size, const char *mode, int micro, const char *codec,
          const char *noise)
{
    snprintf (out, size,
              "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, "
              "\"test_samples\": 100, \"batch_size\": %d, \"epochs\": 1, \"seed\": 7, "
              "\"learning_rate\": 0.02, \"split_point\": 1, \"threads\": 1, "
              "\"devices\": 2, \"mode\": \"%s\", \"micro_batches\": %d, "
              "\"heartbeat_s\": 3600, \"measure_link\": false, \"adaptive\": false, "
              "\"topk_fraction\": %g, \"codec\": %s, \"noise\": %s}",
              BATCH, mode, micro, TOPK_FRACTION, codec, noise);
}

//  got equals want up to at most two whole message headers (HEARTBEATs).
static void
s_expect_bytes (double got, double want, const char *what)
{
    double off = fabs (got - want);
    cr_expect (off == 0 || off == PROTO_HEADER_SIZE || off == 2 * PROTO_HEADER_SIZE,
               "%s: %.0f bytes, the codec's arithmetic says %.0f", what, got, want);
}

typedef struct {
    double up[2], down[2];          //  bytes per device, epoch 1
    char codec_up[2][8], codec_down[2][8];
    char noise_kind[2][16];
    double noise_scale[2];
    double test_loss;
} s_result_t;

//  The rows device i shipped in EVENTS (timeline.csv's "deviceI" rows). A
//  pipelearn device records a WAIT each time it blocks for GRADIENTS, and
//  whether it blocks depends on the host's timing, so its EVENTS, counted
//  in bytes_up at PROTO_EVENT_SIZE each, vary from run to run.
static double
s_device_events (const char *dir, const char *sub, int i)
{
    char path[4200], who[16], line[512];
    snprintf (path, sizeof path, "%s/%s/timeline.csv", dir, sub);
    snprintf (who, sizeof who, "device%d,", i);
    FILE *f = fopen (path, "r");
    cr_assert (f, "%s: cannot open", path);
    double rows = 0;
    while (fgets (line, sizeof line, f))
        if (strncmp (line, who, strlen (who)) == 0)
            rows++;
    fclose (f);
    return rows;
}

//  bytes_up and bytes_down of epoch 1 per device; bytes_up without its
//  EVENTS records (s_device_events), which the codecs do not touch.
static s_result_t
s_run (pltest_run_t *run, const char *sub, const char *mode, int micro, const char *codec,
       const char *noise)
{
    char config[1024];
    s_config (config, sizeof config, mode, micro, codec, noise);
    pltest_run_daemons (run, sub, config, 2);
    cJSON *s = pltest_summary (run->dir, sub);
    const cJSON *e = pltest_last_epoch (s);
    s_result_t r = { .test_loss = pltest_num (e, "test_loss") };
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (e, "devices");
    cr_assert_eq (cJSON_GetArraySize (devs), 2, "%s: summary.json devices", sub);
    for (int i = 0; i < 2; i++) {
        const cJSON *d = cJSON_GetArrayItem (devs, i);
        r.up[i] = pltest_num (d, "bytes_up")
                - PROTO_EVENT_SIZE * s_device_events (run->dir, sub, i);
        r.down[i] = pltest_num (d, "bytes_down");
        const char *cu = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (d, "codec_up"));
        const char *cd = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (d,
                                                                                "codec_down"));
        cr_assert (cu && cd, "%s: device %d: no codec_up / codec_down", sub, i);
        snprintf (r.codec_up[i], sizeof r.codec_up[i], "%s", cu);
        snprintf (r.codec_down[i], sizeof r.codec_down[i], "%s", cd);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive (d, "noise");
        const char *kind = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (n, "kind"));
        cr_assert (kind, "%s: device %d: no noise kind", sub, i);
        snprintf (r.noise_kind[i], sizeof r.noise_kind[i], "%s", kind);
        r.noise_scale[i] = pltest_num (n, "scale");
    }
    cJSON_Delete (s);
    return r;
}

//  Elements and channels of one micro-batch's boundary tensor at split 1.
static void
s_boundary (int micro, uint64_t *count, uint32_t *channels)
{
    nn_model_spec_t spec;
    char err[256];
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0,
                  "%s", err);
    nn_shape_t s = nn_model_spec_unit_output (&spec, 0);
    *count = (uint64_t) (BATCH / micro) * (uint64_t) s.h * (uint64_t) s.w * (uint64_t) s.c;
    *channels = (uint32_t) s.c;
}

//  What a codec saves per message against f32 (none travels as f32).
static double
s_saved (nn_codec_id_t id, uint64_t count, uint32_t channels)
{
    if (id == NN_CODEC_NONE)
        return 0.0;
    uint32_t k = id == NN_CODEC_TOPK ? nn_codec_topk_k (count, TOPK_FRACTION) : 0;
    return 4.0 * (double) count - (double) nn_codec_wire_bytes (id, count, channels, k);
}

static void
s_codecs_shrink_bytes (const char *mode, int micro)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "wire");
    uint64_t count;
    uint32_t channels;
    s_boundary (micro, &count, &channels);
    const double messages = (double) ITERATIONS * micro;
    s_result_t none = s_run (&run, "none", mode, micro, "\"none\"", "\"none\"");
    static const struct {
        const char *sub, *json;
        nn_codec_id_t up, down;
    } cases[] = {
        { "fp16", "\"fp16\"", NN_CODEC_FP16, NN_CODEC_FP16 },
        { "int8", "\"int8\"", NN_CODEC_INT8, NN_CODEC_INT8 },
        { "topk", "{\"up\": \"none\", \"down\": \"topk\"}", NN_CODEC_NONE, NN_CODEC_TOPK },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        s_result_t r = s_run (&run, cases[c].sub, mode, micro, cases[c].json, "\"none\"");
        for (int i = 0; i < 2; i++) {
            double want_up = none.up[i] - messages * s_saved (cases[c].up, count, channels);
            double want_down = none.down[i]
                             - messages * s_saved (cases[c].down, count, channels);
            cr_log_info ("%s %s device %d: bytes up %.0f (none %.0f, %.3fx), down %.0f "
                         "(none %.0f, %.3fx)\n", mode, cases[c].sub, i, r.up[i], none.up[i],
                         none.up[i] / r.up[i], r.down[i], none.down[i],
                         none.down[i] / r.down[i]);
            char what[96];
            snprintf (what, sizeof what, "%s %s device %d: bytes_up", mode, cases[c].sub, i);
            s_expect_bytes (r.up[i], want_up, what);
            snprintf (what, sizeof what, "%s %s device %d: bytes_down", mode, cases[c].sub,
                      i);
            s_expect_bytes (r.down[i], want_down, what);
            cr_expect_str_eq (r.codec_up[i], nn_codec_name (cases[c].up));
            cr_expect_str_eq (r.codec_down[i], nn_codec_name (cases[c].down));
            cr_expect_str_eq (r.noise_kind[i], "none");
        }
        cr_expect (isfinite (r.test_loss) && r.test_loss < log (10.0) + 0.5,
                   "%s %s: test loss %g", mode, cases[c].sub, r.test_loss);
    }
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (wire, sfl_codecs_shrink_bytes_by_their_arithmetic, .timeout = 600)
{
    s_codecs_shrink_bytes ("sfl", 1);
}

Test (wire, pipelearn_codecs_shrink_bytes_by_their_arithmetic, .timeout = 600)
{
    s_codecs_shrink_bytes ("pipelearn", 2);
}

//  Per-device codecs and noise: device 0 int8 up / topk down with Laplace
//  noise, device 1 fp16 both ways without; each device's bytes follow its
//  own codecs, and summary.json records each device's codecs and noise.
//  The same seed gives the same model (the noise streams are seeded).
Test (wire, per_device_codecs_and_noise, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "wire");
    uint64_t count;
    uint32_t channels;
    s_boundary (2, &count, &channels);
    const double messages = (double) ITERATIONS * 2;
    const char *codec = "[{\"up\": \"int8\", \"down\": \"topk\"}, \"fp16\"]";
    const char *noise = "[{\"kind\": \"laplace\", \"scale\": 0.05}, \"none\"]";
    s_result_t none = s_run (&run, "none", "pipelearn", 2, "\"none\"", "\"none\"");
    s_result_t r = s_run (&run, "mixed", "pipelearn", 2, codec, noise);
    s_result_t again = s_run (&run, "again", "pipelearn", 2, codec, noise);
    const nn_codec_id_t up[2] = { NN_CODEC_INT8, NN_CODEC_FP16 };
    const nn_codec_id_t down[2] = { NN_CODEC_TOPK, NN_CODEC_FP16 };
    for (int i = 0; i < 2; i++) {
        char what[64];
        snprintf (what, sizeof what, "device %d: bytes_up", i);
        s_expect_bytes (r.up[i], none.up[i] - messages * s_saved (up[i], count, channels),
                        what);
        snprintf (what, sizeof what, "device %d: bytes_down", i);
        s_expect_bytes (r.down[i], none.down[i] - messages * s_saved (down[i], count, channels),
                        what);
        cr_expect_str_eq (r.codec_up[i], nn_codec_name (up[i]));
        cr_expect_str_eq (r.codec_down[i], nn_codec_name (down[i]));
    }
    cr_expect_str_eq (r.noise_kind[0], "laplace");
    cr_expect_eq (r.noise_scale[0], 0.05);
    cr_expect_str_eq (r.noise_kind[1], "none");
    cr_expect_eq (r.noise_scale[1], 0.0);
    nn_model_t *a = pltest_load_model (run.dir, "mixed", "vgg5");
    nn_model_t *b = pltest_load_model (run.dir, "again", "vgg5");
    nn_model_t *c = pltest_load_model (run.dir, "none", "vgg5");
    cr_assert (a && b && c, "a final checkpoint does not load");
    cr_expect_eq (pltest_max_rel_diff (a, b), 0.0, "two runs of one seed with noise differ");
    cr_expect (pltest_max_rel_diff (a, c) > 0.0, "noise and codecs changed nothing");
    (void) again;
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    nn_model_destroy (&c);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

//  A planned run: the devices profile, the server plans (its estimates
//  with the codecs' bytes and its measured codec speeds) and sends each
//  device a PLAN, which carries the codecs on. A PLAN that lost them would
//  have the device send f32 where int8 is due and be dropped; the run
//  must instead finish with both devices, in int8 both ways.
Test (wire, a_planned_run_keeps_the_codecs, .timeout = 600)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "wire");
    char config[1024];
    snprintf (config, sizeof config,
              "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, "
              "\"test_samples\": 100, \"batch_size\": %d, \"epochs\": 1, \"seed\": 7, "
              "\"split_point\": \"auto\", \"micro_batches\": \"auto\", \"threads\": 1, "
              "\"devices\": 2, \"mode\": \"pipelearn\", \"measure_link\": false, "
              "\"adaptive\": false, \"codec\": \"int8\"}", BATCH);
    pltest_run_daemons (&run, "planned", config, 2);
    cr_expect (pltest_log_has (&run, "server.log", "codec speeds of this host"),
               "the planner did not measure its codec speeds");
    cJSON *s = pltest_summary (run.dir, "planned");
    const cJSON *e = pltest_last_epoch (s);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (e, "devices");
    for (int i = 0; i < 2; i++) {
        const cJSON *d = cJSON_GetArrayItem (devs, i);
        cr_expect (cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (d, "active")),
                   "device %d left the run", i);
        cr_expect_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (d,
                                                                          "codec_up")), "int8");
        cr_expect_eq (pltest_num (d, "samples"), 200.0, "device %d trained its shard", i);
    }
    cJSON_Delete (s);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
