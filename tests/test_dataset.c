/*  test_dataset.c: dataset readers, synthetic data, sharding and batches.

    Every test writes its files into its own mkdtemp directory, because
    Criterion runs tests in parallel processes.
*/
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "nn_alloc.h"
#include "nn_dataset.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define TMP_TEMPLATE "/tmp/pl_test_dataset_XXXXXX"
#include "testdir.h"

//  ---------------------------------------------------------------------
//  Helpers


static void
s_write (const char *path, bool gz, const uint8_t *data, size_t len)
{
    if (gz) {
        gzFile f = gzopen (path, "wb");
        cr_assert_not_null (f);
        cr_assert_eq (gzwrite (f, data, (unsigned) len), (int) len);
        cr_assert_eq (gzclose (f), Z_OK);
    }
    else {
        FILE *f = fopen (path, "wb");
        cr_assert_not_null (f);
        cr_assert_eq (fwrite (data, 1, len, f), len);
        cr_assert_eq (fclose (f), 0);
    }
}

static void
s_put_be32 (uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) (v >> 24);
    p[1] = (uint8_t) (v >> 16);
    p[2] = (uint8_t) (v >> 8);
    p[3] = (uint8_t) v;
}

//  IDX file: magic, ndims dims, then payload_len bytes of payload.
static void
s_write_idx (const char *path, bool gz, uint32_t magic, const uint32_t *dims,
             int ndims, const uint8_t *payload, size_t payload_len)
{
    size_t header = 4 + 4 * (size_t) ndims;
    uint8_t *buf = malloc (header + payload_len);
    s_put_be32 (buf, magic);
    for (int i = 0; i < ndims; i++)
        s_put_be32 (buf + 4 + 4 * i, dims[i]);
    if (payload_len)
        memcpy (buf + header, payload, payload_len);
    s_write (path, gz, buf, header + payload_len);
    free (buf);
}

enum { IDX_N = 5, IDX_H = 3, IDX_W = 4 };

static uint8_t
s_idx_pixel (int i, int y, int x)
{
    return (uint8_t) ((i * 97 + y * 13 + x * 5 + 1) & 0xff);
}

static uint8_t
s_idx_label (int i)
{
    return (uint8_t) ((i * 3 + 1) % 10);
}

//  A valid pair of IDX_N images of IDX_H x IDX_W at dir/images, dir/labels.
static void
s_write_idx_pair (const char *images, const char *labels, bool gz)
{
    uint8_t pixels[IDX_N * IDX_H * IDX_W], lbl[IDX_N];
    for (int i = 0; i < IDX_N; i++) {
        lbl[i] = s_idx_label (i);
        for (int y = 0; y < IDX_H; y++)
            for (int x = 0; x < IDX_W; x++)
                pixels[(i * IDX_H + y) * IDX_W + x] = s_idx_pixel (i, y, x);
    }
    uint32_t idims[3] = { IDX_N, IDX_H, IDX_W }, ldims[1] = { IDX_N };
    s_write_idx (images, gz, 0x803, idims, 3, pixels, sizeof pixels);
    s_write_idx (labels, gz, 0x801, ldims, 1, lbl, sizeof lbl);
}

static void
s_check_idx_dataset (const nn_dataset_t *ds, int count)
{
    cr_assert_eq (ds->count, count);
    cr_assert_eq (ds->h, IDX_H);
    cr_assert_eq (ds->w, IDX_W);
    cr_assert_eq (ds->c, 1);
    cr_assert_eq (ds->classes, 10);
    for (int i = 0; i < count; i++) {
        cr_assert_eq (ds->labels[i], s_idx_label (i), "label %d", i);
        for (int y = 0; y < IDX_H; y++)
            for (int x = 0; x < IDX_W; x++)
                cr_assert_eq (ds->pixels[(i * IDX_H + y) * IDX_W + x],
                              s_idx_pixel (i, y, x), "pixel %d (%d,%d)", i, y, x);
    }
}

//  Asserts a failed load whose message names path and contains word.
static void
s_assert_error (const nn_dataset_t *ds, const char *err, const char *path,
                const char *word)
{
    cr_assert_null (ds, "expected failure (%s)", word);
    cr_assert_not_null (strstr (err, path), "message lacks path: %s", err);
    cr_assert_not_null (strstr (err, word), "message lacks '%s': %s", word, err);
}

//  ---------------------------------------------------------------------
//  IDX

static void
s_idx_round_trip (bool gz)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, gz);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_idx_dataset (ds, IDX_N);
    cr_assert_float_eq (ds->mean[0], 0.1307f, 1e-6);
    cr_assert_float_eq (ds->std[0], 0.3081f, 1e-6);
    nn_dataset_destroy (&ds);
    cr_assert_null (ds);
    s_rmtree (dir);
}

Test (idx, plain_round_trip)
{
    s_idx_round_trip (false);
}

Test (idx, gzip_round_trip)
{
    s_idx_round_trip (true);
}

Test (idx, limit_keeps_first_samples)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images.gz");
    s_path (labels, dir, "labels.gz");
    s_write_idx_pair (images, labels, true);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 2, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_idx_dataset (ds, 2);
    nn_dataset_destroy (&ds);
    ds = nn_dataset_load_idx (images, labels, 1000, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_idx_dataset (ds, IDX_N);
    nn_dataset_destroy (&ds);
    nn_dataset_destroy (&ds);       //  NULL is accepted
    s_rmtree (dir);
}

//  A selection callback for the tests: picks from a fixed list, after
//  checking that it was called before any pixel was read.
typedef struct {
    const int *picks;
    int count;
    int calls;
    int seen_count;
    bool streams;           //  IDX: called before any pixel is read
} s_pick_t;

static int *
s_pick (const nn_dataset_t *unloaded, int *count_out, void *arg, char *err, size_t err_size)
{
    s_pick_t *p = arg;
    p->calls++;
    p->seen_count = unloaded->count;
    if (p->streams)
        cr_assert_null (unloaded->pixels, "pixels read before the selection");
    cr_assert_not_null (unloaded->labels);
    if (p->count < 0) {
        snprintf (err, err_size, "no thanks");
        return NULL;
    }
    int *out = nn_malloc (sizeof (int) * (size_t) (p->count + 1));
    memcpy (out, p->picks, sizeof (int) * (size_t) p->count);
    *count_out = p->count;
    return out;
}

