/*  nn_noise.c: Laplace and Gaussian noise for uploaded activations. */
#include "nn_noise.h"

#include "nn_alloc.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *s_names[NN_NOISE_COUNT] = { "none", "laplace", "gaussian" };

const char *
nn_noise_name (nn_noise_kind_t kind)
{
    return kind >= 0 && kind < NN_NOISE_COUNT ? s_names[kind] : NULL;
}

int
nn_noise_parse (const char *name, nn_noise_kind_t *kind)
{
    for (int i = 0; name && i < NN_NOISE_COUNT; i++)
        if (strcmp (name, s_names[i]) == 0) {
            *kind = (nn_noise_kind_t) i;
            return 0;
        }
    return -1;
}

int
nn_noise_check (const nn_noise_t *noise, char *err, size_t err_size)
{
    if (!nn_noise_name (noise->kind))
        return nn_errf (err, err_size, "noise: unknown kind %d", (int) noise->kind);
    if (noise->kind != NN_NOISE_NONE && !(isfinite (noise->scale) && noise->scale > 0.0))
        return nn_errf (err, err_size, "noise: %s: scale must be finite and > 0, got %g",
                        nn_noise_name (noise->kind), noise->scale);
    return 0;
}

double
nn_noise_variance (const nn_noise_t *noise)
{
    switch (noise->kind) {
        case NN_NOISE_LAPLACE: return 2.0 * noise->scale * noise->scale;
        case NN_NOISE_GAUSSIAN: return noise->scale * noise->scale;
        default: return 0.0;
    }
}

//  Uniform in (0, 1): log of it is finite.
static double
s_open_uniform (nn_rng_t *rng)
{
    return ((double) (nn_rng_u64 (rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void
nn_noise_add (float *x, size_t count, const nn_noise_t *noise, nn_rng_t *rng)
{
    assert (nn_noise_check (noise, NULL, 0) == 0);
    double b = noise->scale;
    if (noise->kind == NN_NOISE_LAPLACE)
        //  Inverse CDF: an exponential of mean b with a random sign.
        for (size_t i = 0; i < count; i++) {
            uint64_t r = nn_rng_u64 (rng);
            double u = ((double) (r >> 12) + 0.5) * (1.0 / 4503599627370496.0);
            double e = -b * log (u);
            x[i] += (float) ((r & 1) ? -e : e);
        }
    else
    if (noise->kind == NN_NOISE_GAUSSIAN)
        //  Box-Muller, both values of each pair used.
        for (size_t i = 0; i < count; i += 2) {
            double rad = b * sqrt (-2.0 * log (s_open_uniform (rng)));
            double ang = 2.0 * M_PI * s_open_uniform (rng);
            x[i] += (float) (rad * cos (ang));
            if (i + 1 < count)
                x[i + 1] += (float) (rad * sin (ang));
        }
}
