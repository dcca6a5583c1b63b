/*  pipelearn-train as a user runs it: results file, flags, clear errors. */
#include <criterion/criterion.h>

#include "runcmd.h"

#include <cJSON.h>
#include <unistd.h>

static char s_dir[256];

static void
s_setup (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/pl-train-XXXXXX");
    cr_assert_not_null (mkdtemp (s_dir));
}

static void
s_teardown (void)
{
    char cmd[512], out[256];
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    runcmd (cmd, out, sizeof out);
}

static cJSON *
s_read_json (const char *path)
{
    FILE *f = fopen (path, "r");
    cr_assert_not_null (f, "%s missing", path);
    static char buf[1 << 16];
    size_t n = fread (buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose (f);
    cJSON *j = cJSON_Parse (buf);
    cr_assert_not_null (j, "%s is not JSON", path);
    return j;
}

TestSuite (train_cli, .init = s_setup, .fini = s_teardown);

Test (train_cli, writes_summary_with_the_documented_shape)
{
    char bin[1024], cmd[4096], out[16384], path[512];
    built ("server/pipelearn-train", bin, sizeof bin);
    snprintf (path, sizeof path, "%s/cfg.json", s_dir);
    FILE *f = fopen (path, "w");
    fprintf (f, "{\"dataset\": \"synthetic\", \"samples\": 400, \"test_samples\": 200,\n"
                " \"batch_size\": 40, \"epochs\": 2, \"seed\": 3, \"threads\": 2}\n");
    fclose (f);
    snprintf (cmd, sizeof cmd, "%s --config %s --results %s/out", bin, path, s_dir);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert (strstr (out, "train_acc"), "no table header: %s", out);
    snprintf (path, sizeof path, "%s/out/summary.json", s_dir);
    cJSON *j = s_read_json (path);
    cJSON *cfg = cJSON_GetObjectItem (j, "config");
    cr_assert_eq (cJSON_GetObjectItem (cfg, "batch_size")->valueint, 40);
    cr_assert_str_eq (cJSON_GetObjectItem (cfg, "dataset")->valuestring, "synthetic");
    cJSON *epochs = cJSON_GetObjectItem (j, "epochs");
    cr_assert_eq (cJSON_GetArraySize (epochs), 2);
    const char *keys[] = { "epoch", "wall_s", "eval_s", "train_loss", "train_acc",
                           "test_acc", "images_per_s" };
    for (int e = 0; e < 2; e++) {
        cJSON *ep = cJSON_GetArrayItem (epochs, e);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            cr_assert (cJSON_IsNumber (cJSON_GetObjectItem (ep, keys[k])), "epoch %d: %s",
                       e, keys[k]);
        double acc = cJSON_GetObjectItem (ep, "test_acc")->valuedouble;
        cr_assert (acc >= 0.0 && acc <= 1.0);
    }
    //  The synthetic classes are easy: two epochs learn them.
    double acc = cJSON_GetObjectItem (cJSON_GetArrayItem (epochs, 1), "test_acc")->valuedouble;
    cr_assert_gt (acc, 0.5, "test accuracy %.3f after 2 epochs on synthetic data", acc);
    cr_assert (cJSON_IsString (cJSON_GetObjectItem (j, "openblas_core")));
    cr_assert (cJSON_IsString (cJSON_GetObjectItem (j, "kernels")));
    cr_assert_gt (cJSON_GetObjectItem (j, "peak_rss_kb")->valuedouble, 1000);
    //  The directory the files went to (--results), not the config's default.
    char want[512];
    snprintf (want, sizeof want, "%s/out", s_dir);
    cr_assert_str_eq (cJSON_GetObjectItem (j, "results_dir")->valuestring, want);
    cr_assert_str_eq (cJSON_GetObjectItem (cfg, "results_dir")->valuestring, want);
    cJSON_Delete (j);
}

Test (train_cli, flags_override_the_config_file)
{
    char bin[1024], cmd[4096], out[16384], path[512];
    built ("server/pipelearn-train", bin, sizeof bin);
    snprintf (cmd, sizeof cmd,
              "%s --set dataset=synthetic --samples 100 --set test_samples=50 "
              "--set batch_size=25 --epochs 1 --seed 9 --results %s/o2", bin, s_dir);
    cr_assert_eq (runcmd (cmd, out, sizeof out), 0, "%s", out);
    snprintf (path, sizeof path, "%s/o2/summary.json", s_dir);
    cJSON *j = s_read_json (path);
    cJSON *cfg = cJSON_GetObjectItem (j, "config");
    cr_assert_eq (cJSON_GetObjectItem (cfg, "samples")->valueint, 100);
    cr_assert_eq (cJSON_GetObjectItem (cfg, "seed")->valueint, 9);
    cJSON_Delete (j);
}

static void
s_expect_error (const char *json, const char *needle)
{
    char bin[1024], cmd[4096], out[16384], path[512];
    built ("server/pipelearn-train", bin, sizeof bin);
    snprintf (path, sizeof path, "%s/bad.json", s_dir);
    FILE *f = fopen (path, "w");
    fputs (json, f);
    fclose (f);
    snprintf (cmd, sizeof cmd, "%s --config %s --results %s/o3", bin, path, s_dir);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_neq (rc, 0, "accepted %s: %s", json, out);
    cr_assert (strstr (out, needle), "message lacks \"%s\": %s", needle, out);
    cr_assert (strstr (out, "bad.json"), "message does not name the file: %s", out);
}

Test (train_cli, bad_configs_name_file_and_field)
{
    s_expect_error ("{\"batch_size\": -3}", "batch_size");
    s_expect_error ("{\"batch_sise\": 10}", "batch_sise");
    s_expect_error ("{\"model\": \"vgg99\"}", "model");
    s_expect_error ("{\"epochs\": 1,}", "line");
}

Test (train_cli, missing_dataset_is_a_clear_error)
{
    char bin[1024], cmd[4096], out[16384];
    built ("server/pipelearn-train", bin, sizeof bin);
    snprintf (cmd, sizeof cmd, "%s --data-dir %s/nowhere --results %s/o4", bin, s_dir, s_dir);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_neq (rc, 0);
    cr_assert (strstr (out, "nowhere") && strstr (out, "not found"), "%s", out);
}

Test (train_cli, unknown_flag_prints_usage)
{
    char bin[1024], cmd[2048], out[8192];
    built ("server/pipelearn-train", bin, sizeof bin);
    snprintf (cmd, sizeof cmd, "%s --frobnicate", bin);
    cr_assert_neq (runcmd (cmd, out, sizeof out), 0);
    cr_assert (strstr (out, "usage: pipelearn-train"), "%s", out);
}

//  "pad_to" (docs/datasets.md): VGG11's five pools need 32x32; 28x28
//  images are refused with the key to set, and train once padded.
Test (train_cli, pad_to_lets_vgg11_take_28x28_images)
{
    char bin[1024], cmd[4096], out[16384], path[512];
    built ("server/pipelearn-train", bin, sizeof bin);
    const char *common = "--set model=vgg11 --set dataset=synthetic --samples 40 "
                         "--set test_samples=20 --set batch_size=20 --epochs 1";
    snprintf (cmd, sizeof cmd, "%s %s --results %s/nopad", bin, common, s_dir);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_neq (rc, 0, "vgg11 took 28x28 images unpadded: %s", out);
    cr_assert (strstr (out, "\"pad_to\": 32"), "the error does not name pad_to: %s", out);
    snprintf (cmd, sizeof cmd, "%s %s --set pad_to=32 --results %s/pad", bin, common, s_dir);
    rc = runcmd (cmd, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    snprintf (path, sizeof path, "%s/pad/summary.json", s_dir);
    cJSON *j = s_read_json (path);
    cJSON *cfg = cJSON_GetObjectItem (j, "config");
    cr_assert_eq (cJSON_GetObjectItem (cfg, "pad_to")->valueint, 32);
    cJSON_Delete (j);
}
