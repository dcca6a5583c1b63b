/*  srv_metrics_stub.c: srv_metrics.h for a build without libmicrohttpd
    (-Dmetrics=disabled): --metrics is refused, the rest does nothing. */
#include "srv_metrics.h"

#include "nn_alloc.h"

srv_metrics_t *
srv_metrics_new (const char *listen, const srv_metrics_sample_t *srv, const char *results,
                 pl_timeline_t *timeline, pl_summary_t *summary, char *err, size_t err_size)
{
    (void) listen, (void) srv, (void) results, (void) timeline, (void) summary;
    nn_errf (err, err_size, "metrics: this pipelearn-server was built without "
             "libmicrohttpd (-Dmetrics=disabled)");
    return NULL;
}

void
srv_metrics_destroy (srv_metrics_t **self_p)
{
    if (self_p)
        *self_p = NULL;
}

int srv_metrics_port (const srv_metrics_t *self) { (void) self; return -1; }
void srv_metrics_tick (srv_metrics_t *self, const srv_metrics_sample_t *srv) { (void) self, (void) srv; }
void srv_metrics_note_drop (srv_metrics_t *self, int device) { (void) self, (void) device; }
void srv_metrics_note_rejoin (srv_metrics_t *self, int device) { (void) self, (void) device; }
void srv_metrics_note_refused (srv_metrics_t *self, srv_refused_t why) { (void) self, (void) why; }

int
srv_metrics_parse_listen (const char *spec, struct sockaddr_storage *addr,
                          socklen_t *addr_len, char *err, size_t err_size)
{
    (void) spec, (void) addr, (void) addr_len;
    return nn_errf (err, err_size, "metrics: built without libmicrohttpd");
}
