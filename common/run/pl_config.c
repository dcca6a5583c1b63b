/*  pl_config.c: the JSON run config: defaults, overlays, aliases, checks.

    Everything is table driven: s_fields lists the canonical keys (type,
    place in pl_config_t, allowed values), s_aliases the PipeLearn
    reference's key names that mean the same thing, s_reference_only the
    reference keys we deliberately do not take (with the reason). Parsing,
    checking and to_json all walk the same table, so a key cannot be known
    to one and missing from another. docs/config.md documents the tables.
*/
#include "pl_config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "nn_model.h"
#include "pl_config_moves.h"
#include "pl_config_wire.h"

#define S_MAX_FILE_SIZE (1024 * 1024)
#define S_SEED_MAX 9007199254740992.0   //  2^53: every integer up to it is exact in a JSON number
//  Upper bounds. A value past them is a typo or an attack, not a run: the
//  core allocates by batch_size (about 220 KB of activations per 28x28
//  sample) and by threads (a scratch slab each), and nn_malloc aborts when
//  that fails, so a bound here is what turns "out of memory allocating
//  479 TB" into a message naming the key.
#define S_SAMPLES_MAX   10000000        //  the most any dataset reader takes
#define S_BATCH_MAX     4096            //  ~1 GB of activations at 28x28
#define S_THREADS_MAX   256             //  as pipelearn-client's --threads
#define S_DEVICES_MAX   1024
#define S_EPOCHS_MAX    1000000
#define S_TIMEOUT_MAX   604800.0        //  a week, in seconds
#define S_MBPS_MAX      1e6             //  1 Tbit/s
#define S_RTT_MAX       600000.0        //  10 minutes, in ms
#define S_PAD_MAX       1024            //  nn_dataset_pad's bound

typedef enum {
    S_STRING,       //  char[] field, free text
    S_NAME,         //  char[] field holding one of choices' canonical values
    S_ENUM,         //  an enum field (nn_partition_t, pl_mode_t), named by choices
    S_INT,          //  int in [min, max]
    S_DOUBLE,       //  double in min..max (open or closed ends)
    S_BOOL,
    S_SWITCH,       //  int: 1 (true), 0 (false) or PL_AUTO (the string "auto")
    S_SEED,         //  uint64_t in [0, 2^53]
    S_CODEC,        //  "codec": pl_config_wire.c parses and prints it
    S_NOISE,        //  "noise": likewise
    S_MOVES         //  "split_point_moves": pl_config_moves.c
} s_kind_t;

#define S_AUTO      1u      //  S_INT: the string "auto" gives PL_AUTO
#define S_MINUS_ONE 2u      //  S_INT: -1 is allowed besides [min, max]
#define S_NONEMPTY  4u      //  S_STRING: "" is not allowed
#define S_ENDPOINT  8u      //  S_STRING: must look like "transport://address"
#define S_REGISTRY  16u     //  S_NAME: a model of nn_model_registry first
#define S_PER_DEVICE 32u    //  S_INT (split_point only): a list of per-device values
                            //  gives PL_PER_DEVICE and fills split_points

typedef struct {
    const char *spelling;   //  normalised: lowercase, no '-', '_' or ' '
    const char *value;      //  canonical value; NULL = known but refused
    int code;               //  S_ENUM: the enum value
    const char *note;       //  why a refused value is refused
} s_choice_t;

typedef struct {
    const char *key;
    s_kind_t kind;
    size_t offset;
    size_t size;
    unsigned flags;
    double min, max;            //  S_INT, S_DOUBLE bounds
    bool min_open, max_open;    //  S_DOUBLE: bound excluded
    const s_choice_t *choices;  //  S_NAME, S_ENUM; ends with spelling NULL
    const char *expect;         //  "an integer > 0": the form errors ask for
} s_field_t;

typedef struct {
    const char *key;            //  the reference's key
    const char *canonical;      //  ours
    bool minus_one_is_zero;     //  the reference's -1 means our 0
    const char *note;           //  appended when the value is rejected
} s_alias_t;

typedef struct {
    const char *key;
    const char *why;
} s_refused_t;

#define S_AT(member) offsetof (pl_config_t, member), sizeof (((pl_config_t *) 0)->member)

//  The models pipelearn builds are nn_model_registry's (S_REGISTRY); these
//  are the reference's others, refused with a reason.
static const s_choice_t s_models[] = {
    { "vgg8", NULL, 0, "a reference model pipelearn does not implement" },
    { "vgg16", NULL, 0, "a reference model pipelearn does not implement" },
    { "resnet50", NULL, 0, "a reference model pipelearn does not implement" },
    { "mobilenetlarge", NULL, 0, "a reference model pipelearn does not implement" },
    { NULL, NULL, 0, NULL }
};

static const s_choice_t s_datasets[] = {
    { "fashionmnist", "fashion-mnist", 0, NULL },
    { "fmnist", "fashion-mnist", 0, NULL },
    { "mnist", "mnist", 0, NULL },
    { "cifar10", "cifar10", 0, NULL },
    { "synthetic", "synthetic", 0, NULL },
    { "cifar100", NULL, 0, "a reference dataset pipelearn does not read" },
    { "imagenet", NULL, 0, "a reference dataset pipelearn does not read" },
    { "svhn", "svhn", 0, NULL },
    { "coco", NULL, 0, "a reference dataset pipelearn does not read" },
    { NULL, NULL, 0, NULL }
};

static const s_choice_t s_aggregations[] = {
    { "fedavg", "fedavg", 0, NULL },
    { "trimmedmean", "trimmed-mean", 0, NULL },
    { "median", "median", 0, NULL },
    { NULL, NULL, 0, NULL }
};

static const s_choice_t s_modes[] = {
    { "pipelearn", "pipelearn", PL_MODE_PIPELEARN, NULL },
    { "sfl", "sfl", PL_MODE_SFL, NULL },
    { "sl", "sl", PL_MODE_SL, NULL },
    { "fl", "fl", PL_MODE_FL, NULL },
    { NULL, NULL, 0, NULL }
};

static const s_choice_t s_partitions[] = {
    { "contiguous", "contiguous", NN_PARTITION_CONTIGUOUS, NULL },
    { "iid", "iid", NN_PARTITION_IID, NULL },
    { "dirichlet", "dirichlet", NN_PARTITION_DIRICHLET, NULL },
    { NULL, NULL, 0, NULL }
};

