/*  pltest_frames.c: see pltest_frames.h. */
#include "pltest_frames.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

pltest_frames_t
pltest_frames_of (proto_msg_t *m)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[512] = "";
    int n = proto_msg_encode (m, frames, err, sizeof err);
    cr_assert (n > 0, "encode: %d %s", n, err);
    proto_msg_destroy (&m);
    pltest_frames_t f = { .count = n };
    for (int i = 0; i < n; i++) {
        f.size[i] = zmq_msg_size (&frames[i]);
        f.data[i] = malloc (f.size[i] + 1);
        memcpy (f.data[i], zmq_msg_data (&frames[i]), f.size[i]);
        zmq_msg_close (&frames[i]);
    }
    return f;
}

void
pltest_frames_free (pltest_frames_t *f)
{
    for (int i = 0; i < f->count; i++)
        free (f->data[i]);
    f->count = 0;
}

void
pltest_frames_refused (pltest_frames_t *f, const proto_limits_t *limits, int code,
                       const char *needle)
{
    proto_msg_t *m = NULL;
    char err[512] = "";
    int rc = proto_msg_decode_bytes (&m, (const void *const *) f->data, f->size, f->count,
                                     limits, err, sizeof err);
    cr_assert_eq (rc, code, "rc %d (%s), expected %d", rc, err, code);
    cr_assert_null (m);
    cr_assert (proto_code_is_malformed (rc));
    cr_assert_not_null (strstr (err, needle), "\"%s\" lacks \"%s\"", err, needle);
    pltest_frames_free (f);
}

void
pltest_sock_opts (void *sock)
{
    int linger = 0, timeout = PLTEST_PAIR_TIMEOUT_MS;
    zmq_setsockopt (sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (sock, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
}

void
pltest_pair_open_id (pltest_pair_t *p, int type_a, int type_b, const char *endpoint,
                     const char *id)
{
    p->ctx = zmq_ctx_new ();
    cr_assert_not_null (p->ctx);
    p->a = zmq_socket (p->ctx, type_a);
    p->b = zmq_socket (p->ctx, type_b);
    cr_assert (p->a && p->b);
    pltest_sock_opts (p->a);
    pltest_sock_opts (p->b);
    if (id)
        zmq_setsockopt (p->b, ZMQ_ROUTING_ID, id, strlen (id));
    cr_assert_eq (zmq_bind (p->a, endpoint), 0, "bind %s: %s", endpoint, zmq_strerror (errno));
    cr_assert_eq (zmq_connect (p->b, endpoint), 0);
}

void
pltest_pair_open (pltest_pair_t *p, const char *endpoint)
{
    pltest_pair_open_id (p, ZMQ_PAIR, ZMQ_PAIR, endpoint, NULL);
}

void
pltest_pair_close (pltest_pair_t *p)
{
    zmq_close (p->a);
    zmq_close (p->b);
    zmq_ctx_term (p->ctx);
}
