/*  test_checkpoint.c: checkpoint files round-trip bit-exactly, and every
    file that does not belong to the model (other model, other units,
    corrupt, truncated, hostile) is refused with a clear message and leaves
    the model unchanged.

    Hostile files get their checksum recomputed so that the structural check
    under test is what fires, not the checksum. Offsets below are those of
    docs/checkpoint-format.md.

    Every test works in its own mkdtemp directory, because Criterion runs
    tests in parallel processes.
*/
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_model.h"

#define TMP_TEMPLATE "/tmp/pl_test_checkpoint_XXXXXX"
#include "testdir.h"
#define HEADER_SIZE 116
#define SUM_SIZE 32
#define OFF_MAGIC 0
#define OFF_VERSION 8
#define OFF_FLAGS 12
#define OFF_SPEC_NAME 48
#define OFF_WEIGHTS 96
#define OFF_EXTRA 104
#define OFF_TENSORS 112

//  ---------------------------------------------------------------------
//  Helpers

//  Recompute the trailing BLAKE2b-256 over everything before it.
static void
s_fix_checksum (uint8_t *data, size_t size)
{
    cr_assert (sodium_init () >= 0);
    cr_assert (size >= SUM_SIZE);
    crypto_generichash (data + size - SUM_SIZE, SUM_SIZE, data, size - SUM_SIZE, NULL, 0);
}

static uint32_t
s_get32 (const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
         | (uint32_t) p[3] << 24;
}

static void
s_put16 (uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
}

static void
s_put32 (uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static void
s_put64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

//  A VGG5 (28x28x1, 10 classes) part with every weight and optimiser value
//  distinct from a fresh model's, including floats that only survive a
//  bit-exact round trip (NaN payload, -0, denormal, infinity).
static nn_model_t *
s_model (bool batchnorm, int begin, int end, uint64_t seed)
{
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 10, batchnorm);
    char err[NN_ERR_SIZE];
    nn_model_t *m = nn_model_new (&spec, begin, end, 1, err, sizeof err);
    cr_assert_not_null (m, "%s", err);
    if (seed) {
        nn_rng_t rng;
        nn_rng_seed (&rng, seed);
        nn_model_init (m, &rng);
        float *w = nn_model_weights (m);
        size_t wc = nn_model_weights_count (m);
        //  Buffers (BN running statistics) too, so they are seen to travel.
        for (size_t i = nn_model_params_count (m); i < wc; i++)
            w[i] = nn_rng_uniform (&rng) + 0.5f;
        uint32_t specials[] = { 0x7fc01234u, 0x80000000u, 0x00000001u, 0x7f800000u };
        for (size_t i = 0; i < 4 && i < wc; i++)
            memcpy (&w[i], &specials[i], sizeof (float));
        float *o = nn_model_optim_state (m);
        for (size_t i = 0; i < nn_model_params_count (m); i++)
            o[i] = nn_rng_uniform (&rng) - 0.5f;
    }
    return m;
}

typedef struct {
    float *weights, *optim;
} s_snapshot_t;

static s_snapshot_t
s_snapshot (nn_model_t *m)
{
    s_snapshot_t s;
    size_t wc = nn_model_weights_count (m), pc = nn_model_params_count (m);
    s.weights = nn_malloc (sizeof (float) * wc);
    s.optim = nn_malloc (sizeof (float) * pc);
    memcpy (s.weights, nn_model_weights (m), sizeof (float) * wc);
    memcpy (s.optim, nn_model_optim_state (m), sizeof (float) * pc);
    return s;
}

static void
s_assert_unchanged (nn_model_t *m, const s_snapshot_t *s)
{
    cr_assert_eq (memcmp (s->weights, nn_model_weights (m),
                          sizeof (float) * nn_model_weights_count (m)), 0,
                  "weights changed by a failed load");
    cr_assert_eq (memcmp (s->optim, nn_model_optim_state (m),
                          sizeof (float) * nn_model_params_count (m)), 0,
                  "optimiser state changed by a failed load");
}

static void
s_snapshot_free (s_snapshot_t *s)
{
    nn_free (s->weights);
    nn_free (s->optim);
}

static void
s_save (const char *path, const nn_model_t *m, bool with_optim)
{
    char err[NN_ERR_SIZE];
    int rc = nn_checkpoint_save (path, m, with_optim, err, sizeof err);
    cr_assert_eq (rc, 0, "save: %s", err);
}

