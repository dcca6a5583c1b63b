/*  srv_metrics.c: see srv_metrics.h. */
#include "srv_metrics.h"

#include "nn_alloc.h"
#include "pl_log.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

//  srv_dashboard.c, generated from srv_dashboard.html at build time.
extern const unsigned char srv_dashboard_html[];
extern const size_t srv_dashboard_html_size;

#define S_PUBLISH_S     0.25    //  srv_metrics_tick publishes at most this often
#define S_RING          96      //  Gantt events kept per row
#define S_EPOCHS        256     //  epochs kept for the curves (the newest)
#define S_STAGES        16
#define S_WORKERS       64      //  server workers with their own busy/idle series
#define S_PENDING       64      //  uplinks waiting for their downlink, per device
//  libmicrohttpd limits: a scraper and a browser or two, never a crowd.
#define S_CONNECTIONS   16
#define S_PER_IP        8
#define S_CONN_MEMORY   (16 * 1024)     //  request line + headers; more: 431
#define S_CONN_TIMEOUT  10              //  seconds a connection may idle

typedef struct {
    double start, end;          //  seconds since the run's origin
    int32_t epoch, iteration, micro;
    int32_t stage;              //  index into s_state_t.stage
} s_event_t;

typedef struct {
    s_event_t ev[S_RING];
    int next, count;
} s_ring_t;

typedef struct {
    bool joined, active;
    int micro, queue;
    //  The newest epoch's figures (summary) and their sums over the run.
    double forward_s, backward_s, update_s, idle_s;
    double forward_total_s, backward_total_s, update_total_s, idle_total_s;
    double bytes_up_total, bytes_down_total;
    //  Link: the last probe (rtt 0 = none) and the training traffic estimate.
    double rtt_s, up_Bps, down_Bps, traffic_up_Bps;     //  bytes/s
    double drops, rejoins;
    int32_t last_epoch, last_iteration;     //  newest the server sent gradients for
    struct { int32_t epoch, iteration, micro; double t; } pending[S_PENDING];
} s_device_t;

typedef struct {
    int32_t epoch;
    double wall_s, eval_s, train_loss, train_acc, test_loss, test_acc, images_per_s;
    double busy_s, idle_s;
} s_epoch_t;

//  Everything served; a plain value, copied whole (its size is fixed at
//  creation by the device count).
typedef struct {
    char mode[16], model[32], dataset[32], aggregation[16], results[64];
    int devices, epochs, batch, split, workers, joined;
    bool started, done;
    int epoch;                  //  1-based; 0 before training
    long iterations;            //  completed this epoch (all devices)
    int epoch_iterations;       //  per device and epoch (0: unknown)
    double loss_sum, correct, samples;      //  this epoch so far
    double epoch_elapsed_s;
    double origin;              //  wall clock of time 0
    double busy_total_s, idle_total_s;
    //  Per worker thread (the first S_WORKERS): busy over completed epochs,
    //  and idle = their wall time - busy.
    double worker_busy_total_s[S_WORKERS], worker_idle_total_s[S_WORKERS];
    double refused[SRV_REFUSED_KINDS];
    int last_summary_epoch;     //  epochs up to this one are counted
    int epochs_count;
    s_epoch_t ep[S_EPOCHS];
    char stage[S_STAGES][16];
    int stages;
    s_device_t dev[SRV_MAX_DEVICES];
    //  Gantt rows: 3 per device (device i, server:d i compute, and
    //  "in server" from ACTIVATIONS arrival to GRADIENTS leaving, live),
    //  then one "server" row (sl: the shared replica's compute).
    int rows;
    s_ring_t row[];
} s_state_t;

struct _srv_metrics_t {
    struct MHD_Daemon *httpd;
    int port;
    size_t state_size;
    s_state_t *live;            //  the reactor's
    s_state_t *shared;          //  the published copy, under lock
    s_state_t *view;            //  the HTTP thread's copy (one MHD thread)
    pthread_mutex_t lock;
    double last_publish;        //  pl_monotonic
    char ckpt_dir[1024];        //  stat()ed for the checkpoint age; never served
    double start_wall;          //  process start, for process_start_time_seconds
    pl_timeline_t *timeline;
    pl_summary_t *summary;
    //  CURVE handshake failures, counted by the monitor thread.
    atomic_long curve_refused;
    atomic_bool monitor_stop;
    bool monitor_running;
    pthread_t monitor;
    void *monitor_sock;
    void *watched;
};

//  ---------------------------------------------------------------------
//  Listen address

int
srv_metrics_parse_listen (const char *spec, struct sockaddr_storage *addr,
                          socklen_t *addr_len, char *err, size_t err_size)
{
    char host[128] = "127.0.0.1", port[16];
    const char *colon = strrchr (spec, ':');
    const char *p = colon ? colon + 1 : spec;
    if (colon) {
        size_t hlen = (size_t) (colon - spec);
        const char *h = spec;
        if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
            h++;
            hlen -= 2;
        }
        if (hlen == 0 || hlen >= sizeof host)
            return nn_errf (err, err_size, "metrics: want PORT or ADDR:PORT, got \"%s\"",
                            spec);
        memcpy (host, h, hlen);
        host[hlen] = 0;
        if (strcmp (host, "*") == 0)
            snprintf (host, sizeof host, "0.0.0.0");
    }
    char *end;
    errno = 0;
    long n = strtol (p, &end, 10);
    if (!*p || *end || errno || n < 0 || n > 65535)
        return nn_errf (err, err_size, "metrics: want a port 0..65535 in \"%s\"", spec);
    snprintf (port, sizeof port, "%ld", n);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *res = NULL;
    int rc = getaddrinfo (host, port, &hints, &res);
    if (rc || !res)
        return nn_errf (err, err_size, "metrics: address \"%s\": %s", host,
                        rc ? gai_strerror (rc) : "none");
    memcpy (addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo (res);
    return 0;
}

