/*  nn_alloc.c: allocation wrapper and error formatting. */
#include "nn_alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_out_of_memory (size_t size)
{
    //  No logging in the core, but this is the one place we die: say why.
    fprintf (stderr, "pipelearn: out of memory allocating %zu bytes\n", size);
    abort ();
}

void *
nn_malloc (size_t size)
{
    void *p = malloc (size ? size : 1);
    if (!p)
        s_out_of_memory (size);
    return p;
}

void *
nn_calloc (size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        s_out_of_memory (SIZE_MAX);
    void *p = calloc (count ? count : 1, size ? size : 1);
    if (!p)
        s_out_of_memory (count * size);
    return p;
}

void *
nn_alloc_aligned (size_t size)
{
    size_t rounded = (size + 63) / 64 * 64;
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc (64, rounded);
    if (!p)
        s_out_of_memory (rounded);
    memset (p, 0, rounded);
    return p;
}

void *
nn_realloc (void *ptr, size_t size)
{
    void *p = realloc (ptr, size ? size : 1);
    if (!p)
        s_out_of_memory (size);
    return p;
}

void
nn_free (void *ptr)
{
    free (ptr);
}

char *
nn_strdup (const char *s)
{
    size_t n = strlen (s) + 1;
    char *p = nn_malloc (n);
    memcpy (p, s, n);
    return p;
}

int
nn_errf (char *err, size_t err_size, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start (ap, fmt);
        vsnprintf (err, err_size, fmt, ap);
        va_end (ap);
    }
    return -1;
}
