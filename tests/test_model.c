/*  Models from split units: parts chain exactly, slabs and tensors are
    consistent, bad specs are refused, training reduces the loss. */
#include <criterion/criterion.h>

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define S_N 6

static void
s_fill (float *x, size_t count, nn_rng_t *rng)
{
    for (size_t i = 0; i < count; i++)
        x[i] = 2.0f * nn_rng_uniform (rng) - 1.0f;
}

//  Gradient slab of `part` compared with the same-named tensors of `full`.
static void
s_assert_grads_match (const nn_model_t *full, nn_model_t *part, float tol)
{
    const float *gf = nn_model_grads ((nn_model_t *) full);
    const float *gp = nn_model_grads (part);
    for (int t = 0; t < nn_model_tensors_count (part); t++) {
        nn_tensor_info_t pi, fi;
        nn_model_tensor (part, t, &pi);
        if (!pi.trainable)
            continue;
        bool found = false;
        for (int u = 0; u < nn_model_tensors_count (full) && !found; u++) {
            nn_model_tensor (full, u, &fi);
            if (strcmp (fi.name, pi.name))
                continue;
            found = true;
            cr_assert_eq (fi.count, pi.count);
            //  One assertion per tensor: Criterion's are dear at millions.
            size_t bad = pi.count;
            for (size_t i = 0; i < pi.count && bad == pi.count; i++)
                if (!(fabsf (gf[fi.offset + i] - gp[pi.offset + i])
                      <= tol * (1.0f + fabsf (gf[fi.offset + i]))))
                    bad = i;
            cr_assert (bad == pi.count, "%s[%zu]: full %g part %g", pi.name, bad,
                       bad < pi.count ? (double) gf[fi.offset + bad] : 0.0,
                       bad < pi.count ? (double) gp[pi.offset + bad] : 0.0);
        }
        cr_assert (found, "tensor %s missing from the full model", pi.name);
    }
}

//  Relative closeness for sums the parts and the whole add in the same
//  order: they are bit-equal unless a kernel picks a path by shape.
static bool
s_near (float a, float b, float tol)
{
    return fabsf (a - b) <= tol * (1.0f + fmaxf (fabsf (a), fabsf (b)));
}

