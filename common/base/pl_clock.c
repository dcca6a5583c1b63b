/*  pl_clock.c: the clocks. See pl_clock.h. */
#include "pl_clock.h"

#include <time.h>

double
pl_wall_clock (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

double
pl_monotonic_clock (void *arg)
{
    (void) arg;
    return pl_monotonic ();
}

double
pl_monotonic (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

double
pl_thread_cpu_clock (void *arg)
{
    (void) arg;
    struct timespec ts;
    clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}
