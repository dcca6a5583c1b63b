/*  nn_checkpoint.h: parameter files.

    A small binary format (docs/checkpoint-format.md): a header with magic,
    version, the model spec hash and the unit range, a tensor table (name,
    shape), the weights slab (parameters and buffers), optionally the
    optimiser state, and a BLAKE2b-256 checksum over everything before it.
    Loading rejects a file whose magic, version, spec hash, unit range,
    shapes, size or checksum does not match the model it is loaded into.
*/
#ifndef NN_CHECKPOINT_H_INCLUDED
#define NN_CHECKPOINT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "nn_model.h"

//  Write model's weights (and optimiser state if with_optim) to path,
//  atomically (temporary file, fsync, rename). 0 or -1 with a message.
int nn_checkpoint_save (const char *path, const nn_model_t *model, bool with_optim,
                        char *err, size_t err_size);
//  Read path into model. Optimiser state is restored when the file has it.
//  On any error model is left unchanged.
int nn_checkpoint_load (const char *path, nn_model_t *model,
                        char *err, size_t err_size);

#endif