//  Order is the order of pl_config_to_json and of docs/config.md.
static const s_field_t s_fields[] = {
    { .key = "experiment_name", .kind = S_STRING, S_AT (experiment_name),
      .flags = S_NONEMPTY, .expect = "a non-empty string of at most 63 bytes" },
    { .key = "model", .kind = S_NAME, S_AT (model), .choices = s_models,
      .flags = S_REGISTRY, .expect = "a model name (pipelearn-train --list-models)" },
    { .key = "dataset", .kind = S_NAME, S_AT (dataset), .choices = s_datasets,
      .expect = "one of \"fashion-mnist\", \"mnist\", \"cifar10\", \"svhn\", "
                "\"synthetic\"" },
    { .key = "data_dir", .kind = S_STRING, S_AT (data_dir),
      .expect = "a string of at most 511 bytes (\"\" = the dataset's default directory)" },
    { .key = "samples", .kind = S_INT, S_AT (samples), .min = 0, .max = S_SAMPLES_MAX,
      .expect = "an integer from 0 to 10000000 (0 = all)" },
    { .key = "test_samples", .kind = S_INT, S_AT (test_samples), .min = 0,
      .max = S_SAMPLES_MAX, .expect = "an integer from 0 to 10000000 (0 = all)" },
    { .key = "batch_size", .kind = S_INT, S_AT (batch_size), .min = 1, .max = S_BATCH_MAX,
      .expect = "an integer from 1 to 4096" },
    { .key = "epochs", .kind = S_INT, S_AT (epochs), .min = 1, .max = S_EPOCHS_MAX,
      .expect = "an integer from 1 to 1000000" },
    { .key = "learning_rate", .kind = S_DOUBLE, S_AT (learning_rate),
      .min = 0, .max = INFINITY, .min_open = true, .max_open = true,
      .expect = "a number > 0" },
    { .key = "momentum", .kind = S_DOUBLE, S_AT (momentum),
      .min = 0, .max = 1, .max_open = true,
      .expect = "a number >= 0 and < 1" },
    { .key = "weight_decay", .kind = S_DOUBLE, S_AT (weight_decay),
      .min = 0, .max = INFINITY, .max_open = true,
      .expect = "a number >= 0" },
    { .key = "seed", .kind = S_SEED, S_AT (seed),
      .expect = "an integer from 0 to 2^53" },
    { .key = "threads", .kind = S_INT, S_AT (threads), .min = 0, .max = S_THREADS_MAX,
      .expect = "an integer from 0 to 256 (0 = all cores)" },
    { .key = "augment", .kind = S_SWITCH, S_AT (augment_setting),
      .expect = "true, false or \"auto\" (the dataset's default)" },
    { .key = "flip", .kind = S_SWITCH, S_AT (flip_setting),
      .expect = "true, false or \"auto\" (the dataset's default)" },
    { .key = "pad_to", .kind = S_INT, S_AT (pad_to), .min = 0, .max = S_PAD_MAX,
      .expect = "an integer from 0 to 1024 (0 = images as stored)" },
    { .key = "partition", .kind = S_ENUM, S_AT (partition), .choices = s_partitions,
      .expect = "one of \"contiguous\", \"iid\", \"dirichlet\"" },
    { .key = "dirichlet_alpha", .kind = S_DOUBLE, S_AT (dirichlet_alpha),
      .min = 0, .max = INFINITY, .min_open = true, .max_open = true,
      .expect = "a number > 0" },
    { .key = "mode", .kind = S_ENUM, S_AT (mode), .choices = s_modes,
      .expect = "one of \"pipelearn\", \"sfl\", \"sl\", \"fl\"" },
    { .key = "devices", .kind = S_INT, S_AT (devices), .min = 1, .max = S_DEVICES_MAX,
      .expect = "an integer from 1 to 1024" },
    { .key = "split_point", .kind = S_INT, S_AT (split_point), .min = 1, .max = INT_MAX,
      .flags = S_AUTO | S_PER_DEVICE,
      .expect = "an integer >= 1, \"auto\", or a list of integers >= 1 with one per device "
                "(at most 64)" },
    { .key = "micro_batches", .kind = S_INT, S_AT (micro_batches), .min = 1,
      .max = S_BATCH_MAX, .flags = S_AUTO,
      .expect = "an integer from 1 to 4096 or \"auto\"" },
    { .key = "aggregation_frequency", .kind = S_INT, S_AT (aggregation_frequency),
      .min = 1, .max = INT_MAX, .flags = S_MINUS_ONE,
      .expect = "an integer >= 1, or -1 for once per epoch" },
    { .key = "aggregation", .kind = S_NAME, S_AT (aggregation), .choices = s_aggregations,
      .expect = "one of \"fedavg\", \"trimmed-mean\", \"median\"" },
    { .key = "trim_fraction", .kind = S_DOUBLE, S_AT (trim_fraction),
      .min = 0, .max = 0.5, .max_open = true,
      .expect = "a fraction >= 0 and < 0.5 (values dropped at each end per coordinate)" },
    { .key = "clip_update_norm", .kind = S_DOUBLE, S_AT (clip_update_norm),
      .min = 0, .max = INFINITY, .max_open = true,
      .expect = "a number >= 0 (0 = no clipping)" },
    { .key = "min_micro_batch", .kind = S_INT, S_AT (min_micro_batch), .min = 0,
      .max = S_BATCH_MAX,
      .expect = "an integer from 0 to 4096 (0 = the model's: 25 for resnet18, 2 for vgg5)" },
    { .key = "bn_calibration_batches", .kind = S_INT, S_AT (bn_calibration_batches),
      .min = 0, .max = 100000,
      .expect = "an integer from 0 to 100000 (0 = BN statistics averaged, not re-estimated)" },
    { .key = "min_devices", .kind = S_INT, S_AT (min_devices), .min = 1, .max = S_DEVICES_MAX,
      .expect = "an integer >= 1 and <= devices" },
    { .key = "device_timeout_s", .kind = S_DOUBLE, S_AT (device_timeout_s),
      .min = 0, .max = S_TIMEOUT_MAX, .min_open = true,
      .expect = "seconds > 0 and <= 604800 (a week)" },
    { .key = "round_timeout_s", .kind = S_DOUBLE, S_AT (round_timeout_s),
      .min = 0, .max = S_TIMEOUT_MAX, .min_open = true,
      .expect = "seconds > 0 and <= 604800 (a week)" },
    { .key = "heartbeat_s", .kind = S_DOUBLE, S_AT (heartbeat_s),
      .min = 0, .max = 3600, .min_open = true,
      .expect = "seconds > 0 and <= 3600" },
    { .key = "heartbeat_timeout_s", .kind = S_DOUBLE, S_AT (heartbeat_timeout_s),
      .min = 0, .max = 86400, .min_open = true,
      .expect = "seconds > 0 and <= 86400" },
    { .key = "handshake_timeout_s", .kind = S_DOUBLE, S_AT (handshake_timeout_s),
      .min = 0, .max = 3600, .min_open = true,
      .expect = "seconds > 0 and <= 3600" },
    { .key = "uplink_mbps", .kind = S_DOUBLE, S_AT (uplink_mbps),
      .min = 0, .max = S_MBPS_MAX, .min_open = true,
      .expect = "Mbit/s > 0 and <= 1000000" },
    { .key = "downlink_mbps", .kind = S_DOUBLE, S_AT (downlink_mbps),
      .min = 0, .max = S_MBPS_MAX, .min_open = true,
      .expect = "Mbit/s > 0 and <= 1000000" },
    { .key = "rtt_ms", .kind = S_DOUBLE, S_AT (rtt_ms),
      .min = 0, .max = S_RTT_MAX,
      .expect = "milliseconds >= 0 and <= 600000" },
    { .key = "measure_link", .kind = S_BOOL, S_AT (measure_link), .expect = "true or false" },
    { .key = "adaptive", .kind = S_BOOL, S_AT (adaptive), .expect = "true or false" },
    { .key = "replan_drift", .kind = S_DOUBLE, S_AT (replan_drift),
      .min = 0, .max = 100, .min_open = true, .expect = "a fraction > 0 (0.25 = 25%)" },
    { .key = "replan_gain", .kind = S_DOUBLE, S_AT (replan_gain),
      .min = 0, .max = 1, .max_open = true, .expect = "a fraction >= 0 and < 1" },
    { .key = "replan_compute_drift", .kind = S_DOUBLE, S_AT (replan_compute_drift),
      .min = 0, .max = 100,
      .expect = "a fraction >= 0 (0.2 = 20%; 0 = never calibrate)" },
    { .key = "host_cores", .kind = S_INT, S_AT (host_cores), .min = 0, .max = 4096,
      .expect = "an integer >= 0 (0 = the devices run on their own hardware)" },
    { .key = "host_copy_mbps", .kind = S_DOUBLE, S_AT (host_copy_mbps),
      .min = 0, .max = S_MBPS_MAX,
      .expect = "Mbit/s >= 0 and <= 1000000 (0 = measure it)" },
    { .key = "bind", .kind = S_STRING, S_AT (bind), .flags = S_NONEMPTY | S_ENDPOINT,
      .expect = "an endpoint like \"tcp://*:5555\" of at most 127 bytes" },
    { .key = "results_dir", .kind = S_STRING, S_AT (results_dir), .flags = S_NONEMPTY,
      .expect = "a non-empty string of at most 511 bytes" },
    { .key = "metrics", .kind = S_STRING, S_AT (metrics),
      .expect = "\"\" (off), \"PORT\" or \"ADDR:PORT\" of at most 127 bytes" },
    { .key = "codec", .kind = S_CODEC, S_AT (codec),
      .expect = "a codec (docs/codecs.md)" },
    { .key = "int8_stochastic", .kind = S_BOOL, S_AT (int8_stochastic),
      .expect = "true or false" },
    { .key = "codec_zstd", .kind = S_BOOL, S_AT (codec_zstd),
      .expect = "true or false" },
    { .key = "topk_fraction", .kind = S_DOUBLE, S_AT (topk_fraction),
      .min = 1e-6, .max = 1,
      .expect = "a fraction >= 0.000001 and <= 1 (the share of a gradient topk sends; "
                "the plan carries it as a float)" },
    { .key = "noise", .kind = S_NOISE, S_AT (noise),
      .expect = "noise (docs/codecs.md)" },
    { .key = "split_point_moves", .kind = S_MOVES, S_AT (moves),
      .expect = "a list of {\"epoch\": E, \"device\": D, \"split_point\": P}" },
};
#define S_FIELDS_COUNT (sizeof s_fields / sizeof s_fields[0])

