/*  srv_round.c: where a round ends and whether it is complete. See
    srv_round.h. */
#include "srv_round.h"

#include <stdint.h>
#include <stdio.h>

uint32_t
srv_round_end (const srv_round_t *r)
{
    if (r->epoch_iterations <= 0)
        return 0;
    uint32_t end = (uint32_t) r->epoch_iterations;
    int agg = r->aggregation_frequency;
    if (!r->sl && agg > 0 && r->round_iter + (uint32_t) agg < end)
        end = r->round_iter + (uint32_t) agg;
    return end;
}

int
srv_round_check_close (const srv_round_t *r, uint32_t iteration, char *why, size_t why_size)
{
    uint32_t end = srv_round_end (r);
    int agg = r->aggregation_frequency;
    bool bad = end ? iteration != end
                   : iteration <= r->round_iter || iteration > INT32_MAX
                     || (agg > 0 && !r->sl && iteration > r->round_iter + (uint32_t) agg);
    if (bad) {
        snprintf (why, why_size, "PARAMS closes iteration %u; this round began at "
                  "iteration %u and ends at %u", iteration, r->round_iter, end);
        return -1;
    }
    return 0;
}

bool
srv_round_complete (const bool *active, const bool *params_in, int devices)
{
    for (int i = 0; i < devices; i++)
        if (active[i] && !params_in[i])
            return false;
    return true;
}

int
srv_round_next_turn (const bool *active, int devices, int turn)
{
    do
        turn++;
    while (turn < devices && !active[turn]);
    return turn < devices ? turn : devices;
}
