/*  pl_config_wire.c: the "codec" and "noise" config keys. See
    pl_config_wire.h and docs/config.md. */
#include "pl_config_wire.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nn_alloc.h"

//  The item as JSON text for an error message, cut to fit.
static const char *
s_shown (char *buf, size_t size, const cJSON *item)
{
    char *text = cJSON_PrintUnformatted (item);
    snprintf (buf, size, "%s", text ? text : "?");
    if (text && strlen (text) >= size && size > 4)
        memcpy (buf + size - 4, "...", 4);
    free (text);
    return buf;
}

#define S_CODEC_EXPECT "\"none\", \"fp16\", \"int8\", \"auto\", {\"up\": .., \"down\": ..} " \
                       "(down also \"topk\"), or a list of those with one per device"

//  One codec name for one direction ("up" or "down"; NULL: both). "auto"
//  sets *is_auto and *id none (the planner chooses among none, fp16 and
//  int8, never topk: docs/codecs.md).
static int
s_codec_name (nn_codec_id_t *id, bool *is_auto, const cJSON *v, const char *dir,
              const char *what, char *err, size_t err_size)
{
    char got[96];
    *is_auto = false;
    if (cJSON_IsString (v) && strcasecmp (v->valuestring, "auto") == 0) {
        *id = NN_CODEC_NONE;
        *is_auto = true;
        return 0;
    }
    if (!cJSON_IsString (v) || nn_codec_parse (v->valuestring, id))
        return nn_errf (err, err_size, "%s: expected " S_CODEC_EXPECT ", got %s", what,
                        s_shown (got, sizeof got, v));
    if (*id == NN_CODEC_TOPK && (!dir || strcmp (dir, "up") == 0))
        return nn_errf (err, err_size, "%s: topk compresses gradients only: use "
                        "{\"up\": \"int8\", \"down\": \"topk\"} (activations cannot be "
                        "sparsified with error feedback: the server's forward needs them "
                        "whole)", what);
    return 0;
}

//  One device's (or every device's) codecs: a name or {"up", "down"}.
static int
s_codec_pair (pl_codecs_t *pair, const cJSON *v, const char *what, char *err,
              size_t err_size)
{
    if (cJSON_IsString (v)) {
        nn_codec_id_t id;
        bool is_auto;
        if (s_codec_name (&id, &is_auto, v, NULL, what, err, err_size))
            return -1;
        pair->up = pair->down = id;
        pair->auto_up = pair->auto_down = is_auto;
        return 0;
    }
    char got[96];
    if (!cJSON_IsObject (v))
        return nn_errf (err, err_size, "%s: expected " S_CODEC_EXPECT ", got %s", what,
                        s_shown (got, sizeof got, v));
    //  Zeroed padding included (the flags leave two bytes): equal configs
    //  are equal under memcmp.
    pl_codecs_t p;
    memset (&p, 0, sizeof p);
    p.up = p.down = NN_CODEC_NONE;
    for (const cJSON *m = v->child; m; m = m->next) {
        char sub[96];
        bool up = m->string && strcmp (m->string, "up") == 0;
        if (!up && !(m->string && strcmp (m->string, "down") == 0))
            return nn_errf (err, err_size, "%s: unknown key \"%.32s\" (\"up\" or \"down\")",
                            what, m->string ? m->string : "");
        snprintf (sub, sizeof sub, "%s.%s", what, up ? "up" : "down");
        if (s_codec_name (up ? &p.up : &p.down, up ? &p.auto_up : &p.auto_down, m,
                          up ? "up" : "down", sub, err, err_size))
            return -1;
    }
    memcpy (pair, &p, sizeof p);
    return 0;
}

//  One value's parser: into out (an element of the key's type), what names
//  the value in errors.
typedef int (s_parse_fn) (void *out, const cJSON *v, const char *what, char *err,
                          size_t err_size);

