/*  proto_msg.h: the pipelearn wire format (grammar in proto/PROTOCOL.md).

    proto/ is the only code that turns bytes from a peer into messages. A
    message is one multipart ZeroMQ message: a fixed 40-byte header frame,
    then the payload frames of its type. Every integer and float is encoded
    byte by byte, little-endian, whatever the host.

    Decoding checks everything a peer controls and reports a PROTO_E_* code
    plus one line naming the message, the field and the values
    ("ACTIVATIONS: descriptor: rank 5 not in 1..4"). It never asserts on
    peer bytes. Asserts in this module are for programmer errors only
    (NULL message, reading a HELLO field from a BYE).

    Ownership:
    - proto_msg_send* destroy the message on success only (nulls *self_p),
      like zmsg_send; on failure the caller still owns it.
    - proto_msg_set_*_owned take a caller buffer and its free function and
      send it without copying (zmq_msg_init_data); *data_p is nulled on
      success only. The free function may run on a libzmq I/O thread.
    - Float data of a received message stays in the ZeroMQ frame it arrived
      in; proto_msg_tensor_data points into it. Only if the frame is not
      4-byte aligned (or the host is big-endian) is it copied once into an
      aligned buffer owned by the message.
*/
#ifndef PROTO_MSG_H_INCLUDED
#define PROTO_MSG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define PROTO_MAGIC            0x4E524C50u  //  "PLRN" as little-endian bytes
#define PROTO_VERSION          2            //  2: PROFILE, PROBE, PLAN
#define PROTO_HEADER_SIZE      40
#define PROTO_MAX_FRAMES       4            //  header + at most 3 payload frames
#define PROTO_MAX_RANK         4
#define PROTO_DTYPE_F32        1
#define PROTO_NAME_MAX         64           //  HELLO name, printable ASCII
#define PROTO_JSON_MAX         65536        //  WELCOME config, hard cap
#define PROTO_TEXT_MAX         1024         //  ERROR text
#define PROTO_SPEC_HASH_SIZE   32
#define PROTO_ROUTING_ID_MAX   255
#define PROTO_DEFAULT_MAX_FRAME_BYTES ((size_t) 256 << 20)

//  Fixed payload sizes in bytes (PROTOCOL.md gives every offset).
#define PROTO_HELLO_FIXED_SIZE 20           //  + name length
#define PROTO_PLAN_SIZE        56
#define PROTO_SLAB_SIZE        56
#define PROTO_LOSS_SIZE        12
#define PROTO_EVAL_RESULT_SIZE 24
#define PROTO_STATS_SIZE       76
#define PROTO_EVENT_SIZE       32           //  one EVENTS record
#define PROTO_EVENTS_MAX       65536        //  records per EVENTS message, hard cap
#define PROTO_EVENT_NONE       0xFFFFFFFFu  //  EVENTS iteration / micro_batch: not applicable
#define PROTO_PROFILE_UNITS_MAX 64          //  split units in a PROFILE
#define PROTO_UNIT_COST_SIZE   40           //  one PROFILE unit record
#define PROTO_PROFILE_FIXED_SIZE 8          //  + units * PROTO_UNIT_COST_SIZE
#define PROTO_PROBE_SIZE       8            //  PROBE frame 1
#define PROTO_PROBE_MAX_BYTES  ((uint32_t) 16 << 20)  //  PROBE reply_bytes cap
#define PROTO_COST_MAX_S       3600.0       //  a unit's cost beyond this is nonsense

//  Header flags. Bits not defined here are rejected.
#define PROTO_FLAG_EVAL_RESULT 0x1u         //  EVAL only: results, not activations
#define PROTO_FLAG_LAST        0x2u         //  ACTIVATIONS/GRADIENTS/EVAL: last of its sequence
#define PROTO_FLAG_PROFILE     0x4u         //  WELCOME only: the server plans from this
                                            //  device's costs: send PROFILE before MODEL

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

typedef enum {
    PROTO_MODE_FL = 1,
    PROTO_MODE_SL = 2,
    PROTO_MODE_SFL = 3,
    PROTO_MODE_PIPELEARN = 4
} proto_mode_t;

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
    uint32_t mode;              //  proto_mode_t
    uint64_t shard_begin;       //  the device's training samples are positions
    uint64_t shard_count;       //  [shard_begin, +count) of the partition order
    uint64_t seed;              //  the device's RNG seed (shuffle, augmentation)
    double origin_s;            //  the run's time 0: a CLOCK_REALTIME second (finite,
                                //  >= 0); EVENTS times count from it
} proto_plan_t;

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
    uint8_t dtype;              //  PROTO_DTYPE_F32
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
//  fields mirror nn_plan_unit_cost_t). Finite, 0 <= fixed <= total <=
//  PROTO_COST_MAX_S.
typedef struct {
    double fwd_s, bwd_s, fwd_fixed_s, bwd_fixed_s, upd_s;
} proto_unit_cost_t;

