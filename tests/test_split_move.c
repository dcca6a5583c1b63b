/*  test_split_move.c: an epoch-end re-plan that moves one device's split
    point keeps the run's model consistent (suite 'net'; skipped without
    Debian's dataset-fashion-mnist): a real server and two real clients
    over loopback on a Fashion-MNIST slice.

    The move is the config's "split_point_moves" (docs/config.md), so it
    happens at a known epoch end whatever the host's speed: the server
    re-cuts its merged model, rebuilds the moved device's replica, tells
    the device (PLAN), and the next MODEL carries the device part at its
    new split point. What must hold: after the move FedAvg averages the
    same weights as a run laid out at the new split point from the start.
    Device i's part and replica together train its whole model on its
    shard whatever P_i is (test_split_mixed.c), so without BN and with
    momentum 0 a run with the move equals, to float rounding, the runs
    that never move, at the old split points and at the new ones. Momentum
    0 because a move restarts the moved device's momentum on both sides
    (docs/planner.md); VGG5 without BN so the comparison is to float
    rounding. Both directions: sfl moves device 0 from 1 to 3 (units go to
    the device), pipelearn with 2 micro-batches moves device 1 from 3 to 1
    (units go to the server).

    summary.json must say which split point and N each device ran, per
    epoch (the epoch's lists and each device's entry) and why it moved
    (the next epoch's "replanned_before"); timeline.csv each row's. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pltest.h"

#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

static void
s_config (char *out, size_t size, const char *mode, const char *split, int micro,
          const char *moves)
{
    snprintf (out, size,
              "{\"model\": \"vgg5-nobn\", \"dataset\": \"fashion-mnist\", \"samples\": 400, "
              "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 11, "
              "\"learning_rate\": 0.02, \"momentum\": 0, \"split_point\": %s, "
              "\"threads\": 1, \"devices\": 2, \"mode\": \"%s\", \"micro_batches\": %d, "
              "\"aggregation_frequency\": 5, \"split_point_moves\": %s}", split, mode, micro,
              moves);
}

static nn_model_t *
s_run (pltest_run_t *run, const char *sub, const char *mode, const char *split, int micro,
       const char *moves)
{
    char config[1024];
    s_config (config, sizeof config, mode, split, micro, moves);
    pltest_run_daemons (run, sub, config, 2);
    nn_model_t *m = pltest_load_model (run->dir, sub, "vgg5-nobn");
    cr_assert_not_null (m, "%s %s: the final checkpoint does not load", mode, sub);
    return m;
}

static int
s_int_at (const cJSON *o, const char *key, int index)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive (o, key);
    cr_assert (cJSON_IsArray (a) && cJSON_GetArraySize (a) == 2, "%s is a list of 2", key);
    return cJSON_GetArrayItem (a, index)->valueint;
}

//  summary.json: epoch e (1, 2) ran split points split[e - 1][0..1], every
//  device N micro-batches; epoch 2's replanned_before names the move of
//  device `who` from -> to.
static void
s_expect_summary (pltest_run_t *run, int split[2][2], int micro, int who, int from, int to)
{
    cJSON *s = pltest_summary (run->dir, "moved");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), 2);
    for (int e = 0; e < 2; e++) {
        const cJSON *ej = cJSON_GetArrayItem (epochs, e);
        const cJSON *devs = cJSON_GetObjectItemCaseSensitive (ej, "devices");
        for (int i = 0; i < 2; i++) {
            cr_expect_eq (s_int_at (ej, "split_point", i), split[e][i],
                          "summary.json epoch %d: device %d ran at split point %d", e + 1, i,
                          s_int_at (ej, "split_point", i));
            cr_expect_eq (s_int_at (ej, "micro_batches", i), micro,
                          "summary.json epoch %d: device %d's N", e + 1, i);
            const cJSON *d = cJSON_GetArrayItem (devs, i);
            cr_expect_eq ((int) pltest_num (d, "split_point"), split[e][i],
                          "summary.json epoch %d: devices[%d].split_point", e + 1, i);
        }
    }
    const cJSON *assign = cJSON_GetObjectItemCaseSensitive (s, "assignment");
    cr_expect_eq (s_int_at (assign, "split_point", who), to, "the last assignment");
    //  The move is epoch 2's re-plan, with its reason; epoch 1 had none.
    const cJSON *e1 = cJSON_GetArrayItem (epochs, 0), *e2 = cJSON_GetArrayItem (epochs, 1);
    cr_expect_null (cJSON_GetObjectItemCaseSensitive (e1, "replanned_before"));
    const cJSON *r = cJSON_GetArrayItem (cJSON_GetObjectItemCaseSensitive (e2,
                                                                           "replanned_before"),
                                         0);
    cr_assert_not_null (r, "epoch 2 has a replanned_before entry");
    cr_expect_eq ((int) pltest_num (r, "device"), who);
    cr_expect_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (r, "what")),
                      "split_point");
    cr_expect_eq ((int) pltest_num (r, "before"), from);
    cr_expect_eq ((int) pltest_num (r, "after"), to);
    cr_expect_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (r, "reason")),
                      "split_point_moves in the config");
    //  Training happened: the loss fell.
    double first = pltest_num (e1, "train_loss"), last = pltest_num (e2, "train_loss");
    cr_expect (last < first, "training loss %g then %g", first, last);
    cJSON_Delete (s);
}

//  mode with micro micro-batches: device who moves from -> to before epoch
//  2 (the other stays at `other`); the model equals the runs without a
//  move at the old and at the new split points.
static void
s_move_keeps_fedavg (const char *mode, int micro, int who, int from, int to, int other)
{
    if (access (FMNIST_TRAIN, R_OK))
        cr_skip_test ("dataset-fashion-mnist is not installed");
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "split_move");
    int split[2][2];
    split[0][who] = from;
    split[1][who] = to;
    split[0][1 - who] = split[1][1 - who] = other;
    char before[32], after[32], moves[96];
    snprintf (before, sizeof before, "[%d, %d]", split[0][0], split[0][1]);
    snprintf (after, sizeof after, "[%d, %d]", split[1][0], split[1][1]);
    snprintf (moves, sizeof moves, "[{\"epoch\": 2, \"device\": %d, \"split_point\": %d}]",
              who, to);
    nn_model_t *moved = s_run (&run, "moved", mode, before, micro, moves);
    //  The device rebuilt its part (the logs are the last run's).
    char line[96], log[32];
    snprintf (line, sizeof line, "client: new plan: split %d -> %d", from, to);
    snprintf (log, sizeof log, "client%d.log", who);
    cr_expect (pltest_log_has (&run, log, line), "device %d logged \"%s\"", who, line);
    nn_model_t *old = s_run (&run, "old", mode, before, micro, "[]");
    nn_model_t *new = s_run (&run, "new", mode, after, micro, "[]");
    double d_old = pltest_max_rel_diff (moved, old), d_new = pltest_max_rel_diff (moved, new);
    cr_log_info ("%s: device %d moved %d -> %d before epoch 2: largest relative difference "
                 "%g against %s throughout, %g against %s\n", mode, who, from, to, d_old,
                 before, d_new, after);
    cr_expect (d_new < 1e-5, "%s: the moved run differs from the one at %s by %g", mode,
               after, d_new);
    cr_expect (d_old < 1e-5, "%s: the moved run differs from the one at %s by %g", mode,
               before, d_old);
    s_expect_summary (&run, split, micro, who, from, to);
    //  timeline.csv: every row of device i in epoch e ran split[e - 1][i], N micro.
    pltest_expect_timeline_split (run.dir, "moved", 2, 2, &split[0][0], micro);
    nn_model_destroy (&moved);
    nn_model_destroy (&old);
    nn_model_destroy (&new);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (split_move, sfl_device_0_from_1_to_3_keeps_fedavg, .timeout = 300)
{
    s_move_keeps_fedavg ("sfl", 1, 0, 1, 3, 2);
}

Test (split_move, pipelearn_device_1_from_3_to_1_keeps_fedavg, .timeout = 300)
{
    s_move_keeps_fedavg ("pipelearn", 2, 1, 3, 1, 2);
}
