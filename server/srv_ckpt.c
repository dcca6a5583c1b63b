/*  srv_ckpt.c: the server's run checkpoints. See srv_ckpt.h. */
#include "srv_ckpt.h"

#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "pl_log.h"
#include "pl_summary.h"
#include "pl_timeline.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_PREFIX "round-"
#define S_MAX_KEPT 256
//  state.json's "format": 2 carries a checksum, 1 (before it) does not.
#define S_FORMAT 2
#define S_SUM_HEX (2 * crypto_generichash_BYTES)
//  Range checks on state.json (a value past them is corruption).
#define S_EPOCH_MAX 1000001         //  pl_config's epochs bound, plus the "complete" point
#define S_SAMPLES_MAX 10000000      //  pl_config's samples bound
#define S_REPLICAS_MAX 1024

//  Config fields that make a checkpoint belong to one run.
static const char *const s_identity[] = {
    "model", "dataset", "mode", "devices", "split_point", "micro_batches", "batch_size",
    "seed", "samples"
};

static int
s_sync_path (const char *path, char *err, size_t err_size)
{
    int fd = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return nn_errf (err, err_size, "checkpoint: cannot open %s: %s", path, strerror (errno));
    int rc = 0;
    if (fsync (fd) != 0 && errno != EINVAL)
        rc = nn_errf (err, err_size, "checkpoint: fsync of %s: %s", path, strerror (errno));
    close (fd);
    return rc;
}

static void
s_remove_dir (const char *path)
{
    DIR *d = opendir (path);
    if (d) {
        struct dirent *e;
        while ((e = readdir (d))) {
            if (strcmp (e->d_name, ".") == 0 || strcmp (e->d_name, "..") == 0)
                continue;
            char file[2048];
            snprintf (file, sizeof file, "%s/%s", path, e->d_name);
            unlink (file);
        }
        closedir (d);
    }
    rmdir (path);
}

static int
s_cmp_desc (const void *a, const void *b)
{
    return strcmp (*(char *const *) b, *(char *const *) a);
}

//  Names of complete checkpoints in dir, newest first (caller frees each
//  and the array). Leftover temporary directories are removed.
static char **
s_list (const char *dir, int *count)
{
    *count = 0;
    DIR *d = opendir (dir);
    if (!d)
        return NULL;
    char **names = nn_malloc (sizeof (char *) * S_MAX_KEPT);
    struct dirent *e;
    while ((e = readdir (d))) {
        if (strncmp (e->d_name, S_PREFIX, strlen (S_PREFIX)) != 0)
            continue;
        if (strstr (e->d_name, ".tmp-")) {
            char path[2048];
            snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
            s_remove_dir (path);
            continue;
        }
        if (*count < S_MAX_KEPT)
            names[(*count)++] = strdup (e->d_name);
    }
    closedir (d);
    qsort (names, (size_t) *count, sizeof (char *), s_cmp_desc);
    return names;
}

static void
s_list_free (char **names, int count)
{
    for (int i = 0; i < count; i++)
        free (names[i]);
    nn_free (names);
}

//  BLAKE2b-256 of text (len bytes) with the checksum's own S_SUM_HEX hex
//  digits, at sum inside it, read as '0's; into hex (S_SUM_HEX + 1 bytes).
//  text is restored before the return.
static void
s_state_sum (char *hex, char *text, size_t len, char *sum)
{
    char digits[S_SUM_HEX];
    memcpy (digits, sum, S_SUM_HEX);
    memset (sum, '0', S_SUM_HEX);
    unsigned char out[crypto_generichash_BYTES];
    crypto_generichash (out, sizeof out, (const unsigned char *) text, len, NULL, 0);
    memcpy (sum, digits, S_SUM_HEX);
    sodium_bin2hex (hex, S_SUM_HEX + 1, out, sizeof out);
}

//  state as text with its "checksum" member filled in: the BLAKE2b-256 of
//  the text itself with those 64 hex digits read as '0'. Caller frees.
static char *
s_state_print (cJSON *state)
{
    char zeros[S_SUM_HEX + 1];
    memset (zeros, '0', S_SUM_HEX);
    zeros[S_SUM_HEX] = 0;
    cJSON_AddStringToObject (state, "checksum", zeros);
    char *text = cJSON_Print (state);
    if (!text)
        return NULL;
    //  The only run of 64 '0's in quotes: every other string is shorter or
    //  a config string, and a number would not be quoted.
    char needle[S_SUM_HEX + 3];
    snprintf (needle, sizeof needle, "\"%s\"", zeros);
    char *sum = strstr (text, needle);
    if (!sum || strstr (sum + 1, needle)) {
        free (text);
        return NULL;
    }
    char hex[S_SUM_HEX + 1];
    s_state_sum (hex, text, strlen (text), sum + 1);
    memcpy (sum + 1, hex, S_SUM_HEX);
    return text;
}

