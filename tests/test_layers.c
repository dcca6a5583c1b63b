/*  Every layer: central-difference gradient checks (input and parameters),
    and batch-norm train/eval semantics. */
#include <criterion/criterion.h>

#include "gradcheck.h"
#include "nn_alloc.h"
#include "nn_kernels.h"

#include <math.h>
#include <string.h>

#define L(...) ((nn_layer_spec_t) { __VA_ARGS__ })

Test (layers, conv3x3_pad1)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 4, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true) };
    nn_model_spec_t s = gradcheck_spec (5, 5, 3, l, 1);
    gradcheck_run (&s, 2, 1, false);
}

Test (layers, conv5x5_stride2_nobias)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 5,
                               .stride = 2, .pad = 2, .bias = false) };
    nn_model_spec_t s = gradcheck_spec (7, 7, 2, l, 1);
    gradcheck_run (&s, 2, 2, false);
}

Test (layers, dense)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_FLATTEN),
                            L (.kind = NN_LAYER_DENSE, .out_channels = 5, .bias = true) };
    nn_model_spec_t s = gradcheck_spec (3, 2, 2, l, 2);
    gradcheck_run (&s, 3, 3, false);
}

Test (layers, batchnorm_train)
{
    //  After a conv so BN runs in place, as in VGG5.
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true),
                            L (.kind = NN_LAYER_BATCHNORM) };
    nn_model_spec_t s = gradcheck_spec (4, 4, 2, l, 2);
    gradcheck_run (&s, 3, 4, false);
}

Test (layers, batchnorm_first_layer)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_BATCHNORM) };
    nn_model_spec_t s = gradcheck_spec (3, 3, 4, l, 1);
    gradcheck_run (&s, 4, 5, false);
}

Test (layers, relu_after_bn_in_place)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true),
                            L (.kind = NN_LAYER_BATCHNORM), L (.kind = NN_LAYER_RELU) };
    nn_model_spec_t s = gradcheck_spec (4, 4, 2, l, 3);
    gradcheck_run (&s, 2, 6, false);
}

Test (layers, relu_alone)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_RELU) };
    nn_model_spec_t s = gradcheck_spec (3, 3, 2, l, 1);
    gradcheck_run (&s, 2, 7, false);
}

Test (layers, maxpool_2x2)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_MAXPOOL, .kernel = 2, .stride = 2) };
    nn_model_spec_t s = gradcheck_spec (4, 6, 3, l, 1);
    gradcheck_run (&s, 2, 8, false);
}

Test (layers, maxpool_3x3_stride2_pad1)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_MAXPOOL, .kernel = 3, .stride = 2, .pad = 1) };
    nn_model_spec_t s = gradcheck_spec (5, 5, 2, l, 1);
    gradcheck_run (&s, 2, 9, false);
}

Test (layers, avgpool_2x2_and_padded)
{
    nn_layer_spec_t a[] = { L (.kind = NN_LAYER_AVGPOOL, .kernel = 2, .stride = 2) };
    nn_model_spec_t s = gradcheck_spec (4, 4, 3, a, 1);
    gradcheck_run (&s, 2, 10, false);
    nn_layer_spec_t b[] = { L (.kind = NN_LAYER_AVGPOOL, .kernel = 3, .stride = 1, .pad = 1) };
    s = gradcheck_spec (4, 4, 2, b, 1);
    gradcheck_run (&s, 2, 11, false);
}

Test (layers, avgpool_global)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_AVGPOOL, .kernel = 0) };
    nn_model_spec_t s = gradcheck_spec (3, 5, 4, l, 1);
    gradcheck_run (&s, 3, 12, false);
}

Test (layers, dropout_train)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_FLATTEN),
                            L (.kind = NN_LAYER_DENSE, .out_channels = 20, .bias = true),
                            L (.kind = NN_LAYER_DROPOUT, .p = 0.5f) };
    nn_model_spec_t s = gradcheck_spec (2, 2, 3, l, 3);
    gradcheck_run (&s, 3, 13, false);
}

Test (layers, chain_conv_relu_pool_conv)
{
    //  Layers chained as in a VGG unit boundary (in-place ReLU, pool, conv).
    //  The whole VGG5 is checked against PyTorch in torch_parity.py: dense
    //  ReLU/max-pool kinks make central differences unreliable there.
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 4, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true),
                            L (.kind = NN_LAYER_RELU),
                            L (.kind = NN_LAYER_MAXPOOL, .kernel = 2, .stride = 2),
                            L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true) };
    nn_model_spec_t s = gradcheck_spec (6, 6, 2, l, 4);
    gradcheck_run (&s, 2, 14, false);
}

