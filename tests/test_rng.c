/*  The seeded RNG: deterministic, independent streams, sane distributions. */
#include <criterion/criterion.h>

#include "nn_rng.h"

#include <math.h>

Test (rng, same_seed_same_stream_different_seed_differs)
{
    nn_rng_t a, b, c;
    nn_rng_seed (&a, 42);
    nn_rng_seed (&b, 42);
    nn_rng_seed (&c, 43);
    int same = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = nn_rng_u64 (&a), y = nn_rng_u64 (&b), z = nn_rng_u64 (&c);
        cr_assert_eq (x, y);
        same += x == z;
    }
    cr_assert_lt (same, 2);
}

Test (rng, split_streams_are_independent_and_do_not_advance_parent)
{
    nn_rng_t a;
    nn_rng_seed (&a, 1);
    nn_rng_t before = a;
    nn_rng_t s1 = nn_rng_split (&a, 1), s2 = nn_rng_split (&a, 2);
    cr_assert_eq (nn_rng_u64 (&a), nn_rng_u64 (&before));
    cr_assert_neq (nn_rng_u64 (&s1), nn_rng_u64 (&s2));
}

Test (rng, uniform_below_and_gamma_moments)
{
    nn_rng_t r;
    nn_rng_seed (&r, 5);
    double sum = 0.0;
    int counts[7] = { 0 };
    for (int i = 0; i < 70000; i++) {
        float u = nn_rng_uniform (&r);
        cr_assert (u >= 0.0f && u < 1.0f);
        sum += u;
        counts[nn_rng_below (&r, 7)]++;
    }
    cr_assert_float_eq (sum / 70000, 0.5, 0.01);
    for (int k = 0; k < 7; k++)
        cr_assert (counts[k] > 9000 && counts[k] < 11000, "bucket %d: %d", k, counts[k]);
    //  Gamma(a) has mean a, for a below and above 1.
    double shapes[2] = { 0.3, 4.0 };
    for (int s = 0; s < 2; s++) {
        double m = 0.0;
        for (int i = 0; i < 40000; i++)
            m += nn_rng_gamma (&r, shapes[s]);
        cr_assert_float_eq (m / 40000, shapes[s], 0.05 * shapes[s] + 0.01);
    }
}

Test (rng, shuffle_is_a_permutation)
{
    nn_rng_t r;
    nn_rng_seed (&r, 9);
    int a[50], seen[50] = { 0 };
    for (int i = 0; i < 50; i++)
        a[i] = i;
    nn_rng_shuffle_int (&r, a, 50);
    int moved = 0;
    for (int i = 0; i < 50; i++) {
        seen[a[i]]++;
        moved += a[i] != i;
    }
    for (int i = 0; i < 50; i++)
        cr_assert_eq (seen[i], 1);
    cr_assert_gt (moved, 25);
}