int
srv_ckpt_save (const char *results_dir, int keep, srv_ckpt_point_t point,
               const pl_config_t *cfg, const srv_assign_t *assign, nn_model_t *devpart,
               nn_model_t **replicas, int replicas_count, const cJSON *epochs, char *err,
               size_t err_size)
{
    char dir[1024], final[1100], tmp[1200], path[1300];
    snprintf (dir, sizeof dir, "%s/checkpoints", results_dir);
    if (pl_mkdirs (dir, err, err_size))
        return -1;
    snprintf (final, sizeof final, "%s/" S_PREFIX "%06d-%06u", dir, point.epoch,
              point.round_iter);
    snprintf (tmp, sizeof tmp, "%s.tmp-%ld", final, (long) getpid ());
    s_remove_dir (tmp);
    if (mkdir (tmp, 0750))
        return nn_errf (err, err_size, "checkpoint: cannot create %s: %s", tmp,
                        strerror (errno));
    int rc = 0;
    snprintf (path, sizeof path, "%s/devpart.ckpt", tmp);
    rc = nn_checkpoint_save (path, devpart, true, err, err_size);
    for (int i = 0; rc == 0 && i < replicas_count; i++) {
        snprintf (path, sizeof path, "%s/replica-%d.ckpt", tmp, i);
        rc = nn_checkpoint_save (path, replicas[i], true, err, err_size);
    }
    if (rc == 0) {
        cJSON *state = cJSON_CreateObject ();
        cJSON_AddNumberToObject (state, "format", S_FORMAT);
        cJSON_AddNumberToObject (state, "epoch", point.epoch);
        cJSON_AddNumberToObject (state, "round_iter", point.round_iter);
        cJSON_AddNumberToObject (state, "replicas", replicas_count);
        cJSON_AddNumberToObject (state, "origin_s", point.origin_s);
        cJSON_AddItemToObject (state, "config", pl_config_to_json (cfg));
        cJSON *a = cJSON_AddObjectToObject (state, "assignment");
        cJSON_AddItemToObject (a, "split_point",
                               cJSON_CreateIntArray (assign->split, assign->devices));
        cJSON_AddItemToObject (a, "micro_batches",
                               cJSON_CreateIntArray (assign->micro, assign->devices));
        cJSON_AddItemToObject (state, "epochs", epochs ? cJSON_Duplicate (epochs, 1)
                                                       : cJSON_CreateArray ());
        char *text = s_state_print (state);
        cJSON_Delete (state);
        snprintf (path, sizeof path, "%s/state.json", tmp);
        rc = text ? pl_write_file_atomic (path, text, strlen (text), err, err_size)
                  : nn_errf (err, err_size, "checkpoint: cannot print %s", path);
        free (text);
    }
    if (rc == 0 && s_sync_path (tmp, err, err_size))
        rc = -1;
    if (rc == 0) {
        //  Same round again (a resumed run passing the same point): replace.
        s_remove_dir (final);
        if (rename (tmp, final))
            rc = nn_errf (err, err_size, "checkpoint: cannot rename %s to %s: %s", tmp, final,
                          strerror (errno));
    }
    if (rc == 0)
        rc = s_sync_path (dir, err, err_size);
    if (rc) {
        s_remove_dir (tmp);
        return -1;
    }
    int count = 0;
    char **names = s_list (dir, &count);
    for (int i = keep; i < count; i++) {
        snprintf (path, sizeof path, "%s/%s", dir, names[i]);
        s_remove_dir (path);
    }
    s_list_free (names, count);
    return 0;
}

