/*  pl_config.h: the one JSON config format of every pipelearn binary.

    pl_config_defaults gives a sensible run; a JSON object overlays it
    (pl_config_parse / pl_config_load); `--set key=value` strings overlay
    that (pl_config_set); pl_config_check rejects values and combinations
    that cannot run. Unknown keys are errors. The PipeLearn reference's key
    names (model_name, dataset_name, data_size, ...) are accepted as aliases.
    Every error names the source (file path or "--set") and the field.
*/
#ifndef PL_CONFIG_H_INCLUDED
#define PL_CONFIG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "nn_codec.h"
#include "nn_dataset.h"
#include "nn_noise.h"
#include "pl_mode.h"

#define PL_AUTO (-1)    //  split_point / micro_batches chosen by the planner;
                        //  augment / flip chosen by the dataset
#define PL_PER_DEVICE (-2)  //  split_point: one per device, in split_points
#define PL_SPLIT_POINTS_MAX 64  //  devices a per-device split_point list names
#define PL_MOVES_MAX 64         //  entries of "split_point_moves"

//  One entry of "split_point_moves": from epoch on (the re-cut happens at
//  the end of epoch - 1, where an adaptive re-plan would), device trains
//  at split_point.
typedef struct {
    int epoch, device, split_point;
} pl_move_t;

//  The codecs of one device's tensors across the split (docs/codecs.md):
//  up, the ACTIVATIONS it sends (none, fp16, int8); down, the GRADIENTS
//  the server sends it (also topk). auto_up / auto_down: "auto", the
//  server's planner chooses that direction's codec among none, fp16 and
//  int8; the id is then none (what a device starts with until the planner
//  has chosen).
typedef struct {
    nn_codec_id_t up, down;
    bool auto_up, auto_down;
} pl_codecs_t;

typedef struct {
    char experiment_name[64];   //  "pipelearn"
    char model[32];             //  "vgg5" | "vgg5-nobn"
    char dataset[32];           //  "fashion-mnist" | "mnist" | "cifar10" | "svhn" | "synthetic"
    char data_dir[512];         //  "" = dataset default (/usr/share/datasets/fashion-mnist)
    int samples;                //  training samples used in total; 0 = all
    int test_samples;           //  0 = all
    int batch_size;             //  100
    int epochs;                 //  1
    double learning_rate;       //  0.01
    double momentum;            //  0.9
    double weight_decay;        //  0
    uint64_t seed;              //  1
    int threads;                //  0 = number of cores
    //  The "augment" and "flip" keys: 1, 0 or PL_AUTO (the default: the
    //  dataset's choice, nn_dataset_augment_default).
    int augment_setting;
    int flip_setting;
    //  In force, derived from the two above and dataset whenever the
    //  config is overlaid: what a training loop reads.
    bool augment;               //  random crop with 4-pixel padding
    bool flip;                  //  horizontal flip when augmenting
    int pad_to;                 //  0; > 0: images padded to pad_to x pad_to (nn_dataset_pad)
    nn_partition_t partition;   //  contiguous
    double dirichlet_alpha;     //  0.5
    //  Daemons (issue: server and client).
    pl_mode_t mode;             //  "pipelearn" | "sfl" | "sl" | "fl" in a file
    int devices;                //  2
    int split_point;            //  1, PL_AUTO, or PL_PER_DEVICE ("split_point":
                                //  [1, 3], a list with one entry per device)
    int split_points[PL_SPLIT_POINTS_MAX];  //  PL_PER_DEVICE: device i's split point
    int split_points_count;     //  entries of split_points in use (0 otherwise)
    int micro_batches;          //  4, or PL_AUTO
    int min_micro_batch;        //  0: "auto" N keeps micro-batches of at least the
                                //  model's floor (nn_estimate_min_micro_batch); > 0: this
    int aggregation_frequency;  //  -1 = once per epoch
    char aggregation[16];       //  "fedavg" | "trimmed-mean" | "median"
    double trim_fraction;       //  0.2: trimmed-mean drops floor(f * k) values each side
    double clip_update_norm;    //  0 = off; else the largest L2 norm of a device's update
    //  0; > 0: after each epoch's aggregation every device forwards this
    //  many mini-batches of its shard through the averaged model (its part,
    //  then the server's) to re-estimate the BN running statistics, which
    //  averaging leaves out of step with the averaged weights (PROTOCOL.md,
    //  "Calibration"). Models without BN skip it.
    int bn_calibration_batches;
    int min_devices;            //  1: a round completes with whoever finished
    double device_timeout_s;    //  30: a training device silent this long is dropped
    double round_timeout_s;     //  600: a device not done with a round by then is dropped
    double heartbeat_s;         //  5: ZMTP heartbeat and HEARTBEAT message interval
    double heartbeat_timeout_s; //  30: libzmq closes a connection silent this long
    double handshake_timeout_s; //  5: libzmq closes a connection not through its handshake
    double uplink_mbps;         //  10: the link the planner assumes ("auto")
    double downlink_mbps;       //  25
    double rtt_ms;              //  60
    bool measure_link;          //  true: "auto" plans from probed links, not the above
    bool adaptive;              //  true: re-plan at epoch ends when links drift
    double replan_drift;        //  0.5: link change (fraction) that triggers a re-plan
    double replan_gain;         //  0.10: estimated gain a new split point must bring
    double replan_compute_drift;    //  0 = never: measured iteration against the
                                    //  plan's (fraction) that calibrates a device's
                                    //  compute (docs/planner.md, "Calibration")
    int host_cores;             //  0; > 0: server and devices share one host's cores
    double host_copy_mbps;      //  0 = measure: CPU cost of loopback transfers
    char bind[128];             //  "tcp://*:5555"
    char results_dir[512];      //  "results"
    char metrics[128];          //  "" = off; "PORT" (127.0.0.1) or "ADDR:PORT": server HTTP metrics
    //  What crosses the split (docs/codecs.md). "codec": every device's, or
    //  one per device (codecs_count == devices) in codecs.
    pl_codecs_t codec;          //  none / none
    pl_codecs_t codecs[PL_SPLIT_POINTS_MAX];
    int codecs_count;           //  0: codec holds for every device
    bool int8_stochastic;       //  false: int8 rounds to nearest
    bool codec_zstd;            //  false; true: fp16/int8/topk payloads also zstd-compressed
    double topk_fraction;       //  0.01: share of a gradient topk sends, (0, 1]
    //  "noise" on uploaded activations: every device's, or one per device.
    nn_noise_t noise;           //  kind none
    nn_noise_t noises[PL_SPLIT_POINTS_MAX];
    int noises_count;           //  0: noise holds for every device
    //  "split_point_moves": scheduled moves of a device's split point
    //  (pipelearn and sfl), in the order given.
    pl_move_t moves[PL_MOVES_MAX];
    int moves_count;            //  0: none
} pl_config_t;

