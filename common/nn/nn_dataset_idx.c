/*  nn_dataset_idx.c: MNIST IDX reader (idx3 ubyte images + idx1 ubyte labels).

    zlib's gz* functions read gzip and plain files alike, so the format is
    told by content, not by the file name. Every check here is about file
    content, so failures are reported through err, never asserted. A
    header is only a claim: nothing is allocated for a payload before the
    file's size shows it can hold it (s_check_size).
*/
#include "nn_dataset_formats.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "nn_alloc.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_MAX_SIDE     4096u
#define IDX_MAX_COUNT    10000000u
#define IDX_CLASSES      10
//  First allocation for a payload; grown as data actually arrives.
#define IDX_READ_CHUNK   ((size_t) 1 << 20)
//  Deflate never expands more than 1032:1 (a run of one byte), so a gzip
//  file of n bytes holds at most 1032 n bytes of data: the bound that lets
//  a claimed size be refused before anything is allocated for it.
#define IDX_DEFLATE_MAX_RATIO 1032u

typedef struct {
    const char *path;
    gzFile gz;
    long long size;         //  bytes on disk (compressed, for gzip)
    uint32_t dims[3];
} s_idx_file_t;

static int
s_open (s_idx_file_t *f, const char *path, char *err, size_t err_size)
{
    f->path = path;
    int fd = nn_dataset_open_file (path, "idx", &f->size, err, err_size);
    if (fd < 0)
        return -1;
    errno = 0;
    f->gz = gzdopen (fd, "rb");
    if (!f->gz) {
        close (fd);
        return nn_errf (err, err_size, "idx: %s: cannot open: %s", path,
                        strerror (errno ? errno : ENOMEM));
    }
    return 0;
}

static void
s_close (s_idx_file_t *f)
{
    if (f->gz)
        gzclose (f->gz);
    f->gz = NULL;
}

//  Reads up to len bytes, looping over short reads; returns bytes read or
//  -1 with a message on a decompression or I/O error.
static long long
s_read (s_idx_file_t *f, uint8_t *buf, size_t len, char *err, size_t err_size)
{
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > (size_t) 1 << 30)
            want = (size_t) 1 << 30;
        int r = gzread (f->gz, buf + got, (unsigned) want);
        if (r < 0) {
            int errnum = 0;
            const char *msg = gzerror (f->gz, &errnum);
            return nn_errf (err, err_size, "idx: %s: read error: %s", f->path,
                            errnum == Z_ERRNO ? strerror (errno) : msg);
        }
        if (r == 0)
            break;
        got += (size_t) r;
    }
    return (long long) got;
}

static uint32_t
s_be32 (const uint8_t *p)
{
    return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16
         | (uint32_t) p[2] << 8 | (uint32_t) p[3];
}

static int
s_read_exact (s_idx_file_t *f, uint8_t *buf, size_t need, const char *what,
              char *err, size_t err_size)
{
    long long got = s_read (f, buf, need, err, err_size);
    if (got < 0)
        return -1;
    if ((size_t) got < need)
        return nn_errf (err, err_size,
                        "idx: %s: truncated %s: expected %zu bytes, got %lld",
                        f->path, what, need, got);
    return 0;
}

//  Reads magic and ndims big-endian dimensions into f->dims. The magic is
//  checked on its own first, so a wrong kind of file reports "magic" even
//  when it is too short for the expected header.
static int
s_read_header (s_idx_file_t *f, uint32_t magic, int ndims,
               char *err, size_t err_size)
{
    uint8_t buf[12];
    if (s_read_exact (f, buf, 4, "header", err, err_size))
        return -1;
    uint32_t found = s_be32 (buf);
    if (found != magic)
        return nn_errf (err, err_size,
                        "idx: %s: bad magic 0x%08x, expected 0x%08x (%s)", f->path,
                        found, magic, ndims == 3 ? "idx3 ubyte images"
                                                 : "idx1 ubyte labels");
    if (s_read_exact (f, buf, 4 * (size_t) ndims, "header", err, err_size))
        return -1;
    for (int i = 0; i < ndims; i++)
        f->dims[i] = s_be32 (buf + 4 * i);
    return 0;
}

//  Rejects empty and absurd shapes before anything is allocated for them.
static int
s_check_dims (const s_idx_file_t *f, int ndims, char *err, size_t err_size)
{
    if (f->dims[0] == 0)
        return nn_errf (err, err_size, "idx: %s: zero samples in header", f->path);
    if (f->dims[0] > IDX_MAX_COUNT)
        return nn_errf (err, err_size, "idx: %s: absurd count %u (max %u)",
                        f->path, f->dims[0], IDX_MAX_COUNT);
    for (int i = 1; i < ndims; i++) {
        if (f->dims[i] == 0 || f->dims[i] > IDX_MAX_SIDE)
            return nn_errf (err, err_size,
                            "idx: %s: bad image dimensions %ux%u (each must be 1..%u)",
                            f->path, f->dims[1], f->dims[2], IDX_MAX_SIDE);
    }
    return 0;
}

