/*  gradcheck.h: central-difference gradient checks for test specs. */
#ifndef GRADCHECK_H_INCLUDED
#define GRADCHECK_H_INCLUDED

#include "nn_model.h"

//  A one-unit spec holding the given layers, for input (h, w, c); classes
//  is set to the output size so the spec validates.
nn_model_spec_t gradcheck_spec (int h, int w, int c, const nn_layer_spec_t *layers,
                                int count);
//  Check d/dx and d/dtheta of f = sum(out * R) (or of the softmax loss when
//  with_loss) against central differences; fails the current test on a
//  mismatch or an all-zero gradient.
void gradcheck_run (const nn_model_spec_t *spec, int n, uint64_t seed, bool with_loss);

#endif