//  At every split point, device part (0, P) then server part (P, U) give
//  the full model's logits, loss, input gradient and parameter gradients.
static void
s_check_split (const nn_model_spec_t *spec, int batch)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 11);
    size_t in_count = (size_t) batch * nn_shape_size (nn_model_spec_input (spec));
    int classes = spec->classes;
    float *x = nn_malloc (sizeof (float) * in_count);
    s_fill (x, in_count, &rng);
    int *labels = nn_malloc (sizeof (int) * (size_t) batch);
    for (int i = 0; i < batch; i++)
        labels[i] = i % classes;
    float *dlogits = nn_malloc (sizeof (float) * (size_t) (batch * classes));
    float *dlogits2 = nn_malloc (sizeof (float) * (size_t) (batch * classes));

    char err[256];
    nn_model_t *full = nn_model_new (spec, 0, spec->units_count, batch, err, sizeof err);
    cr_assert_not_null (full, "%s", err);
    nn_model_init (full, &rng);
    nn_rng_t drop;
    nn_rng_seed (&drop, 5);
    nn_rng_t fr = drop;
    const float *logits = nn_model_forward (full, x, batch, true, &fr);
    float loss = nn_softmax_xent (dlogits, logits, labels, batch, classes, 1.0f, NULL);
    float *dx_full = nn_calloc (in_count, sizeof (float));
    nn_model_backward (full, dlogits, dx_full);
    double max_dx = 0.0;
    for (size_t i = 0; i < in_count; i++)
        max_dx = fmax (max_dx, fabsf (dx_full[i]));
    cr_assert_gt (max_dx, 0.0, "%s: input gradient all zero", spec->name);

    for (int p = 1; p < spec->units_count; p++) {
        nn_model_t *dev = nn_model_new (spec, 0, p, batch, NULL, 0);
        nn_model_t *srv = nn_model_new (spec, p, spec->units_count, batch, NULL, 0);
        cr_assert (dev && srv);
        nn_model_init (dev, &rng);
        nn_model_init (srv, &rng);
        cr_assert_eq (nn_model_params_count (dev) + nn_model_params_count (srv),
                      nn_model_params_count (full));
        cr_assert_eq (nn_model_params_count (dev), nn_model_spec_params (spec, 0, p));
        //  Same init streams: the parts' weights are the full model's.
        cr_assert_eq (memcmp (nn_model_weights (dev), nn_model_weights (full),
                              sizeof (float) * nn_model_params_count (dev)), 0);
        nn_shape_t boundary = nn_model_output_shape (dev);
        nn_shape_t expect = nn_model_spec_unit_output (spec, p - 1);
        cr_assert_eq (nn_shape_size (boundary), nn_shape_size (expect));
        cr_assert_eq (nn_shape_size (nn_model_input_shape (srv)), nn_shape_size (boundary));

        //  Dropout draws in layer order from one stream on either side.
        fr = drop;
        const float *act = nn_model_forward (dev, x, batch, true, &fr);
        const float *logits2 = nn_model_forward (srv, act, batch, true, &fr);
        for (int i = 0; i < batch * classes; i++)
            cr_assert (s_near (logits2[i], logits[i], 1e-5f), "%s split %d: logits[%d] %g vs %g",
                       spec->name, p, i, (double) logits2[i], (double) logits[i]);
        float loss2 = nn_softmax_xent (dlogits2, logits2, labels, batch, classes, 1.0f, NULL);
        cr_assert (s_near (loss2, loss, 1e-5f));
        size_t act_count = (size_t) batch * nn_shape_size (boundary);
        float *dact = nn_calloc (act_count, sizeof (float));
        float *dx = nn_calloc (in_count, sizeof (float));
        nn_model_backward (srv, dlogits2, dact);
        nn_model_backward (dev, dact, dx);
        size_t bad = in_count;
        for (size_t i = 0; i < in_count && bad == in_count; i++)
            if (!s_near (dx[i], dx_full[i], 1e-4f))
                bad = i;
        cr_assert (bad == in_count, "%s split %d: dx[%zu] %g vs %g", spec->name, p, bad,
                   (double) dx[bad % in_count], (double) dx_full[bad % in_count]);
        s_assert_grads_match (full, dev, 1e-4f);
        s_assert_grads_match (full, srv, 1e-4f);
        nn_free (dact);
        nn_free (dx);
        nn_model_destroy (&dev);
        nn_model_destroy (&srv);
        cr_assert_null (dev);
    }
    nn_free (x), nn_free (labels), nn_free (dlogits), nn_free (dlogits2);
    nn_free (dx_full);
    nn_model_destroy (&full);
}

static void
s_check_split_named (const char *name, int c, int side, int batch)
{
    nn_model_spec_t spec;
    char err[256];
    cr_assert_eq (nn_model_spec_by_name (&spec, name, c, side, side, 10, err, sizeof err), 0,
                  "%s", err);
    s_check_split (&spec, batch);
}

Test (model, split_is_exact_vgg5_every_split_point)
{
    s_check_split_named ("vgg5", 1, 28, S_N);
    s_check_split_named ("vgg5", 3, 32, 3);
}

Test (model, split_is_exact_vgg5_nobn_every_split_point)
{
    s_check_split_named ("vgg5-nobn", 1, 28, S_N);
}

Test (model, split_is_exact_vgg11_every_split_point)
{
    s_check_split_named ("vgg11", 3, 32, 2);
}

Test (model, split_is_exact_resnet18_every_split_point)
{
    s_check_split_named ("resnet18", 1, 28, 2);
}

Test (model, split_is_exact_mobilenetv3_small_every_split_point)
{
    s_check_split_named ("mobilenetv3-small", 1, 28, 3);
}