//  ---------------------------------------------------------------------
//  The reactor's side

static void
s_publish (srv_metrics_t *self)
{
    pthread_mutex_lock (&self->lock);
    memcpy (self->shared, self->live, self->state_size);
    pthread_mutex_unlock (&self->lock);
    self->last_publish = pl_monotonic ();
}

static int
s_stage_index (s_state_t *st, const char *name)
{
    for (int i = 0; i < st->stages; i++)
        if (strcmp (st->stage[i], name) == 0)
            return i;
    if (st->stages == S_STAGES)
        return -1;
    snprintf (st->stage[st->stages], sizeof st->stage[0], "%s", name);
    return st->stages++;
}

static void
s_ring_add (s_state_t *st, int row, const char *stage, int epoch, int iteration,
            int micro, double start, double end)
{
    if (row < 0 || row >= st->rows)
        return;
    int s = s_stage_index (st, stage);
    if (s < 0)
        return;
    s_ring_t *r = &st->row[row];
    r->ev[r->next] = (s_event_t) { start, end, epoch, iteration, micro, s };
    r->next = (r->next + 1) % S_RING;
    if (r->count < S_RING)
        r->count++;
}

//  "device3" -> 3, "server:d3" / "link:d3" -> 3 with prefix checked; -1.
static int
s_who_device (const char *who, const char *prefix)
{
    size_t len = strlen (prefix);
    if (strncmp (who, prefix, len) != 0 || who[len] < '0' || who[len] > '9')
        return -1;
    char *end;
    long v = strtol (who + len, &end, 10);
    return *end || v >= SRV_MAX_DEVICES ? -1 : (int) v;
}

//  pl_timeline listener (reactor thread): device stage events arrive with
//  each epoch's EVENTS, the workers' compute spans at epoch ends, the
//  transfers' server ends live; an ACTIVATIONS arrival and its GRADIENTS'
//  departure make one live "in server" span (queue + compute).
static void
s_on_event (void *arg, const pl_event_t *e)
{
    srv_metrics_t *self = arg;
    s_state_t *st = self->live;
    int d;
    if ((d = s_who_device (e->who, "device")) >= 0 && d < st->devices)
        s_ring_add (st, 3 * d, e->stage, e->epoch, e->iteration, e->micro_batch,
                    e->start_s, e->end_s);
    else
    if ((d = s_who_device (e->who, "server:d")) >= 0 && d < st->devices)
        s_ring_add (st, 3 * d + 1, e->stage, e->epoch, e->iteration, e->micro_batch,
                    e->start_s, e->end_s);
    else
    if (strcmp (e->who, "server") == 0)
        s_ring_add (st, 3 * st->devices, e->stage, e->epoch, e->iteration, e->micro_batch,
                    e->start_s, e->end_s);
    else
    if ((d = s_who_device (e->who, "link:d")) >= 0 && d < st->devices) {
        s_device_t *dv = &st->dev[d];
        if (strcmp (e->stage, "uplink") == 0) {
            //  Oldest slot out: at most N micro-batches are ever in flight.
            int slot = 0;
            for (int i = 1; i < S_PENDING; i++)
                if (dv->pending[i].t < dv->pending[slot].t)
                    slot = i;
            dv->pending[slot].epoch = e->epoch;
            dv->pending[slot].iteration = e->iteration;
            dv->pending[slot].micro = e->micro_batch;
            dv->pending[slot].t = e->start_s > 0 ? e->start_s : 1e-9;
        }
        else
        if (strcmp (e->stage, "downlink") == 0) {
            for (int i = 0; i < S_PENDING; i++)
                if (dv->pending[i].t > 0 && dv->pending[i].epoch == e->epoch
                &&  dv->pending[i].iteration == e->iteration
                &&  dv->pending[i].micro == e->micro_batch) {
                    s_ring_add (st, 3 * d + 2, "in server", e->epoch, e->iteration,
                                e->micro_batch, dv->pending[i].t, e->end_s);
                    dv->pending[i].t = 0;
                    break;
                }
            if (e->epoch > dv->last_epoch
            ||  (e->epoch == dv->last_epoch && e->iteration > dv->last_iteration)) {
                dv->last_epoch = e->epoch;
                dv->last_iteration = e->iteration;
            }
        }
    }
}

static double
s_num (const cJSON *o, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (o, key);
    return cJSON_IsNumber (v) ? v->valuedouble : fallback;
}