//  A device's shard: only the picked samples, in the picked order, equal
//  to the same samples of a full load; bad picks are refused.
static void
s_idx_select (bool gz)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, gz ? "images.gz" : "images");
    s_path (labels, dir, gz ? "labels.gz" : "labels");
    s_write_idx_pair (images, labels, gz);
    const int picks[] = { IDX_N - 1, 0, 2 };
    s_pick_t p = { .picks = picks, .count = 3, .streams = true };
    nn_dataset_t *ds = nn_dataset_load_idx_select (images, labels, 0, s_pick, &p, err,
                                                   sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (p.calls, 1);
    cr_assert_eq (p.seen_count, IDX_N);
    cr_assert_eq (ds->count, 3);
    for (int k = 0; k < 3; k++) {
        int i = picks[k];
        cr_assert_eq (ds->labels[k], s_idx_label (i), "label of pick %d", k);
        for (int y = 0; y < IDX_H; y++)
            for (int x = 0; x < IDX_W; x++)
                cr_assert_eq (ds->pixels[(k * IDX_H + y) * IDX_W + x], s_idx_pixel (i, y, x));
    }
    nn_dataset_destroy (&ds);
    //  With a limit the selection sees only the first samples.
    const int first[] = { 1 };
    p = (s_pick_t) { .picks = first, .count = 1 };
    ds = nn_dataset_load_idx_select (images, labels, 2, s_pick, &p, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (p.seen_count, 2);
    cr_assert_eq (ds->labels[0], s_idx_label (1));
    nn_dataset_destroy (&ds);
    //  Out of range, twice, or the callback's own failure: no dataset.
    const int bad_range[] = { 0, IDX_N };
    p = (s_pick_t) { .picks = bad_range, .count = 2 };
    ds = nn_dataset_load_idx_select (images, labels, 0, s_pick, &p, err, sizeof err);
    cr_assert_null (ds);
    cr_assert_not_null (strstr (err, "out of range"), "%s", err);
    const int twice[] = { 1, 1 };
    p = (s_pick_t) { .picks = twice, .count = 2 };
    ds = nn_dataset_load_idx_select (images, labels, 0, s_pick, &p, err, sizeof err);
    cr_assert_null (ds);
    cr_assert_not_null (strstr (err, "picked twice"), "%s", err);
    p = (s_pick_t) { .count = -1 };
    ds = nn_dataset_load_idx_select (images, labels, 0, s_pick, &p, err, sizeof err);
    cr_assert_null (ds);
    cr_assert_str_eq (err, "no thanks");
    s_rmtree (dir);
}

Test (idx, select_keeps_only_the_picks_plain) { s_idx_select (false); }
Test (idx, select_keeps_only_the_picks_gzip) { s_idx_select (true); }

//  Datasets without streaming (synthetic, cifar10) are cut down after the
//  load, with the same result.
Test (named, select_on_synthetic)
{
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *all = nn_dataset_load_named ("synthetic", NULL, true, 50, err, sizeof err);
    cr_assert_not_null (all, "%s", err);
    const int picks[] = { 7, 3, 49 };
    s_pick_t p = { .picks = picks, .count = 3 };
    nn_dataset_t *ds = nn_dataset_load_named_select ("synthetic", NULL, true, 50, s_pick, &p,
                                                     err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 3);
    size_t sample = (size_t) all->h * all->w * all->c;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq (ds->labels[k], all->labels[picks[k]]);
        cr_assert_eq (memcmp (ds->pixels + k * sample, all->pixels + picks[k] * sample,
                              sample), 0);
    }
    nn_dataset_destroy (&ds);
    nn_dataset_destroy (&all);
}

Test (idx, truncated_images)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    //  Header still claims IDX_N images; the payload is half an image short.
    uint8_t pixels[IDX_N * IDX_H * IDX_W] = { 0 };
    uint32_t dims[3] = { IDX_N, IDX_H, IDX_W };
    s_write_idx (images, false, 0x803, dims, 3, pixels, sizeof pixels - 6);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "truncated");
    cr_assert_not_null (strstr (err, "expected 60"), "%s", err);
    cr_assert_not_null (strstr (err, "got 54"), "%s", err);
    s_rmtree (dir);
}

Test (idx, truncated_header)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    const uint8_t short_header[6] = { 0, 0, 8, 3, 0, 0 };
    s_write (images, true, short_header, sizeof short_header);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "truncated");
    s_rmtree (dir);
}

Test (idx, cut_gzip_stream)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images.gz");
    s_path (labels, dir, "labels.gz");
    s_write_idx_pair (images, labels, true);
    struct stat st;
    cr_assert_eq (stat (images, &st), 0);
    cr_assert_eq (truncate (images, st.st_size / 2), 0);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    cr_assert_null (ds);
    cr_assert_not_null (strstr (err, images), "%s", err);
    cr_assert (strstr (err, "truncated") || strstr (err, "error"), "%s", err);
    s_rmtree (dir);
}

Test (idx, wrong_magic)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    //  Swapped arguments: a label file where images are expected.
    nn_dataset_t *ds = nn_dataset_load_idx (labels, images, 0, err, sizeof err);
    s_assert_error (ds, err, labels, "magic");
    cr_assert_not_null (strstr (err, "0x00000801"), "found value: %s", err);
    cr_assert_not_null (strstr (err, "0x00000803"), "expected value: %s", err);
    s_rmtree (dir);
}

Test (idx, label_out_of_range)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels.gz");
    s_write_idx_pair (images, labels, false);
    uint8_t lbl[IDX_N] = { 0, 1, 10, 3, 4 };
    uint32_t dims[1] = { IDX_N };
    s_write_idx (labels, true, 0x801, dims, 1, lbl, sizeof lbl);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, labels, "label 10");
    cr_assert_not_null (strstr (err, "index 2"), "%s", err);
    //  The bad label lies beyond the limit, so it is never read.
    ds = nn_dataset_load_idx (images, labels, 2, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    nn_dataset_destroy (&ds);
    s_rmtree (dir);
}

Test (idx, count_mismatch)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    uint8_t lbl[IDX_N - 1] = { 0 };
    uint32_t dims[1] = { IDX_N - 1 };
    s_write_idx (labels, false, 0x801, dims, 1, lbl, sizeof lbl);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "count mismatch");
    cr_assert_not_null (strstr (err, labels), "%s", err);
    s_rmtree (dir);
}

Test (idx, missing_file)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    char missing[4096];
    s_path (missing, dir, "no-such-labels");
    nn_dataset_t *ds = nn_dataset_load_idx (images, missing, 0, err, sizeof err);
    s_assert_error (ds, err, missing, "cannot open");
    cr_assert_not_null (strstr (err, strerror (ENOENT)), "%s", err);
    s_path (missing, dir, "no-such-images");
    ds = nn_dataset_load_idx (missing, labels, 0, err, sizeof err);
    s_assert_error (ds, err, missing, "cannot open");
    s_rmtree (dir);
}

