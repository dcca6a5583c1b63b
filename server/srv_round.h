/*  srv_round.h: round bookkeeping (pure: no sockets, no state of its own).

    A round runs from one aggregation point to the next: every active
    device trains from the MODEL it was sent and closes the round with
    PARAMS; in sl the devices take turns, one round each. These functions
    answer the questions the server's step function (srv_step.c) asks:
    where the round must end, whether a PARAMS may close it, whether it is
    complete, whose turn is next.
*/
#ifndef SRV_ROUND_H_INCLUDED
#define SRV_ROUND_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  What a round is checked against.
typedef struct {
    int epoch_iterations;       //  per epoch; 0 when unknown
    int aggregation_frequency;  //  iterations per round; <= 0: once per epoch
    bool sl;                    //  turns: a round is one device's epoch
    uint32_t round_iter;        //  iteration the current round starts at
} srv_round_t;

//  The iteration the round's PARAMS must close: the next aggregation point
//  or the epoch's end (the devices' rule, client/cli_main.c). 0 when the
//  iterations per epoch are unknown.
uint32_t srv_round_end (const srv_round_t *r);

//  May a PARAMS closing iteration close this round? With the iterations
//  unknown, any iteration after the round's start and within one
//  aggregation interval. 0, or -1 with why filled.
int srv_round_check_close (const srv_round_t *r, uint32_t iteration, char *why,
                           size_t why_size);

//  Every active device's PARAMS is in (active, params_in: devices each).
bool srv_round_complete (const bool *active, const bool *params_in, int devices);

//  sl: the next active device after turn, or devices when the epoch's
//  turns are over. turn -1 gives the first.
int srv_round_next_turn (const bool *active, int devices, int turn);

#endif
