/*  proto_wire.h: the wire format's constants, codes and value types
    (proto/PROTOCOL.md gives every field and offset), and their names.
    Part of proto's public interface (include proto_msg.h); the codecs in
    proto/ build on it without the message API.
*/
#ifndef PROTO_WIRE_H_INCLUDED
#define PROTO_WIRE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl_mode.h"

#define PROTO_MAGIC            0x4E524C50u  //  "PLRN" as little-endian bytes
#define PROTO_VERSION          2            //  2: PROFILE, PROBE, PLAN
#define PROTO_HEADER_SIZE      40
#define PROTO_MAX_FRAMES       4            //  header + at most 3 payload frames
#define PROTO_MAX_RANK         4
#define PROTO_DTYPE_F32        1
#define PROTO_DTYPE_CODEC      2            //  ACTIVATIONS/GRADIENTS: frame 2 is a codec
                                            //  payload (nn_codec.h), rank 4
#define PROTO_NAME_MAX         64           //  HELLO name, printable ASCII
#define PROTO_JSON_MAX         65536        //  WELCOME config, hard cap
#define PROTO_TEXT_MAX         1024         //  ERROR text
#define PROTO_SPEC_HASH_SIZE   32
#define PROTO_ROUTING_ID_MAX   255
#define PROTO_DEFAULT_MAX_FRAME_BYTES ((size_t) 256 << 20)
//  A frame this size or larger crosses the wire as a run of chunks of this
//  size (PROTOCOL.md, "Chunks"): libzmq's heartbeat timeout counts whole
//  ZMTP frames only. 256 KiB: 2.1 s at 1 Mbit/s, 42 bytes of ZMTP and
//  CurveZMQ framing per chunk (0.02 %).
#define PROTO_CHUNK_BYTES      ((size_t) 256 << 10)

//  Fixed payload sizes in bytes (PROTOCOL.md gives every offset).
#define PROTO_HELLO_FIXED_SIZE 20           //  + name length
#define PROTO_ASSIGN_SIZE      64
#define PROTO_CAP_SIZE         8            //  WELCOME frame 3: the server's frame cap
#define PROTO_SLAB_SIZE        56
#define PROTO_LOSS_SIZE        12
#define PROTO_EVAL_RESULT_SIZE 24
#define PROTO_STATS_SIZE       76
#define PROTO_EVENT_SIZE       32           //  one EVENTS record
#define PROTO_EVENTS_MAX       65536        //  records per EVENTS message, hard cap
#define PROTO_EVENT_NONE       0xFFFFFFFFu  //  EVENTS iteration / micro_batch: not applicable
#define PROTO_PROFILE_UNITS_MAX 64          //  split units in a PROFILE
#define PROTO_UNIT_COST_SIZE   40           //  one PROFILE unit record
#define PROTO_PROFILE_CODECS   3            //  codec speeds in a PROFILE: fp16, int8, topk
#define PROTO_PROFILE_FIXED_SIZE 56         //  units, threads, codec speeds;
                                            //  + units * PROTO_UNIT_COST_SIZE
#define PROTO_ZSTD_RATIOS      4            //  PROFILE zstd ratios per split point: fp16
                                            //  up, fp16 down, int8 up, int8 down
#define PROTO_ZSTD_RATIO_MAX   2.0          //  zstd body / plain body, (0, 2]
#define PROTO_CODEC_MAX_BPS    1e13         //  a codec speed beyond 10 TB/s is nonsense
#define PROTO_PROBE_SIZE       8            //  PROBE frame 1
#define PROTO_PROBE_MAX_BYTES  ((uint32_t) 16 << 20)  //  PROBE reply_bytes cap
#define PROTO_COST_MAX_S       3600.0       //  a unit's cost beyond this is nonsense

//  Header flags. Bits not defined here are rejected.
#define PROTO_FLAG_EVAL_RESULT 0x1u         //  EVAL only: results, not activations
#define PROTO_FLAG_LAST        0x2u         //  ACTIVATIONS/GRADIENTS/EVAL: last of its sequence
#define PROTO_FLAG_PROFILE     0x4u         //  WELCOME only: the server plans from this
                                            //  device's costs: send PROFILE before MODEL
#define PROTO_FLAG_CALIBRATE   0x8u         //  MODEL, ACTIVATIONS, PARAMS only: BN
                                            //  calibration, not training (PROTOCOL.md)

//  HELLO capabilities. Unknown bits are ignored (a newer client may offer more).
#define PROTO_CAP_FL           0x1u         //  can train the whole model
#define PROTO_CAP_SPLIT        0x2u         //  can train a device part (sl, sfl, pipelearn)

