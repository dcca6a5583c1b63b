/*  nn_layer.h: layer descriptors inside a model (internal to the core).

    A layer knows its shapes and holds views into the model's slabs; its
    kind's ops table (darknet style) holds everything the model needs to
    know about the kind -- output shape, parameters and their init and
    names, activation memory, scratch, fusion eligibility -- and does the
    work through nn_kernels, so adding a kind touches its ops only. The
    model decides memory and wiring: `out` is a buffer of max_batch
    outputs, or the input itself for layers run in place, and a second
    input (ADD, MUL) arrives in `in2` (see nn_model.c).
*/
#ifndef NN_LAYER_H_INCLUDED
#define NN_LAYER_H_INCLUDED

#include "nn_kernels.h"
#include "nn_spec_types.h"

typedef struct nn_layer nn_layer_t;

typedef struct {
    const char *name;           //  "conv", "bn", ...: checkpoint tensor names
    int inputs;                 //  1, or 2 for ADD and MUL
    //  Output shape for input shapes in[0..inputs); -1 with a message if
    //  they do not fit. err may be NULL.
    int (*shape) (const nn_layer_spec_t *spec, const nn_shape_t *in, nn_shape_t *out,
                  char *err, size_t err_size);
    //  Trainable weights w (dims of the tensor table in dims, *dims_count
    //  of them), bias b, and non-trainable buffers (`buffer_names`, equal
    //  parts). NULL: none.
    void (*params) (const nn_layer_spec_t *spec, nn_shape_t in, size_t *w, size_t *b,
                    size_t *buffers, int dims[4], int *dims_count);
    const char *buffer_names[2];
    //  Initial w, b and buffers (after zeroing), drawing from rng. NULL:
    //  all zero.
    void (*init) (nn_layer_t *self, nn_rng_t *rng);
    //  State kept for backward beyond the output, in the activation slab:
    //  carve it from `at` (NULL: count only). Returns floats, each piece
    //  rounded up with `align`. NULL: none.
    size_t (*carve) (nn_layer_t *self, float *at, int max_batch, size_t (*align) (size_t));
    //  Floats of per-thread scratch, and doubles of per-thread sums. NULL: 0.
    size_t (*scratch) (const nn_layer_t *self, int max_batch);
    size_t (*sums) (const nn_layer_t *self);
    //  in (n, in shape) -> self->out. May keep `in` for backward.
    void (*forward) (nn_layer_t *self, const float *in, int n, bool train,
                     nn_rng_t *rng);
    //  dout (n, out shape) -> din (n, in shape) or NULL, and for two-input
    //  kinds self->din2; parameter gradients +=. din and din2 are
    //  overwritten.
    void (*backward) (nn_layer_t *self, const float *dout, float *din);
    bool can_inplace;           //  forward may write out over in, backward din over dout
    bool needs_output;          //  backward reads self->out
    bool aliases;               //  out is always the input, relabelled (flatten)
} nn_layer_ops_t;

struct nn_layer {
    nn_layer_spec_t spec;
    const nn_layer_ops_t *ops;
    int index;                  //  global index in the spec, for init streams
    int unit, local;            //  unit in the spec and index inside it
    nn_shape_t ishape, oshape;  //  per-sample (first) input and output shapes
    nn_shape_t ishape2;         //  second input (two-input kinds)
    int src[2];                 //  inputs: a layer of the model, -1 its input
    int consumers;              //  layers reading our output
    //  Views into the model's slabs (NULL when the kind has none).
    float *w, *b, *dw, *db;
    size_t w_count, b_count, buf_count;
    float *buf[2];              //  non-trainable buffers (BN running mean, var)
    //  Activation memory (views into the model's activation slab).
    float *out;                 //  (max_batch, out), or == input when in place
    bool inplace;
    const float *in2;           //  the last forward's second input
    float *din2;                //  backward: its gradient, or NULL
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
    float bn_momentum;          //  BN: the batch's weight in the running
                                //  averages (nn_model_set_bn_momentum)
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
    double *bn_parts;           //  threads x sums() per-thread sums
};

//  Ops for a kind, NULL if unknown (or not built).
const nn_layer_ops_t *nn_layer_ops (nn_layer_kind_t kind);

//  Inputs of layer l of a unit as unit-local layer indices, -1 for the
//  unit's input; returns how many (the kind's, 1 for an unknown kind).
int nn_unit_layer_inputs (const nn_unit_spec_t *unit, int l, int src[2]);
//  Output shapes of every layer of a unit for input shape `in`; -1 with a
//  message (err may be NULL) if an input reference or a shape is wrong.
int nn_unit_shapes (const nn_unit_spec_t *unit, nn_shape_t in, nn_shape_t *out,
                    char *err, size_t err_size);

//  Helpers the kinds share (nn_layer.c).
//  Every threaded op is a loop over `threads` sample ranges; OpenMP runs
//  the iterations in parallel (serially when threads is 1 or OpenMP is off).
#define NN_PRAGMA(x) _Pragma (#x)
//  for (int t = 0; t < T; t++) { body }, on T threads when T > 1. With
//  T == 1 no OpenMP region is entered: libgomp ends even a one-thread
//  region with a futex wake, one system call per layer call, and the
//  daemons' server workers and devices run one thread each (in a virtual
//  machine a system call is dear: 7000 per worker per loopback epoch).
#define NN_THREADS_FOR(T, t, ...)                                           \
    do {                                                                    \
        if ((T) > 1) {                                                      \
            NN_PRAGMA (omp parallel for num_threads (T) schedule (static))  \
            for (int t = 0; t < (T); t++) { __VA_ARGS__ }                   \
        }                                                                   \
        else                                                                \
            for (int t = 0; t < 1; t++) { __VA_ARGS__ }                     \
    } while (0)

//  Threads for `work` multiply-adds or elements: one below a threshold.
int nn_layer_threads (const nn_layer_t *self, size_t work);
//  First sample of range t of n samples split T ways.
static inline int
nn_layer_lo (int n, int T, int t)
{
    return (int) ((long) n * t / T);
}
//  Record the last forward's input, batch and mode.
void nn_layer_remember (nn_layer_t *self, const float *in, int n, bool train);

#endif