Test (idx, absurd_dimensions)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    //  Claims 5 x 5000 x 5000; must fail on the header, not try to read.
    uint32_t dims[3] = { IDX_N, 5000, 5000 };
    s_write_idx (images, false, 0x803, dims, 3, NULL, 0);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "dimensions");
    uint32_t zero[3] = { IDX_N, 0, IDX_W };
    s_write_idx (images, false, 0x803, zero, 3, NULL, 0);
    ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "dimensions");
    uint32_t huge[3] = { 20000000, 28, 28 };
    s_write_idx (images, false, 0x803, huge, 3, NULL, 0);
    ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "absurd count");
    uint32_t none[3] = { 0, 28, 28 };
    s_write_idx (images, false, 0x803, none, 3, NULL, 0);
    ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "zero");
    s_rmtree (dir);
}

Test (idx, huge_claim_on_short_file_is_truncated)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    //  Within limits (9M x 4096 x 4096 would be ~150 TB), but the file
    //  holds 10 bytes: must report truncation without allocating the claim.
    uint32_t idims[3] = { 9000000, 4096, 4096 }, ldims[1] = { 9000000 };
    uint8_t some[10] = { 0 };
    s_write_idx (images, false, 0x803, idims, 3, some, sizeof some);
    s_write_idx (labels, false, 0x801, ldims, 1, some, sizeof some);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "truncated");
    s_rmtree (dir);
}

//  A device loads its shard through the select path, which allocated the
//  picked images at the header's size before reading any: a short image
//  file claiming 100000 images of 4096x4096 aborted allocating 1.6 TB.
//  The file's size is now compared with the claim first.
static void
s_idx_lying_header (bool gz)
{
    enum { N = 100000 };
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, gz ? "images.gz" : "images");
    s_path (labels, dir, "labels");
    uint32_t idims[3] = { N, 4096, 4096 }, ldims[1] = { N };
    uint8_t some[16] = { 0 };
    uint8_t *lbl = calloc (N, 1);
    cr_assert_not_null (lbl);
    s_write_idx (images, gz, 0x803, idims, 3, some, sizeof some);
    s_write_idx (labels, false, 0x801, ldims, 1, lbl, N);
    free (lbl);
    int *all = malloc (sizeof (int) * N);
    cr_assert_not_null (all);
    for (int i = 0; i < N; i++)
        all[i] = i;
    s_pick_t p = { .picks = all, .count = N };
    nn_dataset_t *ds = nn_dataset_load_idx_select (images, labels, 0, s_pick, &p, err,
                                                   sizeof err);
    s_assert_error (ds, err, images, "truncated");
    cr_assert_eq (p.calls, 0, "the selection ran before the size was checked");
    //  The whole-file loader says the same.
    ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "truncated");
    //  A limit that the file can hold loads: the claim beyond it is not read.
    uint32_t small[3] = { N, 2, 2 };
    s_write_idx (images, gz, 0x803, small, 3, some, sizeof some);
    p = (s_pick_t) { .picks = all, .count = 4 };
    ds = nn_dataset_load_idx_select (images, labels, 4, s_pick, &p, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 4);
    nn_dataset_destroy (&ds);
    free (all);
    s_rmtree (dir);
}

Test (idx, lying_header_refused_before_allocating_plain) { s_idx_lying_header (false); }
Test (idx, lying_header_refused_before_allocating_gzip) { s_idx_lying_header (true); }

//  A FIFO in place of a dataset file blocked the load in gzopen for ever
//  (no writer comes); a directory or device is no dataset either.
Test (idx, non_regular_file_refused, .timeout = 20)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "images");
    s_path (labels, dir, "labels");
    s_write_idx_pair (images, labels, false);
    unlink (images);
    cr_assert_eq (mkfifo (images, 0600), 0);
    nn_dataset_t *ds = nn_dataset_load_idx (images, labels, 0, err, sizeof err);
    s_assert_error (ds, err, images, "not a regular file");
    ds = nn_dataset_load_idx (dir, labels, 0, err, sizeof err);
    s_assert_error (ds, err, dir, "not a regular file");
    s_rmtree (dir);
}

//  Generated data has no file to bound it: a huge count is an error, not
//  an abort in the allocator.
Test (named, synthetic_count_is_bounded)
{
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *ds = nn_dataset_load_named ("synthetic", NULL, true, 2147483647,
                                              err, sizeof err);
    cr_assert_null (ds);
    cr_assert_not_null (strstr (err, "synthetic: 2147483647 samples asked for, at most"),
                        "%s", err);
}

//  ---------------------------------------------------------------------
//  CIFAR-10

enum { CIFAR_REC = 3073 };

static uint8_t
s_cifar_value (int r, int ch, int p)
{
    return (uint8_t) ((r * 7 + ch * 50 + p * 3) & 0xff);
}

//  Records first..first+n-1 with label (r + 1) % 10.
static void
s_write_cifar (const char *path, int first, int n, size_t cut)
{
    uint8_t *buf = malloc ((size_t) n * CIFAR_REC);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = buf + (size_t) r * CIFAR_REC;
        rec[0] = (uint8_t) ((first + r + 1) % 10);
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < 1024; p++)
                rec[1 + ch * 1024 + p] = s_cifar_value (first + r, ch, p);
    }
    s_write (path, false, buf, (size_t) n * CIFAR_REC - cut);
    free (buf);
}

Test (cifar, round_trip_hwc)
{
    char dir[64], a[4096], b[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (a, dir, "data_batch_1.bin");
    s_path (b, dir, "data_batch_2.bin");
    s_write_cifar (a, 0, 2, 0);
    s_write_cifar (b, 2, 1, 0);
    const char *paths[2] = { a, b };
    nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 2, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 3);
    cr_assert_eq (ds->h, 32);
    cr_assert_eq (ds->w, 32);
    cr_assert_eq (ds->c, 3);
    cr_assert_eq (ds->classes, 10);
    cr_assert_float_eq (ds->mean[1], 0.4822f, 1e-6);
    cr_assert_float_eq (ds->std[2], 0.2010f, 1e-6);
    //  Record 2, row 5, column 7, green: planar offset 1 + 1024 + 5*32 + 7.
    cr_assert_eq (ds->pixels[((2 * 32 + 5) * 32 + 7) * 3 + 1],
                  s_cifar_value (2, 1, 5 * 32 + 7));
    for (int r = 0; r < 3; r++) {
        cr_assert_eq (ds->labels[r], (r + 1) % 10);
        for (int p = 0; p < 1024; p++)
            for (int ch = 0; ch < 3; ch++)
                cr_assert_eq (ds->pixels[((size_t) r * 1024 + p) * 3 + ch],
                              s_cifar_value (r, ch, p));
    }
    nn_dataset_destroy (&ds);
    ds = nn_dataset_load_cifar10 (paths, 2, 2, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 2);
    cr_assert_eq (ds->labels[1], 2);
    nn_dataset_destroy (&ds);
    s_rmtree (dir);
}

Test (cifar, truncated)
{
    char dir[64], a[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (a, dir, "data_batch_1.bin");
    s_write_cifar (a, 0, 3, 100);
    const char *paths[1] = { a };
    nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 1, 0, err, sizeof err);
    s_assert_error (ds, err, a, "truncated");
    s_rmtree (dir);
}