Test (model, registry_lists_finds_and_refuses_clearly)
{
    char names[256];
    nn_model_registry_names (names, sizeof names);
    cr_assert (strstr (names, "vgg5") && strstr (names, "resnet18") && strstr (names, "vgg11"),
               "%s", names);
    for (int i = 0; i < nn_model_registry_count (); i++) {
        const nn_model_entry_t *e = nn_model_registry_entry (i);
        cr_assert_eq (nn_model_registry_find (e->name), e);
        cr_assert_gt (nn_model_registry_units (e->name), 1, "%s", e->name);
    }
    cr_assert_str_eq (nn_model_registry_find ("ResNet_18")->name, "resnet18");
    cr_assert_str_eq (nn_model_registry_find ("VGG11")->name, "vgg11");
    cr_assert_null (nn_model_registry_find ("resnet50"));
    cr_assert_null (nn_model_registry_find (""));
    cr_assert_eq (nn_model_registry_units ("resnet18"), 10);
    cr_assert_eq (nn_model_registry_units ("vgg11"), 11);
    cr_assert_eq (nn_model_registry_units ("MobileNetSmall"), 13);
    cr_assert_eq (nn_model_registry_units ("nope"), -1);
    nn_model_spec_t spec;
    char err[256] = "";
    cr_assert_eq (nn_model_spec_by_name (&spec, "resnet50", 3, 32, 32, 10, err, sizeof err), -1);
    cr_assert (strstr (err, "resnet50") && strstr (err, "resnet18"), "%s", err);
    //  VGG11's five pools need 32x32: a 28x28 input is refused by name.
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg11", 1, 28, 28, 10, err, sizeof err), -1);
    cr_assert (strstr (err, "vgg11") && strstr (err, "32"), "%s", err);
    //  ResNet18 takes any square input (it ends in a global pool), not
    //  a class count below 2.
    cr_assert_eq (nn_model_spec_by_name (&spec, "resnet18", 1, 28, 28, 1, err, sizeof err), -1);
    cr_assert (strstr (err, "resnet18") && strstr (err, "classes"), "%s", err);
    cr_assert_eq (nn_model_spec_by_name (&spec, "resnet18", 3, 32, 28, 10, err, sizeof err), -1);
    cr_assert (strstr (err, "square"), "%s", err);
}

Test (model, dag_specs_with_bad_inputs_are_refused)
{
    nn_model_spec_t spec;
    cr_assert_eq (nn_model_spec_by_name (&spec, "resnet18", 3, 32, 32, 10, NULL, 0), 0);
    char err[256] = "";
    nn_model_spec_t bad = spec;
    //  An add whose second input is a later layer.
    nn_unit_spec_t *u = &bad.units[1];
    u->layers[u->layers_count - 2].from[1] = NN_FROM_LAYER (u->layers_count - 1);
    cr_assert_eq (nn_model_spec_check (&bad, err, sizeof err), -1);
    cr_assert (strstr (err, "earlier layer"), "%s", err);
    //  An add of two shapes that differ (block 3 without its projection).
    bad = spec;
    u = &bad.units[3];
    u->layers[u->layers_count - 2].from[1] = NN_FROM_INPUT;
    cr_assert_eq (nn_model_spec_check (&bad, err, sizeof err), -1);
    cr_assert (strstr (err, "shapes differ") || strstr (err, "not used"), "%s", err);
    //  A one-input layer given a second input.
    bad = spec;
    bad.units[0].layers[0].from[1] = NN_FROM_INPUT;
    cr_assert_eq (nn_model_spec_check (&bad, err, sizeof err), -1);
    cr_assert (strstr (err, "takes 1 input"), "%s", err);
}

Test (model, vgg5_spec_hash_is_unchanged_by_the_graph_fields)
{
    //  The hash every VGG5 checkpoint written so far carries (28x28x1, 10
    //  classes): the graph fields at their defaults add nothing to the text.
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    uint8_t h[32];
    nn_model_spec_hash (&spec, h);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf (hex + 2 * i, 3, "%02x", h[i]);
    cr_assert_str_eq (hex, "4cbcc9f63f65acf5e582d1907f12f97dd7960c2f0ac9ea0f2cd34d86dc349bfc");
}

Test (model, vgg5_has_the_reference_parameter_count)
{
    //  PyTorch's VGG5 for 28x28x1, 10 classes: 458,890 trainable parameters
    //  (+ 320 BN running statistics).
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_model_t *m = nn_model_new (&spec, 0, 5, 1, NULL, 0);
    cr_assert_eq (nn_model_params_count (m), 458890);
    cr_assert_eq (nn_model_weights_count (m), 458890 + 320);
    nn_model_destroy (&m);
    nn_model_spec_vgg5 (&spec, 3, 32, 10, false);
    m = nn_model_new (&spec, 0, 5, 1, NULL, 0);
    //  CIFAR-10 shapes: conv1 896, conv2 18496, conv3 36928, dense 524416, 1290.
    cr_assert_eq (nn_model_params_count (m), 896 + 18496 + 36928 + 524416 + 1290);
    nn_model_destroy (&m);
}

Test (model, tensor_table_tiles_the_weights_slab)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_model_t *m = nn_model_new (&spec, 1, 4, 2, NULL, 0);
    size_t next = 0;
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        cr_assert_eq (info.offset, next, "%s", info.name);
        size_t prod = 1;
        for (int d = 0; d < info.dims_count; d++)
            prod *= (size_t) info.dims[d];
        cr_assert_eq (prod, info.count, "%s", info.name);
        cr_assert_eq (info.trainable, info.offset < nn_model_params_count (m));
        next += info.count;
    }
    cr_assert_eq (next, nn_model_weights_count (m));
    nn_tensor_info_t first;
    nn_model_tensor (m, 0, &first);
    cr_assert_str_eq (first.name, "u1.l0.conv.w");
    nn_model_destroy (&m);
}