//  0 if the checkpoint's config is this run's; -1 naming the field if not.
static int
s_same_run (const cJSON *saved, const pl_config_t *cfg, const char *name, char *err,
            size_t err_size)
{
    cJSON *now = pl_config_to_json (cfg);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof s_identity / sizeof s_identity[0]; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive (saved, s_identity[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive (now, s_identity[i]);
        bool planned = cJSON_IsString (b) && strcmp (b->valuestring, "auto") == 0
                    && cJSON_IsNumber (a);
        if (!a || !b || (!planned && !cJSON_Compare (a, b, 1))) {
            char *va = a ? cJSON_PrintUnformatted (a) : NULL;
            char *vb = b ? cJSON_PrintUnformatted (b) : NULL;
            rc = nn_errf (err, err_size, "--resume: checkpoint %s is for another run: %s is "
                          "%s there, %s now", name, s_identity[i], va ? va : "missing",
                          vb ? vb : "missing");
            free (va);
            free (vb);
        }
    }
    cJSON_Delete (now);
    return rc;
}

//  0 if the parsed state's checksum matches its text (len bytes); -1 with
//  a message if not, or if a format-2 file has none. A format-1 file (from
//  before the checksum) has none to check and is taken on its range checks.
static int
s_check_sum (const cJSON *state, char *text, size_t len, const char *file,
             char *err, size_t err_size)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive (state, "format");
    if (cJSON_IsNumber (format) && format->valuedouble == 1)
        return 0;
    if (!cJSON_IsNumber (format) || format->valuedouble != S_FORMAT)
        return nn_errf (err, err_size, "%s: unknown format (want 1 or %d)", file, S_FORMAT);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive (state, "checksum");
    if (!cJSON_IsString (sum) || strlen (sum->valuestring) != S_SUM_HEX)
        return nn_errf (err, err_size, "%s: no checksum", file);
    //  The stored digits in the text: a hex string quoted, found once.
    char needle[S_SUM_HEX + 3];
    snprintf (needle, sizeof needle, "\"%s\"", sum->valuestring);
    char *at = strstr (text, needle);
    if (!at || strstr (at + 1, needle))
        return nn_errf (err, err_size, "%s: checksum not found in the text", file);
    char hex[S_SUM_HEX + 1];
    s_state_sum (hex, text, len, at + 1);
    if (strcmp (hex, sum->valuestring) != 0)
        return nn_errf (err, err_size, "%s: checksum mismatch (the file was changed or "
                        "damaged after it was written)", file);
    return 0;
}

//  A checkpoint's state.json, parsed (read by its size, at most 64 MiB:
//  the epochs array grows with the run). NULL with a message.
static cJSON *
s_read_state (const char *path, char *err, size_t err_size)
{
    char file[2200];
    snprintf (file, sizeof file, "%s/state.json", path);
    FILE *f = fopen (file, "rb");
    struct stat st;
    if (!f || fstat (fileno (f), &st) || st.st_size > (64 << 20) || !S_ISREG (st.st_mode)) {
        nn_errf (err, err_size, "%s: %s", file, !f ? strerror (errno)
                 : S_ISREG (st.st_mode) ? "larger than 64 MiB" : "not a regular file");
        if (f)
            fclose (f);
        return NULL;
    }
    char *text = nn_malloc ((size_t) st.st_size + 1);
    size_t n = fread (text, 1, (size_t) st.st_size, f);
    fclose (f);
    text[n] = 0;
    cJSON *state = cJSON_ParseWithOpts (text, NULL, 1);
    if (!state)
        nn_errf (err, err_size, "%s: not valid JSON", file);
    else
    if (s_check_sum (state, text, n, file, err, err_size)) {
        cJSON_Delete (state);
        state = NULL;
    }
    nn_free (text);
    return state;
}

//  Walk the checkpoints newest first until take (state, out) returns 0 (it
//  found what it reads in that state.json). 0, or -1 if none had it.
typedef int (s_take_fn) (const cJSON *state, void *out);

static int
s_peek (const char *results_dir, s_take_fn *take, void *out)
{
    char dir[1024];
    snprintf (dir, sizeof dir, "%s/checkpoints", results_dir);
    int count = 0, rc = -1;
    char **names = s_list (dir, &count);
    for (int i = 0; rc && i < count; i++) {
        char path[2048], why[512];
        snprintf (path, sizeof path, "%s/%s", dir, names[i]);
        cJSON *state = s_read_state (path, why, sizeof why);
        if (state)
            rc = take (state, out);
        cJSON_Delete (state);
    }
    s_list_free (names, count);
    return rc;
}

//  One of the assignment's arrays: devices numbers in 1..1e6. 0 or -1.
static int
s_take_ints (const cJSON *array, int devices, int *out)
{
    if (!cJSON_IsArray (array) || cJSON_GetArraySize (array) != devices)
        return -1;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, array) {
        if (!cJSON_IsNumber (v) || v->valuedouble < 1 || v->valuedouble > 1e6)
            return -1;
        out[i++] = (int) v->valuedouble;
    }
    return 0;
}

