/*  nn_checkpoint.c: parameter files (docs/checkpoint-format.md).

    Every integer and float is written and read byte by byte in little-endian
    order, so files move between hosts and no struct layout leaks into them.

    Saving streams through a buffer into a mkstemp file next to the target,
    hashing as it goes, then fsyncs, renames over the target and fsyncs the
    directory: a reader sees either the old file or the complete new one.

    Loading reads the whole file, checks everything a file controls (each
    length is bounds-checked before it is used) and only then copies into the
    model, so a model is never left half loaded.
*/
#include "nn_checkpoint.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "pl_le.h"

#define S_MAGIC_SIZE     8
#define S_VERSION        1u
#define S_FLAG_OPTIM     0x1u
#define S_FLAGS_KNOWN    S_FLAG_OPTIM
#define S_HASH_SIZE      32
#define S_NAME_FIELD     32
#define S_MAX_DIMS       4
#define S_MAX_FILE       ((size_t) 1 << 30)
#define S_BUF_SIZE       ((size_t) 1 << 16)
//  Longest tensor name printed in a message; longer names are cut with "...".
#define S_SHOW_NAME      64

//  Header field offsets (docs/checkpoint-format.md, "Header").
#define S_OFF_MAGIC      0
#define S_OFF_VERSION    8
#define S_OFF_FLAGS      12
#define S_OFF_SPEC_HASH  16
#define S_OFF_SPEC_NAME  48
#define S_OFF_UNIT_BEGIN 80
#define S_OFF_UNIT_END   84
#define S_OFF_PARAMS     88
#define S_OFF_WEIGHTS    96
#define S_OFF_EXTRA      104
#define S_OFF_TENSORS    112
#define S_HEADER_SIZE    116

static const uint8_t s_magic[S_MAGIC_SIZE] = { 'P', 'L', 'C', 'K', 'P', 'T', 0x00, 0x01 };

//  ---------------------------------------------------------------------
//  Buffered, hashing writer

typedef struct {
    crypto_generichash_state hash;      //  first: needs 64-byte alignment
    int fd;
    int errnum;                         //  errno of the first failed write, or 0
    size_t len;
    uint8_t buf[S_BUF_SIZE];
} s_writer_t;

static void
s_flush (s_writer_t *w)
{
    size_t done = 0;
    while (done < w->len && !w->errnum) {
        ssize_t n = write (w->fd, w->buf + done, w->len - done);
        if (n < 0) {
            if (errno != EINTR)
                w->errnum = errno;
        }
        else if (n == 0)
            w->errnum = EIO;
        else
            done += (size_t) n;
    }
    w->len = 0;
}

//  Room for at least `need` (<= S_BUF_SIZE) bytes; returns where to write.
static uint8_t *
s_reserve (s_writer_t *w, size_t need)
{
    assert (need <= S_BUF_SIZE);
    if (S_BUF_SIZE - w->len < need)
        s_flush (w);
    return w->buf + w->len;
}

//  Commit n bytes written at s_reserve's pointer, hashing them.
static void
s_commit (s_writer_t *w, size_t n)
{
    crypto_generichash_update (&w->hash, w->buf + w->len, n);
    w->len += n;
}

static void
s_put (s_writer_t *w, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        size_t chunk = n < S_BUF_SIZE ? n : S_BUF_SIZE;
        memcpy (s_reserve (w, chunk), p, chunk);
        s_commit (w, chunk);
        p += chunk, n -= chunk;
    }
}

static void
s_put_u8 (s_writer_t *w, uint8_t v)
{
    *s_reserve (w, 1) = v;
    s_commit (w, 1);
}

static void
s_put_u16 (s_writer_t *w, uint16_t v)
{
    pl_le_put_u16 (s_reserve (w, 2), v);
    s_commit (w, 2);
}

static void
s_put_u32 (s_writer_t *w, uint32_t v)
{
    pl_le_put_u32 (s_reserve (w, 4), v);
    s_commit (w, 4);
}