//  pl_summary listener (reactor thread, every epoch end and the finish):
//  the epochs not seen yet go to the curves and the totals.
static void
s_on_summary (void *arg, const cJSON *root)
{
    srv_metrics_t *self = arg;
    s_state_t *st = self->live;
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (root, "epochs"), *ej;
    cJSON_ArrayForEach (ej, epochs) {
        int epoch = (int) s_num (ej, "epoch", 0);
        if (epoch <= st->last_summary_epoch)
            continue;
        st->last_summary_epoch = epoch;
        const cJSON *server = cJSON_GetObjectItemCaseSensitive (ej, "server");
        s_epoch_t e = {
            .epoch = epoch, .wall_s = s_num (ej, "wall_s", 0), .eval_s = s_num (ej, "eval_s", 0),
            .train_loss = s_num (ej, "train_loss", NAN), .train_acc = s_num (ej, "train_acc", NAN),
            .test_loss = s_num (ej, "test_loss", NAN), .test_acc = s_num (ej, "test_acc", NAN),
            .images_per_s = s_num (ej, "images_per_s", 0),
            .busy_s = s_num (server, "busy_s", 0), .idle_s = s_num (server, "idle_s", 0)
        };
        if (st->epochs_count == S_EPOCHS) {
            memmove (st->ep, st->ep + 1, (S_EPOCHS - 1) * sizeof st->ep[0]);
            st->epochs_count--;
        }
        st->ep[st->epochs_count++] = e;
        st->busy_total_s += e.busy_s;
        st->idle_total_s += e.idle_s;
        const cJSON *wb;
        int w = 0;
        cJSON_ArrayForEach (wb, cJSON_GetObjectItemCaseSensitive (server, "worker_busy_s")) {
            if (w >= S_WORKERS || !cJSON_IsNumber (wb))
                break;
            double idle = e.wall_s - wb->valuedouble;
            st->worker_busy_total_s[w] += wb->valuedouble;
            st->worker_idle_total_s[w] += idle > 0 ? idle : 0.0;
            w++;
        }
        const cJSON *dj;
        cJSON_ArrayForEach (dj, cJSON_GetObjectItemCaseSensitive (ej, "devices")) {
            int id = (int) s_num (dj, "id", -1);
            if (id < 0 || id >= st->devices)
                continue;
            s_device_t *d = &st->dev[id];
            d->forward_s = s_num (dj, "forward_s", 0);
            d->backward_s = s_num (dj, "backward_s", 0);
            d->update_s = s_num (dj, "update_s", 0);
            d->idle_s = s_num (dj, "idle_s", 0);
            d->forward_total_s += d->forward_s;
            d->backward_total_s += d->backward_s;
            d->update_total_s += d->update_s;
            d->idle_total_s += d->idle_s;
            d->bytes_up_total += s_num (dj, "bytes_up", 0);
            d->bytes_down_total += s_num (dj, "bytes_down", 0);
            double rtt_ms = s_num (dj, "rtt_ms_probe", 0);
            if (rtt_ms > 0) {
                d->rtt_s = rtt_ms / 1000.0;
                d->up_Bps = s_num (dj, "uplink_mbps_probe", 0) * 1e6 / 8;
                d->down_Bps = s_num (dj, "downlink_mbps_probe", 0) * 1e6 / 8;
            }
            double traffic = s_num (dj, "uplink_mbps_traffic", 0);
            if (traffic > 0)
                d->traffic_up_Bps = traffic * 1e6 / 8;
        }
    }
    //  The planner's measured links, before any epoch carries probes.
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive (root, "plan");
    if (cJSON_IsTrue (cJSON_GetObjectItemCaseSensitive (plan, "measured_links"))) {
        const cJSON *dj;
        cJSON_ArrayForEach (dj, cJSON_GetObjectItemCaseSensitive (plan, "devices")) {
            int id = (int) s_num (dj, "id", -1);
            if (id < 0 || id >= st->devices || st->dev[id].rtt_s > 0)
                continue;
            st->dev[id].rtt_s = s_num (dj, "rtt_ms", 0) / 1000.0;
            st->dev[id].up_Bps = s_num (dj, "uplink_mbps", 0) * 1e6 / 8;
            st->dev[id].down_Bps = s_num (dj, "downlink_mbps", 0) * 1e6 / 8;
        }
    }
    s_publish (self);
}

void
srv_metrics_tick (srv_metrics_t *self, const srv_metrics_sample_t *srv)
{
    if (!self)
        return;
    double now = pl_monotonic ();
    if (now - self->last_publish < S_PUBLISH_S)
        return;
    s_state_t *st = self->live;
    st->started = srv->started;
    st->done = srv->done;
    st->epoch = srv->epoch;
    st->split = srv->split;
    st->workers = srv->workers;
    st->joined = srv->joined;
    st->iterations = srv->iterations;
    st->epoch_iterations = srv->epoch_iterations;
    st->loss_sum = srv->loss_sum;
    st->correct = srv->correct;
    st->samples = srv->samples;
    st->epoch_elapsed_s = srv->epoch_elapsed_s;
    for (int i = 0; i < st->devices; i++) {
        s_device_t *m = &st->dev[i];
        m->joined = srv->dev[i].joined;
        m->active = srv->dev[i].active;
        m->micro = srv->dev[i].micro;
        m->queue = srv->dev[i].queue;
    }
    st->refused[SRV_REFUSED_CURVE] = (double) atomic_load (&self->curve_refused);
    s_publish (self);
}

void
srv_metrics_note_drop (srv_metrics_t *self, int device)
{
    if (self && device >= 0 && device < self->live->devices)
        self->live->dev[device].drops++;
}

void
srv_metrics_note_rejoin (srv_metrics_t *self, int device)
{
    if (self && device >= 0 && device < self->live->devices)
        self->live->dev[device].rejoins++;
}

void
srv_metrics_note_refused (srv_metrics_t *self, srv_refused_t why)
{
    if (self && why >= 0 && why < SRV_REFUSED_KINDS)
        self->live->refused[why]++;
}

//  ---------------------------------------------------------------------
//  CURVE refusals: a libzmq monitor on the ROUTER, read by this thread
//  (the events come from libzmq's I/O thread; the reactor never sees them).

static void *
s_monitor_thread (void *arg)
{
    srv_metrics_t *self = arg;
    while (!atomic_load (&self->monitor_stop)) {
        zmq_pollitem_t item = { self->monitor_sock, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, 200) <= 0)
            continue;
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        if (zmq_msg_recv (&frame, self->monitor_sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&frame);
            continue;
        }
        uint16_t event = 0;
        if (zmq_msg_size (&frame) >= 2)
            memcpy (&event, zmq_msg_data (&frame), 2);
        bool more = zmq_msg_more (&frame);
        zmq_msg_close (&frame);
        while (more) {              //  the endpoint frame
            zmq_msg_init (&frame);
            if (zmq_msg_recv (&frame, self->monitor_sock, 0) < 0)
                more = false;
            else
                more = zmq_msg_more (&frame);
            zmq_msg_close (&frame);
        }
        if (event & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                   | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
            atomic_fetch_add (&self->curve_refused, 1);
    }
    return NULL;
}

