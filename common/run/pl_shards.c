/*  pl_shards.c: see pl_shards.h. */
#include "pl_shards.h"

#include "nn_rng.h"

int
pl_shards_each (const pl_config_t *cfg, int devices, const nn_dataset_t *ds,
                pl_shard_fn fn, void *arg, char *err, size_t err_size)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, cfg->seed);
    nn_rng_t shard_rng = nn_rng_split (&rng, 2000);
    for (int d = 0; d < devices; d++) {
        int count = 0;
        int *s = nn_dataset_shard (ds, cfg->partition, devices, d, cfg->samples,
                                   cfg->dirichlet_alpha, &shard_rng, &count, err, err_size);
        if (!s || fn (d, s, count, arg))
            return -1;
    }
    return 0;
}
