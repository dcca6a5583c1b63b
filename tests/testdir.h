/*  testdir.h: temporary directories for tests that write files. The
    including file defines TMP_TEMPLATE ("/tmp/pl_test_NAME_XXXXXX") first;
    Criterion runs tests in parallel processes, so each gets its own. */
#ifndef TESTDIR_H_INCLUDED
#define TESTDIR_H_INCLUDED

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#endif
