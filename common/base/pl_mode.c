/*  pl_mode.c: mode names. See pl_mode.h. */
#include "pl_mode.h"

#include <string.h>

static const char *const s_names[] = { NULL, "fl", "sl", "sfl", "pipelearn" };

int
pl_mode_from_name (const char *name)
{
    for (int m = PL_MODE_FL; name && m <= PL_MODE_PIPELEARN; m++)
        if (strcmp (name, s_names[m]) == 0)
            return m;
    return -1;
}

const char *
pl_mode_name (int mode)
{
    return mode >= PL_MODE_FL && mode <= PL_MODE_PIPELEARN ? s_names[mode] : "UNKNOWN";
}
