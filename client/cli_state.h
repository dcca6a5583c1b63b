/*  cli_state.h: the client's state, shared by cli_main.c (joining,
    training), cli_session.c (sending), cli_contexts.c (the model contexts)
    and cli_planning.c (profiling, probes, re-planning). Internal to
    client/.
*/
#ifndef CLI_STATE_H_INCLUDED
#define CLI_STATE_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <czmq.h>

#include "nn_codec.h"
#include "nn_dataset.h"
#include "nn_noise.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "pl_config.h"
#include "pl_stop.h"
#include "pl_timeline.h"
#include "proto_msg.h"

#define CLI_MAX_MICRO 256
//  Exit status when the run stopped because training diverged.
#define CLI_EXIT_DIVERGED 3

typedef struct {
    const char *connect;
    int device_id;
    const char *data_dir;
    int threads;
    double timeout_s;
    double heartbeat_s;         //  ZMTP heartbeat interval; timeout 6x
    const char *cert;           //  this device's secret certificate
    const char *server_cert;    //  the server's public certificate (pinned)
    bool insecure;
} cli_args_t;

typedef struct {
    cli_args_t args;
    const pl_stop_t *stop;      //  the run's signal flags (cli_run's; pl_stop.h)
    zsock_t *dealer;
    void *dh;
    pl_config_t cfg;
    proto_assign_t assign;      //  what WELCOME or the last PLAN said
    pl_mode_t mode;
    int id;
    proto_limits_t limits;
    uint64_t send_cap;          //  WELCOME's frame cap: the largest frame the server takes
    nn_model_spec_t spec;
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    nn_model_t *ctx[CLI_MAX_MICRO];     //  ctx[0] owns the weights
    int micro, mb, batch;
    float *x[CLI_MAX_MICRO];
    int *y[CLI_MAX_MICRO];
    int32_t *labels;
    float *dlogits;                     //  fl only
    bool awaiting[CLI_MAX_MICRO];
    int pending;
    nn_dataset_t *train;
    int *shard;
    int shard_count;
    int iterations;                     //  per epoch, same on every device
    nn_rng_t rng, data_rng;
    nn_rng_t data_base;                 //  data_rng = split (data_base, epoch)
    nn_sgd_t sgd;
    nn_augment_t aug;
    proto_stats_t stats;
    pl_timeline_t *timeline;            //  this epoch's events, origin from the plan
    char who[16];                       //  "device0", ...
    uint32_t cur_epoch, cur_iter;
    uint32_t model_epoch, model_iter;   //  where the last MODEL's round starts
    bool params_prepaid;                //  the epoch-end PARAMS is in its STATS
    bool bye;                           //  the server said BYE
    bool recv_failed;                   //  s_recv met an ERROR, a malformed message
                                        //  or a socket error (not mere silence)
    bool profile_requested;             //  WELCOME asked for a PROFILE
    bool diverged;                      //  a non-finite loss, here or on the server
    bool server_resuming;               //  the server stops and will resume the run
    bool run_complete;                  //  the server said the run is complete
    bool rejoining;                     //  a try at a server that said it would resume
    bool calibrated;                    //  ctx[0] holds the weights of the last
                                        //  calibration MODEL (cli_calib.c)
    //  Across the split (cli_wire.c): the noise on uploads, its stream,
    //  int8's rounding stream, and the upload encoder for up_shape in
    //  up_codec (NULL until the first encoded upload).
    nn_noise_t noise;
    nn_rng_t noise_rng, round_rng;
    nn_codec_encoder_t *up_enc;
    nn_codec_shape_t up_shape;
    nn_codec_id_t up_codec;
    bool up_stochastic;                 //  up_enc rounds stochastically (codec_flags)
    bool up_zstd;                       //  up_enc compresses with zstd (codec_flags)
    uint8_t *up_buf;                    //  the encoder's bytes
    float *up_noisy;                    //  activations plus noise (up_count floats)
    size_t up_count;
} cli_t;

//  cli_session.c. Send a message to the server (counted in the epoch's bytes_up); 0 or
//  -1 (logged; the message is destroyed either way).
int cli_send (cli_t *self, proto_msg_t **msg_p);
//  Bytes a message puts on the wire, as STATS count them (both ways).
size_t cli_msg_bytes (const proto_msg_t *msg);
void cli_send_error (cli_t *self, uint32_t code, const char *text);

//  cli_wire.c. After WELCOME: this device's noise (the config's) and the
//  streams of the noise and of int8's stochastic rounding (from the run's
//  seed and the device id: reproducible).
void cli_wire_setup (cli_t *self);
void cli_wire_free (cli_t *self);
//  Set the ACTIVATIONS tensor of msg from out (dims n, h, w, c): noise
//  added to a copy if configured, then encoded in the plan's up codec (f32
//  for none). 0, or -1 with a message.
int cli_wire_set_activations (cli_t *self, proto_msg_t *msg, const float *out,
                              const uint32_t *dims, char *err, size_t err_size);
//  GRADIENTS travel in the plan's down codec (proto decoded and checked
//  the payload): 0, or -1 with a message naming the message and both codecs.
int cli_wire_check_gradients (const cli_t *self, const proto_msg_t *msg, char *err,
                              size_t err_size);

//  cli_contexts.c. (Re)build the model contexts for split point `units` (fl: the whole
//  model) and `micro` micro-batches, with their input buffers and the
//  receive limits. Weights and optimiser state carry over where the old
//  and new parts share units (a new part starts from the next MODEL
//  anyway). 0, or -1 with a message in err.
int cli_contexts_build (cli_t *self, int units, int micro, char *err, size_t err_size);
void cli_contexts_free (cli_t *self);

//  cli_calib.c. A MODEL with CALIBRATE (its units and epoch checked): load
//  it, forward bn_calibration_batches mini-batches of the shard in
//  training mode with every batch weighing the same in the BN running
//  statistics, send each micro-batch's ACTIVATIONS up with CALIBRATE (split
//  modes), then the part's buffers in a PARAMS with CALIBRATE. 0 or -1.
int cli_calibrate (cli_t *self, const proto_msg_t *model);
//  Whether a MODEL with CALIBRATE asks for a calibration (the whole slab),
//  not the next round's model after one (the buffers alone).
bool cli_calib_request (const cli_t *self, const proto_msg_t *model);
//  Load a MODEL: the whole slab, or after a calibration the buffers alone
//  over the calibrated weights. 0, or -1 (answered ERROR): buffers without
//  a calibration before them.
int cli_calib_load (cli_t *self, const proto_msg_t *model);

//  cli_planning.c. Profile every unit of the model at the run's batch size on
//  this device and send PROFILE. 0 or -1.
int cli_planning_profile (cli_t *self);
//  Answer a PROBE from the server (the asked reply size). 0 or -1.
int cli_planning_probe_answer (cli_t *self, const proto_msg_t *probe);
//  Follow a PLAN: check it fits the session, rebuild the contexts if the
//  split point or micro-batch count changed. 0 or -1 (answered ERROR).
int cli_planning_apply (cli_t *self, const proto_assign_t *plan);

#endif
