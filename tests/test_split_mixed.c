/*  test_split_mixed.c: devices at different split points (suite 'net'):
    a real server and two real clients over loopback, device 0 at split
    point 1 and device 1 at 3 ("split_point": [1, 3]).

    Whatever its split point, device i's part and its server replica
    together train the whole model on its shard: the device steps SGD on
    units 0..P_i-1, its replica on P_i..U, with the gradient of the same
    loss (N micro-batches accumulated before one step on both sides; BN on
    each micro-batch's statistics either way). FedAvg per unit over every
    holder is then FedAvg of each device's whole model, so the final model
    does not depend on the split points: a run at [1, 3] must equal the
    same run at split point 2 for every device, to float rounding, in sfl
    and pipelearn (VGG5 with BN, momentum 0.9, 2 epochs, FedAvg twice an
    epoch). A list of equal split points is the scalar run, bit for bit.
    summary.json records each device's split point and N, per epoch too,
    and every row of timeline.csv the split point and N its device ran.
    Synthetic data (no dataset package needed). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pltest.h"

static void
s_config (char *out, size_t size, const char *mode, const char *split, int micro)
{
    snprintf (out, size,
              "{\"model\": \"vgg5\", \"dataset\": \"synthetic\", \"samples\": 400, "
              "\"test_samples\": 100, \"batch_size\": 20, \"epochs\": 2, \"seed\": 11, "
              "\"learning_rate\": 0.02, \"momentum\": 0.9, \"split_point\": %s, "
              "\"threads\": 1, \"devices\": 2, \"mode\": \"%s\", \"micro_batches\": %d, "
              "\"aggregation_frequency\": 5}", split, mode, micro);
}

//  The run at split, its final model (the caller destroys it).
static nn_model_t *
s_run (pltest_run_t *run, const char *sub, const char *mode, const char *split, int micro)
{
    char config[1024];
    s_config (config, sizeof config, mode, split, micro);
    pltest_run_daemons (run, sub, config, 2);
    nn_model_t *m = pltest_load_model (run->dir, sub, "vgg5");
    cr_assert_not_null (m, "%s %s: the final checkpoint does not load", mode, split);
    return m;
}

//  summary.json's assignment and each epoch's: split points [1, 3], N micro.
static void
s_expect_assignment (const cJSON *o, int micro, const char *where)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive (o, "split_point");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive (o, "micro_batches");
    cr_assert (cJSON_IsArray (p) && cJSON_GetArraySize (p) == 2, "%s: split_point", where);
    cr_assert (cJSON_IsArray (n) && cJSON_GetArraySize (n) == 2, "%s: micro_batches", where);
    cr_expect_eq (cJSON_GetArrayItem (p, 0)->valueint, 1, "%s: device 0's split point", where);
    cr_expect_eq (cJSON_GetArrayItem (p, 1)->valueint, 3, "%s: device 1's split point", where);
    for (int i = 0; i < 2; i++)
        cr_expect_eq (cJSON_GetArrayItem (n, i)->valueint, micro, "%s: device %d's N", where,
                      i);
}

static void
s_mixed_equals_uniform (const char *mode, int micro)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "split_mixed");
    nn_model_t *mixed = s_run (&run, "mixed", mode, "[1, 3]", micro);
    nn_model_t *one = s_run (&run, "one", mode, "2", micro);
    double d = pltest_max_rel_diff (mixed, one);
    cr_log_info ("%s: split points [1, 3] against 2: largest relative difference %g\n",
                 mode, d);
    cr_expect (d < 1e-5, "%s: the model at split points [1, 3] differs from the one at 2 "
               "by %g", mode, d);
    //  And training happened: the model moved from its initial weights.
    cJSON *s = pltest_summary (run.dir, "mixed");
    s_expect_assignment (cJSON_GetObjectItemCaseSensitive (s, "assignment"), micro,
                         "summary.json assignment");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (s, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), 2);
    for (int e = 0; e < 2; e++) {
        char where[64];
        snprintf (where, sizeof where, "summary.json epoch %d", e + 1);
        s_expect_assignment (cJSON_GetArrayItem (epochs, e), micro, where);
    }
    double first = pltest_num (cJSON_GetArrayItem (epochs, 0), "train_loss");
    double last = pltest_num (cJSON_GetArrayItem (epochs, 1), "train_loss");
    cr_expect (last < first, "%s: training loss %g then %g", mode, first, last);
    cJSON_Delete (s);
    //  timeline.csv: each row says the split point and N its device ran.
    const int split[2] = { 1, 3 };
    pltest_expect_timeline_split (run.dir, "mixed", 2, 0, split, micro);
    nn_model_destroy (&mixed);
    nn_model_destroy (&one);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}

Test (split_mixed, sfl_at_1_and_3_equals_one_split_point, .timeout = 300)
{
    s_mixed_equals_uniform ("sfl", 1);
}

Test (split_mixed, pipelearn_at_1_and_3_equals_one_split_point, .timeout = 300)
{
    s_mixed_equals_uniform ("pipelearn", 2);
}

Test (split_mixed, equal_list_is_the_scalar_run_bit_for_bit, .timeout = 300)
{
    pltest_run_t run = { 0 };
    pltest_mkdtemp (run.dir, "split_mixed");
    nn_model_t *list = s_run (&run, "list", "pipelearn", "[2, 2]", 2);
    nn_model_t *scalar = s_run (&run, "scalar", "pipelearn", "2", 2);
    double d = pltest_max_rel_diff (list, scalar);
    cr_expect (d == 0.0, "split points [2, 2] differ from split point 2 by %g", d);
    nn_model_destroy (&list);
    nn_model_destroy (&scalar);
    pltest_kill_all (&run);
    pltest_rmtree (run.dir);
}
