/*  srv_timeline.c: timeline events and the progress line. See
    srv_timeline.h. */
#include "srv_timeline.h"

#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"
#include "pl_log.h"
#include "srv_link.h"

void
srv_timeline_link (srv_t *self, uint32_t device, const char *stage, const proto_header_t *h)
{
    char who[16];
    snprintf (who, sizeof who, "link:d%u", device & 0xffff);
    double now = pl_timeline_now (self->timeline);
    pl_timeline_add (self->timeline, who, stage, (int) h->epoch, (int) h->iteration,
                     (int) h->micro_batch, now, now);
}

int
srv_timeline_device_events (srv_t *self, srv_device_t *d, const proto_msg_t *msg, char *why,
                            size_t why_size)
{
    const int id = (int) (d - self->dev);
    const proto_header_t *h = proto_msg_header (msg);
    size_t count = 0;
    const proto_event_t *ev = proto_msg_events (msg, &count);
    if (h->epoch != (uint32_t) self->epoch) {
        snprintf (why, why_size, "EVENTS for epoch %u; the run is in epoch %d", h->epoch,
                  self->epoch);
        return -1;
    }
    if (d->stats_in) {
        snprintf (why, why_size, "EVENTS after this epoch's STATS (send them before)");
        return -1;
    }
    //  Check every record before keeping any: all or nothing.
    for (size_t i = 0; i < count; i++) {
        const proto_event_t *e = &ev[i];
        bool micro_ok = e->micro_batch == PROTO_EVENT_NONE
                     || e->micro_batch < (uint32_t) d->micro;
        bool iter_ok = e->iteration == PROTO_EVENT_NONE || e->iteration <= INT32_MAX;
        if (e->epoch != h->epoch || !micro_ok || !iter_ok) {
            snprintf (why, why_size, "EVENTS: event %zu: epoch %u, iteration %u, "
                      "micro-batch %u do not fit epoch %u with %d micro-batch(es)", i,
                      e->epoch, e->iteration, e->micro_batch, h->epoch, d->micro);
            return -1;
        }
    }
    size_t room = SRV_MAX_EVENTS - d->events_in;
    if (count > room) {
        if (!d->events_capped)
            pl_log_warn ("server: device %d sent more than %d events in epoch %d; the rest "
                         "are left out of timeline.csv", id, SRV_MAX_EVENTS, self->epoch);
        d->events_capped = true;
        count = room;
    }
    d->events_in += count;
    char who[16];
    snprintf (who, sizeof who, "device%d", id & 0xffff);
    for (size_t i = 0; i < count; i++) {
        const proto_event_t *e = &ev[i];
        pl_timeline_add (self->timeline, who, proto_stage_name ((int) e->stage),
                         (int) e->epoch,
                         e->iteration == PROTO_EVENT_NONE ? -1 : (int) e->iteration,
                         e->micro_batch == PROTO_EVENT_NONE ? -1 : (int) e->micro_batch,
                         e->start_s, e->end_s);
    }
    return 0;
}

//  self->timeline's events, transfers completed, sorted by start time, as
//  a new timeline.
static pl_timeline_t *
s_sorted (srv_t *self)
{
    size_t n = pl_timeline_count (self->timeline);
    pl_event_t *ev = nn_malloc ((n ? n : 1) * sizeof *ev);
    if (n)
        memcpy (ev, pl_timeline_events (self->timeline), n * sizeof *ev);
    n = srv_link_spans (ev, n);
    srv_link_sort (ev, n);
    pl_timeline_t *sorted = pl_timeline_new (self->origin);
    for (size_t i = 0; i < n; i++)
        pl_timeline_add_event (sorted, &ev[i]);
    nn_free (ev);
    return sorted;
}

void
srv_timeline_flush (srv_t *self)
{
    char err[NN_ERR_SIZE], path[1024];
    if (self->pool)
        srv_pool_take_events (self->pool, self->timeline);
    snprintf (path, sizeof path, "%s/timeline.csv", self->results);
    pl_timeline_t *sorted = s_sorted (self);
    //  Flushed at an epoch's end, before any re-plan: the assignment in
    //  force is the one the epoch ran with. fl has no split point.
    int split[SRV_MAX_DEVICES];
    for (int i = 0; i < self->devices; i++)
        split[i] = self->mode == PL_MODE_FL ? 0 : self->assign.split[i];
    pl_timeline_plan_t plan = { self->devices, split, self->assign.micro };
    int wrc = pl_timeline_write_csv (sorted, path, self->timeline_written, &plan, err,
                                     sizeof err);
    pl_timeline_destroy (&sorted);
    //  Events are forgotten only once written: after a failed write they
    //  go out with the next flush's (pl_timeline_write_csv undoes a partial
    //  append), so an epoch is late in timeline.csv, never lost.
    self->timeline_pending = wrc != 0;
    if (wrc)
        pl_log_error ("%s; its %zu event(s) are kept for the next write", err,
                      pl_timeline_count (self->timeline));
    else {
        pl_timeline_clear (self->timeline);
        self->timeline_written = true;
    }
}

void
srv_timeline_progress (srv_t *self)
{
    double now = pl_monotonic ();
    if (!self->tty || self->quiet || now - self->last_progress < 0.5)
        return;
    self->last_progress = now;
    double wall = now - self->epoch_start;
    long images = self->samples_seen;
    double loss = self->iterations ? self->loss_sum / self->iterations : 0.0;
    if (self->mode == PL_MODE_FL)
        printf ("\r\033[Kepoch %d/%d  %.1f s  (fl: devices train locally)", self->epoch,
                self->cfg->epochs, wall);
    else
        printf ("\r\033[Kepoch %d/%d  %ld iterations  %ld images  loss %.4f  %.0f images/s"
                "  %.1f s", self->epoch, self->cfg->epochs, self->iterations, images, loss,
                wall > 0 ? images / wall : 0.0, wall);
    fflush (stdout);
    self->progress_shown = true;
}

void
srv_timeline_progress_clear (srv_t *self)
{
    if (self->progress_shown) {
        printf ("\r\033[K");
        self->progress_shown = false;
    }
}
