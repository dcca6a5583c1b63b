/*  dump_files.c: see dump_files.h. */
#include "dump_files.h"

#include <stdio.h>

static FILE *
s_open (const char *dir, const char *name, const char *mode)
{
    char path[1024];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen (path, mode);
    if (!f)
        fprintf (stderr, "dump: cannot open %s\n", path);
    return f;
}

int
dump_write (const char *dir, const char *name, const void *data, size_t bytes)
{
    FILE *f = s_open (dir, name, "wb");
    if (!f)
        return -1;
    bool ok = fwrite (data, 1, bytes, f) == bytes;
    if (fclose (f) || !ok) {
        fprintf (stderr, "dump: cannot write %s/%s\n", dir, name);
        return -1;
    }
    return 0;
}

int
dump_read (const char *dir, const char *name, void *data, size_t bytes)
{
    FILE *f = s_open (dir, name, "rb");
    if (!f)
        return -1;
    char extra;
    bool ok = fread (data, 1, bytes, f) == bytes && fread (&extra, 1, 1, f) == 0;
    fclose (f);
    if (!ok)
        fprintf (stderr, "dump: %s/%s is not %zu bytes\n", dir, name, bytes);
    return ok ? 0 : -1;
}

int
dump_tensors (const char *dir, const nn_model_t *m)
{
    FILE *f = s_open (dir, "tensors.txt", "w");
    if (!f)
        return -1;
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        fprintf (f, "%s %zu %zu\n", info.name, info.offset, info.count);
    }
    return fclose (f) ? -1 : 0;
}

int
dump_spec (const char *dir, const nn_model_spec_t *spec)
{
    FILE *f = s_open (dir, "spec.txt", "w");
    if (!f)
        return -1;
    for (int u = 0; u < spec->units_count; u++)
        for (int l = 0; l < spec->units[u].layers_count; l++) {
            const nn_layer_spec_t *ls = &spec->units[u].layers[l];
            fprintf (f, "%d %d %d %d %d %d %d %d %d %d %d\n", u, l, (int) ls->kind,
                     ls->out_channels, ls->kernel, ls->stride, ls->pad, (int) ls->bias,
                     ls->groups, ls->from[0], ls->from[1]);
        }
    return fclose (f) ? -1 : 0;
}
