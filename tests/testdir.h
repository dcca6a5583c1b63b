/*  testdir.h: temporary directories for tests that write files. The
    including file defines TMP_TEMPLATE ("/tmp/pl_test_NAME_XXXXXX") first;
    Criterion runs tests in parallel processes, so each gets its own. */
#ifndef TESTDIR_H_INCLUDED
#define TESTDIR_H_INCLUDED

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn_alloc.h"

static void
s_mkdtemp (char *dir)
{
    strcpy (dir, TMP_TEMPLATE);
    cr_assert_not_null (mkdtemp (dir), "mkdtemp: %s", strerror (errno));
}

static void
s_rmtree (const char *dir)
{
    DIR *d = opendir (dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir (d)) != NULL) {
        if (strcmp (e->d_name, ".") == 0 || strcmp (e->d_name, "..") == 0)
            continue;
        char path[4096];
        int n = snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        if (n > 0 && n < (int) sizeof path && unlink (path) != 0)
            s_rmtree (path);
    }
    closedir (d);
    rmdir (dir);
}

static void
s_path (char *out, const char *dir, const char *name)
{
    int n = snprintf (out, 4096, "%s/%s", dir, name);
    cr_assert (n > 0 && n < 4096, "path too long");
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