Test (model, bad_specs_and_ranges_are_refused_with_a_message)
{
    nn_model_spec_t spec;
    char err[256] = "";
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg9", 1, 28, 28, 10, err, sizeof err), -1);
    cr_assert (strstr (err, "vgg9"), "%s", err);
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0);
    cr_assert_null (nn_model_new (&spec, 0, 6, 4, err, sizeof err));
    cr_assert (strstr (err, "unit range"), "%s", err);
    cr_assert_null (nn_model_new (&spec, 3, 3, 4, err, sizeof err));
    cr_assert_null (nn_model_new (&spec, 0, 5, 0, err, sizeof err));
    cr_assert (strstr (err, "batch"), "%s", err);
    //  VGG5 needs a side divisible by 4 to reach its dense layer? It does
    //  not: 30 -> 15 -> 7; but a 2x2 input cannot be pooled twice.
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 2, 2, 10, err, sizeof err), -1);
    cr_assert (strstr (err, "does not fit"), "%s", err);
}

Test (model, spec_hash_tells_models_apart)
{
    nn_model_spec_t a, b, c;
    nn_model_spec_vgg5 (&a, 1, 28, 10, true);
    nn_model_spec_vgg5 (&b, 1, 28, 10, true);
    nn_model_spec_vgg5 (&c, 1, 28, 10, false);
    uint8_t ha[32], hb[32], hc[32];
    nn_model_spec_hash (&a, ha);
    nn_model_spec_hash (&b, hb);
    nn_model_spec_hash (&c, hc);
    cr_assert_eq (memcmp (ha, hb, 32), 0);
    cr_assert_neq (memcmp (ha, hc, 32), 0);
    b.units[3].layers[1].out_channels = 129;
    nn_model_spec_hash (&b, hb);
    cr_assert_neq (memcmp (ha, hb, 32), 0);
}

Test (model, sgd_overfits_a_small_batch)
{
    //  32 random images with fixed labels: the loss must fall well below
    //  ln(10) within 60 steps at the reference hyper-parameters.
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_model_t *m = nn_model_new (&spec, 0, 5, 32, NULL, 0);
    nn_rng_t rng;
    nn_rng_seed (&rng, 5);
    nn_model_init (m, &rng);
    float *x = nn_malloc (sizeof (float) * 32 * 784);
    s_fill (x, 32 * 784, &rng);
    int labels[32];
    for (int i = 0; i < 32; i++)
        labels[i] = i % 10;
    float d[320], first = 0.0f, loss = 0.0f;
    nn_sgd_t hp = { 0.01f, 0.9f, 0.0f };
    for (int step = 0; step < 60; step++) {
        nn_model_zero_grad (m);
        const float *out = nn_model_forward (m, x, 32, true, NULL);
        loss = nn_softmax_xent (d, out, labels, 32, 10, 1.0f, NULL);
        if (step == 0)
            first = loss;
        nn_model_backward (m, d, NULL);
        nn_sgd_step (nn_model_weights (m), nn_model_optim_state (m), nn_model_grads (m),
                     nn_model_params_count (m), &hp);
    }
    cr_assert (first > 1.8f && loss < 0.3f, "loss %g -> %g", (double) first, (double) loss);
    nn_free (x);
    nn_model_destroy (&m);
}

Test (model, micro_batches_with_scale_equal_the_mini_batch_without_bn)
{
    //  PipeLearn's gradient accumulation: N micro-batches, loss scaled by
    //  1/N, equals the whole mini-batch for a model without BatchNorm.
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, false);
    nn_rng_t rng;
    nn_rng_seed (&rng, 8);
    nn_model_t *a = nn_model_new (&spec, 0, 5, 8, NULL, 0);
    nn_model_t *b = nn_model_new (&spec, 0, 5, 2, NULL, 0);
    nn_model_init (a, &rng);
    nn_model_init (b, &rng);
    float *x = nn_malloc (sizeof (float) * 8 * 784);
    s_fill (x, 8 * 784, &rng);
    int labels[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float d[80];
    const float *out = nn_model_forward (a, x, 8, true, NULL);
    nn_softmax_xent (d, out, labels, 8, 10, 1.0f, NULL);
    nn_model_backward (a, d, NULL);
    for (int k = 0; k < 4; k++) {
        out = nn_model_forward (b, x + k * 2 * 784, 2, true, NULL);
        nn_softmax_xent (d, out, labels + 2 * k, 2, 10, 0.25f, NULL);
        nn_model_backward (b, d, NULL);
    }
    const float *ga = nn_model_grads (a), *gb = nn_model_grads (b);
    for (size_t i = 0; i < nn_model_params_count (a); i++)
        cr_assert (fabsf (ga[i] - gb[i]) <= 1e-5f * (1.0f + fabsf (ga[i])), "grad %zu: %g vs %g",
                   i, (double) ga[i], (double) gb[i]);
    nn_free (x);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
}

