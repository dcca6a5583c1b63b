/*  nn_layer.h: layer descriptors inside a model (internal to the core).

    A layer knows its shapes and holds views into the model's slabs; its
    kind's ops table (darknet style) does the work through nn_kernels.
    The model decides memory: `out` is a buffer of max_batch outputs, or the
    input itself for layers run in place (see nn_model.c).
*/
#ifndef NN_LAYER_H_INCLUDED
#define NN_LAYER_H_INCLUDED

#include "nn_kernels.h"
#include "nn_model.h"

typedef struct nn_layer nn_layer_t;

typedef struct {
    const char *name;           //  "conv", "bn", ...
    //  in (n, in shape) -> self->out. May keep `in` for backward.
    void (*forward) (nn_layer_t *self, const float *in, int n, bool train,
                     nn_rng_t *rng);
    //  dout (n, out shape) -> din (n, in shape) or NULL; param grads +=.
    void (*backward) (nn_layer_t *self, const float *dout, float *din);
    bool can_inplace;           //  forward may write out over in, backward din over dout
    bool needs_output;          //  backward reads self->out
} nn_layer_ops_t;

struct nn_layer {
    nn_layer_spec_t spec;
    const nn_layer_ops_t *ops;
    int index;                  //  global index in the spec, for init streams
    nn_shape_t ishape, oshape;  //  per-sample input and output shapes
    //  Views into the model's slabs (NULL when the kind has none).
    float *w, *b, *dw, *db;
    size_t w_count, b_count;
    float *running_mean, *running_var;
    //  Activation memory (views into the model's activation slab).
    float *out;                 //  (max_batch, out), or == input when in place
    bool inplace;
    //  Fusions the model sets up to save passes over memory:
    bool bn_relu;               //  BN: apply the next layer's ReLU itself
    bool relu_fwd_fused;        //  ReLU: forward done by the BN before it
    bool relu_bwd_fused;        //  ReLU: backward done by the max-pool after it
    bool pool_mask_input;       //  max-pool: no gradient to a winner <= 0
    bool bn_transient;          //  BN: runs the ReLU and max-pool after it
                                //  (bn_pool) sample chunk by sample chunk,
                                //  its output only a chunk in scratch;
                                //  x-hat over the input, din over x-hat
    nn_layer_t *bn_pool;        //  BN with bn_transient: the max-pool
    bool in_bn_chain;           //  ReLU, max-pool: run by the BN before them
    float *saved;               //  BN xhat / dropout mask, (max_batch, out)
    float *stats;               //  BN mean and invstd, (2, c)
    uint8_t *argmax;            //  maxpool winners in their windows, (max_batch, out)
    //  State of the last forward, for backward.
    const float *in_ptr;
    int n;
    bool train;
    //  Threads: the batch is split into `threads` contiguous sample ranges.
    int threads;
    float *scratch;             //  model scratch, threads x scratch_stride floats
    size_t scratch_stride;
    float *grad_parts;          //  (threads-1) x (w_count + b_count) partial grads
    double *bn_parts;           //  threads x 2c partial sums (BN)
};

//  Ops for a kind, NULL if unknown.
const nn_layer_ops_t *nn_layer_ops (nn_layer_kind_t kind);
//  Output shape for input shape; -1 with a message if it does not fit.
int nn_layer_output_shape (const nn_layer_spec_t *spec, nn_shape_t in,
                           nn_shape_t *out, char *err, size_t err_size);
//  Parameter and buffer counts for a layer with input shape in.
void nn_layer_param_counts (const nn_layer_spec_t *spec, nn_shape_t in,
                            size_t *w_count, size_t *b_count, size_t *buffers);
//  Floats of scratch the layer needs for a batch of max_batch.
size_t nn_layer_scratch_count (const nn_layer_t *self, int max_batch);

#endif
