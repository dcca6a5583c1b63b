/*  pl_models.h: the model registry as the tools print it (--list-models). */
#ifndef PL_MODELS_H_INCLUDED
#define PL_MODELS_H_INCLUDED

#include <stdio.h>

//  For every model of nn_model_registry and each input it takes (28x28x1,
//  32x32x3; 10 classes): its split units and, at each split point P, the
//  activation crossing it (per sample) and the parameters on the device
//  side (units < P) and the server side.
void pl_models_print (FILE *out);

#endif
