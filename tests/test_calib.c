/*  test_calib.c: the BN statistics re-estimated after each epoch (config
    "bn_calibration_batches" R; PROTOCOL.md, "Calibration"; suite 'net'):
    a real server and real clients over loopback, VGG5 (BN in each of its
    three conv units) on synthetic data.

    After an epoch's last aggregation every device forwards R mini-batches
    of its shard through the averaged weights in training mode, each batch
    weighing the same in the running statistics, and the server pools each
    BN layer's over the devices as the mixture of their shards. So:

    - The split points do not matter: a device's calibration runs the
      same micro-batches through the same averaged units wherever they
      are cut (units below P on the device, the rest on the server's copy),
      so a run at "split_point": [1, 3] equals the run at 2 for every
      device to float rounding over the whole weights slab, running
      statistics included (sfl, N = 1, and pipelearn, N = 1 and 2: each
      mini-batch is one calibration forward on both sides, the server
      gathering its micro-batches). The same run
      without calibration ends with other running statistics (calibration
      happened) and the very same trainable parameters: training never
      reads running statistics, and calibration draws its samples from a
      stream of its own (VGG5 has no dropout), so the training trajectory
      is untouched.
    - The statistics are the shards' mixture. The first BN layer normalises
      the first conv's output, which does not depend on how samples are
      grouped into batches: when each shard is exactly R batches (200
      samples, 2 contiguous shards of 100, batches of 20, R = 5) every
      sample is forwarded once and the pooled running mean is the mean of
      that conv's output over the whole training set under the final
      weights (fl, sfl at split point 1 and sl). Deeper layers see inputs
      normalised per batch; with one batch per shard (batches of 100,
      R = 1) every layer's running mean and (unbiased, per shard) variance
      on a device is that of a training-mode forward of its whole shard,
      and the final model holds, for every BN layer, mean = sum w_j m_j / W
      and var = sum w_j (v_j + m_j^2) / W - mean^2 over the two shards
      (fl, and sfl at split point 1, where units 1-2's BN statistics come
      from the server's own forward of the device's activations). Both
      again with Dirichlet shards of 40 and 160 samples (weights 1:4;
      batches of 40 with R = 4, and one batch of 160): a shard smaller than
      R x B is gone through again, reshuffled each pass, so when R x B is a
      multiple of it each of its samples weighs the same, and the expected
      statistics are those of the shard repeated.
    - summary.json's epoch entries say what it took: "calibration_s" > 0
      in each epoch of a run with R > 0 (fl, sfl, sl, pipelearn), and the
      server logs each one; 0 and no such line with R = 0, or for a model
      without BN (vgg5-nobn) whatever R is.
    Synthetic data (no dataset package needed). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_dataset.h"
#include "pltest.h"

#define CALIB_SEED 11
//  Dirichlet shards of 40 and 160 of the 200 samples at this seed and
//  alpha (the devices log their shard's size; the test checks it).
#define CALIB_DIRICHLET_SEED 63
#define CALIB_DIRICHLET_ALPHA 0.3
//  The final model's statistics against the shards' recomputed here: float
//  sums in another order (observed: below 1e-7 of each layer's largest
//  value).
#define CALIB_TOL 1e-5

typedef struct {
    const char *mode;
    const char *model;          //  "vgg5" unless set
    const char *split;          //  "split_point" (split modes); "1" unless set
    int samples, batch, epochs, micro, calib;
    bool dirichlet;             //  "partition": "dirichlet" (else contiguous)
} s_cfg_t;

static int
s_seed (const s_cfg_t *c)
{
    return c->dirichlet ? CALIB_DIRICHLET_SEED : CALIB_SEED;
}

static void
s_config (char *out, size_t size, const s_cfg_t *c)
{
    bool fl = strcmp (c->mode, "fl") == 0;
    char split[64] = "";
    if (!fl)
        snprintf (split, sizeof split, "\"split_point\": %s, \"micro_batches\": %d, ",
                  c->split ? c->split : "1", c->micro > 0 ? c->micro : 1);
    //  FedAvg twice an epoch when an epoch has 10 iterations (test 1).
    char agg[64] = "";
    if (c->samples / 2 / c->batch == 10)
        snprintf (agg, sizeof agg, "\"aggregation_frequency\": 5, ");
    char part[96] = "";
    if (c->dirichlet)
        snprintf (part, sizeof part, "\"partition\": \"dirichlet\", \"dirichlet_alpha\": %g, ",
                  CALIB_DIRICHLET_ALPHA);
    snprintf (out, size,
              "{\"model\": \"%s\", \"dataset\": \"synthetic\", \"samples\": %d, "
              "\"test_samples\": 50, \"batch_size\": %d, \"epochs\": %d, \"seed\": %d, "
              "\"learning_rate\": 0.02, \"momentum\": 0.9, %s%s%s"
              "\"threads\": 1, \"devices\": 2, \"mode\": \"%s\", "
              "\"bn_calibration_batches\": %d}",
              c->model ? c->model : "vgg5", c->samples, c->batch, c->epochs, s_seed (c),
              split, agg, part, c->mode, c->calib);
}

//  summary.json and server.log of the run just finished say whether a
//  calibration ran in each epoch (want: R > 0 and the model has BN).
static void
s_expect_recorded (pltest_run_t *run, const char *sub, const s_cfg_t *c, bool want)
{
    cJSON *s = pltest_summary (run->dir, sub);
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), c->epochs, "%s: summary.json epochs", sub);
    for (int e = 0; e < c->epochs; e++) {
        const cJSON *ej = cJSON_GetArrayItem (epochs, e);
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive (ej, "calibration_s");
        //  Absent counts as 0 where nothing ran.
        cr_assert (!cs || cJSON_IsNumber (cs), "%s: epoch %d: calibration_s", sub, e + 1);
        double v = cs ? cs->valuedouble : 0.0;
        if (want) {
            cr_expect (cs && v > 0.0, "%s: epoch %d: calibration_s %g, want > 0", sub, e + 1,
                       v);
            cr_expect (v < pltest_num (ej, "wall_s"),
                       "%s: epoch %d: calibration_s %g is not part of wall_s %g", sub, e + 1,
                       v, pltest_num (ej, "wall_s"));
        }
        else
            cr_expect (v == 0.0, "%s: epoch %d: calibration_s %g, want 0", sub, e + 1, v);
        char line[160];
        snprintf (line, sizeof line, "server: epoch %d: BN statistics of 3 layer(s) "
                  "re-estimated on 2 device(s) x %d batch(es)", e + 1, c->calib);
        if (want)
            cr_expect (pltest_log_has (run, "server.log", line), "%s: no \"%s\" in the "
                       "server's log", sub, line);
    }
    if (!want) {
        cr_expect (!pltest_log_has (run, "server.log", "re-estimated"),
                   "%s: the server logged a calibration", sub);
        for (int i = 0; i < 2; i++) {
            char log[32];
            snprintf (log, sizeof log, "client%d.log", i);
            cr_expect (!pltest_log_has (run, log, "re-estimated"),
                       "%s: device %d logged a calibration", sub, i);
        }
    }
    cJSON_Delete (s);
}

//  The run of c in DIR/sub, its summary and logs checked; its final model
//  (the caller destroys it).
static nn_model_t *
s_run (pltest_run_t *run, const char *sub, const s_cfg_t *c)
{
    char config[1024];
    s_config (config, sizeof config, c);
    pltest_run_daemons (run, sub, config, 2);
    const char *model = c->model ? c->model : "vgg5";
    s_expect_recorded (run, sub, c, c->calib > 0 && strcmp (model, "vgg5-nobn") != 0);
    nn_model_t *m = pltest_load_model (run->dir, sub, model);
    cr_assert_not_null (m, "%s: the final checkpoint does not load", sub);
    return m;
}

//  Largest |a - b| / (1 + |a|) over floats [from, to) of the slabs.
static double
s_rel_diff (const nn_model_t *a, const nn_model_t *b, size_t from, size_t to)
{
    const float *wa = nn_model_weights_const (a), *wb = nn_model_weights_const (b);
    double worst = 0.0;
    for (size_t i = from; i < to; i++) {
        double d = fabs ((double) wa[i] - wb[i]) / (1.0 + fabs ((double) wa[i]));
        if (!(d <= worst))
            worst = d;
    }
    return worst;
}

//  ---------------------------------------------------------------------
//  1. The split points do not matter; calibration touches only the
//  running statistics.

static void
s_split_free (const char *mode, int micro)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "calib");
    s_cfg_t c = { .mode = mode, .split = "[1, 3]", .samples = 400, .batch = 20,
                  .epochs = 2, .micro = micro, .calib = 3 };
    nn_model_t *mixed = s_run (&run, "mixed", &c);
    c.split = "2";
    nn_model_t *one = s_run (&run, "one", &c);
    c.split = "[1, 3]";
    c.calib = 0;
    nn_model_t *off = s_run (&run, "off", &c);
    size_t params = nn_model_params_count (mixed), all = nn_model_weights_count (mixed);
    cr_assert_eq (all, nn_model_weights_count (one));
    cr_assert (all > params, "VGG5 has BN buffers");

    double d = s_rel_diff (mixed, one, 0, all);
    double db = s_rel_diff (mixed, one, params, all);
    cr_log_info ("%s: calibrated, split points [1, 3] against 2: largest relative "
                 "difference %g (running statistics %g)\n", mode, d, db);
    cr_expect (d < 1e-5, "%s: calibrated, the model at split points [1, 3] differs from "
               "the one at 2 by %g (running statistics: %g)", mode, d, db);

    //  Without calibration: other running statistics, the same parameters.
    double stats = s_rel_diff (mixed, off, params, all);
    double trained = s_rel_diff (mixed, off, 0, params);
    cr_log_info ("%s: calibrated against not: running statistics %g, parameters %g\n",
                 mode, stats, trained);
    cr_expect (stats > 1e-2, "%s: the running statistics with and without calibration "
               "differ by only %g", mode, stats);
    cr_expect (memcmp (nn_model_weights_const (mixed), nn_model_weights_const (off),
                       sizeof (float) * params) == 0,
               "%s: the calibration changed the trained parameters (largest relative "
               "difference %g)", mode, trained);
    nn_model_destroy (&mixed);
    nn_model_destroy (&one);
    nn_model_destroy (&off);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (calib, sfl_split_points_do_not_matter, .timeout = 300)
{
    s_split_free ("sfl", 1);
}

Test (calib, pipelearn_split_points_do_not_matter, .timeout = 300)
{
    s_split_free ("pipelearn", 1);
}

Test (calib, pipelearn_micro_batches_split_points_do_not_matter, .timeout = 300)
{
    s_split_free ("pipelearn", 2);
}

//  ---------------------------------------------------------------------
//  2. The statistics are the mixture of the shards'.

//  The run's training set and device d's shard of it, as a batch x
//  (total, 28, 28, 1) the caller frees: the shard `total / count` times
//  over (total 0: once); its size in *count. Dirichlet shards are drawn as
//  the devices draw them (client/cli_main.c: the seed's stream 2000, the
//  same state for every device).
static float *
s_shard (const s_cfg_t *c, int d, int *count, int total)
{
    char err[256];
    nn_dataset_t *ds = nn_dataset_load_named ("synthetic", NULL, true, c->samples, err,
                                              sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, c->samples);
    nn_rng_t seed, rng;
    nn_rng_seed (&seed, (uint64_t) s_seed (c));
    rng = nn_rng_split (&seed, 2000);
    int *idx = nn_dataset_shard (ds, c->dirichlet ? NN_PARTITION_DIRICHLET
                                                  : NN_PARTITION_CONTIGUOUS,
                                 2, d, c->samples, CALIB_DIRICHLET_ALPHA, &rng, count, err,
                                 sizeof err);
    cr_assert_not_null (idx, "%s", err);
    total = total > 0 ? total : *count;
    cr_assert (total % *count == 0, "device %d's shard is %d samples, which %d samples do "
               "not go through equally often", d, *count, total);
    size_t image = (size_t) ds->h * ds->w * ds->c;
    float *x = malloc (sizeof (float) * image * (size_t) total);
    int *y = malloc (sizeof (int) * (size_t) *count);
    cr_assert (x && y);
    for (int at = 0; at < total; at += *count)
        nn_dataset_batch (x + image * (size_t) at, y, ds, idx, *count, NULL, NULL);
    free (y);
    free (idx);
    nn_dataset_destroy (&ds);
    return x;
}

//  Units [0, units) of final, holding the running statistics of one
//  training-mode forward of device d's shard as one batch of `total` (0:
//  the shard once; see s_shard), momentum 1: the batch's own. Its shard
//  size in *count, which must be the one device d logged. The caller
//  destroys it.
static nn_model_t *
s_shard_stats (pltest_run_t *run, const nn_model_t *final, int units, const s_cfg_t *c,
               int d, int *count, int total)
{
    char err[256];
    float *x = s_shard (c, d, count, total);
    total = total > 0 ? total : *count;
    //  The shard drawn here is the device's.
    char log[32], line[64];
    snprintf (log, sizeof log, "client%d.log", d);
    snprintf (line, sizeof line, "device %d: %d samples,", d, *count);
    cr_assert (pltest_log_has (run, log, line), "%s: device %d's shard is not the %d "
               "samples drawn here", c->mode, d, *count);
    nn_model_t *m = nn_model_new (nn_model_spec (final), 0, units, total, err, sizeof err);
    cr_assert_not_null (m, "%s", err);
    cr_assert (nn_model_copy_tensors (m, final) > 0);
    nn_model_set_bn_momentum (m, 1.0f);
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    nn_model_forward (m, x, total, true, &rng);
    free (x);
    return m;
}

//  Tensor `name` of m: its floats, and their count in *count; NULL if none.
static const float *
s_tensor (const nn_model_t *m, const char *name, size_t *count)
{
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        if (strcmp (info.name, name) == 0) {
            *count = info.count;
            return nn_model_weights_const (m) + info.offset;
        }
    }
    return NULL;
}

static bool
s_ends_with (const char *s, const char *suffix)
{
    size_t n = strlen (s), k = strlen (suffix);
    return n >= k && strcmp (s + n - k, suffix) == 0;
}

//  Compares got (c) with want (c): the largest |got - want| over the
//  largest |want| of the layer (a channel's mean may be near 0), which
//  must be below tol. Returns it.
static double
s_expect_close (const float *got, const double *want, size_t c, double tol, const char *what)
{
    double scale = 0.0, worst = 0.0;
    for (size_t k = 0; k < c; k++)
        scale = fmax (scale, fabs (want[k]));
    cr_assert (scale > 0.0, "%s: all zero", what);
    for (size_t k = 0; k < c; k++) {
        double d = fabs ((double) got[k] - want[k]) / scale;
        if (!(d <= worst))
            worst = d;
    }
    cr_log_info ("%s: largest difference %g of the largest value %g\n", what, worst, scale);
    cr_expect (worst < tol, "%s: the final model's values differ from the shards' by %g of "
               "the largest (%g)", what, worst, scale);
    return worst;
}

//  Each device forwards every sample of its shard equally often (R x B a
//  multiple of its size): the first BN layer's pooled running mean is its
//  input's mean over the training set. dirichlet: shards of 40 and 160
//  (R = 4 batches of 40: the small shard four times over, the large once),
//  so a pool that did not weigh the devices by their shards would fail.
static void
s_first_bn_mean (const char *mode, bool dirichlet)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "calib");
    s_cfg_t c = { .mode = mode, .samples = 200, .batch = 20, .epochs = 2, .calib = 5 };
    if (dirichlet)
        c.batch = 40, c.calib = 4, c.dirichlet = true;
    nn_model_t *final = s_run (&run, mode, &c);
    char tensor[48] = "";
    nn_model_t *part[2];
    int count[2];
    for (int d = 0; d < 2; d++) {
        part[d] = s_shard_stats (&run, final, 1, &c, d, &count[d], 0);
        cr_assert ((c.calib * c.batch) % count[d] == 0, "device %d's shard is %d samples, "
                   "which R x B = %d does not go through equally often", d, count[d],
                   c.calib * c.batch);
    }
    if (dirichlet)
        cr_assert (count[0] != count[1], "the Dirichlet shards are of one size");
    //  Unit 0's BN (conv, BN, ReLU, pool): the only one in part[d].
    for (int t = 0; !tensor[0] && t < nn_model_tensors_count (part[0]); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (part[0], t, &info);
        if (s_ends_with (info.name, ".running_mean"))
            snprintf (tensor, sizeof tensor, "%s", info.name);
    }
    cr_assert (tensor[0], "unit 0 of VGG5 has no BN");
    size_t n = 0, n0 = 0, n1 = 0;
    const float *got = s_tensor (final, tensor, &n);
    const float *m0 = s_tensor (part[0], tensor, &n0), *m1 = s_tensor (part[1], tensor, &n1);
    cr_assert (got && m0 && m1 && n == n0 && n == n1);
    double *want = malloc (sizeof (double) * n);
    double scale = 0.0, unweighted = 0.0;
    for (size_t k = 0; k < n; k++) {
        want[k] = ((double) count[0] * m0[k] + (double) count[1] * m1[k])
                / (count[0] + count[1]);
        scale = fmax (scale, fabs (want[k]));
        unweighted = fmax (unweighted, fabs (want[k] - 0.5 * ((double) m0[k] + m1[k])));
    }
    char what[96];
    snprintf (what, sizeof what, "%s: %s", mode, tensor);
    s_expect_close (got, want, n, CALIB_TOL, what);
    if (dirichlet) {
        cr_log_info ("%s: the shards' plain average is %g of the largest mean away\n", mode,
                     unweighted / scale);
        cr_assert (unweighted / scale > 5 * CALIB_TOL, "%s: the shards' means are too close "
                   "(%g) for the test to tell weighted from plain", mode, unweighted / scale);
    }
    free (want);
    for (int d = 0; d < 2; d++)
        nn_model_destroy (&part[d]);
    nn_model_destroy (&final);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (calib, fl_first_bn_mean_is_the_training_sets, .timeout = 300)
{
    s_first_bn_mean ("fl", false);
}

Test (calib, sfl_first_bn_mean_is_the_training_sets, .timeout = 300)
{
    s_first_bn_mean ("sfl", false);
}

Test (calib, sl_first_bn_mean_is_the_training_sets, .timeout = 300)
{
    s_first_bn_mean ("sl", false);
}

Test (calib, fl_first_bn_mean_weighs_unequal_shards, .timeout = 300)
{
    s_first_bn_mean ("fl", true);
}

Test (calib, sfl_first_bn_mean_weighs_unequal_shards, .timeout = 300)
{
    s_first_bn_mean ("sfl", true);
}

//  One batch per shard (R = 1, B = the shard, or a multiple of it: a
//  smaller shard fills the batch going through itself again, each pass
//  reshuffled, so the batch holds each of its samples equally often):
//  every BN layer's pooled statistics are the mixture of the two shards'
//  own. dirichlet: shards of 40 and 160, batches of 160 (the small shard
//  four times over).
static void
s_every_bn_mixture (const char *mode, bool dirichlet)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "calib");
    s_cfg_t c = { .mode = mode, .samples = 200, .batch = 100, .epochs = 2, .calib = 1 };
    if (dirichlet)
        c.batch = 160, c.dirichlet = true;
    nn_model_t *final = s_run (&run, mode, &c);
    const int units = nn_model_unit_end (final);
    nn_model_t *whole[2];
    int count[2];
    for (int d = 0; d < 2; d++)
        whole[d] = s_shard_stats (&run, final, units, &c, d, &count[d], c.batch);
    if (dirichlet)
        cr_assert (count[0] != count[1], "the Dirichlet shards are of one size");
    const double w0 = count[0], w1 = count[1], w = w0 + w1;
    int layers = 0;
    double worst_spread = 0.0;
    for (int t = 0; t < nn_model_tensors_count (final); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (final, t, &info);
        if (!s_ends_with (info.name, ".running_mean"))
            continue;
        char var_name[48];
        snprintf (var_name, sizeof var_name, "%.*s.running_var",
                  (int) (strlen (info.name) - strlen (".running_mean")), info.name);
        size_t n = info.count, k0 = 0, k1 = 0, kv = 0, kv0 = 0, kv1 = 0;
        const float *mean = nn_model_weights_const (final) + info.offset;
        const float *var = s_tensor (final, var_name, &kv);
        const float *m0 = s_tensor (whole[0], info.name, &k0);
        const float *m1 = s_tensor (whole[1], info.name, &k1);
        const float *v0 = s_tensor (whole[0], var_name, &kv0);
        const float *v1 = s_tensor (whole[1], var_name, &kv1);
        cr_assert (var && m0 && m1 && v0 && v1, "%s: no %s", info.name, var_name);
        cr_assert (kv == n && k0 == n && k1 == n && kv0 == n && kv1 == n);
        double *want_m = malloc (sizeof (double) * n), *want_v = malloc (sizeof (double) * n);
        double spread = 0.0, scale = 0.0;
        for (size_t k = 0; k < n; k++) {
            want_m[k] = (w0 * m0[k] + w1 * m1[k]) / w;
            want_v[k] = (w0 * ((double) v0[k] + (double) m0[k] * m0[k])
                      +  w1 * ((double) v1[k] + (double) m1[k] * m1[k])) / w
                      - want_m[k] * want_m[k];
            //  What a plain average of the variances would leave out.
            double plain = (w0 * v0[k] + w1 * v1[k]) / w;
            spread = fmax (spread, fabs (want_v[k] - plain));
            scale = fmax (scale, fabs (want_v[k]));
        }
        worst_spread = fmax (worst_spread, spread / scale);
        char what[96];
        snprintf (what, sizeof what, "%s: %s", mode, info.name);
        s_expect_close (mean, want_m, n, CALIB_TOL, what);
        snprintf (what, sizeof what, "%s: %s", mode, var_name);
        s_expect_close (var, want_v, n, CALIB_TOL, what);
        free (want_m);
        free (want_v);
        layers++;
    }
    cr_expect_eq (layers, 3, "VGG5's BN layers: %d", layers);
    //  The shards' means differ enough that a plain average of their
    //  variances would fail the comparison above (the shards are alike:
    //  the spread is small, but far above the rounding).
    cr_log_info ("%s: the spread of the shards' means is up to %g of a layer's largest "
                 "variance\n", mode, worst_spread);
    cr_assert (worst_spread > 5 * CALIB_TOL, "%s: the shards' means are too close (%g) for "
               "the test to tell the mixture from the average of the variances", mode,
               worst_spread);
    for (int d = 0; d < 2; d++)
        nn_model_destroy (&whole[d]);
    nn_model_destroy (&final);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (calib, fl_every_bn_is_the_shards_mixture, .timeout = 300)
{
    s_every_bn_mixture ("fl", false);
}

Test (calib, sfl_every_bn_is_the_shards_mixture, .timeout = 300)
{
    s_every_bn_mixture ("sfl", false);
}

Test (calib, fl_every_bn_is_the_unequal_shards_mixture, .timeout = 300)
{
    s_every_bn_mixture ("fl", true);
}

Test (calib, sfl_every_bn_is_the_unequal_shards_mixture, .timeout = 300)
{
    s_every_bn_mixture ("sfl", true);
}

//  ---------------------------------------------------------------------
//  3. What it took, in summary.json and the logs: > 0 in each epoch with
//  R > 0 (every run above checks that too), 0 without calibration or BN.

static void
s_recorded (const char *mode, const char *model, int calib)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "calib");
    s_cfg_t c = { .mode = mode, .model = model, .samples = 100, .batch = 25, .epochs = 2,
                  .calib = calib };
    nn_model_t *m = s_run (&run, mode, &c);
    nn_model_destroy (&m);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (calib, sl_and_fl_record_calibration_time, .timeout = 300)
{
    s_recorded ("sl", "vgg5", 2);
    s_recorded ("fl", "vgg5", 2);
}

Test (calib, nothing_recorded_without_calibration, .timeout = 300)
{
    s_recorded ("sl", "vgg5", 0);
    s_recorded ("fl", "vgg5", 0);
}

Test (calib, nothing_recorded_without_bn, .timeout = 300)
{
    s_recorded ("sl", "vgg5-nobn", 3);
    s_recorded ("fl", "vgg5-nobn", 3);
}