//  Device id's codecs and noise under the config (a per-device list's
//  entry, else the common value). id < devices.
pl_codecs_t pl_config_codecs (const pl_config_t *self, int id);
//  Some device's codec is "auto" in some direction (the planner chooses).
bool pl_config_codec_auto (const pl_config_t *self);
nn_noise_t pl_config_noise (const pl_config_t *self, int id);

void pl_config_defaults (pl_config_t *self);
//  Overlay the JSON object in text onto self. source names it in errors.
int pl_config_parse (pl_config_t *self, const char *text, const char *source,
                     char *err, size_t err_size);
//  Find "--config FILE" (or --config=FILE) in argv and overlay that file;
//  *path_out is set to the path (borrowed from argv) or left untouched when
//  there is none. Lets a command line load the file before applying its
//  other flags, whatever their order.
int pl_config_load_args (pl_config_t *self, int argc, char **argv, const char **path_out,
                         char *err, size_t err_size);

//  Read the file at path and overlay it.
int pl_config_load (pl_config_t *self, const char *path, char *err, size_t err_size);
//  Overlay one "key=value" (value is JSON, or a bare string). Aliases apply.
int pl_config_set (pl_config_t *self, const char *assignment, char *err, size_t err_size);
//  Validate values and combinations (batch_size > 0, known model/dataset,
//  micro_batches <= batch_size, ...). source names the origin in messages.
int pl_config_check (const pl_config_t *self, const char *source,
                     char *err, size_t err_size);
//  The config as a JSON object with canonical key names (caller owns it;
//  NULL only if cJSON runs out of memory). split_point / micro_batches are
//  "auto" when PL_AUTO. A number cJSON's printer would round (more than 15
//  significant digits, e.g. seed 2^53) is a cJSON_Raw item holding its exact
//  digits, so printed output always parses back to the same config.
cJSON *pl_config_to_json (const pl_config_t *self);

#endif