Test (model, fedavg_weights_by_sample_count)
{
    float a[3] = { 1, 2, 3 }, b[3] = { 4, 5, 6 }, out[3];
    const float *srcs[2] = { a, b };
    double w[2] = { 100, 300 };
    nn_fedavg (out, srcs, w, 2, 3);
    cr_assert_float_eq (out[0], 0.25 * 1 + 0.75 * 4, 1e-6);
    cr_assert_float_eq (out[2], 0.25 * 3 + 0.75 * 6, 1e-6);
}

//  Five devices, one of them hostile (coordinate 0 huge, coordinate 1 NaN-
//  free but far off): trimmed mean (1 each side) and median ignore it where
//  FedAvg is pulled far away.
Test (model, trimmed_mean_and_median_resist_one_outlier)
{
    float d[5][3] = { { 1, 10, -1 }, { 2, 11, -2 }, { 3, 12, -3 }, { 4, 13, -4 },
                      { 1e6f, -500, 0 } };
    const float *srcs[5] = { d[0], d[1], d[2], d[3], d[4] };
    float out[3], scratch[5];
    nn_trimmed_mean (out, srcs, 5, 1, 3, scratch);
    //  Sorted coordinate 0: 1 2 3 4 1e6, trimmed: 2 3 4.
    cr_assert_float_eq (out[0], 3.0f, 1e-6);
    //  Coordinate 1: -500 10 11 12 13 -> 10 11 12.
    cr_assert_float_eq (out[1], 11.0f, 1e-6);
    //  Coordinate 2: -4 -3 -2 -1 0 -> -3 -2 -1.
    cr_assert_float_eq (out[2], -2.0f, 1e-6);
    nn_median (out, srcs, 5, 3, scratch);
    cr_assert_float_eq (out[0], 3.0f, 1e-6);
    cr_assert_float_eq (out[1], 11.0f, 1e-6);
    cr_assert_float_eq (out[2], -2.0f, 1e-6);
    //  An even count: the mean of the two middle values; trim 0 is the mean.
    nn_median (out, srcs, 4, 3, scratch);
    cr_assert_float_eq (out[0], 2.5f, 1e-6);
    nn_trimmed_mean (out, srcs, 4, 0, 3, scratch);
    cr_assert_float_eq (out[1], 11.5f, 1e-6);
    //  FedAvg with equal weights is what the outlier drags.
    double w[5] = { 1, 1, 1, 1, 1 };
    nn_fedavg (out, srcs, w, 5, 3);
    cr_assert (out[0] > 1e5f, "FedAvg %g: the outlier should dominate", (double) out[0]);
}

Test (model, clip_update_scales_only_long_updates)
{
    float ref[2] = { 1, 1 };
    float w[2] = { 4, 5 };             //  update (3, 4): norm 5
    double norm = nn_clip_update (w, ref, 2, 2.5);
    cr_assert_float_eq (norm, 5.0, 1e-9);
    cr_assert_float_eq (w[0], 1 + 1.5f, 1e-6);
    cr_assert_float_eq (w[1], 1 + 2.0f, 1e-6);
    float v[2] = { 2, 1 };             //  norm 1 <= 2.5: unchanged
    cr_assert_float_eq (nn_clip_update (v, ref, 2, 2.5), 1.0, 1e-9);
    cr_assert_float_eq (v[0], 2.0f, 0);
    cr_assert_float_eq (v[1], 1.0f, 0);
}

