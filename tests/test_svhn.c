/*  test_svhn.c: the SVHN reader (nn_dataset_load_svhn over the MAT level-5
    reader) on files scipy.io.savemat writes (tests/tools/svhn_mat.py),
    compressed and not, compared pixel for pixel with numpy's arrays; and on
    those files cut short, corrupted and given lying headers: always a
    message naming the file, never a crash (run it under ASan too).
*/
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nn_alloc.h"
#include "nn_dataset.h"
#include "pl_le.h"

#define TMP_TEMPLATE "/tmp/pl_test_svhn_XXXXXX"
#include "runcmd.h"
#include "testdir.h"

//  Offsets in a plain file savemat wrote with X first, 32x32x3xN: the
//  miMATRIX tag of X, its dimension values, its real part's tag.
#define AT_X_TAG        128
#define AT_X_DIMS       160
#define AT_X_REAL_TAG   184
#define AT_X_REAL       192

//  ---------------------------------------------------------------------
//  Helpers

//  Runs tests/tools/svhn_mat.py into a new directory (dir out).
static void
s_generate (char *dir)
{
    s_mkdtemp (dir);
    const char *src = getenv ("PL_SOURCE_DIR");
    char cmd[4096], out[4096];
    snprintf (cmd, sizeof cmd, "/usr/bin/python3 %s/tests/tools/svhn_mat.py %s",
              src ? src : ".", dir);
    int rc = runcmd (cmd, out, sizeof out);
    if (rc == 77) {
        s_rmtree (dir);
        cr_skip_test ("python3-scipy is not installed (deploy/setup deps installs it)");
    }
    cr_assert_eq (rc, 0, "svhn_mat.py failed (%d): %s", rc, out);
}

static void
s_file (char *out, const char *dir, const char *name, const char *suffix)
{
    char base[256];
    snprintf (base, sizeof base, "%s%s", name, suffix);
    s_path (out, dir, base);
}

