/*  pl_models.c: see pl_models.h. */
#include "pl_models.h"

#include "nn_alloc.h"
#include "nn_model.h"

static void
s_print_input (FILE *out, const nn_model_entry_t *e, int c, int side)
{
    nn_model_spec_t *spec = nn_calloc (1, sizeof *spec);
    char err[NN_ERR_SIZE];
    if (nn_model_spec_by_name (spec, e->name, c, side, side, 10, err, sizeof err)) {
        fprintf (out, "  input %dx%dx%d: not taken (%s)\n", side, side, c, err);
        nn_free (spec);
        return;
    }
    size_t total = nn_model_spec_params (spec, 0, spec->units_count);
    fprintf (out, "  input %dx%dx%d: %d units, %zu parameters (%.1f MB)\n", side, side, c,
             spec->units_count, total, (double) total * 4.0 / 1e6);
    fprintf (out, "    %-3s %-12s %-16s %12s %12s %12s\n", "P", "after unit", "activation",
             "floats", "device par.", "server par.");
    for (int p = 1; p < spec->units_count; p++) {
        nn_shape_t s = nn_model_spec_unit_output (spec, p - 1);
        char shape[32];
        snprintf (shape, sizeof shape, "%dx%dx%d", s.h, s.w, s.c);
        size_t device = nn_model_spec_params (spec, 0, p);
        fprintf (out, "    %-3d %-12s %-16s %12zu %12zu %12zu\n", p, spec->units[p - 1].name,
                 shape, nn_shape_size (s), device, total - device);
    }
    nn_free (spec);
}

void
pl_models_print (FILE *out)
{
    for (int i = 0; i < nn_model_registry_count (); i++) {
        const nn_model_entry_t *e = nn_model_registry_entry (i);
        fprintf (out, "%s: %s\n", e->name, e->summary);
        s_print_input (out, e, 1, 28);
        s_print_input (out, e, 3, 32);
    }
    fprintf (out, "P is split_point: the device runs units 1..P, the server the rest; the\n"
                  "activation is per sample (float32, times the batch on the wire).\n");
}