Test (model, threads_split_the_batch_without_changing_results)
{
    //  7 samples over 3 threads: uneven ranges; BN statistics and weight
    //  gradients are combined across threads.
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_rng_t rng;
    nn_rng_seed (&rng, 21);
    nn_model_t *a = nn_model_new (&spec, 0, 5, 7, NULL, 0);
    nn_model_t *b = nn_model_new (&spec, 0, 5, 7, NULL, 0);
    nn_model_init (a, &rng);
    nn_model_init (b, &rng);
    nn_model_set_threads (b, 3);
    cr_assert_eq (nn_model_threads (b), 3);
    float *x = nn_malloc (sizeof (float) * 7 * 784);
    s_fill (x, 7 * 784, &rng);
    int labels[7] = { 1, 2, 3, 4, 5, 6, 7 };
    float da[70], db[70];
    float *dxa = nn_calloc (7 * 784, sizeof (float)), *dxb = nn_calloc (7 * 784, sizeof (float));
    for (int round = 0; round < 2; round++) {
        const float *oa = nn_model_forward (a, x, 7, true, NULL);
        const float *ob = nn_model_forward (b, x, 7, true, NULL);
        for (int i = 0; i < 70; i++)
            cr_assert (fabsf (oa[i] - ob[i]) <= 1e-4f, "logit %d: %g vs %g", i,
                       (double) oa[i], (double) ob[i]);
        nn_softmax_xent (da, oa, labels, 7, 10, 1.0f, NULL);
        nn_softmax_xent (db, ob, labels, 7, 10, 1.0f, NULL);
        nn_model_backward (a, da, dxa);
        nn_model_backward (b, db, dxb);
    }
    const float *ga = nn_model_grads (a), *gb = nn_model_grads (b);
    for (size_t i = 0; i < nn_model_params_count (a); i++)
        cr_assert (fabsf (ga[i] - gb[i]) <= 1e-4f * (1.0f + fabsf (ga[i])), "grad %zu", i);
    for (int i = 0; i < 7 * 784; i++)
        cr_assert (fabsf (dxa[i] - dxb[i]) <= 1e-5f, "dx %d", i);
    const float *wa = nn_model_weights (a), *wb = nn_model_weights (b);
    for (size_t i = nn_model_params_count (a); i < nn_model_weights_count (a); i++)
        cr_assert (fabsf (wa[i] - wb[i]) <= 1e-5f, "running stat %zu", i);
    //  Fewer samples than threads.
    nn_model_forward (b, x, 2, true, NULL);
    nn_model_forward (b, x, 1, false, NULL);
    nn_free (x), nn_free (dxa), nn_free (dxb);
    nn_model_destroy (&a);
    nn_model_destroy (&b);
}

//  Forward A then B in two contexts, backward A then B: equals doing each
//  forward/backward back to back in one model (no BN: the running
//  statistics would differ in order only). The contexts take turns with
//  one set of per-thread buffers, the base's; `threads` is set through the
//  context.
static void
s_check_shared_contexts (int threads)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_rng_t rng;
    nn_rng_seed (&rng, 4);
    nn_model_t *base = nn_model_new (&spec, 0, 2, 3, NULL, 0);
    nn_model_t *ref = nn_model_new (&spec, 0, 2, 3, NULL, 0);
    nn_model_init (base, &rng);
    nn_model_init (ref, &rng);
    nn_model_t *ctx = nn_model_new_shared (base, NULL, 0);
    cr_assert_not_null (ctx);
    nn_model_set_threads (ctx, threads);
    nn_model_set_threads (ref, threads);
    cr_assert_eq (nn_model_threads (base), threads);
    cr_assert_eq (nn_model_threads (ctx), threads);
    cr_assert_eq (nn_model_weights (ctx), nn_model_weights (base));
    cr_assert_eq (nn_model_grads (ctx), nn_model_grads (base));
    size_t in = 3 * 784, out = 3 * nn_shape_size (nn_model_output_shape (base));
    float *x = nn_malloc (sizeof (float) * 2 * in), *g = nn_malloc (sizeof (float) * 2 * out);
    s_fill (x, 2 * in, &rng);
    s_fill (g, 2 * out, &rng);
    nn_model_forward (base, x, 3, true, NULL);
    nn_model_forward (ctx, x + in, 3, true, NULL);
    nn_model_backward (base, g, NULL);
    nn_model_backward (ctx, g + out, NULL);
    nn_model_forward (ref, x, 3, true, NULL);
    nn_model_backward (ref, g, NULL);
    nn_model_forward (ref, x + in, 3, true, NULL);
    nn_model_backward (ref, g + out, NULL);
    const float *ga = nn_model_grads (base), *gb = nn_model_grads (ref);
    for (size_t i = 0; i < nn_model_params_count (base); i++)
        cr_assert (fabsf (ga[i] - gb[i]) <= 1e-5f * (1.0f + fabsf (gb[i])), "grad %zu", i);
    nn_model_destroy (&ctx);
    //  The base still owns and uses its slabs.
    nn_model_zero_grad (base);
    nn_free (x), nn_free (g);
    nn_model_destroy (&base);
    nn_model_destroy (&ref);
}