int
srv_metrics_watch (srv_metrics_t *self, void *socket)
{
    if (!self || self->monitor_running)
        return 0;
    char endpoint[64];
    snprintf (endpoint, sizeof endpoint, "inproc://pl-metrics-monitor-%p", (void *) self);
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
               | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor (socket, endpoint, events)) {
        pl_log_warn ("metrics: cannot monitor the ROUTER socket (%s); CURVE refusals are "
                     "not counted", zmq_strerror (errno));
        return -1;
    }
    self->monitor_sock = zmq_socket (zsys_init (), ZMQ_PAIR);
    if (!self->monitor_sock || zmq_connect (self->monitor_sock, endpoint)) {
        pl_log_warn ("metrics: monitor socket: %s", zmq_strerror (errno));
        if (self->monitor_sock)
            zmq_close (self->monitor_sock);
        self->monitor_sock = NULL;
        zmq_socket_monitor (socket, NULL, 0);
        return -1;
    }
    self->watched = socket;
    atomic_store (&self->monitor_stop, false);
    if (pthread_create (&self->monitor, NULL, s_monitor_thread, self)) {
        zmq_close (self->monitor_sock);
        self->monitor_sock = NULL;
        zmq_socket_monitor (socket, NULL, 0);
        return -1;
    }
    self->monitor_running = true;
    return 0;
}

//  ---------------------------------------------------------------------
//  The HTTP thread's side: formatting a snapshot

typedef struct {
    char *data;
    size_t len, cap;
} s_buf_t;

static void __attribute__ ((format (printf, 2, 3)))
s_put (s_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start (ap, fmt);
        int n = vsnprintf (b->data + b->len, b->cap - b->len, fmt, ap);
        va_end (ap);
        if (n >= 0 && (size_t) n < b->cap - b->len) {
            b->len += (size_t) n;
            return;
        }
        b->cap = 2 * b->cap + (n > 0 ? (size_t) n : 0);
        b->data = nn_realloc (b->data, b->cap);
    }
}