//  Loads dir/name.mat and compares it with dir/name.x and dir/name.y.
static void
s_check_matches_numpy (const char *dir, const char *name, int h, int w, int n)
{
    char mat[4096], xs[4096], ys[4096], err[NN_ERR_SIZE] = "";
    s_file (mat, dir, name, ".mat");
    s_file (xs, dir, name, ".x");
    s_file (ys, dir, name, ".y");
    nn_dataset_t *ds = nn_dataset_load_svhn (mat, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s: %s", name, err);
    size_t xlen, ylen;
    uint8_t *x = s_file_load (xs, &xlen), *y = s_file_load (ys, &ylen);
    cr_assert_eq (ds->count, n);
    cr_assert_eq (ds->h, h);
    cr_assert_eq (ds->w, w);
    cr_assert_eq (ds->c, 3);
    cr_assert_eq (ds->classes, 10);
    cr_assert_eq (xlen, (size_t) n * h * w * 3);
    cr_assert_eq (ylen, (size_t) n);
    for (size_t i = 0; i < xlen; i++)
        cr_assert_eq (ds->pixels[i], x[i], "%s: pixel byte %zu: %d, numpy %d", name, i,
                      ds->pixels[i], x[i]);
    bool zero_seen = false;
    for (int i = 0; i < n; i++) {
        cr_assert_eq (ds->labels[i], y[i], "%s: label %d", name, i);
        zero_seen |= ds->labels[i] == 0;
    }
    cr_assert (zero_seen, "label 10 must come out as the digit 0");
    cr_assert_float_eq (ds->mean[0], 0.485f, 1e-6);
    cr_assert_float_eq (ds->std[2], 0.225f, 1e-6);
    nn_free (x);
    nn_free (y);
    nn_dataset_destroy (&ds);
}

//  A load that must fail with a message naming path (and word, if given).
static void
s_expect_error (const char *path, const char *word)
{
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *ds = nn_dataset_load_svhn (path, 0, err, sizeof err);
    cr_assert_null (ds, "%s: loaded, expected an error (%s)", path, word ? word : "");
    cr_assert_not_null (strstr (err, path), "message lacks the path: %s", err);
    if (word)
        cr_assert_not_null (strstr (err, word), "message lacks '%s': %s", word, err);
}

//  Writes plain.mat with one 32-bit word at offset changed into dir/name.
static void
s_patched (char *out, const char *dir, const char *name, size_t offset, uint32_t value)
{
    char src[4096];
    s_file (src, dir, "plain", ".mat");
    size_t len;
    uint8_t *buf = s_file_load (src, &len);
    cr_assert (offset + 4 <= len);
    pl_le_put_u32 (buf + offset, value);
    s_file (out, dir, name, ".mat");
    s_file_save (out, buf, len);
    nn_free (buf);
}

//  ---------------------------------------------------------------------
//  Valid files: pixel-exact against numpy

//  Generates the files, checks name.mat against numpy, cleans up.
static void
s_generated_matches_numpy (const char *name, int h, int w, int n)
{
    char dir[64];
    s_generate (dir);
    s_check_matches_numpy (dir, name, h, w, n);
    s_rmtree (dir);
}

Test (svhn, plain_file_matches_numpy) { s_generated_matches_numpy ("plain", 32, 32, 7); }
Test (svhn, compressed_file_matches_numpy) { s_generated_matches_numpy ("zipped", 32, 32, 9); }

//  5 x 7 images: a reader that swapped rows and columns (MATLAB is
//  column-major) would get the shape or the pixels wrong. Other variables
//  (a string, a struct, a matrix) are skipped.
Test (svhn, oblong_images_and_other_variables_plain)
{
    s_generated_matches_numpy ("oblong_plain", 5, 7, 6);
}

Test (svhn, oblong_images_and_other_variables_compressed)
{
    s_generated_matches_numpy ("oblong_zipped", 5, 7, 6);
}

//  A file written on a big-endian machine ("MI"): tags, dimensions and the
//  double labels byte-swapped.
Test (svhn, big_endian_file_matches_numpy) { s_generated_matches_numpy ("bigendian", 32, 32, 5); }

//  Three uint8 labels fit in the tag itself (small data element format).
Test (svhn, labels_in_a_small_element) { s_generated_matches_numpy ("small", 32, 32, 3); }

Test (svhn, limit_keeps_the_first_samples)
{
    char dir[64], mat[4096], xs[4096], ys[4096], err[NN_ERR_SIZE] = "";
    s_generate (dir);
    for (int zipped = 0; zipped < 2; zipped++) {
        const char *name = zipped ? "zipped" : "plain";
        s_file (mat, dir, name, ".mat");
        s_file (xs, dir, name, ".x");
        s_file (ys, dir, name, ".y");
        nn_dataset_t *ds = nn_dataset_load_svhn (mat, 2, err, sizeof err);
        cr_assert_not_null (ds, "%s", err);
        size_t xlen, ylen;
        uint8_t *x = s_file_load (xs, &xlen), *y = s_file_load (ys, &ylen);
        cr_assert_eq (ds->count, 2);
        cr_assert_eq (memcmp (ds->pixels, x, 2 * 3072), 0);
        cr_assert_eq (memcmp (ds->labels, y, 2), 0);
        nn_free (x);
        nn_free (y);
        nn_dataset_destroy (&ds);
    }
    s_rmtree (dir);
}

Test (svhn, named_dataset_reads_the_shipped_names)
{
    char dir[64], src[4096], dst[4096], err[NN_ERR_SIZE] = "";
    s_generate (dir);
    size_t len;
    s_file (src, dir, "plain", ".mat");
    uint8_t *buf = s_file_load (src, &len);
    s_file (dst, dir, "train_32x32", ".mat");
    s_file_save (dst, buf, len);
    nn_free (buf);
    s_file (src, dir, "zipped", ".mat");
    buf = s_file_load (src, &len);
    s_file (dst, dir, "test_32x32", ".mat");
    s_file_save (dst, buf, len);
    nn_free (buf);
    nn_dataset_t *train = nn_dataset_load_named ("svhn", dir, true, 0, err, sizeof err);
    cr_assert_not_null (train, "%s", err);
    nn_dataset_t *test = nn_dataset_load_named ("svhn", dir, false, 0, err, sizeof err);
    cr_assert_not_null (test, "%s", err);
    cr_assert_eq (train->count, 7);
    cr_assert_eq (test->count, 9);
    nn_dataset_destroy (&train);
    nn_dataset_destroy (&test);
    s_rmtree (dir);
    //  No files: the message names the one it looked for.
    train = nn_dataset_load_named ("svhn", dir, true, 0, err, sizeof err);
    cr_assert_null (train);
    cr_assert_not_null (strstr (err, "train_32x32.mat"), "%s", err);
}

//  ---------------------------------------------------------------------
//  Malformed files scipy writes

Test (svhn, wrong_contents_are_named)
{
    char dir[64], path[4096];
    s_generate (dir);
    static const struct {
        const char *name, *word;
    } cases[] = {
        { "label_zero", "y(3) = 0 out of range" },
        { "label_eleven", "y(4) = 11 out of range" },
        { "label_fraction", "out of range" },
        { "x_double", "X is a double array" },
        { "y_int16", "y is a int16 array" },
        { "y_matrix", "y has dimensions 2 x 4" },
        { "x_three_dims", "X has 3 dimensions" },
        { "missing_x", "no variable X" },
        { "missing_y", "no variable y" },
        { "count_mismatch", "X holds 4 images, y 3 labels" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int zipped = 0; zipped < 2; zipped++) {
            char name[128];
            snprintf (name, sizeof name, "%s_%s", cases[i].name, zipped ? "zipped" : "plain");
            s_file (path, dir, name, ".mat");
            s_expect_error (path, cases[i].word);
        }
    s_rmtree (dir);
}

//  ---------------------------------------------------------------------
//  Cut short, corrupted, lying

//  Every prefix of a small file, plain and compressed, fails cleanly.
Test (svhn, every_truncation_is_an_error, .timeout = 120)
{
    char dir[64], src[4096], cut[4096];
    s_generate (dir);
    s_file (cut, dir, "cut", ".mat");
    const char *names[] = { "oblong_plain", "oblong_zipped" };
    for (int k = 0; k < 2; k++) {
        s_file (src, dir, names[k], ".mat");
        size_t len;
        uint8_t *buf = s_file_load (src, &len);
        for (size_t n = 0; n < len; n++) {
            s_file_save (cut, buf, n);
            s_expect_error (cut, NULL);
        }
        nn_free (buf);
    }
    s_rmtree (dir);
}

//  Every byte of a small file overwritten, one at a time, with 0xff and
//  with 0x00: loads or fails with a message, never crashes. Labels decide
//  which (a 0xff byte inside X is still an image).
Test (svhn, corrupted_bytes_never_crash, .timeout = 120)
{
    char dir[64], src[4096], bad[4096], err[NN_ERR_SIZE];
    s_generate (dir);
    s_file (bad, dir, "bad", ".mat");
    const char *names[] = { "oblong_plain", "oblong_zipped" };
    for (int k = 0; k < 2; k++) {
        s_file (src, dir, names[k], ".mat");
        size_t len;
        uint8_t *buf = s_file_load (src, &len);
        for (size_t at = 0; at < len; at++)
            for (int v = 0; v < 2; v++) {
                uint8_t keep = buf[at];
                buf[at] = v ? 0xff : 0x00;
                s_file_save (bad, buf, len);
                buf[at] = keep;
                err[0] = 0;
                nn_dataset_t *ds = nn_dataset_load_svhn (bad, 0, err, sizeof err);
                if (ds) {
                    cr_assert (ds->count >= 1 && ds->h >= 1 && ds->w >= 1);
                    nn_dataset_destroy (&ds);
                }
                else
                    cr_assert_not_null (strstr (err, bad), "byte %zu: %s", at, err);
            }
        nn_free (buf);
    }
    s_rmtree (dir);
}

Test (svhn, lying_headers_are_refused, .timeout = 60)
{
    char dir[64], path[4096];
    s_generate (dir);
    size_t len;
    char src[4096];
    s_file (src, dir, "plain", ".mat");
    uint8_t *buf = s_file_load (src, &len);
    //  The layout the offsets assume: X first, 32x32x3x7 uint8.
    cr_assert_eq (pl_le_get_u32 (buf + AT_X_TAG), 14u);
    cr_assert_eq (pl_le_get_u32 (buf + AT_X_DIMS + 12), 7u);
    cr_assert_eq (pl_le_get_u32 (buf + AT_X_REAL_TAG), 2u);
    cr_assert_eq (pl_le_get_u32 (buf + AT_X_REAL_TAG + 4), 7u * 3072u);
    nn_free (buf);
    static const struct {
        const char *name;
        size_t offset;
        uint32_t value;
        const char *word;
    } lies[] = {
        //  A variable larger than the file.
        { "huge_matrix", AT_X_TAG + 4, 0xfffffff0u, "claims 4294967280 bytes" },
        //  Dimensions whose product overflows or exceeds the variable.
        { "dims_overflow", AT_X_DIMS + 12, 0x7fffffffu, "dimensions hold more elements" },
        { "dims_negative", AT_X_DIMS + 4, 0xffffffffu, "negative dimension" },
        //  One image more than the variable holds, one fewer than the real part.
        { "dims_more", AT_X_DIMS + 12, 8u, "dimensions hold more elements" },
        { "dims_fewer", AT_X_DIMS + 12, 6u, "dimensions give 18432 elements" },
        //  A real part longer than its variable.
        { "real_lie", AT_X_REAL_TAG + 4, 0x7ffffff0u, "dimensions give" },
        //  Wrong class in the array flags (double), with uint8 data.
        { "class_lie", AT_X_TAG + 16, 6u, "X is a double array" },
        //  Version and endian marks.
        { "v73", 124, 0x4d490200u, "v7.3 (HDF5)" },
        { "no_mark", 124, 0x00000100u, "not a MATLAB level-5 MAT file" },
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        s_patched (path, dir, lies[i].name, lies[i].offset, lies[i].value);
        s_expect_error (path, lies[i].word);
    }
    s_rmtree (dir);
}

//  An miCOMPRESSED element wrapping X's miMATRIX (taken from plain.mat)
//  whose tag or dimensions lie: refused before allocating what it claims
//  when deflate could not produce it, and as "ends inside" when it could.
static void
s_write_compressed (const char *path, const uint8_t *file, size_t len, size_t x_end,
                    uint32_t inner_nbytes, uint32_t images)
{
    size_t raw_len = x_end - AT_X_TAG;
    uint8_t *raw = malloc (raw_len);
    memcpy (raw, file + AT_X_TAG, raw_len);
    pl_le_put_u32 (raw + 4, inner_nbytes);
    pl_le_put_u32 (raw + (AT_X_DIMS - AT_X_TAG) + 12, images);
    pl_le_put_u32 (raw + (AT_X_REAL_TAG - AT_X_TAG) + 4, images * 3072u);
    uLongf zlen = compressBound (raw_len);
    uint8_t *out = malloc (AT_X_TAG + 8 + zlen + (len - x_end));
    memcpy (out, file, AT_X_TAG);
    cr_assert_eq (compress (out + AT_X_TAG + 8, &zlen, raw, raw_len), Z_OK);
    pl_le_put_u32 (out + AT_X_TAG, 15u);
    pl_le_put_u32 (out + AT_X_TAG + 4, (uint32_t) zlen);
    //  y follows, as in the plain file.
    memcpy (out + AT_X_TAG + 8 + zlen, file + x_end, len - x_end);
    s_file_save (path, out, AT_X_TAG + 8 + zlen + (len - x_end));
    free (out);
    free (raw);
}

Test (svhn, lying_compressed_elements_are_refused)
{
    char dir[64], src[4096], path[4096], err[NN_ERR_SIZE] = "";
    s_generate (dir);
    s_file (src, dir, "plain", ".mat");
    size_t len;
    uint8_t *buf = s_file_load (src, &len);
    size_t x_end = AT_X_TAG + 8 + pl_le_get_u32 (buf + AT_X_TAG + 4);
    uint32_t x_nbytes = pl_le_get_u32 (buf + AT_X_TAG + 4);
    s_file (path, dir, "wrapped", ".mat");
    //  Honest: the wrapper alone changes nothing.
    s_write_compressed (path, buf, len, x_end, x_nbytes, 7);
    nn_dataset_t *ds = nn_dataset_load_svhn (path, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_assert_eq (ds->count, 7);
    nn_dataset_destroy (&ds);
    //  Claims 4 GB from a few hundred compressed bytes.
    s_write_compressed (path, buf, len, x_end, 0xfffffff0u, 7);
    s_expect_error (path, "more than");
    //  Claims 70000 images: more than the claimed matrix and the stream.
    s_write_compressed (path, buf, len, x_end, x_nbytes, 70000);
    s_expect_error (path, "dimensions hold more elements");
    //  Claims 9 images in a matrix that says it is large enough: the
    //  stream runs out inside the real part.
    s_write_compressed (path, buf, len, x_end, x_nbytes + 2 * 3072, 9);
    s_expect_error (path, "ends inside real part");
    nn_free (buf);
    s_rmtree (dir);
}

Test (svhn, not_a_mat_file)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "short.mat");
    s_file_save (path, (const uint8_t *) "MATLAB", 6);
    s_expect_error (path, "shorter than the 128-byte level-5 header");
    s_path (path, dir, "missing.mat");
    s_expect_error (path, "cannot open");
    s_expect_error (dir, "not a regular file");
    s_rmtree (dir);
}
