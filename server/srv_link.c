/*  srv_link.c: transfer spans from the two ends' events. See srv_link.h. */
#include "srv_link.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"

static int
s_event_cmp (const void *a_, const void *b_)
{
    const pl_event_t *a = a_, *b = b_;
    if (a->start_s != b->start_s)
        return a->start_s < b->start_s ? -1 : 1;
    if (a->end_s != b->end_s)
        return a->end_s < b->end_s ? -1 : 1;
    int c = strcmp (a->who, b->who);
    return c ? c : strcmp (a->stage, b->stage);
}

void
srv_link_sort (pl_event_t *ev, size_t n)
{
    if (n)
        qsort (ev, n, sizeof *ev, s_event_cmp);
}

//  The device lane of an event: who "deviceN" and "link:dN" both give N;
//  -1 for the server's own lanes.
static int
s_link_key (const pl_event_t *e)
{
    const char *digits = strncmp (e->who, "device", 6) == 0 ? e->who + 6
                       : strncmp (e->who, "link:d", 6) == 0 ? e->who + 6 : NULL;
    return digits ? atoi (digits) : -1;
}

//  By (device lane, epoch, iteration, micro-batch, stage).
static int
s_link_cmp (const void *a_, const void *b_)
{
    const pl_event_t *a = *(const pl_event_t *const *) a_, *b = *(const pl_event_t *const *) b_;
    int ka = s_link_key (a), kb = s_link_key (b);
    if (ka != kb)
        return ka < kb ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    if (a->iteration != b->iteration)
        return a->iteration < b->iteration ? -1 : 1;
    if (a->micro_batch != b->micro_batch)
        return a->micro_batch < b->micro_batch ? -1 : 1;
    return strcmp (a->stage, b->stage);
}

size_t
srv_link_spans (pl_event_t *ev, size_t n)
{
    const pl_event_t **by = nn_malloc ((n ? n : 1) * sizeof *by);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (s_link_key (&ev[i]) >= 0 && ev[i].micro_batch >= 0 && ev[i].iteration >= 0)
            by[m++] = &ev[i];
    qsort (by, m, sizeof *by, s_link_cmp);
    //  Runs of one (device, epoch, iteration, micro-batch): stages sort as
    //  backward, downlink, forward, uplink (and the device's own "upload",
    //  "wait"), so each link event finds its partner in its run.
    bool *drop = nn_calloc (n ? n : 1, sizeof *drop);
    for (size_t i = 0; i < m; ) {
        size_t j = i;
        const pl_event_t *fwd = NULL, *bwd = NULL;
        pl_event_t *up = NULL, *down = NULL;
        while (j < m && s_link_key (by[j]) == s_link_key (by[i])
               && by[j]->epoch == by[i]->epoch && by[j]->iteration == by[i]->iteration
               && by[j]->micro_batch == by[i]->micro_batch) {
            const pl_event_t *e = by[j];
            bool link = e->who[0] == 'l';
            if (!link && strcmp (e->stage, "forward") == 0)
                fwd = e;
            else
            if (!link && strcmp (e->stage, "backward") == 0)
                bwd = e;
            else
            if (link && strcmp (e->stage, "uplink") == 0)
                up = &ev[e - ev];
            else
            if (link && strcmp (e->stage, "downlink") == 0)
                down = &ev[e - ev];
            j++;
        }
        if (up) {
            if (fwd && fwd->end_s <= up->end_s)
                up->start_s = fwd->end_s;
            else
                drop[up - ev] = true;
        }
        if (down) {
            if (bwd && bwd->start_s >= down->start_s)
                down->end_s = bwd->start_s;
            else
                drop[down - ev] = true;
        }
        i = j;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (!drop[i])
            ev[kept++] = ev[i];
    nn_free (drop);
    nn_free (by);
    return kept;
}