//  Load must fail, say `expect`, and leave m as it was.
static void
s_expect_fail (const char *path, nn_model_t *m, const char *expect)
{
    s_snapshot_t snap = s_snapshot (m);
    char err[NN_ERR_SIZE] = "";
    int rc = nn_checkpoint_load (path, m, err, sizeof err);
    cr_assert_eq (rc, -1, "load of a bad file succeeded (expected \"%s\")", expect);
    if (expect)
        cr_assert_not_null (strstr (err, expect), "message \"%s\" lacks \"%s\"", err, expect);
    cr_assert_not_null (strstr (err, path), "message \"%s\" does not name the file", err);
    s_assert_unchanged (m, &snap);
    s_snapshot_free (&snap);
}

//  Write data (after fixing its checksum if asked) and expect load to fail.
static void
s_expect_fail_bytes (const char *path, uint8_t *data, size_t size, bool fix,
                     nn_model_t *m, const char *expect)
{
    if (fix)
        s_fix_checksum (data, size);
    s_file_save (path, data, size);
    s_expect_fail (path, m, expect);
}

//  Bytes of header plus tensor table, from the model's tensor list.
static size_t
s_table_end (const nn_model_t *m)
{
    size_t at = HEADER_SIZE;
    for (int t = 0; t < nn_model_tensors_count (m); t++) {
        nn_tensor_info_t info;
        nn_model_tensor (m, t, &info);
        at += 20 + strlen (info.name) + 4 * (size_t) info.dims_count;
    }
    return at;
}

static bool
s_same_slabs (nn_model_t *a, nn_model_t *b, bool optim)
{
    if (nn_model_weights_count (a) != nn_model_weights_count (b))
        return false;
    if (memcmp (nn_model_weights (a), nn_model_weights (b),
                sizeof (float) * nn_model_weights_count (a)))
        return false;
    return !optim || memcmp (nn_model_optim_state (a), nn_model_optim_state (b),
                             sizeof (float) * nn_model_params_count (a)) == 0;
}

//  ---------------------------------------------------------------------
//  Round trips

static void
s_round_trip (int begin, int end, bool with_optim)
{
    char dir[64], path[4096], err[NN_ERR_SIZE];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *src = s_model (true, begin, end, 42);
    s_save (path, src, with_optim);

    nn_model_t *dst = s_model (true, begin, end, 0);
    //  Optimiser state the load must replace (or clear, without it).
    float *o = nn_model_optim_state (dst);
    for (size_t i = 0; i < nn_model_params_count (dst); i++)
        o[i] = 7.0f;
    cr_assert (!s_same_slabs (src, dst, false), "test needs differing weights");
    int rc = nn_checkpoint_load (path, dst, err, sizeof err);
    cr_assert_eq (rc, 0, "load: %s", err);
    cr_assert (s_same_slabs (src, dst, with_optim), "weights not bit-identical after load");
    if (!with_optim)
        for (size_t i = 0; i < nn_model_params_count (dst); i++)
            cr_assert_eq (o[i], 0.0f, "optimiser state not reset at %zu", i);

    //  The file has exactly the documented size.
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    size_t expect = s_table_end (src) + 4 * nn_model_weights_count (src)
                  + (with_optim ? 4 * nn_model_params_count (src) : 0) + SUM_SIZE;
    cr_assert_eq (size, expect, "file is %zu bytes, format says %zu", size, expect);
    cr_assert_eq (data[OFF_FLAGS] & 1, with_optim ? 1 : 0);
    nn_free (data);

    nn_model_destroy (&src);
    nn_model_destroy (&dst);
    s_rmtree (dir);
}

Test (checkpoint, round_trip_full_with_optim)
{
    s_round_trip (0, 5, true);
}

Test (checkpoint, round_trip_full_without_optim)
{
    s_round_trip (0, 5, false);
}

Test (checkpoint, round_trip_parts)
{
    s_round_trip (0, 2, true);
    s_round_trip (2, 5, true);
}