static void
s_head (s_buf_t *b, const char *name, const char *type, const char *help)
{
    s_put (b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  A sample value: Prometheus text takes NaN and +Inf as words.
static void
s_val (s_buf_t *b, double v)
{
    if (isnan (v))
        s_put (b, " NaN\n");
    else
    if (isinf (v))
        s_put (b, v > 0 ? " +Inf\n" : " -Inf\n");
    else
        s_put (b, " %.17g\n", v);
}

static void
s_gauge (s_buf_t *b, const char *name, const char *type, const char *help, double v)
{
    s_head (b, name, type, help);
    s_put (b, "%s", name);
    s_val (b, v);
}

//  One sample per device of the value at offset off in s_device_t.
static void
s_per_device (s_buf_t *b, const s_state_t *st, const char *name, const char *type,
              const char *help, size_t off)
{
    s_head (b, name, type, help);
    for (int i = 0; i < st->devices; i++) {
        double v = *(const double *) ((const char *) &st->dev[i] + off);
        s_put (b, "%s{device=\"%d\"}", name, i);
        s_val (b, v);
    }
}

//  Label values are ours (config names, checked by pl_config) but are
//  escaped anyway, as the format asks.
static void
s_label (s_buf_t *b, const char *key, const char *value, bool last)
{
    s_put (b, "%s=\"", key);
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            s_put (b, "\\%c", *p);
        else
        if (*p == '\n')
            s_put (b, "\\n");
        else
            s_put (b, "%c", *p);
    }
    s_put (b, "\"%s", last ? "" : ",");
}

typedef struct {
    double rss_bytes, cpu_s, ckpt_age_s;
} s_process_t;

static void
s_process_read (const srv_metrics_t *self, s_process_t *p)
{
    p->rss_bytes = NAN;
    long pages = 0, resident = 0;
    FILE *f = fopen ("/proc/self/statm", "r");
    if (f) {
        if (fscanf (f, "%ld %ld", &pages, &resident) == 2)
            p->rss_bytes = (double) resident * (double) sysconf (_SC_PAGESIZE);
        fclose (f);
    }
    struct timespec ts;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
    p->cpu_s = (double) ts.tv_sec + ts.tv_nsec * 1e-9;
    //  Each checkpoint is renamed into DIR/checkpoints: the directory's
    //  change time is the newest one's.
    struct stat sb;
    p->ckpt_age_s = stat (self->ckpt_dir, &sb) == 0
        ? pl_wall_clock () - ((double) sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9) : NAN;
}

static char *
s_render_metrics (const srv_metrics_t *self, const s_state_t *st, size_t *len)
{
    s_buf_t b = { nn_malloc (16384), 0, 16384 };
    s_process_t p;
    s_process_read (self, &p);
    s_head (&b, "pipelearn_run_info", "gauge",
            "The run's configuration as labels; the value is 1.");
    s_put (&b, "pipelearn_run_info{");
    s_label (&b, "mode", st->mode, false);
    s_label (&b, "model", st->model, false);
    s_label (&b, "dataset", st->dataset, false);
    s_label (&b, "aggregation", st->aggregation, false);
    s_label (&b, "codec", "float32", false);
    s_label (&b, "results_dir", st->results, true);
    s_put (&b, "} 1\n");
    s_gauge (&b, "pipelearn_split_point", "gauge",
             "Units of the model on the devices (the split point).", st->split);
    s_gauge (&b, "pipelearn_batch_size", "gauge", "Samples per iteration and device.",
             st->batch);
    s_gauge (&b, "pipelearn_devices", "gauge", "Devices the run is configured for.",
             st->devices);
    s_gauge (&b, "pipelearn_devices_joined", "gauge", "Devices with a session now.",
             st->joined);
    s_gauge (&b, "pipelearn_server_workers", "gauge", "Server compute worker threads.",
             st->workers);
    s_gauge (&b, "pipelearn_training_started", "gauge",
             "1 once every device joined and training began.", st->started);
    s_gauge (&b, "pipelearn_epochs", "gauge", "Epochs the run is configured for.",
             st->epochs);
    s_gauge (&b, "pipelearn_epoch", "gauge", "The epoch in progress (1-based; 0 before).",
             st->epoch);
    s_gauge (&b, "pipelearn_epochs_completed_total", "counter", "Epochs completed.",
             st->last_summary_epoch);
    s_gauge (&b, "pipelearn_epoch_iterations", "gauge",
             "Iterations per device and epoch (0: unknown).", st->epoch_iterations);
    s_gauge (&b, "pipelearn_epoch_iterations_done", "gauge",
             "Iterations completed in the current epoch, summed over the devices.",
             (double) st->iterations);
    s_gauge (&b, "pipelearn_epoch_elapsed_seconds", "gauge",
             "Training time of the current epoch so far.", st->epoch_elapsed_s);
    s_gauge (&b, "pipelearn_epoch_running_train_loss", "gauge",
             "Mean training loss of the current epoch so far (server side).",
             st->iterations ? st->loss_sum / (double) st->iterations : NAN);
    const s_epoch_t *last = st->epochs_count ? &st->ep[st->epochs_count - 1] : NULL;
    s_gauge (&b, "pipelearn_train_loss", "gauge", "Training loss of the last epoch.",
             last ? last->train_loss : NAN);
    s_gauge (&b, "pipelearn_train_accuracy_ratio", "gauge",
             "Training accuracy of the last epoch (0..1).", last ? last->train_acc : NAN);
    s_gauge (&b, "pipelearn_test_loss", "gauge", "Test loss after the last epoch.",
             last ? last->test_loss : NAN);
    s_gauge (&b, "pipelearn_test_accuracy_ratio", "gauge",
             "Test accuracy after the last epoch (0..1).", last ? last->test_acc : NAN);
    s_gauge (&b, "pipelearn_epoch_duration_seconds", "gauge",
             "Training wall time of the last epoch (evaluation excluded).",
             last ? last->wall_s : NAN);
    s_gauge (&b, "pipelearn_images_per_second", "gauge",
             "Training throughput of the last epoch.", last ? last->images_per_s : NAN);
    s_gauge (&b, "pipelearn_server_busy_seconds_total", "counter",
             "Server worker time spent computing, summed over the workers.",
             st->busy_total_s);
    s_gauge (&b, "pipelearn_server_idle_seconds_total", "counter",
             "Server worker time idle (epoch wall time x workers - busy).",
             st->idle_total_s);
    int workers = st->workers < S_WORKERS ? st->workers : S_WORKERS;
    s_head (&b, "pipelearn_server_worker_busy_seconds_total", "counter",
            "Time a server worker thread spent computing (completed epochs).");
    for (int w = 0; w < workers; w++)
        s_put (&b, "pipelearn_server_worker_busy_seconds_total{worker=\"%d\"} %.6f\n", w,
               st->worker_busy_total_s[w]);
    s_head (&b, "pipelearn_server_worker_idle_seconds_total", "counter",
            "Time a server worker thread stood idle (completed epochs).");
    for (int w = 0; w < workers; w++)
        s_put (&b, "pipelearn_server_worker_idle_seconds_total{worker=\"%d\"} %.6f\n", w,
               st->worker_idle_total_s[w]);
    s_head (&b, "pipelearn_device_joined", "gauge", "1 while the device has a session.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_joined{device=\"%d\"} %d\n", i, st->dev[i].joined);
    s_head (&b, "pipelearn_device_micro_batches", "gauge",
            "Micro-batches per iteration in the device's plan.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_micro_batches{device=\"%d\"} %d\n", i, st->dev[i].micro);
    s_head (&b, "pipelearn_device_queue_depth", "gauge",
            "The device's micro-batches at the server: queued plus in compute.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_queue_depth{device=\"%d\"} %d\n", i, st->dev[i].queue);
    s_head (&b, "pipelearn_device_iteration", "gauge",
            "Newest iteration (of the newest epoch) the server sent gradients for.");
    for (int i = 0; i < st->devices; i++)
        s_put (&b, "pipelearn_device_iteration{device=\"%d\"} %d\n", i,
               st->dev[i].last_iteration);
#define S_DEV(name, type, help, field) \
    s_per_device (&b, st, name, type, help, offsetof (s_device_t, field))
    S_DEV ("pipelearn_device_forward_seconds_total", "counter",
           "Device time in forward passes (completed epochs).", forward_total_s);
    S_DEV ("pipelearn_device_backward_seconds_total", "counter",
           "Device time in backward passes (completed epochs).", backward_total_s);
    S_DEV ("pipelearn_device_update_seconds_total", "counter",
           "Device time in optimiser steps (completed epochs).", update_total_s);
    S_DEV ("pipelearn_device_idle_seconds_total", "counter",
           "Device time waiting for the server (completed epochs).", idle_total_s);
    S_DEV ("pipelearn_device_uplink_bytes_total", "counter",
           "Bytes the device sent (completed epochs).", bytes_up_total);
    S_DEV ("pipelearn_device_downlink_bytes_total", "counter",
           "Bytes the device received (completed epochs).", bytes_down_total);
    S_DEV ("pipelearn_device_rtt_seconds", "gauge",
           "Round-trip time of the last link measurement (0: none).", rtt_s);
    S_DEV ("pipelearn_device_uplink_bytes_per_second", "gauge",
           "Uplink rate of the last link measurement (0: none).", up_Bps);
    S_DEV ("pipelearn_device_downlink_bytes_per_second", "gauge",
           "Downlink rate of the last link measurement (0: none).", down_Bps);
    S_DEV ("pipelearn_device_uplink_traffic_bytes_per_second", "gauge",
           "Uplink rate estimated from the last epoch's training traffic (0: none).",
           traffic_up_Bps);
    S_DEV ("pipelearn_device_drops_total", "counter",
           "Times the device was dropped from the run.", drops);
    S_DEV ("pipelearn_device_rejoins_total", "counter",
           "Times the device rejoined a running run.", rejoins);
#undef S_DEV
    static const char *reasons[SRV_REFUSED_KINDS] = { "malformed", "hello", "curve" };
    s_head (&b, "pipelearn_refused_peers_total", "counter",
            "Peers refused: malformed messages, refused HELLOs, failed CURVE handshakes.");
    for (int i = 0; i < SRV_REFUSED_KINDS; i++)
        s_put (&b, "pipelearn_refused_peers_total{reason=\"%s\"} %.17g\n", reasons[i],
               st->refused[i]);
    s_gauge (&b, "pipelearn_checkpoint_age_seconds", "gauge",
             "Seconds since the newest checkpoint was written (NaN: none).", p.ckpt_age_s);
    s_gauge (&b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
             p.rss_bytes);
    s_gauge (&b, "process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.", p.cpu_s);
    s_gauge (&b, "process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.", self->start_wall);
    *len = b.len;
    return b.data;
}

static cJSON *
s_num_or_null (double v)
{
    return isfinite (v) ? cJSON_CreateNumber (v) : cJSON_CreateNull ();
}

static char *
s_render_state (const srv_metrics_t *self, const s_state_t *st, size_t *len)
{
    s_process_t p;
    s_process_read (self, &p);
    cJSON *root = cJSON_CreateObject ();
    cJSON *run = cJSON_AddObjectToObject (root, "run");
    cJSON_AddStringToObject (run, "mode", st->mode);
    cJSON_AddStringToObject (run, "model", st->model);
    cJSON_AddStringToObject (run, "dataset", st->dataset);
    cJSON_AddStringToObject (run, "results_dir", st->results);
    cJSON_AddNumberToObject (run, "devices", st->devices);
    cJSON_AddNumberToObject (run, "joined", st->joined);
    cJSON_AddNumberToObject (run, "epochs", st->epochs);
    cJSON_AddNumberToObject (run, "batch_size", st->batch);
    cJSON_AddNumberToObject (run, "split_point", st->split);
    cJSON_AddNumberToObject (run, "workers", st->workers);
    cJSON_AddBoolToObject (run, "started", st->started);
    cJSON_AddBoolToObject (run, "done", st->done);
    cJSON_AddNumberToObject (run, "epoch", st->epoch);
    cJSON_AddNumberToObject (run, "epochs_completed", st->last_summary_epoch);
    cJSON_AddNumberToObject (run, "iterations_done", (double) st->iterations);
    cJSON_AddNumberToObject (run, "epoch_iterations", st->epoch_iterations);
    cJSON_AddNumberToObject (run, "epoch_elapsed_s", st->epoch_elapsed_s);
    cJSON_AddNumberToObject (run, "now_s", pl_wall_clock () - st->origin);
    cJSON_AddItemToObject (run, "running_train_loss",
                           s_num_or_null (st->iterations ? st->loss_sum / st->iterations
                                                         : NAN));
    cJSON_AddItemToObject (run, "running_train_acc",
                           s_num_or_null (st->samples > 0 ? st->correct / st->samples : NAN));
    cJSON *eps = cJSON_AddArrayToObject (root, "epochs");
    for (int i = 0; i < st->epochs_count; i++) {
        const s_epoch_t *e = &st->ep[i];
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "epoch", e->epoch);
        cJSON_AddItemToObject (o, "wall_s", s_num_or_null (e->wall_s));
        cJSON_AddItemToObject (o, "train_loss", s_num_or_null (e->train_loss));
        cJSON_AddItemToObject (o, "train_acc", s_num_or_null (e->train_acc));
        cJSON_AddItemToObject (o, "test_loss", s_num_or_null (e->test_loss));
        cJSON_AddItemToObject (o, "test_acc", s_num_or_null (e->test_acc));
        cJSON_AddItemToObject (o, "images_per_s", s_num_or_null (e->images_per_s));
        cJSON_AddItemToObject (o, "server_busy_s", s_num_or_null (e->busy_s));
        cJSON_AddItemToObject (o, "server_idle_s", s_num_or_null (e->idle_s));
        cJSON_AddItemToArray (eps, o);
    }
    cJSON *devs = cJSON_AddArrayToObject (root, "devices");
    for (int i = 0; i < st->devices; i++) {
        const s_device_t *d = &st->dev[i];
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "id", i);
        cJSON_AddBoolToObject (o, "joined", d->joined);
        cJSON_AddBoolToObject (o, "active", d->active);
        cJSON_AddNumberToObject (o, "micro_batches", d->micro);
        cJSON_AddNumberToObject (o, "queue_depth", d->queue);
        cJSON_AddNumberToObject (o, "epoch", d->last_epoch);
        cJSON_AddNumberToObject (o, "iteration", d->last_iteration);
        cJSON_AddNumberToObject (o, "forward_s", d->forward_s);
        cJSON_AddNumberToObject (o, "backward_s", d->backward_s);
        cJSON_AddNumberToObject (o, "update_s", d->update_s);
        cJSON_AddNumberToObject (o, "idle_s", d->idle_s);
        cJSON_AddNumberToObject (o, "bytes_up_total", d->bytes_up_total);
        cJSON_AddNumberToObject (o, "bytes_down_total", d->bytes_down_total);
        cJSON_AddNumberToObject (o, "rtt_ms", d->rtt_s * 1000.0);
        cJSON_AddNumberToObject (o, "uplink_mbps", d->up_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "downlink_mbps", d->down_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "uplink_traffic_mbps", d->traffic_up_Bps * 8 / 1e6);
        cJSON_AddNumberToObject (o, "drops", d->drops);
        cJSON_AddNumberToObject (o, "rejoins", d->rejoins);
        cJSON_AddItemToArray (devs, o);
    }
    cJSON *ref = cJSON_AddObjectToObject (root, "refused");
    cJSON_AddNumberToObject (ref, "malformed", st->refused[SRV_REFUSED_MALFORMED]);
    cJSON_AddNumberToObject (ref, "hello", st->refused[SRV_REFUSED_HELLO]);
    cJSON_AddNumberToObject (ref, "curve", st->refused[SRV_REFUSED_CURVE]);
    cJSON *proc = cJSON_AddObjectToObject (root, "process");
    cJSON_AddItemToObject (proc, "rss_bytes", s_num_or_null (p.rss_bytes));
    cJSON_AddNumberToObject (proc, "cpu_s", p.cpu_s);
    cJSON_AddItemToObject (proc, "checkpoint_age_s", s_num_or_null (p.ckpt_age_s));
    //  Gantt: rows of [stage, epoch, iteration, micro_batch, start_s, end_s].
    cJSON *g = cJSON_AddObjectToObject (root, "gantt");
    cJSON *stages = cJSON_AddArrayToObject (g, "stages");
    for (int i = 0; i < st->stages; i++)
        cJSON_AddItemToArray (stages, cJSON_CreateString (st->stage[i]));
    cJSON *rows = cJSON_AddArrayToObject (g, "rows");
    for (int r = 0; r < st->rows; r++) {
        const s_ring_t *ring = &st->row[r];
        if (!ring->count)
            continue;
        char who[32];
        int d = r / 3;
        if (r == 3 * st->devices)
            snprintf (who, sizeof who, "server");
        else
            snprintf (who, sizeof who, r % 3 == 0 ? "device%d" : r % 3 == 1 ? "server:d%d"
                                                                           : "link:d%d", d);
        cJSON *row = cJSON_CreateObject ();
        cJSON_AddStringToObject (row, "who", who);
        cJSON *evs = cJSON_AddArrayToObject (row, "events");
        int first = (ring->next - ring->count + S_RING) % S_RING;
        for (int k = 0; k < ring->count; k++) {
            const s_event_t *e = &ring->ev[(first + k) % S_RING];
            double v[6] = { e->stage, e->epoch, e->iteration, e->micro, e->start, e->end };
            cJSON_AddItemToArray (evs, cJSON_CreateDoubleArray (v, 6));
        }
        cJSON_AddItemToArray (rows, row);
    }
    char *text = cJSON_PrintUnformatted (root);
    cJSON_Delete (root);
    if (!text)              //  cJSON out of memory: as nn_malloc would, abort
        abort ();
    *len = strlen (text);
    return text;
}