static void
s_put_u64 (s_writer_t *w, uint64_t v)
{
    pl_le_put_u64 (s_reserve (w, 8), v);
    s_commit (w, 8);
}

static void
s_put_floats (s_writer_t *w, const float *x, size_t count)
{
    while (count) {
        size_t chunk = count < S_BUF_SIZE / 4 ? count : S_BUF_SIZE / 4;
        uint8_t *p = s_reserve (w, chunk * 4);
        for (size_t i = 0; i < chunk; i++)
            pl_le_put_f32 (p + 4 * i, x[i]);
        s_commit (w, chunk * 4);
        x += chunk, count -= chunk;
    }
}

static void
s_write_contents (s_writer_t *w, const nn_model_t *model, bool with_optim)
{
    const nn_model_spec_t *spec = nn_model_spec (model);
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    nn_model_spec_hash (spec, spec_hash);
    uint8_t name[S_NAME_FIELD] = { 0 };
    size_t name_len = strnlen (spec->name, sizeof spec->name);
    assert (name_len < S_NAME_FIELD);   //  specs are built with snprintf
    memcpy (name, spec->name, name_len);
    int tensors = nn_model_tensors_count (model);
    assert (tensors >= 0);

    s_put (w, s_magic, S_MAGIC_SIZE);
    s_put_u32 (w, S_VERSION);
    s_put_u32 (w, with_optim ? S_FLAG_OPTIM : 0);
    s_put (w, spec_hash, NN_SPEC_HASH_SIZE);
    s_put (w, name, S_NAME_FIELD);
    s_put_u32 (w, (uint32_t) nn_model_unit_begin (model));
    s_put_u32 (w, (uint32_t) nn_model_unit_end (model));
    s_put_u64 (w, (uint64_t) nn_model_params_count (model));
    s_put_u64 (w, (uint64_t) nn_model_weights_count (model));
    s_put_u64 (w, 0);                   //  extra section: none yet
    s_put_u32 (w, (uint32_t) tensors);

    for (int t = 0; t < tensors; t++) {
        nn_tensor_info_t info;
        nn_model_tensor (model, t, &info);
        size_t len = strnlen (info.name, sizeof info.name);
        assert (info.dims_count >= 0 && info.dims_count <= S_MAX_DIMS);
        s_put_u16 (w, (uint16_t) len);
        s_put (w, info.name, len);
        s_put_u8 (w, info.trainable ? 1 : 0);
        s_put_u8 (w, (uint8_t) info.dims_count);
        for (int d = 0; d < info.dims_count; d++)
            s_put_u32 (w, (uint32_t) info.dims[d]);
        s_put_u64 (w, (uint64_t) info.offset);
        s_put_u64 (w, (uint64_t) info.count);
    }
    s_put_floats (w, nn_model_weights_const (model), nn_model_weights_count (model));
    if (with_optim)
        s_put_floats (w, nn_model_optim_state_const (model), nn_model_params_count (model));

    //  The checksum covers every byte before it, not itself.
    uint8_t sum[S_HASH_SIZE];
    crypto_generichash_final (&w->hash, sum, S_HASH_SIZE);
    memcpy (s_reserve (w, S_HASH_SIZE), sum, S_HASH_SIZE);
    w->len += S_HASH_SIZE;
    s_flush (w);
}

//  The directory holding path, as a new string ("." when there is no slash).
static char *
s_dirname (const char *path)
{
    const char *slash = strrchr (path, '/');
    if (!slash)
        return nn_strdup (".");
    size_t len = slash == path ? 1 : (size_t) (slash - path);
    char *dir = nn_malloc (len + 1);
    memcpy (dir, path, len);
    dir[len] = '\0';
    return dir;
}

//  Makes the rename itself durable. A file system that cannot fsync a
//  directory (EINVAL) has nothing more to offer, so that is not an error.
static int
s_sync_dir (const char *path, char *err, size_t err_size)
{
    char *dir = s_dirname (path);
    int rc = 0;
    int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        rc = nn_errf (err, err_size, "checkpoint: %s: cannot open directory %s to sync it: %s",
                      path, dir, strerror (errno));
    else {
        if (fsync (fd) != 0 && errno != EINVAL)
            rc = nn_errf (err, err_size, "checkpoint: %s: fsync of directory %s: %s",
                          path, dir, strerror (errno));
        close (fd);
    }
    nn_free (dir);
    return rc;
}

