/*  pl_clock.h: wall-clock, monotonic and CPU seconds. */
#ifndef PL_CLOCK_H_INCLUDED
#define PL_CLOCK_H_INCLUDED

//  Seconds since the epoch on CLOCK_REALTIME.
double pl_wall_clock (void);
//  Seconds on CLOCK_MONOTONIC, for durations.
double pl_monotonic (void);
//  pl_monotonic as a clock callback (nn_profile_args_t.now); arg unused.
double pl_monotonic_clock (void *arg);
//  Seconds of CPU the calling thread has used (CLOCK_THREAD_CPUTIME_ID), as
//  a clock callback (nn_profile_args_t.cpu_now); arg unused.
double pl_thread_cpu_clock (void *arg);

#endif