//  key's value: one (into *one, *count = 0) or a list of one per device
//  (into list, *count entries; one then holds zeros). elem is the size of
//  one value; nothing changes on failure.
static int
s_per_device (void *one, void *list, int *count, size_t elem, s_parse_fn *parse,
              const cJSON *item, const char *source, const char *key, char *err,
              size_t err_size)
{
    char what[160];
    //  Zeroed padding included: equal configs are equal under memcmp.
    unsigned char value[64], values[PL_SPLIT_POINTS_MAX * 64];
    assert (elem <= sizeof value);
    memset (value, 0, sizeof value);
    memset (values, 0, sizeof values);
    if (!cJSON_IsArray (item)) {
        snprintf (what, sizeof what, "%s: %s", source, key);
        if (parse (value, item, what, err, err_size))
            return -1;
        memcpy (one, value, elem);
        memset (list, 0, elem * PL_SPLIT_POINTS_MAX);
        *count = 0;
        return 0;
    }
    int n = cJSON_GetArraySize (item);
    if (n < 1 || n > PL_SPLIT_POINTS_MAX)
        return nn_errf (err, err_size, "%s: %s: a per-device list needs 1..%d entries, "
                        "got %d", source, key, PL_SPLIT_POINTS_MAX, n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, item) {
        snprintf (what, sizeof what, "%s: %s[%d] (device %d)", source, key, i, i);
        if (parse (values + elem * (size_t) i, v, what, err, err_size))
            return -1;
        i++;
    }
    memcpy (list, values, elem * PL_SPLIT_POINTS_MAX);
    memcpy (one, value, elem);
    *count = n;
    return 0;
}

static int
s_codec_parse (void *out, const cJSON *v, const char *what, char *err, size_t err_size)
{
    return s_codec_pair (out, v, what, err, err_size);
}

int
pl_config_wire_codec (pl_config_t *self, const cJSON *item, const char *source,
                      char *err, size_t err_size)
{
    return s_per_device (&self->codec, self->codecs, &self->codecs_count,
                         sizeof self->codec, s_codec_parse, item, source, "codec", err,
                         err_size);
}

//  {"kind": "laplace"|"gaussian", "scale": S} or "none" / {"kind": "none"}.
static int
s_noise_one (nn_noise_t *noise, const cJSON *v, const char *what, char *err,
             size_t err_size)
{
    char got[96];
    //  Zeroed padding included: equal configs are equal under memcmp.
    nn_noise_t n;
    memset (&n, 0, sizeof n);
    if (cJSON_IsString (v)) {
        if (nn_noise_parse (v->valuestring, &n.kind) || n.kind != NN_NOISE_NONE)
            return nn_errf (err, err_size, "%s: expected \"none\" or {\"kind\": \"laplace\" "
                            "or \"gaussian\", \"scale\": a number > 0}, got %s", what,
                            s_shown (got, sizeof got, v));
        memcpy (noise, &n, sizeof n);
        return 0;
    }
    if (!cJSON_IsObject (v))
        return nn_errf (err, err_size, "%s: expected \"none\" or {\"kind\": \"laplace\" or "
                        "\"gaussian\", \"scale\": a number > 0}, got %s", what,
                        s_shown (got, sizeof got, v));
    bool has_kind = false, has_scale = false;
    for (const cJSON *m = v->child; m; m = m->next) {
        if (m->string && strcmp (m->string, "kind") == 0) {
            if (!cJSON_IsString (m) || nn_noise_parse (m->valuestring, &n.kind))
                return nn_errf (err, err_size, "%s.kind: expected \"none\", \"laplace\" or "
                                "\"gaussian\", got %s", what, s_shown (got, sizeof got, m));
            has_kind = true;
        }
        else
        if (m->string && strcmp (m->string, "scale") == 0) {
            if (!cJSON_IsNumber (m) || !isfinite (m->valuedouble) || m->valuedouble <= 0)
                return nn_errf (err, err_size, "%s.scale: expected a number > 0 (laplace "
                                "b, gaussian sigma), got %s", what,
                                s_shown (got, sizeof got, m));
            n.scale = m->valuedouble;
            has_scale = true;
        }
        else
            return nn_errf (err, err_size, "%s: unknown key \"%.32s\" (\"kind\" or "
                            "\"scale\")", what, m->string ? m->string : "");
    }
    if (!has_kind)
        return nn_errf (err, err_size, "%s: \"kind\" missing", what);
    if (n.kind == NN_NOISE_NONE)
        n.scale = 0;
    else
    if (!has_scale)
        return nn_errf (err, err_size, "%s: \"scale\" missing for %s noise", what,
                        nn_noise_name (n.kind));
    memcpy (noise, &n, sizeof n);
    return 0;
}

static int
s_noise_parse (void *out, const cJSON *v, const char *what, char *err, size_t err_size)
{
    return s_noise_one (out, v, what, err, err_size);
}