int
nn_checkpoint_save (const char *path, const nn_model_t *model, bool with_optim,
                    char *err, size_t err_size)
{
    assert (path);
    assert (model);
    if (sodium_init () < 0)
        return nn_errf (err, err_size, "checkpoint: %s: libsodium failed to initialise", path);

    static const char suffix[] = ".tmp.XXXXXX";
    size_t path_len = strlen (path);
    char *tmp = nn_malloc (path_len + sizeof suffix);
    memcpy (tmp, path, path_len);
    memcpy (tmp + path_len, suffix, sizeof suffix);

    int fd = mkstemp (tmp);
    if (fd < 0) {
        int rc = nn_errf (err, err_size,
                          "checkpoint: %s: cannot create temporary file %s%s: %s",
                          path, path, suffix, strerror (errno));
        nn_free (tmp);
        return rc;
    }
    s_writer_t *w = nn_alloc_aligned (sizeof *w);
    w->fd = fd;
    crypto_generichash_init (&w->hash, NULL, 0, S_HASH_SIZE);
    s_write_contents (w, model, with_optim);

    int rc = 0;
    if (w->errnum)
        rc = nn_errf (err, err_size, "checkpoint: %s: write to %s: %s", path, tmp,
                      strerror (w->errnum));
    else if (fsync (fd) != 0)
        rc = nn_errf (err, err_size, "checkpoint: %s: fsync of %s: %s", path, tmp,
                      strerror (errno));
    nn_free (w);
    if (close (fd) != 0 && rc == 0)
        rc = nn_errf (err, err_size, "checkpoint: %s: close of %s: %s", path, tmp,
                      strerror (errno));
    if (rc == 0 && rename (tmp, path) != 0)
        rc = nn_errf (err, err_size, "checkpoint: %s: cannot rename %s over it: %s",
                      path, tmp, strerror (errno));
    if (rc != 0)
        unlink (tmp);
    else
        rc = s_sync_dir (path, err, err_size);
    nn_free (tmp);
    return rc;
}

//  ---------------------------------------------------------------------
//  Loading

//  Reads all of path into *data_p (owned by the caller). Refuses anything
//  that is not a regular file or is larger than S_MAX_FILE.
static int
s_read_file (const char *path, uint8_t **data_p, size_t *size_p, char *err, size_t err_size)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nn_errf (err, err_size, "checkpoint: %s: cannot open: %s", path,
                        strerror (errno));
    struct stat st;
    if (fstat (fd, &st) != 0) {
        int rc = nn_errf (err, err_size, "checkpoint: %s: cannot stat: %s", path,
                          strerror (errno));
        close (fd);
        return rc;
    }
    if (!S_ISREG (st.st_mode)) {
        close (fd);
        return nn_errf (err, err_size, "checkpoint: %s: not a regular file", path);
    }
    if (st.st_size < 0 || (uint64_t) st.st_size > S_MAX_FILE) {
        close (fd);
        return nn_errf (err, err_size,
                        "checkpoint: %s: file is %lld bytes, larger than the %zu-byte limit",
                        path, (long long) st.st_size, S_MAX_FILE);
    }
    //  One spare byte tells a file that grew while we read it.
    size_t cap = (size_t) st.st_size + 1, got = 0;
    uint8_t *data = nn_malloc (cap);
    while (got < cap) {
        ssize_t n = read (fd, data + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = nn_errf (err, err_size, "checkpoint: %s: read error: %s", path,
                              strerror (errno));
            nn_free (data);
            close (fd);
            return rc;
        }
        if (n == 0)
            break;
        got += (size_t) n;
    }
    close (fd);
    if (got == cap) {
        nn_free (data);
        return nn_errf (err, err_size, "checkpoint: %s: file grew while being read", path);
    }
    *data_p = data;
    *size_p = got;
    return 0;
}

