/*  pl_proc.c: process memory: malloc tuning and peak RSS. See pl_proc.h. */
#include "pl_proc.h"

#include <malloc.h>
#include <sys/resource.h>

void
pl_memory_setup (void)
{
#if defined (M_MMAP_THRESHOLD) && defined (M_ARENA_MAX)
    mallopt (M_MMAP_THRESHOLD, 8 * 1024 * 1024);
    mallopt (M_TRIM_THRESHOLD, 32 * 1024 * 1024);
    mallopt (M_ARENA_MAX, 2);
#endif
}

long
pl_peak_rss_kb (void)
{
    struct rusage ru;
    if (getrusage (RUSAGE_SELF, &ru))
        return -1;
    return ru.ru_maxrss;
}