typedef enum {
    PROTO_MSG_HELLO = 1,
    PROTO_MSG_WELCOME = 2,
    PROTO_MSG_MODEL = 3,
    PROTO_MSG_ACTIVATIONS = 4,
    PROTO_MSG_GRADIENTS = 5,
    PROTO_MSG_PARAMS = 6,
    PROTO_MSG_EVAL = 7,
    PROTO_MSG_STATS = 8,
    PROTO_MSG_HEARTBEAT = 9,
    PROTO_MSG_BYE = 10,
    PROTO_MSG_ERROR = 11,
    PROTO_MSG_EVENTS = 12,
    PROTO_MSG_PROFILE = 13,     //  device -> server: its per-unit compute costs
    PROTO_MSG_PROBE = 14,       //  both ways: link measurement (PROTOCOL.md)
    PROTO_MSG_PLAN = 15         //  server -> device: a new plan from the next MODEL on
} proto_type_t;

//  Return codes. -1 is "no message" (timeout, signal, context terminated):
//  retry or shut down. PROTO_E_SOCKET is a local socket failure. Every code
//  from PROTO_E_MAGIC down means the peer sent something malformed: answer
//  ERROR and drop it (proto_code_is_malformed).
typedef enum {
    PROTO_OK = 0,
    PROTO_E_AGAIN = -1,     //  EAGAIN / EINTR / ETERM, nothing received
    PROTO_E_SOCKET = -2,    //  any other libzmq error
    PROTO_E_MAGIC = -3,     //  header magic is not "PLRN"
    PROTO_E_VERSION = -4,   //  header version not spoken here
    PROTO_E_TYPE = -5,      //  unknown message type
    PROTO_E_FRAMES = -6,    //  wrong number of frames for the type
    PROTO_E_SIZE = -7,      //  frame too large or too short, length field wrong
    PROTO_E_SHAPE = -8,     //  tensor rank/dims invalid or not what limits expect
    PROTO_E_LABEL = -9,     //  label outside [0, classes)
    PROTO_E_VALUE = -10,    //  field out of range (flags, reserved, plan, counts)
    PROTO_E_TEXT = -11,     //  invalid UTF-8, NUL, or non-printable name
    PROTO_E_SPEC = -12,     //  spec hash differs from the expected one
    PROTO_E_TIME = -13      //  a time not finite, negative, or ending before it starts
} proto_code_t;

//  ERROR payload codes. Receivers accept any code >= 1.
#define PROTO_ERR_MALFORMED    1            //  a message failed to decode
#define PROTO_ERR_VERSION      2            //  header version not spoken
#define PROTO_ERR_STATE        3            //  message not allowed in this state
#define PROTO_ERR_REFUSED      4            //  run full, device id taken, capability missing
#define PROTO_ERR_SPEC         5            //  model spec or slab differs
#define PROTO_ERR_TIMEOUT      6            //  peer silent past its deadline
#define PROTO_ERR_INTERNAL     7            //  the sender failed
#define PROTO_ERR_DIVERGED     8            //  training diverged (a non-finite loss)
#define PROTO_ERR_RESUMING     9            //  the server stops and will resume the run
#define PROTO_ERR_COMPLETE     10           //  the run is complete: nothing to join

//  EVENTS record stages: what a device was doing during [start_s, end_s].
typedef enum {
    PROTO_STAGE_FORWARD = 1,    //  forward pass of one micro-batch (fl: one batch)
    PROTO_STAGE_BACKWARD = 2,   //  backward pass of one micro-batch
    PROTO_STAGE_UPDATE = 3,     //  optimiser step of one iteration
    PROTO_STAGE_WAIT = 4,       //  blocked on the server: GRADIENTS or MODEL
    PROTO_STAGE_UPLOAD = 5      //  blocked in a send (a full send queue)
} proto_stage_t;
#define PROTO_STAGE_MAX        PROTO_STAGE_UPLOAD

//  Session states, one view shared by both ends (PROTOCOL.md, "State machine").
typedef enum {
    PROTO_STATE_CONNECTING = 1, //  nothing sent yet
    PROTO_STATE_JOINING,        //  HELLO sent, waiting for WELCOME
    PROTO_STATE_JOINED,         //  WELCOME received, waiting for the first MODEL
    PROTO_STATE_TRAINING,       //  first MODEL received
    PROTO_STATE_CLOSED          //  BYE or ERROR sent or received
} proto_state_t;

typedef enum {
    PROTO_UP = 1,               //  device -> server
    PROTO_DOWN = 2              //  server -> device
} proto_dir_t;

