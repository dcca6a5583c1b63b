/*  pl_timeline.h: stage events for DIR/timeline.csv, so a run's pipeline
    can be drawn (who, stage, epoch, iteration, micro_batch, start, end;
    times in seconds since the run's start). Not thread-safe: one recorder
    per thread, merged at the end. */
#ifndef PL_TIMELINE_H_INCLUDED
#define PL_TIMELINE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  The clocks (pl_wall_clock, pl_monotonic) live in common/base; included
//  here for the timeline's users, who take its times from them.
#include "pl_clock.h"

typedef struct {
    char who[16];           //  "server", "device0", ...
    char stage[16];         //  "forward", "backward", "upload", "server", ...
    int32_t epoch, iteration, micro_batch;
    double start_s, end_s;
} pl_event_t;

typedef struct _pl_timeline_t pl_timeline_t;

//  origin: the CLOCK_REALTIME second that is time 0 (shared by processes
//  on one host; across hosts the clocks must be synchronised, e.g. NTP).
pl_timeline_t *pl_timeline_new (double origin);
void pl_timeline_destroy (pl_timeline_t **self_p);
//  Now in seconds since origin.
double pl_timeline_now (const pl_timeline_t *self);
void pl_timeline_add (pl_timeline_t *self, const char *who, const char *stage, int epoch,
                      int iteration, int micro_batch, double start_s, double end_s);
void pl_timeline_add_event (pl_timeline_t *self, const pl_event_t *event);
//  Called with every event added from now on, on the thread that adds it,
//  after the event is kept (a live view: the server's metrics). It must be
//  quick and must not add to this timeline. fn NULL removes it.
typedef void (pl_timeline_listener_fn) (void *arg, const pl_event_t *event);
void pl_timeline_set_listener (pl_timeline_t *self, pl_timeline_listener_fn *fn,
                               void *arg);
size_t pl_timeline_count (const pl_timeline_t *self);
const pl_event_t *pl_timeline_events (const pl_timeline_t *self);
//  Forget the events (after they were sent or written).
void pl_timeline_clear (pl_timeline_t *self);
//  Which split point and micro-batch count each device ran, for the rows'
//  last two columns: a row of "deviceN", "server:dN" or "link:dN" gets
//  device N's, any other ("server" in sl, where every device has one split
//  point) device 0's; a device outside count, or no plan (NULL), -1.
typedef struct {
    int count;                  //  devices
    const int *split;           //  count entries (borrowed)
    const int *micro;           //  count entries (borrowed)
} pl_timeline_plan_t;

//  Write path as CSV with the header
//  who,stage,epoch,iteration,micro_batch,start_s,end_s,split_point,micro_batches,
//  or with append add the rows to what is there. plan may be NULL.
int pl_timeline_write_csv (const pl_timeline_t *self, const char *path, bool append,
                           const pl_timeline_plan_t *plan, char *err, size_t err_size);
//  For a resumed run: rewrite the CSV at path (atomically) keeping only the
//  rows of epochs before `epoch` (later ones are run again); rows that do
//  not parse are dropped. 1 when the file was there (append to it from now
//  on), 0 when there is none, -1 with a message.
int pl_timeline_csv_keep_before (const char *path, int epoch, char *err, size_t err_size);

#endif