Test (model, shared_contexts_keep_their_own_forward_state)
{
    s_check_shared_contexts (1);
    s_check_shared_contexts (2);
}

//  A server worker's context trains two replicas in turn through
//  nn_model_use_slabs: each replica's weights, gradients and BN running
//  statistics end as if it had been trained on its own.
Test (model, use_slabs_trains_whichever_replica_it_points_at)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, true);
    nn_rng_t rng;
    nn_rng_seed (&rng, 11);
    nn_model_t *rep[2], *ref[2];
    for (int i = 0; i < 2; i++) {
        rep[i] = nn_model_new (&spec, 1, spec.units_count, 1, NULL, 0);
        ref[i] = nn_model_new (&spec, 1, spec.units_count, 4, NULL, 0);
        nn_model_init (rep[i], &rng);
        memcpy (nn_model_weights (ref[i]), nn_model_weights (rep[i]),
                sizeof (float) * nn_model_weights_count (rep[i]));
    }
    nn_model_t *ctx = nn_model_new (&spec, 1, spec.units_count, 4, NULL, 0);
    nn_model_init (ctx, &rng);          //  its own weights: must not be used
    size_t in = 4 * nn_shape_size (nn_model_input_shape (ctx));
    size_t out = 4 * nn_shape_size (nn_model_output_shape (ctx));
    float *x = nn_malloc (sizeof (float) * in), *g = nn_malloc (sizeof (float) * out);
    //  Steps for replica 0, 1, 0 interleaved on the one context.
    const int order[3] = { 0, 1, 0 };
    for (int k = 0; k < 3; k++) {
        int r = order[k];
        s_fill (x, in, &rng);
        s_fill (g, out, &rng);
        nn_model_use_slabs (ctx, rep[r]);
        cr_assert_eq (nn_model_weights (ctx), nn_model_weights (rep[r]));
        nn_model_forward (ctx, x, 4, true, NULL);
        nn_model_backward (ctx, g, NULL);
        nn_model_forward (ref[r], x, 4, true, NULL);
        nn_model_backward (ref[r], g, NULL);
    }
    for (int r = 0; r < 2; r++) {
        const float *ga = nn_model_grads (rep[r]), *gb = nn_model_grads (ref[r]);
        bool nonzero = false;
        for (size_t i = 0; i < nn_model_params_count (rep[r]); i++) {
            cr_assert (fabsf (ga[i] - gb[i]) <= 1e-5f * (1.0f + fabsf (gb[i])),
                       "replica %d grad %zu: %g vs %g", r, i, ga[i], gb[i]);
            nonzero = nonzero || ga[i] != 0.0f;
        }
        cr_assert (nonzero, "replica %d got no gradient", r);
        //  BN running statistics (buffers after the parameters) too.
        const float *wa = nn_model_weights (rep[r]), *wb = nn_model_weights (ref[r]);
        for (size_t i = nn_model_params_count (rep[r]); i < nn_model_weights_count (rep[r]); i++)
            cr_assert (fabsf (wa[i] - wb[i]) <= 1e-5f * (1.0f + fabsf (wb[i])),
                       "replica %d buffer %zu", r, i);
    }
    nn_model_destroy (&ctx);
    //  The replicas still own their slabs after the context is gone.
    nn_model_zero_grad (rep[0]);
    nn_free (x), nn_free (g);
    for (int i = 0; i < 2; i++) {
        nn_model_destroy (&rep[i]);
        nn_model_destroy (&ref[i]);
    }
}