//  Reads exactly need bytes. The buffer grows with the data that arrives,
//  so a short file whose header claims a huge payload fails as truncated
//  instead of allocating the claimed size first.
static uint8_t *
s_read_payload (s_idx_file_t *f, size_t need, const char *what,
                char *err, size_t err_size)
{
    size_t cap = need < IDX_READ_CHUNK ? need : IDX_READ_CHUNK;
    uint8_t *buf = nn_malloc (cap);
    size_t got = 0;
    while (got < need) {
        if (got == cap) {
            cap = cap > need / 2 ? need : cap * 2;
            buf = nn_realloc (buf, cap);
        }
        long long r = s_read (f, buf + got, cap - got, err, err_size);
        if (r < 0) {
            nn_free (buf);
            return NULL;
        }
        got += (size_t) r;
        if (got < cap)
            break;
    }
    if (got < need) {
        nn_errf (err, err_size,
                 "idx: %s: truncated: expected %zu bytes of %s, got %zu",
                 f->path, need, what, got);
        nn_free (buf);
        return NULL;
    }
    return buf;
}

//  Refuses a payload of need bytes (after a header of header bytes) that the
//  file cannot hold, before anything is allocated for it. Plain files must
//  hold it byte for byte; gzip files within deflate's maximum ratio. Call
//  after the header was read (gzdirect knows the format by then).
static int
s_check_size (s_idx_file_t *f, size_t header, size_t need, const char *what,
              char *err, size_t err_size)
{
    long long payload = f->size - (long long) header;
    if (payload < 0)
        payload = 0;
    if (gzdirect (f->gz)) {
        if ((unsigned long long) payload < need)
            return nn_errf (err, err_size,
                            "idx: %s: truncated: expected %zu bytes of %s, got %lld",
                            f->path, need, what, payload);
    }
    else
    if ((unsigned long long) f->size * IDX_DEFLATE_MAX_RATIO < need)
        return nn_errf (err, err_size,
                        "idx: %s: truncated: expected %zu bytes of %s, more than a gzip "
                        "file of %lld bytes can hold", f->path, need, what, f->size);
    return 0;
}

static int
s_check_labels (const uint8_t *labels, int count, const char *path,
                char *err, size_t err_size)
{
    for (int i = 0; i < count; i++) {
        if (labels[i] >= IDX_CLASSES)
            return nn_errf (err, err_size,
                            "idx: %s: label %d at index %d out of range (classes %d)",
                            path, labels[i], i, IDX_CLASSES);
    }
    return 0;
}

//  Opens both files and validates their headers against each other.
static int
s_open_pair (s_idx_file_t *img, s_idx_file_t *lbl, const char *images_path,
             const char *labels_path, char *err, size_t err_size)
{
    if (s_open (img, images_path, err, err_size)
    ||  s_read_header (img, IDX_IMAGES_MAGIC, 3, err, err_size)
    ||  s_check_dims (img, 3, err, err_size))
        return -1;
    if (s_open (lbl, labels_path, err, err_size)
    ||  s_read_header (lbl, IDX_LABELS_MAGIC, 1, err, err_size)
    ||  s_check_dims (lbl, 1, err, err_size))
        return -1;
    if (img->dims[0] != lbl->dims[0])
        return nn_errf (err, err_size,
                        "idx: count mismatch: %s has %u images, %s has %u labels",
                        images_path, img->dims[0], labels_path, lbl->dims[0]);
    return 0;
}

static nn_dataset_t *
s_dataset_new (int count, int h, int w, uint8_t *pixels, uint8_t *labels)
{
    nn_dataset_t *ds = nn_calloc (1, sizeof *ds);
    ds->count = count;
    ds->h = h;
    ds->w = w;
    ds->c = 1;
    ds->classes = IDX_CLASSES;
    ds->pixels = pixels;
    ds->labels = labels;
    //  MNIST's published values; nn_dataset_load_named overrides them for
    //  other IDX datasets. Unused channels get an identity transform.
    ds->mean[0] = 0.1307f;
    ds->std[0] = 0.3081f;
    ds->std[1] = ds->std[2] = 1.0f;
    return ds;
}

//  Where each sample goes in the selection (-1: not picked), checking the
//  picks are distinct and in range. NULL with a message.
static int *
s_positions (const int *picks, int picks_count, int count, char *err, size_t err_size)
{
    int *pos = nn_malloc (sizeof (int) * (size_t) (count > 0 ? count : 1));
    for (int i = 0; i < count; i++)
        pos[i] = -1;
    for (int k = 0; k < picks_count; k++) {
        int i = picks[k];
        if (i < 0 || i >= count || pos[i] >= 0) {
            nn_errf (err, err_size, "dataset: selection: index %d %s", i,
                     i < 0 || i >= count ? "out of range" : "picked twice");
            nn_free (pos);
            return NULL;
        }
        pos[i] = k;
    }
    return pos;
}

