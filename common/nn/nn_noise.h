/*  nn_noise.h: the privacy option: noise added to the activations a device
    uploads (PiPar's differential-privacy study), so the server never sees
    a device's exact intermediate features.

    Pure and seeded: the caller passes the rng (one stream per device, e.g.
    nn_rng_split of the run's seed by device id), so a run is reproducible.
    The noise is i.i.d. per element with mean 0:
    - laplace, scale b: density exp(-|x| / b) / 2b, variance 2 b^2;
    - gaussian, scale sigma: variance sigma^2.
    What privacy budget a scale buys depends on the activations' sensitivity
    (the model's clipping, if any); pipelearn records the scale, it does
    not claim an epsilon.
*/
#ifndef NN_NOISE_H_INCLUDED
#define NN_NOISE_H_INCLUDED

#include <stddef.h>

#include "nn_rng.h"

typedef enum {
    NN_NOISE_NONE = 0,
    NN_NOISE_LAPLACE = 1,
    NN_NOISE_GAUSSIAN = 2,
    NN_NOISE_COUNT
} nn_noise_kind_t;

typedef struct {
    nn_noise_kind_t kind;
    double scale;           //  laplace b or gaussian sigma; > 0 unless kind is none
} nn_noise_t;

//  "none", "laplace", "gaussian"; NULL for anything else.
const char *nn_noise_name (nn_noise_kind_t kind);
//  Name -> kind, 0; -1 for an unknown name (NULL included).
int nn_noise_parse (const char *name, nn_noise_kind_t *kind);

//  A known kind and, unless none, a finite scale > 0. -1 with a message.
int nn_noise_check (const nn_noise_t *noise, char *err, size_t err_size);

//  The per-element variance the noise adds (0 for none).
double nn_noise_variance (const nn_noise_t *noise);

//  x[i] += one draw each, count elements; nothing for none. noise must
//  pass nn_noise_check (a programmer error otherwise).
void nn_noise_add (float *x, size_t count, const nn_noise_t *noise, nn_rng_t *rng);

#endif
