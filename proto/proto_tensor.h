/*  proto_tensor.h: the messages that carry floats (MODEL, PARAMS,
    ACTIVATIONS, GRADIENTS, EVAL activations) and tensor descriptors, as
    proto_tensor.c encodes and checks them. Part of proto's public
    interface (include proto_msg.h).
*/
#ifndef PROTO_TENSOR_H_INCLUDED
#define PROTO_TENSOR_H_INCLUDED

#include "proto_wire.h"

//  Encoded size of a descriptor of this rank: 4 + 4 * rank.
size_t proto_tensor_desc_size (int rank);
//  out holds proto_tensor_desc_size (d->rank) bytes; returns bytes written.
size_t proto_tensor_desc_encode (uint8_t *out, const proto_tensor_desc_t *d);
//  Decode and check structure (dtype, rank, padding, dims >= 1, no overflow
//  of product * 4). *count_out (may be NULL) gets the element count.
int proto_tensor_desc_decode (proto_tensor_desc_t *d, uint64_t *count_out,
                              const uint8_t *buf, size_t len,
                              char *err, size_t err_size);

//  The largest frame any message valid under limits can carry: the data of a
//  max_batch x h x w x c tensor, a slab of slab_count floats, an EVENTS
//  frame of max_events records, a WELCOME config of max_json_bytes, and so
//  on. Receivers put it in max_frame_bytes so that ZMQ_MAXMSGSIZE
//  (proto_socket_limit) drops a peer announcing anything bigger before
//  buffering it. tensors false: the receiver takes no tensor messages
//  (an fl server), so the shape does not count. Falls back to
//  PROTO_DEFAULT_MAX_FRAME_BYTES when the limits leave a size that counts
//  open ("any").
size_t proto_limits_frame_bytes (const proto_limits_t *limits, bool tensors);

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

//  ACTIVATIONS / GRADIENTS as a codec payload (PROTOCOL.md, "Codecs"):
//  dims (n, h, w, c) and the bytes nn_codec_encode wrote (copied into the
//  frame). -1, nothing changed, for a bad shape, more than 2^32 - 1
//  elements, a payload shorter than the codec header or whose codec is
//  none or unknown. The payload is checked in full when the message is
//  sent (proto_msg_check), as the receiver checks it.
int proto_msg_set_tensor_encoded (proto_msg_t *self, const void *payload, size_t size,
                                  const uint32_t *dims);
//  The codec a tensor travels in (nn_codec_id_t): 0 (none) for f32. A
//  received codec tensor is decoded by proto: proto_msg_tensor_data gives
//  its floats.
int proto_msg_tensor_codec (const proto_msg_t *self);
//  Bytes of the tensor's data frame on the wire: 4 x count for f32, the
//  payload's size for a codec.
size_t proto_msg_tensor_wire_bytes (const proto_msg_t *self);

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

#endif