static enum MHD_Result
s_reply (struct MHD_Connection *c, unsigned status, const char *type, void *data,
         size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer (len, data, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header (r, "Content-Type", type);
    MHD_add_response_header (r, "Cache-Control", "no-store");
    MHD_add_response_header (r, "X-Content-Type-Options", "nosniff");
    //  The dashboard is one page with its script and style inline; it
    //  fetches only from here.
    MHD_add_response_header (r, "Content-Security-Policy",
                             "default-src 'none'; script-src 'unsafe-inline'; "
                             "style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    enum MHD_Result rc = MHD_queue_response (c, status, r);
    MHD_destroy_response (r);
    return rc;
}

static enum MHD_Result
s_on_request (void *cls, struct MHD_Connection *c, const char *url, const char *method,
              const char *version, const char *upload_data, size_t *upload_data_size,
              void **req_cls)
{
    srv_metrics_t *self = cls;
    (void) version;
    (void) upload_data;
    //  Answer once the headers are in; a request body is not read.
    if (!*req_cls) {
        *req_cls = self;
        return MHD_YES;
    }
    *upload_data_size = 0;
    if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
        static char text[] = "method not allowed\n";
        return s_reply (c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", text,
                        sizeof text - 1, MHD_RESPMEM_PERSISTENT);
    }
    bool metrics = strcmp (url, "/metrics") == 0;
    bool state = strcmp (url, "/api/state.json") == 0;
    if (strcmp (url, "/") == 0 || strcmp (url, "/index.html") == 0)
        return s_reply (c, MHD_HTTP_OK, "text/html; charset=utf-8",
                        (void *) srv_dashboard_html, srv_dashboard_html_size,
                        MHD_RESPMEM_PERSISTENT);
    if (!metrics && !state) {
        static char text[] = "not found\n";
        return s_reply (c, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", text,
                        sizeof text - 1, MHD_RESPMEM_PERSISTENT);
    }
    //  One MHD thread: self->view is this thread's alone.
    pthread_mutex_lock (&self->lock);
    memcpy (self->view, self->shared, self->state_size);
    pthread_mutex_unlock (&self->lock);
    size_t len = 0;
    char *body = metrics ? s_render_metrics (self, self->view, &len)
                         : s_render_state (self, self->view, &len);
    //  MHD frees it with free(): nn_malloc is malloc underneath.
    return s_reply (c, MHD_HTTP_OK,
                    metrics ? "text/plain; version=0.0.4; charset=utf-8"
                            : "application/json", body, len, MHD_RESPMEM_MUST_FREE);
}

static void
s_mhd_log (void *cls, const char *fmt, va_list ap)
{
    (void) cls;
    char line[512];
    vsnprintf (line, sizeof line, fmt, ap);
    size_t n = strlen (line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    pl_log_warn ("metrics: %s", line);
}

//  ---------------------------------------------------------------------

srv_metrics_t *
srv_metrics_new (const char *listen, const srv_metrics_sample_t *srv, const char *results,
                 pl_timeline_t *timeline, pl_summary_t *summary, char *err, size_t err_size)
{
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    if (srv_metrics_parse_listen (listen, &addr, &addr_len, err, err_size))
        return NULL;
    srv_metrics_t *self = nn_calloc (1, sizeof *self);
    int devices = srv->devices < SRV_MAX_DEVICES ? srv->devices : SRV_MAX_DEVICES;
    int rows = 3 * devices + 1;
    self->state_size = sizeof (s_state_t) + (size_t) rows * sizeof (s_ring_t);
    self->live = nn_calloc (1, self->state_size);
    self->shared = nn_calloc (1, self->state_size);
    self->view = nn_calloc (1, self->state_size);
    pthread_mutex_init (&self->lock, NULL);
    s_state_t *st = self->live;
    st->rows = rows;
    st->devices = devices;
    snprintf (st->mode, sizeof st->mode, "%s", srv->mode);
    snprintf (st->model, sizeof st->model, "%s", srv->model);
    snprintf (st->dataset, sizeof st->dataset, "%s", srv->dataset);
    snprintf (st->aggregation, sizeof st->aggregation, "%s", srv->aggregation);
    //  The results directory's name only, never its path.
    char copy[1024];
    snprintf (copy, sizeof copy, "%s", results);
    size_t n = strlen (copy);
    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = 0;
    const char *slash = strrchr (copy, '/');
    snprintf (st->results, sizeof st->results, "%s", slash ? slash + 1 : copy);
    snprintf (self->ckpt_dir, sizeof self->ckpt_dir, "%s/checkpoints", results);
    st->epochs = srv->epochs;
    st->batch = srv->batch;
    st->split = srv->split;
    st->workers = srv->workers;
    st->origin = srv->origin;
    for (int i = 0; i < devices; i++) {
        st->dev[i].micro = srv->dev[i].micro;
        st->dev[i].last_iteration = -1;
    }
    self->start_wall = pl_wall_clock ();
    memcpy (self->shared, self->live, self->state_size);

    //  libmicrohttpd's thread inherits this thread's signal mask: it must
    //  not take SIGINT/SIGTERM/SIGHUP, which the reactor waits for.
    sigset_t block, old;
    sigemptyset (&block);
    sigaddset (&block, SIGINT);
    sigaddset (&block, SIGTERM);
    sigaddset (&block, SIGHUP);
    sigaddset (&block, SIGPIPE);
    pthread_sigmask (SIG_BLOCK, &block, &old);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    self->httpd = MHD_start_daemon (
        flags, 0, NULL, NULL, s_on_request, self,
        MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, NULL,    //  first, or MHD logs on its own
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned) S_CONNECTIONS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned) S_PER_IP,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) S_CONN_MEMORY,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) S_CONN_TIMEOUT,
        MHD_OPTION_END);
    int saved = errno;
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    if (!self->httpd) {
        nn_errf (err, err_size, "metrics: cannot listen on %s: %s", listen,
                 saved ? strerror (saved) : "libmicrohttpd refused");
        srv_metrics_destroy (&self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info (self->httpd,
                                                            MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? (int) info->port : -1;
    self->timeline = timeline;
    self->summary = summary;
    pl_timeline_set_listener (timeline, s_on_event, self);
    pl_summary_set_listener (summary, s_on_summary, self);
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr.ss_family == AF_INET6)
        inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &addr)->sin6_addr, host, sizeof host);
    else
        inet_ntop (AF_INET, &((struct sockaddr_in *) &addr)->sin_addr, host, sizeof host);
    pl_log_info ("metrics: serving http://%s%s%s:%d/ (/metrics, /api/state.json)",
                 addr.ss_family == AF_INET6 ? "[" : "", host,
                 addr.ss_family == AF_INET6 ? "]" : "", self->port);
    return self;
}

void
srv_metrics_destroy (srv_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    srv_metrics_t *self = *self_p;
    if (self->httpd)
        MHD_stop_daemon (self->httpd);
    if (self->monitor_running) {
        atomic_store (&self->monitor_stop, true);
        pthread_join (self->monitor, NULL);
        zmq_socket_monitor (self->watched, NULL, 0);
    }
    if (self->monitor_sock)
        zmq_close (self->monitor_sock);
    if (self->timeline)
        pl_timeline_set_listener (self->timeline, NULL, NULL);
    if (self->summary)
        pl_summary_set_listener (self->summary, NULL, NULL);
    pthread_mutex_destroy (&self->lock);
    nn_free (self->live);
    nn_free (self->shared);
    nn_free (self->view);
    nn_free (self);
    *self_p = NULL;
}

int
srv_metrics_port (const srv_metrics_t *self)
{
    return self ? self->port : -1;
}