//  Opens both files (s_open_pair), applies limit and checks both payloads
//  hold that many images and labels: the image count; -1 with err set.
static int
s_open_checked (s_idx_file_t *img, s_idx_file_t *lbl, const char *images_path,
                const char *labels_path, int limit, char *err, size_t err_size)
{
    if (s_open_pair (img, lbl, images_path, labels_path, err, err_size))
        return -1;
    int count = (int) img->dims[0];
    if (limit > 0 && limit < count)
        count = limit;
    size_t image_bytes = (size_t) img->dims[1] * img->dims[2];
    if (s_check_size (img, 16, (size_t) count * image_bytes, "pixels", err, err_size)
    ||  s_check_size (lbl, 8, (size_t) count, "labels", err, err_size))
        return -1;
    return count;
}

nn_dataset_t *
nn_dataset_load_idx_select (const char *images_path, const char *labels_path, int limit,
                            nn_dataset_select_fn select, void *arg,
                            char *err, size_t err_size)
{
    if (!select)
        return nn_dataset_load_idx (images_path, labels_path, limit, err, err_size);
    s_idx_file_t img = { 0 }, lbl = { 0 };
    uint8_t *labels = NULL, *chunk = NULL;
    int *picks = NULL, *pos = NULL;
    nn_dataset_t *ds = NULL, *all = NULL;
    int count = s_open_checked (&img, &lbl, images_path, labels_path, limit, err, err_size);
    if (count < 0)
        goto done;
    size_t image_bytes = (size_t) img.dims[1] * img.dims[2];
    labels = s_read_payload (&lbl, (size_t) count, "labels", err, err_size);
    if (!labels || s_check_labels (labels, count, labels_path, err, err_size))
        goto done;
    all = s_dataset_new (count, (int) img.dims[1], (int) img.dims[2], NULL, labels);
    labels = NULL;
    int n = 0;
    picks = select (all, &n, arg, err, err_size);
    if (!picks || !(pos = s_positions (picks, n, count, err, err_size)))
        goto done;
    uint8_t *pixels = nn_malloc (image_bytes * (size_t) (n > 0 ? n : 1));
    uint8_t *kept = nn_malloc ((size_t) (n > 0 ? n : 1));
    ds = s_dataset_new (n, all->h, all->w, pixels, kept);
    //  Stream the images past in chunks, keeping the picked ones.
    int per_chunk = (int) (IDX_READ_CHUNK / image_bytes) + 1;
    chunk = nn_malloc (image_bytes * (size_t) per_chunk);
    for (int at = 0; at < count; at += per_chunk) {
        int m = count - at < per_chunk ? count - at : per_chunk;
        if (s_read_exact (&img, chunk, image_bytes * (size_t) m, "pixels", err, err_size)) {
            nn_dataset_destroy (&ds);
            goto done;
        }
        for (int j = 0; j < m; j++) {
            int k = pos[at + j];
            if (k >= 0) {
                memcpy (pixels + (size_t) k * image_bytes, chunk + (size_t) j * image_bytes,
                        image_bytes);
                kept[k] = all->labels[at + j];
            }
        }
    }
done:
    nn_free (chunk);
    nn_free (labels);
    nn_free (picks);
    nn_free (pos);
    nn_dataset_destroy (&all);
    s_close (&img);
    s_close (&lbl);
    return ds;
}

nn_dataset_t *
nn_dataset_load_idx (const char *images_path, const char *labels_path, int limit,
                     char *err, size_t err_size)
{
    s_idx_file_t img = { 0 }, lbl = { 0 };
    uint8_t *pixels = NULL, *labels = NULL;
    nn_dataset_t *ds = NULL;
    int count = s_open_checked (&img, &lbl, images_path, labels_path, limit, err, err_size);
    if (count < 0)
        goto done;
    size_t image_bytes = (size_t) img.dims[1] * img.dims[2];
    pixels = s_read_payload (&img, (size_t) count * image_bytes, "pixels",
                             err, err_size);
    if (!pixels)
        goto done;
    labels = s_read_payload (&lbl, (size_t) count, "labels", err, err_size);
    if (!labels || s_check_labels (labels, count, labels_path, err, err_size))
        goto done;
    ds = s_dataset_new (count, (int) img.dims[1], (int) img.dims[2], pixels, labels);
    pixels = labels = NULL;
done:
    nn_free (pixels);
    nn_free (labels);
    s_close (&img);
    s_close (&lbl);
    return ds;
}