//  conv -> BN -> [dropout 0] -> ReLU -> max-pool -> dense over 32x32x1.
//  Without the dropout the BN runs the ReLU and pool itself, two samples
//  at a time (32 KiB floats of BN output per sample); with it nothing is
//  fused into the BN and every layer keeps whole-batch buffers.
static void
s_spec_bn_pool (nn_model_spec_t *spec, bool chained)
{
    memset (spec, 0, sizeof *spec);
    snprintf (spec->name, sizeof spec->name, "bn-pool-%d", chained);
    spec->in_c = 1, spec->in_h = spec->in_w = 32, spec->classes = 10;
    spec->units_count = 2;
    nn_unit_spec_t *u = &spec->units[0];
    u->layers[u->layers_count++] = (nn_layer_spec_t) {
        .kind = NN_LAYER_CONV, .out_channels = 32, .kernel = 3, .stride = 1, .pad = 1,
        .bias = true };
    u->layers[u->layers_count++] = (nn_layer_spec_t) { .kind = NN_LAYER_BATCHNORM };
    if (!chained)
        u->layers[u->layers_count++] = (nn_layer_spec_t) { .kind = NN_LAYER_DROPOUT };
    u->layers[u->layers_count++] = (nn_layer_spec_t) { .kind = NN_LAYER_RELU };
    u->layers[u->layers_count++] = (nn_layer_spec_t) {
        .kind = NN_LAYER_MAXPOOL, .kernel = 2, .stride = 2 };
    u = &spec->units[1];
    u->layers[u->layers_count++] = (nn_layer_spec_t) { .kind = NN_LAYER_FLATTEN };
    u->layers[u->layers_count++] = (nn_layer_spec_t) {
        .kind = NN_LAYER_DENSE, .out_channels = 10, .bias = true };
}

//  a == b exactly with one thread (same kernels, same order of sums);
//  with more, to float rounding (how the layers cut the batch across
//  threads may differ between the chained and the plain BN).
static void
s_assert_same (const float *a, const float *b, size_t count, int threads, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        float tol = threads == 1 ? 0.0f : 1e-5f * (1.0f + fabsf (b[i]));
        cr_assert (fabsf (a[i] - b[i]) <= tol, "%s[%zu], %d thread(s): %.9g vs %.9g", what,
                   i, threads, (double) a[i], (double) b[i]);
    }
}

Test (model, bn_relu_pool_chain_in_chunks_equals_the_unfused_layers)
{
    enum { N = 5, IN = 32 * 32 };
    nn_model_spec_t sa, sb;
    s_spec_bn_pool (&sa, true);
    s_spec_bn_pool (&sb, false);
    for (int threads = 1; threads <= 2; threads++) {
        nn_rng_t rng;
        nn_rng_seed (&rng, 31);
        nn_model_t *a = nn_model_new (&sa, 0, 2, N, NULL, 0);
        nn_model_t *b = nn_model_new (&sb, 0, 2, N, NULL, 0);
        cr_assert (a && b);
        nn_model_init (a, &rng);
        cr_assert_eq (nn_model_weights_count (a), nn_model_weights_count (b));
        memcpy (nn_model_weights (b), nn_model_weights (a),
                sizeof (float) * nn_model_weights_count (a));
        nn_model_set_threads (a, threads);
        nn_model_set_threads (b, threads);
        float *x = nn_malloc (sizeof (float) * N * IN);
        s_fill (x, (size_t) N * IN, &rng);
        int labels[N] = { 1, 3, 5, 7, 9 };
        float da[N * 10], db[N * 10];
        float *dxa = nn_calloc (N * IN, sizeof (float)), *dxb = nn_calloc (N * IN, sizeof (float));
        for (int round = 0; round < 2; round++) {
            const float *oa = nn_model_forward (a, x, N, true, NULL);
            const float *ob = nn_model_forward (b, x, N, true, NULL);
            s_assert_same (oa, ob, N * 10, threads, "train logits");
            nn_softmax_xent (da, oa, labels, N, 10, 1.0f, NULL);
            nn_softmax_xent (db, ob, labels, N, 10, 1.0f, NULL);
            nn_model_backward (a, da, dxa);
            nn_model_backward (b, db, dxb);
            s_assert_same (dxa, dxb, N * IN, threads, "dx");
            //  A batch that is not a whole number of chunks per thread.
            oa = nn_model_forward (a, x, N - 2, false, NULL);
            ob = nn_model_forward (b, x, N - 2, false, NULL);
            s_assert_same (oa, ob, (N - 2) * 10, threads, "eval logits");
        }
        s_assert_same (nn_model_grads (a), nn_model_grads (b), nn_model_params_count (a),
                       threads, "grads");
        s_assert_same (nn_model_weights (a), nn_model_weights (b),
                       nn_model_weights_count (a), threads, "running stats");
        float gsum = 0.0f;
        for (size_t i = 0; i < nn_model_params_count (a); i++)
            gsum += fabsf (nn_model_grads (a)[i]);
        cr_assert (gsum > 0.0f, "the gradients are not all zero");
        nn_free (x), nn_free (dxa), nn_free (dxb);
        nn_model_destroy (&a);
        nn_model_destroy (&b);
    }
}
