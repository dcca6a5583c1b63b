/*  srv_link.h: the timeline's transfer spans and its row order (pure).

    The server records when each micro-batch's activations arrived
    ("link:dN" uplink, start = end = arrival) and when its gradients left
    (downlink, start = end = departure); the devices' events give the other
    ends. srv_link_spans joins them: an upload spans from the end of the
    micro-batch's forward on the device to its arrival, a download from the
    departure to the start of its backward on the device (both include
    queueing in libzmq and the kernel, the propagation delay, and for a
    download the time the device was busy with another micro-batch).
*/
#ifndef SRV_LINK_H_INCLUDED
#define SRV_LINK_H_INCLUDED

#include <stddef.h>

#include "pl_timeline.h"

//  Completes the link events of ev[0..n) in place from their device
//  events; a transfer whose device event is missing (the device was
//  dropped, its events capped) or lies on the wrong side of it is left
//  out. Returns the new count (ev is compacted).
size_t srv_link_spans (pl_event_t *ev, size_t n);

//  Sorts ev[0..n) by start, then end, then who and stage: a total order,
//  so the file is the same whatever order the events arrived in.
void srv_link_sort (pl_event_t *ev, size_t n);

#endif
