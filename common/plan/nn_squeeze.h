/*  nn_squeeze.h: how much zstd shrinks the codecs' payloads at each split
    point, measured on real samples, for the planner (docs/planner.md,
    "zstd").

    With "codec_zstd" the body of every fp16, int8 and topk payload is
    compressed losslessly (nn_codec.h, NN_CODEC_FLAG_ZSTD). How much that
    saves depends on the tensor: a ReLU's zeros map to one int8 code, a
    max-pool leaves fewer of them, gradients have other statistics. The
    planner cannot guess it from a shape, and on a slow uplink it decides
    the split point (VGG5 at split 2 on 4g: int8 alone 31.4 MB per epoch
    and device, with zstd 25.0 MB). nn_squeeze_measure runs the model once
    forward and backward on a batch of the caller's real samples, at
    freshly initialised weights (nn_model_init from the caller's seed, as
    the unit profiles draw them: the run's initial distribution, not its
    very draw), and encodes the tensor crossing every boundary
    both ways with and without zstd: the ratio of the two bodies.

    Pure: the caller passes the samples and the seed; nothing is timed.
*/
#ifndef NN_SQUEEZE_H_INCLUDED
#define NN_SQUEEZE_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "nn_model.h"

//  The ratios measured at each boundary: codec fp16 or int8, activations
//  (up) or gradients (down).
typedef enum {
    NN_SQUEEZE_FP16_UP = 0,
    NN_SQUEEZE_FP16_DOWN = 1,
    NN_SQUEEZE_INT8_UP = 2,
    NN_SQUEEZE_INT8_DOWN = 3,
    NN_SQUEEZE_KINDS
} nn_squeeze_kind_t;

//  Samples the daemons (and pipelearn-plan) measure the ratios on: the
//  whole model's activations at this batch live at once (a device holds
//  only its part otherwise), and 32 images read as 100 do (VGG5 on
//  Fashion-MNIST, int8 up at split 2, two shards: 0.71 / 0.68 from 32
//  samples, 0.69 / 0.69 from 100, 0.68 / 0.71 from 50).
#define NN_SQUEEZE_SAMPLES 32

//  The largest ratio a measurement may give: zstd's bound on a body that
//  does not compress (a few bytes over 1) with room for tiny bodies.
#define NN_SQUEEZE_RATIO_MAX 2.0

typedef struct {
    int boundaries;                                 //  units - 1
    //  ratio[p - 1][kind]: at split point p (the output of unit p - 1 up,
    //  its gradient down), the zstd body's bytes over the plain body's,
    //  in (0, NN_SQUEEZE_RATIO_MAX].
    double ratio[NN_MAX_UNITS][NN_SQUEEZE_KINDS];
} nn_squeeze_t;

//  The index of (codec, up) in a ratio row: -1 for a codec without a
//  measured ratio (none, topk).
int nn_squeeze_kind (int codec, bool up);

//  Measure spec's ratios on x (n samples of the model's input shape,
//  normalised as training feeds them) and labels y, weights drawn from
//  seed, int8 rounding stochastically when stochastic (its rng is drawn
//  from seed too), threads compute threads (0 = 1). -1 with a message for
//  an invalid spec, n < 1, or a tensor a codec refuses (non-finite values:
//  a model that diverged on these samples).
int nn_squeeze_measure (nn_squeeze_t *out, const nn_model_spec_t *spec, const float *x,
                        const int *y, int n, uint64_t seed, bool stochastic, int threads,
                        char *err, size_t err_size);

#endif
