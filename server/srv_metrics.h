/*  srv_metrics.h: the server's live view over HTTP (--metrics ADDR:PORT,
    config "metrics"): GET /metrics in the Prometheus text format 0.0.4,
    GET / the dashboard (srv_dashboard.html, compiled in), GET
    /api/state.json the state behind it. Anything else: 404 (405 for other
    methods).

    Threads. libmicrohttpd serves from its own thread and reads only a
    snapshot. The reactor feeds a private copy of the state (the timeline
    and summary listeners, srv_metrics_tick and the srv_metrics_note_*
    calls, all on the reactor's thread) and publishes it -- one memcpy under
    a mutex -- at most every 250 ms from srv_metrics_tick and at every
    summary write (epoch end). CURVE handshake refusals are counted by the
    thread that reads the ROUTER's socket monitor (srv_monitor.h) and reach
    the metrics in the reactor's sample (curve_refused). Every function takes NULL
    for self (metrics off) and does nothing then.

    Nothing served names a path beyond the results directory's last
    component, and nothing holds a key.
*/
#ifndef SRV_METRICS_H_INCLUDED
#define SRV_METRICS_H_INCLUDED

#include <stddef.h>
#include <sys/socket.h>

#include "pl_summary.h"
#include "pl_timeline.h"
#include "srv_assign.h"

typedef struct _srv_metrics_t srv_metrics_t;

//  The reactor's state as the metrics show it: a copy the reactor fills on
//  its own thread (the metrics never see the server's state itself).
typedef struct {
    //  Fixed for the run (read by srv_metrics_new).
    const char *mode, *model, *dataset, *aggregation;
    int epochs, batch, devices;
    double origin;
    //  Live (read by srv_metrics_tick).
    bool started, done;
    int epoch;                  //  0 before the start
    int split, workers, joined;
    long iterations;
    int epoch_iterations;
    double loss_sum, correct, samples;
    double epoch_elapsed_s;     //  0 while the epoch clock waits
    long curve_refused;         //  failed handshakes so far (srv_monitor_refused)
    struct {
        bool joined, active;
        int split, micro;       //  the device's split point (fl: the units) and N
        int queue;              //  micro-batches queued or in a worker
    } dev[SRV_MAX_DEVICES];
} srv_metrics_sample_t;

typedef enum {
    SRV_REFUSED_MALFORMED = 0,  //  a message that did not decode, from a non-device
    SRV_REFUSED_HELLO = 1,      //  a HELLO refused or a message before HELLO
    SRV_REFUSED_CURVE = 2,      //  a CURVE handshake that failed (unknown key, ...)
    SRV_REFUSED_KINDS = 3
} srv_refused_t;

//  listen: "PORT" (127.0.0.1), "ADDR:PORT", "[ADDR6]:PORT" or "*:PORT"
//  (every address). Starts the HTTP thread and listens on timeline and
//  summary (borrowed; they must outlive the metrics). results: the results
//  directory (only its last component is ever served). NULL with a message
//  when the address is bad or cannot be bound.
srv_metrics_t *srv_metrics_new (const char *listen, const srv_metrics_sample_t *srv,
                                const char *results,
                                pl_timeline_t *timeline, pl_summary_t *summary,
                                char *err, size_t err_size);
//  Stops the HTTP thread first, then frees.
void srv_metrics_destroy (srv_metrics_t **self_p);
//  The TCP port it listens on (the real one for port 0), or -1.
int srv_metrics_port (const srv_metrics_t *self);
//  Take the reactor's live state (epoch, progress, queues, joins) and
//  publish, at most every 250 ms. Reactor thread only.
void srv_metrics_tick (srv_metrics_t *self, const srv_metrics_sample_t *srv);
//  Events the state does not keep. Reactor thread only.
void srv_metrics_note_drop (srv_metrics_t *self, int device);
void srv_metrics_note_rejoin (srv_metrics_t *self, int device);
void srv_metrics_note_refused (srv_metrics_t *self, srv_refused_t why);

//  Parse a listen spec as above into addr; 0 or -1 with a message.
int srv_metrics_parse_listen (const char *spec, struct sockaddr_storage *addr,
                              socklen_t *addr_len, char *err, size_t err_size);

#endif
