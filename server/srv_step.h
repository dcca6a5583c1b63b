/*  srv_step.h: the server's one step function.

    Event handlers (srv_inbox.c, srv_session.c, the deadline checks) only
    record what happened: a device joined or left, a PARAMS or STATS came
    in, a probe was answered. srv_round_advance, called by the reactor loop
    (srv_main.c) after every event and by nothing else, decides what follows:
    start the run (with the planner's assignment), close a round (FedAvg
    and the next round's MODEL, checkpointed), end an epoch (evaluation,
    results, the adaptive re-plan), finish, or abort when too few devices
    are left.
*/
#ifndef SRV_STEP_H_INCLUDED
#define SRV_STEP_H_INCLUDED

#include "srv_internal.h"

void srv_round_advance (srv_t *self);

//  How long after the last device's HELLO the run starts at the earliest.
//  libzmq reads a HELLO and the end of its connection on its I/O thread,
//  one after the other; the reactor may read the HELLO in between. A
//  HELLO from a connection that died before it was read (a device killed
//  while the server was starting or stopped) would then take the last
//  slot and start the run without a device. The wait lets libzmq report
//  that end first (srv_monitor.h), so the slot is freed before the start.
#define SRV_START_SETTLE_S 0.2

//  Seconds until a start that waits out SRV_START_SETTLE_S is due, for the
//  reactor's poll; negative when none is waiting.
double srv_round_start_due (const srv_t *self);

#endif
