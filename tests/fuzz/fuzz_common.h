/*  fuzz_common.h: what the libFuzzer harnesses and the seed generator share.

    The input layouts (tests/fuzz/README.md has the same with examples):

    fuzz_proto: [path u8][profile u8][custom limits, FUZZ_CUSTOM_SIZE bytes,
    only when profile is FUZZ_PROFILE_CUSTOM][frame]...
      where each frame is [length u16 little-endian][length bytes]. A frame
      whose length runs past the end of the input takes the bytes that are
      left; frames past FUZZ_MAX_FRAMES are ignored. So "\x00\x00" followed
      by nothing is a message of zero frames.
    fuzz_checkpoint: [selector u8][file bytes]: selector bits 0-1 pick the
      model the file is loaded into (fuzz_ckpt_models), bit 2 asks the
      harness to rewrite the last 32 bytes as the correct BLAKE2b-256 of
      the rest, so mutations get past the checksum to the table parser.
    fuzz_codec: [codec u8][n u8][h u8][w u8][c u8][payload]: the codec
      the receiver expects (mod 4) and its expected shape, each dim
      (byte mod 8) + 1; the rest is the codec payload (PROTOCOL.md Codecs).
    fuzz_config: the bytes are the config text, as pl_config_load reads a
      file (a NUL byte or more than 1 MiB is refused before parsing).

    Seeds (tests/fuzz/corpus/) are written by fuzz_seeds (gen_seeds.c) with
    the writers below, so the harnesses and the seeds cannot disagree.
*/
#ifndef FUZZ_COMMON_H_INCLUDED
#define FUZZ_COMMON_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nn_model.h"
#include "proto_msg.h"

//  fuzz_codec's prefix: the expected codec and four dims.
#define FUZZ_CODEC_PREFIX 5

//  More than any message type has (PROTO_MAX_FRAMES), so "too many
//  frames" is reachable.
#define FUZZ_MAX_FRAMES 8

//  How fuzz_proto hands the frames to proto.
typedef enum {
    FUZZ_PATH_FRAMES = 0,       //  proto_msg_decode_frames, each frame its own allocation
    FUZZ_PATH_FRAMES_ODD,       //  the same with every frame at an odd address
    FUZZ_PATH_BYTES,            //  proto_msg_decode_bytes
    FUZZ_PATH_SERVER,           //  DEALER -> ROUTER over inproc, proto_msg_recv_from
    FUZZ_PATH_CLIENT,           //  ROUTER -> DEALER over inproc, proto_msg_recv
    FUZZ_PATH_PIECES,           //  proto_header_decode (frame 0), proto_tensor_desc_decode (frame 1)
    FUZZ_PATHS
} fuzz_path_t;

//  The limits fuzz_proto decodes with: what the daemons set for the
//  default run (configs/pipelearn.json: vgg5, fashion-mnist, batch 100,
//  4 micro-batches, split 1), none at all, or small ones from the input.
typedef enum {
    FUZZ_PROFILE_NONE = 0,      //  NULL: the client before WELCOME, the encoder
    FUZZ_PROFILE_SERVER,        //  pipelearn-server, split modes
    FUZZ_PROFILE_SERVER_FL,     //  pipelearn-server, mode fl (no tensors)
    FUZZ_PROFILE_CLIENT,        //  pipelearn-client after WELCOME, split modes
    FUZZ_PROFILE_CUSTOM,        //  FUZZ_CUSTOM_SIZE bytes of the input
    FUZZ_PROFILES
} fuzz_profile_t;

//  Custom limits: max_batch u8, h u8, w u8, c u8, classes u8, slab_count
//  u16, max_json_bytes u16, max_events u8, max_frames u8, max_frame_bytes
//  u16, use the run's spec hash u8 (bit 0). 0 means "default" as in
//  proto_limits_t, so the defaults are reachable too.
#define FUZZ_CUSTOM_SIZE 14

typedef struct {
    proto_limits_t limits;
    uint8_t spec_hash[PROTO_SPEC_HASH_SIZE];
} fuzz_limits_t;

//  Build the limits of a profile (custom: from FUZZ_CUSTOM_SIZE bytes at
//  custom). Returns the limits to pass to proto (NULL for NONE); they point
//  into out.
const proto_limits_t *fuzz_limits (fuzz_limits_t *out, int profile, const uint8_t *custom);

//  The run the real profiles describe, built once: spec, spec hash, the
//  device part's weights count and boundary shape, the whole model's
//  weights count.
typedef struct {
    nn_model_spec_t spec;
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    uint32_t max_batch;         //  batch_size / micro_batches
    uint32_t classes;
    nn_shape_t boundary;        //  device part's output (per sample)
    size_t device_weights;
    size_t full_weights;
} fuzz_run_t;

const fuzz_run_t *fuzz_run (void);

//  Split a fuzz_proto frame list (after path, profile and custom bytes)
//  into at most FUZZ_MAX_FRAMES (pointer, size) pairs into data. Returns
//  the count.
int fuzz_split_frames (const uint8_t *in, size_t len, const uint8_t **frames, size_t *sizes);

//  Writers for the seed generator: the prefix, then frames one by one.
void fuzz_write_prefix (FILE *out, int path, int profile, const uint8_t *custom);
void fuzz_write_frame (FILE *out, const void *data, size_t size);

//  Models fuzz_checkpoint loads into; index by selector & 3.
#define FUZZ_CKPT_MODELS 4
#define FUZZ_CKPT_FIX_SUM 0x4u
typedef struct {
    const char *model;          //  nn_model_spec_by_name name
    int in_c, side, classes;
    int unit_begin, unit_end;
} fuzz_ckpt_model_t;

extern const fuzz_ckpt_model_t fuzz_ckpt_models[FUZZ_CKPT_MODELS];

//  Build model index i for batch 1, weights initialised from a fixed seed.
//  Aborts on failure (the table above is ours).
nn_model_t *fuzz_ckpt_model_new (int i);

//  PL_FUZZ_VERBOSE set in the environment: harnesses print each input's
//  outcome (decoded type or the error message) to stderr, to see what a
//  seed or a crash input does.
bool fuzz_verbose (void);

//  Report a broken invariant and abort, so libFuzzer saves the input.
void fuzz_die (const char *fmt, ...) __attribute__ ((format (printf, 1, 2), noreturn));

#endif
