/*  srv_assign.c: the assignment's small queries. See srv_assign.h. */
#include "srv_assign.h"

#include <assert.h>

void
srv_assign_uniform (srv_assign_t *self, int devices, int split, int micro)
{
    assert (devices >= 0 && devices <= SRV_MAX_DEVICES);
    self->devices = devices;
    //  Every slot, not only the run's devices: a slot's values are read as
    //  one piece (checkpoints, summaries) whatever the device count.
    for (int i = 0; i < SRV_MAX_DEVICES; i++) {
        self->split[i] = split;
        self->micro[i] = micro;
    }
}

int
srv_assign_split (const srv_assign_t *self)
{
    return self->split[0];
}

bool
srv_assign_mixed (const srv_assign_t *self)
{
    int lo, hi;
    srv_assign_split_range (self, &lo, &hi);
    return lo != hi;
}

void
srv_assign_split_range (const srv_assign_t *self, int *lo, int *hi)
{
    *lo = *hi = self->split[0];
    for (int i = 1; i < self->devices; i++) {
        int p = self->split[i];
        *lo = p < *lo ? p : *lo;
        *hi = p > *hi ? p : *hi;
    }
}

void
srv_assign_micro_range (const srv_assign_t *self, int *lo, int *hi)
{
    *lo = *hi = self->micro[0];
    for (int i = 1; i < self->devices; i++) {
        int m = self->micro[i];
        *lo = m < *lo ? m : *lo;
        *hi = m > *hi ? m : *hi;
    }
}

int
srv_assign_max_micro_batch (const srv_assign_t *self, int batch)
{
    int lo, hi;
    srv_assign_micro_range (self, &lo, &hi);
    return batch / (lo > 0 ? lo : 1);
}
