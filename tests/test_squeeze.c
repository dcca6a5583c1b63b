/*  test_squeeze: zstd's ratios at the split points (nn_squeeze) and how the
    planner uses them (nn_estimate): the bytes it expects with zstd, and
    codec auto's margin on the links (docs/planner.md "zstd",
    docs/codecs.md "auto").
*/
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_codec.h"
#include "nn_estimate.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_rng.h"
#include "nn_squeeze.h"

enum { S_N = 20 };

//  Inputs that look like normalised images: smooth blobs, not noise.
static void
s_images (float *x, int *y, const nn_model_spec_t *spec, int n)
{
    nn_shape_t in = nn_model_spec_input (spec);
    nn_rng_t rng;
    nn_rng_seed (&rng, 42);
    for (int i = 0; i < n; i++) {
        double cx = in.w * nn_rng_uniform (&rng), cy = in.h * nn_rng_uniform (&rng);
        for (int r = 0; r < in.h; r++)
            for (int c = 0; c < in.w; c++)
                for (int k = 0; k < in.c; k++) {
                    double d2 = (r - cy) * (r - cy) + (c - cx) * (c - cx);
                    x[(((size_t) i * in.h + r) * in.w + c) * in.c + k]
                        = (float) (2.5 * exp (-d2 / 30.0) - 0.8);
                }
        y[i] = (int) nn_rng_below (&rng, (uint32_t) spec->classes);
    }
}

//  Body bytes of t (n x shape of unit u's output) in codec, plain and zstd.
static double
s_ratio_of (const float *t, nn_shape_t s, int n, nn_codec_id_t codec)
{
    nn_codec_shape_t shape = { (uint32_t) n, (uint32_t) s.h, (uint32_t) s.w, (uint32_t) s.c };
    double body[2];
    for (int z = 0; z < 2; z++) {
        nn_codec_params_t params = { .id = codec, .zstd = z == 1 };
        char err[NN_ERR_SIZE];
        nn_codec_encoder_t *enc = nn_codec_encoder_new (&params, &shape, err, sizeof err);
        cr_assert_not_null (enc, "%s", err);
        size_t bytes = nn_codec_encoder_bytes (enc);
        uint8_t *wire = nn_malloc (bytes);
        cr_assert_eq (nn_codec_encode (enc, wire, bytes, t, NULL, err, sizeof err), 0, "%s", err);
        body[z] = (double) (nn_codec_encoder_last_bytes (enc) - NN_CODEC_HEADER_BYTES);
        nn_free (wire);
        nn_codec_encoder_destroy (&enc);
    }
    return body[1] / body[0];
}

//  The ratios at split point p computed another way: the device part
//  [0, p) and the server part [p, U) as whole models, as the daemons run
//  them (weights from the same seed).
static void
s_check_split (const nn_model_spec_t *spec, const nn_squeeze_t *q, const float *x,
               const int *y, int p, uint64_t seed)
{
    char err[NN_ERR_SIZE];
    nn_model_t *dev = nn_model_new (spec, 0, p, S_N, err, sizeof err);
    nn_model_t *srv = nn_model_new (spec, p, spec->units_count, S_N, err, sizeof err);
    cr_assert (dev && srv, "%s", err);
    nn_rng_t seeded;
    nn_rng_seed (&seeded, seed);
    nn_model_init (dev, &seeded);
    nn_model_init (srv, &seeded);
    const float *a = nn_model_forward (dev, x, S_N, true, NULL);
    nn_shape_t s = nn_model_output_shape (dev);
    for (int c = NN_CODEC_FP16; c <= NN_CODEC_INT8; c++)
        cr_assert_float_eq (q->ratio[p - 1][nn_squeeze_kind (c, true)],
                            s_ratio_of (a, s, S_N, (nn_codec_id_t) c), 1e-12,
                            "split %d %s up", p, nn_codec_name ((nn_codec_id_t) c));
    const float *logits = nn_model_forward (srv, a, S_N, true, NULL);
    float *dl = nn_malloc (sizeof (float) * S_N * (size_t) spec->classes);
    float *g = nn_malloc (sizeof (float) * S_N * nn_shape_size (s));
    nn_softmax_xent (dl, logits, y, S_N, spec->classes, 1.0f, NULL);
    nn_model_backward (srv, dl, g);
    for (int c = NN_CODEC_FP16; c <= NN_CODEC_INT8; c++)
        cr_assert_float_eq (q->ratio[p - 1][nn_squeeze_kind (c, false)],
                            s_ratio_of (g, s, S_N, (nn_codec_id_t) c), 1e-12,
                            "split %d %s down", p, nn_codec_name ((nn_codec_id_t) c));
    nn_free (dl);
    nn_free (g);
    nn_model_destroy (&dev);
    nn_model_destroy (&srv);
}

