/*  testdir.h: the older spelling of pltest.h's temporary directories, for
    the unit tests that still use it (they define TMP_TEMPLATE,
    "/tmp/pl_test_NAME_XXXXXX", before including this). New tests call
    pltest_mkdtemp (dir, "NAME") from tests/support/pltest.h instead. */
#ifndef TESTDIR_H_INCLUDED
#define TESTDIR_H_INCLUDED

#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pltest.h"

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

#endif