//  The records are allocated from the files' sizes, which only a regular
//  file has: a FIFO (size 0) was reported as "empty", and a file that
//  changed between the size check and the read is caught by the read.
Test (cifar, non_regular_file_refused, .timeout = 20)
{
    char dir[64], a[4096], b[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (a, dir, "data_batch_1.bin");
    s_path (b, dir, "data_batch_2.bin");
    s_write_cifar (a, 0, 2, 0);
    cr_assert_eq (mkfifo (b, 0600), 0);
    const char *paths[2] = { a, b };
    nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 2, 0, err, sizeof err);
    s_assert_error (ds, err, b, "not a regular file");
    paths[1] = dir;
    ds = nn_dataset_load_cifar10 (paths, 2, 0, err, sizeof err);
    s_assert_error (ds, err, dir, "not a regular file");
    s_rmtree (dir);
}

Test (cifar, label_out_of_range_and_missing)
{
    char dir[64], a[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (a, dir, "test_batch.bin");
    s_write_cifar (a, 8, 3, 0);         //  labels 9, 0, 1
    FILE *f = fopen (a, "r+b");
    cr_assert_not_null (f);
    fseek (f, CIFAR_REC, SEEK_SET);
    fputc (12, f);
    fclose (f);
    const char *paths[1] = { a };
    nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 1, 0, err, sizeof err);
    s_assert_error (ds, err, a, "label 12");
    char missing[4096];
    s_path (missing, dir, "nothing.bin");
    paths[0] = missing;
    ds = nn_dataset_load_cifar10 (paths, 1, 0, err, sizeof err);
    s_assert_error (ds, err, missing, "cannot open");
    s_rmtree (dir);
}

//  ---------------------------------------------------------------------
//  Named datasets

