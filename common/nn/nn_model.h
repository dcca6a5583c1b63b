/*  nn_model.h: models built from a declarative spec of split units.

    A spec lists "split units" (the group the PipeLearn reference calls a
    layer, e.g. conv+BN+ReLU+maxpool); a model is built for units
    [unit_begin, unit_end) of a spec, so the full model (0, U), the device
    part (0, P) and the server part (P, U) come from the same spec and chain
    exactly.

    Tensors are NHWC: a batch of activations is (n, H, W, C) row-major. Dense
    inputs are the NHWC flattening (h, w, c). Conv weights are (K, R, S, C),
    dense weights (out, in).

    The model owns three flat slabs (llm.c): weights (trainable parameters
    followed by non-trainable buffers such as BN running statistics),
    gradients and optimiser state (both sized to the trainable prefix).
    Layers hold views into them. All activation memory is allocated in
    nn_model_new for max_batch samples; forward and backward allocate nothing.
*/
#ifndef NN_MODEL_H_INCLUDED
#define NN_MODEL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn_rng.h"
#include "nn_spec_types.h"

//  The model registry: every model pipelearn builds, by name. The config
//  checker, the planner, the tools' --list-models and their error messages
//  all read it.
typedef struct {
    const char *name;               //  canonical: "mobilenetv3-small"
    const char *aliases;            //  other spellings, space separated
    const char *summary;            //  one line for --list-models
    //  Fill spec for (side x side x in_c) inputs and `classes` outputs.
    //  -1 with a message for an input the model cannot take.
    int (*build) (nn_model_spec_t *spec, int in_c, int side, int classes,
                  char *err, size_t err_size);
    //  The smallest micro-batch (samples) the planner cuts by default, where
    //  BN over fewer samples costs the model accuracy (measured, or assumed
    //  for a model not yet measured: docs/planner.md "The choice"); 0: none
    //  beyond BN's two samples.
    int min_micro_batch;
} nn_model_entry_t;

int nn_model_registry_count (void);
const nn_model_entry_t *nn_model_registry_entry (int index);
//  The entry whose name or alias matches `name` ignoring case, '-', '_'
//  and ' ' ("ResNet18", "mobilenet_v3_small"); NULL if none.
const nn_model_entry_t *nn_model_registry_find (const char *name);
//  "vgg5, vgg5-nobn, ..." into buf (truncated to size); returns buf.
char *nn_model_registry_names (char *buf, size_t size);
//  Split units of the named model (independent of the input shape); -1
//  for an unknown name.
int nn_model_registry_units (const char *name);

//  Fill spec with the named model (any registry spelling) for inputs of
//  (in_h, in_w, in_c) and `classes` outputs. Returns -1 with a message for
//  an unknown name or a shape the model cannot take.
int nn_model_spec_by_name (nn_model_spec_t *spec, const char *name,
                           int in_c, int in_h, int in_w, int classes,
                           char *err, size_t err_size);
//  VGG5 as the reference lays it out; batchnorm false drops the BN layers.
void nn_model_spec_vgg5 (nn_model_spec_t *spec, int in_c, int side, int classes,
                         bool batchnorm);
//  Parameters (trainable floats) of units [unit_begin, unit_end).
size_t nn_model_spec_params (const nn_model_spec_t *spec, int unit_begin, int unit_end);
//  Validate a spec (shapes propagate, kernels fit). -1 with a message.
int nn_model_spec_check (const nn_model_spec_t *spec, char *err, size_t err_size);
//  Output shape of unit `unit` (the boundary activation after it).
nn_shape_t nn_model_spec_unit_output (const nn_model_spec_t *spec, int unit);
//  Input shape of the spec.
nn_shape_t nn_model_spec_input (const nn_model_spec_t *spec);
//  BLAKE2b-256 of a canonical text of the spec (names, shapes, layers).
void nn_model_spec_hash (const nn_model_spec_t *spec,
                         uint8_t hash[NN_SPEC_HASH_SIZE]);

typedef struct _nn_model_t nn_model_t;

//  Build units [unit_begin, unit_end) of spec for batches of up to max_batch
//  samples. Parameters are zero until nn_model_init. Returns NULL with a
//  message if the range or spec is invalid.
nn_model_t *nn_model_new (const nn_model_spec_t *spec, int unit_begin,
                          int unit_end, int max_batch, char *err, size_t err_size);
void nn_model_destroy (nn_model_t **self_p);

