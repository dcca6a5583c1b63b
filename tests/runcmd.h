/*  runcmd.h: run a shell command from a test, capturing its output. */
#ifndef RUNCMD_H_INCLUDED
#define RUNCMD_H_INCLUDED

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

//  Runs `cmd` with stderr merged into stdout; returns the exit status (or
//  -1) and leaves up to size-1 bytes of output in out.
static inline int
runcmd (const char *cmd, char *out, size_t size)
{
    char full[8192];
    snprintf (full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen (full, "r");
    if (!p)
        return -1;
    size_t n = fread (out, 1, size - 1, p);
    out[n] = '\0';
    //  Drain whatever did not fit so the child is not blocked on a pipe.
    char sink[4096];
    while (fread (sink, 1, sizeof sink, p) > 0)
        ;
    int st = pclose (p);
    return WIFEXITED (st) ? WEXITSTATUS (st) : -1;
}

//  Path of a built binary: $PL_BUILD_DIR/rel (the build dir meson passes).
static inline const char *
built (const char *rel, char *buf, size_t size)
{
    const char *dir = getenv ("PL_BUILD_DIR");
    snprintf (buf, size, "%s/%s", dir ? dir : "build", rel);
    return buf;
}

#endif
