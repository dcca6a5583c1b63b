/*  srv_timeline.h: the run's timeline.csv and the terminal's progress line.
    Internal to the server (srv_internal.h).

    WELCOME's assignment carries origin_s, the CLOCK_REALTIME second this
    server took as time 0, so device events and the workers' compute
    events share one time axis. Device events are checked (epoch, indices,
    a per-epoch budget) and merged as they arrive; timeline.csv is written
    at every epoch end, sorted by start time within the epoch.
*/
#ifndef SRV_TIMELINE_H_INCLUDED
#define SRV_TIMELINE_H_INCLUDED

#include "srv_internal.h"

//  A transfer's server end, now: "uplink" (activations arrived) or
//  "downlink" (gradients leave) of device's micro-batch h, an instant that
//  srv_link_spans stretches to the device's end.
void srv_timeline_link (srv_t *self, uint32_t device, const char *stage,
                        const proto_header_t *h);
//  A device's EVENTS for the current epoch: checked beyond what proto
//  checks (epoch, indices, order with STATS) and merged as "deviceN". 0,
//  or -1 with why filled (the caller drops the device).
int srv_timeline_device_events (srv_t *self, srv_device_t *d, const proto_msg_t *msg,
                                char *why, size_t why_size);
//  The events so far (the workers' too), transfers completed, sorted, to
//  timeline.csv; memory then holds none (after a failed write they are
//  kept for the next flush).
void srv_timeline_flush (srv_t *self);
//  One self-overwriting line on a terminal while an epoch trains.
void srv_timeline_progress (srv_t *self);
void srv_timeline_progress_clear (srv_t *self);

#endif