//  Another context of `base`: the same units and batch size, sharing
//  base's weights, gradients and optimiser state (views: base must outlive
//  it and stays their owner) but with its own activation memory. A
//  pipeline keeps one context per micro-batch in flight so that micro-batch
//  i's forward state survives micro-batch i+1's forward until i's backward.
//  Contexts also use base's threads and per-thread scratch, which hold
//  nothing between calls: contexts of one base must take turns (no two
//  forward or backward calls at once), and nn_model_set_threads on any of
//  them sets base's.
nn_model_t *nn_model_new_shared (nn_model_t *base, char *err, size_t err_size);

//  Point self's weights, gradients and optimiser state at owner's slabs
//  (owner: the same spec and units; it stays their owner and must outlive
//  self's use of them). Any slabs self owned are freed. Activation memory
//  stays self's. A server worker keeps one activation context and trains
//  whichever device's replica (an owner built for batch 1) a step is for,
//  so activation memory scales with workers, not with devices. Allocates
//  nothing; call between steps.
void nn_model_use_slabs (nn_model_t *self, nn_model_t *owner);

//  Xavier-uniform weights, zero biases, BN weight 1 bias 0, running mean 0
//  var 1. Each layer draws from its own stream split off rng by its global
//  index in the spec, so the full model and its parts initialise to the
//  same values.
void nn_model_init (nn_model_t *self, const nn_rng_t *rng);

//  Forward n <= max_batch samples; x is (n, in shape). train selects batch
//  statistics (BN) and dropout masks (drawn from rng, may be NULL when not
//  training). Returns the output (n, out shape), borrowed until the next
//  forward.
const float *nn_model_forward (nn_model_t *self, const float *x, int n,
                               bool train, nn_rng_t *rng);
//  Backward for the last forward: dout (n, out shape) is the loss gradient
//  w.r.t. the output. Accumulates (+=) parameter gradients. If dx is not
//  NULL it receives the gradient w.r.t. the input x (n, in shape); if NULL
//  the input gradient of the first layer is not computed.
void nn_model_backward (nn_model_t *self, const float *dout, float *dx);
void nn_model_zero_grad (nn_model_t *self);

//  Threads used inside forward and backward: each layer splits the batch
//  into `threads` sample ranges run in parallel (OpenMP), with private
//  scratch and gradient accumulators, so OpenBLAS itself should run one
//  thread. Results equal the one-thread results up to float summation
//  order. Allocates; call between iterations, not during one. Default 1.
void nn_model_set_threads (nn_model_t *self, int threads);
int nn_model_threads (const nn_model_t *self);

//  BN's running averages after a training forward: running = (1 - m) *
//  running + m * batch, m = NN_BN_MOMENTUM (PyTorch's default) unless set
//  here, per context (0 < m <= 1). Setting 1/k before the k-th forward
//  makes the running statistics the plain mean over k batches (PyTorch's
//  momentum=None), which re-estimating them for given weights wants.
#define NN_BN_MOMENTUM 0.1f
void nn_model_set_bn_momentum (nn_model_t *self, float momentum);
//  Whether the part has a BN layer (running statistics to estimate).
bool nn_model_has_bn (const nn_model_t *self);

const nn_model_spec_t *nn_model_spec (const nn_model_t *self);
int nn_model_unit_begin (const nn_model_t *self);
int nn_model_unit_end (const nn_model_t *self);
int nn_model_max_batch (const nn_model_t *self);
nn_shape_t nn_model_input_shape (const nn_model_t *self);
nn_shape_t nn_model_output_shape (const nn_model_t *self);

//  Slabs. weights holds weights_count floats: params_count trainable
//  parameters then buffers. grads and optim hold params_count floats.
float *nn_model_weights (nn_model_t *self);
const float *nn_model_weights_const (const nn_model_t *self);
float *nn_model_grads (nn_model_t *self);
float *nn_model_optim_state (nn_model_t *self);
const float *nn_model_optim_state_const (const nn_model_t *self);
size_t nn_model_params_count (const nn_model_t *self);
size_t nn_model_weights_count (const nn_model_t *self);

//  One named tensor of the weights slab, for checkpoints and averaging.
typedef struct {
    char name[48];          //  "u0.l0.conv.w", "u1.l1.bn.running_var"
    int dims_count;
    int dims[4];
    size_t offset;          //  into the weights slab, in floats
    size_t count;
    bool trainable;
} nn_tensor_info_t;

int nn_model_tensors_count (const nn_model_t *self);
//  Copy every tensor of src whose name and size match one of dst's (a part
//  into the full model, or back). Returns the number of tensors copied.
int nn_model_copy_tensors (nn_model_t *dst, const nn_model_t *src);
void nn_model_tensor (const nn_model_t *self, int index, nn_tensor_info_t *info);

#endif
