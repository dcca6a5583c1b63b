/*  pipelearn-bench-proto: what the wire format costs over plain libzmq.

    pipelearn-bench-proto [-n MESSAGES] [-r RUNS]

    Over tcp://127.0.0.1 between two threads (DEALER -> ROUTER, as the
    daemons use it) it sends MESSAGES ACTIVATIONS of 25x14x14x32 floats plus
    25 labels -- one PipeLearn micro-batch of VGG5 split after unit 1 on
    28x28 inputs -- encoded by proto (copying the floats in, as a client does
    from its model's output) and decoded and validated by proto at the
    receiver against the limits a server would set. Then it sends the same
    number of bytes as single-frame libzmq messages (zmq_send copies too).
    Both are timed from the receiver's "go" to its last message; it prints
    the median MB/s (10^6 bytes) of RUNS runs of each, interleaved, their
    ratio, how many received tensors were used in place (not copied for
    alignment), and the time to decode and validate one message without a
    socket.
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proto_msg.h"

#define S_N 25
#define S_H 14
#define S_W 14
#define S_C 32
#define S_CLASSES 10
#define S_FLOATS ((size_t) S_N * S_H * S_W * S_C)
#define S_MAX_RUNS 15
#define S_HWM 16

typedef enum { S_RAW, S_PROTO } s_kind_t;

typedef struct {
    void *ctx;
    const char *endpoint;
    s_kind_t kind;
    int messages;
    size_t wire_bytes;          //  bytes of one message, all frames
    const float *source;        //  the activations the sender copies from
    const int32_t *labels;
} s_sender_t;

static double
s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
s_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double
s_median (double *v, int n)
{
    qsort (v, (size_t) n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void
s_die (const char *what)
{
    fprintf (stderr, "pipelearn-bench-proto: %s: %s\n", what, zmq_strerror (errno));
    exit (1);
}

static proto_msg_t *
s_activations (const float *source, const int32_t *labels, int i)
{
    static const uint32_t dims[4] = { S_N, S_H, S_W, S_C };
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (m, 0, 1, (uint32_t) i / 4, (uint32_t) i % 4);
    proto_msg_set_sequence (m, (uint64_t) i);
    if (proto_msg_set_tensor_copy (m, source, dims, 4) != 0) {
        fprintf (stderr, "pipelearn-bench-proto: bad tensor shape\n");
        exit (1);
    }
    proto_msg_set_labels (m, labels, S_N);
    return m;
}

static void *
s_sender (void *arg)
{
    s_sender_t *s = arg;
    void *sock = zmq_socket (s->ctx, ZMQ_DEALER);
    int hwm = S_HWM, linger = -1;
    zmq_setsockopt (sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect (sock, s->endpoint) != 0)
        s_die ("connect");
    char go[2];
    if (zmq_send (sock, "r", 1, 0) != 1 || zmq_recv (sock, go, sizeof go, 0) != 1)
        s_die ("handshake");
    uint8_t *raw = NULL;
    if (s->kind == S_RAW) {
        raw = malloc (s->wire_bytes);
        memcpy (raw, s->source, S_FLOATS * sizeof (float));
        memset (raw + S_FLOATS * sizeof (float), 0, s->wire_bytes - S_FLOATS * sizeof (float));
    }
    for (int i = 0; i < s->messages; i++) {
        if (s->kind == S_RAW) {
            if (zmq_send (sock, raw, s->wire_bytes, 0) != (int) s->wire_bytes)
                s_die ("zmq_send");
        }
        else {
            proto_msg_t *m = s_activations (s->source, s->labels, i);
            if (proto_msg_send (&m, sock) != 0)
                s_die ("proto_msg_send");
        }
    }
    free (raw);
    zmq_close (sock);
    return NULL;
}

//  One run: MB/s of `messages` messages of `kind` through rx.
static double
s_run (void *ctx, void *rx, const char *endpoint, s_kind_t kind, int messages,
       size_t wire_bytes, const float *source, const int32_t *labels,
       const proto_limits_t *limits, int *zero_copy)
{
    s_sender_t s = { .ctx = ctx, .endpoint = endpoint, .kind = kind, .messages = messages,
                     .wire_bytes = wire_bytes, .source = source, .labels = labels };
    pthread_t thread;
    if (pthread_create (&thread, NULL, s_sender, &s) != 0) {
        fprintf (stderr, "pipelearn-bench-proto: cannot start the sender thread\n");
        exit (1);
    }
    uint8_t id[PROTO_ROUTING_ID_MAX];
    int id_len = zmq_recv (rx, id, sizeof id, 0);
    char ready[2];
    if (id_len <= 0 || zmq_recv (rx, ready, sizeof ready, 0) != 1)
        s_die ("handshake");
    double t0 = s_now ();
    if (zmq_send (rx, id, (size_t) id_len, ZMQ_SNDMORE) < 0 || zmq_send (rx, "g", 1, 0) != 1)
        s_die ("go");
    size_t bytes = 0;
    volatile float sink = 0;
    for (int i = 0; i < messages; i++) {
        if (kind == S_RAW) {
            zmq_msg_t frame;
            zmq_msg_init (&frame);
            if (zmq_msg_recv (&frame, rx, 0) < 0)      //  routing id
                s_die ("zmq_msg_recv");
            zmq_msg_close (&frame);
            zmq_msg_init (&frame);
            if (zmq_msg_recv (&frame, rx, 0) < 0)
                s_die ("zmq_msg_recv");
            bytes += zmq_msg_size (&frame);
            float last;     //  the frame may be misaligned: no float loads
            memcpy (&last, (const uint8_t *) zmq_msg_data (&frame) + (S_FLOATS - 1) * 4, 4);
            sink += last;
            zmq_msg_close (&frame);
        }
        else {
            proto_msg_t *m = NULL;
            size_t rid_len = 0;
            char err[256];
            int rc = proto_msg_recv_from (&m, rx, id, &rid_len, limits, err, sizeof err);
            if (rc != 0) {
                fprintf (stderr, "pipelearn-bench-proto: recv: %d %s\n", rc, err);
                exit (1);
            }
            bytes += wire_bytes;
            *zero_copy += proto_msg_tensor_is_zero_copy (m);
            sink += proto_msg_tensor_data (m)[S_FLOATS - 1] + (float) proto_msg_labels (m)[S_N - 1];
            proto_msg_destroy (&m);
        }
    }
    double elapsed = s_now () - t0;
    pthread_join (thread, NULL);
    (void) sink;
    return (double) bytes / elapsed / 1e6;
}

//  Microseconds to decode and validate the same message from prepared
//  frames, no socket (the floats stay where they are: only the header,
//  descriptor and labels are read).
static double
s_decode_only (const float *source, const int32_t *labels, const proto_limits_t *limits,
               int messages)
{
    proto_msg_t *m = s_activations (source, labels, 0);
    zmq_msg_t encoded[PROTO_MAX_FRAMES];
    char err[256];
    int n = proto_msg_encode (m, encoded, err, sizeof err);
    if (n != 4) {
        fprintf (stderr, "pipelearn-bench-proto: encode: %s\n", err);
        exit (1);
    }
    double t0 = s_now ();
    volatile float sink = 0;
    for (int i = 0; i < messages; i++) {
        zmq_msg_t frames[PROTO_MAX_FRAMES];
        for (int f = 0; f < n; f++) {
            zmq_msg_init (&frames[f]);
            zmq_msg_copy (&frames[f], &encoded[f]);    //  a reference, as from a socket
        }
        proto_msg_t *got = NULL;
        if (proto_msg_decode_frames (&got, frames, n, limits, err, sizeof err) != 0) {
            fprintf (stderr, "pipelearn-bench-proto: decode: %s\n", err);
            exit (1);
        }
        sink += proto_msg_tensor_data (got)[0];
        proto_msg_destroy (&got);
        for (int f = 0; f < n; f++)
            zmq_msg_close (&frames[f]);
    }
    double elapsed = s_now () - t0;
    (void) sink;
    for (int f = 0; f < n; f++)
        zmq_msg_close (&encoded[f]);
    proto_msg_destroy (&m);
    return elapsed / messages * 1e6;
}

int
main (int argc, char **argv)
{
    int messages = 400, runs = 5, opt;
    while ((opt = getopt (argc, argv, "n:r:h")) != -1) {
        if (opt == 'n')
            messages = atoi (optarg);
        else if (opt == 'r')
            runs = atoi (optarg);
        else {
            fprintf (stderr, "usage: pipelearn-bench-proto [-n MESSAGES] [-r RUNS]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (messages < 1 || runs < 1 || runs > S_MAX_RUNS) {
        fprintf (stderr, "pipelearn-bench-proto: need -n >= 1 and -r in 1..%d\n", S_MAX_RUNS);
        return 2;
    }
    float *source = malloc (S_FLOATS * sizeof (float));
    int32_t labels[S_N];
    for (size_t i = 0; i < S_FLOATS; i++)
        source[i] = (float) (i % 1000) * 0.001f;
    for (int i = 0; i < S_N; i++)
        labels[i] = i % S_CLASSES;
    //  Bytes of one proto message: header, descriptor, data, labels.
    const size_t wire_bytes = PROTO_HEADER_SIZE + proto_tensor_desc_size (4)
                            + S_FLOATS * sizeof (float) + S_N * sizeof (int32_t);
    const proto_limits_t limits = { .max_batch = S_N, .h = S_H, .w = S_W, .c = S_C,
                                    .classes = S_CLASSES,
                                    //  The raw runs send it all as one frame.
                                    .max_frame_bytes = wire_bytes };

    void *ctx = zmq_ctx_new ();
    void *rx = zmq_socket (ctx, ZMQ_ROUTER);
    int hwm = S_HWM;
    zmq_setsockopt (rx, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (proto_socket_limit (rx, &limits) != 0)
        s_die ("proto_socket_limit");
    if (zmq_bind (rx, "tcp://127.0.0.1:*") != 0)
        s_die ("bind");
    char endpoint[256];
    size_t len = sizeof endpoint;
    zmq_getsockopt (rx, ZMQ_LAST_ENDPOINT, endpoint, &len);

    double raw[S_MAX_RUNS], proto[S_MAX_RUNS];
    int zero_copy = 0;
    for (int r = 0; r < runs; r++) {
        raw[r] = s_run (ctx, rx, endpoint, S_RAW, messages, wire_bytes, source, labels,
                        &limits, &zero_copy);
        proto[r] = s_run (ctx, rx, endpoint, S_PROTO, messages, wire_bytes, source, labels,
                          &limits, &zero_copy);
    }
    double raw_mb = s_median (raw, runs), proto_mb = s_median (proto, runs);
    double decode_us = s_decode_only (source, labels, &limits, messages * 10);

    printf ("pipelearn-bench-proto: %d ACTIVATIONS of %dx%dx%dx%d f32 + %d labels "
            "(%zu bytes each), %s, median of %d runs\n",
            messages, S_N, S_H, S_W, S_C, S_N, wire_bytes, endpoint, runs);
    printf ("  raw libzmq, one frame          %9.1f MB/s\n", raw_mb);
    printf ("  proto encode + decode/validate %9.1f MB/s\n", proto_mb);
    printf ("  ratio proto / raw              %9.3f\n", proto_mb / raw_mb);
    printf ("  received without a copy        %9d of %d (4-byte aligned frames)\n",
            zero_copy, messages * runs);
    printf ("  proto decode/validate only     %9.2f us per message (no socket)\n", decode_us);

    zmq_close (rx);
    zmq_ctx_term (ctx);
    free (source);
    return 0;
}