//  Keys of the PipeLearn reference's config.json / Config() (github
//  blessonvar/PipeLearn) that mean one of ours. Values go through the
//  canonical key's parser, so "VGG5" and "CIFAR-10" map there.
static const s_alias_t s_aliases[] = {
    { "model_name", "model", false, NULL },
    { "dataset_name", "dataset", false, NULL },
    { "data_size", "samples", false, NULL },
    { "test_data_size", "test_samples", false, NULL },
    { "epoch_num", "epochs", false, NULL },
    { "client_num", "devices", false, NULL },
    { "layer_num_on_client", "split_point", false,
      "the reference's -1 means no split: use \"mode\": \"fl\"" },
    { "pipe_batch_num", "micro_batches", false, NULL },
    { "lr", "learning_rate", false, NULL },
    { "aggregate_frequency", "aggregation_frequency", false, NULL },
    { "thread_num", "threads", true, NULL },
};
#define S_ALIASES_COUNT (sizeof s_aliases / sizeof s_aliases[0])

//  Reference keys with no canonical equivalent: refused, with the reason,
//  rather than silently ignored (a run would not be what the file says).
static const s_refused_t s_refused[] = {
    { "server_address", "endpoints are not part of the run config; "
      "the server listens on \"bind\" and clients are given its endpoint when started" },
    { "port", "the server listens on \"bind\", e.g. \"bind\": \"tcp://*:50000\"" },
    { "client_index", "a device's index belongs to that client process, "
      "not to the shared run config" },
    { "same_data_size_for_each_client", "\"samples\" is always the total over "
      "all devices; give devices x samples-per-device" },
    { "uplink_bandwidth", "the planner measures bandwidth instead of taking it "
      "from the config; \"uplink_mbps\" is the link it assumes until then" },
    { "downlink_bandwidth", "the planner measures bandwidth instead of taking it "
      "from the config; \"downlink_mbps\" is the link it assumes until then" },
    { "profile_iter_num", "the planner profiles on its own (\"split_point\" and "
      "\"micro_batches\" \"auto\")" },
    { "enable_profiler", "the reference's torch profiler trace has no equivalent" },
    { "enable_val", "there is no validation split; \"test_samples\" sizes the test set" },
    { "enable_test", "there is no switch for testing; \"test_samples\" sizes the test set" },
    { "async_comm", "communication is always asynchronous (ZeroMQ)" },
    { "half_duplex", "links are always used full duplex" },
    { "duplicate_pipe_batch", "it multiplied batch_size by pipe_batch_num; "
      "set \"batch_size\" to the product instead" },
    { "immediate_update", "both sides take one optimiser step per mini-batch" },
};
#define S_REFUSED_COUNT (sizeof s_refused / sizeof s_refused[0])

//  ---------------------------------------------------------------------
//  Small helpers

static void *
s_field_ptr (pl_config_t *self, const s_field_t *f)
{
    return (char *) self + f->offset;
}

static const void *
s_field_cptr (const pl_config_t *self, const s_field_t *f)
{
    return (const char *) self + f->offset;
}

//  Copy src into a char[size] field, zero-filling the rest so configs with
//  equal contents compare equal byte for byte. Caller checked the length.
static void
s_store_string (char *dst, size_t size, const char *src)
{
    size_t len = strlen (src);
    assert (len < size);
    memset (dst, 0, size);
    memcpy (dst, src, len);
}

