/*  pltest_frames.c: see pltest_frames.h. */
#include "pltest_frames.h"

#include <criterion/criterion.h>
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
