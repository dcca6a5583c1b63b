/*  test_wire_fmnist.c: fp16 and int8 (rounding to nearest), through the
    daemons, train VGG5 on Fashion-MNIST to within 1 point of codec none,
    int8 with stochastic rounding to within 3 (see below) (suite 'slow';
    skipped without Debian's dataset-fashion-mnist). topk is measured, not
    asserted (see below).

    The in-process twin is the slow suite's codec_accuracy (both parts in
    one process); this one goes through pipelearn-server and two
    pipelearn-clients over loopback, so the plan's negotiation, the
    encoders, proto's decoding and the server's per-device topk residuals
    are all in the loop. The setting, codec_accuracy's: mode sfl, split
    point 1, 20,000 training images (10,000 per device), batch 100, lr
    0.01, momentum 0.9, one epoch, seed 1, tested on 5,000 test images (the
    server evaluates on its reactor thread: all 10,000 took over the
    clients' 60 s --timeout on a loaded host); about a minute of compute on
    an idle 2-core host; every run starts from the
    same weights and sees the same batches. Figures measured on this host
    are in docs/codecs.md. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pltest.h"

#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
#define MAX_DROP 0.01
#define STOCHASTIC_DROP 0.03

//  Test accuracy and device 0's bytes up and down of one run.
static double
s_run (pltest_run_t *run, const char *sub, const char *codec, double *up, double *down)
{
    char config[1024];
    snprintf (config, sizeof config,
              "{\"model\": \"vgg5\", \"dataset\": \"fashion-mnist\", \"samples\": 20000, "
              "\"test_samples\": 5000, \"batch_size\": 100, \"epochs\": 1, \"seed\": 1, "
              "\"learning_rate\": 0.01, \"momentum\": 0.9, \"split_point\": 1, "
              "\"devices\": 2, \"mode\": \"sfl\", \"threads\": 1, \"measure_link\": false, "
              "\"adaptive\": false, \"codec\": %s}", codec);
    pltest_run_daemons (run, sub, config, 2);
    cJSON *s = pltest_summary (run->dir, sub);
    const cJSON *e = pltest_last_epoch (s);
    double acc = pltest_num (e, "test_acc");
    const cJSON *d0 = cJSON_GetArrayItem (cJSON_GetObjectItemCaseSensitive (e, "devices"), 0);
    *up = pltest_num (d0, "bytes_up");
    *down = pltest_num (d0, "bytes_down");
    cr_log_info ("codec %s: test accuracy %.2f%%, device 0 %.2f MB up, %.2f MB down, "
                 "epoch %.1f s\n", codec, 100.0 * acc, *up / 1e6, *down / 1e6,
                 pltest_num (e, "wall_s"));
    cJSON_Delete (s);
    return acc;
}

Test (wire_fmnist, every_codec_within_a_point_of_none, .timeout = 1200)
{
    if (access (FMNIST_TRAIN, R_OK))
        cr_skip_test ("dataset-fashion-mnist is not installed");
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "wire_fmnist");
    double up0, down0;
    double none = s_run (&run, "none", "\"none\"", &up0, &down0);
    //  Not topk: through the daemons each device part takes 100 steps here
    //  and topk (0.1 and 0.01) ends about 5 points below none, as the
    //  in-process codec_accuracy does at 100 steps (docs/codecs.md, "Through
    //  the daemons"): its error feedback needs a longer run than this test
    //  can afford, so its accuracy is measured there, not asserted; its
    //  bytes are asserted by the net suite's wire tests.
    //  int8 with stochastic rounding draws its own random numbers: over this
    //  one 100-step epoch on 5,000 test images that alone moved its accuracy
    //  by -1.34 points against none on the AVX2 path and +0.56 on AVX-512
    //  (same seed; CI runs ciA5 and ciM5). Its 1-point bound is held by the
    //  in-process codec_accuracy (10,000 test images); here it must train
    //  (within STOCHASTIC_DROP of none) and carry its bytes.
    static const struct {
        const char *sub, *json;
        double max_drop;
    } cases[] = {
        { "fp16", "\"fp16\"", MAX_DROP },
        { "int8", "\"int8\"", MAX_DROP },
        { "int8_stochastic", "\"int8\", \"int8_stochastic\": true", STOCHASTIC_DROP },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double up, down;
        double acc = s_run (&run, cases[c].sub, cases[c].json, &up, &down);
        cr_expect (acc >= none - cases[c].max_drop, "codec %s: test accuracy %.4f, none "
                   "%.4f: more than %.0f point(s) lower", cases[c].sub, acc, none,
                   100.0 * cases[c].max_drop);
        cr_expect (up < up0 && down < down0, "codec %s: bytes up %.0f down %.0f, none %.0f "
                   "%.0f", cases[c].sub, up, down, up0, down0);
    }
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