static int
s_take_assign (const cJSON *state, void *out)
{
    srv_assign_t *a = out;
    const cJSON *assign = cJSON_GetObjectItemCaseSensitive (state, "assignment");
    if (assign)
        return s_take_ints (cJSON_GetObjectItemCaseSensitive (assign, "split_point"),
                            a->devices, a->split)
            || s_take_ints (cJSON_GetObjectItemCaseSensitive (assign, "micro_batches"),
                            a->devices, a->micro) ? -1 : 0;
    //  Before the assignment had its own entry: the config's numbers.
    const cJSON *config = cJSON_GetObjectItemCaseSensitive (state, "config");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive (config, "split_point");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive (config, "micro_batches");
    if (!cJSON_IsNumber (p) || !cJSON_IsNumber (n) || p->valuedouble < 1
    ||  p->valuedouble > 1e6 || n->valuedouble < 1 || n->valuedouble > 1e6)
        return -1;
    srv_assign_uniform (a, a->devices, (int) p->valuedouble, (int) n->valuedouble);
    return 0;
}

int
srv_ckpt_peek_assign (const char *results_dir, int devices, srv_assign_t *assign)
{
    srv_assign_t a;
    srv_assign_uniform (&a, devices, 0, 0);
    if (s_peek (results_dir, s_take_assign, &a))
        return -1;
    *assign = a;
    return 0;
}

static int
s_take_origin (const cJSON *state, void *out)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive (state, "origin_s");
    //  A CLOCK_REALTIME second after 2001 and not in the future.
    if (!cJSON_IsNumber (o) || o->valuedouble <= 1e9 || o->valuedouble > pl_wall_clock ())
        return -1;
    *(double *) out = o->valuedouble;
    return 0;
}

int
srv_ckpt_peek_origin (const char *results_dir, double *origin_s)
{
    return s_peek (results_dir, s_take_origin, origin_s);
}

//  x is an integer in [lo, hi] (false for NaN and infinities too).
static bool
s_integer_in (double x, double lo, double hi)
{
    return x >= lo && x <= hi && floor (x) == x;
}

//  Load one checkpoint. 0; -1 corrupt (skip it); -2 another run (stop).
static int
s_load_one (const char *path, const char *name, const pl_config_t *cfg, nn_model_t *devpart,
            nn_model_t **replicas, int replicas_count, srv_ckpt_point_t *point,
            cJSON **epochs_out, char *err, size_t err_size)
{
    char file[2200];
    cJSON *state = s_read_state (path, err, err_size);
    if (!state)
        return -1;
    snprintf (file, sizeof file, "%s/state.json", path);
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive (state, "epoch");
    const cJSON *iter = cJSON_GetObjectItemCaseSensitive (state, "round_iter");
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive (state, "replicas");
    const cJSON *config = cJSON_GetObjectItemCaseSensitive (state, "config");
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (state, "epochs");
    const cJSON *origin = cJSON_GetObjectItemCaseSensitive (state, "origin_s");
    //  Iterations of one epoch: at most its samples over the batch size.
    double iter_max = (double) (cfg->samples > 0 ? cfg->samples : S_SAMPLES_MAX)
                    / cfg->batch_size + 1;
    int rc = 0;
    if (!cJSON_IsNumber (epoch) || !cJSON_IsNumber (iter) || !cJSON_IsNumber (reps)
    ||  !cJSON_IsObject (config) || !cJSON_IsArray (epochs)
    ||  (origin && !cJSON_IsNumber (origin)))
        rc = nn_errf (err, err_size, "%s: fields missing or of the wrong type", file);
    else
    if (!s_integer_in (epoch->valuedouble, 1, S_EPOCH_MAX))
        rc = nn_errf (err, err_size, "%s: epoch %g out of range (1..%d)", file,
                      epoch->valuedouble, S_EPOCH_MAX);
    else
    if (!s_integer_in (iter->valuedouble, 0, iter_max))
        rc = nn_errf (err, err_size, "%s: round_iter %g out of range (0..%.0f for %d "
                      "samples in batches of %d)", file, iter->valuedouble, floor (iter_max),
                      cfg->samples, cfg->batch_size);
    else
    if (!s_integer_in (reps->valuedouble, 0, S_REPLICAS_MAX))
        rc = nn_errf (err, err_size, "%s: replicas %g out of range (0..%d)", file,
                      reps->valuedouble, S_REPLICAS_MAX);
    else
    if (origin && !(origin->valuedouble == 0.0 || (origin->valuedouble > 1e9
                    && origin->valuedouble <= pl_wall_clock () + 86400.0)))
        rc = nn_errf (err, err_size, "%s: origin_s %g is not a time since 2001 (nor 0)",
                      file, origin->valuedouble);
    else
    if (cJSON_GetArraySize (epochs) > (int) epoch->valuedouble - 1)
        rc = nn_errf (err, err_size, "%s: %d epochs summarised before epoch %d", file,
                      cJSON_GetArraySize (epochs), (int) epoch->valuedouble);
    else
    if (s_same_run (config, cfg, name, err, err_size))
        rc = -2;
    else
    if ((int) reps->valuedouble != replicas_count)
        rc = nn_errf (err, err_size, "%s: %d replicas, this run has %d", file,
                      (int) reps->valuedouble, replicas_count);
    if (rc == 0) {
        snprintf (file, sizeof file, "%s/devpart.ckpt", path);
        rc = nn_checkpoint_load (file, devpart, err, err_size);
    }
    for (int i = 0; rc == 0 && i < replicas_count; i++) {
        snprintf (file, sizeof file, "%s/replica-%d.ckpt", path, i);
        rc = nn_checkpoint_load (file, replicas[i], err, err_size);
    }
    if (rc == 0) {
        point->epoch = (int) epoch->valuedouble;
        point->round_iter = (unsigned) iter->valuedouble;
        point->origin_s = origin ? origin->valuedouble : 0.0;
        *epochs_out = cJSON_Duplicate (epochs, 1);
    }
    cJSON_Delete (state);
    return rc;
}