int
pl_config_wire_noise (pl_config_t *self, const cJSON *item, const char *source,
                      char *err, size_t err_size)
{
    return s_per_device (&self->noise, self->noises, &self->noises_count,
                         sizeof self->noise, s_noise_parse, item, source, "noise", err,
                         err_size);
}

//  A direction's name in the config: its codec or "auto".
static const char *
s_dir_name (nn_codec_id_t id, bool is_auto)
{
    return is_auto ? "auto" : nn_codec_name (id);
}

static cJSON *
s_pair_json (const pl_codecs_t *p)
{
    if (p->up == p->down && p->auto_up == p->auto_down)
        return cJSON_CreateString (s_dir_name (p->up, p->auto_up));
    cJSON *o = cJSON_CreateObject ();
    if (o) {
        cJSON_AddStringToObject (o, "up", s_dir_name (p->up, p->auto_up));
        cJSON_AddStringToObject (o, "down", s_dir_name (p->down, p->auto_down));
    }
    return o;
}

cJSON *
pl_config_wire_codec_json (const pl_config_t *self)
{
    if (!self->codecs_count)
        return s_pair_json (&self->codec);
    cJSON *a = cJSON_CreateArray ();
    for (int i = 0; a && i < self->codecs_count; i++)
        cJSON_AddItemToArray (a, s_pair_json (&self->codecs[i]));
    return a;
}

static cJSON *
s_noise_json (const nn_noise_t *n)
{
    if (n->kind == NN_NOISE_NONE)
        return cJSON_CreateString ("none");
    cJSON *o = cJSON_CreateObject ();
    if (o) {
        cJSON_AddStringToObject (o, "kind", nn_noise_name (n->kind));
        //  17 digits: the scale comes back exactly.
        char text[40];
        snprintf (text, sizeof text, "%.17g", n->scale);
        cJSON_AddRawToObject (o, "scale", text);
    }
    return o;
}

cJSON *
pl_config_wire_noise_json (const pl_config_t *self)
{
    if (!self->noises_count)
        return s_noise_json (&self->noise);
    cJSON *a = cJSON_CreateArray ();
    for (int i = 0; a && i < self->noises_count; i++)
        cJSON_AddItemToArray (a, s_noise_json (&self->noises[i]));
    return a;
}

bool
pl_config_codec_auto (const pl_config_t *self)
{
    for (int i = 0; i < self->devices && i < PL_SPLIT_POINTS_MAX; i++) {
        pl_codecs_t c = pl_config_codecs (self, i);
        if (c.auto_up || c.auto_down)
            return true;
    }
    return false;
}

int
pl_config_wire_check (const pl_config_t *self, const char *source, char *err,
                      size_t err_size)
{
    if (self->codecs_count && self->codecs_count != self->devices)
        return nn_errf (err, err_size, "%s: codec, devices: %d codec entries listed for %d "
                        "device(s); give one per device", source, self->codecs_count,
                        self->devices);
    if (self->noises_count && self->noises_count != self->devices)
        return nn_errf (err, err_size, "%s: noise, devices: %d noise entries listed for %d "
                        "device(s); give one per device", source, self->noises_count,
                        self->devices);
    if (self->mode != PL_MODE_FL)
        return 0;
    for (int i = 0; i < self->devices && i < PL_SPLIT_POINTS_MAX; i++) {
        pl_codecs_t c = pl_config_codecs (self, i);
        if (c.up != NN_CODEC_NONE || c.down != NN_CODEC_NONE || c.auto_up || c.auto_down)
            return nn_errf (err, err_size, "%s: codec, mode: mode fl sends whole models, "
                            "nothing crosses a split: codec must be \"none\"", source);
        if (pl_config_noise (self, i).kind != NN_NOISE_NONE)
            return nn_errf (err, err_size, "%s: noise, mode: noise is added to uploaded "
                            "activations, which mode fl does not send: noise must be "
                            "\"none\"", source);
    }
    return 0;
}

pl_codecs_t
pl_config_codecs (const pl_config_t *self, int id)
{
    if (self->codecs_count && id >= 0 && id < self->codecs_count)
        return self->codecs[id];
    return self->codec;
}

nn_noise_t
pl_config_noise (const pl_config_t *self, int id)
{
    if (self->noises_count && id >= 0 && id < self->noises_count)
        return self->noises[id];
    return self->noise;
}