//  The named model on 28x28x1, S_N images and labels (x returned, the
//  caller frees it), measured with weights from seed into q.
static float *
s_measure (nn_model_spec_t *spec, const char *name, int *y, uint64_t seed, nn_squeeze_t *q)
{
    char err[NN_ERR_SIZE];
    cr_assert_eq (nn_model_spec_by_name (spec, name, 1, 28, 28, 10, err, sizeof err), 0);
    size_t sample = nn_shape_size (nn_model_spec_input (spec));
    float *x = nn_malloc (sizeof (float) * sample * S_N);
    s_images (x, y, spec, S_N);
    cr_assert_eq (nn_squeeze_measure (q, spec, x, y, S_N, seed, false, 1, err, sizeof err), 0,
                  "%s", err);
    return x;
}

Test (squeeze, vgg5_ratios_are_the_tensors_at_each_split_point)
{
    nn_model_spec_t spec;
    char err[NN_ERR_SIZE];
    int y[S_N];
    nn_squeeze_t q;
    float *x = s_measure (&spec, "vgg5", y, 7, &q);
    cr_assert_eq (q.boundaries, 4);
    for (int p = 1; p <= 4; p++) {
        for (int k = 0; k < NN_SQUEEZE_KINDS; k++)
            cr_assert (q.ratio[p - 1][k] > 0.0 && q.ratio[p - 1][k] <= NN_SQUEEZE_RATIO_MAX,
                       "split %d kind %d: %g", p, k, q.ratio[p - 1][k]);
        s_check_split (&spec, &q, x, y, p, 7);
    }
    //  A ReLU and a max-pool leave zeros that zstd removes from int8.
    cr_assert_lt (q.ratio[0][NN_SQUEEZE_INT8_UP], 0.9, "int8 up at split 1: %g",
                  q.ratio[0][NN_SQUEEZE_INT8_UP]);
    //  The same inputs and seed, the same ratios.
    nn_squeeze_t again;
    cr_assert_eq (nn_squeeze_measure (&again, &spec, x, y, S_N, 7, false, 1, err, sizeof err),
                  0);
    cr_assert (memcmp (&q, &again, sizeof q) == 0);
    //  Stochastic int8 rounding measures too (fp16 is not affected).
    cr_assert_eq (nn_squeeze_measure (&again, &spec, x, y, S_N, 7, true, 1, err, sizeof err),
                  0);
    cr_assert_eq (again.ratio[1][NN_SQUEEZE_FP16_UP], q.ratio[1][NN_SQUEEZE_FP16_UP]);
    cr_assert (again.ratio[1][NN_SQUEEZE_INT8_UP] > 0.0);
    nn_free (x);
}

Test (squeeze, resnet18_measures_every_split_point)
{
    nn_model_spec_t spec;
    int y[S_N];
    nn_squeeze_t q;
    float *x = s_measure (&spec, "resnet18", y, 3, &q);
    cr_assert_eq (q.boundaries, spec.units_count - 1);
    s_check_split (&spec, &q, x, y, 1, 3);
    s_check_split (&spec, &q, x, y, 5, 3);
    nn_free (x);
}