typedef struct {
    uint32_t units;             //  1..PROTO_PROFILE_UNITS_MAX: every unit of the model
    uint32_t threads;           //  compute threads it was measured with, >= 1
    proto_unit_cost_t unit[PROTO_PROFILE_UNITS_MAX];
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
const char *proto_mode_name (int mode);         //  "pipelearn", "UNKNOWN"
const char *proto_stage_name (int stage);       //  "forward", "wait", "UNKNOWN"
//  "forward" | "backward" | "update" | "wait" | "upload" -> proto_stage_t, or -1.
int proto_stage_from_name (const char *name);
//  "fl" | "sl" | "sfl" | "pipelearn" -> proto_mode_t, or -1.
int proto_mode_from_name (const char *name);

//  ---------------------------------------------------------------------
//  Pure codecs over bytes (no sockets), for tests and fuzzers.

//  Write h as the 40-byte header, field by field, as given.
void proto_header_encode (uint8_t out[PROTO_HEADER_SIZE], const proto_header_t *h);
//  Decode and check a header: magic, then version (both at fixed offsets
//  forever), then length 40, type, reserved and flags. 0 or PROTO_E_*.
int proto_header_decode (proto_header_t *h, const uint8_t *buf, size_t len,
                         char *err, size_t err_size);

//  Encoded size of a descriptor of this rank: 4 + 4 * rank.
size_t proto_tensor_desc_size (int rank);
//  out holds proto_tensor_desc_size (d->rank) bytes; returns bytes written.
size_t proto_tensor_desc_encode (uint8_t *out, const proto_tensor_desc_t *d);
//  Decode and check structure (dtype, rank, padding, dims >= 1, no overflow
//  of product * 4). *count_out (may be NULL) gets the element count.
int proto_tensor_desc_decode (proto_tensor_desc_t *d, uint64_t *count_out,
                              const uint8_t *buf, size_t len,
                              char *err, size_t err_size);

//  Decode a whole message from its frames (header first; no routing id).
//  Frames the message keeps (the float data frame) are moved out and left
//  empty; the caller closes all `count` frames afterwards, whatever the
//  result. 0 with *out set, or a PROTO_E_* code with *out NULL.
int proto_msg_decode_frames (proto_msg_t **out, zmq_msg_t *frames, int count,
                             const proto_limits_t *limits,
                             char *err, size_t err_size);
//  The same over plain buffers (copies them into frames first).
int proto_msg_decode_bytes (proto_msg_t **out, const void *const *data,
                            const size_t *sizes, int count,
                            const proto_limits_t *limits,
                            char *err, size_t err_size);
//  Check the message as a receiver with default limits would, then build its
//  frames (header first) into frames[], which the caller closes. Float data
//  frames are shared by reference, not copied. Returns the frame count, or
//  a PROTO_E_* code with a message (incomplete or invalid message) and no
//  frame initialised.
int proto_msg_encode (proto_msg_t *self, zmq_msg_t frames[PROTO_MAX_FRAMES],
                      char *err, size_t err_size);
//  The checks of proto_msg_encode alone: 0, or a PROTO_E_* code saying why
//  proto_msg_send would refuse the message (EINVAL).
int proto_msg_check (const proto_msg_t *self, char *err, size_t err_size);

//  ---------------------------------------------------------------------
//  Messages
//
//  The payload accessors assert that the message has their type (reading
//  a HELLO field from a BYE is a programmer error). The type of a received
//  message is the peer's choice: switch on proto_msg_type (and for EVAL on
//  proto_msg_is_eval_result) before reading payload fields.

//  A message of this type with a zeroed header (magic and version set) and
//  an empty payload. type must be a proto_type_t.
proto_msg_t *proto_msg_new (int type);
void proto_msg_destroy (proto_msg_t **self_p);

int proto_msg_type (const proto_msg_t *self);
const proto_header_t *proto_msg_header (const proto_msg_t *self);
//  Routing fields of the header (magic, version, type are fixed).
void proto_msg_set_route (proto_msg_t *self, uint32_t device_id, uint32_t epoch,
                          uint32_t iteration, uint32_t micro_batch);
void proto_msg_set_sequence (proto_msg_t *self, uint64_t sequence);
//  Only PROTO_FLAG_LAST may be set here; EVAL_RESULT follows the payload.
void proto_msg_set_last (proto_msg_t *self, bool last);
bool proto_msg_is_last (const proto_msg_t *self);

//  HELLO. The setter copies; -1 if the name is longer than PROTO_NAME_MAX
//  or not printable ASCII.
int proto_msg_set_hello (proto_msg_t *self, const proto_hello_t *hello);
const proto_hello_t *proto_msg_hello (const proto_msg_t *self);

//  WELCOME. The config is copied; -1 if empty, longer than PROTO_JSON_MAX,
//  invalid UTF-8 or containing NUL. proto_msg_config is NUL-terminated.
int proto_msg_set_config (proto_msg_t *self, const char *json, size_t len);
const char *proto_msg_config (const proto_msg_t *self, size_t *len_out);
void proto_msg_set_plan (proto_msg_t *self, const proto_plan_t *plan);
const proto_plan_t *proto_msg_plan (const proto_msg_t *self);

//  PLAN: the same fields as WELCOME's plan, checked the same way.

//  WELCOME: ask for a PROFILE (sets / clears PROTO_FLAG_PROFILE).
void proto_msg_set_profile_request (proto_msg_t *self, bool request);
bool proto_msg_profile_requested (const proto_msg_t *self);

//  PROFILE. The setter copies; -1 (nothing set) if a field is out of range.
int proto_msg_set_profile (proto_msg_t *self, const proto_profile_t *profile);
const proto_profile_t *proto_msg_profile (const proto_msg_t *self);

//  PROBE: frame 1 plus payload_bytes bytes of payload (zeros). -1 if
//  reply_bytes exceeds PROTO_PROBE_MAX_BYTES.
int proto_msg_set_probe (proto_msg_t *self, const proto_probe_t *probe,
                         size_t payload_bytes);
const proto_probe_t *proto_msg_probe (const proto_msg_t *self);
size_t proto_msg_probe_payload_bytes (const proto_msg_t *self);

//  MODEL / PARAMS: desc plus desc->count floats, copied or handed over.
//  -1 if desc->count is 0 or too large; then *data_p is kept.
int proto_msg_set_slab_copy (proto_msg_t *self, const proto_slab_t *desc,
                             const float *data);
int proto_msg_set_slab_owned (proto_msg_t *self, const proto_slab_t *desc,
                              float **data_p, proto_free_fn *free_fn);
const proto_slab_t *proto_msg_slab (const proto_msg_t *self);

//  ACTIVATIONS / GRADIENTS / EVAL: a float32 tensor of shape dims[0..rank).
//  -1 if rank is not 1..4, a dim is 0 or the size overflows; then *data_p
//  is kept and free_fn not called. On EVAL this makes it an activations
//  message (clears PROTO_FLAG_EVAL_RESULT).
int proto_msg_set_tensor_copy (proto_msg_t *self, const float *data,
                               const uint32_t *dims, int rank);
int proto_msg_set_tensor_owned (proto_msg_t *self, float **data_p,
                                const uint32_t *dims, int rank,
                                proto_free_fn *free_fn);
const proto_tensor_desc_t *proto_msg_tensor (const proto_msg_t *self);

//  Float data of a tensor or slab message, or NULL if none is set. Borrowed
//  from the message; points into the received frame unless it was copied
//  for alignment (proto_msg_tensor_is_zero_copy says which).
const float *proto_msg_tensor_data (const proto_msg_t *self);
size_t proto_msg_tensor_count (const proto_msg_t *self);
bool proto_msg_tensor_is_zero_copy (const proto_msg_t *self);

//  ACTIVATIONS / EVAL activations: one label per sample (copied).
void proto_msg_set_labels (proto_msg_t *self, const int32_t *labels, size_t count);
const int32_t *proto_msg_labels (const proto_msg_t *self);
size_t proto_msg_labels_count (const proto_msg_t *self);

//  GRADIENTS.
void proto_msg_set_loss (proto_msg_t *self, const proto_loss_t *loss);
const proto_loss_t *proto_msg_loss (const proto_msg_t *self);

//  EVAL results; sets PROTO_FLAG_EVAL_RESULT and drops any tensor.
void proto_msg_set_eval_result (proto_msg_t *self, const proto_eval_result_t *r);
bool proto_msg_is_eval_result (const proto_msg_t *self);
const proto_eval_result_t *proto_msg_eval_result (const proto_msg_t *self);

//  STATS.
void proto_msg_set_stats (proto_msg_t *self, const proto_stats_t *stats);
const proto_stats_t *proto_msg_stats (const proto_msg_t *self);

//  EVENTS: count records (1..PROTO_EVENTS_MAX), copied; -1 (and nothing
//  changed) if count is out of range or a record is invalid (stage, times).
int proto_msg_set_events (proto_msg_t *self, const proto_event_t *events, size_t count);
//  The records (borrowed from the message), *count_out of them; NULL and 0
//  if none are set.
const proto_event_t *proto_msg_events (const proto_msg_t *self, size_t *count_out);

//  ERROR: code >= 1 (see PROTOCOL.md) and UTF-8 text of at most
//  PROTO_TEXT_MAX bytes (copied; -1 otherwise).
int proto_msg_set_error (proto_msg_t *self, uint32_t code, const char *text);
uint32_t proto_msg_error_code (const proto_msg_t *self);
const char *proto_msg_error_text (const proto_msg_t *self);

//  ---------------------------------------------------------------------
//  Sockets (raw libzmq handles: zsock_resolve (sock) or a zmq_socket)

//  Send all frames (blocking as the socket's ZMQ_SNDTIMEO says). 0 and
//  *self_p destroyed and nulled, or -1 with errno set (EINVAL: the message
//  is incomplete or invalid, see proto_msg_encode) and the message kept.
int proto_msg_send (proto_msg_t **self_p, void *socket);
//  The same on a ROUTER socket: routing_id (1..255 bytes) goes first.
int proto_msg_send_to (proto_msg_t **self_p, void *socket,
                       const void *routing_id, size_t routing_id_len);

//  Receive one whole multipart message and decode it. Always reads every
//  frame of it, even after an error, so the socket stays in step.
//  0 with *msg_out set; -1 nothing received (timeout, EINTR, ETERM);
//  PROTO_E_SOCKET; or a malformed-input code with a message in err.
int proto_msg_recv (proto_msg_t **msg_out, void *socket,
                    const proto_limits_t *limits, char *err, size_t err_size);
//  The same on a ROUTER socket. routing_id must hold PROTO_ROUTING_ID_MAX
//  bytes; it is filled whenever a message arrived, also when it was
//  malformed, so the caller can answer ERROR to that peer.
int proto_msg_recv_from (proto_msg_t **msg_out, void *socket,
                         uint8_t *routing_id, size_t *routing_id_len,
                         const proto_limits_t *limits, char *err, size_t err_size);

//  What libzmq knows of a message's sender (its connection's metadata);
//  "" where the transport or mechanism has none.
typedef struct {
    char address[64];           //  "Peer-Address": the IP address (tcp)
    //  "User-Id": the ZAP handler's name for the peer; with CZMQ's zauth
    //  and CURVE, the peer's public key in Z85 (40 characters).
    char user_id[64];
} proto_peer_t;

//  proto_msg_recv_from that also gives the sender's metadata, so a server
//  can rate-limit an address that keeps breaking the protocol and bind a
//  session to the key that authenticated it.
int proto_msg_recv_from_peer (proto_msg_t **msg_out, void *socket, uint8_t *routing_id,
                              size_t *routing_id_len, proto_peer_t *peer,
                              const proto_limits_t *limits, char *err, size_t err_size);

//  Set ZMQ_MAXMSGSIZE to the largest frame limits allow, so libzmq drops a
//  peer that announces a bigger frame before buffering it. Call before
//  bind/connect (it applies to new connections). 0 or -1 (errno).
int proto_socket_limit (void *socket, const proto_limits_t *limits);
//  What CurveZMQ adds to every frame on the wire (libzmq 4.3's MESSAGE
//  command: its name 8, nonce 8, box MAC 16, flags 1), which ZMQ_MAXMSGSIZE
//  counts: proto_socket_limit allows the largest frame plus this.
#define PROTO_CURVE_FRAME_OVERHEAD ((size_t) 33)

//  ---------------------------------------------------------------------
//  State machine (PROTOCOL.md); the daemons enforce it.

//  May a message of this type travel in this direction in this state?
bool proto_type_allowed (proto_mode_t mode, proto_state_t state, int type,
                         proto_dir_t dir);
//  proto_type_allowed for a received message, plus EVAL's form: up must be
//  activations, down must be results (the flag is the peer's choice).
bool proto_msg_allowed (proto_mode_t mode, proto_state_t state,
                        const proto_msg_t *msg, proto_dir_t dir);
//  State after an allowed message: HELLO up -> JOINING, WELCOME down ->
//  JOINED, MODEL down -> TRAINING, BYE/ERROR -> CLOSED; else unchanged.
proto_state_t proto_state_next (proto_state_t state, int type, proto_dir_t dir);

#endif