Test (checkpoint, save_overwrites_and_leaves_no_temporary_files)
{
    char dir[64], path[4096], err[NN_ERR_SIZE];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *a = s_model (true, 0, 5, 1);
    nn_model_t *b = s_model (true, 0, 5, 2);
    s_save (path, a, false);
    s_save (path, b, true);

    DIR *d = opendir (dir);
    cr_assert_not_null (d);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir (d)) != NULL) {
        if (strcmp (e->d_name, ".") == 0 || strcmp (e->d_name, "..") == 0)
            continue;
        entries++;
        cr_assert_str_eq (e->d_name, "model.ckpt", "stray file %s after save", e->d_name);
    }
    closedir (d);
    cr_assert_eq (entries, 1);

    nn_model_t *c = s_model (true, 0, 5, 0);
    cr_assert_eq (nn_checkpoint_load (path, c, err, sizeof err), 0, "%s", err);
    cr_assert (s_same_slabs (b, c, true), "second save did not replace the first");
    nn_model_destroy (&a);
    nn_model_destroy (&b);
    nn_model_destroy (&c);
    s_rmtree (dir);
}

Test (checkpoint, save_into_missing_directory_fails)
{
    char dir[64], path[4096], err[NN_ERR_SIZE] = "";
    s_mkdtemp (dir);
    s_path (path, dir, "no/such/dir/model.ckpt");
    nn_model_t *m = s_model (true, 0, 2, 1);
    int rc = nn_checkpoint_save (path, m, true, err, sizeof err);
    cr_assert_eq (rc, -1);
    cr_assert_not_null (strstr (err, path), "message \"%s\" does not name the file", err);
    cr_assert_not_null (strstr (err, strerror (ENOENT)), "message \"%s\" lacks the cause", err);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

//  A reader skips an extra section it does not know (format: extra_len).
Test (checkpoint, extra_section_is_skipped)
{
    char dir[64], path[4096], err[NN_ERR_SIZE];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *src = s_model (true, 0, 2, 3);
    s_save (path, src, true);
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    size_t extra = 24, new_size = size + extra;
    uint8_t *big = nn_malloc (new_size);
    memcpy (big, data, size - SUM_SIZE);
    memset (big + size - SUM_SIZE, 0xab, extra);
    s_put64 (big + OFF_EXTRA, extra);
    s_fix_checksum (big, new_size);
    s_file_save (path, big, new_size);

    nn_model_t *dst = s_model (true, 0, 2, 0);
    cr_assert_eq (nn_checkpoint_load (path, dst, err, sizeof err), 0, "%s", err);
    cr_assert (s_same_slabs (src, dst, true));

    //  One byte of extra section too many, or too few, is a size error.
    s_put64 (big + OFF_EXTRA, extra + 1);
    s_expect_fail_bytes (path, big, new_size, true, dst, "");
    s_put64 (big + OFF_EXTRA, extra - 1);
    s_expect_fail_bytes (path, big, new_size, true, dst, "describe");
    s_put64 (big + OFF_EXTRA, UINT64_MAX);
    s_expect_fail_bytes (path, big, new_size, true, dst, "extra section");
    nn_free (big);
    nn_free (data);
    nn_model_destroy (&src);
    nn_model_destroy (&dst);
    s_rmtree (dir);
}

//  ---------------------------------------------------------------------
//  Files for another model

Test (checkpoint, device_part_into_server_part_is_refused)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "device.ckpt");
    nn_model_t *device = s_model (true, 0, 2, 5);
    s_save (path, device, true);
    nn_model_t *server = s_model (true, 2, 5, 6);
    s_expect_fail (path, server, "holds units [0,2), model has [2,5)");
    nn_model_t *full = s_model (true, 0, 5, 6);
    s_expect_fail (path, full, "holds units [0,2), model has [0,5)");
    nn_model_destroy (&device);
    nn_model_destroy (&server);
    nn_model_destroy (&full);
    s_rmtree (dir);
}

Test (checkpoint, other_model_is_refused_naming_both)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "vgg5.ckpt");
    nn_model_t *bn = s_model (true, 0, 5, 5);
    nn_model_t *nobn = s_model (false, 0, 5, 6);
    s_save (path, bn, false);
    s_expect_fail (path, nobn, "is for model vgg5, not vgg5-nobn");
    s_save (path, nobn, false);
    s_expect_fail (path, bn, "is for model vgg5-nobn, not vgg5");
    nn_model_destroy (&bn);
    nn_model_destroy (&nobn);
    s_rmtree (dir);
}

Test (checkpoint, same_name_other_shape_is_refused)
{
    char dir[64], path[4096], err[NN_ERR_SIZE];
    s_mkdtemp (dir);
    s_path (path, dir, "vgg5.ckpt");
    nn_model_t *m = s_model (true, 0, 5, 5);
    s_save (path, m, false);
    nn_model_spec_t spec;
    nn_model_spec_vgg5 (&spec, 1, 28, 100, true);
    nn_model_t *other = nn_model_new (&spec, 0, 5, 1, err, sizeof err);
    cr_assert_not_null (other, "%s", err);
    s_expect_fail (path, other, "same name");
    nn_model_destroy (&m);
    nn_model_destroy (&other);
    s_rmtree (dir);
}