//  Copies at most n bytes of a name from the file into out (S_SHOW_NAME + 4
//  bytes), with anything unprintable replaced, for use in messages.
static void
s_show (char *out, const uint8_t *name, size_t n)
{
    size_t shown = n < S_SHOW_NAME ? n : S_SHOW_NAME;
    for (size_t i = 0; i < shown; i++)
        out[i] = name[i] >= 0x20 && name[i] < 0x7f ? (char) name[i] : '?';
    if (shown < n)
        memcpy (out + shown, "...", 3), shown += 3;
    out[shown] = '\0';
}

//  "32x3x3x1"; out must hold 4 * 11 bytes.
static void
s_format_shape (char *out, size_t out_size, int dims_count, const uint32_t *dims)
{
    size_t at = 0;
    out[0] = '\0';
    if (dims_count == 0)
        snprintf (out, out_size, "()");
    for (int d = 0; d < dims_count && at < out_size; d++) {
        int n = snprintf (out + at, out_size - at, d ? "x%u" : "%u", (unsigned) dims[d]);
        if (n < 0)
            break;
        at += (size_t) n;
    }
}

static void
s_hash_prefix (char *out, const uint8_t *hash)
{
    sodium_bin2hex (out, 17, hash, 8);
}

//  Is there room for n more bytes at `at` before `end`?
static bool
s_fits (size_t at, size_t end, uint64_t n)
{
    return at <= end && n <= end - at;
}

//  Checks one tensor table entry at *at against the model's tensor t and
//  advances *at past it.
static int
s_check_tensor (const char *path, const uint8_t *data, size_t *at, size_t end,
                const nn_model_t *model, int t, char *err, size_t err_size)
{
    nn_tensor_info_t info;
    nn_model_tensor (model, t, &info);
    char shown[S_SHOW_NAME + 4];
    size_t p = *at;

    if (!s_fits (p, end, 2))
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor table entry %d runs past the end of the file",
                        path, t);
    uint16_t name_len = pl_le_get_u16 (data + p);
    p += 2;
    if (!s_fits (p, end, name_len))
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor table entry %d: name length %u runs past "
                        "the end of the file", path, t, (unsigned) name_len);
    const uint8_t *name = data + p;
    p += name_len;
    if (name_len != strnlen (info.name, sizeof info.name)
        || memcmp (name, info.name, name_len) != 0) {
        s_show (shown, name, name_len);
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor table entry %d is \"%s\", model expects \"%s\"",
                        path, t, shown, info.name);
    }
    if (!s_fits (p, end, 2))
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s: entry runs past the end of the file",
                        path, info.name);
    uint8_t trainable = data[p];
    uint8_t dims_count = data[p + 1];
    p += 2;
    if (trainable > 1)
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s: trainable flag is %u, not 0 or 1",
                        path, info.name, (unsigned) trainable);
    if (dims_count > S_MAX_DIMS)
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s: %u dimensions, at most %d allowed",
                        path, info.name, (unsigned) dims_count, S_MAX_DIMS);
    if (!s_fits (p, end, 4u * dims_count + 16))
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s: entry runs past the end of the file",
                        path, info.name);
    uint32_t dims[S_MAX_DIMS], model_dims[S_MAX_DIMS];
    bool same_shape = dims_count == info.dims_count;
    for (int d = 0; d < dims_count; d++) {
        dims[d] = pl_le_get_u32 (data + p + 4 * (size_t) d);
        same_shape = same_shape && dims[d] == (uint32_t) info.dims[d];
    }
    p += 4 * (size_t) dims_count;
    for (int d = 0; d < info.dims_count; d++)
        model_dims[d] = (uint32_t) info.dims[d];
    if (!same_shape) {
        char have[48], want[48];
        s_format_shape (have, sizeof have, dims_count, dims);
        s_format_shape (want, sizeof want, info.dims_count, model_dims);
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s has shape %s, model expects %s",
                        path, info.name, have, want);
    }
    if ((bool) trainable != info.trainable)
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s is %s, model's is %s", path, info.name,
                        trainable ? "trainable" : "a buffer",
                        info.trainable ? "trainable" : "a buffer");
    uint64_t offset = pl_le_get_u64 (data + p), count = pl_le_get_u64 (data + p + 8);
    p += 16;
    if (offset != (uint64_t) info.offset || count != (uint64_t) info.count)
        return nn_errf (err, err_size,
                        "checkpoint: %s: tensor %s has %llu values at offset %llu, "
                        "model expects %zu at offset %zu", path, info.name,
                        (unsigned long long) count, (unsigned long long) offset,
                        info.count, info.offset);
    *at = p;
    return 0;
}