//  Frame 0 of every message. proto_header_encode writes the fields as given
//  (so tests can build bad headers); proto_msg_* fill magic and version.
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t flags;
    uint32_t device_id;
    uint32_t epoch;
    uint32_t iteration;
    uint32_t micro_batch;
    uint32_t reserved;          //  must be 0
    uint64_t sequence;
} proto_header_t;

typedef struct {
    uint16_t protocol_version;  //  highest version the client speaks, >= 1
    uint32_t capabilities;      //  PROTO_CAP_* bits
    int32_t requested_device_id;//  -1 = any
    uint64_t sample_count;      //  training samples the device holds
    char name[PROTO_NAME_MAX + 1]; //  printable ASCII, NUL-terminated
} proto_hello_t;

//  WELCOME frame 2: what this device does in the run.
typedef struct {
    uint32_t device_id;         //  < devices
    uint32_t split_point;       //  units on the device; 0 in fl, >= 1 otherwise
    uint32_t micro_batches;     //  1..batch_size
    uint32_t batch_size;        //  mini-batch B, >= 1
    uint32_t devices;           //  devices in the run, >= 1
    uint32_t mode;              //  pl_mode_t
    uint64_t shard_begin;       //  the device's training samples are positions
    uint64_t shard_count;       //  [shard_begin, +count) of the partition order
    uint64_t seed;              //  the device's RNG seed (shuffle, augmentation)
    double origin_s;            //  the run's time 0: a CLOCK_REALTIME second (finite,
                                //  >= 0); EVENTS times count from it
    //  The codecs of what crosses the split (nn_codec_id_t values): up, the
    //  ACTIVATIONS the device sends (none, fp16, int8); down, the GRADIENTS
    //  it receives (also topk). Both none in fl.
    uint8_t codec_up;
    uint8_t codec_down;
    uint8_t codec_flags;        //  PROTO_ASSIGN_*: int8 rounds stochastically, zstd
    float topk_fraction;        //  codec_down topk: the share sent, (0, 1]; else 0
} proto_assign_t;

#define PROTO_ASSIGN_STOCHASTIC_UP   0x1u   //  codec_up is int8, stochastic rounding
#define PROTO_ASSIGN_STOCHASTIC_DOWN 0x2u   //  codec_down is int8, stochastic rounding
#define PROTO_ASSIGN_ZSTD_UP         0x4u   //  codec_up's payloads are zstd-compressed
#define PROTO_ASSIGN_ZSTD_DOWN       0x8u   //  codec_down's payloads likewise

//  MODEL / PARAMS frame 1: which flat weights slab frame 2 holds.
typedef struct {
    uint8_t spec_hash[PROTO_SPEC_HASH_SIZE]; //  nn_model_spec_hash
    uint32_t unit_begin;        //  units [unit_begin, unit_end) of the spec
    uint32_t unit_end;
    uint64_t count;             //  floats in frame 2, >= 1
    uint64_t sample_count;      //  PARAMS: the device's samples (>= 1); MODEL: 0
} proto_slab_t;

//  ACTIVATIONS / GRADIENTS / EVAL frame 1. dims are NHWC, dims[0] = batch.
typedef struct {
    uint8_t dtype;              //  PROTO_DTYPE_F32 or PROTO_DTYPE_CODEC
    uint8_t rank;               //  1..PROTO_MAX_RANK
    uint32_t dims[PROTO_MAX_RANK];
} proto_tensor_desc_t;

//  GRADIENTS frame 3: the server's loss on that micro-batch.
typedef struct {
    float loss;                 //  mean loss (not checked: may be NaN)
    uint32_t correct;           //  <= count
    uint32_t count;             //  == dims[0]
} proto_loss_t;

//  EVAL results (server -> device), one per EVAL batch.
typedef struct {
    double loss_sum;
    uint64_t correct;           //  <= count
    uint64_t count;
} proto_eval_result_t;

//  STATS: one device's timings for an epoch. Times finite and >= 0.
typedef struct {
    double forward_s, backward_s, update_s, idle_s;
    uint64_t bytes_up, bytes_down;
    uint32_t epoch;
    //  The device's own training loss over the epoch, when it computes one
    //  (fl: the whole model runs on the device); 0 samples otherwise.
    double loss_sum;            //  sum of per-sample losses, finite, >= 0
    uint64_t correct;           //  <= samples
    uint64_t samples;
} proto_stats_t;

