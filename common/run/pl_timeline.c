/*  pl_timeline.c: see pl_timeline.h. */
#include "pl_timeline.h"

#include "nn_alloc.h"
#include "pl_summary.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_CSV_HEADER "who,stage,epoch,iteration,micro_batch,start_s,end_s,split_point," \
                     "micro_batches\n"

struct _pl_timeline_t {
    double origin;
    pl_event_t *events;
    size_t count, capacity;
    pl_timeline_listener_fn *listener;
    void *listener_arg;
};

pl_timeline_t *
pl_timeline_new (double origin)
{
    pl_timeline_t *self = nn_calloc (1, sizeof *self);
    self->origin = origin;
    return self;
}

void
pl_timeline_destroy (pl_timeline_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    nn_free ((*self_p)->events);
    nn_free (*self_p);
    *self_p = NULL;
}

double
pl_timeline_now (const pl_timeline_t *self)
{
    return pl_wall_clock () - self->origin;
}

void
pl_timeline_add_event (pl_timeline_t *self, const pl_event_t *event)
{
    if (self->count == self->capacity) {
        self->capacity = self->capacity ? 2 * self->capacity : 256;
        self->events = nn_realloc (self->events, self->capacity * sizeof (pl_event_t));
    }
    self->events[self->count++] = *event;
    if (self->listener)
        self->listener (self->listener_arg, event);
}

void
pl_timeline_set_listener (pl_timeline_t *self, pl_timeline_listener_fn *fn, void *arg)
{
    self->listener = fn;
    self->listener_arg = arg;
}

void
pl_timeline_add (pl_timeline_t *self, const char *who, const char *stage, int epoch,
                 int iteration, int micro_batch, double start_s, double end_s)
{
    pl_event_t e = { .epoch = epoch, .iteration = iteration, .micro_batch = micro_batch,
                     .start_s = start_s, .end_s = end_s };
    snprintf (e.who, sizeof e.who, "%s", who);
    snprintf (e.stage, sizeof e.stage, "%s", stage);
    pl_timeline_add_event (self, &e);
}

size_t
pl_timeline_count (const pl_timeline_t *self)
{
    return self->count;
}

const pl_event_t *
pl_timeline_events (const pl_timeline_t *self)
{
    return self->events;
}

void
pl_timeline_clear (pl_timeline_t *self)
{
    self->count = 0;
}

//  The epoch column of a timeline.csv row (the third field), or -1.
static long
s_row_epoch (const char *row)
{
    const char *p = strchr (row, ',');
    p = p ? strchr (p + 1, ',') : NULL;
    if (!p)
        return -1;
    char *end;
    errno = 0;
    long epoch = strtol (p + 1, &end, 10);
    return errno || end == p + 1 || *end != ',' ? -1 : epoch;
}

int
pl_timeline_csv_keep_before (const char *path, int epoch, char *err, size_t err_size)
{
    FILE *f = fopen (path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return nn_errf (err, err_size, "%s: cannot read: %s", path, strerror (errno));
    }
    size_t size = 0, cap = 1 << 16;
    char *kept = nn_malloc (cap), line[512];
    memcpy (kept, S_CSV_HEADER, strlen (S_CSV_HEADER));
    size = strlen (S_CSV_HEADER);
    bool first = true, whole = true;
    while (fgets (line, sizeof line, f)) {
        size_t len = strlen (line);
        bool complete = len > 0 && line[len - 1] == '\n';
        //  A line longer than the buffer is no row of ours: skip its rest.
        bool keep = whole && complete && !first;
        whole = complete;
        first = false;
        long e = keep ? s_row_epoch (line) : -1;
        if (e < 1 || e >= epoch)
            continue;
        if (size + len > cap) {
            cap = 2 * cap + len;
            kept = nn_realloc (kept, cap);
        }
        memcpy (kept + size, line, len);
        size += len;
    }
    fclose (f);
    int rc = pl_write_file_atomic (path, kept, size, err, err_size) ? -1 : 1;
    nn_free (kept);
    return rc;
}

//  The device a row's who names ("device3", "server:d3", "link:d3"), 0 for
//  any other ("server"), -1 for a malformed number.
static int
s_who_device (const char *who)
{
    const char *digits = strncmp (who, "device", 6) == 0 ? who + 6
                       : strncmp (who, "server:d", 8) == 0 ? who + 8
                       : strncmp (who, "link:d", 6) == 0 ? who + 6 : NULL;
    if (!digits)
        return 0;
    char *end;
    long id = strtol (digits, &end, 10);
    return end == digits || *end || id < 0 || id > INT_MAX ? -1 : (int) id;
}

int
pl_timeline_write_csv (const pl_timeline_t *self, const char *path, bool append,
                       const pl_timeline_plan_t *plan, char *err, size_t err_size)
{
    FILE *f;
    double deadline = 0.0;
    while (!(f = fopen (path, append ? "a" : "w")) && pl_fd_wait (&deadline))
        ;
    if (!f)
        return nn_errf (err, err_size, "%s: cannot write: %s", path, strerror (errno));
    //  A failed append is undone, so that writing the same events again
    //  later does not leave a partial or doubled row.
    long before = append && fseek (f, 0, SEEK_END) == 0 ? ftell (f) : -1;
    if (!append)
        fputs (S_CSV_HEADER, f);
    for (size_t i = 0; i < self->count; i++) {
        const pl_event_t *e = &self->events[i];
        int id = plan ? s_who_device (e->who) : -1;
        bool known = id >= 0 && id < plan->count;
        fprintf (f, "%s,%s,%d,%d,%d,%.6f,%.6f,%d,%d\n", e->who, e->stage, e->epoch,
                 e->iteration, e->micro_batch, e->start_s, e->end_s,
                 known ? plan->split[id] : -1, known ? plan->micro[id] : -1);
    }
    bool failed = ferror (f) != 0;
    int e = errno;
    if (fclose (f) || failed) {
        e = failed ? e : errno;
        if (before >= 0 && truncate (path, (off_t) before) != 0)
            return nn_errf (err, err_size, "%s: write failed: %s; its last rows may be "
                            "partial", path, strerror (e));
        return nn_errf (err, err_size, "%s: write failed: %s", path, strerror (e));
    }
    return 0;
}
