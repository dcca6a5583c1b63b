/*  pl_summary.c: see pl_summary.h. */
#include "pl_summary.h"

#include "nn_alloc.h"
#include "nn_isa.h"
#include "pl_blas.h"
#include "pl_log.h"
#include "pl_timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#if defined (__GLIBC__)
#   include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct _pl_summary_t {
    cJSON *root;
    cJSON *epochs;
    pl_summary_listener_fn *listener;
    void *listener_arg;
};

pl_summary_t *
pl_summary_new (const pl_config_t *config, const char *results, const char *binary,
                int threads)
{
    pl_summary_t *self = nn_calloc (1, sizeof *self);
    self->root = cJSON_CreateObject ();
    cJSON *cfg = pl_config_to_json (config);
    //  The directory the files went to, not the config's default for it.
    if (results)
        cJSON_ReplaceItemInObject (cfg, "results_dir", cJSON_CreateString (results));
    cJSON_AddItemToObject (self->root, "config", cfg);
    cJSON_AddStringToObject (self->root, "results_dir", results ? results
                                                                : config->results_dir);
    cJSON_AddStringToObject (self->root, "binary", binary);
    self->epochs = cJSON_AddArrayToObject (self->root, "epochs");
    cJSON_AddStringToObject (self->root, "openblas_core", pl_blas_corename ());
    cJSON_AddStringToObject (self->root, "kernels", nn_isa_name (nn_isa_active ()));
    cJSON_AddNumberToObject (self->root, "threads", threads);
    cJSON_AddNumberToObject (self->root, "peak_rss_kb", (double) pl_peak_rss_kb ());
    return self;
}

void
pl_summary_set_epochs (pl_summary_t *self, cJSON *epochs)
{
    cJSON_ReplaceItemInObjectCaseSensitive (self->root, "epochs", epochs);
    self->epochs = epochs;
}

const cJSON *
pl_summary_epochs (const pl_summary_t *self)
{
    return self->epochs;
}

void
pl_summary_destroy (pl_summary_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cJSON_Delete ((*self_p)->root);
    nn_free (*self_p);
    *self_p = NULL;
}

cJSON *
pl_summary_add_epoch (pl_summary_t *self, const pl_epoch_stats_t *s)
{
    cJSON *e = cJSON_CreateObject ();
    cJSON_AddNumberToObject (e, "epoch", s->epoch);
    cJSON_AddNumberToObject (e, "wall_s", s->wall_s);
    cJSON_AddNumberToObject (e, "eval_s", s->eval_s);
    cJSON_AddNumberToObject (e, "train_loss", s->train_loss);
    cJSON_AddNumberToObject (e, "train_acc", s->train_acc);
    cJSON_AddNumberToObject (e, "test_loss", s->test_loss);
    cJSON_AddNumberToObject (e, "test_acc", s->test_acc);
    cJSON_AddNumberToObject (e, "images_per_s", s->images_per_s);
    cJSON_AddItemToArray (self->epochs, e);
    return e;
}

cJSON *
pl_summary_root (pl_summary_t *self)
{
    return self->root;
}


void
pl_summary_set_listener (pl_summary_t *self, pl_summary_listener_fn *fn, void *arg)
{
    self->listener = fn;
    self->listener_arg = arg;
}

int
pl_summary_write (pl_summary_t *self, const char *dir, char *err, size_t err_size)
{
    if (pl_mkdirs (dir, err, err_size))
        return -1;
    cJSON_ReplaceItemInObject (self->root, "peak_rss_kb",
                               cJSON_CreateNumber ((double) pl_peak_rss_kb ()));
    if (self->listener)
        self->listener (self->listener_arg, self->root);
    char *text = cJSON_Print (self->root);
    if (!text)
        return nn_errf (err, err_size, "summary: out of memory rendering JSON");
    char path[1024];
    snprintf (path, sizeof path, "%s/summary.json", dir);
    size_t len = strlen (text);
    text = nn_realloc (text, len + 2);
    text[len] = '\n';
    text[len + 1] = '\0';
    int rc = pl_write_file_atomic (path, text, len + 1, err, err_size);
    free (text);
    return rc;
}
