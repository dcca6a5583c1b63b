/*  pl_config_moves.c: the "split_point_moves" config key. See
    pl_config_moves.h and docs/config.md. */
#include "pl_config_moves.h"

#include <math.h>
#include <string.h>

#include "nn_alloc.h"

#define S_EXPECT "a list of {\"epoch\": E, \"device\": D, \"split_point\": P}"

//  One integer member of an entry: 0 with *out set, -1 if it is not an
//  integer in [min, max].
static int
s_member (int *out, const cJSON *entry, const char *key, int min, const char *source,
          int index, char *err, size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (entry, key);
    if (!cJSON_IsNumber (v) || v->valuedouble != floor (v->valuedouble)
    ||  v->valuedouble < min || v->valuedouble > 1e6)
        return nn_errf (err, err_size, "%s: split_point_moves[%d].%s: expected an integer "
                        "from %d to 1000000", source, index, key, min);
    *out = (int) v->valuedouble;
    return 0;
}

int
pl_config_moves_parse (pl_config_t *self, const cJSON *item, const char *source,
                       char *err, size_t err_size)
{
    if (!cJSON_IsArray (item))
        return nn_errf (err, err_size, "%s: split_point_moves: expected " S_EXPECT, source);
    int count = cJSON_GetArraySize (item);
    if (count > PL_MOVES_MAX)
        return nn_errf (err, err_size, "%s: split_point_moves: %d entries, at most %d",
                        source, count, PL_MOVES_MAX);
    //  Unused entries zero, so that equal configs compare equal bytewise.
    pl_move_t moves[PL_MOVES_MAX] = { { 0, 0, 0 } };
    int i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        if (!cJSON_IsObject (e))
            return nn_errf (err, err_size, "%s: split_point_moves[%d]: expected {\"epoch\": "
                            "E, \"device\": D, \"split_point\": P}", source, i);
        for (const cJSON *m = e->child; m; m = m->next)
            if (!m->string || (strcmp (m->string, "epoch") && strcmp (m->string, "device")
                               && strcmp (m->string, "split_point")))
                return nn_errf (err, err_size, "%s: split_point_moves[%d]: unknown key "
                                "\"%.32s\" (\"epoch\", \"device\", \"split_point\")", source,
                                i, m->string ? m->string : "");
        if (s_member (&moves[i].epoch, e, "epoch", 1, source, i, err, err_size)
        ||  s_member (&moves[i].device, e, "device", 0, source, i, err, err_size)
        ||  s_member (&moves[i].split_point, e, "split_point", 1, source, i, err, err_size))
            return -1;
    }
    memcpy (self->moves, moves, sizeof moves);
    self->moves_count = count;
    return 0;
}

cJSON *
pl_config_moves_json (const pl_config_t *self)
{
    cJSON *list = cJSON_CreateArray ();
    for (int i = 0; list && i < self->moves_count; i++) {
        cJSON *o = cJSON_CreateObject ();
        if (!o || !cJSON_AddNumberToObject (o, "epoch", self->moves[i].epoch)
        ||  !cJSON_AddNumberToObject (o, "device", self->moves[i].device)
        ||  !cJSON_AddNumberToObject (o, "split_point", self->moves[i].split_point)) {
            cJSON_Delete (o);
            cJSON_Delete (list);
            return NULL;
        }
        cJSON_AddItemToArray (list, o);
    }
    return list;
}

int
pl_config_moves_check (const pl_config_t *self, const char *source, int units, char *err,
                       size_t err_size)
{
    if (self->moves_count == 0)
        return 0;
    if (self->mode != PL_MODE_PIPELEARN && self->mode != PL_MODE_SFL)
        return nn_errf (err, err_size, "%s: split_point_moves, mode: moving one device's "
                        "split point needs mode pipelearn or sfl (a replica per device); "
                        "mode %s has %s", source, pl_mode_name (self->mode),
                        self->mode == PL_MODE_FL ? "no split point"
                                                 : "one split point for every device");
    for (int i = 0; i < self->moves_count; i++) {
        const pl_move_t *m = &self->moves[i];
        if (m->device >= self->devices)
            return nn_errf (err, err_size, "%s: split_point_moves[%d].device, devices: "
                            "device %d of a run of %d device(s)", source, i, m->device,
                            self->devices);
        if (m->epoch < 2 || m->epoch > self->epochs)
            return nn_errf (err, err_size, "%s: split_point_moves[%d].epoch, epochs: epoch %d "
                            "is not in 2..%d (a move takes effect at an epoch's start after "
                            "the first; for epoch 1 set split_point)", source, i, m->epoch,
                            self->epochs);
        if (m->split_point > units - 1)
            return nn_errf (err, err_size, "%s: split_point_moves[%d].split_point, model: %s "
                            "has %d split units, so a split point must be in 1..%d, got %d",
                            source, i, self->model, units, units - 1, m->split_point);
        for (int k = 0; k < i; k++)
            if (self->moves[k].epoch == m->epoch && self->moves[k].device == m->device)
                return nn_errf (err, err_size, "%s: split_point_moves[%d]: device %d moves "
                                "twice before epoch %d (also entry %d)", source, i,
                                m->device, m->epoch, k);
    }
    return 0;
}