Test (layers, add_fork_join_on_the_unit_input)
{
    //  The unit's input (the model's here) feeds a conv and the add: its
    //  gradient is the sum of both paths, written into dx.
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true),
                            L (.kind = NN_LAYER_ADD,
                               .from = { NN_FROM_LAYER (0), NN_FROM_INPUT }) };
    nn_model_spec_t s = gradcheck_spec (4, 4, 3, l, 2);
    gradcheck_run (&s, 2, 16, false);
}

Test (layers, residual_block_with_stride2_projection)
{
    //  A ResNet basic block: an inner output (the first BN's input conv)
    //  forks into the main path and the 1x1/2 projection; both join in the
    //  add, then ReLU.
    nn_layer_spec_t l[] = {
        L (.kind = NN_LAYER_CONV, .out_channels = 4, .kernel = 3, .stride = 1, .pad = 1,
           .bias = true),                                                  //  0
        L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3, .stride = 2, .pad = 1),
        L (.kind = NN_LAYER_BATCHNORM), L (.kind = NN_LAYER_RELU),
        L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 3, .stride = 1, .pad = 1),
        L (.kind = NN_LAYER_BATCHNORM),                                    //  5
        L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 1, .stride = 2,
           .from = { NN_FROM_LAYER (0) }),
        L (.kind = NN_LAYER_BATCHNORM),                                    //  7
        L (.kind = NN_LAYER_ADD, .from = { NN_FROM_LAYER (5), NN_FROM_LAYER (7) }),
        L (.kind = NN_LAYER_RELU) };
    nn_model_spec_t s = gradcheck_spec (6, 6, 2, l, 10);
    gradcheck_run (&s, 3, 17, false);
}

Test (layers, add_of_one_output_with_itself)
{
    //  Two uses of one output by one layer: 2x its gradient.
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_FLATTEN),
                            L (.kind = NN_LAYER_DENSE, .out_channels = 4, .bias = true),
                            L (.kind = NN_LAYER_ADD,
                               .from = { NN_FROM_LAYER (1), NN_FROM_LAYER (1) }) };
    nn_model_spec_t s = gradcheck_spec (2, 2, 2, l, 3);
    gradcheck_run (&s, 2, 18, false);
}

Test (layers, conv_groups2_and_depthwise_stride2)
{
    nn_layer_spec_t g[] = { L (.kind = NN_LAYER_CONV, .out_channels = 6, .kernel = 3,
                               .stride = 1, .pad = 1, .bias = true, .groups = 2) };
    nn_model_spec_t s = gradcheck_spec (5, 5, 4, g, 1);
    gradcheck_run (&s, 2, 19, false);
    nn_layer_spec_t d[] = { L (.kind = NN_LAYER_CONV, .out_channels = 3, .kernel = 5,
                               .stride = 2, .pad = 2, .groups = 3) };
    s = gradcheck_spec (7, 7, 3, d, 1);
    gradcheck_run (&s, 2, 20, false);
}

Test (layers, hswish_and_hsigmoid)
{
    nn_layer_spec_t a[] = { L (.kind = NN_LAYER_HSWISH) };
    nn_model_spec_t s = gradcheck_spec (3, 3, 2, a, 1);
    gradcheck_run (&s, 2, 21, false);
    nn_layer_spec_t b[] = { L (.kind = NN_LAYER_HSIGMOID) };
    s = gradcheck_spec (3, 3, 2, b, 1);
    gradcheck_run (&s, 2, 22, false);
}

Test (layers, squeeze_excite_block)
{
    //  A depthwise conv's output forks into the squeeze (pool, dense,
    //  ReLU, dense, hard-sigmoid) and the channel multiply that joins them.
    nn_layer_spec_t l[] = {
        L (.kind = NN_LAYER_CONV, .out_channels = 4, .kernel = 3, .stride = 1, .pad = 1,
           .groups = 4),                                                   //  0
        L (.kind = NN_LAYER_AVGPOOL, .kernel = 0),
        L (.kind = NN_LAYER_DENSE, .out_channels = 2, .bias = true),
        L (.kind = NN_LAYER_RELU),
        L (.kind = NN_LAYER_DENSE, .out_channels = 4, .bias = true),
        L (.kind = NN_LAYER_HSIGMOID),                                     //  5
        L (.kind = NN_LAYER_MUL, .from = { NN_FROM_LAYER (0), NN_FROM_LAYER (5) }),
        L (.kind = NN_LAYER_HSWISH) };
    nn_model_spec_t s = gradcheck_spec (4, 4, 4, l, 8);
    gradcheck_run (&s, 3, 23, false);
}

