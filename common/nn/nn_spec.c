/*  nn_spec.c: model specs (VGG5) and their validation and hash. */
#include "nn_model.h"

#include "nn_alloc.h"
#include "nn_layer.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void
s_add (nn_unit_spec_t *unit, nn_layer_spec_t layer)
{
    unit->layers[unit->layers_count++] = layer;
}

static nn_unit_spec_t *
s_unit (nn_model_spec_t *spec, const char *name)
{
    nn_unit_spec_t *unit = &spec->units[spec->units_count++];
    memset (unit, 0, sizeof *unit);
    snprintf (unit->name, sizeof unit->name, "%s", name);
    return unit;
}

static void
s_conv_block (nn_model_spec_t *spec, const char *name, int out, bool bn, bool pool)
{
    nn_unit_spec_t *u = s_unit (spec, name);
    s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_CONV, .out_channels = out,
                                  .kernel = 3, .stride = 1, .pad = 1, .bias = true });
    if (bn)
        s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_BATCHNORM });
    s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_RELU });
    if (pool)
        s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_MAXPOOL, .kernel = 2, .stride = 2 });
}

void
nn_model_spec_vgg5 (nn_model_spec_t *spec, int in_c, int side, int classes,
                    bool batchnorm)
{
    memset (spec, 0, sizeof *spec);
    snprintf (spec->name, sizeof spec->name, "%s", batchnorm ? "vgg5" : "vgg5-nobn");
    spec->in_c = in_c;
    spec->in_h = spec->in_w = side;
    spec->classes = classes;
    s_conv_block (spec, "conv1", 32, batchnorm, true);
    s_conv_block (spec, "conv2", 64, batchnorm, true);
    s_conv_block (spec, "conv3", 64, batchnorm, false);
    nn_unit_spec_t *u = s_unit (spec, "dense1");
    s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_FLATTEN });
    s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_DENSE, .out_channels = 128, .bias = true });
    //  The reference has no ReLU between the two dense layers; kept so that
    //  results compare with it.
    u = s_unit (spec, "dense2");
    s_add (u, (nn_layer_spec_t) { .kind = NN_LAYER_DENSE, .out_channels = classes, .bias = true });
}

int
nn_model_spec_by_name (nn_model_spec_t *spec, const char *name, int in_c, int in_h,
                       int in_w, int classes, char *err, size_t err_size)
{
    if (in_h != in_w)
        return nn_errf (err, err_size, "model %s: needs square inputs, got %dx%d",
                        name, in_h, in_w);
    if (strcasecmp (name, "vgg5") == 0)
        nn_model_spec_vgg5 (spec, in_c, in_h, classes, true);
    else if (strcasecmp (name, "vgg5-nobn") == 0)
        nn_model_spec_vgg5 (spec, in_c, in_h, classes, false);
    else
        return nn_errf (err, err_size, "unknown model \"%s\" (known: vgg5, vgg5-nobn)",
                        name);
    return nn_model_spec_check (spec, err, err_size);
}

nn_shape_t
nn_model_spec_input (const nn_model_spec_t *spec)
{
    return (nn_shape_t) { spec->in_h, spec->in_w, spec->in_c };
}

int
nn_model_spec_check (const nn_model_spec_t *spec, char *err, size_t err_size)
{
    if (spec->units_count < 1 || spec->units_count > NN_MAX_UNITS)
        return nn_errf (err, err_size, "model %s: %d units (1..%d allowed)",
                        spec->name, spec->units_count, NN_MAX_UNITS);
    if (spec->in_c < 1 || spec->in_h < 1 || spec->in_w < 1 || spec->classes < 2)
        return nn_errf (err, err_size, "model %s: bad input %dx%dx%d or %d classes",
                        spec->name, spec->in_h, spec->in_w, spec->in_c, spec->classes);
    nn_shape_t shape = nn_model_spec_input (spec);
    char msg[256];
    for (int u = 0; u < spec->units_count; u++) {
        const nn_unit_spec_t *unit = &spec->units[u];
        if (unit->layers_count < 1 || unit->layers_count > NN_MAX_UNIT_LAYERS)
            return nn_errf (err, err_size, "model %s: unit %d has %d layers",
                            spec->name, u, unit->layers_count);
        for (int l = 0; l < unit->layers_count; l++) {
            if (!nn_layer_ops (unit->layers[l].kind))
                return nn_errf (err, err_size, "model %s: unit %d layer %d: unknown kind %d",
                                spec->name, u, l, (int) unit->layers[l].kind);
            if (nn_layer_output_shape (&unit->layers[l], shape, &shape, msg, sizeof msg))
                return nn_errf (err, err_size, "model %s: unit %d (%s) layer %d: %s",
                                spec->name, u, unit->name, l, msg);
        }
    }
    if (nn_shape_size (shape) != (size_t) spec->classes)
        return nn_errf (err, err_size, "model %s: output has %zu values, not %d classes",
                        spec->name, nn_shape_size (shape), spec->classes);
    return 0;
}

nn_shape_t
nn_model_spec_unit_output (const nn_model_spec_t *spec, int unit)
{
    nn_shape_t shape = nn_model_spec_input (spec);
    for (int u = 0; u <= unit && u < spec->units_count; u++)
        for (int l = 0; l < spec->units[u].layers_count; l++)
            nn_layer_output_shape (&spec->units[u].layers[l], shape, &shape, NULL, 0);
    return shape;
}

void
nn_model_spec_hash (const nn_model_spec_t *spec, uint8_t hash[NN_SPEC_HASH_SIZE])
{
    //  Hash a canonical text, not the struct: padding and unused array
    //  slots must not matter.
    crypto_generichash_state st;
    char line[256];
    int len;
    //  Idempotent and thread-safe; required before any libsodium call.
    if (sodium_init () < 0)
        abort ();
    crypto_generichash_init (&st, NULL, 0, NN_SPEC_HASH_SIZE);
    len = snprintf (line, sizeof line, "pipelearn-spec-1 %s in %d %d %d classes %d units %d\n",
                    spec->name, spec->in_h, spec->in_w, spec->in_c, spec->classes,
                    spec->units_count);
    crypto_generichash_update (&st, (const uint8_t *) line, (size_t) len);
    for (int u = 0; u < spec->units_count; u++)
        for (int l = 0; l < spec->units[u].layers_count; l++) {
            const nn_layer_spec_t *ls = &spec->units[u].layers[l];
            len = snprintf (line, sizeof line, "%d %d %d %d %d %d %d %d %.6g\n", u, l,
                            (int) ls->kind, ls->out_channels, ls->kernel, ls->stride,
                            ls->pad, (int) ls->bias, (double) ls->p);
            crypto_generichash_update (&st, (const uint8_t *) line, (size_t) len);
        }
    crypto_generichash_final (&st, hash, NN_SPEC_HASH_SIZE);
}
