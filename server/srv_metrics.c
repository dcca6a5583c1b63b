/*  srv_metrics.c: see srv_metrics.h. */
#include "srv_metrics.h"
#include "srv_metrics_state.h"

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
//  libmicrohttpd limits: a scraper and a browser or two, never a crowd.
#define S_CONNECTIONS   16
#define S_PER_IP        8
#define S_CONN_MEMORY   (16 * 1024)     //  request line + headers; more: 431
#define S_CONN_TIMEOUT  10              //  seconds a connection may idle

struct _srv_metrics_t {
    struct MHD_Daemon *httpd;
    int port;
    size_t state_size;
    srv_metrics_state_t *live;            //  the reactor's
    srv_metrics_state_t *shared;          //  the published copy, under lock
    srv_metrics_state_t *view;            //  the HTTP thread's copy (one MHD thread)
    pthread_mutex_t lock;
    double last_publish;        //  pl_monotonic
    char ckpt_dir[1024];        //  stat()ed for the checkpoint age; never served
    double start_wall;          //  process start, for process_start_time_seconds
    pl_timeline_t *timeline;
    pl_summary_t *summary;
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
s_stage_index (srv_metrics_state_t *st, const char *name)
{
    for (int i = 0; i < st->stages; i++)
        if (strcmp (st->stage[i], name) == 0)
            return i;
    if (st->stages == SRV_METRICS_STAGES)
        return -1;
    snprintf (st->stage[st->stages], sizeof st->stage[0], "%s", name);
    return st->stages++;
}

static void
s_ring_add (srv_metrics_state_t *st, int row, const char *stage, int epoch, int iteration,
            int micro, double start, double end)
{
    if (row < 0 || row >= st->rows)
        return;
    int s = s_stage_index (st, stage);
    if (s < 0)
        return;
    srv_metrics_ring_t *r = &st->row[row];
    r->ev[r->next] = (srv_metrics_event_t) { start, end, epoch, iteration, micro, s };
    r->next = (r->next + 1) % SRV_METRICS_RING;
    if (r->count < SRV_METRICS_RING)
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
    srv_metrics_state_t *st = self->live;
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
        srv_metrics_device_t *dv = &st->dev[d];
        if (strcmp (e->stage, "uplink") == 0) {
            //  Oldest slot out: at most N micro-batches are ever in flight.
            int slot = 0;
            for (int i = 1; i < SRV_METRICS_PENDING; i++)
                if (dv->pending[i].t < dv->pending[slot].t)
                    slot = i;
            dv->pending[slot].epoch = e->epoch;
            dv->pending[slot].iteration = e->iteration;
            dv->pending[slot].micro = e->micro_batch;
            dv->pending[slot].t = e->start_s > 0 ? e->start_s : 1e-9;
        }
        else
        if (strcmp (e->stage, "downlink") == 0) {
            for (int i = 0; i < SRV_METRICS_PENDING; i++)
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
    srv_metrics_state_t *st = self->live;
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (root, "epochs"), *ej;
    cJSON_ArrayForEach (ej, epochs) {
        int epoch = (int) s_num (ej, "epoch", 0);
        if (epoch <= st->last_summary_epoch)
            continue;
        st->last_summary_epoch = epoch;
        const cJSON *server = cJSON_GetObjectItemCaseSensitive (ej, "server");
        srv_metrics_epoch_t e = {
            .epoch = epoch, .wall_s = s_num (ej, "wall_s", 0), .eval_s = s_num (ej, "eval_s", 0),
            .train_loss = s_num (ej, "train_loss", NAN), .train_acc = s_num (ej, "train_acc", NAN),
            .test_loss = s_num (ej, "test_loss", NAN), .test_acc = s_num (ej, "test_acc", NAN),
            .images_per_s = s_num (ej, "images_per_s", 0),
            .busy_s = s_num (server, "busy_s", 0), .idle_s = s_num (server, "idle_s", 0)
        };
        if (st->epochs_count == SRV_METRICS_EPOCHS) {
            memmove (st->ep, st->ep + 1, (SRV_METRICS_EPOCHS - 1) * sizeof st->ep[0]);
            st->epochs_count--;
        }
        st->ep[st->epochs_count++] = e;
        st->busy_total_s += e.busy_s;
        st->idle_total_s += e.idle_s;
        const cJSON *wb;
        int w = 0;
        cJSON_ArrayForEach (wb, cJSON_GetObjectItemCaseSensitive (server, "worker_busy_s")) {
            if (w >= SRV_METRICS_WORKERS || !cJSON_IsNumber (wb))
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
            srv_metrics_device_t *d = &st->dev[id];
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
    srv_metrics_state_t *st = self->live;
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
        srv_metrics_device_t *m = &st->dev[i];
        m->joined = srv->dev[i].joined;
        m->active = srv->dev[i].active;
        m->split = srv->dev[i].split;
        m->micro = srv->dev[i].micro;
        m->queue = srv->dev[i].queue;
    }
    st->refused[SRV_REFUSED_CURVE] = (double) srv->curve_refused;
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

//  What the process costs now (memory, CPU, the newest checkpoint's age).
static void
s_process_read (const srv_metrics_t *self, srv_metrics_process_t *p)
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
    p->start_wall = self->start_wall;
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
    srv_metrics_process_t proc;
    s_process_read (self, &proc);
    size_t len = 0;
    char *body = metrics ? srv_metrics_render_text (self->view, &proc, &len)
                         : srv_metrics_render_json (self->view, &proc, &len);
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
    self->state_size = sizeof (srv_metrics_state_t) + (size_t) rows * sizeof (srv_metrics_ring_t);
    self->live = nn_calloc (1, self->state_size);
    self->shared = nn_calloc (1, self->state_size);
    self->view = nn_calloc (1, self->state_size);
    pthread_mutex_init (&self->lock, NULL);
    srv_metrics_state_t *st = self->live;
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
        st->dev[i].split = srv->dev[i].split;
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