Test (named, idx_plain_and_gz_names)
{
    char dir[64], images[4096], labels[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (images, dir, "train-images-idx3-ubyte.gz");
    s_path (labels, dir, "train-labels-idx1-ubyte");
    s_write_idx_pair (images, labels, true);
    nn_dataset_t *ds = nn_dataset_load_named ("fashion-mnist", dir, true, 0,
                                              err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_idx_dataset (ds, IDX_N);
    cr_assert_float_eq (ds->mean[0], 0.2860f, 1e-6);
    cr_assert_float_eq (ds->std[0], 0.3530f, 1e-6);
    nn_dataset_destroy (&ds);
    ds = nn_dataset_load_named ("mnist", dir, true, 3, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_idx_dataset (ds, 3);
    cr_assert_float_eq (ds->mean[0], 0.1307f, 1e-6);
    nn_dataset_destroy (&ds);
    //  No test split in dir.
    ds = nn_dataset_load_named ("mnist", dir, false, 0, err, sizeof err);
    s_assert_error (ds, err, dir, "t10k-images-idx3-ubyte");
    cr_assert_not_null (strstr (err, "not found"), "%s", err);
    s_rmtree (dir);
}

Test (named, cifar10_in_subdirectory)
{
    char dir[64], sub[4096], path[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (sub, dir, "cifar-10-batches-bin");
    cr_assert_eq (mkdir (sub, 0700), 0);
    s_path (path, sub, "test_batch.bin");
    s_write_cifar (path, 0, 3, 0);
    nn_dataset_t *ds = nn_dataset_load_named ("cifar10", dir, false, 0,
                                              err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 3);
    cr_assert_float_eq (ds->mean[0], 0.4914f, 1e-6);
    nn_dataset_destroy (&ds);
    //  Training batches are absent: the message names the first one missing.
    ds = nn_dataset_load_named ("cifar10", dir, true, 0, err, sizeof err);
    s_assert_error (ds, err, "data_batch_1.bin", "cannot open");
    s_rmtree (dir);
}

Test (named, synthetic_and_unknown)
{
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *train = nn_dataset_load_named ("synthetic", NULL, true, 0,
                                                 err, sizeof err);
    nn_dataset_t *test = nn_dataset_load_named ("synthetic", NULL, false, 0,
                                                err, sizeof err);
    cr_assert_not_null (train, "%s", err);
    cr_assert_not_null (test, "%s", err);
    cr_assert_eq (train->count, 2000);
    cr_assert_eq (test->count, 500);
    cr_assert_eq (train->h, 28);
    cr_assert_eq (train->w, 28);
    cr_assert_eq (train->c, 1);
    cr_assert_eq (train->classes, 10);
    cr_assert_neq (memcmp (train->pixels, test->pixels, 500 * 784), 0);
    nn_dataset_t *again = nn_dataset_load_named ("synthetic", NULL, false, 100,
                                                 err, sizeof err);
    cr_assert_eq (again->count, 100);
    cr_assert_eq (memcmp (again->pixels, test->pixels, 100 * 784), 0);
    nn_dataset_destroy (&train);
    nn_dataset_destroy (&test);
    nn_dataset_destroy (&again);
    nn_dataset_t *ds = nn_dataset_load_named ("imagenet", NULL, true, 0,
                                              err, sizeof err);
    cr_assert_null (ds);
    cr_assert_not_null (strstr (err, "imagenet"), "%s", err);
    cr_assert_not_null (strstr (err, "fashion-mnist"), "valid names: %s", err);
    cr_assert_not_null (strstr (err, "cifar10"), "valid names: %s", err);
}

//  ---------------------------------------------------------------------
//  Real Fashion-MNIST (Debian's dataset-fashion-mnist)

static void
s_check_fashion (bool train, int count)
{
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *ds = nn_dataset_load_named ("fashion-mnist", FASHION_DIR, train, 0,
                                              err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, count);
    cr_assert_eq (ds->h, 28);
    cr_assert_eq (ds->w, 28);
    cr_assert_eq (ds->c, 1);
    int histogram[10] = { 0 };
    for (int i = 0; i < ds->count; i++)
        histogram[ds->labels[i]]++;
    for (int k = 0; k < 10; k++)
        cr_assert_eq (histogram[k], count / 10, "class %d: %d", k, histogram[k]);
    //  The published mean is only reproduced if pixels decode correctly.
    double sum = 0.0;
    size_t n = (size_t) count * 784;
    for (size_t i = 0; i < n; i++)
        sum += ds->pixels[i];
    cr_assert_float_eq (sum / n / 255.0, 0.2860, 0.003);
    nn_dataset_destroy (&ds);
}

Test (fashion_mnist, train_split)
{
    if (access (FASHION_DIR, R_OK) != 0)
        cr_skip_test ("%s not installed", FASHION_DIR);
    s_check_fashion (true, 60000);
}

Test (fashion_mnist, test_split_and_default_dir)
{
    if (access (FASHION_DIR, R_OK) != 0)
        cr_skip_test ("%s not installed", FASHION_DIR);
    s_check_fashion (false, 10000);
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *ds = nn_dataset_load_named ("fashion-mnist", NULL, false, 7,
                                              err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 7);
    nn_dataset_destroy (&ds);
}

//  ---------------------------------------------------------------------
//  Synthetic

Test (synthetic, deterministic_per_seed)
{
    nn_dataset_t *a = nn_dataset_synthetic (300, 16, 16, 3, 10, 42);
    nn_dataset_t *b = nn_dataset_synthetic (300, 16, 16, 3, 10, 42);
    nn_dataset_t *c = nn_dataset_synthetic (300, 16, 16, 3, 10, 43);
    size_t bytes = 300 * 16 * 16 * 3;
    cr_assert_eq (memcmp (a->pixels, b->pixels, bytes), 0);
    cr_assert_eq (memcmp (a->labels, b->labels, 300), 0);
    cr_assert_neq (memcmp (a->pixels, c->pixels, bytes), 0);
    cr_assert_neq (memcmp (a->labels, c->labels, 300), 0);
    for (int i = 0; i < 300; i++)
        cr_assert_lt (a->labels[i], 10);
    for (int ch = 0; ch < 3; ch++) {
        cr_assert (a->mean[ch] > 0.1f && a->mean[ch] < 0.9f);
        cr_assert (a->std[ch] > 0.05f);
    }
    nn_dataset_destroy (&a);
    nn_dataset_destroy (&b);
    nn_dataset_destroy (&c);
}

//  A nearest-centroid classifier fitted on one seed must generalise to
//  another: the classes carry a shared, learnable pattern.
Test (synthetic, learnable_across_seeds)
{
    enum { D = 28 * 28 };
    nn_dataset_t *train = nn_dataset_synthetic (1000, 28, 28, 1, 10, 1);
    nn_dataset_t *test = nn_dataset_synthetic (300, 28, 28, 1, 10, 2);
    double *centroid = calloc (10 * D, sizeof *centroid);
    int seen[10] = { 0 };
    for (int i = 0; i < train->count; i++) {
        int k = train->labels[i];
        seen[k]++;
        for (int j = 0; j < D; j++)
            centroid[k * D + j] += train->pixels[i * D + j];
    }
    for (int k = 0; k < 10; k++) {
        cr_assert_gt (seen[k], 0);
        for (int j = 0; j < D; j++)
            centroid[k * D + j] /= seen[k];
    }
    int correct = 0;
    for (int i = 0; i < test->count; i++) {
        int best = 0;
        double best_d = INFINITY;
        for (int k = 0; k < 10; k++) {
            double d = 0.0;
            for (int j = 0; j < D; j++) {
                double e = test->pixels[i * D + j] - centroid[k * D + j];
                d += e * e;
            }
            if (d < best_d) {
                best_d = d;
                best = k;
            }
        }
        correct += best == test->labels[i];
    }
    cr_assert_gt (correct, test->count * 9 / 10, "accuracy %d/%d", correct,
                  test->count);
    free (centroid);
    nn_dataset_destroy (&train);
    nn_dataset_destroy (&test);
}

//  ---------------------------------------------------------------------
//  Shards

enum { SH_DEVICES = 4, SH_SAMPLES = 1000, SH_TOTAL = 1200 };

//  Shards of all devices; asserts they are disjoint and cover exactly the
//  first SH_SAMPLES samples. sizes and shards (owned) out.
static void
s_shards (int *sizes, int **shards, const nn_dataset_t *ds, nn_partition_t kind,
          int devices, double alpha, const nn_rng_t *rng)
{
    char err[NN_ERR_SIZE] = "";
    int *owner = malloc (SH_SAMPLES * sizeof *owner);
    for (int i = 0; i < SH_SAMPLES; i++)
        owner[i] = -1;
    int total = 0;
    for (int d = 0; d < devices; d++) {
        shards[d] = nn_dataset_shard (ds, kind, devices, d, SH_SAMPLES, alpha, rng,
                                      &sizes[d], err, sizeof err);
        cr_assert_not_null (shards[d], "%s", err);
        for (int i = 0; i < sizes[d]; i++) {
            int idx = shards[d][i];
            cr_assert (idx >= 0 && idx < SH_SAMPLES, "index %d", idx);
            cr_assert_eq (owner[idx], -1, "sample %d on devices %d and %d", idx,
                          owner[idx], d);
            owner[idx] = d;
        }
        total += sizes[d];
    }
    cr_assert_eq (total, SH_SAMPLES);
    free (owner);
}

static void
s_free_shards (int **shards, int devices)
{
    for (int d = 0; d < devices; d++)
        nn_free (shards[d]);
}

Test (shard, contiguous)
{
    nn_dataset_t *ds = nn_dataset_synthetic (SH_TOTAL, 4, 4, 1, 10, 5);
    int sizes[SH_DEVICES], *shards[SH_DEVICES];
    s_shards (sizes, shards, ds, NN_PARTITION_CONTIGUOUS, SH_DEVICES, 0.0, NULL);
    for (int d = 0; d < SH_DEVICES; d++) {
        cr_assert_eq (sizes[d], SH_SAMPLES / SH_DEVICES);
        for (int i = 0; i < sizes[d]; i++)
            cr_assert_eq (shards[d][i], d * SH_SAMPLES / SH_DEVICES + i);
    }
    s_free_shards (shards, SH_DEVICES);
    //  Uneven split: 10 over 3 gives [0,3) [3,6) [6,10).
    char err[NN_ERR_SIZE] = "";
    int n = 0;
    int *last = nn_dataset_shard (ds, NN_PARTITION_CONTIGUOUS, 3, 2, 10, 0.0, NULL,
                                  &n, err, sizeof err);
    cr_assert_eq (n, 4);
    cr_assert_eq (last[0], 6);
    nn_free (last);
    nn_dataset_destroy (&ds);
}

Test (shard, iid)
{
    nn_dataset_t *ds = nn_dataset_synthetic (SH_TOTAL, 4, 4, 1, 10, 5);
    nn_rng_t rng;
    nn_rng_seed (&rng, 99);
    nn_rng_t before = rng;
    int sizes[SH_DEVICES], *shards[SH_DEVICES];
    s_shards (sizes, shards, ds, NN_PARTITION_IID, SH_DEVICES, 0.0, &rng);
    cr_assert_eq (memcmp (&rng, &before, sizeof rng), 0, "rng is not advanced");
    int in_order = 0;
    for (int d = 0; d < SH_DEVICES; d++) {
        cr_assert_eq (sizes[d], SH_SAMPLES / SH_DEVICES);
        for (int i = 0; i < sizes[d]; i++)
            in_order += shards[d][i] == d * SH_SAMPLES / SH_DEVICES + i;
    }
    cr_assert_lt (in_order, SH_SAMPLES / 10, "shards look contiguous");
    //  Another seed gives another split.
    nn_rng_t other;
    nn_rng_seed (&other, 100);
    char err[NN_ERR_SIZE] = "";
    int n = 0;
    int *s0 = nn_dataset_shard (ds, NN_PARTITION_IID, SH_DEVICES, 0, SH_SAMPLES, 0.0,
                                &other, &n, err, sizeof err);
    cr_assert_neq (memcmp (s0, shards[0], (size_t) n * sizeof *s0), 0);
    nn_free (s0);
    s_free_shards (shards, SH_DEVICES);
    nn_dataset_destroy (&ds);
}

//  Largest total-variation distance between a device's label distribution
//  and the global one.
static double
s_max_label_skew (const nn_dataset_t *ds, int *const *shards, const int *sizes,
                  int devices)
{
    double global[10] = { 0 }, worst = 0.0;
    for (int i = 0; i < SH_SAMPLES; i++)
        global[ds->labels[i]] += 1.0 / SH_SAMPLES;
    for (int d = 0; d < devices; d++) {
        double local[10] = { 0 }, tv = 0.0;
        for (int i = 0; i < sizes[d]; i++)
            local[ds->labels[shards[d][i]]] += 1.0 / sizes[d];
        for (int k = 0; k < 10; k++)
            tv += fabs (local[k] - global[k]) / 2.0;
        if (tv > worst)
            worst = tv;
    }
    return worst;
}

static double
s_dirichlet_skew (double alpha, uint64_t seed)
{
    nn_dataset_t *ds = nn_dataset_synthetic (SH_TOTAL, 4, 4, 1, 10, 5);
    nn_rng_t rng;
    nn_rng_seed (&rng, seed);
    int sizes[SH_DEVICES], *shards[SH_DEVICES];
    s_shards (sizes, shards, ds, NN_PARTITION_DIRICHLET, SH_DEVICES, alpha, &rng);
    for (int d = 0; d < SH_DEVICES; d++)
        cr_assert_gt (sizes[d], 0);
    double skew = s_max_label_skew (ds, shards, sizes, SH_DEVICES);
    s_free_shards (shards, SH_DEVICES);
    nn_dataset_destroy (&ds);
    return skew;
}

Test (shard, dirichlet_small_alpha_is_skewed)
{
    double skew = s_dirichlet_skew (0.1, 7);
    cr_assert_gt (skew, 0.4, "skew %.3f", skew);
}

Test (shard, dirichlet_large_alpha_is_near_uniform)
{
    double skew = s_dirichlet_skew (1000.0, 7);
    cr_assert_lt (skew, 0.05, "skew %.3f", skew);
}

Test (shard, dirichlet_deterministic_and_no_empty_device)
{
    nn_dataset_t *ds = nn_dataset_synthetic (100, 4, 4, 1, 10, 5);
    char err[NN_ERR_SIZE] = "";
    //  alpha 0.01 puts each class on about one device, so with 16 devices
    //  and 10 classes several start empty and need the fix-up.
    for (uint64_t seed = 0; seed < 5; seed++) {
        nn_rng_t rng;
        nn_rng_seed (&rng, seed);
        int total = 0;
        for (int d = 0; d < 16; d++) {
            int n1 = 0, n2 = 0;
            int *a = nn_dataset_shard (ds, NN_PARTITION_DIRICHLET, 16, d, 0, 0.01,
                                       &rng, &n1, err, sizeof err);
            int *b = nn_dataset_shard (ds, NN_PARTITION_DIRICHLET, 16, d, 0, 0.01,
                                       &rng, &n2, err, sizeof err);
            cr_assert_not_null (a, "%s", err);
            cr_assert_gt (n1, 0, "seed %d device %d empty", (int) seed, d);
            cr_assert_eq (n1, n2);
            cr_assert_eq (memcmp (a, b, (size_t) n1 * sizeof *a), 0);
            total += n1;
            nn_free (a);
            nn_free (b);
        }
        cr_assert_eq (total, 100);
    }
    nn_dataset_destroy (&ds);
}

static void
s_assert_shard_error (const nn_dataset_t *ds, nn_partition_t kind, int devices,
                      int device, int samples, double alpha, const char *word)
{
    char err[NN_ERR_SIZE] = "";
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    int n = -1;
    int *s = nn_dataset_shard (ds, kind, devices, device, samples, alpha, &rng, &n,
                               err, sizeof err);
    cr_assert_null (s, "expected failure: %s", word);
    cr_assert_eq (n, 0);
    cr_assert_not_null (strstr (err, word), "message lacks '%s': %s", word, err);
}

Test (shard, invalid_arguments)
{
    nn_dataset_t *ds = nn_dataset_synthetic (10, 4, 4, 1, 10, 5);
    s_assert_shard_error (ds, NN_PARTITION_IID, 0, 0, 0, 0.0, "devices must be >= 1");
    s_assert_shard_error (ds, NN_PARTITION_IID, 4, 4, 0, 0.0, "device must be in [0, 4)");
    s_assert_shard_error (ds, NN_PARTITION_IID, 4, -1, 0, 0.0, "got -1");
    s_assert_shard_error (ds, NN_PARTITION_DIRICHLET, 4, 0, 0, 0.0, "alpha");
    s_assert_shard_error (ds, NN_PARTITION_DIRICHLET, 4, 0, 0, -1.0, "alpha");
    s_assert_shard_error (ds, NN_PARTITION_CONTIGUOUS, 4, 0, 3, 0.0, "3 samples");
    s_assert_shard_error (ds, NN_PARTITION_CONTIGUOUS, 11, 0, 0, 0.0, "10 samples");
    s_assert_shard_error (ds, (nn_partition_t) 9, 4, 0, 0, 0.0, "kind");
    nn_dataset_destroy (&ds);
}

//  ---------------------------------------------------------------------
//  Batches

static float
s_norm (uint8_t v, float mean, float std)
{
    return ((float) v / 255.0f - mean) / std;
}

Test (batch, normalisation_exact)
{
    nn_dataset_t *ds = nn_dataset_synthetic (4, 2, 3, 3, 10, 3);
    const float mean[3] = { 0.4914f, 0.4822f, 0.4465f };
    const float std[3] = { 0.2023f, 0.1994f, 0.2010f };
    memcpy (ds->mean, mean, sizeof mean);
    memcpy (ds->std, std, sizeof std);
    //  Sample 2, pixel (1, 2): white in red, black in green, 128 in blue.
    uint8_t *px = ds->pixels + ((2 * 2 + 1) * 3 + 2) * 3;
    px[0] = 255;
    px[1] = 0;
    px[2] = 128;
    int indices[2] = { 2, 0 };
    float x[2 * 2 * 3 * 3];
    int y[2];
    nn_dataset_batch (x, y, ds, indices, 2, NULL, NULL);
    const float *out = x + (1 * 3 + 2) * 3;
    cr_assert_float_eq (out[0], (1.0f - 0.4914f) / 0.2023f, 1e-5);
    cr_assert_float_eq (out[0], 2.51409f, 1e-4);
    cr_assert_float_eq (out[1], -0.4822f / 0.1994f, 1e-5);
    cr_assert_float_eq (out[2], (128.0f / 255.0f - 0.4465f) / 0.2010f, 1e-5);
    cr_assert_eq (y[0], ds->labels[2]);
    cr_assert_eq (y[1], ds->labels[0]);
    for (int j = 0; j < 18; j++)
        cr_assert_float_eq (x[18 + j], s_norm (ds->pixels[j], mean[j % 3], std[j % 3]),
                            1e-6);
    nn_dataset_destroy (&ds);
}

Test (batch, disabled_augmentation_is_exact)
{
    nn_dataset_t *ds = nn_dataset_synthetic (8, 8, 8, 3, 10, 3);
    int indices[8] = { 7, 6, 5, 4, 3, 2, 1, 0 };
    size_t n = 8 * 8 * 8 * 3;
    float *plain = malloc (n * sizeof *plain), *off = malloc (n * sizeof *off);
    int y1[8], y2[8];
    nn_dataset_batch (plain, y1, ds, indices, 8, NULL, NULL);
    nn_augment_t aug = { .augment = false, .crop_pad = 4, .flip = true };
    nn_dataset_batch (off, y2, ds, indices, 8, &aug, NULL);
    cr_assert_eq (memcmp (plain, off, n * sizeof *plain), 0);
    cr_assert_eq (memcmp (y1, y2, sizeof y1), 0);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 192; j++)
            cr_assert_float_eq (plain[i * 192 + j],
                                s_norm (ds->pixels[indices[i] * 192 + j],
                                        ds->mean[j % 3], ds->std[j % 3]), 1e-6);
    free (plain);
    free (off);
    nn_dataset_destroy (&ds);
}

//  Does out equal src shifted by (dy, dx), optionally mirrored, with zero
//  pixels where the shift leaves the image?
static bool
s_matches_shift (const float *out, const uint8_t *src, const nn_dataset_t *ds,
                 int dy, int dx, bool flip)
{
    int h = ds->h, w = ds->w, c = ds->c;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
            bool in = sy >= 0 && sy < h && sx >= 0 && sx < w;
            for (int ch = 0; ch < c; ch++) {
                uint8_t v = in ? src[(sy * w + sx) * c + ch] : 0;
                float want = s_norm (v, ds->mean[ch], ds->std[ch]);
                if (fabsf (out[(y * w + x) * c + ch] - want) > 1e-5f)
                    return false;
            }
        }
    return true;
}

Test (batch, augmentation_is_shifted_copy)
{
    enum { N = 48, PAD = 4 };
    nn_dataset_t *ds = nn_dataset_synthetic (N, 32, 32, 3, 10, 11);
    int indices[N];
    for (int i = 0; i < N; i++)
        indices[i] = i;
    size_t sample = 32 * 32 * 3;
    float *x = malloc (N * sample * sizeof *x);
    int y[N];
    nn_rng_t rng;
    nn_rng_seed (&rng, 2024);
    nn_augment_t aug = { .augment = true, .crop_pad = PAD, .flip = true };
    nn_dataset_batch (x, y, ds, indices, N, &aug, &rng);
    int flips = 0, shifted = 0, seen[2 * PAD + 1][2 * PAD + 1] = { { 0 } };
    for (int i = 0; i < N; i++) {
        cr_assert_eq (y[i], ds->labels[i]);
        bool found = false;
        for (int dy = -PAD; dy <= PAD && !found; dy++)
            for (int dx = -PAD; dx <= PAD && !found; dx++)
                for (int f = 0; f < 2 && !found; f++)
                    if (s_matches_shift (x + i * sample, ds->pixels + i * sample,
                                         ds, dy, dx, f)) {
                        found = true;
                        flips += f;
                        shifted += dy != 0 || dx != 0;
                        seen[dy + PAD][dx + PAD]++;
                    }
        cr_assert (found, "sample %d is no shifted copy", i);
    }
    //  With 48 draws, a working augmentation flips some, shifts most, and
    //  spreads over many of the 81 offsets.
    cr_assert (flips > 5 && flips < N - 5, "flips %d", flips);
    cr_assert_gt (shifted, N / 2);
    int distinct = 0;
    for (int a = 0; a <= 2 * PAD; a++)
        for (int b = 0; b <= 2 * PAD; b++)
            distinct += seen[a][b] > 0;
    cr_assert_gt (distinct, 15);
    //  Offsets reach both ends of [-PAD, PAD] on each axis.
    int row_lo = 0, row_hi = 0, col_lo = 0, col_hi = 0;
    for (int a = 0; a <= 2 * PAD; a++) {
        row_lo += seen[0][a];
        row_hi += seen[2 * PAD][a];
        col_lo += seen[a][0];
        col_hi += seen[a][2 * PAD];
    }
    cr_assert (row_lo && row_hi && col_lo && col_hi, "extreme offsets unused");
    free (x);
    nn_dataset_destroy (&ds);
}

//  The same rng state gives the same batch (a seed reproduces a run); the
//  stream moves on, so the next draw differs; flip off never mirrors.
Test (batch, augmentation_reproducible_for_a_seed)
{
    enum { N = 16 };
    nn_dataset_t *ds = nn_dataset_synthetic (N, 32, 32, 3, 10, 5);
    int indices[N];
    for (int i = 0; i < N; i++)
        indices[i] = i;
    size_t n = (size_t) N * 32 * 32 * 3;
    float *a = malloc (n * sizeof *a), *b = malloc (n * sizeof *b);
    int y[N];
    nn_augment_t aug = nn_dataset_augment_default ("cifar10");
    nn_rng_t r1, r2;
    nn_rng_seed (&r1, 77);
    nn_rng_seed (&r2, 77);
    nn_dataset_batch (a, y, ds, indices, N, &aug, &r1);
    nn_dataset_batch (b, y, ds, indices, N, &aug, &r2);
    cr_assert_eq (memcmp (a, b, n * sizeof *a), 0);
    nn_dataset_batch (b, y, ds, indices, N, &aug, &r2);
    cr_assert_neq (memcmp (a, b, n * sizeof *a), 0);
    //  SVHN's transform: shifted copies, never mirrored ones.
    aug = nn_dataset_augment_default ("svhn");
    nn_dataset_batch (a, y, ds, indices, N, &aug, &r1);
    for (int i = 0; i < N; i++) {
        bool found = false;
        for (int dy = -4; dy <= 4 && !found; dy++)
            for (int dx = -4; dx <= 4 && !found; dx++)
                found = s_matches_shift (a + (size_t) i * 3072, ds->pixels + i * 3072, ds,
                                         dy, dx, false);
        cr_assert (found, "sample %d is not an unmirrored shift", i);
    }
    free (a);
    free (b);
    nn_dataset_destroy (&ds);
}

//  ---------------------------------------------------------------------
//  Per-dataset transforms

Test (transform, shapes_by_name)
{
    int h, w, c;
    cr_assert_eq (nn_dataset_shape ("svhn", &h, &w, &c), 0);
    cr_assert (h == 32 && w == 32 && c == 3);
    cr_assert_eq (nn_dataset_shape ("fashion-mnist", &h, &w, &c), 0);
    cr_assert (h == 28 && w == 28 && c == 1);
    cr_assert_eq (nn_dataset_shape ("imagenet", &h, &w, &c), -1);
}

Test (transform, defaults_per_dataset)
{
    nn_augment_t a = nn_dataset_augment_default ("cifar10");
    cr_assert (a.augment && a.flip);
    cr_assert_eq (a.crop_pad, 4);
    a = nn_dataset_augment_default ("svhn");
    cr_assert (a.augment && !a.flip);
    const char *none[] = { "mnist", "fashion-mnist", "synthetic", "nothing" };
    for (int i = 0; i < 4; i++) {
        a = nn_dataset_augment_default (none[i]);
        cr_assert (!a.augment && !a.flip, "%s", none[i]);
        cr_assert_eq (a.crop_pad, 4);
    }
}

//  28x28 padded to 32x32: the image in the middle, black (0) around it,
//  which normalises to -mean/std like the black crop padding.
Test (transform, pad_centres_with_black)
{
    nn_dataset_t *ds = nn_dataset_synthetic (3, 28, 28, 1, 10, 9);
    nn_dataset_t *orig = nn_dataset_synthetic (3, 28, 28, 1, 10, 9);
    char err[NN_ERR_SIZE] = "";
    cr_assert_eq (nn_dataset_pad (ds, 32, err, sizeof err), 0, "%s", err);
    cr_assert_eq (ds->h, 32);
    cr_assert_eq (ds->w, 32);
    cr_assert_eq (ds->count, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq (ds->labels[i], orig->labels[i]);
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                bool in = y >= 2 && y < 30 && x >= 2 && x < 30;
                uint8_t want = in ? orig->pixels[(i * 28 + y - 2) * 28 + x - 2] : 0;
                cr_assert_eq (ds->pixels[(i * 32 + y) * 32 + x], want,
                              "sample %d (%d,%d)", i, y, x);
            }
    }
    int idx[1] = { 1 };
    float xb[32 * 32];
    int yb[1];
    nn_dataset_batch (xb, yb, ds, idx, 1, NULL, NULL);
    cr_assert_float_eq (xb[0], -ds->mean[0] / ds->std[0], 1e-6);
    //  Same size: unchanged; smaller or absurd: refused.
    cr_assert_eq (nn_dataset_pad (ds, 32, err, sizeof err), 0);
    cr_assert_eq (ds->h, 32);
    cr_assert_eq (nn_dataset_pad (ds, 30, err, sizeof err), -1);
    cr_assert_not_null (strstr (err, "pad_to 30"), "%s", err);
    cr_assert_eq (nn_dataset_pad (ds, 5000, err, sizeof err), -1);
    nn_dataset_destroy (&ds);
    nn_dataset_destroy (&orig);
}

//  An odd margin: 3 colour channels, 5x4 to 8x8 (top 1, left 2).
Test (transform, pad_odd_margin_and_channels)
{
    nn_dataset_t *ds = nn_dataset_synthetic (2, 5, 4, 3, 4, 1);
    nn_dataset_t *orig = nn_dataset_synthetic (2, 5, 4, 3, 4, 1);
    char err[NN_ERR_SIZE] = "";
    cr_assert_eq (nn_dataset_pad (ds, 8, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 2; i++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++)
                for (int c = 0; c < 3; c++) {
                    bool in = y >= 1 && y < 6 && x >= 2 && x < 6;
                    uint8_t want = in ? orig->pixels[((i * 5 + y - 1) * 4 + x - 2) * 3 + c]
                                      : 0;
                    cr_assert_eq (ds->pixels[((i * 8 + y) * 8 + x) * 3 + c], want);
                }
    nn_dataset_destroy (&ds);
    nn_dataset_destroy (&orig);
}

//  ---------------------------------------------------------------------
//  CIFAR-10: more malformed batches

//  Every size that is not a whole number of records fails as truncated,
//  naming the file; whole numbers load.
Test (cifar, every_cut_is_truncated)
{
    char dir[64], a[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (a, dir, "data_batch_1.bin");
    const char *paths[1] = { a };
    for (size_t cut = 0; cut < 2 * CIFAR_REC; cut += 7) {
        s_write_cifar (a, 0, 2, cut);
        nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 1, 0, err, sizeof err);
        if (cut == 0 || cut == CIFAR_REC) {
            cr_assert_not_null (ds, "cut %zu: %s", cut, err);
            cr_assert_eq (ds->count, cut ? 1 : 2);
            nn_dataset_destroy (&ds);
        }
        else
            s_assert_error (ds, err, a, "truncated");
    }
    s_write (a, false, (const uint8_t *) "", 0);
    nn_dataset_t *ds = nn_dataset_load_cifar10 (paths, 1, 0, err, sizeof err);
    s_assert_error (ds, err, a, "empty");
    s_rmtree (dir);
}

//  The five training batches in order, a limit that ends inside the third,
//  and a bad label in a later batch named with its file.
Test (named, cifar10_five_batches_in_order)
{
    char dir[64], path[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    for (int b = 0; b < 5; b++) {
        char name[32];
        snprintf (name, sizeof name, "data_batch_%d.bin", b + 1);
        s_path (path, dir, name);
        s_write_cifar (path, 2 * b, 2, 0);
    }
    nn_dataset_t *ds = nn_dataset_load_named ("cifar10", dir, true, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 10);
    for (int r = 0; r < 10; r++) {
        cr_assert_eq (ds->labels[r], (r + 1) % 10);
        cr_assert_eq (ds->pixels[(size_t) r * 3072 + 3 * 100 + 2], s_cifar_value (r, 2, 100));
    }
    nn_dataset_destroy (&ds);
    ds = nn_dataset_load_named ("cifar10", dir, true, 5, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 5);
    cr_assert_eq (ds->labels[4], 5);
    nn_dataset_destroy (&ds);
    s_path (path, dir, "data_batch_4.bin");
    FILE *f = fopen (path, "r+b");
    cr_assert_not_null (f);
    fseek (f, CIFAR_REC, SEEK_SET);
    fputc (10, f);
    fclose (f);
    ds = nn_dataset_load_named ("cifar10", dir, true, 0, err, sizeof err);
    s_assert_error (ds, err, "data_batch_4.bin", "label 10 of record 1");
    s_rmtree (dir);
}
