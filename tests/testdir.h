/*  testdir.h: the older spelling of pltest.h's temporary directories, for
    the unit tests that still use it (they define TMP_TEMPLATE,
    "/tmp/pl_test_NAME_XXXXXX", before including this). New tests call
    pltest_mkdtemp (dir, "NAME") from tests/support/pltest.h instead. */
#ifndef TESTDIR_H_INCLUDED
#define TESTDIR_H_INCLUDED

#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pltest.h"

#include "nn_alloc.h"

static void
s_mkdtemp (char *dir)
{
    strcpy (dir, TMP_TEMPLATE);
    cr_assert_not_null (mkdtemp (dir), "mkdtemp: %s", strerror (errno));
}

static inline void
s_rmtree (const char *dir)
{
    pltest_rmtree (dir);
}

static inline void
s_path (char *out, const char *dir, const char *name)
{
    pltest_path (out, dir, name);
}

//  The whole file at path (nn_free it) and its size.
static inline uint8_t *
s_file_load (const char *path, size_t *size)
{
    FILE *f = fopen (path, "rb");
    cr_assert_not_null (f, "%s: %s", path, strerror (errno));
    cr_assert_eq (fseek (f, 0, SEEK_END), 0);
    long len = ftell (f);
    cr_assert (len >= 0);
    rewind (f);
    uint8_t *data = nn_malloc ((size_t) len);
    cr_assert_eq (fread (data, 1, (size_t) len, f), (size_t) len);
    fclose (f);
    *size = (size_t) len;
    return data;
}

static inline void
s_file_save (const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen (path, "wb");
    cr_assert_not_null (f, "%s: %s", path, strerror (errno));
    cr_assert_eq (fwrite (data, 1, len, f), len);
    cr_assert_eq (fclose (f), 0);
}

#endif