Test (squeeze, refuses_bad_input)
{
    nn_model_spec_t spec;
    char err[NN_ERR_SIZE];
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0);
    float x[28 * 28] = { 0 };
    int y[1] = { 0 };
    nn_squeeze_t q;
    cr_assert_eq (nn_squeeze_measure (&q, &spec, x, y, 0, 1, false, 1, err, sizeof err), -1);
    cr_assert (strstr (err, "0 samples"), "%s", err);
    //  An invalid spec: a message, no ratios.
    spec.units_count = 0;
    cr_assert_eq (nn_squeeze_measure (&q, &spec, x, y, 1, 1, false, 1, err, sizeof err), -1);
    cr_assert_eq (q.boundaries, 0);
    cr_assert_eq (nn_squeeze_kind (NN_CODEC_TOPK, false), -1);
    cr_assert_eq (nn_squeeze_kind (NN_CODEC_NONE, true), -1);
}

//  ---------------------------------------------------------------------
//  The planner

typedef struct {
    nn_estimate_input_t in;
    nn_estimate_device_t dev[1];
    nn_estimate_codec_t codec[1];
} s_case_t;

static nn_estimate_codec_speed_t
s_speed (void)
{
    nn_estimate_codec_speed_t sp = { { 0 }, { 0 } };
    for (int c = NN_CODEC_FP16; c < NN_CODEC_COUNT; c++)
        sp.encode_Bps[c] = sp.decode_Bps[c] = 1e12;     //  codecs as good as free
    return sp;
}

//  VGG5 at batch 100 on 28x28, one device at 10% of a core, links in
//  Mbit/s, codecs as given.
static void
s_case (s_case_t *c, double up_mbps, double down_mbps, int up, int down, bool zstd)
{
    memset (c, 0, sizeof *c);
    nn_estimate_input_t *in = &c->in;
    const double outs[5] = { 100 * 14 * 14 * 32 * 4.0, 100 * 7 * 7 * 64 * 4.0,
                             100 * 7 * 7 * 64 * 4.0, 100 * 128 * 4.0, 100 * 10 * 4.0 };
    const int channels[5] = { 32, 64, 64, 128, 10 };
    in->model.units_count = in->server.units_count = 5;
    for (int u = 0; u < 5; u++) {
        in->model.out_bytes[u] = outs[u];
        in->model.out_channels[u] = channels[u];
        in->model.param_bytes[u] = 100.0;
        in->server.unit[u] = (nn_estimate_unit_cost_t) { .fwd_s = 0.002, .bwd_s = 0.004 };
    }
    in->model.label_bytes = 400.0;
    in->server_workers = 1;
    in->batch_size = 100;
    in->iterations = 100;
    in->aggregation_frequency = -1;
    in->devices_count = 1;
    in->devices = c->dev;
    c->dev[0].costs = in->server;
    for (int u = 0; u < 5; u++) {
        c->dev[0].costs.unit[u].fwd_s *= 10.0;
        c->dev[0].costs.unit[u].bwd_s *= 10.0;
    }
    c->dev[0].uplink_Bps = nn_estimate_link_payload_Bps (up_mbps);
    c->dev[0].downlink_Bps = nn_estimate_link_payload_Bps (down_mbps);
    c->dev[0].rtt_s = 0.06;
    in->server_codec = s_speed ();
    c->codec[0] = (nn_estimate_codec_t) { .up = up, .down = down, .speed = s_speed (),
                                          .zstd = zstd };
    in->codecs = c->codec;
}