//  Printable, bounded copy of untrusted text for messages.
static void
s_sanitize (char *out, size_t out_size, const char *text, size_t max_chars)
{
    assert (out_size > 4);
    size_t o = 0;
    size_t i = 0;
    for (; text[i] && i < max_chars && o + 4 < out_size; i++) {
        unsigned char c = (unsigned char) text[i];
        out[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char) c;
    }
    if (text[i] && o + 4 <= out_size) {
        memcpy (out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

static void
s_format_number (char *buf, size_t size, double x)
{
    snprintf (buf, size, "%.15g", x);
    if (strtod (buf, NULL) != x)
        snprintf (buf, size, "%.17g", x);
}

//  What a JSON value is, for "got ..." in messages.
static void
s_render (char *buf, size_t size, const cJSON *item)
{
    if (cJSON_IsNumber (item))
        s_format_number (buf, size, item->valuedouble);
    else
    if (cJSON_IsString (item)) {
        char text [64];
        s_sanitize (text, sizeof text, item->valuestring, 48);
        snprintf (buf, size, "\"%s\" (string)", text);
    }
    else
    if (cJSON_IsBool (item))
        snprintf (buf, size, "%s (boolean)", cJSON_IsTrue (item) ? "true" : "false");
    else
    if (cJSON_IsNull (item))
        snprintf (buf, size, "null");
    else
    if (cJSON_IsArray (item))
        snprintf (buf, size, "an array");
    else
    if (cJSON_IsObject (item))
        snprintf (buf, size, "an object");
    else
        snprintf (buf, size, "an invalid value");
}

//  "epoch_num (alias of epochs)" or "epochs".
static void
s_label (char *buf, size_t size, const s_field_t *f, const s_alias_t *alias)
{
    if (alias)
        snprintf (buf, size, "%s (alias of %s)", alias->key, f->key);
    else
        snprintf (buf, size, "%s", f->key);
}

static int
s_value_error (const char *source, const s_field_t *f, const s_alias_t *alias,
               const cJSON *item, const char *note, char *err, size_t err_size)
{
    char label [96], got [96];
    s_label (label, sizeof label, f, alias);
    s_render (got, sizeof got, item);
    if (!note && alias)
        note = alias->note;
    char names [256], known [272];
    if (!note && (f->flags & S_REGISTRY)) {
        snprintf (known, sizeof known, "known: %s",
                  nn_model_registry_names (names, sizeof names));
        note = known;
    }
    return nn_errf (err, err_size, "%s: %s: expected %s, got %s%s%s%s",
                    source, label, f->expect, got,
                    note ? " (" : "", note ? note : "", note ? ")" : "");
}

static bool
s_int_in_range (const s_field_t *f, int v)
{
    if ((f->flags & S_MINUS_ONE) && v == -1)
        return true;
    return v >= f->min && v <= f->max;
}

static bool
s_double_in_range (const s_field_t *f, double v)
{
    if (!isfinite (v))
        return false;
    if (f->min_open ? !(v > f->min) : !(v >= f->min))
        return false;
    if (f->max_open ? !(v < f->max) : !(v <= f->max))
        return false;
    return true;
}

static bool
s_is_integral (double x)
{
    return isfinite (x) && floor (x) == x;
}

//  Choice matching is forgiving of case and separators so the reference's
//  "VGG5", "CIFAR-10", "FashionMNIST" work; the stored value is canonical.
static const s_choice_t *
s_choice_find (const s_choice_t *choices, const char *text)
{
    char norm [64];
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-' || *p == '_' || *p == ' ')
            continue;
        if (n + 1 >= sizeof norm)
            return NULL;
        norm [n++] = (char) tolower ((unsigned char) *p);
    }
    norm [n] = 0;
    for (const s_choice_t *c = choices; c->spelling; c++)
        if (strcmp (c->spelling, norm) == 0)
            return c;
    return NULL;
}

static int
s_field_index (const char *key)
{
    for (size_t i = 0; i < S_FIELDS_COUNT; i++)
        if (strcmp (s_fields [i].key, key) == 0)
            return (int) i;
    return -1;
}

//  Canonical field for key (exact, case-sensitive), and the alias entry if
//  key is an alias. -1 if the key is neither.
static int
s_resolve (const char *key, const s_alias_t **alias_p)
{
    *alias_p = NULL;
    int index = s_field_index (key);
    if (index >= 0)
        return index;
    for (size_t i = 0; i < S_ALIASES_COUNT; i++)
        if (strcmp (s_aliases [i].key, key) == 0) {
            *alias_p = &s_aliases [i];
            index = s_field_index (s_aliases [i].canonical);
            assert (index >= 0);
            return index;
        }
    return -1;
}

//  Levenshtein distance ignoring case; SIZE_MAX if either is too long.
static size_t
s_distance (const char *a, const char *b)
{
    size_t la = strlen (a), lb = strlen (b);
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    size_t row [65];
    for (size_t j = 0; j <= lb; j++)
        row [j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row [0];
        row [0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t above = row [j];
            size_t cost = tolower ((unsigned char) a [i - 1])
                       != tolower ((unsigned char) b [j - 1]);
            size_t best = diagonal + cost;
            if (above + 1 < best)
                best = above + 1;
            if (row [j - 1] + 1 < best)
                best = row [j - 1] + 1;
            row [j] = best;
            diagonal = above;
        }
    }
    return row [lb];
}

//  The known key closest to key, or NULL if none is plausibly meant.
//  Canonical keys win ties over aliases.
static const char *
s_suggest (const char *key)
{
    size_t len = strlen (key);
    size_t limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    const char *best = NULL;
    size_t best_distance = SIZE_MAX;
    for (size_t i = 0; i < S_FIELDS_COUNT + S_ALIASES_COUNT; i++) {
        const char *candidate = i < S_FIELDS_COUNT
                              ? s_fields [i].key
                              : s_aliases [i - S_FIELDS_COUNT].key;
        size_t d = s_distance (key, candidate);
        if (d < best_distance) {
            best_distance = d;
            best = candidate;
        }
    }
    return best_distance <= limit ? best : NULL;
}

static int
s_unknown_key (const char *source, const char *key, char *err, size_t err_size)
{
    char shown [80];
    s_sanitize (shown, sizeof shown, key, 64);
    for (size_t i = 0; i < S_REFUSED_COUNT; i++)
        if (strcmp (s_refused [i].key, key) == 0)
            return nn_errf (err, err_size,
                            "%s: %s: PipeLearn reference key not supported: %s",
                            source, shown, s_refused [i].why);
    const char *near = s_suggest (key);
    if (near)
        return nn_errf (err, err_size, "%s: unknown key \"%s\" (did you mean \"%s\"?)",
                        source, shown, near);
    return nn_errf (err, err_size, "%s: unknown key \"%s\" (docs/config.md lists the keys)",
                    source, shown);
}

//  ---------------------------------------------------------------------
//  Applying one JSON value to one field

//  "split_point": [1, 3]: one split point per device, each an integer in
//  the field's range (that the list has one per device and fits the model
//  is pl_config_check's, which knows both).
static int
s_apply_per_device (pl_config_t *self, const s_field_t *f, const s_alias_t *alias,
                    const cJSON *item, const char *source, char *err, size_t err_size)
{
    int count = cJSON_GetArraySize (item);
    if (count < 1 || count > PL_SPLIT_POINTS_MAX)
        return s_value_error (source, f, alias, item, count < 1 ? "the list is empty"
                              : "the list names more than 64 devices", err, err_size);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, item) {
        if (!cJSON_IsNumber (v) || !s_is_integral (v->valuedouble)
        ||  v->valuedouble < f->min || v->valuedouble > INT_MAX) {
            char got[96];
            s_render (got, sizeof got, v);
            return nn_errf (err, err_size, "%s: %s[%d]: expected an integer >= 1 (device "
                            "%d's split point), got %s", source, f->key, i, i, got);
        }
        self->split_points[i++] = (int) v->valuedouble;
    }
    for (int k = i; k < PL_SPLIT_POINTS_MAX; k++)
        self->split_points[k] = 0;
    self->split_points_count = count;
    *(int *) s_field_ptr (self, f) = PL_PER_DEVICE;
    return 0;
}

static int
s_apply (pl_config_t *self, const s_field_t *f, const s_alias_t *alias,
         const cJSON *item, const char *source, char *err, size_t err_size)
{
    void *target = s_field_ptr (self, f);
    switch (f->kind) {
        case S_STRING: {
            if (!cJSON_IsString (item) || strlen (item->valuestring) >= f->size
            || ((f->flags & S_NONEMPTY) && item->valuestring [0] == 0)
            || ((f->flags & S_ENDPOINT) && !strstr (item->valuestring, "://")))
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            s_store_string (target, f->size, item->valuestring);
            return 0;
        }
        case S_NAME:
        case S_ENUM: {
            if (!cJSON_IsString (item))
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            const nn_model_entry_t *model = (f->flags & S_REGISTRY)
                                            ? nn_model_registry_find (item->valuestring) : NULL;
            if (model) {
                s_store_string (target, f->size, model->name);
                return 0;
            }
            const s_choice_t *choice = s_choice_find (f->choices, item->valuestring);
            if (!choice || !choice->value)
                return s_value_error (source, f, alias, item,
                                      choice ? choice->note : NULL, err, err_size);
            if (f->kind == S_NAME)
                s_store_string (target, f->size, choice->value);
            else
                *(int *) target = choice->code;
            return 0;
        }
        case S_INT: {
            int value;
            if ((f->flags & S_PER_DEVICE) && cJSON_IsArray (item))
                return s_apply_per_device (self, f, alias, item, source, err, err_size);
            if ((f->flags & S_AUTO) && cJSON_IsString (item)
            && strcasecmp (item->valuestring, "auto") == 0)
                value = PL_AUTO;
            else {
                if (!cJSON_IsNumber (item) || !s_is_integral (item->valuedouble)
                || item->valuedouble < INT_MIN || item->valuedouble > INT_MAX)
                    return s_value_error (source, f, alias, item, NULL, err, err_size);
                value = (int) item->valuedouble;
                if (alias && alias->minus_one_is_zero && value == -1)
                    value = 0;
                if (!s_int_in_range (f, value))
                    return s_value_error (source, f, alias, item, NULL, err, err_size);
            }
            *(int *) target = value;
            if (f->flags & S_PER_DEVICE)
                self->split_points_count = 0;
            return 0;
        }
        case S_DOUBLE: {
            if (!cJSON_IsNumber (item) || !s_double_in_range (f, item->valuedouble))
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            *(double *) target = item->valuedouble;
            return 0;
        }
        case S_BOOL: {
            if (!cJSON_IsBool (item))
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            *(bool *) target = cJSON_IsTrue (item);
            return 0;
        }
        case S_SWITCH: {
            if (cJSON_IsString (item) && strcasecmp (item->valuestring, "auto") == 0)
                *(int *) target = PL_AUTO;
            else
            if (cJSON_IsBool (item))
                *(int *) target = cJSON_IsTrue (item);
            else
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            return 0;
        }
        case S_SEED: {
            if (!cJSON_IsNumber (item) || !s_is_integral (item->valuedouble)
            || item->valuedouble < 0 || item->valuedouble > S_SEED_MAX)
                return s_value_error (source, f, alias, item, NULL, err, err_size);
            *(uint64_t *) target = (uint64_t) item->valuedouble;
            return 0;
        }
        case S_CODEC:
            return pl_config_wire_codec (self, item, source, err, err_size);
        case S_NOISE:
            return pl_config_wire_noise (self, item, source, err, err_size);
        case S_MOVES:
            return pl_config_moves_parse (self, item, source, err, err_size);
    }
    assert (false);
    return -1;
}

//  The training transform in force: "auto" takes the dataset's default
//  (nn_dataset_augment_default), so "dataset": "cifar10" alone gives the
//  reference's crop and flip, and the transform follows the dataset
//  whichever order the keys come in.
static void
s_derive_transforms (pl_config_t *self)
{
    nn_augment_t preset = nn_dataset_augment_default (self->dataset);
    self->augment = self->augment_setting == PL_AUTO ? preset.augment
                                                     : self->augment_setting != 0;
    self->flip = self->flip_setting == PL_AUTO ? preset.flip : self->flip_setting != 0;
}

//  Overlay the members of root onto self; self is untouched on failure.
static int
s_overlay (pl_config_t *self, const cJSON *root, const char *source,
           char *err, size_t err_size)
{
    if (!cJSON_IsObject (root)) {
        char got [96];
        s_render (got, sizeof got, root);
        return nn_errf (err, err_size, "%s: expected a JSON object at the top level, got %s",
                        source, got);
    }
    pl_config_t work = *self;
    //  Which member set each field, to catch a key given twice and an alias
    //  that disagrees with its canonical key in the same object.
    const cJSON *seen [S_FIELDS_COUNT] = { NULL };

    for (const cJSON *item = root->child; item; item = item->next) {
        const char *key = item->string ? item->string : "";
        const s_alias_t *alias;
        int index = s_resolve (key, &alias);
        if (index < 0)
            return s_unknown_key (source, key, err, err_size);
        const s_field_t *f = &s_fields [index];

        const cJSON *earlier = seen [index];
        if (earlier && strcmp (earlier->string, key) == 0) {
            char shown [80];
            s_sanitize (shown, sizeof shown, key, 64);
            return nn_errf (err, err_size, "%s: %s: key given more than once", source, shown);
        }
        unsigned char before [sizeof (pl_config_t)];
        memcpy (before, s_field_cptr (&work, f), f->size);
        if (s_apply (&work, f, alias, item, source, err, err_size))
            return -1;
        if (earlier && memcmp (before, s_field_cptr (&work, f), f->size) != 0) {
            //  One of the two is the canonical key or both are aliases.
            const s_alias_t *earlier_alias;
            s_resolve (earlier->string, &earlier_alias);
            char first_label [96], second_label [96], first [96], second [96];
            s_label (first_label, sizeof first_label, f, earlier_alias);
            s_label (second_label, sizeof second_label, f, alias);
            s_render (first, sizeof first, earlier);
            s_render (second, sizeof second, item);
            return nn_errf (err, err_size,
                            "%s: %s and %s set the same key to different values "
                            "(%s vs %s); give only one",
                            source, first_label, second_label, first, second);
        }
        seen [index] = item;
    }
    s_derive_transforms (&work);
    *self = work;
    return 0;
}

//  ---------------------------------------------------------------------
//  Public API

void
pl_config_defaults (pl_config_t *self)
{
    assert (self);
    //  Zero first, padding included: equal configs are equal under memcmp.
    memset (self, 0, sizeof *self);
    s_store_string (self->experiment_name, sizeof self->experiment_name, "pipelearn");
    s_store_string (self->model, sizeof self->model, "vgg5");
    s_store_string (self->dataset, sizeof self->dataset, "fashion-mnist");
    s_store_string (self->data_dir, sizeof self->data_dir, "");
    self->samples = 0;
    self->test_samples = 0;
    self->batch_size = 100;
    self->epochs = 1;
    self->learning_rate = 0.01;
    self->momentum = 0.9;
    self->weight_decay = 0;
    self->seed = 1;
    self->threads = 0;
    self->augment_setting = PL_AUTO;
    self->flip_setting = PL_AUTO;
    self->pad_to = 0;
    self->partition = NN_PARTITION_CONTIGUOUS;
    self->dirichlet_alpha = 0.5;
    self->mode = PL_MODE_PIPELEARN;
    self->devices = 2;
    self->split_point = 1;
    self->micro_batches = 4;
    self->aggregation_frequency = -1;
    s_store_string (self->aggregation, sizeof self->aggregation, "fedavg");
    self->trim_fraction = 0.2;
    self->clip_update_norm = 0.0;
    self->bn_calibration_batches = 0;
    self->min_micro_batch = 0;
    self->topk_fraction = 0.01;
    self->min_devices = 1;
    self->device_timeout_s = 30.0;
    self->round_timeout_s = 600.0;
    self->heartbeat_s = 5.0;
    self->heartbeat_timeout_s = 30.0;
    self->handshake_timeout_s = 5.0;
    self->uplink_mbps = 10.0;
    self->downlink_mbps = 25.0;
    self->rtt_ms = 60.0;
    self->measure_link = true;
    self->adaptive = true;
    self->replan_drift = 0.5;
    self->replan_gain = 0.10;
    self->replan_compute_drift = 0.0;
    self->host_cores = 0;
    self->host_copy_mbps = 0.0;
    s_store_string (self->bind, sizeof self->bind, "tcp://*:5555");
    s_store_string (self->results_dir, sizeof self->results_dir, "results");
    s_derive_transforms (self);
}

int
pl_config_parse (pl_config_t *self, const char *text, const char *source,
                 char *err, size_t err_size)
{
    assert (self);
    assert (text);
    assert (source);
    //  return_parse_end is cJSON_GetErrorPtr's pointer without the global.
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts (text, &end, 1);
    if (!root) {
        if (!end)
            end = text;
        int line = 1, column = 1;
        for (const char *p = text; p < end && *p; p++) {
            if (*p == '\n') {
                line++;
                column = 1;
            }
            else
                column++;
        }
        if (*end == 0)
            return nn_errf (err, err_size,
                            "%s: invalid JSON at line %d, column %d: unexpected end of input",
                            source, line, column);
        char near [40];
        size_t n = 0;
        while (end [n] && end [n] != '\n' && n < 24)
            n++;
        char snippet [32];
        memcpy (snippet, end, n);
        snippet [n] = 0;
        s_sanitize (near, sizeof near, snippet, 24);
        return nn_errf (err, err_size, "%s: invalid JSON at line %d, column %d, near `%s`",
                        source, line, column, near);
    }
    int rc = s_overlay (self, root, source, err, err_size);
    cJSON_Delete (root);
    return rc;
}

static const char *
s_file_kind (mode_t mode)
{
    return S_ISDIR (mode) ? "a directory"
         : S_ISFIFO (mode) ? "a FIFO"
         : S_ISCHR (mode) ? "a character device"
         : S_ISBLK (mode) ? "a block device"
         : S_ISSOCK (mode) ? "a socket"
         : "not a file";
}

int
pl_config_load (pl_config_t *self, const char *path, char *err, size_t err_size)
{
    assert (self);
    assert (path);
    //  O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    //  writer, forever if none comes. Only a regular file is read, so a
    //  FIFO, a device or a directory is refused before any read.
    int fd = open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return nn_errf (err, err_size, "%s: cannot open: %s", path, strerror (errno));
    struct stat st;
    if (fstat (fd, &st) != 0) {
        int stat_errno = errno;
        close (fd);
        return nn_errf (err, err_size, "%s: cannot stat: %s", path, strerror (stat_errno));
    }
    if (!S_ISREG (st.st_mode)) {
        close (fd);
        return nn_errf (err, err_size, "%s: not a regular file (%s): a config must be a "
                        "JSON file", path, s_file_kind (st.st_mode));
    }
    FILE *file = fdopen (fd, "rb");
    if (!file) {
        int open_errno = errno;
        close (fd);
        return nn_errf (err, err_size, "%s: cannot open: %s", path, strerror (open_errno));
    }
    char *text = nn_malloc (S_MAX_FILE_SIZE + 1);
    size_t size = fread (text, 1, S_MAX_FILE_SIZE + 1, file);
    int read_errno = errno;
    bool failed = ferror (file) != 0;
    fclose (file);
    int rc = -1;
    if (failed)
        nn_errf (err, err_size, "%s: cannot read: %s", path, strerror (read_errno));
    else
    if (size > S_MAX_FILE_SIZE)
        nn_errf (err, err_size, "%s: larger than the 1 MiB a config may be", path);
    else
    if (memchr (text, 0, size))
        nn_errf (err, err_size, "%s: contains a NUL byte: not a JSON text file", path);
    else {
        text [size] = 0;
        rc = pl_config_parse (self, text, path, err, err_size);
    }
    nn_free (text);
    return rc;
}

int
pl_config_set (pl_config_t *self, const char *assignment, char *err, size_t err_size)
{
    assert (self);
    assert (assignment);
    const char *source = "--set";
    const char *equals = strchr (assignment, '=');
    if (!equals || equals == assignment) {
        char shown [80];
        s_sanitize (shown, sizeof shown, assignment, 64);
        return nn_errf (err, err_size, "%s: expected key=value, got \"%s\"", source, shown);
    }
    size_t key_len = (size_t) (equals - assignment);
    char *key = nn_malloc (key_len + 1);
    memcpy (key, assignment, key_len);
    key [key_len] = 0;
    const char *raw = equals + 1;

    //  JSON first (50, true, "x", 0.5); anything that is not JSON is a
    //  bare string (vgg5, auto, tcp://*:5555). A string-valued key takes
    //  the raw text even when it happens to be JSON (experiment_name=2024).
    cJSON *value = cJSON_ParseWithOpts (raw, NULL, 1);
    const s_alias_t *alias;
    int index = s_resolve (key, &alias);
    bool wants_string = index >= 0
                     && (s_fields [index].kind == S_STRING
                      || s_fields [index].kind == S_NAME
                      || s_fields [index].kind == S_ENUM);
    if (!value || (wants_string && !cJSON_IsString (value))) {
        cJSON_Delete (value);
        value = cJSON_CreateString (raw);
    }
    cJSON *object = cJSON_CreateObject ();
    int rc = -1;
    if (!value || !object)
        nn_errf (err, err_size, "%s: out of memory", source);
    else
    if (!cJSON_AddItemToObject (object, key, value))
        nn_errf (err, err_size, "%s: out of memory", source);
    else {
        value = NULL;           //  owned by object now
        rc = s_overlay (self, object, source, err, err_size);
    }
    cJSON_Delete (value);
    cJSON_Delete (object);
    nn_free (key);
    return rc;
}

//  One field of a config built in code (not from JSON): same rules.
static int
s_check_field (const pl_config_t *self, const s_field_t *f, const char *source,
               char *err, size_t err_size)
{
    const void *value = s_field_cptr (self, f);
    switch (f->kind) {
        case S_STRING:
        case S_NAME: {
            const char *text = value;
            if (!memchr (text, 0, f->size))
                return nn_errf (err, err_size, "%s: %s: expected %s, got an unterminated string",
                                source, f->key, f->expect);
            bool ok = true;
            if (f->kind == S_NAME) {
                ok = false;
                for (const s_choice_t *c = f->choices; c->spelling; c++)
                    if (c->value && strcmp (c->value, text) == 0)
                        ok = true;
                const nn_model_entry_t *model = (f->flags & S_REGISTRY)
                                                ? nn_model_registry_find (text) : NULL;
                if (model && strcmp (model->name, text) == 0)
                    ok = true;
            }
            if ((f->flags & S_NONEMPTY) && text [0] == 0)
                ok = false;
            if ((f->flags & S_ENDPOINT) && !strstr (text, "://"))
                ok = false;
            if (!ok) {
                char shown [80];
                s_sanitize (shown, sizeof shown, text, 64);
                return nn_errf (err, err_size, "%s: %s: expected %s, got \"%s\"",
                                source, f->key, f->expect, shown);
            }
            return 0;
        }
        case S_ENUM: {
            int code = *(const int *) value;
            for (const s_choice_t *c = f->choices; c->spelling; c++)
                if (c->code == code)
                    return 0;
            return nn_errf (err, err_size, "%s: %s: expected %s, got enum value %d",
                            source, f->key, f->expect, code);
        }
        case S_INT: {
            int v = *(const int *) value;
            if (((f->flags & S_AUTO) && v == PL_AUTO) || s_int_in_range (f, v)
            ||  ((f->flags & S_PER_DEVICE) && v == PL_PER_DEVICE
                 && self->split_points_count >= 1
                 && self->split_points_count <= PL_SPLIT_POINTS_MAX))
                return 0;
            return nn_errf (err, err_size, "%s: %s: expected %s, got %d",
                            source, f->key, f->expect, v);
        }
        case S_DOUBLE: {
            double v = *(const double *) value;
            if (s_double_in_range (f, v))
                return 0;
            char shown [40];
            s_format_number (shown, sizeof shown, v);
            return nn_errf (err, err_size, "%s: %s: expected %s, got %s",
                            source, f->key, f->expect, shown);
        }
        case S_BOOL:
            return 0;
        case S_SWITCH: {
            int v = *(const int *) value;
            if (v == 0 || v == 1 || v == PL_AUTO)
                return 0;
            return nn_errf (err, err_size, "%s: %s: expected %s, got %d",
                            source, f->key, f->expect, v);
        }
        case S_SEED: {
            uint64_t v = *(const uint64_t *) value;
            if (v <= (uint64_t) S_SEED_MAX)
                return 0;
            return nn_errf (err, err_size, "%s: %s: expected %s, got %" PRIu64,
                            source, f->key, f->expect, v);
        }
        case S_CODEC:
        case S_NOISE:
            return 0;       //  pl_config_wire_check checks both
        case S_MOVES:
            return 0;       //  pl_config_moves_check, with the model's units
    }
    assert (false);
    return -1;
}

//  "split_point": [P_0, P_1, ...]: one per device, each fits the model, in
//  a mode where the server keeps one replica per device.
static int
s_check_per_device (const pl_config_t *self, const char *source, int units, char *err,
                    size_t err_size)
{
    if (self->mode != PL_MODE_PIPELEARN && self->mode != PL_MODE_SFL)
        return nn_errf (err, err_size,
                        "%s: split_point, mode: a split point per device needs mode "
                        "pipelearn or sfl; sl trains one server part that every device "
                        "shares, so its devices share one split point", source);
    if (self->split_points_count != self->devices)
        return nn_errf (err, err_size,
                        "%s: split_point, devices: %d split point(s) listed for %d "
                        "device(s); give one per device", source, self->split_points_count,
                        self->devices);
    if (self->mode == PL_MODE_PIPELEARN && self->micro_batches == PL_AUTO)
        return nn_errf (err, err_size,
                        "%s: split_point, micro_batches: a split point per device needs "
                        "micro_batches as a number; for the planner's choice of both give "
                        "\"split_point\": \"auto\" (it plans each device's)", source);
    for (int i = 0; i < self->split_points_count; i++)
        if (self->split_points[i] < 1 || self->split_points[i] > units - 1)
            return nn_errf (err, err_size,
                            "%s: split_point[%d], model: %s has %d split units, so every "
                            "split point must be in 1..%d, got %d for device %d", source, i,
                            self->model, units, units - 1, self->split_points[i], i);
    return 0;
}

int
pl_config_check (const pl_config_t *self, const char *source,
                 char *err, size_t err_size)
{
    assert (self);
    assert (source);
    for (size_t i = 0; i < S_FIELDS_COUNT; i++)
        if (s_check_field (self, &s_fields [i], source, err, err_size))
            return -1;

    //  "auto": pipelearn-server's planner picks the value (docs/planner.md);
    //  the range checks below apply to numbers only.
    bool pipelearn = self->mode == PL_MODE_PIPELEARN;
    bool splits = self->mode != PL_MODE_FL;

    //  Micro-batches only exist in pipelearn mode; elsewhere the value is
    //  unused and must not stop a run.
    if (pipelearn && self->micro_batches != PL_AUTO && self->micro_batches > self->batch_size)
        return nn_errf (err, err_size,
                        "%s: micro_batches, batch_size: %d micro-batches do not fit in "
                        "a batch of %d samples (need micro_batches <= batch_size)",
                        source, self->micro_batches, self->batch_size);
    //  Divisibility (batch_size % micro_batches == 0) is not checked here:
    //  pipelearn-train checks its config with this function too and does
    //  not use micro_batches, so the default 4 would refuse common batch
    //  sizes there (e.g. --set batch_size=50). pipelearn-server refuses it.

    if (self->samples > 0 && self->samples < self->devices)
        return nn_errf (err, err_size,
                        "%s: samples, devices: samples %d is fewer than devices %d; each "
                        "device needs at least one sample (or set samples 0 for all)",
                        source, self->samples, self->devices);
    if (pl_config_wire_check (self, source, err, err_size))
        return -1;
    if (self->min_devices > self->devices)
        return nn_errf (err, err_size,
                        "%s: min_devices, devices: min_devices %d exceeds devices %d (a run "
                        "cannot go on with more devices than it has)",
                        source, self->min_devices, self->devices);

    int h, w, c;
    if (self->pad_to > 0 && nn_dataset_shape (self->dataset, &h, &w, &c) == 0
    &&  (self->pad_to < h || self->pad_to < w))
        return nn_errf (err, err_size,
                        "%s: pad_to, dataset: %s's images are %dx%d, pad_to %d would "
                        "crop them (need pad_to 0 or >= %d)", source, self->dataset, h, w,
                        self->pad_to, h > w ? h : w);

    if (pl_config_moves_check (self, source, nn_model_registry_units (self->model), err,
                               err_size))
        return -1;
    //  FL trains the whole model on each device: no split point.
    if (splits) {
        int units = nn_model_registry_units (self->model);
        assert (units > 1);     //  the model field holds registry names only
        if (self->split_point != PL_AUTO && self->split_point != PL_PER_DEVICE
        &&  self->split_point > units - 1)
            return nn_errf (err, err_size,
                            "%s: split_point, model: %s has %d split units, so split_point "
                            "must be in 1..%d in mode %s, got %d",
                            source, self->model, units, units - 1, pl_mode_name (self->mode),
                            self->split_point);
        if (self->split_point == PL_PER_DEVICE)
            return s_check_per_device (self, source, units, err, err_size);
    }
    else
    if (self->split_point == PL_PER_DEVICE)
        return nn_errf (err, err_size,
                        "%s: split_point, mode: a split point per device needs mode "
                        "pipelearn or sfl; fl trains the whole model on every device (no "
                        "split point)", source);
    return 0;
}

//  cJSON 1.7's printer writes numbers with 15 significant digits and
//  accepts an approximate match, so 2^53 or 0.1 + 0.2 would come back
//  different. Such numbers go in as raw JSON text with 17 digits (still a
//  JSON number when printed); every other number is a plain cJSON number.
static cJSON *
s_add_number (cJSON *json, const char *key, double value)
{
    char text [40];
    snprintf (text, sizeof text, "%1.15g", value);
    if (strtod (text, NULL) == value)
        return cJSON_AddNumberToObject (json, key, value);
    snprintf (text, sizeof text, "%1.17g", value);
    return cJSON_AddRawToObject (json, key, text);
}

cJSON *
pl_config_to_json (const pl_config_t *self)
{
    assert (self);
    cJSON *json = cJSON_CreateObject ();
    if (!json)
        return NULL;
    for (size_t i = 0; i < S_FIELDS_COUNT; i++) {
        const s_field_t *f = &s_fields [i];
        const void *value = s_field_cptr (self, f);
        cJSON *added = NULL;
        switch (f->kind) {
            case S_STRING:
            case S_NAME:
                added = cJSON_AddStringToObject (json, f->key, value);
                break;
            case S_ENUM: {
                const char *name = NULL;
                for (const s_choice_t *c = f->choices; c->spelling; c++)
                    if (c->code == *(const int *) value)
                        name = c->value;
                assert (name);  //  an out-of-range enum is a programmer error
                added = cJSON_AddStringToObject (json, f->key, name);
                break;
            }
            case S_INT: {
                int v = *(const int *) value;
                if ((f->flags & S_AUTO) && v == PL_AUTO)
                    added = cJSON_AddStringToObject (json, f->key, "auto");
                else
                if ((f->flags & S_PER_DEVICE) && v == PL_PER_DEVICE) {
                    added = cJSON_CreateIntArray (self->split_points,
                                                  self->split_points_count);
                    if (added)
                        cJSON_AddItemToObject (json, f->key, added);
                }
                else
                    added = cJSON_AddNumberToObject (json, f->key, v);
                break;
            }
            case S_DOUBLE:
                added = s_add_number (json, f->key, *(const double *) value);
                break;
            case S_BOOL:
                added = cJSON_AddBoolToObject (json, f->key, *(const bool *) value);
                break;
            case S_SWITCH: {
                int v = *(const int *) value;
                added = v == PL_AUTO ? cJSON_AddStringToObject (json, f->key, "auto")
                                     : cJSON_AddBoolToObject (json, f->key, v != 0);
                break;
            }
            case S_SEED:
                added = s_add_number (json, f->key, (double) *(const uint64_t *) value);
                break;
            case S_CODEC:
            case S_NOISE:
            case S_MOVES:
                added = f->kind == S_CODEC ? pl_config_wire_codec_json (self)
                      : f->kind == S_NOISE ? pl_config_wire_noise_json (self)
                                           : pl_config_moves_json (self);
                if (added)
                    cJSON_AddItemToObject (json, f->key, added);
                break;
        }
        if (!added) {
            cJSON_Delete (json);
            return NULL;
        }
    }
    return json;
}

int
pl_config_load_args (pl_config_t *self, int argc, char **argv, const char **path_out,
                     char *err, size_t err_size)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp (argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[i + 1];
        else if (strncmp (argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    if (!path)
        return 0;
    *path_out = path;
    return pl_config_load (self, path, err, err_size);
}