//  ---------------------------------------------------------------------
//  Damaged files

Test (checkpoint, missing_file_names_path)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "absent.ckpt");
    nn_model_t *m = s_model (true, 0, 2, 1);
    s_expect_fail (path, m, strerror (ENOENT));
    //  A directory is not a checkpoint either.
    s_expect_fail (dir, m, "not a regular file");
    nn_model_destroy (&m);
    s_rmtree (dir);
}

Test (checkpoint, flipped_weight_byte_fails_checksum)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *m = s_model (true, 0, 5, 9);
    s_save (path, m, false);
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    size_t wc = nn_model_weights_count (m);
    size_t weights_at = size - SUM_SIZE - 4 * wc;
    data[weights_at + 4 * (wc / 2) + 1] ^= 0x10;
    s_file_save (path, data, size);
    s_expect_fail (path, m, "checksum mismatch (corrupt or truncated)");

    //  A flip anywhere after the version field, the checksum included.
    nn_free (data);
    data = s_file_load (path, &size);
    data[weights_at + 4 * (wc / 2) + 1] ^= 0x10;     //  undo
    size_t spots[] = { OFF_FLAGS, OFF_SPEC_NAME + 1, HEADER_SIZE + 3, weights_at,
                       size - SUM_SIZE - 1, size - SUM_SIZE, size - 1 };
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        data[spots[i]] ^= 0x01;
        s_expect_fail_bytes (path, data, size, false, m, "checksum mismatch");
        data[spots[i]] ^= 0x01;
    }
    nn_free (data);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

Test (checkpoint, truncated_files_fail)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *m = s_model (true, 0, 5, 4);
    s_save (path, m, true);
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    for (size_t len = 0; len < HEADER_SIZE + SUM_SIZE; len++) {
        s_file_save (path, data, len);
        s_expect_fail (path, m, "truncated");
    }
    s_file_save (path, data, size - 1);
    s_expect_fail (path, m, "checksum mismatch (corrupt or truncated)");
    nn_free (data);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

//  A cut-off file with a valid checksum appended: the structure checks must
//  catch every cut through the header, the table and into the weights.
Test (checkpoint, truncated_with_valid_checksum_fails)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *m = s_model (true, 0, 2, 4);
    s_save (path, m, true);
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    size_t table_end = s_table_end (m);
    uint8_t *cut = nn_malloc (size);
    for (size_t len = HEADER_SIZE; len < table_end + 64 || len + SUM_SIZE < size;
         len += len < table_end + 64 ? 1 : 997) {
        if (len + SUM_SIZE >= size)
            break;
        memcpy (cut, data, len);
        s_expect_fail_bytes (path, cut, len + SUM_SIZE, true, m, NULL);
    }
    nn_free (cut);
    nn_free (data);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

Test (checkpoint, wrong_magic_and_version)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *m = s_model (true, 0, 2, 4);
    s_save (path, m, true);
    size_t size;
    uint8_t *data = s_file_load (path, &size);
    cr_assert_eq (memcmp (data + OFF_MAGIC, "PLCKPT\0\1", 8), 0);
    cr_assert_eq (s_get32 (data + OFF_VERSION), 1);

    data[OFF_MAGIC] = 'X';
    s_expect_fail_bytes (path, data, size, true, m, "not a pipelearn checkpoint");
    data[OFF_MAGIC] = 'P';
    s_put32 (data + OFF_VERSION, 2);
    s_expect_fail_bytes (path, data, size, true, m, "version 2 not supported");
    s_put32 (data + OFF_VERSION, 1);
    //  Any other file that happens to be long enough.
    memset (data, 'a', size);
    s_expect_fail_bytes (path, data, size, false, m, "not a pipelearn checkpoint");
    nn_free (data);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

//  ---------------------------------------------------------------------
//  Hostile files (checksum fixed up so that structure checks fire)

