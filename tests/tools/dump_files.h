/*  dump_files.h: the files the parity tools (dump_step, train_steps) write
    for tests/torch_parity.py: raw little-endian arrays, the tensor table
    and the layer graph. Each returns 0, or -1 after a message on stderr. */
#ifndef DUMP_FILES_H
#define DUMP_FILES_H

#include "nn_model.h"

#include <stddef.h>

//  DIR/NAME holds exactly the bytes given.
int dump_write (const char *dir, const char *name, const void *data, size_t bytes);

//  DIR/NAME read whole into data, which must be exactly bytes long.
int dump_read (const char *dir, const char *name, void *data, size_t bytes);

//  DIR/tensors.txt: "name offset count" per tensor of the weights slab.
int dump_tensors (const char *dir, const nn_model_t *m);

//  DIR/spec.txt, per layer: unit, index in the unit, kind, out_channels,
//  kernel, stride, pad, bias, groups, from[0], from[1].
int dump_spec (const char *dir, const nn_model_spec_t *spec);

#endif
