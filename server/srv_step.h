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

#endif
