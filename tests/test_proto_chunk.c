/*  test_proto_chunk.c: frames of PROTO_CHUNK_BYTES or more cross the wire
    as runs of chunks (PROTOCOL.md, "Chunks"), are joined by the receiver,
    and every way a peer can break the rule is rejected with the socket
    left in step. test_slowlink shows why chunks exist (a shaped link).
*/
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "pltest_frames.h"
#include "proto_msg.h"
#include "proto_tensor.h"

#define S_C PROTO_CHUNK_BYTES

static proto_msg_t *
s_params (uint64_t count)
{
    float *data = malloc (count * sizeof *data);
    cr_assert_not_null (data);
    for (uint64_t i = 0; i < count; i++)
        data[i] = (float) i * 0.5f - 7.0f;
    proto_slab_t desc = { .unit_begin = 0, .unit_end = 1, .count = count, .sample_count = 3 };
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PARAMS);
    cr_assert_eq (proto_msg_set_slab_copy (m, &desc, data), 0);
    free (data);
    return m;
}

//  The wire frames of one message, sizes only.
static int
s_wire_sizes (void *sock, size_t *sizes, int max)
{
    int n = 0;
    int more = 1;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init (&part);
        cr_assert (zmq_msg_recv (&part, sock, 0) >= 0, "recv: %s", zmq_strerror (errno));
        cr_assert_lt (n, max);
        sizes[n++] = zmq_msg_size (&part);
        more = zmq_msg_more (&part);
        zmq_msg_close (&part);
    }
    return n;
}

//  A PARAMS whose slab frame is s bytes goes as header, descriptor, then
//  floor (s / C) chunks of C and one of s mod C; the receiver gets it back
//  whole and exact.
static void
s_check_size (uint64_t count)
{
    const size_t s = count * sizeof (float);
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://chunk-wire");
    proto_msg_t *m = s_params (count);
    cr_assert_eq (proto_msg_send (&m, p.b), 0);
    size_t sizes[64];
    int n = s_wire_sizes (p.a, sizes, 64);
    const int runs = s < S_C ? 0 : (int) (s / S_C);
    cr_assert_eq (n, 2 + runs + 1, "slab of %zu bytes: %d wire frames, want %d", s, n,
                  2 + runs + 1);
    for (int i = 0; i < runs; i++)
        cr_assert_eq (sizes[2 + i], S_C, "chunk %d is %zu bytes", i, sizes[2 + i]);
    cr_assert_eq (sizes[n - 1], s < S_C ? s : s % S_C);

    m = s_params (count);
    cr_assert_eq (proto_msg_send (&m, p.b), 0);
    proto_msg_t *got = NULL;
    char err[512] = "";
    cr_assert_eq (proto_msg_recv (&got, p.a, NULL, err, sizeof err), 0, "recv: %s", err);
    cr_assert_eq (proto_msg_slab (got)->count, count);
    const float *f = proto_msg_tensor_data (got);
    for (uint64_t i = 0; i < count; i++)
        cr_assert_eq (f[i], (float) i * 0.5f - 7.0f, "float %llu", (unsigned long long) i);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto_chunk, frames_at_every_boundary_round_trip)
{
    const uint64_t q = S_C / sizeof (float);
    const uint64_t counts[] = { 1, q - 1, q, q + 1, 2 * q, 3 * q + 5 };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        s_check_size (counts[i]);
}

//  Raw wire frames: the header and descriptor of a valid PARAMS of count
//  floats, then the given slab parts.
static void
s_send_raw (void *sock, uint64_t count, const size_t *parts, int n)
{
    proto_msg_t *m = s_params (count);
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[512];
    cr_assert_eq (proto_msg_encode (m, frames, err, sizeof err), 3, "%s", err);
    proto_msg_destroy (&m);
    cr_assert_neq (zmq_msg_send (&frames[0], sock, ZMQ_SNDMORE), -1);
    cr_assert_neq (zmq_msg_send (&frames[1], sock, ZMQ_SNDMORE), -1);
    char *zeros = calloc (1, S_C + 8);
    for (int i = 0; i < n; i++)
        cr_assert_neq (zmq_send (sock, zeros, parts[i], i + 1 < n ? ZMQ_SNDMORE : 0), -1);
    free (zeros);
    for (int i = 0; i < 3; i++)
        zmq_msg_close (&frames[i]);
}

static void
s_expect (pltest_pair_t *p, const proto_limits_t *limits, int code, const char *needle)
{
    proto_msg_t *got = NULL;
    char err[512] = "";
    int rc = proto_msg_recv (&got, p->a, limits, err, sizeof err);
    cr_assert_eq (rc, code, "rc %d (%s), want %d", rc, err, code);
    cr_assert_null (got);
    cr_assert (strstr (err, needle), "\"%s\" does not say \"%s\"", err, needle);
    //  In step: the next valid message arrives whole.
    proto_msg_t *m = s_params (2 * S_C / sizeof (float) + 1);
    cr_assert_eq (proto_msg_send (&m, p->b), 0);
    cr_assert_eq (proto_msg_recv (&got, p->a, limits, err, sizeof err), 0, "%s", err);
    proto_msg_destroy (&got);
}

Test (proto_chunk, broken_runs_are_rejected_and_the_socket_stays_in_step)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://chunk-bad");
    const uint64_t q = S_C / sizeof (float);
    //  A wire frame over the chunk size: a sender that does not chunk.
    size_t big[] = { S_C + 4 };
    s_send_raw (p.b, q + 1, big, 1);
    s_expect (&p, NULL, PROTO_E_SIZE, "chunk size");
    //  The message ends with a whole chunk: the run never ends.
    size_t open_run[] = { S_C };
    s_send_raw (p.b, q, open_run, 1);
    s_expect (&p, NULL, PROTO_E_FRAMES, "ends inside");
    //  The run ends, but with the wrong total for the descriptor.
    size_t short_run[] = { S_C, 4 };
    s_send_raw (p.b, q + 2, short_run, 2);
    s_expect (&p, NULL, PROTO_E_SIZE, "PARAMS");
    //  A run longer than the receiver's frame limit: refused as it grows,
    //  not after it was buffered whole.
    proto_limits_t small = { .max_frame_bytes = 2 * S_C + 16 };
    size_t long_run[] = { S_C, S_C, S_C, 0 };
    s_send_raw (p.b, 3 * q, long_run, 4);
    s_expect (&p, &small, PROTO_E_SIZE, "grows past the limit");
    //  A run is one frame: a message with an extra joined frame has the
    //  wrong frame count.
    size_t extra[] = { S_C, 0, 8 };
    s_send_raw (p.b, q, extra, 3);
    s_expect (&p, NULL, PROTO_E_FRAMES, "frames");
    pltest_pair_close (&p);
}