static void
s_set_ratios (nn_squeeze_t *q, double up, double down)
{
    q->boundaries = 4;
    for (int b = 0; b < 4; b++) {
        q->ratio[b][NN_SQUEEZE_FP16_UP] = q->ratio[b][NN_SQUEEZE_INT8_UP] = up;
        q->ratio[b][NN_SQUEEZE_FP16_DOWN] = q->ratio[b][NN_SQUEEZE_INT8_DOWN] = down;
    }
}

Test (squeeze, planner_bytes_shrink_by_the_measured_ratio)
{
    s_case_t c;
    s_case (&c, 10, 25, NN_CODEC_INT8, NN_CODEC_FP16, true);
    s_set_ratios (&c.codec[0].squeeze, 0.5, 0.8);
    c.codec[0].squeeze.ratio[1][NN_SQUEEZE_INT8_UP] = 0.25;     //  split point 2 only
    nn_estimate_stages_t st;
    double share = nn_estimate_server_share (&c.in);
    uint64_t count = 25 * 7 * 7 * 64;       //  a micro-batch of 25 at split point 2
    double int8 = (double) nn_codec_wire_bytes (NN_CODEC_INT8, count, 64, 0);
    double fp16 = (double) nn_codec_wire_bytes (NN_CODEC_FP16, count, 64, 0);
    double h = NN_CODEC_HEADER_BYTES;
    nn_estimate_iteration_codecs (&c.in, 0, 2, 4, share, NN_CODEC_INT8, NN_CODEC_FP16, &st);
    cr_assert_float_eq (st.bytes_up, 4 * (h + (int8 - h) * 0.25 + 100.0), 1e-6);
    cr_assert_float_eq (st.bytes_down, 4 * (h + (fp16 - h) * 0.8), 1e-6);
    //  Without zstd the ratios do not apply; none never has them.
    c.codec[0].zstd = false;
    nn_estimate_iteration_codecs (&c.in, 0, 2, 4, share, NN_CODEC_INT8, NN_CODEC_FP16, &st);
    cr_assert_float_eq (st.bytes_up, 4 * (int8 + 100.0), 1e-6);
    c.codec[0].zstd = true;
    nn_estimate_iteration_codecs (&c.in, 0, 2, 4, share, NN_CODEC_NONE, NN_CODEC_NONE, &st);
    cr_assert_float_eq (st.bytes_up, 4 * (4.0 * count + 100.0), 1e-6);
    //  Nothing measured: ratio 1.
    memset (&c.codec[0].squeeze, 0, sizeof c.codec[0].squeeze);
    nn_estimate_iteration_codecs (&c.in, 0, 2, 4, share, NN_CODEC_INT8, NN_CODEC_FP16, &st);
    cr_assert_float_eq (st.bytes_up, 4 * (int8 + 100.0), 1e-6);
}

Test (squeeze, planner_moves_the_split_where_zstd_saves_more)
{
    //  On a 4g uplink int8 at split point 1 (unit 0's 627 KB) loses to
    //  split point 2 (314 KB); if zstd shrinks split point 1's tensor to a
    //  fifth and the others not at all, split point 1 is the faster plan.
    s_case_t c;
    s_case (&c, 10, 25, NN_CODEC_INT8, NN_CODEC_INT8, true);
    char err[NN_ERR_SIZE];
    nn_estimate_t *plan = nn_estimate_new (&c.in, err, sizeof err);
    cr_assert_not_null (plan, "%s", err);
    cr_assert_neq (nn_estimate_chosen (plan, 0)->split_point, 1);
    nn_estimate_destroy (&plan);
    s_set_ratios (&c.codec[0].squeeze, 1.0, 1.0);
    c.codec[0].squeeze.ratio[0][NN_SQUEEZE_INT8_UP] = 0.2;
    c.codec[0].squeeze.ratio[0][NN_SQUEEZE_INT8_DOWN] = 0.2;
    plan = nn_estimate_new (&c.in, err, sizeof err);
    cr_assert_not_null (plan, "%s", err);
    cr_assert_eq (nn_estimate_chosen (plan, 0)->split_point, 1);
    nn_estimate_destroy (&plan);
}