int
srv_ckpt_load (const char *results_dir, const pl_config_t *cfg, nn_model_t *devpart,
               nn_model_t **replicas, int replicas_count, srv_ckpt_point_t *point,
               cJSON **epochs_out, char *chosen, size_t chosen_size,
               char *err, size_t err_size)
{
    char dir[1024];
    snprintf (dir, sizeof dir, "%s/checkpoints", results_dir);
    int count = 0;
    char **names = s_list (dir, &count);
    if (count == 0) {
        s_list_free (names, count);
        nn_errf (err, err_size, "--resume: no checkpoint in %s yet", dir);
        return -2;
    }
    int rc = -1;
    for (int i = 0; i < count; i++) {
        char path[2048], why[512];
        snprintf (path, sizeof path, "%s/%s", dir, names[i]);
        int r = s_load_one (path, names[i], cfg, devpart, replicas, replicas_count, point,
                            epochs_out, why, sizeof why);
        if (r == 0) {
            snprintf (chosen, chosen_size, "%s", path);
            rc = 0;
            break;
        }
        if (r == -2) {
            snprintf (err, err_size, "%s", why);
            break;
        }
        pl_log_warn ("server: --resume: skipping checkpoint %s: %s", names[i], why);
        snprintf (err, err_size, "--resume: no valid checkpoint in %s (last problem: %s)",
                  dir, why);
    }
    s_list_free (names, count);
    return rc;
}

int
srv_ckpt_claim_fresh (const char *results_dir, bool force, char *err, size_t err_size)
{
    char dir[1024];
    snprintf (dir, sizeof dir, "%s/checkpoints", results_dir);
    int count = 0;
    char **names = s_list (dir, &count);
    int rc = 0;
    if (count > 0 && !force) {
        //  Say how far the run there got (the newest checkpoint's name is
        //  round-EEEEEE-IIIIII): the operator decides with that in mind.
        int epoch = 0, epochs = 0;
        unsigned iter = 0;
        sscanf (names[0], S_PREFIX "%d-%u", &epoch, &iter);
        char path[2048], why[512], how[128];
        snprintf (path, sizeof path, "%s/%s", dir, names[0]);
        cJSON *state = s_read_state (path, why, sizeof why);
        const cJSON *config = cJSON_GetObjectItemCaseSensitive (state, "config");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive (config, "epochs");
        if (cJSON_IsNumber (n) && n->valuedouble >= 1 && n->valuedouble <= S_EPOCH_MAX)
            epochs = (int) n->valuedouble;
        cJSON_Delete (state);
        if (epochs > 0 && epoch > epochs)
            snprintf (how, sizeof how, "a complete run of %d epoch(s)", epochs);
        else
            snprintf (how, sizeof how, "a run stopped in epoch %d, iteration %u", epoch, iter);
        rc = nn_errf (err, err_size, "%s holds checkpoints of %s (newest %s); --resume "
                      "continues that run, --force starts a new one over it (its "
                      "checkpoints are deleted, its summary.json, timeline.csv and model.ckpt "
                      "replaced), or give another --results", dir, how, names[0]);
    }
    for (int i = 0; rc == 0 && i < count; i++) {
        char path[2048];
        snprintf (path, sizeof path, "%s/%s", dir, names[i]);
        s_remove_dir (path);
        if (access (path, F_OK) == 0)
            rc = nn_errf (err, err_size, "--force: cannot delete the old checkpoint %s", path);
    }
    s_list_free (names, count);
    return rc;
}
