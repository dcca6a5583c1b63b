/*  nn_rng.c: xoshiro256** with splitmix64 seeding. */
#include "nn_rng.h"

#include <math.h>

static uint64_t
s_splitmix (uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t
s_rotl (uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void
nn_rng_seed (nn_rng_t *self, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        self->s[i] = s_splitmix (&x);
}

nn_rng_t
nn_rng_split (const nn_rng_t *self, uint64_t stream)
{
    uint64_t x = self->s[0] ^ s_rotl (self->s[1], 17) ^ s_rotl (self->s[2], 31)
               ^ s_rotl (self->s[3], 47) ^ (stream * 0xd1342543de82ef95ULL);
    nn_rng_t out;
    for (int i = 0; i < 4; i++)
        out.s[i] = s_splitmix (&x);
    return out;
}

uint64_t
nn_rng_u64 (nn_rng_t *self)
{
    uint64_t *s = self->s;
    uint64_t result = s_rotl (s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl (s[3], 45);
    return result;
}

float
nn_rng_uniform (nn_rng_t *self)
{
    return (float) (nn_rng_u64 (self) >> 40) * (1.0f / 16777216.0f);
}

double
nn_rng_uniform_double (nn_rng_t *self)
{
    return (double) (nn_rng_u64 (self) >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t
nn_rng_below (nn_rng_t *self, uint32_t n)
{
    //  Lemire's multiply-shift with rejection.
    uint64_t m = (uint64_t) (uint32_t) (nn_rng_u64 (self) >> 32) * n;
    uint32_t low = (uint32_t) m;
    if (low < n) {
        uint32_t threshold = (uint32_t) -n % n;
        while (low < threshold) {
            m = (uint64_t) (uint32_t) (nn_rng_u64 (self) >> 32) * n;
            low = (uint32_t) m;
        }
    }
    return (uint32_t) (m >> 32);
}

double
nn_rng_normal (nn_rng_t *self)
{
    double u1 = nn_rng_uniform_double (self);
    double u2 = nn_rng_uniform_double (self);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt (-2.0 * log (u1)) * cos (2.0 * M_PI * u2);
}

double
nn_rng_gamma (nn_rng_t *self, double shape)
{
    if (shape < 1.0) {
        //  Gamma(a) = Gamma(a + 1) * U^(1/a)
        double u = nn_rng_uniform_double (self);
        if (u < 1e-300)
            u = 1e-300;
        return nn_rng_gamma (self, shape + 1.0) * pow (u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt (9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = nn_rng_normal (self);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = nn_rng_uniform_double (self);
        if (u < 1.0 - 0.0331 * x * x * x * x)
            return d * v;
        if (log (u) < 0.5 * x * x + d * (1.0 - v + log (v)))
            return d * v;
    }
}

void
nn_rng_shuffle_int (nn_rng_t *self, int *array, int count)
{
    for (int i = count - 1; i > 0; i--) {
        int j = (int) nn_rng_below (self, (uint32_t) i + 1);
        int t = array[i];
        array[i] = array[j];
        array[j] = t;
    }
}
