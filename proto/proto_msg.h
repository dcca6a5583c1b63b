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

#include "proto_planning.h"
#include "proto_tensor.h"
#include "proto_wire.h"

//  ---------------------------------------------------------------------
//  Pure codecs over bytes (no sockets), for tests and fuzzers.

//  Write h as the 40-byte header, field by field, as given.
void proto_header_encode (uint8_t out[PROTO_HEADER_SIZE], const proto_header_t *h);
//  Decode and check a header: magic, then version (both at fixed offsets
//  forever), then length 40, type, reserved and flags. 0 or PROTO_E_*.
int proto_header_decode (proto_header_t *h, const uint8_t *buf, size_t len,
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
//  BN calibration (PROTOCOL.md, "Calibration"): MODEL, ACTIVATIONS and
//  PARAMS only. A PARAMS with it carries the part's buffers, not its slab.
void proto_msg_set_calibrate (proto_msg_t *self, bool calibrate);
bool proto_msg_is_calibrate (const proto_msg_t *self);

//  HELLO. The setter copies; -1 if the name is longer than PROTO_NAME_MAX
//  or not printable ASCII.
int proto_msg_set_hello (proto_msg_t *self, const proto_hello_t *hello);
const proto_hello_t *proto_msg_hello (const proto_msg_t *self);

//  WELCOME. The config is copied; -1 if empty, longer than PROTO_JSON_MAX,
//  invalid UTF-8 or containing NUL. proto_msg_config is NUL-terminated.
int proto_msg_set_config (proto_msg_t *self, const char *json, size_t len);
const char *proto_msg_config (const proto_msg_t *self, size_t *len_out);
//  WELCOME frame 3: the largest frame, in bytes, the server accepts from
//  this device (its ZMQ_MAXMSGSIZE less PROTO_CURVE_FRAME_OVERHEAD), so the
//  device refuses to send a larger one instead of having libzmq drop its
//  connection without a word. PROTO_HEADER_SIZE..PROTO_DEFAULT_MAX_FRAME_BYTES;
//  the setter returns -1 (nothing changed) otherwise; 0 until set, and a
//  WELCOME without it is not sent.
int proto_msg_set_frame_cap (proto_msg_t *self, uint64_t max_frame_bytes);
uint64_t proto_msg_frame_cap (const proto_msg_t *self);
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
//  is incomplete or invalid, see proto_msg_encode; EMSGSIZE: a frame is
//  larger than PROTO_DEFAULT_MAX_FRAME_BYTES, which no receiver decodes)
//  and the message kept.
int proto_msg_send (proto_msg_t **self_p, void *socket);
//  The same on a ROUTER socket: routing_id (1..255 bytes) goes first.
int proto_msg_send_to (proto_msg_t **self_p, void *socket,
                       const void *routing_id, size_t routing_id_len);
//  proto_msg_send / _send_to against the receiver's frame cap (bytes; 0 or
//  more than the protocol's: PROTO_DEFAULT_MAX_FRAME_BYTES): a message with
//  a larger frame is not sent (-1, errno EMSGSIZE, the message kept), since
//  the receiver's libzmq would close the connection on it without a word.
//  On any failure err says which message and why ("PROBE: frame 2 is 65536
//  bytes, over the receiver's cap of 4096 bytes").
int proto_msg_send_capped (proto_msg_t **self_p, void *socket, size_t cap,
                           char *err, size_t err_size);
int proto_msg_send_to_capped (proto_msg_t **self_p, void *socket, const void *routing_id,
                              size_t routing_id_len, size_t cap, char *err, size_t err_size);

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
    //  ZMQ_SRCFD: the file descriptor of the connection it came over (tcp),
    //  -1 where there is none (inproc). The kernel gives a closed
    //  connection's descriptor to the next one: it names a connection only
    //  until libzmq reports that connection closed (zmq_socket_monitor's
    //  ZMQ_EVENT_DISCONNECTED carries the same number).
    int fd;
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
bool proto_type_allowed (pl_mode_t mode, proto_state_t state, int type,
                         proto_dir_t dir);
//  proto_type_allowed for a received message, plus EVAL's form: up must be
//  activations, down must be results (the flag is the peer's choice).
bool proto_msg_allowed (pl_mode_t mode, proto_state_t state,
                        const proto_msg_t *msg, proto_dir_t dir);
//  State after an allowed message: HELLO up -> JOINING, WELCOME down ->
//  JOINED, MODEL down -> TRAINING, BYE/ERROR -> CLOSED; else unchanged.
proto_state_t proto_state_next (proto_state_t state, int type, proto_dir_t dir);

#endif
