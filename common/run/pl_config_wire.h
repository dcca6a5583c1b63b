/*  pl_config_wire.h: the config keys of what crosses the split, for
    pl_config.c: "codec" (one value, {"up": .., "down": ..}, or a list with
    one per device) and "noise" ({"kind": .., "scale": ..}, "none", or a
    list with one per device). Their values live in pl_config_t
    (pl_config.h); "int8_stochastic", "codec_zstd" and "topk_fraction" are plain table
    keys. Internal to libpl.
*/
#ifndef PL_CONFIG_WIRE_H_INCLUDED
#define PL_CONFIG_WIRE_H_INCLUDED

#include <cJSON.h>
#include <stddef.h>

#include "pl_config.h"

//  Overlay "codec" / "noise" from item onto self (nothing changed on
//  failure, with a message naming source and the key).
int pl_config_wire_codec (pl_config_t *self, const cJSON *item, const char *source,
                          char *err, size_t err_size);
int pl_config_wire_noise (pl_config_t *self, const cJSON *item, const char *source,
                          char *err, size_t err_size);
//  The same values as JSON that the two above read back (caller owns).
cJSON *pl_config_wire_codec_json (const pl_config_t *self);
cJSON *pl_config_wire_noise_json (const pl_config_t *self);
//  Combinations: a list has one entry per device; no codec and no noise in
//  mode fl (nothing crosses a split).
int pl_config_wire_check (const pl_config_t *self, const char *source,
                          char *err, size_t err_size);

#endif
