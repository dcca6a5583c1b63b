/*  test_config.c: the JSON run config (common/run/pl_config.h). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "pl_config.h"

//  A private directory per test (Criterion runs tests in parallel
//  processes), holding at most one file.
typedef struct {
    char dir [256];
    char path [512];
} s_tmp_t;

static void
s_tmp_write (s_tmp_t *tmp, const char *name, const char *text, size_t size)
{
    const char *base = getenv ("TMPDIR");
    snprintf (tmp->dir, sizeof tmp->dir, "%s/pl_config_XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null (mkdtemp (tmp->dir), "mkdtemp %s", tmp->dir);
    snprintf (tmp->path, sizeof tmp->path, "%s/%s", tmp->dir, name);
    FILE *file = fopen (tmp->path, "wb");
    cr_assert_not_null (file);
    cr_assert_eq (fwrite (text, 1, size, file), size);
    cr_assert_eq (fclose (file), 0);
}

static void
s_tmp_remove (s_tmp_t *tmp)
{
    unlink (tmp->path);
    rmdir (tmp->dir);
}

//  Parse text over defaults; expect success.
static void
s_parse_ok (pl_config_t *config, const char *text)
{
    char err [NN_ERR_SIZE] = "";
    pl_config_defaults (config);
    int rc = pl_config_parse (config, text, "config.json", err, sizeof err);
    cr_assert_eq (rc, 0, "parse of %s failed: %s", text, err);
}

//  Parse text over defaults; expect failure and return the message.
static void
s_parse_fails (const char *text, char *err, size_t err_size)
{
    pl_config_t config;
    pl_config_defaults (&config);
    pl_config_t before = config;
    err [0] = 0;
    int rc = pl_config_parse (&config, text, "config.json", err, err_size);
    cr_assert_eq (rc, -1, "parse of %s should fail", text);
    cr_assert_neq (err [0], 0, "no message for %s", text);
    cr_assert_eq (memcmp (&before, &config, sizeof config), 0,
                  "a failed parse changed the config (%s)", text);
}

#define S_ASSERT_HAS(err, needle) \
    cr_assert_not_null (strstr ((err), (needle)), "message \"%s\" lacks \"%s\"", (err), (needle))

Test (config, defaults_pass_check)
{
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    cr_assert_eq (pl_config_check (&config, "defaults", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.experiment_name, "pipelearn");
    cr_assert_str_eq (config.model, "vgg5");
    cr_assert_str_eq (config.dataset, "fashion-mnist");
    cr_assert_str_eq (config.data_dir, "");
    cr_assert_eq (config.samples, 0);
    cr_assert_eq (config.batch_size, 100);
    cr_assert_eq (config.epochs, 1);
    cr_assert_float_eq (config.learning_rate, 0.01, 1e-15);
    cr_assert_float_eq (config.momentum, 0.9, 1e-15);
    cr_assert_eq (config.seed, 1);
    cr_assert_eq (config.partition, NN_PARTITION_CONTIGUOUS);
    cr_assert_eq (config.mode, PL_MODE_PIPELEARN);
    cr_assert_eq (config.devices, 2);
    cr_assert_eq (config.split_point, 1);
    cr_assert_eq (config.micro_batches, 4);
    cr_assert_eq (config.aggregation_frequency, -1);
    cr_assert_eq (config.min_devices, 1);
    cr_assert_eq (config.device_timeout_s, 30.0);
    cr_assert_eq (config.round_timeout_s, 600.0);
    cr_assert_str_eq (config.bind, "tcp://*:5555");
    cr_assert_str_eq (config.results_dir, "results");
}

static void
s_assert_round_trip (const pl_config_t *config)
{
    cJSON *json = pl_config_to_json (config);
    cr_assert_not_null (json);
    char *text = cJSON_Print (json);
    cr_assert_not_null (text);
    pl_config_t again;
    char err [NN_ERR_SIZE] = "";
    pl_config_defaults (&again);
    cr_assert_eq (pl_config_parse (&again, text, "round-trip", err, sizeof err), 0,
                  "%s\n%s", err, text);
    cr_assert_eq (memcmp (config, &again, sizeof again), 0, "round trip differs:\n%s", text);
    cJSON_free (text);
    cJSON_Delete (json);
}

Test (config, full_file_round_trips)
{
    const char *text =
        "{\n"
        "  \"experiment_name\": \"cifar-run\",\n"
        "  \"model\": \"vgg5-nobn\",\n"
        "  \"dataset\": \"cifar10\",\n"
        "  \"data_dir\": \"/srv/data/cifar\",\n"
        "  \"samples\": 12000,\n"
        "  \"test_samples\": 2000,\n"
        "  \"batch_size\": 64,\n"
        "  \"epochs\": 7,\n"
        "  \"learning_rate\": 0.0123456789012345,\n"
        "  \"momentum\": 0.95,\n"
        "  \"weight_decay\": 5e-4,\n"
        "  \"seed\": 9007199254740992,\n"
        "  \"threads\": 3,\n"
        "  \"augment\": true,\n"
        "  \"flip\": true,\n"
        "  \"partition\": \"dirichlet\",\n"
        "  \"dirichlet_alpha\": 0.1,\n"
        "  \"mode\": \"sfl\",\n"
        "  \"devices\": 8,\n"
        "  \"split_point\": 3,\n"
        "  \"micro_batches\": 16,\n"
        "  \"aggregation_frequency\": 25,\n"
        "  \"bind\": \"tcp://10.0.0.1:6000\",\n"
        "  \"results_dir\": \"/var/lib/pipelearn\"\n"
        "}\n";
    pl_config_t config;
    s_parse_ok (&config, text);
    cr_assert_str_eq (config.model, "vgg5-nobn");
    cr_assert_eq (config.seed, 9007199254740992ULL);
    cr_assert_eq (config.partition, NN_PARTITION_DIRICHLET);
    cr_assert_eq (config.weight_decay, 5e-4);
    cr_assert_eq (config.augment, true);
    cr_assert_eq (config.aggregation_frequency, 25);
    char err [NN_ERR_SIZE] = "";
    cr_assert_eq (pl_config_check (&config, "config.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);

    //  Values set in code that need 17 digits survive printing too.
    config.learning_rate = 0.1 + 0.2;
    config.dirichlet_alpha = 1.0 / 3.0;
    config.seed = 9007199254740991ULL;
    s_assert_round_trip (&config);

    //  The defaults and "auto" round-trip too.
    pl_config_defaults (&config);
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"split_point\": \"auto\", \"micro_batches\": \"auto\"}");
    s_assert_round_trip (&config);
}

Test (config, to_json_uses_canonical_forms)
{
    pl_config_t config;
    s_parse_ok (&config, "{\"split_point\": \"auto\", \"micro_batches\": \"auto\", "
                         "\"seed\": 123456789012, \"partition\": \"iid\"}");
    cr_assert_eq (config.split_point, PL_AUTO);
    cr_assert_eq (config.micro_batches, PL_AUTO);
    cJSON *json = pl_config_to_json (&config);
    cr_assert_not_null (json);
    cr_assert_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (json, "split_point")), "auto");
    cr_assert_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (json, "micro_batches")), "auto");
    cr_assert_str_eq (cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (json, "partition")), "iid");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive (json, "seed");
    cr_assert (cJSON_IsNumber (seed));
    cr_assert_eq (seed->valuedouble, 123456789012.0);
    cr_assert_null (cJSON_GetObjectItemCaseSensitive (json, "epoch_num"));
    cJSON_Delete (json);

    //  The largest seed prints with all its digits, as a JSON number.
    config.seed = 9007199254740992ULL;
    json = pl_config_to_json (&config);
    cr_assert_not_null (json);
    char *text = cJSON_PrintUnformatted (json);
    S_ASSERT_HAS (text, "\"seed\":9007199254740992,");
    cJSON_free (text);
    cr_assert_eq (cJSON_GetArraySize (json), 53, "one member per canonical key");
    cJSON_Delete (json);
}

Test (config, each_alias_maps_to_its_key)
{
    pl_config_t config;
    s_parse_ok (&config, "{\"model_name\": \"VGG5\"}");
    cr_assert_str_eq (config.model, "vgg5");
    s_parse_ok (&config, "{\"model_name\": \"VGG5-NoBN\"}");
    cr_assert_str_eq (config.model, "vgg5-nobn");
    s_parse_ok (&config, "{\"dataset_name\": \"CIFAR10\"}");
    cr_assert_str_eq (config.dataset, "cifar10");
    s_parse_ok (&config, "{\"dataset_name\": \"CIFAR-10\"}");
    cr_assert_str_eq (config.dataset, "cifar10");
    s_parse_ok (&config, "{\"dataset_name\": \"MNIST\"}");
    cr_assert_str_eq (config.dataset, "mnist");
    s_parse_ok (&config, "{\"dataset_name\": \"FashionMNIST\"}");
    cr_assert_str_eq (config.dataset, "fashion-mnist");
    s_parse_ok (&config, "{\"dataset_name\": \"FMNIST\", \"model\": \"vgg5-nobn\"}");
    cr_assert_str_eq (config.dataset, "fashion-mnist");
    s_parse_ok (&config, "{\"data_size\": 10000}");
    cr_assert_eq (config.samples, 10000);
    s_parse_ok (&config, "{\"test_data_size\": 500}");
    cr_assert_eq (config.test_samples, 500);
    s_parse_ok (&config, "{\"epoch_num\": 12}");
    cr_assert_eq (config.epochs, 12);
    s_parse_ok (&config, "{\"client_num\": 4}");
    cr_assert_eq (config.devices, 4);
    s_parse_ok (&config, "{\"layer_num_on_client\": 2}");
    cr_assert_eq (config.split_point, 2);
    s_parse_ok (&config, "{\"pipe_batch_num\": 5}");
    cr_assert_eq (config.micro_batches, 5);
    s_parse_ok (&config, "{\"lr\": 0.05}");
    cr_assert_float_eq (config.learning_rate, 0.05, 1e-15);
    s_parse_ok (&config, "{\"aggregate_frequency\": 10}");
    cr_assert_eq (config.aggregation_frequency, 10);
    s_parse_ok (&config, "{\"aggregation_frequency\": -1, \"batch_size\": 50}");
    cr_assert_eq (config.aggregation_frequency, -1);
    cr_assert_eq (config.batch_size, 50);
    s_parse_ok (&config, "{\"thread_num\": 2}");
    cr_assert_eq (config.threads, 2);
    //  The reference's thread_num -1 means all cores: our 0.
    s_parse_ok (&config, "{\"thread_num\": -1}");
    cr_assert_eq (config.threads, 0);
}

Test (config, alias_value_errors_name_the_alias)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"epoch_num\": 0}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: epoch_num (alias of epochs): expected an integer from 1 to 1000000, got 0");
    //  The reference's "no split" is a mode here, and the message says so.
    s_parse_fails ("{\"layer_num_on_client\": -1}", err, sizeof err);
    S_ASSERT_HAS (err, "layer_num_on_client");
    S_ASSERT_HAS (err, "\"fl\"");
    s_parse_fails ("{\"model_name\": \"ResNet50\"}", err, sizeof err);
    S_ASSERT_HAS (err, "\"ResNet50\"");
    S_ASSERT_HAS (err, "not implement");
    s_parse_fails ("{\"dataset_name\": \"CIFAR-100\"}", err, sizeof err);
    S_ASSERT_HAS (err, "\"CIFAR-100\"");
}

Test (config, models_come_from_the_registry)
{
    pl_config_t config;
    char err [NN_ERR_SIZE];
    //  The reference's spellings give the registry's names.
    s_parse_ok (&config, "{\"model_name\": \"ResNet18\", \"split_point\": 9}");
    cr_assert_str_eq (config.model, "resnet18");
    s_parse_ok (&config, "{\"model\": \"VGG11\"}");
    cr_assert_str_eq (config.model, "vgg11");
    //  split_point is checked against the model's own units (resnet18: 10).
    s_parse_ok (&config, "{\"model\": \"resnet18\", \"split_point\": 10}");
    cr_assert_eq (pl_config_check (&config, "config.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "resnet18 has 10 split units");
    config.split_point = 9;
    cr_assert_eq (pl_config_check (&config, "config.json", err, sizeof err), 0, "%s", err);
    //  An unknown name lists the known ones.
    s_parse_fails ("{\"model\": \"vgg9\"}", err, sizeof err);
    S_ASSERT_HAS (err, "\"vgg9\"");
    S_ASSERT_HAS (err, "resnet18");
    S_ASSERT_HAS (err, "vgg5-nobn");
}

Test (config, unknown_key_suggests_the_near_one)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"batch_sise\": 10}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: unknown key \"batch_sise\" (did you mean \"batch_size\"?)");
    s_parse_fails ("{\"Epochs\": 10}", err, sizeof err);
    S_ASSERT_HAS (err, "\"Epochs\"");
    S_ASSERT_HAS (err, "\"epochs\"");
    s_parse_fails ("{\"epoch_nm\": 10}", err, sizeof err);
    S_ASSERT_HAS (err, "\"epoch_num\"");
    s_parse_fails ("{\"zebra_count\": 10}", err, sizeof err);
    S_ASSERT_HAS (err, "config.json");
    S_ASSERT_HAS (err, "\"zebra_count\"");
    cr_assert_null (strstr (err, "did you mean"), "%s", err);
}

Test (config, refused_reference_keys_say_why)
{
    char err [NN_ERR_SIZE];
    const char *keys [] = { "server_address", "port", "uplink_bandwidth", "downlink_bandwidth",
                            "profile_iter_num", "enable_val", "enable_test",
                            "same_data_size_for_each_client", "client_index" };
    for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++) {
        char text [128];
        snprintf (text, sizeof text, "{\"%s\": 0}", keys [i]);
        s_parse_fails (text, err, sizeof err);
        S_ASSERT_HAS (err, keys [i]);
        S_ASSERT_HAS (err, "reference key not supported: ");
    }
    s_parse_fails ("{\"uplink_bandwidth\": 10}", err, sizeof err);
    S_ASSERT_HAS (err, "measures bandwidth");
}

Test (config, out_of_range_values_name_field_and_value)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"batch_size\": -3}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: batch_size: expected an integer from 1 to 4096, got -3");
    s_parse_fails ("{\"momentum\": 1}", err, sizeof err);
    S_ASSERT_HAS (err, "momentum");
    s_parse_fails ("{\"learning_rate\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "learning_rate");
    s_parse_fails ("{\"weight_decay\": -0.1}", err, sizeof err);
    S_ASSERT_HAS (err, "got -0.1");
    s_parse_fails ("{\"samples\": -1}", err, sizeof err);
    S_ASSERT_HAS (err, "samples");
    s_parse_fails ("{\"test_samples\": -5}", err, sizeof err);
    S_ASSERT_HAS (err, "test_samples");
    s_parse_fails ("{\"device_timeout_s\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "device_timeout_s");
    s_parse_fails ("{\"aggregation_frequency\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "-1 for once per epoch");
    s_parse_fails ("{\"split_point\": -1}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point");
    s_parse_fails ("{\"devices\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "devices");
    s_parse_fails ("{\"seed\": -1}", err, sizeof err);
    S_ASSERT_HAS (err, "seed");
    s_parse_fails ("{\"seed\": 1e300}", err, sizeof err);
    S_ASSERT_HAS (err, "2^53");
    s_parse_fails ("{\"batch_size\": 1e10}", err, sizeof err);
    S_ASSERT_HAS (err, "batch_size");
    s_parse_fails ("{\"experiment_name\": \"\"}", err, sizeof err);
    S_ASSERT_HAS (err, "experiment_name");
    s_parse_fails ("{\"bind\": \"localhost\"}", err, sizeof err);
    S_ASSERT_HAS (err, "bind");
    char text [200];
    snprintf (text, sizeof text, "{\"experiment_name\": \"%0100d\"}", 7);
    s_parse_fails (text, err, sizeof err);
    S_ASSERT_HAS (err, "at most 63 bytes");
}

Test (config, wrong_types_say_what_was_found)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"batch_size\": \"abc\"}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: batch_size: expected an integer from 1 to 4096, got \"abc\" (string)");
    s_parse_fails ("{\"batch_size\": 100.5}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: batch_size: expected an integer from 1 to 4096, got 100.5");
    s_parse_fails ("{\"augment\": 1}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: augment: expected true, false or \"auto\" (the "
                      "dataset's default), got 1");
    s_parse_fails ("{\"learning_rate\": true}", err, sizeof err);
    S_ASSERT_HAS (err, "got true (boolean)");
    s_parse_fails ("{\"model\": null}", err, sizeof err);
    S_ASSERT_HAS (err, "got null");
    s_parse_fails ("{\"epochs\": [1]}", err, sizeof err);
    S_ASSERT_HAS (err, "got an array");
    s_parse_fails ("{\"seed\": 1.5}", err, sizeof err);
    S_ASSERT_HAS (err, "seed");
    s_parse_fails ("{\"split_point\": \"later\"}", err, sizeof err);
    S_ASSERT_HAS (err, "\"auto\"");
    s_parse_fails ("{\"model\": \"vgg6\"}", err, sizeof err);
    S_ASSERT_HAS (err, "\"vgg6\"");
    s_parse_fails ("{\"partition\": \"random\"}", err, sizeof err);
    S_ASSERT_HAS (err, "partition");

    //  Integers written as 100.0 are integers.
    pl_config_t config;
    s_parse_ok (&config, "{\"batch_size\": 100.0, \"seed\": 4e3}");
    cr_assert_eq (config.batch_size, 100);
    cr_assert_eq (config.seed, 4000);
}

Test (config, top_level_must_be_an_object)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("[1, 2]", err, sizeof err);
    S_ASSERT_HAS (err, "config.json");
    S_ASSERT_HAS (err, "object");
    s_parse_fails ("42", err, sizeof err);
    S_ASSERT_HAS (err, "object");
}

Test (config, invalid_json_gives_position)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\n  \"batch_size\": 10,\n  \"epochs\": ,\n  \"seed\": 2\n}\n", err, sizeof err);
    S_ASSERT_HAS (err, "config.json");
    S_ASSERT_HAS (err, "line 3");
    S_ASSERT_HAS (err, "column");
    s_parse_fails ("{\"batch_size\": 10", err, sizeof err);
    S_ASSERT_HAS (err, "line 1");
    S_ASSERT_HAS (err, "end of input");
    s_parse_fails ("{\"batch_size\": 10} trailing", err, sizeof err);
    S_ASSERT_HAS (err, "line 1");
    s_parse_fails ("", err, sizeof err);
    S_ASSERT_HAS (err, "config.json");
}

Test (config, alias_and_canonical_must_agree)
{
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"epochs\": 3, \"epoch_num\": 5}", err, sizeof err);
    S_ASSERT_HAS (err, "config.json");
    S_ASSERT_HAS (err, "epochs");
    S_ASSERT_HAS (err, "epoch_num");
    S_ASSERT_HAS (err, "3 vs 5");
    //  Different spellings of the same value do not conflict.
    pl_config_t config;
    s_parse_ok (&config, "{\"model\": \"vgg5\", \"model_name\": \"VGG5\", "
                         "\"epoch_num\": 4, \"epochs\": 4.0}");
    cr_assert_str_eq (config.model, "vgg5");
    cr_assert_eq (config.epochs, 4);
    //  A key twice in one object is ambiguous whatever the values.
    s_parse_fails ("{\"epochs\": 3, \"epochs\": 3}", err, sizeof err);
    S_ASSERT_HAS (err, "epochs");
    S_ASSERT_HAS (err, "more than once");
}

Test (config, failed_parse_leaves_config_untouched)
{
    pl_config_t config;
    char err [NN_ERR_SIZE];
    s_parse_ok (&config, "{\"epochs\": 9}");
    pl_config_t before = config;
    cr_assert_eq (pl_config_parse (&config, "{\"epochs\": 2, \"batch_size\": 0}",
                                   "x.json", err, sizeof err), -1);
    cr_assert_eq (memcmp (&before, &config, sizeof config), 0);
    S_ASSERT_HAS (err, "x.json: batch_size");
}

Test (config, set_overlays_one_key)
{
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    cr_assert_eq (pl_config_set (&config, "batch_size=50", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.batch_size, 50);
    cr_assert_eq (pl_config_set (&config, "model=vgg5-nobn", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.model, "vgg5-nobn");
    cr_assert_eq (pl_config_set (&config, "dataset=\"mnist\"", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.dataset, "mnist");
    cr_assert_eq (pl_config_set (&config, "augment=true", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.augment, true);
    cr_assert_eq (pl_config_set (&config, "split_point=auto", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.split_point, PL_AUTO);
    cr_assert_eq (pl_config_set (&config, "micro_batches=\"auto\"", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.micro_batches, PL_AUTO);
    cr_assert_eq (pl_config_set (&config, "bind=tcp://127.0.0.1:7000", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.bind, "tcp://127.0.0.1:7000");
    //  A string key takes the text even when it reads as JSON.
    cr_assert_eq (pl_config_set (&config, "experiment_name=2024", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.experiment_name, "2024");
    cr_assert_eq (pl_config_set (&config, "data_dir=", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq (config.data_dir, "");
    //  Aliases work on the command line too.
    cr_assert_eq (pl_config_set (&config, "epoch_num=3", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.epochs, 3);
    cr_assert_eq (pl_config_set (&config, "learning_rate=0.5", err, sizeof err), 0, "%s", err);
    cr_assert_float_eq (config.learning_rate, 0.5, 1e-15);
}

Test (config, set_errors_name_the_source)
{
    pl_config_t config;
    pl_config_defaults (&config);
    pl_config_t before = config;
    char err [NN_ERR_SIZE] = "";
    cr_assert_eq (pl_config_set (&config, "batch_size=abc", err, sizeof err), -1);
    cr_assert_str_eq (err, "--set: batch_size: expected an integer from 1 to 4096, got \"abc\" (string)");
    cr_assert_eq (pl_config_set (&config, "batch_sise=5", err, sizeof err), -1);
    S_ASSERT_HAS (err, "--set: unknown key \"batch_sise\"");
    S_ASSERT_HAS (err, "\"batch_size\"");
    cr_assert_eq (pl_config_set (&config, "batch_size", err, sizeof err), -1);
    S_ASSERT_HAS (err, "--set");
    S_ASSERT_HAS (err, "key=value");
    cr_assert_eq (pl_config_set (&config, "=5", err, sizeof err), -1);
    S_ASSERT_HAS (err, "key=value");
    cr_assert_eq (pl_config_set (&config, "augment=yes", err, sizeof err), -1);
    S_ASSERT_HAS (err, "--set: augment");
    cr_assert_eq (memcmp (&before, &config, sizeof config), 0);
}

Test (config, check_rejects_bad_combinations)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";

    pl_config_defaults (&config);
    config.batch_size = 8;
    config.micro_batches = 9;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "run.json");
    S_ASSERT_HAS (err, "micro_batches");
    S_ASSERT_HAS (err, "batch_size");
    config.micro_batches = 8;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);

    pl_config_defaults (&config);
    config.split_point = 5;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "split_point");
    S_ASSERT_HAS (err, "vgg5");
    S_ASSERT_HAS (err, "1..4");
    config.split_point = 4;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    //  FL does not split, so its split_point is not checked.
    config.split_point = 5;
    config.mode = PL_MODE_FL;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    config.mode = PL_MODE_SL;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);

    pl_config_defaults (&config);
    config.min_devices = 3;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "min_devices");
    config.min_devices = 2;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);

    pl_config_defaults (&config);
    config.devices = 4;
    config.samples = 3;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "samples");
    S_ASSERT_HAS (err, "devices");
    config.samples = 0;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);

    //  Values set in code get the same checks as parsed ones.
    pl_config_defaults (&config);
    config.test_samples = -1;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "test_samples");
    pl_config_defaults (&config);
    config.batch_size = 0;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "batch_size");
    pl_config_defaults (&config);
    strcpy (config.model, "VGG5");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "model");
}

Test (config, check_leaves_divisibility_to_the_server)
{
    //  pipelearn-train checks the same config and ignores micro_batches:
    //  the default 4 must not refuse a batch of 50 there.
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    pl_config_defaults (&config);
    config.batch_size = 50;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
}

Test (config, check_leaves_auto_to_the_planner)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";

    //  "auto" passes the check in every mode (pipelearn-server plans it);
    //  the range checks apply to numbers.
    const char *modes [] = { "pipelearn", "sfl", "sl", "fl" };
    for (size_t i = 0; i < 4; i++) {
        char text [160];
        snprintf (text, sizeof text, "{\"split_point\": \"auto\", \"micro_batches\": "
                  "\"auto\", \"mode\": \"%s\", \"batch_size\": 8}", modes [i]);
        s_parse_ok (&config, text);
        cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s: %s",
                      modes [i], err);
    }
    s_parse_ok (&config, "{\"split_point\": \"auto\", \"micro_batches\": 9, "
                         "\"batch_size\": 8}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "micro_batches");
    s_parse_ok (&config, "{\"split_point\": 7, \"micro_batches\": \"auto\"}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "split_point");
    //  The planner's assumed link.
    s_parse_ok (&config, "{\"uplink_mbps\": 2.5, \"downlink_mbps\": 8, \"rtt_ms\": 0}");
    cr_assert_eq (config.uplink_mbps, 2.5);
    s_parse_fails ("{\"uplink_mbps\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "uplink_mbps");
}

Test (config, load_missing_file_names_the_path)
{
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    const char *path = "/nonexistent/pipelearn/config.json";
    cr_assert_eq (pl_config_load (&config, path, err, sizeof err), -1);
    S_ASSERT_HAS (err, path);
    S_ASSERT_HAS (err, "No such file");
}

Test (config, load_reference_style_file)
{
    //  The reference's config.json layout, keeping the keys that mean
    //  something here.
    const char *text =
        "{\n"
        "  \"experiment_name\": \"test\",\n"
        "  \"client_num\": 4,\n"
        "  \"dataset_name\": \"CIFAR-10\",\n"
        "  \"model_name\": \"VGG5\",\n"
        "  \"data_size\": 10000,\n"
        "  \"test_data_size\": 10000,\n"
        "  \"epoch_num\": 1,\n"
        "  \"aggregation_frequency\": -1,\n"
        "  \"batch_size\": 100,\n"
        "  \"layer_num_on_client\": 1,\n"
        "  \"pipe_batch_num\": 1\n"
        "}";
    s_tmp_t tmp;
    s_tmp_write (&tmp, "config.json", text, strlen (text));
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    int rc = pl_config_load (&config, tmp.path, err, sizeof err);
    s_tmp_remove (&tmp);
    cr_assert_eq (rc, 0, "%s", err);
    cr_assert_str_eq (config.experiment_name, "test");
    cr_assert_eq (config.devices, 4);
    cr_assert_str_eq (config.dataset, "cifar10");
    cr_assert_str_eq (config.model, "vgg5");
    cr_assert_eq (config.samples, 10000);
    cr_assert_eq (config.test_samples, 10000);
    cr_assert_eq (config.epochs, 1);
    cr_assert_eq (config.aggregation_frequency, -1);
    cr_assert_eq (config.batch_size, 100);
    cr_assert_eq (config.split_point, 1);
    cr_assert_eq (config.micro_batches, 1);
    cr_assert_eq (pl_config_check (&config, tmp.path, err, sizeof err), 0, "%s", err);
}

Test (config, load_unmodified_reference_file_names_first_refused_key)
{
    const char *text =
        "{\n"
        "  \"experiment_name\": \"test\",\n"
        "  \"server_address\": \"127.0.0.1\",\n"
        "  \"port\": 50000,\n"
        "  \"client_num\": 4\n"
        "}";
    s_tmp_t tmp;
    s_tmp_write (&tmp, "config.json", text, strlen (text));
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    int rc = pl_config_load (&config, tmp.path, err, sizeof err);
    s_tmp_remove (&tmp);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, tmp.path);
    S_ASSERT_HAS (err, "server_address: PipeLearn reference key not supported");
}

Test (config, load_errors_name_the_file)
{
    s_tmp_t tmp;
    const char *bad = "{\n\"epochs\": 2,\n\"seed\": 1,,\n}";
    s_tmp_write (&tmp, "bad.json", bad, strlen (bad));
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    int rc = pl_config_load (&config, tmp.path, err, sizeof err);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, tmp.path);
    S_ASSERT_HAS (err, "line 3");
    s_tmp_remove (&tmp);

    //  Over the 1 MiB cap: refused before parsing.
    size_t size = 1024 * 1024 + 10;
    char *big = nn_malloc (size);
    memset (big, ' ', size);
    big [0] = '{';
    big [size - 1] = '}';
    s_tmp_write (&tmp, "big.json", big, size);
    nn_free (big);
    rc = pl_config_load (&config, tmp.path, err, sizeof err);
    s_tmp_remove (&tmp);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, tmp.path);
    S_ASSERT_HAS (err, "1 MiB");

    //  A directory is not a config file.
    const char *base = getenv ("TMPDIR");
    char dir [256];
    snprintf (dir, sizeof dir, "%s/pl_config_XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null (mkdtemp (dir));
    rc = pl_config_load (&config, dir, err, sizeof err);
    rmdir (dir);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, dir);
}

//  Values that made the core abort in nn_malloc ("out of memory allocating
//  479 TB" for batch_size 2^31-1, 1.7 TB for a million threads) or would
//  overflow a timer: refused by the parser with the key and the bound, and
//  by pl_config_check for a config built in code.
Test (config, extreme_values_are_refused_with_their_bound)
{
    static const struct {
        const char *text;
        const char *needle;
    } cases [] = {
        { "{\"batch_size\": 2147483647}", "batch_size: expected an integer from 1 to 4096" },
        { "{\"threads\": 1000000}", "threads: expected an integer from 0 to 256" },
        { "{\"thread_num\": 1000000}", "thread_num (alias of threads)" },
        { "{\"samples\": 2147483647}", "samples: expected an integer from 0 to 10000000" },
        { "{\"test_samples\": 2147483647}", "test_samples" },
        { "{\"devices\": 2147483647}", "devices: expected an integer from 1 to 1024" },
        { "{\"min_devices\": 2147483647}", "min_devices" },
        { "{\"epochs\": 2147483647}", "epochs: expected an integer from 1 to 1000000" },
        { "{\"micro_batches\": 2147483647}", "micro_batches" },
        { "{\"device_timeout_s\": 1e300}", "device_timeout_s: expected seconds > 0 and <= 604800" },
        { "{\"round_timeout_s\": 1e300}", "round_timeout_s" },
        { "{\"uplink_mbps\": 1e300}", "uplink_mbps" },
        { "{\"downlink_mbps\": 1e300}", "downlink_mbps" },
        { "{\"rtt_ms\": 1e300}", "rtt_ms" },
        { "{\"host_copy_mbps\": 1e300}", "host_copy_mbps" },
    };
    char err [NN_ERR_SIZE];
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        s_parse_fails (cases [i].text, err, sizeof err);
        S_ASSERT_HAS (err, cases [i].needle);
    }
    //  The bounds themselves are accepted.
    pl_config_t config;
    s_parse_ok (&config, "{\"batch_size\": 4096, \"threads\": 256, \"devices\": 1024,"
                " \"samples\": 10000000, \"device_timeout_s\": 604800}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    //  --set goes through the same table.
    pl_config_defaults (&config);
    cr_assert_eq (pl_config_set (&config, "batch_size=2147483647", err, sizeof err), -1);
    S_ASSERT_HAS (err, "--set: batch_size");
    //  A config built in code is held to the same bounds.
    pl_config_defaults (&config);
    config.threads = 1000000;
    cr_assert_eq (pl_config_check (&config, "code", err, sizeof err), -1);
    S_ASSERT_HAS (err, "threads");
}

//  A FIFO as --config used to block in fopen until a writer came (forever);
//  it is refused at once, naming the path and what it is.
Test (config, fifo_and_other_non_regular_files_are_refused, .timeout = 20)
{
    const char *base = getenv ("TMPDIR");
    char dir [256], fifo [300];
    snprintf (dir, sizeof dir, "%s/pl_config_XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null (mkdtemp (dir));
    snprintf (fifo, sizeof fifo, "%s/config.json", dir);
    cr_assert_eq (mkfifo (fifo, 0600), 0);
    pl_config_t config;
    pl_config_defaults (&config);
    char err [NN_ERR_SIZE] = "";
    int rc = pl_config_load (&config, fifo, err, sizeof err);
    unlink (fifo);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, fifo);
    S_ASSERT_HAS (err, "not a regular file (a FIFO)");
    //  The same through the command line's --config.
    cr_assert_eq (mkfifo (fifo, 0600), 0);
    char arg0 [] = "pipelearn", arg1 [] = "--config";
    char *argv [] = { arg0, arg1, fifo, NULL };
    const char *path = NULL;
    rc = pl_config_load_args (&config, 3, argv, &path, err, sizeof err);
    unlink (fifo);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, "not a regular file");
    //  A character device never ends: refused too.
    rc = pl_config_load (&config, "/dev/zero", err, sizeof err);
    cr_assert_eq (rc, -1);
    S_ASSERT_HAS (err, "/dev/zero: not a regular file (a character device)");
    rmdir (dir);
}

Test (config, aggregation_rules_are_named_and_bounded)
{
    pl_config_t config;
    pl_config_defaults (&config);
    char err[512];
    cr_assert_str_eq (config.aggregation, "fedavg");
    cr_assert_eq (pl_config_set (&config, "aggregation=Trimmed_Mean", err, sizeof err), 0,
                  "%s", err);
    cr_assert_str_eq (config.aggregation, "trimmed-mean");
    cr_assert_neq (pl_config_set (&config, "aggregation=krum", err, sizeof err), 0);
    cr_assert (strstr (err, "aggregation"), "%s", err);
    cr_assert_neq (pl_config_set (&config, "trim_fraction=0.5", err, sizeof err), 0);
    cr_assert_neq (pl_config_set (&config, "clip_update_norm=-1", err, sizeof err), 0);
    cr_assert_eq (pl_config_set (&config, "clip_update_norm=10", err, sizeof err), 0, "%s", err);
    cr_assert_float_eq (config.clip_update_norm, 10.0, 0);
}

//  bn_calibration_batches: 0 (off) by default, 0..100000, and the devices
//  see it (it travels in WELCOME's config).
Test (config, bn_calibration_batches_is_bounded_and_travels)
{
    pl_config_t config;
    pl_config_defaults (&config);
    char err[512];
    cr_assert_eq (config.bn_calibration_batches, 0);
    cr_assert_neq (pl_config_set (&config, "bn_calibration_batches=-1", err, sizeof err), 0);
    cr_assert (strstr (err, "bn_calibration_batches"), "%s", err);
    cr_assert_neq (pl_config_set (&config, "bn_calibration_batches=100001", err, sizeof err), 0);
    cr_assert_eq (pl_config_set (&config, "bn_calibration_batches=10", err, sizeof err), 0,
                  "%s", err);
    cr_assert_eq (config.min_micro_batch, 0);
    cr_assert_neq (pl_config_set (&config, "min_micro_batch=-1", err, sizeof err), 0);
    cr_assert_eq (pl_config_set (&config, "min_micro_batch=10", err, sizeof err), 0, "%s", err);
    cJSON *json = pl_config_to_json (&config);
    cr_assert_eq (cJSON_GetObjectItemCaseSensitive (json, "bn_calibration_batches")->valueint,
                  10);
    cr_assert_eq (cJSON_GetObjectItemCaseSensitive (json, "min_micro_batch")->valueint, 10);
    cJSON_Delete (json);
}

//  "augment" and "flip" default to the dataset's transform (CIFAR-10 crop
//  and flip as the reference, SVHN crop only, the MNISTs none) whatever the
//  order of the keys; true/false override it; "auto" survives printing.
Test (config, augmentation_follows_the_dataset_unless_set)
{
    static const struct {
        const char *text;
        bool augment, flip;
    } cases[] = {
        { "{}", false, false },
        { "{\"dataset\": \"cifar10\"}", true, true },
        { "{\"dataset\": \"svhn\"}", true, false },
        { "{\"dataset\": \"mnist\"}", false, false },
        { "{\"augment\": false, \"dataset\": \"cifar10\"}", false, true },
        { "{\"dataset\": \"cifar10\", \"flip\": false}", true, false },
        { "{\"dataset_name\": \"SVHN\", \"flip\": true}", true, true },
        { "{\"augment\": true}", true, false },
        { "{\"augment\": \"auto\", \"dataset\": \"cifar10\"}", true, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        pl_config_t config;
        s_parse_ok (&config, cases [i].text);
        cr_assert_eq (config.augment, cases [i].augment, "%s", cases [i].text);
        cr_assert_eq (config.flip, cases [i].flip, "%s", cases [i].text);
        s_assert_round_trip (&config);
    }
    //  A later --set of the dataset moves an "auto" transform with it.
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_ok (&config, "{\"dataset\": \"cifar10\", \"flip\": false}");
    cr_assert_eq (pl_config_set (&config, "dataset=fashion-mnist", err, sizeof err), 0, "%s",
                  err);
    cr_assert_eq (config.augment, false);
    cr_assert_eq (config.flip, false);
    cr_assert_eq (pl_config_set (&config, "augment=auto", err, sizeof err), 0, "%s", err);
    cr_assert_eq (pl_config_set (&config, "flip=maybe", err, sizeof err), -1);
    S_ASSERT_HAS (err, "--set: flip: expected true, false or \"auto\"");
}

Test (config, pad_to_is_bounded)
{
    pl_config_t config;
    s_parse_ok (&config, "{\"pad_to\": 32}");
    cr_assert_eq (config.pad_to, 32);
    s_assert_round_trip (&config);
    char err [NN_ERR_SIZE];
    s_parse_fails ("{\"pad_to\": -1}", err, sizeof err);
    cr_assert_str_eq (err, "config.json: pad_to: expected an integer from 0 to 1024 "
                      "(0 = images as stored), got -1");
    s_parse_fails ("{\"pad_to\": 1025}", err, sizeof err);
    S_ASSERT_HAS (err, "pad_to");
    //  Smaller than the dataset's images: refused by the check.
    s_parse_ok (&config, "{\"dataset\": \"svhn\", \"pad_to\": 28}");
    cr_assert_eq (pl_config_check (&config, "config.json", err, sizeof err), -1);
    cr_assert_str_eq (err, "config.json: pad_to, dataset: svhn's images are 32x32, pad_to 28 "
                      "would crop them (need pad_to 0 or >= 32)");
    s_parse_ok (&config, "{\"dataset\": \"mnist\", \"pad_to\": 28}");
    cr_assert_eq (pl_config_check (&config, "config.json", err, sizeof err), 0, "%s", err);
}

//  "split_point": [P_0, P_1]: one split point per device (pipelearn, sfl).
Test (config, split_point_per_device)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_ok (&config, "{\"devices\": 2, \"split_point\": [1, 3]}");
    cr_assert_eq (config.split_point, PL_PER_DEVICE);
    cr_assert_eq (config.split_points_count, 2);
    cr_assert_eq (config.split_points[0], 1);
    cr_assert_eq (config.split_points[1], 3);
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    cJSON *json = pl_config_to_json (&config);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive (json, "split_point");
    cr_assert (cJSON_IsArray (p) && cJSON_GetArraySize (p) == 2);
    cr_assert_eq (cJSON_GetArrayItem (p, 1)->valueint, 3);
    cJSON_Delete (json);
    //  A number again replaces the list.
    cr_assert_eq (pl_config_set (&config, "split_point=2", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.split_point, 2);
    cr_assert_eq (config.split_points_count, 0);
    cr_assert_eq (pl_config_set (&config, "split_point=[2,1]", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.split_point, PL_PER_DEVICE);
    config.mode = PL_MODE_SFL;
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
}

Test (config, split_point_per_device_errors)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_fails ("{\"split_point\": []}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point");
    S_ASSERT_HAS (err, "empty");
    s_parse_fails ("{\"split_point\": [1, 0]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point[1]");
    S_ASSERT_HAS (err, "device 1");
    s_parse_fails ("{\"split_point\": [1, \"auto\"]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point[1]");
    s_parse_fails ("{\"split_point\": [1.5, 2]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point[0]");

    //  One per device.
    s_parse_ok (&config, "{\"devices\": 3, \"split_point\": [1, 3]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "2 split point(s) listed for 3 device(s)");
    //  Each fits the model (vgg5: 5 units, so 1..4).
    s_parse_ok (&config, "{\"devices\": 2, \"split_point\": [1, 5]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "split_point[1]");
    S_ASSERT_HAS (err, "1..4");
    S_ASSERT_HAS (err, "got 5 for device 1");
    //  Only where each device has its own replica.
    s_parse_ok (&config, "{\"devices\": 2, \"split_point\": [1, 3], \"mode\": \"sl\"}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "pipelearn or sfl");
    S_ASSERT_HAS (err, "sl");
    s_parse_ok (&config, "{\"devices\": 2, \"split_point\": [1, 3], \"mode\": \"fl\"}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "fl trains the whole model");
    //  Planned micro-batches plan the split points too.
    s_parse_ok (&config, "{\"devices\": 2, \"split_point\": [1, 3], "
                         "\"micro_batches\": \"auto\"}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "micro_batches");
    S_ASSERT_HAS (err, "\"split_point\": \"auto\"");
}

//  "codec": one value for both directions, {"up", "down"}, or one per
//  device; "noise" likewise; both round-trip and reach each device.
Test (config, codec_and_noise_forms)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_ok (&config, "{}");
    cr_assert_eq (pl_config_codecs (&config, 1).up, NN_CODEC_NONE);
    cr_assert_eq (pl_config_noise (&config, 1).kind, NN_NOISE_NONE);
    cr_assert_eq (config.topk_fraction, 0.01);
    s_parse_ok (&config, "{\"codec\": \"int8\", \"int8_stochastic\": true}");
    cr_assert_eq (pl_config_codecs (&config, 0).up, NN_CODEC_INT8);
    cr_assert_eq (pl_config_codecs (&config, 1).down, NN_CODEC_INT8);
    cr_assert (config.int8_stochastic);
    cr_assert (!config.codec_zstd, "codec_zstd is off unless asked for");
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"codec\": \"int8\", \"codec_zstd\": true}");
    cr_assert (config.codec_zstd);
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"codec\": {\"up\": \"fp16\", \"down\": \"topk\"}, "
                "\"topk_fraction\": 0.05, \"noise\": {\"kind\": \"gaussian\", "
                "\"scale\": 0.1}}");
    cr_assert_eq (pl_config_codecs (&config, 1).up, NN_CODEC_FP16);
    cr_assert_eq (pl_config_codecs (&config, 1).down, NN_CODEC_TOPK);
    cr_assert_eq (pl_config_noise (&config, 0).kind, NN_NOISE_GAUSSIAN);
    cr_assert_eq (pl_config_noise (&config, 0).scale, 0.1);
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"devices\": 2, \"codec\": [\"none\", {\"down\": \"topk\"}], "
                "\"noise\": [\"none\", {\"kind\": \"laplace\", \"scale\": 0.3}]}");
    cr_assert_eq (config.codecs_count, 2);
    cr_assert_eq (pl_config_codecs (&config, 0).down, NN_CODEC_NONE);
    cr_assert_eq (pl_config_codecs (&config, 1).up, NN_CODEC_NONE);
    cr_assert_eq (pl_config_codecs (&config, 1).down, NN_CODEC_TOPK);
    cr_assert_eq (pl_config_noise (&config, 0).kind, NN_NOISE_NONE);
    cr_assert_eq (pl_config_noise (&config, 1).kind, NN_NOISE_LAPLACE);
    cr_assert_eq (pl_config_noise (&config, 1).scale, 0.3);
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    //  A single value again replaces the list.
    cr_assert_eq (pl_config_set (&config, "codec=fp16", err, sizeof err), 0, "%s", err);
    cr_assert_eq (config.codecs_count, 0);
    cr_assert_eq (pl_config_codecs (&config, 1).down, NN_CODEC_FP16);
    cr_assert_not (pl_config_codec_auto (&config));
}

//  "auto": the planner's choice, globally, per direction or per device;
//  the config says so when printed and stays none until the planner chose.
Test (config, codec_auto_in_every_form)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_ok (&config, "{\"codec\": \"auto\"}");
    cr_assert (pl_config_codecs (&config, 1).auto_up && pl_config_codecs (&config, 1).auto_down);
    cr_assert_eq (pl_config_codecs (&config, 1).up, NN_CODEC_NONE);
    cr_assert (pl_config_codec_auto (&config));
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"codec\": {\"up\": \"auto\", \"down\": \"topk\"}}");
    cr_assert (pl_config_codecs (&config, 0).auto_up);
    cr_assert_not (pl_config_codecs (&config, 0).auto_down);
    cr_assert_eq (pl_config_codecs (&config, 0).down, NN_CODEC_TOPK);
    s_assert_round_trip (&config);
    s_parse_ok (&config, "{\"devices\": 2, \"codec\": [\"int8\", {\"down\": \"auto\"}]}");
    cr_assert_not (pl_config_codecs (&config, 0).auto_up || pl_config_codecs (&config, 0).auto_down);
    cr_assert_not (pl_config_codecs (&config, 1).auto_up);
    cr_assert (pl_config_codecs (&config, 1).auto_down);
    cr_assert (pl_config_codec_auto (&config));
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    cJSON *j = pl_config_to_json (&config);
    char *text = cJSON_PrintUnformatted (cJSON_GetObjectItemCaseSensitive (j, "codec"));
    cr_assert_str_eq (text, "[\"int8\",{\"up\":\"none\",\"down\":\"auto\"}]");
    free (text);
    cJSON_Delete (j);
    cr_assert_eq (pl_config_set (&config, "codec=auto", err, sizeof err), 0, "%s", err);
    cr_assert (pl_config_codecs (&config, 0).auto_down);
}

Test (config, codec_and_noise_nonsense_refused)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_fails ("{\"codec\": \"zip\"}", err, sizeof err);
    S_ASSERT_HAS (err, "codec: expected \"none\", \"fp16\", \"int8\"");
    s_parse_ok (&config, "{\"mode\": \"fl\", \"codec\": {\"down\": \"auto\"}}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "mode fl sends whole models");
    s_parse_fails ("{\"codec\": \"topk\"}", err, sizeof err);
    S_ASSERT_HAS (err, "topk compresses gradients only");
    s_parse_fails ("{\"codec\": {\"up\": \"topk\"}}", err, sizeof err);
    S_ASSERT_HAS (err, "codec.up: topk compresses gradients only");
    s_parse_fails ("{\"codec\": {\"sideways\": \"fp16\"}}", err, sizeof err);
    S_ASSERT_HAS (err, "unknown key \"sideways\"");
    s_parse_fails ("{\"codec\": [\"fp16\", 3]}", err, sizeof err);
    S_ASSERT_HAS (err, "codec[1] (device 1)");
    s_parse_fails ("{\"codec\": []}", err, sizeof err);
    S_ASSERT_HAS (err, "1..64 entries");
    s_parse_fails ("{\"topk_fraction\": 0}", err, sizeof err);
    S_ASSERT_HAS (err, "topk_fraction");
    s_parse_fails ("{\"topk_fraction\": 1e-50}", err, sizeof err);  //  0 as a float
    S_ASSERT_HAS (err, "topk_fraction");
    s_parse_fails ("{\"topk_fraction\": 1.5}", err, sizeof err);
    S_ASSERT_HAS (err, "topk_fraction");
    s_parse_fails ("{\"noise\": {\"kind\": \"laplace\"}}", err, sizeof err);
    S_ASSERT_HAS (err, "\"scale\" missing for laplace noise");
    s_parse_fails ("{\"noise\": {\"kind\": \"gaussian\", \"scale\": -1}}", err, sizeof err);
    S_ASSERT_HAS (err, "noise.scale: expected a number > 0");
    s_parse_fails ("{\"noise\": {\"kind\": \"uniform\", \"scale\": 1}}", err, sizeof err);
    S_ASSERT_HAS (err, "noise.kind");
    //  One per device; nothing crosses a split in fl.
    s_parse_ok (&config, "{\"devices\": 3, \"codec\": [\"fp16\", \"int8\"]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "2 codec entries listed for 3 device(s)");
    s_parse_ok (&config, "{\"devices\": 3, \"noise\": [\"none\"]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "1 noise entries listed for 3 device(s)");
    s_parse_ok (&config, "{\"mode\": \"fl\", \"codec\": \"fp16\"}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "mode fl sends whole models");
    s_parse_ok (&config, "{\"mode\": \"fl\", \"noise\": {\"kind\": \"laplace\", "
                "\"scale\": 1}}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "noise must be \"none\"");
}

//  "split_point_moves": a device's split point moves at an epoch's start.
Test (config, split_point_moves)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_ok (&config, "{\"epochs\": 3, \"split_point\": [1, 2], \"split_point_moves\": "
                         "[{\"epoch\": 2, \"device\": 0, \"split_point\": 3}, "
                         "{\"device\": 1, \"split_point\": 1, \"epoch\": 3}]}");
    cr_assert_eq (config.moves_count, 2);
    cr_assert_eq (config.moves[0].epoch, 2);
    cr_assert_eq (config.moves[0].device, 0);
    cr_assert_eq (config.moves[0].split_point, 3);
    cr_assert_eq (config.moves[1].epoch, 3);
    cr_assert_eq (config.moves[1].device, 1);
    cr_assert_eq (config.moves[1].split_point, 1);
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    s_assert_round_trip (&config);
    //  With one split point for all and with "auto" too (sfl).
    s_parse_ok (&config, "{\"epochs\": 2, \"mode\": \"sfl\", \"split_point\": \"auto\", "
                         "\"split_point_moves\": [{\"epoch\": 2, \"device\": 1, "
                         "\"split_point\": 4}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), 0, "%s", err);
    //  An empty list is none; --set replaces the list.
    cr_assert_eq (pl_config_set (&config, "split_point_moves=[]", err, sizeof err), 0, "%s",
                  err);
    cr_assert_eq (config.moves_count, 0);
    s_assert_round_trip (&config);
}

Test (config, split_point_moves_errors)
{
    pl_config_t config;
    char err [NN_ERR_SIZE] = "";
    s_parse_fails ("{\"split_point_moves\": {\"epoch\": 2}}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point_moves: expected a list");
    s_parse_fails ("{\"split_point_moves\": [3]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point_moves[0]");
    s_parse_fails ("{\"split_point_moves\": [{\"epoch\": 2, \"device\": 0}]}", err,
                   sizeof err);
    S_ASSERT_HAS (err, "split_point_moves[0].split_point");
    s_parse_fails ("{\"split_point_moves\": [{\"epoch\": 2, \"device\": -1, "
                   "\"split_point\": 2}]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point_moves[0].device");
    s_parse_fails ("{\"split_point_moves\": [{\"epoch\": 2.5, \"device\": 0, "
                   "\"split_point\": 2}]}", err, sizeof err);
    S_ASSERT_HAS (err, "split_point_moves[0].epoch");
    s_parse_fails ("{\"split_point_moves\": [{\"epoch\": 2, \"device\": 0, "
                   "\"split_point\": 2, \"micro_batches\": 4}]}", err, sizeof err);
    S_ASSERT_HAS (err, "unknown key \"micro_batches\"");

    //  The run's devices, epochs after the first, the model's split points.
    s_parse_ok (&config, "{\"epochs\": 2, \"devices\": 2, \"split_point_moves\": "
                         "[{\"epoch\": 2, \"device\": 2, \"split_point\": 2}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "device 2 of a run of 2 device(s)");
    s_parse_ok (&config, "{\"epochs\": 2, \"split_point_moves\": "
                         "[{\"epoch\": 1, \"device\": 0, \"split_point\": 2}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "not in 2..2");
    s_parse_ok (&config, "{\"epochs\": 2, \"split_point_moves\": "
                         "[{\"epoch\": 3, \"device\": 0, \"split_point\": 2}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "epoch 3");
    s_parse_ok (&config, "{\"epochs\": 2, \"split_point_moves\": "
                         "[{\"epoch\": 2, \"device\": 0, \"split_point\": 5}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "1..4, got 5");
    s_parse_ok (&config, "{\"epochs\": 2, \"split_point_moves\": "
                         "[{\"epoch\": 2, \"device\": 0, \"split_point\": 2}, "
                         "{\"epoch\": 2, \"device\": 0, \"split_point\": 3}]}");
    cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
    S_ASSERT_HAS (err, "moves twice before epoch 2");
    //  Only where each device has its own replica.
    static const char *const modes[] = { "sl", "fl" };
    for (int i = 0; i < 2; i++) {
        char text [256];
        snprintf (text, sizeof text, "{\"epochs\": 2, \"mode\": \"%s\", \"split_point_moves\": "
                  "[{\"epoch\": 2, \"device\": 0, \"split_point\": 2}]}", modes[i]);
        s_parse_ok (&config, text);
        cr_assert_eq (pl_config_check (&config, "run.json", err, sizeof err), -1);
        S_ASSERT_HAS (err, "pipelearn or sfl");
    }
}
