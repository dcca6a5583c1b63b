/*  pl_clock.h: wall-clock and monotonic seconds. */
#ifndef PL_CLOCK_H_INCLUDED
#define PL_CLOCK_H_INCLUDED

//  Seconds since the epoch on CLOCK_REALTIME.
double pl_wall_clock (void);
//  Seconds on CLOCK_MONOTONIC, for durations.
double pl_monotonic (void);
//  pl_monotonic as a clock callback (nn_profile_args_t.now); arg unused.
double pl_monotonic_clock (void *arg);

#endif