//  Every check of the file against the model, in the documented order.
//  On success *payload_p is the offset of the weights and *optim_p tells
//  whether the optimiser state follows them.
static int
s_check (const char *path, const uint8_t *data, size_t size, const nn_model_t *model,
         size_t *payload_p, bool *optim_p, char *err, size_t err_size)
{
    if (size < S_HEADER_SIZE + S_HASH_SIZE)
        return nn_errf (err, err_size,
                        "checkpoint: %s: truncated: %zu bytes, a checkpoint has at least %d",
                        path, size, S_HEADER_SIZE + S_HASH_SIZE);
    if (memcmp (data + S_OFF_MAGIC, s_magic, S_MAGIC_SIZE) != 0)
        return nn_errf (err, err_size, "checkpoint: %s: not a pipelearn checkpoint (bad magic)",
                        path);
    uint32_t version = pl_le_get_u32 (data + S_OFF_VERSION);
    if (version != S_VERSION)
        return nn_errf (err, err_size,
                        "checkpoint: %s: version %u not supported (this build reads %u)",
                        path, (unsigned) version, S_VERSION);

    size_t end = size - S_HASH_SIZE;
    uint8_t sum[S_HASH_SIZE];
    crypto_generichash (sum, S_HASH_SIZE, data, end, NULL, 0);
    if (sodium_memcmp (sum, data + end, S_HASH_SIZE) != 0)
        return nn_errf (err, err_size,
                        "checkpoint: %s: checksum mismatch (corrupt or truncated)", path);

    uint32_t flags = pl_le_get_u32 (data + S_OFF_FLAGS);
    if (flags & ~S_FLAGS_KNOWN)
        return nn_errf (err, err_size, "checkpoint: %s: unknown flags 0x%x (known: 0x%x)",
                        path, (unsigned) flags, S_FLAGS_KNOWN);

    const nn_model_spec_t *spec = nn_model_spec (model);
    const uint8_t *name = data + S_OFF_SPEC_NAME;
    size_t name_len = 0;
    while (name_len < S_NAME_FIELD && name[name_len])
        name_len++;
    char shown[S_SHOW_NAME + 4];
    s_show (shown, name, name_len);
    if (name_len == S_NAME_FIELD)
        return nn_errf (err, err_size,
                        "checkpoint: %s: model name \"%s\" is not NUL-terminated", path, shown);
    //  Padding is part of the format, so that every byte of a header means
    //  something and nothing can hide in it.
    for (size_t i = name_len; i < S_NAME_FIELD; i++)
        if (name[i])
            return nn_errf (err, err_size,
                            "checkpoint: %s: model name field has bytes after its NUL", path);
    if (name_len != strnlen (spec->name, sizeof spec->name)
        || memcmp (name, spec->name, name_len) != 0)
        return nn_errf (err, err_size, "checkpoint: %s: is for model %s, not %s",
                        path, shown, spec->name);
    uint8_t spec_hash[NN_SPEC_HASH_SIZE];
    nn_model_spec_hash (spec, spec_hash);
    if (sodium_memcmp (spec_hash, data + S_OFF_SPEC_HASH, NN_SPEC_HASH_SIZE) != 0) {
        char have[17], want[17];
        s_hash_prefix (have, data + S_OFF_SPEC_HASH);
        s_hash_prefix (want, spec_hash);
        return nn_errf (err, err_size,
                        "checkpoint: %s: is for model %s (spec %s...), not %s (spec %s...): "
                        "same name, different input shape, classes or layers",
                        path, shown, have, spec->name, want);
    }

    uint32_t unit_begin = pl_le_get_u32 (data + S_OFF_UNIT_BEGIN);
    uint32_t unit_end = pl_le_get_u32 (data + S_OFF_UNIT_END);
    if (unit_begin != (uint32_t) nn_model_unit_begin (model)
        || unit_end != (uint32_t) nn_model_unit_end (model))
        return nn_errf (err, err_size, "checkpoint: %s: holds units [%u,%u), model has [%d,%d)",
                        path, (unsigned) unit_begin, (unsigned) unit_end,
                        nn_model_unit_begin (model), nn_model_unit_end (model));

    uint64_t params = pl_le_get_u64 (data + S_OFF_PARAMS);
    uint64_t weights = pl_le_get_u64 (data + S_OFF_WEIGHTS);
    uint64_t extra = pl_le_get_u64 (data + S_OFF_EXTRA);
    uint32_t tensors = pl_le_get_u32 (data + S_OFF_TENSORS);
    if (params != (uint64_t) nn_model_params_count (model)
        || weights != (uint64_t) nn_model_weights_count (model))
        return nn_errf (err, err_size,
                        "checkpoint: %s: has %llu parameters and %llu weights, "
                        "model has %zu and %zu", path, (unsigned long long) params,
                        (unsigned long long) weights, nn_model_params_count (model),
                        nn_model_weights_count (model));
    if (tensors != (uint32_t) nn_model_tensors_count (model))
        return nn_errf (err, err_size, "checkpoint: %s: has %u tensors, model has %d",
                        path, (unsigned) tensors, nn_model_tensors_count (model));

    size_t at = S_HEADER_SIZE;
    for (int t = 0; t < (int) tensors; t++)
        if (s_check_tensor (path, data, &at, end, model, t, err, err_size))
            return -1;

    //  Counts equal the model's, so these products cannot overflow.
    bool optim = flags & S_FLAG_OPTIM;
    size_t payload = 4 * nn_model_weights_count (model)
                   + (optim ? 4 * nn_model_params_count (model) : 0);
    size_t rest = end - at;
    if (extra > rest)
        return nn_errf (err, err_size,
                        "checkpoint: %s: extra section of %llu bytes runs past the end "
                        "of the file", path, (unsigned long long) extra);
    if (rest - (size_t) extra != payload)
        return nn_errf (err, err_size,
                        "checkpoint: %s: file is %zu bytes, its header and tensor table "
                        "describe %zu", path, size,
                        at + payload + (size_t) extra + S_HASH_SIZE);
    *payload_p = at;
    *optim_p = optim;
    return 0;
}

