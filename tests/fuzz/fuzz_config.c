/*  fuzz_config.c: libFuzzer harness for the config parser (pl_config.h).

    The input is a config file's bytes. As pl_config_load does, a NUL byte
    or more than 1 MiB is refused before parsing (not fuzzed further).

    Contracts checked besides "no crash, no leak, no UB":
    - a failed parse leaves the config untouched and says why;
    - pl_config_check either accepts or says why;
    - pl_config_to_json of a parsed config, printed and parsed again onto a
      config whose every field differs from the defaults, gives back the
      same config byte for byte (pl_config_t is compared with memcmp: the
      parser zero-fills strings and padding) and the same check verdict.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "fuzz_common.h"
#include "pl_config.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define S_MAX_FILE (1024 * 1024)
#define S_ERR_SIZE 512

static void
s_need_message (const char *err, const char *what)
{
    if (!memchr (err, 0, S_ERR_SIZE) || err[0] == 0)
        fuzz_die ("%s failed without a message", what);
}

//  A config where every field differs from pl_config_defaults, so a field
//  missing from pl_config_to_json shows up as a difference.
static void
s_other_base (pl_config_t *cfg)
{
    char err[S_ERR_SIZE];
    pl_config_defaults (cfg);
    static const char other[] =
        "{\"experiment_name\": \"other\", \"model\": \"vgg5-nobn\", \"dataset\": \"mnist\","
        " \"data_dir\": \"/nowhere\", \"samples\": 7777, \"test_samples\": 333,"
        " \"batch_size\": 77, \"epochs\": 9, \"learning_rate\": 0.5, \"momentum\": 0.25,"
        " \"weight_decay\": 0.125, \"seed\": 99, \"threads\": 3, \"augment\": true,"
        " \"flip\": true, \"pad_to\": 40, \"partition\": \"dirichlet\", \"dirichlet_alpha\": 2.5,"
        " \"mode\": \"sl\", \"devices\": 5, \"split_point\": 3, \"micro_batches\": 7,"
        " \"aggregation_frequency\": 11, \"min_devices\": 2, \"device_timeout_s\": 12.5,"
        " \"round_timeout_s\": 99, \"bind\": \"ipc://other\","
        " \"results_dir\": \"elsewhere\"}";
    if (pl_config_parse (cfg, other, "base", err, sizeof err))
        fuzz_die ("base config: %s", err);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size > S_MAX_FILE || memchr (data, 0, size))
        return 0;
    char *text = malloc (size + 1);
    if (!text)
        fuzz_die ("out of memory");
    memcpy (text, data, size);
    text[size] = 0;

    char err[S_ERR_SIZE] = "";
    pl_config_t cfg, before;
    pl_config_defaults (&cfg);
    before = cfg;
    int rc = pl_config_parse (&cfg, text, "fuzz.json", err, sizeof err);
    free (text);
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_config: %s\n", rc ? err : "parsed");
    if (rc) {
        s_need_message (err, "pl_config_parse");
        if (memcmp (&cfg, &before, sizeof cfg))
            fuzz_die ("a failed parse changed the config (%s)", err);
        return 0;
    }
    err[0] = 0;
    int verdict = pl_config_check (&cfg, "fuzz.json", err, sizeof err);
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_config: check: %s\n", verdict ? err : "ok");
    if (verdict)
        s_need_message (err, "pl_config_check");

    cJSON *json = pl_config_to_json (&cfg);
    if (!json)
        fuzz_die ("pl_config_to_json returned NULL");
    char *printed = cJSON_PrintUnformatted (json);
    cJSON_Delete (json);
    if (!printed)
        fuzz_die ("cJSON_PrintUnformatted returned NULL");
    pl_config_t back;
    s_other_base (&back);
    err[0] = 0;
    if (pl_config_parse (&back, printed, "round-trip", err, sizeof err))
        fuzz_die ("pl_config_to_json output does not parse: %s\n%s", err, printed);
    if (memcmp (&back, &cfg, sizeof cfg))
        fuzz_die ("round trip changed the config:\n%s", printed);
    if ((pl_config_check (&back, "round-trip", err, sizeof err) != 0) != (verdict != 0))
        fuzz_die ("round trip changed the check verdict:\n%s", printed);
    cJSON_free (printed);
    return 0;
}
