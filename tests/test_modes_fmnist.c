/*  test_modes_fmnist.c: every mode (fl, sl, sfl, pipelearn) trains VGG5 on
    a Fashion-MNIST subset with a real server and two real clients over
    loopback, and reaches a stated test accuracy (suite 'slow'; skipped
    without Debian's dataset-fashion-mnist).

    The setting: 6000 training images (3000 per device; FedAvg over unequal
    shards is test_rogue's), 2000 test images, batch 50,
    lr 0.01, momentum 0.9, 2 epochs, split point 1, 5 micro-batches for
    pipelearn. Measured 2026-11-25 on this 2-core host: fl 84.9%,
    sl 87.5%, sfl 84.9%, pipelearn 85.1% (pipelearn-train on the same 6000
    images and settings: 86.1%); the bar is 80%, a few points below each
    and far above the 10% of a model that did not learn. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn_checkpoint.h"
#include "pl_timeline.h"
#include "pltest.h"

#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
#define MIN_TEST_ACC 0.80

static void
s_mode_learns (const char *mode)
{
    if (access (FMNIST_TRAIN, R_OK))
        cr_skip_test ("dataset-fashion-mnist is not installed");
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "modes");
    char config[1024];
    snprintf (config, sizeof config,
              "{\"model\": \"vgg5\", \"dataset\": \"fashion-mnist\", \"samples\": 6000, "
              "\"test_samples\": 2000, \"batch_size\": 50, \"epochs\": 2, \"seed\": 5, "
              "\"learning_rate\": 0.01, \"momentum\": 0.9, \"split_point\": 1, "
              "\"devices\": 2, \"mode\": \"%s\", \"micro_batches\": %d, "
              "\"aggregation_frequency\": -1}",
              mode, strcmp (mode, "pipelearn") == 0 ? 5 : 1);
    pltest_run_daemons (&run, "run", config, 2);
    cJSON *s = pltest_summary (run.dir, "run");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), 2, "%s: 2 epochs in summary.json", mode);
    //  summary.json names the directory the files went to (--results).
    char res[4096];
    pltest_path (res, run.dir, "run");
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive (s, "results_dir");
    cr_expect (cJSON_IsString (rd) && strcmp (rd->valuestring, res) == 0,
               "%s: results_dir %s, want %s", mode, cJSON_IsString (rd) ? rd->valuestring
                                                                       : "(none)", res);
    const cJSON *e = pltest_last_epoch (s);
    double acc = pltest_num (e, "test_acc");
    cr_log_info ("%s: Fashion-MNIST test accuracy %.2f%% after 2 epochs (%.1f s)\n", mode,
                 100.0 * acc, pltest_num (e, "wall_s"));
    cr_expect (acc >= MIN_TEST_ACC, "%s: test accuracy %.4f after 2 epochs (want >= %.2f)",
               mode, acc, MIN_TEST_ACC);
    //  Both devices trained on their own 3000 images.
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive (e, "devices");
    cr_assert (cJSON_IsArray (devs) && cJSON_GetArraySize (devs) == 2);
    for (int i = 0; i < 2; i++)
        cr_expect_eq (pltest_num (cJSON_GetArrayItem (devs, i), "samples"), 3000);
    cJSON_Delete (s);
    pltest_rmtree (run.dir);
}

Test (modes_fmnist, fl_learns, .timeout = 900) { s_mode_learns ("fl"); }
Test (modes_fmnist, sl_learns, .timeout = 900) { s_mode_learns ("sl"); }
Test (modes_fmnist, sfl_learns, .timeout = 900) { s_mode_learns ("sfl"); }
Test (modes_fmnist, pipelearn_learns, .timeout = 900) { s_mode_learns ("pipelearn"); }
