/*  nn_spec_types.h: what a model is made of, as plain values: layer
    kinds, layer and unit specs, a model spec and activation shapes.
    Types only: the layers (nn_layer.h) and the models (nn_model.h) both
    use them, and neither needs the other's functions for them.
*/
#ifndef NN_SPEC_TYPES_H_INCLUDED
#define NN_SPEC_TYPES_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#define NN_MAX_UNITS 32
//  Layers of one unit: an inverted-residual block with squeeze-excite takes
//  15; the spec is a value type (copied whole), so the bound is fixed.
#define NN_MAX_UNIT_LAYERS 24
#define NN_NAME_SIZE 32
#define NN_SPEC_HASH_SIZE 32

//  Kinds keep their numbers: a spec's hash (and so a checkpoint's) names
//  them. New kinds go at the end.
typedef enum {
    NN_LAYER_CONV = 1,      //  out_channels, kernel, stride, pad, bias, groups
    NN_LAYER_BATCHNORM,     //  2d over channels (NHWC last axis)
    NN_LAYER_RELU,
    NN_LAYER_MAXPOOL,       //  kernel, stride, pad
    NN_LAYER_AVGPOOL,       //  kernel, stride, pad; kernel 0 = global
    NN_LAYER_DENSE,         //  out_channels = units, bias
    NN_LAYER_FLATTEN,
    NN_LAYER_DROPOUT,       //  p
    NN_LAYER_ADD,           //  two inputs of one shape: residual sum
    NN_LAYER_MUL,           //  x (h, w, c) times s (1, 1, c): squeeze-excite
    NN_LAYER_HSWISH,        //  x * relu6 (x + 3) / 6
    NN_LAYER_HSIGMOID,      //  relu6 (x + 3) / 6
    NN_LAYER_KINDS_END
} nn_layer_kind_t;

//  A layer's inputs inside its unit (nn_layer_spec_t.from). 0 is the
//  default: for the first input the previous layer's output (the unit's
//  input for layer 0), for the second none.
#define NN_FROM_INPUT (-1)              //  the unit's input
#define NN_FROM_LAYER(l) ((l) + 1)      //  the output of the unit's layer l

typedef struct {
    nn_layer_kind_t kind;
    int out_channels;
    int kernel, stride, pad;
    bool bias;
    float p;
    int groups;             //  conv: 0 or 1 dense; in channels = depthwise
    int from[2];            //  inputs, see NN_FROM_*; ADD and MUL take two
} nn_layer_spec_t;

//  A unit is a small DAG: each layer reads the unit's input or earlier
//  layers' outputs; the unit's output is its last layer's, and only that
//  crosses into the next unit.
typedef struct {
    char name[NN_NAME_SIZE];
    int layers_count;
    nn_layer_spec_t layers[NN_MAX_UNIT_LAYERS];
} nn_unit_spec_t;

typedef struct {
    char name[NN_NAME_SIZE];        //  a registry name: "vgg5", "resnet18"
    int in_c, in_h, in_w;           //  input sample shape
    int classes;
    int units_count;
    nn_unit_spec_t units[NN_MAX_UNITS];
} nn_model_spec_t;

//  Per-sample activation shape (H, W, C); a dense output is (1, 1, units).
typedef struct {
    int h, w, c;
} nn_shape_t;

static inline size_t
nn_shape_size (nn_shape_t s)
{
    return (size_t) s.h * s.w * s.c;
}

#endif