Test (layers, softmax_xent_after_dense)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_FLATTEN),
                            L (.kind = NN_LAYER_DENSE, .out_channels = 7, .bias = true) };
    nn_model_spec_t s = gradcheck_spec (2, 3, 2, l, 2);
    gradcheck_run (&s, 5, 15, true);
}

Test (layers, dropout_eval_is_identity_and_train_scales)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_DROPOUT, .p = 0.25f) };
    nn_model_spec_t s = gradcheck_spec (1, 1, 4000, l, 1);
    nn_model_t *m = nn_model_new (&s, 0, 1, 1, NULL, 0);
    cr_assert_not_null (m);
    float *x = nn_malloc (sizeof (float) * 4000);
    for (int i = 0; i < 4000; i++)
        x[i] = 1.0f;
    nn_rng_t rng;
    nn_rng_seed (&rng, 3);
    const float *y = nn_model_forward (m, x, 1, false, NULL);
    for (int i = 0; i < 4000; i++)
        cr_assert_eq (y[i], 1.0f);
    y = nn_model_forward (m, x, 1, true, &rng);
    int zeros = 0;
    for (int i = 0; i < 4000; i++) {
        cr_assert (y[i] == 0.0f || fabsf (y[i] - 4.0f / 3.0f) < 1e-6f);
        zeros += y[i] == 0.0f;
    }
    cr_assert (zeros > 850 && zeros < 1150, "%d zeros of 4000 at p=0.25", zeros);
    nn_free (x);
    nn_model_destroy (&m);
}

Test (layers, batchnorm_train_updates_running_stats_eval_uses_them)
{
    nn_layer_spec_t l[] = { L (.kind = NN_LAYER_BATCHNORM) };
    nn_model_spec_t s = gradcheck_spec (2, 1, 2, l, 1);
    nn_model_t *m = nn_model_new (&s, 0, 1, 3, NULL, 0);
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    nn_model_init (m, &rng);
    //  3 samples x (2 x 1) positions x 2 channels; channel 0 values 1..6,
    //  channel 1 values 10, 20, ...
    float x[12];
    for (int i = 0; i < 6; i++) {
        x[2 * i] = (float) (i + 1);
        x[2 * i + 1] = 10.0f * (float) (i + 1);
    }
    const float *y = nn_model_forward (m, x, 3, true, NULL);
    //  Train: batch statistics, biased variance 35/12 for 1..6.
    double mean = 3.5, var = 35.0 / 12.0;
    cr_assert_float_eq (y[0], (1.0 - mean) / sqrt (var + 1e-5), 1e-5);
    //  Running averages with momentum 0.1, running var unbiased (var * 6/5).
    const float *w = nn_model_weights (m);
    nn_tensor_info_t rm, rv;
    nn_model_tensor (m, 2, &rm);
    nn_model_tensor (m, 3, &rv);
    cr_assert_str_eq (rm.name, "u0.l0.bn.running_mean");
    cr_assert_float_eq (w[rm.offset], 0.1 * mean, 1e-6);
    cr_assert_float_eq (w[rv.offset], 0.9 + 0.1 * var * 6.0 / 5.0, 1e-5);
    cr_assert_float_eq (w[rm.offset + 1], 0.1 * 35.0, 1e-4);
    //  Eval: running statistics, and a sample's output does not depend on
    //  the rest of the batch.
    y = nn_model_forward (m, x, 3, false, NULL);
    double expect = (1.0 - w[rm.offset]) / sqrt (w[rv.offset] + 1e-5);
    cr_assert_float_eq (y[0], expect, 1e-5);
    float y0 = y[0];
    y = nn_model_forward (m, x, 1, false, NULL);
    cr_assert_eq (y[0], y0);
    y = nn_model_forward (m, x, 1, true, NULL);
    cr_assert_neq (y[0], y0);
    nn_model_destroy (&m);
}