//  EVENTS: one stage event of the sending device (who is the header's
//  device). Times in seconds since the plan's origin_s, finite, 0 <= start_s
//  <= end_s. iteration / micro_batch are PROTO_EVENT_NONE when they do not
//  apply (an update has no micro-batch, a wait for MODEL no iteration).
typedef struct {
    uint32_t stage;             //  proto_stage_t
    uint32_t epoch, iteration, micro_batch;
    double start_s, end_s;
} proto_event_t;

//  PROFILE: what one split unit costs on the device, in seconds, for a
//  whole mini-batch of the run's batch size (nn_profile measures it; the
//  fields mirror nn_estimate_unit_cost_t). Finite, 0 <= fixed <= total <=
//  PROTO_COST_MAX_S.
typedef struct {
    double fwd_s, bwd_s, fwd_fixed_s, bwd_fixed_s, upd_s;
} proto_unit_cost_t;

//  The device's codec speeds (nn_profile_codecs, one thread): float32
//  bytes per second it encodes and decodes, entry c - 1 for codec id c
//  (fp16, int8, topk). Finite, 0 <= speed <= PROTO_CODEC_MAX_BPS; 0 = not
//  measured (the server's planner cannot choose a codec for it then).
typedef struct {
    uint32_t units;             //  1..PROTO_PROFILE_UNITS_MAX: every unit of the model
    uint32_t threads;           //  compute threads it was measured with, >= 1
    double encode_Bps[PROTO_PROFILE_CODECS];
    double decode_Bps[PROTO_PROFILE_CODECS];
    proto_unit_cost_t unit[PROTO_PROFILE_UNITS_MAX];
    //  Optional: zstd's ratio (zstd body / plain body) on the tensors that
    //  cross each split point p = 1..units - 1 (row p - 1), measured on the
    //  device's samples (nn_squeeze). 0 rows: not measured (the device does
    //  not send the section); otherwise units - 1 rows, each ratio finite
    //  in (0, PROTO_ZSTD_RATIO_MAX].
    uint32_t zstd_rows;
    double zstd_ratio[PROTO_PROFILE_UNITS_MAX - 1][PROTO_ZSTD_RATIOS];
} proto_profile_t;

//  PROBE frame 1. Frame 2 is probe payload: any bytes, only its length
//  counts. The server sends a PROBE; the device answers at once with a
//  PROBE of the same probe_id, reply_bytes 0 and a payload of the asked
//  reply_bytes. The server times the round trip (PROTOCOL.md, "Probing").
typedef struct {
    uint32_t probe_id;
    uint32_t reply_bytes;       //  <= PROTO_PROBE_MAX_BYTES; 0 in an answer
} proto_probe_t;

//  What a receiver accepts. A zeroed struct (or NULL) takes the defaults:
//  every field's 0 means "the protocol maximum" or "any".
typedef struct {
    int max_frames;             //  0 = PROTO_MAX_FRAMES
    size_t max_frame_bytes;     //  any one frame; 0 = PROTO_DEFAULT_MAX_FRAME_BYTES
    uint32_t max_batch;         //  tensors' dims[0] and WELCOME batch_size; 0 = any
    uint32_t h, w, c;           //  expected per-sample activation shape; 0 = any.
                                //  If any is set, tensors must be rank 4 (n,h,w,c).
    uint32_t classes;           //  labels must be in [0, classes); 0 = any >= 0
    uint64_t slab_count;        //  expected MODEL/PARAMS floats; 0 = any
    uint64_t buffer_count;      //  expected PARAMS floats with CALIBRATE (the
                                //  slab's buffers); 0 = any up to slab_count
    const uint8_t *spec_hash;   //  expected PROTO_SPEC_HASH_SIZE bytes; NULL = any
    size_t max_json_bytes;      //  WELCOME config; 0 (or > cap) = PROTO_JSON_MAX
    uint32_t max_events;        //  EVENTS records; 0 (or > cap) = PROTO_EVENTS_MAX
} proto_limits_t;

typedef struct _proto_msg_t proto_msg_t;

//  Frees a buffer handed over with proto_msg_set_*_owned (free, nn_free).
//  Called exactly once, possibly from a libzmq I/O thread.
typedef void (proto_free_fn) (void *data);

//  ---------------------------------------------------------------------
//  Names and codes

const char *proto_type_name (int type);         //  "ACTIVATIONS", "UNKNOWN"
const char *proto_strerror (int code);          //  static text for PROTO_*
bool proto_code_is_malformed (int code);        //  code <= PROTO_E_MAGIC
const char *proto_stage_name (int stage);       //  "forward", "wait", "UNKNOWN"
//  "forward" | "backward" | "update" | "wait" | "upload" -> proto_stage_t, or -1.
int proto_stage_from_name (const char *name);

#endif