int
nn_checkpoint_load (const char *path, nn_model_t *model, char *err, size_t err_size)
{
    assert (path);
    assert (model);
    if (sodium_init () < 0)
        return nn_errf (err, err_size, "checkpoint: %s: libsodium failed to initialise", path);
    uint8_t *data = NULL;
    size_t size = 0;
    if (s_read_file (path, &data, &size, err, err_size))
        return -1;
    size_t at = 0;
    bool optim = false;
    if (s_check (path, data, size, model, &at, &optim, err, err_size)) {
        nn_free (data);
        return -1;
    }
    //  Nothing below can fail: the model changes only now.
    float *w = nn_model_weights (model);
    size_t weights = nn_model_weights_count (model);
    for (size_t i = 0; i < weights; i++, at += 4)
        w[i] = pl_le_get_f32 (data + at);
    //  A file without optimiser state starts the optimiser afresh, as
    //  nn_model_init does, rather than keeping momentum that belongs to
    //  other weights.
    float *o = nn_model_optim_state (model);
    size_t params = nn_model_params_count (model);
    if (optim)
        for (size_t i = 0; i < params; i++, at += 4)
            o[i] = pl_le_get_f32 (data + at);
    else
        memset (o, 0, sizeof (float) * params);
    nn_free (data);
    return 0;
}
