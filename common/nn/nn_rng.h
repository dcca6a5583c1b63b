/*  nn_rng.h: seeded random numbers, passed in as state (no globals).

    xoshiro256** seeded through splitmix64. A value type: copy it to fork a
    stream; nn_rng_split derives an independent stream for a sub-task (a
    device, a layer) so results do not depend on call order elsewhere.
*/
#ifndef NN_RNG_H_INCLUDED
#define NN_RNG_H_INCLUDED

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} nn_rng_t;

void nn_rng_seed (nn_rng_t *self, uint64_t seed);
//  Independent stream derived from self's seed state and a stream id;
//  does not advance self.
nn_rng_t nn_rng_split (const nn_rng_t *self, uint64_t stream);
uint64_t nn_rng_u64 (nn_rng_t *self);
//  Uniform in [0, 1).
float nn_rng_uniform (nn_rng_t *self);
double nn_rng_uniform_double (nn_rng_t *self);
//  Uniform integer in [0, n), n > 0, without modulo bias.
uint32_t nn_rng_below (nn_rng_t *self, uint32_t n);
//  Standard normal (Box-Muller).
double nn_rng_normal (nn_rng_t *self);
//  Gamma(shape, 1), shape > 0 (Marsaglia-Tsang; boosted for shape < 1).
double nn_rng_gamma (nn_rng_t *self, double shape);
//  Fisher-Yates shuffle of an int array.
void nn_rng_shuffle_int (nn_rng_t *self, int *array, int count);

#endif
