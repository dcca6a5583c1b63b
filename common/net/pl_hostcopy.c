/*  pl_hostcopy.c: the CPU cost of a loopback transfer (pl_hostcopy.h). */
#include "pl_hostcopy.h"

#include "nn_alloc.h"
#include "pl_timeline.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

static double
s_cpu_s (void)
{
    struct rusage ru;
    getrusage (RUSAGE_SELF, &ru);
    return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6
         + (double) ru.ru_stime.tv_sec + (double) ru.ru_stime.tv_usec / 1e6;
}

//  Frames kept in flight: enough to keep both ends and the I/O threads
//  busy, as the pipeline does.
#define S_IN_FLIGHT 4

static void
s_free (void *data, void *hint)
{
    (void) hint;
    nn_free (data);
}

//  One frame as the client sends one: a heap buffer filled from the
//  model's tensor, handed to libzmq without a copy and freed by libzmq.
//  The daemons keep such buffers in glibc's heap (pl_memory_setup), so
//  after the first frames the pages are reused, not faulted in afresh.
static bool
s_send (void *push, const char *src, size_t bytes)
{
    char *buf = nn_malloc (bytes);
    memcpy (buf, src, bytes);
    zmq_msg_t msg;
    if (zmq_msg_init_data (&msg, buf, bytes, s_free, NULL)) {
        nn_free (buf);
        return false;
    }
    if (zmq_msg_send (&msg, push, 0) != (int) bytes) {
        zmq_msg_close (&msg);
        return false;
    }
    return true;
}

//  And received as the server receives one: into libzmq's buffer, read in
//  place (the first layer reads the frame), then freed.
static bool
s_recv (void *pull, size_t bytes)
{
    zmq_msg_t msg;
    zmq_msg_init (&msg);
    bool ok = zmq_msg_recv (&msg, pull, 0) == (int) bytes;
    if (ok) {
        const unsigned char *p = zmq_msg_data (&msg);
        unsigned sum = 0;
        for (size_t i = 0; i < bytes; i += 64)
            sum += p[i];
        volatile unsigned sink = sum;
        (void) sink;
    }
    zmq_msg_close (&msg);
    return ok;
}

double
pl_hostcopy_measure (double seconds, size_t frame_bytes, char *err, size_t err_size)
{
    if (!(seconds >= 0.05 && seconds <= 10.0)) {
        nn_errf (err, err_size, "host copy: want 0.05..10 s, got %g", seconds);
        return -1.0;
    }
    frame_bytes = frame_bytes < ((size_t) 64 << 10) ? (size_t) 64 << 10
                : frame_bytes > ((size_t) 16 << 20) ? (size_t) 16 << 20 : frame_bytes;
    double result = -1.0;
    void *ctx = zmq_ctx_new ();
    void *pull = ctx ? zmq_socket (ctx, ZMQ_PULL) : NULL;
    void *push = ctx ? zmq_socket (ctx, ZMQ_PUSH) : NULL;
    char *buf = nn_malloc (frame_bytes);
    for (size_t i = 0; i < frame_bytes; i++)
        buf[i] = (char) (i * 31u);
    char endpoint[256];
    size_t endpoint_size = sizeof endpoint;
    int linger = 0, timeout_ms = 5000;
    if (!pull || !push
    ||  zmq_setsockopt (pull, ZMQ_LINGER, &linger, sizeof linger)
    ||  zmq_setsockopt (push, ZMQ_LINGER, &linger, sizeof linger)
    ||  zmq_setsockopt (pull, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms)
    ||  zmq_setsockopt (push, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms)
    ||  zmq_bind (pull, "tcp://127.0.0.1:*")
    ||  zmq_getsockopt (pull, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_size)
    ||  zmq_connect (push, endpoint)) {
        nn_errf (err, err_size, "host copy: loopback sockets: %s", zmq_strerror (zmq_errno ()));
        goto done;
    }
    //  One warm-up frame (connection set-up, first buffers), then the
    //  measured stream.
    bool ok = s_send (push, buf, frame_bytes) && s_recv (pull, frame_bytes);
    double wall0 = pl_monotonic (), cpu0 = s_cpu_s ();
    long sent = 0, received = 0;
    while (ok && sent < S_IN_FLIGHT)
        ok = s_send (push, buf, frame_bytes) && ++sent;
    while (ok && received < sent) {
        ok = s_recv (pull, frame_bytes);
        received++;
        if (ok && pl_monotonic () - wall0 < seconds)
            ok = s_send (push, buf, frame_bytes) && ++sent;
    }
    double cpu = s_cpu_s () - cpu0;
    if (!ok)
        nn_errf (err, err_size, "host copy: loopback transfer failed: %s",
                 zmq_strerror (zmq_errno ()));
    else
    if (cpu <= 0.0)
        nn_errf (err, err_size, "host copy: no CPU time measured");
    else
        result = (double) received * (double) frame_bytes / cpu;
done:
    nn_free (buf);
    if (push)
        zmq_close (push);
    if (pull)
        zmq_close (pull);
    if (ctx)
        zmq_ctx_term (ctx);
    return result;
}

double
pl_hostcopy_rate (double configured_mbps, double split_bytes, char *err, size_t err_size)
{
    if (configured_mbps > 0.0)
        return configured_mbps * 1e6 / 8.0;
    return pl_hostcopy_measure (0.3, (size_t) (split_bytes / 4.0), err, err_size);
}
