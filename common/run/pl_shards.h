/*  pl_shards.h: every device's shard of the training set, drawn as every
    pipelearn binary draws them (the config's partition, samples and
    dirichlet_alpha, from the seed's stream 2000, devices in order): the
    server counts them, a device keeps its own, pipelearn-plan measures on
    them. One draw, so the three cannot drift apart. */
#ifndef PL_SHARDS_H_INCLUDED
#define PL_SHARDS_H_INCLUDED

#include "nn_dataset.h"
#include "pl_config.h"

//  Device d's shard: count indices into the set, owned by the callee (free
//  with nn_free). 0 to go on, -1 to stop (pl_shards_each returns -1).
typedef int (*pl_shard_fn) (int device, int *shard, int count, void *arg);

//  Draw the shards of `devices` devices of ds in device order and hand each
//  to fn. 0, or -1 with a message (a shard the dataset cannot draw, or fn's
//  -1, whose message fn leaves in err).
int pl_shards_each (const pl_config_t *cfg, int devices, const nn_dataset_t *ds,
                    pl_shard_fn fn, void *arg, char *err, size_t err_size);

#endif