Test (checkpoint, hostile_headers_fail_cleanly)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    //  The first unit only: small enough that a 65535-byte name cannot fit.
    nn_model_t *m = s_model (true, 0, 1, 4);
    s_save (path, m, false);
    size_t size;
    uint8_t *orig = s_file_load (path, &size);
    cr_assert_lt (size, 65535);
    uint8_t *data = nn_malloc (size);

    //  Entry 0 is u0.l0.conv.w: name length, name, trainable, dims count, dims.
    nn_tensor_info_t t0;
    nn_model_tensor (m, 0, &t0);
    cr_assert_str_eq (t0.name, "u0.l0.conv.w");
    size_t e0 = HEADER_SIZE, name0 = e0 + 2, flags0 = name0 + strlen (t0.name);
    size_t dims0 = flags0 + 2;

    struct {
        size_t at;
        int width;          //  1, 2, 4 or 8 bytes
        uint64_t value;
        const char *expect;
    } cases[] = {
        { OFF_TENSORS, 4, UINT32_MAX, "has 4294967295 tensors, model has" },
        { OFF_WEIGHTS, 8, UINT64_MAX, "weights" },
        { OFF_WEIGHTS, 8, (uint64_t) 1 << 62, "weights" },
        { OFF_FLAGS, 4, 0x80, "unknown flags 0x80" },
        { OFF_FLAGS, 4, 1, "describe" },
        { OFF_SPEC_NAME + 20, 1, 'x', "bytes after its NUL" },
        { e0, 2, UINT16_MAX, "name length 65535 runs past the end" },
        { e0, 2, 0, "tensor table entry 0 is \"\", model expects \"u0.l0.conv.w\"" },
        { e0, 2, 13, "tensor table entry 0 is" },
        { name0, 1, 'X', "model expects \"u0.l0.conv.w\"" },
        { name0, 1, 0x01, "tensor table entry 0 is \"?0.l0" },
        { flags0, 1, 7, "trainable flag is 7" },
        { flags0, 1, 0, "is a buffer, model's is trainable" },
        { flags0 + 1, 1, 200, "200 dimensions, at most 4 allowed" },
        { flags0 + 1, 1, 3, "has shape" },
        { dims0 + 12, 4, 2, "tensor u0.l0.conv.w has shape 32x3x3x2, model expects 32x3x3x1" },
        { dims0 + 16, 8, 5, "at offset 5" },
        { dims0 + 24, 8, UINT64_MAX, "has 18446744073709551615 values" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy (data, orig, size);
        uint8_t *p = data + cases[i].at;
        if (cases[i].width == 1)
            *p = (uint8_t) cases[i].value;
        else if (cases[i].width == 2)
            s_put16 (p, (uint16_t) cases[i].value);
        else if (cases[i].width == 4)
            s_put32 (p, (uint32_t) cases[i].value);
        else
            s_put64 (p, cases[i].value);
        s_expect_fail_bytes (path, data, size, true, m, cases[i].expect);
    }

    //  A spec name without any NUL.
    memcpy (data, orig, size);
    memset (data + OFF_SPEC_NAME, 'v', 32);
    s_expect_fail_bytes (path, data, size, true, m, "not NUL-terminated");
    nn_free (data);
    nn_free (orig);
    nn_model_destroy (&m);
    s_rmtree (dir);
}

//  Random damage to the header and table, checksum fixed up: every byte
//  there is checked, so every such file must be refused without a crash
//  (run under ASan/UBSan to see the "without a crash" part).
Test (checkpoint, random_header_damage_is_refused)
{
    char dir[64], path[4096];
    s_mkdtemp (dir);
    s_path (path, dir, "model.ckpt");
    nn_model_t *m = s_model (true, 0, 1, 8);
    s_save (path, m, true);
    size_t size;
    uint8_t *orig = s_file_load (path, &size);
    uint8_t *data = nn_malloc (size);
    size_t table_end = s_table_end (m);
    nn_rng_t rng;
    nn_rng_seed (&rng, 2024);
    for (int iter = 0; iter < 1500; iter++) {
        memcpy (data, orig, size);
        int flips = 1 + (int) nn_rng_below (&rng, 4);
        for (int f = 0; f < flips; f++) {
            size_t at = nn_rng_below (&rng, (uint32_t) table_end);
            data[at] ^= (uint8_t) (1 + nn_rng_below (&rng, 255));
        }
        if (memcmp (data, orig, table_end) == 0)
            continue;       //  flips cancelled out
        s_expect_fail_bytes (path, data, size, true, m, NULL);
    }
    nn_free (data);
    nn_free (orig);
    nn_model_destroy (&m);
    s_rmtree (dir);
}
