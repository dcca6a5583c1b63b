/*  fuzz_common.c: limits profiles, the frame scheme and the checkpoint
    models shared by the harnesses and the seed generator (fuzz_common.h). */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_rng.h"

void
fuzz_die (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    fprintf (stderr, "fuzz: invariant broken: ");
    vfprintf (stderr, fmt, ap);
    fprintf (stderr, "\n");
    va_end (ap);
    abort ();
}

bool
fuzz_verbose (void)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv ("PL_FUZZ_VERBOSE") != NULL;
    return verbose;
}

//  The default run of configs/pipelearn.json, as srv_setup.c / cli_main.c
//  derive their limits from it.
#define S_BATCH 100
#define S_MICRO 4
#define S_SPLIT 1

static fuzz_run_t s_run;
static bool s_run_ready;

const fuzz_run_t *
fuzz_run (void)
{
    if (s_run_ready)
        return &s_run;
    char err[NN_ERR_SIZE];
    fuzz_run_t *r = &s_run;
    if (nn_model_spec_by_name (&r->spec, "vgg5", 1, 28, 28, 10, err, sizeof err))
        fuzz_die ("spec: %s", err);
    nn_model_spec_hash (&r->spec, r->spec_hash);
    nn_model_t *dev = nn_model_new (&r->spec, 0, S_SPLIT, 1, err, sizeof err);
    nn_model_t *full = nn_model_new (&r->spec, 0, r->spec.units_count, 1, err, sizeof err);
    if (!dev || !full)
        fuzz_die ("model: %s", err);
    r->max_batch = S_BATCH / S_MICRO;
    r->classes = (uint32_t) r->spec.classes;
    r->boundary = nn_model_output_shape (dev);
    r->device_weights = nn_model_weights_count (dev);
    r->full_weights = nn_model_weights_count (full);
    nn_model_destroy (&dev);
    nn_model_destroy (&full);
    s_run_ready = true;
    return r;
}

static uint16_t
s_u16 (const uint8_t *p)
{
    return (uint16_t) (p[0] | p[1] << 8);
}

const proto_limits_t *
fuzz_limits (fuzz_limits_t *out, int profile, const uint8_t *custom)
{
    memset (out, 0, sizeof *out);
    proto_limits_t *l = &out->limits;
    if (profile == FUZZ_PROFILE_NONE)
        return NULL;
    if (profile == FUZZ_PROFILE_CUSTOM) {
        const fuzz_run_t *r = fuzz_run ();
        l->max_batch = custom[0];
        l->h = custom[1];
        l->w = custom[2];
        l->c = custom[3];
        l->classes = custom[4];
        l->slab_count = s_u16 (custom + 5);
        l->max_json_bytes = s_u16 (custom + 7);
        l->max_events = custom[9];
        l->max_frames = custom[10];
        l->max_frame_bytes = s_u16 (custom + 11);
        if (custom[13] & 1) {
            memcpy (out->spec_hash, r->spec_hash, PROTO_SPEC_HASH_SIZE);
            l->spec_hash = out->spec_hash;
        }
        return l;
    }
    const fuzz_run_t *r = fuzz_run ();
    memcpy (out->spec_hash, r->spec_hash, PROTO_SPEC_HASH_SIZE);
    l->spec_hash = out->spec_hash;
    l->max_batch = r->max_batch;
    l->classes = r->classes;
    switch (profile) {
        case FUZZ_PROFILE_SERVER:
            l->slab_count = r->device_weights;
            l->h = (uint32_t) r->boundary.h;
            l->w = (uint32_t) r->boundary.w;
            l->c = (uint32_t) r->boundary.c;
            l->max_frame_bytes = proto_limits_frame_bytes (l, true);
            break;
        case FUZZ_PROFILE_SERVER_FL:
            l->slab_count = r->full_weights;
            l->max_frame_bytes = proto_limits_frame_bytes (l, false);
            break;
        default:    //  FUZZ_PROFILE_CLIENT: the client leaves max_frame_bytes open
            l->slab_count = r->device_weights;
            l->h = (uint32_t) r->boundary.h;
            l->w = (uint32_t) r->boundary.w;
            l->c = (uint32_t) r->boundary.c;
            break;
    }
    return l;
}

int
fuzz_split_frames (const uint8_t *in, size_t len, const uint8_t **frames, size_t *sizes)
{
    int count = 0;
    size_t at = 0;
    while (count < FUZZ_MAX_FRAMES && len - at >= 2) {
        size_t size = s_u16 (in + at);
        at += 2;
        if (size > len - at)
            size = len - at;
        frames[count] = in + at;
        sizes[count] = size;
        count++;
        at += size;
    }
    return count;
}

void
fuzz_write_prefix (FILE *out, int path, int profile, const uint8_t *custom)
{
    fputc (path, out);
    fputc (profile, out);
    if (profile == FUZZ_PROFILE_CUSTOM)
        fwrite (custom, 1, FUZZ_CUSTOM_SIZE, out);
}

void
fuzz_write_frame (FILE *out, const void *data, size_t size)
{
    if (size > 0xFFFF)
        fuzz_die ("seed frame of %zu bytes does not fit the u16 length", size);
    fputc ((int) (size & 0xFF), out);
    fputc ((int) (size >> 8), out);
    if (size)
        fwrite (data, 1, size, out);
}

//  Small parts only, so the seeds stay a few KB: the device part of the
//  default run, the same without batchnorm, the CIFAR-shaped device part
//  and the last unit (a dense layer, unit_begin > 0).
const fuzz_ckpt_model_t fuzz_ckpt_models[FUZZ_CKPT_MODELS] = {
    { "vgg5", 1, 28, 10, 0, 1 },
    { "vgg5-nobn", 1, 28, 10, 0, 1 },
    { "vgg5", 3, 32, 10, 0, 1 },
    { "vgg5", 1, 28, 10, 4, 5 },
};

nn_model_t *
fuzz_ckpt_model_new (int i)
{
    const fuzz_ckpt_model_t *m = &fuzz_ckpt_models[i];
    char err[NN_ERR_SIZE];
    nn_model_spec_t spec;
    if (nn_model_spec_by_name (&spec, m->model, m->in_c, m->side, m->side, m->classes,
                               err, sizeof err))
        fuzz_die ("checkpoint model %d: %s", i, err);
    nn_model_t *model = nn_model_new (&spec, m->unit_begin, m->unit_end, 1, err, sizeof err);
    if (!model)
        fuzz_die ("checkpoint model %d: %s", i, err);
    nn_rng_t rng;
    nn_rng_seed (&rng, 7);
    nn_model_init (model, &rng);
    return model;
}
