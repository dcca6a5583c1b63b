/*  pl_config_moves.h: the "split_point_moves" config key, for pl_config.c:
    a list of {"epoch": E, "device": D, "split_point": P}, each moving
    device D to split point P from epoch E on (docs/config.md). Its values
    live in pl_config_t (moves, moves_count). Internal to libpl.
*/
#ifndef PL_CONFIG_MOVES_H_INCLUDED
#define PL_CONFIG_MOVES_H_INCLUDED

#include <cJSON.h>
#include <stddef.h>

#include "pl_config.h"

//  Overlay "split_point_moves" from item onto self (nothing changed on
//  failure, with a message naming source and the key).
int pl_config_moves_parse (pl_config_t *self, const cJSON *item, const char *source,
                           char *err, size_t err_size);
//  The same list as JSON that the parser reads back (caller owns).
cJSON *pl_config_moves_json (const pl_config_t *self);
//  Combinations: mode pipelearn or sfl, a device of the run, an epoch
//  from 2 to epochs, a split point of the model (units split units), one
//  entry per device and epoch.
int pl_config_moves_check (const pl_config_t *self, const char *source, int units,
                           char *err, size_t err_size);

#endif
