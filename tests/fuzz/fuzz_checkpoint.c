/*  fuzz_checkpoint.c: libFuzzer harness for the checkpoint reader
    (nn_checkpoint_load).

    Input: [selector][file bytes] (fuzz_common.h). The file goes into a
    memfd and is loaded through /proc/self/fd/N, so the reader runs exactly
    as on a disk file without touching the disk. With FUZZ_CKPT_FIX_SUM in
    the selector the harness first writes the correct checksum over the
    last 32 bytes; otherwise nearly every mutation would stop at the
    checksum and the table parser behind it would never be reached.

    Contracts checked besides "no crash, no leak, no UB":
    - a failed load leaves the model's weights and optimiser state as they
      were, and says why;
    - a successful load, saved again, gives back the same file byte for
      byte (when the file has no extra section, which a save never writes).
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "nn_checkpoint.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define S_HASH 32
#define S_ERR_SIZE 512
#define S_OFF_FLAGS 12      //  docs/checkpoint-format.md, header
#define S_OFF_EXTRA 104

static nn_model_t *s_models[FUZZ_CKPT_MODELS];
static char s_tmpdir[256];

static void
s_cleanup (void)
{
    if (s_tmpdir[0])
        rmdir (s_tmpdir);
}

static void
s_setup (void)
{
    if (s_models[0])
        return;
    if (sodium_init () < 0)
        fuzz_die ("sodium_init failed");
    for (int i = 0; i < FUZZ_CKPT_MODELS; i++)
        s_models[i] = fuzz_ckpt_model_new (i);
    //  Where a loaded model is saved again: tmpfs if there is one, so the
    //  save's fsyncs cost nothing.
    const char *base = access ("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf (s_tmpdir, sizeof s_tmpdir, "%s/pl-fuzz-ckpt-XXXXXX", base);
    if (!mkdtemp (s_tmpdir))
        fuzz_die ("mkdtemp %s: %s", s_tmpdir, strerror (errno));
    atexit (s_cleanup);
}

static uint64_t
s_get64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

//  The whole of path, or NULL.
static uint8_t *
s_slurp (const char *path, size_t *size_out)
{
    FILE *f = fopen (path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (size == cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc (buf, cap);
            if (!buf)
                fuzz_die ("out of memory");
        }
        size_t n = fread (buf + size, 1, cap - size, f);
        size += n;
        if (n == 0)
            break;
    }
    fclose (f);
    *size_out = size;
    return buf;
}

static void
s_check_resave (nn_model_t *model, const uint8_t *file, size_t size)
{
    //  Loaded, so the header is whole: flags and extra are where they belong.
    bool optim = file[S_OFF_FLAGS] & 1;
    if (s_get64 (file + S_OFF_EXTRA) != 0)
        return;
    char path[512], err[S_ERR_SIZE] = "";
    snprintf (path, sizeof path, "%s/resave.ckpt", s_tmpdir);
    if (nn_checkpoint_save (path, model, optim, err, sizeof err))
        fuzz_die ("saving a loaded model failed: %s", err);
    size_t got = 0;
    uint8_t *saved = s_slurp (path, &got);
    unlink (path);
    if (!saved || got != size || memcmp (saved, file, size))
        fuzz_die ("load + save changed the file (%zu bytes in, %zu out)", size, got);
    free (saved);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    s_setup ();
    const uint8_t selector = data[0];
    nn_model_t *model = s_models[selector % FUZZ_CKPT_MODELS];
    size_t len = size - 1;
    uint8_t *file = malloc (len ? len : 1);
    if (!file)
        fuzz_die ("out of memory");
    if (len)
        memcpy (file, data + 1, len);
    if ((selector & FUZZ_CKPT_FIX_SUM) && len >= S_HASH)
        crypto_generichash (file + len - S_HASH, S_HASH, file, len - S_HASH, NULL, 0);

    int fd = memfd_create ("pl-fuzz-ckpt", MFD_CLOEXEC);
    if (fd < 0)
        fuzz_die ("memfd_create: %s", strerror (errno));
    size_t done = 0;
    while (done < len) {
        ssize_t n = write (fd, file + done, len - done);
        if (n <= 0)
            fuzz_die ("write to memfd: %s", strerror (errno));
        done += (size_t) n;
    }
    char path[64];
    snprintf (path, sizeof path, "/proc/self/fd/%d", fd);

    size_t weights = nn_model_weights_count (model);
    size_t params = nn_model_params_count (model);
    float *w0 = malloc (sizeof (float) * weights);
    float *o0 = malloc (sizeof (float) * (params ? params : 1));
    if (!w0 || !o0)
        fuzz_die ("out of memory");
    memcpy (w0, nn_model_weights (model), sizeof (float) * weights);
    memcpy (o0, nn_model_optim_state (model), sizeof (float) * params);

    char err[S_ERR_SIZE] = "";
    int rc = nn_checkpoint_load (path, model, err, sizeof err);
    close (fd);
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_checkpoint: model %d, %zu bytes: %s\n",
                 selector % FUZZ_CKPT_MODELS, len, rc ? err : "loaded");
    if (rc) {
        if (rc != -1)
            fuzz_die ("nn_checkpoint_load returned %d", rc);
        if (!memchr (err, 0, sizeof err) || err[0] == 0)
            fuzz_die ("nn_checkpoint_load failed without a message");
        if (memcmp (w0, nn_model_weights (model), sizeof (float) * weights)
            || memcmp (o0, nn_model_optim_state (model), sizeof (float) * params))
            fuzz_die ("a failed load changed the model (%s)", err);
    }
    else
        s_check_resave (model, file, len);
    free (w0);
    free (o0);
    free (file);
    return 0;
}
