/*  test_models_modes.c: every registry model trains in every mode (fl, sl,
    sfl, pipelearn) with a real server and two real clients over loopback
    on a short Fashion-MNIST run (suite 'net'; skipped without Debian's
    dataset-fashion-mnist): 200 training images (100 a device), 100 test
    images, batch 20, 2 epochs, lr 0.01, momentum 0.9, 4 micro-batches for
    pipelearn, FedAvg (BN running statistics included) once an epoch. The
    run must end cleanly with a summary of 2 epochs with finite training
    losses and a final checkpoint that loads into the model; for VGG5 and
    MobileNetV3-Small the second epoch's loss must be below the first's
    (they see the same 100 images again and learn them). ResNet18 is not
    held to that: 10 steps of 20 images at lr 0.01 move its loss either way
    (3.05 -> 3.13 in fl); pipelearn-train takes it from 2.03 to 0.82 over
    30 steps of 100 images. Nor is VGG11: at lr 0.01 its loss climbs
    for its first steps before it falls, in PyTorch too (docs/models.md).
    Accuracy on so few images says little
    (test_modes_fmnist holds VGG5 to 80% on 6000).
    VGG11 runs on the images padded to 32x32 ("pad_to": 32: its five pools
    need 32x32 inputs), the other models on the images as stored. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <unistd.h>

#include "pltest.h"

#include <math.h>

#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

static void
s_model_mode_trains (const char *model, int split_point, const char *mode, bool learns,
                     int pad_to)
{
    if (access (FMNIST_TRAIN, R_OK))
        cr_skip_test ("dataset-fashion-mnist is not installed");
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "models");
    char config[1024];
    snprintf (config, sizeof config,
              "{\"model\": \"%s\", \"dataset\": \"fashion-mnist\", \"samples\": 200, "
              "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 5, "
              "\"learning_rate\": 0.01, \"momentum\": 0.9, \"split_point\": %d, "
              "\"threads\": 1, \"devices\": 2, \"mode\": \"%s\", \"micro_batches\": 4, "
              "\"aggregation_frequency\": -1, \"pad_to\": %d}", model, split_point, mode, pad_to);
    pltest_run_daemons (&run, "run", config, 2);
    cJSON *s = pltest_summary (run.dir, "run");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), 2, "%s %s: 2 epochs in summary.json", model, mode);
    double first = pltest_num (cJSON_GetArrayItem (epochs, 0), "train_loss");
    const cJSON *e = pltest_last_epoch (s);
    double loss = pltest_num (e, "train_loss"), acc = pltest_num (e, "test_acc");
    cr_log_info ("%s %s: training loss %.3f then %.3f, test accuracy %.1f%% (%.1f s)\n",
                 model, mode, first, loss, 100.0 * acc, pltest_num (e, "wall_s"));
    cr_expect (isfinite (first) && isfinite (loss), "%s %s: training loss %g, %g", model, mode,
               first, loss);
    if (learns)
        cr_expect (loss < first, "%s %s: training loss %g in epoch 1, %g in epoch 2", model,
                   mode, first, loss);
    //  The final model (weights and BN statistics) as a checkpoint.
    nn_model_t *m = pltest_load_model_side (run.dir, "run", model, pad_to > 0 ? pad_to : 28);
    cr_assert_not_null (m, "%s %s: the final checkpoint does not load", model, mode);
    nn_model_destroy (&m);
    cJSON_Delete (s);
    pltest_rmtree (run.dir);
}

#define S_MODES(model, name, split, learns, pad_to)                                      \
    Test (models_modes, name##_fl, .timeout = 300)                                  \
    { s_model_mode_trains (model, split, "fl", learns, pad_to); }                           \
    Test (models_modes, name##_sl, .timeout = 300)                                  \
    { s_model_mode_trains (model, split, "sl", learns, pad_to); }                           \
    Test (models_modes, name##_sfl, .timeout = 300)                                 \
    { s_model_mode_trains (model, split, "sfl", learns, pad_to); }                          \
    Test (models_modes, name##_pipelearn, .timeout = 300)                           \
    { s_model_mode_trains (model, split, "pipelearn", learns, pad_to); }

S_MODES ("vgg5", vgg5, 2, true, 0)
S_MODES ("resnet18", resnet18, 3, false, 0)
S_MODES ("mobilenetv3-small", mobilenetv3_small, 4, true, 0)

//  VGG11 (28M parameters) at split 3: fl has the padded images and dropout
//  on the devices; sl, sfl and pipelearn have the dense units and their
//  dropout on the server, drawn per step (sl: one server model the devices
//  take turns on; sfl: a server replica per device, averaged with the
//  devices' parts each epoch).
S_MODES ("vgg11", vgg11, 3, false, 32)