Test (squeeze, planner_checks_the_ratios)
{
    s_case_t c;
    s_case (&c, 10, 25, NN_CODEC_INT8, NN_CODEC_INT8, true);
    char err[NN_ERR_SIZE];
    s_set_ratios (&c.codec[0].squeeze, 0.5, 0.5);
    c.codec[0].squeeze.boundaries = 3;
    cr_assert_neq (nn_estimate_check (&c.in, err, sizeof err), 0);
    cr_assert (strstr (err, "zstd ratios for 3 split points"), "%s", err);
    s_set_ratios (&c.codec[0].squeeze, 0.5, 0.5);
    c.codec[0].squeeze.ratio[2][NN_SQUEEZE_FP16_DOWN] = 0.0;
    cr_assert_neq (nn_estimate_check (&c.in, err, sizeof err), 0);
    cr_assert (strstr (err, "zstd ratio 0 at split point 3"), "%s", err);
    c.codec[0].squeeze.ratio[2][NN_SQUEEZE_FP16_DOWN] = NAN;
    cr_assert_neq (nn_estimate_check (&c.in, err, sizeof err), 0);
    c.codec[0].squeeze.ratio[2][NN_SQUEEZE_FP16_DOWN] = 0.9;
    cr_assert_eq (nn_estimate_check (&c.in, err, sizeof err), 0, "%s", err);
}

Test (squeeze, codec_auto_keeps_a_lossier_codec_where_the_link_has_no_margin)
{
    //  Split point 2 and 50 micro-batches pinned, int8 up (the uplink
    //  binds). Down: fp16's bytes fit the measured 25 Mbit/s downlink
    //  beside the uplink's transfer (so at the measured rates fp16 costs
    //  next to nothing and, less lossy, would win), but not at half of it:
    //  auto keeps int8.
    s_case_t c;
    s_case (&c, 10, 25, NN_CODEC_INT8, NN_ESTIMATE_CODEC_AUTO, false);
    c.in.split_point = 2;
    c.in.micro_batches = 50;
    char err[NN_ERR_SIZE];
    nn_estimate_t *plan = nn_estimate_new (&c.in, err, sizeof err);
    cr_assert_not_null (plan, "%s", err);
    const nn_estimate_candidate_t *k = nn_estimate_chosen (plan, 0);
    double share = nn_estimate_server_share (&c.in);
    double t_fp16 = nn_estimate_iteration_codecs (&c.in, 0, 2, 50, share, NN_CODEC_INT8,
                                                  NN_CODEC_FP16, NULL);
    double t_int8 = nn_estimate_iteration_codecs (&c.in, 0, 2, 50, share, NN_CODEC_INT8,
                                                  NN_CODEC_INT8, NULL);
    cr_assert_lt (t_fp16, t_int8 * 1.01, "the case: fp16 down near int8 at the measured rates "
                  "(%g s, %g s)", t_fp16, t_int8);
    cr_assert_eq (k->codec_down, NN_CODEC_INT8, "down %s", nn_codec_name (k->codec_down));
    nn_estimate_destroy (&plan);
    //  With a downlink twice as fast, fp16 has the margin and is kept;
    //  eight times, none (exact) has it.
    const double faster[2] = { 2.0, 4.0 };
    const int want[2] = { NN_CODEC_FP16, NN_CODEC_NONE };
    for (int k = 0; k < 2; k++) {
        c.dev[0].downlink_Bps *= faster[k];
        plan = nn_estimate_new (&c.in, err, sizeof err);
        cr_assert_not_null (plan, "%s", err);
        cr_assert_eq (nn_estimate_chosen (plan, 0)->codec_down, want[k], "down x%g: %s",
                      k ? 8.0 : 2.0, nn_codec_name (nn_estimate_chosen (plan, 0)->codec_down));
        nn_estimate_destroy (&plan);
    }
}
