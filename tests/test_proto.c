/*  test_proto: the wire format (proto/PROTOCOL.md).

    Round trips of every message type with exact field values over inproc
    PAIR and DEALER/ROUTER pairs; zero-copy ownership; every decoder error,
    both through the pure decoder and through a socket, each followed by a
    valid message to show the socket stays in step; and random input.
    Each test makes its own context (Criterion runs tests in parallel
    processes).
*/
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "pltest_frames.h"
#include "proto_msg.h"

#define S_MAX_RAW 8

//  ---------------------------------------------------------------------
//  Helpers

//  Send m from b, receive on a; the received message or a failed test.
static proto_msg_t *
s_transfer (pltest_pair_t *p, proto_msg_t *m, const proto_limits_t *limits)
{
    cr_assert_eq (proto_msg_send (&m, p->b), 0, "send: %s", zmq_strerror (errno));
    cr_assert_null (m, "send must destroy the message");
    proto_msg_t *got = NULL;
    char err[512] = "";
    int rc = proto_msg_recv (&got, p->a, limits, err, sizeof err);
    cr_assert_eq (rc, 0, "recv: %d %s", rc, err);
    cr_assert_not_null (got);
    return got;
}

static void
s_set_route (proto_msg_t *m)
{
    proto_msg_set_route (m, 3, 5, 17, 2);
    proto_msg_set_sequence (m, ((uint64_t) 1 << 50) + 1);
}

static void
s_assert_route (const proto_msg_t *m, int type)
{
    const proto_header_t *h = proto_msg_header (m);
    cr_assert_eq (proto_msg_type (m), type);
    cr_assert_eq (h->magic, PROTO_MAGIC);
    cr_assert_eq (h->version, PROTO_VERSION);
    cr_assert_eq (h->device_id, 3);
    cr_assert_eq (h->epoch, 5);
    cr_assert_eq (h->iteration, 17);
    cr_assert_eq (h->micro_batch, 2);
    cr_assert_eq (h->reserved, 0);
    cr_assert_eq (h->sequence, ((uint64_t) 1 << 50) + 1);
}

//  Awkward floats, compared bit for bit: NaN payload, -0, denormal, inf.
static float
s_float_at (size_t i)
{
    static const uint32_t special[] = { 0x7FC01234u, 0x80000000u, 0x00000001u, 0x7F800000u };
    if (i < 4) {
        float f;
        memcpy (&f, &special[i], sizeof f);
        return f;
    }
    return (float) i * 0.25f - 100.0f;
}

static float *
s_floats (size_t n)
{
    float *v = aligned_alloc (64, (n * sizeof (float) + 63) / 64 * 64);
    cr_assert_not_null (v);
    for (size_t i = 0; i < n; i++)
        v[i] = s_float_at (i);
    return v;
}

static void
s_assert_floats (const float *got, size_t n)
{
    cr_assert_not_null (got);
    for (size_t i = 0; i < n; i++) {
        float want = s_float_at (i);
        cr_assert (memcmp (&got[i], &want, sizeof want) == 0,
                   "float %zu differs: %g vs %g", i, got[i], want);
    }
}

static proto_msg_t *
s_make_tensor (int type, uint32_t n, uint32_t h, uint32_t w, uint32_t c, int classes)
{
    proto_msg_t *m = proto_msg_new (type);
    s_set_route (m);
    const uint32_t dims[4] = { n, h, w, c };
    size_t count = (size_t) n * h * w * c;
    float *data = s_floats (count);
    cr_assert_eq (proto_msg_set_tensor_copy (m, data, dims, 4), 0);
    free (data);
    if (type == PROTO_MSG_GRADIENTS) {
        proto_loss_t loss = { .loss = 2.25f, .correct = n / 2, .count = n };
        proto_msg_set_loss (m, &loss);
    }
    else {
        int32_t labels[1024];
        cr_assert (n <= 1024);
        for (uint32_t i = 0; i < n; i++)
            labels[i] = (int32_t) (i % (uint32_t) classes);
        proto_msg_set_labels (m, labels, n);
    }
    return m;
}

static const uint8_t *
s_hash (void)
{
    static uint8_t hash[PROTO_SPEC_HASH_SIZE];
    for (int i = 0; i < PROTO_SPEC_HASH_SIZE; i++)
        hash[i] = (uint8_t) (0xA0 + i);
    return hash;
}

static proto_msg_t *
s_make_slab (int type, uint64_t count)
{
    proto_msg_t *m = proto_msg_new (type);
    s_set_route (m);
    proto_slab_t desc = { .unit_begin = 0, .unit_end = 2, .count = count,
                          .sample_count = type == PROTO_MSG_PARAMS ? 600 : 0 };
    memcpy (desc.spec_hash, s_hash (), PROTO_SPEC_HASH_SIZE);
    float *data = s_floats (count);
    cr_assert_eq (proto_msg_set_slab_copy (m, &desc, data), 0);
    free (data);
    return m;
}

static proto_assign_t
s_plan (void)
{
    return (proto_assign_t) { .device_id = 2, .split_point = 1, .micro_batches = 4,
                            .batch_size = 100, .devices = 4,
                            .mode = PL_MODE_PIPELEARN, .shard_begin = 5000,
                            .shard_count = 2500, .seed = 0x0123456789ABCDEFull,
                            .origin_s = 1754000000.123456789 };
}

static const char s_json[] = "{\"mode\": \"pipelearn\", \"name\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}";

static proto_msg_t *
s_make_welcome (void)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_WELCOME);
    s_set_route (m);
    cr_assert_eq (proto_msg_set_config (m, s_json, strlen (s_json)), 0);
    proto_assign_t plan = s_plan ();
    proto_msg_set_assign (m, &plan);
    cr_assert_eq (proto_msg_set_frame_cap (m, 2508800), 0);
    return m;
}

static proto_msg_t *
s_make_hello (void)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_HELLO);
    s_set_route (m);
    proto_hello_t h = { .protocol_version = 1,
                        .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT | 0x80000000u,
                        .requested_device_id = 7, .sample_count = ((uint64_t) 1 << 40) + 3 };
    snprintf (h.name, sizeof h.name, "pi-4 device #3");
    cr_assert_eq (proto_msg_set_hello (m, &h), 0);
    return m;
}

//  Event i of a test batch: every stage, NONE fields, exact f64 times.
static proto_event_t
s_event_at (size_t i)
{
    double start = 0.5 + (double) i * 0.001953125 + 1e-9 * (double) (i % 7);
    return (proto_event_t) {
        .stage = (uint32_t) (1 + i % PROTO_STAGE_MAX), .epoch = (uint32_t) (i / 1000),
        .iteration = i % 5 == 4 ? PROTO_EVENT_NONE : (uint32_t) i,
        .micro_batch = i % 3 == 2 ? PROTO_EVENT_NONE : (uint32_t) (i % 4),
        .start_s = start, .end_s = i % 9 == 0 ? start : start + 0.25 };
}

static proto_msg_t *
s_make_events (size_t count)
{
    proto_event_t *ev = malloc (count * sizeof *ev);
    cr_assert_not_null (ev);
    for (size_t i = 0; i < count; i++)
        ev[i] = s_event_at (i);
    proto_msg_t *m = proto_msg_new (PROTO_MSG_EVENTS);
    s_set_route (m);
    cr_assert_eq (proto_msg_set_events (m, ev, count), 0);
    free (ev);
    return m;
}

static void
s_assert_events (const proto_msg_t *m, size_t count)
{
    size_t got_count = 0;
    const proto_event_t *got = proto_msg_events (m, &got_count);
    cr_assert_eq (got_count, count);
    for (size_t i = 0; i < count; i++) {
        proto_event_t want = s_event_at (i);
        cr_assert_eq (got[i].stage, want.stage, "event %zu stage", i);
        cr_assert_eq (got[i].epoch, want.epoch, "event %zu epoch", i);
        cr_assert_eq (got[i].iteration, want.iteration, "event %zu iteration", i);
        cr_assert_eq (got[i].micro_batch, want.micro_batch, "event %zu micro_batch", i);
        cr_assert (memcmp (&got[i].start_s, &want.start_s, 8) == 0, "event %zu start_s", i);
        cr_assert (memcmp (&got[i].end_s, &want.end_s, 8) == 0, "event %zu end_s", i);
    }
}

//  A message as raw frames we can damage.
typedef struct {
    void *data[S_MAX_RAW];
    size_t size[S_MAX_RAW];
    int count;
} s_raw_t;

static void
s_raw_set (s_raw_t *r, int i, const void *bytes, size_t size)
{
    cr_assert (i >= 0 && i <= r->count && i < S_MAX_RAW);
    if (i == r->count)
        r->count++;
    else
        free (r->data[i]);
    r->data[i] = malloc (size ? size : 1);
    if (size)
        memcpy (r->data[i], bytes, size);
    r->size[i] = size;
}

static s_raw_t
s_raw_from (proto_msg_t *m)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[512] = "";
    int n = proto_msg_encode (m, frames, err, sizeof err);
    cr_assert (n > 0, "encode: %d %s", n, err);
    s_raw_t r = { .count = 0 };
    for (int i = 0; i < n; i++) {
        s_raw_set (&r, i, zmq_msg_data (&frames[i]), zmq_msg_size (&frames[i]));
        zmq_msg_close (&frames[i]);
    }
    proto_msg_destroy (&m);
    return r;
}

static void
s_raw_drop (s_raw_t *r, int i)
{
    free (r->data[i]);
    for (int j = i; j + 1 < r->count; j++) {
        r->data[j] = r->data[j + 1];
        r->size[j] = r->size[j + 1];
    }
    r->count--;
}

static void
s_raw_free (s_raw_t *r)
{
    for (int i = 0; i < r->count; i++)
        free (r->data[i]);
    r->count = 0;
}

static uint8_t *
s_raw_bytes (s_raw_t *r, int i)
{
    return r->data[i];
}

//  r's frames as a peer that follows the wire format sends them: a frame
//  of PROTO_CHUNK_BYTES or more as its chunks (PROTOCOL.md, "Chunks"), so
//  the receiver's decoder, not the chunk rule, judges the content.
static void
s_raw_send (void *sock, const s_raw_t *r)
{
    for (int i = 0; i < r->count; i++) {
        const bool more = i + 1 < r->count;
        const uint8_t *d = r->data[i];
        size_t off = 0;
        for (; r->size[i] - off >= PROTO_CHUNK_BYTES; off += PROTO_CHUNK_BYTES)
            cr_assert_eq (zmq_send (sock, d + off, PROTO_CHUNK_BYTES, ZMQ_SNDMORE),
                          (int) PROTO_CHUNK_BYTES);
        cr_assert_eq (zmq_send (sock, d + off, r->size[i] - off,
                                more ? ZMQ_SNDMORE : 0), (int) (r->size[i] - off));
    }
}

//  The socket still works: a valid message sent next arrives intact.
static void
s_assert_in_step (pltest_pair_t *p, const proto_limits_t *limits)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_HEARTBEAT);
    proto_msg_set_sequence (m, 4242);
    proto_msg_t *got = s_transfer (p, m, limits);
    cr_assert_eq (proto_msg_type (got), PROTO_MSG_HEARTBEAT);
    cr_assert_eq (proto_msg_header (got)->sequence, 4242);
    proto_msg_destroy (&got);
}

//  r must be rejected with code and a message containing needle, by the
//  pure decoder and through a socket, and the socket must stay in step.
static void
s_expect (s_raw_t *r, const proto_limits_t *limits, int code, const char *needle)
{
    proto_msg_t *m = NULL;
    char err[512] = "";
    int rc = proto_msg_decode_bytes (&m, (const void *const *) r->data, r->size, r->count,
                                     limits, err, sizeof err);
    cr_assert_eq (rc, code, "decode_bytes: rc %d (%s), expected %d", rc, err, code);
    cr_assert_null (m);
    cr_assert_not_null (strstr (err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    cr_assert (proto_code_is_malformed (rc));

    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://expect");
    s_raw_send (p.b, r);
    err[0] = 0;
    rc = proto_msg_recv (&m, p.a, limits, err, sizeof err);
    cr_assert_eq (rc, code, "recv: rc %d (%s), expected %d", rc, err, code);
    cr_assert_null (m);
    cr_assert_not_null (strstr (err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    s_assert_in_step (&p, limits);
    pltest_pair_close (&p);
    s_raw_free (r);
}

//  xorshift64*, fixed seeds: the random tests are reproducible.
static uint64_t
s_rand (uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

//  ---------------------------------------------------------------------
//  Header

Test (proto, header_layout_is_little_endian_at_fixed_offsets)
{
    proto_header_t h = { .magic = PROTO_MAGIC, .version = PROTO_VERSION,
                         .type = PROTO_MSG_GRADIENTS,
                         .flags = PROTO_FLAG_LAST, .device_id = 0x01020304u,
                         .epoch = 0x05060708u, .iteration = 0x090A0B0Cu,
                         .micro_batch = 0x0D0E0F10u, .reserved = 0,
                         .sequence = 0x1112131415161718ull };
    uint8_t b[PROTO_HEADER_SIZE];
    proto_header_encode (b, &h);
    const uint8_t want[PROTO_HEADER_SIZE] = {
        'P', 'L', 'R', 'N', 2, 0, 5, 0, 2, 0, 0, 0, 4, 3, 2, 1, 8, 7, 6, 5,
        0x0C, 0x0B, 0x0A, 0x09, 0x10, 0x0F, 0x0E, 0x0D, 0, 0, 0, 0,
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11 };
    cr_assert_arr_eq (b, want, sizeof want);
    proto_header_t d;
    char err[256] = "";
    cr_assert_eq (proto_header_decode (&d, b, sizeof b, err, sizeof err), 0, "%s", err);
    cr_assert_eq (d.type, h.type);
    cr_assert_eq (d.flags, h.flags);
    cr_assert_eq (d.device_id, h.device_id);
    cr_assert_eq (d.epoch, h.epoch);
    cr_assert_eq (d.iteration, h.iteration);
    cr_assert_eq (d.micro_batch, h.micro_batch);
    cr_assert_eq (d.sequence, h.sequence);
}

Test (proto, tensor_descriptor_codec)
{
    proto_tensor_desc_t d = { .dtype = PROTO_DTYPE_F32, .rank = 4, .dims = { 25, 14, 14, 32 } };
    uint8_t b[20];
    cr_assert_eq (proto_tensor_desc_size (4), 20);
    cr_assert_eq (proto_tensor_desc_encode (b, &d), 20);
    const uint8_t want[20] = { 1, 4, 0, 0, 25, 0, 0, 0, 14, 0, 0, 0, 14, 0, 0, 0, 32, 0, 0, 0 };
    cr_assert_arr_eq (b, want, 20);
    proto_tensor_desc_t got;
    uint64_t count = 0;
    char err[256] = "";
    cr_assert_eq (proto_tensor_desc_decode (&got, &count, b, 20, err, sizeof err), 0, "%s", err);
    cr_assert_eq (count, 25u * 14 * 14 * 32);
    cr_assert_eq (got.rank, 4);
    cr_assert_eq (got.dims[3], 32);
    cr_assert_eq (proto_tensor_desc_decode (&got, &count, b, 19, err, sizeof err), PROTO_E_SIZE);
}

//  ---------------------------------------------------------------------
//  Round trips

Test (proto, roundtrip_hello)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://hello");
    proto_msg_t *got = s_transfer (&p, s_make_hello (), NULL);
    s_assert_route (got, PROTO_MSG_HELLO);
    const proto_hello_t *h = proto_msg_hello (got);
    cr_assert_eq (h->protocol_version, 1);
    //  Unknown capability bits travel unchanged.
    cr_assert_eq (h->capabilities, PROTO_CAP_FL | PROTO_CAP_SPLIT | 0x80000000u);
    cr_assert_eq (h->requested_device_id, 7);
    cr_assert_eq (h->sample_count, ((uint64_t) 1 << 40) + 3);
    cr_assert_str_eq (h->name, "pi-4 device #3");
    proto_msg_destroy (&got);

    //  -1 (any device) survives the u32 wire field; an empty name is allowed.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t any = { .protocol_version = 1, .requested_device_id = -1 };
    cr_assert_eq (proto_msg_set_hello (m, &any), 0);
    got = s_transfer (&p, m, NULL);
    cr_assert_eq (proto_msg_hello (got)->requested_device_id, -1);
    cr_assert_str_eq (proto_msg_hello (got)->name, "");
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_welcome)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://welcome");
    proto_limits_t limits = { .max_batch = 100 };
    proto_msg_t *got = s_transfer (&p, s_make_welcome (), &limits);
    s_assert_route (got, PROTO_MSG_WELCOME);
    size_t len = 0;
    const char *json = proto_msg_config (got, &len);
    cr_assert_eq (len, strlen (s_json));
    cr_assert_str_eq (json, s_json);
    const proto_assign_t *plan = proto_msg_assign (got);
    proto_assign_t want = s_plan ();
    cr_assert_eq (plan->device_id, want.device_id);
    cr_assert_eq (plan->split_point, want.split_point);
    cr_assert_eq (plan->micro_batches, want.micro_batches);
    cr_assert_eq (plan->batch_size, want.batch_size);
    cr_assert_eq (plan->devices, want.devices);
    cr_assert_eq (plan->mode, want.mode);
    cr_assert_eq (plan->shard_begin, want.shard_begin);
    cr_assert_eq (plan->shard_count, want.shard_count);
    cr_assert_eq (plan->seed, want.seed);
    cr_assert (memcmp (&plan->origin_s, &want.origin_s, sizeof want.origin_s) == 0,
               "origin_s %.9f, want %.9f", plan->origin_s, want.origin_s);
    cr_assert_eq (proto_msg_frame_cap (got), 2508800);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

static void
s_roundtrip_slab (int type, const char *endpoint)
{
    pltest_pair_t p;
    pltest_pair_open (&p, endpoint);
    proto_limits_t limits = { .slab_count = 1000, .spec_hash = s_hash () };
    proto_msg_t *got = s_transfer (&p, s_make_slab (type, 1000), &limits);
    s_assert_route (got, type);
    const proto_slab_t *s = proto_msg_slab (got);
    cr_assert_arr_eq (s->spec_hash, s_hash (), PROTO_SPEC_HASH_SIZE);
    cr_assert_eq (s->unit_begin, 0);
    cr_assert_eq (s->unit_end, 2);
    cr_assert_eq (s->count, 1000);
    cr_assert_eq (s->sample_count, type == PROTO_MSG_PARAMS ? 600u : 0u);
    cr_assert_eq (proto_msg_tensor_count (got), 1000);
    s_assert_floats (proto_msg_tensor_data (got), 1000);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_model)
{
    s_roundtrip_slab (PROTO_MSG_MODEL, "inproc://model");
}

Test (proto, roundtrip_params)
{
    s_roundtrip_slab (PROTO_MSG_PARAMS, "inproc://params");
}

static void
s_assert_tensor (const proto_msg_t *got, const uint32_t *dims, int rank)
{
    const proto_tensor_desc_t *d = proto_msg_tensor (got);
    cr_assert_eq (d->dtype, PROTO_DTYPE_F32);
    cr_assert_eq (d->rank, rank);
    size_t count = 1;
    for (int i = 0; i < rank; i++) {
        cr_assert_eq (d->dims[i], dims[i]);
        count *= dims[i];
    }
    cr_assert_eq (proto_msg_tensor_count (got), count);
    s_assert_floats (proto_msg_tensor_data (got), count);
}

Test (proto, roundtrip_activations)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://activations");
    proto_limits_t limits = { .max_batch = 25, .h = 14, .w = 14, .c = 32, .classes = 10 };
    proto_msg_t *m = s_make_tensor (PROTO_MSG_ACTIVATIONS, 25, 14, 14, 32, 10);
    proto_msg_set_last (m, true);
    proto_msg_t *got = s_transfer (&p, m, &limits);
    s_assert_route (got, PROTO_MSG_ACTIVATIONS);
    cr_assert (proto_msg_is_last (got));
    const uint32_t dims[4] = { 25, 14, 14, 32 };
    s_assert_tensor (got, dims, 4);
    cr_assert_eq (proto_msg_labels_count (got), 25);
    for (int i = 0; i < 25; i++)
        cr_assert_eq (proto_msg_labels (got)[i], i % 10);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_gradients)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://gradients");
    proto_limits_t limits = { .max_batch = 25, .h = 14, .w = 14, .c = 32 };
    proto_msg_t *got = s_transfer (&p, s_make_tensor (PROTO_MSG_GRADIENTS, 25, 14, 14, 32, 10),
                                   &limits);
    s_assert_route (got, PROTO_MSG_GRADIENTS);
    cr_assert_not (proto_msg_is_last (got));
    const uint32_t dims[4] = { 25, 14, 14, 32 };
    s_assert_tensor (got, dims, 4);
    const proto_loss_t *loss = proto_msg_loss (got);
    cr_assert_eq (loss->loss, 2.25f);
    cr_assert_eq (loss->correct, 12);
    cr_assert_eq (loss->count, 25);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_rank_1_and_2_tensors)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://ranks");
    for (int rank = 1; rank <= 2; rank++) {
        proto_msg_t *m = proto_msg_new (PROTO_MSG_GRADIENTS);
        const uint32_t dims[2] = { 3, 128 };
        float *data = s_floats (3 * 128);
        cr_assert_eq (proto_msg_set_tensor_copy (m, data, dims, rank), 0);
        free (data);
        proto_loss_t loss = { .loss = NAN, .correct = 0, .count = 3 };
        proto_msg_set_loss (m, &loss);
        proto_msg_t *got = s_transfer (&p, m, NULL);
        s_assert_tensor (got, dims, rank);
        cr_assert (isnan (proto_msg_loss (got)->loss), "loss values are not judged");
        proto_msg_destroy (&got);
    }
    pltest_pair_close (&p);
}

Test (proto, roundtrip_eval_activations_and_results)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://eval");
    proto_limits_t limits = { .h = 7, .w = 7, .c = 64, .classes = 10 };
    proto_msg_t *got = s_transfer (&p, s_make_tensor (PROTO_MSG_EVAL, 50, 7, 7, 64, 10), &limits);
    s_assert_route (got, PROTO_MSG_EVAL);
    cr_assert_not (proto_msg_is_eval_result (got));
    const uint32_t dims[4] = { 50, 7, 7, 64 };
    s_assert_tensor (got, dims, 4);
    cr_assert_eq (proto_msg_labels_count (got), 50);
    cr_assert_eq (proto_msg_labels (got)[49], 9);
    proto_msg_destroy (&got);

    proto_msg_t *m = proto_msg_new (PROTO_MSG_EVAL);
    s_set_route (m);
    proto_eval_result_t r = { .loss_sum = 123.5, .correct = 9000, .count = 10000 };
    proto_msg_set_eval_result (m, &r);
    got = s_transfer (&p, m, &limits);
    s_assert_route (got, PROTO_MSG_EVAL);
    cr_assert (proto_msg_is_eval_result (got));
    cr_assert (proto_msg_header (got)->flags & PROTO_FLAG_EVAL_RESULT);
    cr_assert_eq (proto_msg_eval_result (got)->loss_sum, 123.5);
    cr_assert_eq (proto_msg_eval_result (got)->correct, 9000);
    cr_assert_eq (proto_msg_eval_result (got)->count, 10000);
    cr_assert_null (proto_msg_tensor_data (got));
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_stats)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://stats");
    proto_msg_t *m = proto_msg_new (PROTO_MSG_STATS);
    s_set_route (m);
    proto_stats_t s = { .forward_s = 1.5, .backward_s = 2.75, .update_s = 0.125,
                        .idle_s = 0.0, .bytes_up = ((uint64_t) 1 << 33) + 7,
                        .bytes_down = 12345, .epoch = 5, .loss_sum = 812.25,
                        .correct = 700, .samples = 1000 };
    proto_msg_set_stats (m, &s);
    proto_msg_t *got = s_transfer (&p, m, NULL);
    s_assert_route (got, PROTO_MSG_STATS);
    const proto_stats_t *g = proto_msg_stats (got);
    cr_assert_eq (g->forward_s, 1.5);
    cr_assert_eq (g->backward_s, 2.75);
    cr_assert_eq (g->update_s, 0.125);
    cr_assert_eq (g->idle_s, 0.0);
    cr_assert_eq (g->bytes_up, ((uint64_t) 1 << 33) + 7);
    cr_assert_eq (g->bytes_down, 12345);
    cr_assert_eq (g->epoch, 5);
    cr_assert_eq (g->loss_sum, 812.25);
    cr_assert_eq (g->correct, 700);
    cr_assert_eq (g->samples, 1000);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_events)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://events");
    proto_msg_t *got = s_transfer (&p, s_make_events (7), NULL);
    s_assert_route (got, PROTO_MSG_EVENTS);
    s_assert_events (got, 7);
    proto_msg_destroy (&got);

    //  The documented layout: record 1 at bytes 32..63 of frame 1.
    s_raw_t r = s_raw_from (s_make_events (2));
    cr_assert_eq (r.count, 2);
    cr_assert_eq (r.size[1], 2 * PROTO_EVENT_SIZE);
    const uint8_t *b = s_raw_bytes (&r, 1) + PROTO_EVENT_SIZE;
    proto_event_t want = s_event_at (1);
    cr_assert_eq (b[0], want.stage);
    cr_assert_eq (b[1] | b[2] | b[3], 0);
    cr_assert_eq (b[8], 1);                                 //  iteration 1
    cr_assert_eq (b[12], 1);                                //  micro_batch 1
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--)
        bits = bits << 8 | b[16 + i];
    cr_assert (memcmp (&bits, &want.start_s, 8) == 0, "start_s little-endian at 16");
    s_raw_free (&r);

    //  Exactly the cap is accepted, also by a DEALER/ROUTER pair.
    pltest_pair_close (&p);
    pltest_pair_open_id (&p, ZMQ_ROUTER, ZMQ_DEALER, "inproc://events-max", "dev");
    proto_msg_t *m = s_make_events (PROTO_EVENTS_MAX);
    cr_assert_eq (proto_msg_send (&m, p.b), 0);
    uint8_t rid[PROTO_ROUTING_ID_MAX];
    size_t rid_len = 0;
    char err[512] = "";
    cr_assert_eq (proto_msg_recv_from (&got, p.a, rid, &rid_len, NULL, err, sizeof err), 0,
                  "%s", err);
    cr_assert_eq (rid_len, 3);
    s_assert_events (got, PROTO_EVENTS_MAX);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, roundtrip_heartbeat_bye)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://hb");
    const int types[2] = { PROTO_MSG_HEARTBEAT, PROTO_MSG_BYE };
    for (int i = 0; i < 2; i++) {
        proto_msg_t *m = proto_msg_new (types[i]);
        s_set_route (m);
        proto_msg_t *got = s_transfer (&p, m, NULL);
        s_assert_route (got, types[i]);
        proto_msg_destroy (&got);
    }
    pltest_pair_close (&p);
}

Test (proto, roundtrip_error)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://error");
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ERROR);
    s_set_route (m);
    cr_assert_eq (proto_msg_set_error (m, PROTO_ERR_STATE, "\xc3\xa9tat: GRADIENTS before HELLO"), 0);
    proto_msg_t *got = s_transfer (&p, m, NULL);
    s_assert_route (got, PROTO_MSG_ERROR);
    cr_assert_eq (proto_msg_error_code (got), PROTO_ERR_STATE);
    cr_assert_str_eq (proto_msg_error_text (got), "\xc3\xa9tat: GRADIENTS before HELLO");
    proto_msg_destroy (&got);

    //  Exactly PROTO_TEXT_MAX bytes is accepted.
    char text[PROTO_TEXT_MAX + 1];
    memset (text, 'x', PROTO_TEXT_MAX);
    text[PROTO_TEXT_MAX] = 0;
    m = proto_msg_new (PROTO_MSG_ERROR);
    cr_assert_eq (proto_msg_set_error (m, 99, text), 0);
    got = s_transfer (&p, m, NULL);
    cr_assert_eq (strlen (proto_msg_error_text (got)), PROTO_TEXT_MAX);
    cr_assert_eq (proto_msg_error_code (got), 99);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

Test (proto, dealer_router_routing_ids)
{
    pltest_pair_t p;
    pltest_pair_open_id (&p, ZMQ_ROUTER, ZMQ_DEALER, "inproc://router", "dev-7");
    proto_msg_t *m = s_make_hello ();
    cr_assert_eq (proto_msg_send (&m, p.b), 0);
    uint8_t id[PROTO_ROUTING_ID_MAX];
    size_t id_len = 0;
    char err[512] = "";
    proto_msg_t *got = NULL;
    cr_assert_eq (proto_msg_recv_from (&got, p.a, id, &id_len, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq (id_len, 5);
    cr_assert (memcmp (id, "dev-7", 5) == 0);
    cr_assert_eq (proto_msg_type (got), PROTO_MSG_HELLO);
    proto_msg_destroy (&got);

    m = s_make_welcome ();
    cr_assert_eq (proto_msg_send_to (&m, p.a, id, id_len), 0);
    cr_assert_null (m);
    cr_assert_eq (proto_msg_recv (&got, p.b, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq (proto_msg_type (got), PROTO_MSG_WELCOME);
    proto_msg_destroy (&got);

    //  A malformed message still yields the sender's id, so the server can
    //  answer ERROR to that peer; the peer gets it and the ROUTER stays in step.
    cr_assert_eq (zmq_send (p.b, "garbage", 7, ZMQ_SNDMORE), 7);
    cr_assert_eq (zmq_send (p.b, "more", 4, 0), 4);
    id_len = 0;
    int rc = proto_msg_recv_from (&got, p.a, id, &id_len, NULL, err, sizeof err);
    cr_assert_eq (rc, PROTO_E_MAGIC, "rc %d %s", rc, err);
    cr_assert_eq (id_len, 5);
    cr_assert (memcmp (id, "dev-7", 5) == 0);
    m = proto_msg_new (PROTO_MSG_ERROR);
    cr_assert_eq (proto_msg_set_error (m, PROTO_ERR_MALFORMED, err), 0);
    cr_assert_eq (proto_msg_send_to (&m, p.a, id, id_len), 0);
    cr_assert_eq (proto_msg_recv (&got, p.b, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq (proto_msg_error_code (got), PROTO_ERR_MALFORMED);
    cr_assert_not_null (strstr (proto_msg_error_text (got), "header"));
    proto_msg_destroy (&got);

    m = proto_msg_new (PROTO_MSG_HEARTBEAT);
    cr_assert_eq (proto_msg_send (&m, p.b), 0);
    cr_assert_eq (proto_msg_recv_from (&got, p.a, id, &id_len, NULL, err, sizeof err), 0, "%s", err);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
}

//  ---------------------------------------------------------------------
//  Ownership and zero copy

static atomic_int s_freed;

static void
s_counting_free (void *data)
{
    atomic_fetch_add (&s_freed, 1);
    free (data);
}

//  A tensor smaller than a chunk (125 KiB): inproc hands the very buffer
//  to the receiver. A larger one goes in chunks that point into the
//  buffer; the receiver joins them (one copy) and the buffer is freed once.
Test (proto, owned_tensor_is_sent_without_copy_and_freed_once)
{
    atomic_store (&s_freed, 0);
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://owned");
    const uint32_t dims[4] = { 5, 14, 14, 32 };
    const size_t count = 5 * 14 * 14 * 32;
    cr_assert_lt (count * sizeof (float), PROTO_CHUNK_BYTES);
    float *buf = s_floats (count);
    const float *original = buf;
    proto_msg_t *m = proto_msg_new (PROTO_MSG_GRADIENTS);
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, dims, 4, s_counting_free), 0);
    cr_assert_null (buf, "ownership taken: *data_p nulled");
    cr_assert_eq (proto_msg_tensor_data (m), original);
    proto_loss_t loss = { .loss = 1, .correct = 0, .count = 5 };
    proto_msg_set_loss (m, &loss);
    proto_msg_t *got = s_transfer (&p, m, NULL);
    //  inproc hands the very buffer to the receiver: no copy end to end.
    cr_assert_eq (proto_msg_tensor_data (got), original);
    cr_assert (proto_msg_tensor_is_zero_copy (got));
    cr_assert_eq (atomic_load (&s_freed), 0, "freed while the receiver holds it");
    s_assert_floats (proto_msg_tensor_data (got), count);
    proto_msg_destroy (&got);
    cr_assert_eq (atomic_load (&s_freed), 1);

    //  In chunks: the same bytes arrive, the sender's buffer is freed once.
    const uint32_t big_dims[4] = { 25, 14, 14, 32 };
    const size_t big = 25 * 14 * 14 * 32;
    cr_assert_gt (big * sizeof (float), 2 * PROTO_CHUNK_BYTES);
    buf = s_floats (big);
    m = proto_msg_new (PROTO_MSG_GRADIENTS);
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, big_dims, 4, s_counting_free), 0);
    loss.count = 25;
    proto_msg_set_loss (m, &loss);
    got = s_transfer (&p, m, NULL);
    s_assert_floats (proto_msg_tensor_data (got), big);
    proto_msg_destroy (&got);
    pltest_pair_close (&p);
    cr_assert_eq (atomic_load (&s_freed), 2);
}

Test (proto, owned_buffer_freed_once_on_destroy_replace_and_tcp)
{
    atomic_store (&s_freed, 0);
    const uint32_t dims[2] = { 4, 8 };
    //  Destroyed unsent.
    float *buf = s_floats (32);
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, dims, 2, s_counting_free), 0);
    proto_msg_destroy (&m);
    cr_assert_eq (atomic_load (&s_freed), 1);

    //  Replaced by a second buffer, then a slab handed over.
    m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    buf = s_floats (32);
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, dims, 2, s_counting_free), 0);
    buf = s_floats (32);
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, dims, 2, s_counting_free), 0);
    cr_assert_eq (atomic_load (&s_freed), 2);
    proto_msg_destroy (&m);
    cr_assert_eq (atomic_load (&s_freed), 3);

    //  A refused shape takes nothing: the caller keeps the buffer.
    buf = s_floats (32);
    m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    const uint32_t bad[5] = { 1, 1, 1, 1, 32 };
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, bad, 5, s_counting_free), -1);
    cr_assert_not_null (buf);
    const uint32_t zero[2] = { 0, 32 };
    cr_assert_eq (proto_msg_set_tensor_owned (m, &buf, zero, 2, s_counting_free), -1);
    cr_assert_not_null (buf);
    proto_msg_destroy (&m);
    cr_assert_eq (atomic_load (&s_freed), 3);

    //  Over TCP the I/O thread frees it once written.
    void *ctx = zmq_ctx_new ();
    void *rx = zmq_socket (ctx, ZMQ_PULL), *tx = zmq_socket (ctx, ZMQ_PUSH);
    pltest_sock_opts (rx);
    pltest_sock_opts (tx);
    cr_assert_eq (zmq_bind (rx, "tcp://127.0.0.1:*"), 0);
    char endpoint[256];
    size_t len = sizeof endpoint;
    zmq_getsockopt (rx, ZMQ_LAST_ENDPOINT, endpoint, &len);
    cr_assert_eq (zmq_connect (tx, endpoint), 0);
    m = proto_msg_new (PROTO_MSG_PARAMS);
    proto_slab_t desc = { .unit_begin = 0, .unit_end = 1, .count = 32, .sample_count = 1 };
    cr_assert_eq (proto_msg_set_slab_owned (m, &desc, &buf, s_counting_free), 0);
    cr_assert_null (buf);
    cr_assert_eq (proto_msg_send (&m, tx), 0);
    proto_msg_t *got = NULL;
    char err[512] = "";
    cr_assert_eq (proto_msg_recv (&got, rx, NULL, err, sizeof err), 0, "%s", err);
    s_assert_floats (proto_msg_tensor_data (got), 32);
    proto_msg_destroy (&got);
    for (int i = 0; i < 300 && atomic_load (&s_freed) < 4; i++)
        nanosleep (&(struct timespec) { .tv_nsec = 10000000 }, NULL);
    cr_assert_eq (atomic_load (&s_freed), 4);
    zmq_close (rx);
    zmq_close (tx);
    zmq_ctx_term (ctx);
    cr_assert_eq (atomic_load (&s_freed), 4);
}

//  A GRADIENTS message whose data frame wraps `data` (no copy, not freed).
static proto_msg_t *
s_decode_wrapped (float *data, size_t count)
{
    proto_msg_t *m = s_make_tensor (PROTO_MSG_GRADIENTS, 2, 1, 1, (uint32_t) count / 2, 1);
    s_raw_t r = s_raw_from (m);
    zmq_msg_t frames[4];
    for (int i = 0; i < 4; i++) {
        if (i == 2)
            zmq_msg_init_data (&frames[i], data, count * 4, NULL, NULL);
        else {
            zmq_msg_init_size (&frames[i], r.size[i]);
            memcpy (zmq_msg_data (&frames[i]), r.data[i], r.size[i]);
        }
    }
    memcpy (data, r.data[2], count * 4);
    s_raw_free (&r);
    proto_msg_t *got = NULL;
    char err[512] = "";
    cr_assert_eq (proto_msg_decode_frames (&got, frames, 4, NULL, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 4; i++)
        zmq_msg_close (&frames[i]);
    return got;
}

Test (proto, received_data_points_into_aligned_frame_and_copies_misaligned)
{
    const size_t count = 64;
    uint8_t *block = aligned_alloc (64, count * 4 + 64);
    cr_assert_not_null (block);
    //  Aligned: the decoded pointer is the frame's own memory.
    float *aligned = (float *) (void *) block;
    proto_msg_t *got = s_decode_wrapped (aligned, count);
    cr_assert_eq (proto_msg_tensor_data (got), aligned, "aligned frame must not be copied");
    cr_assert (proto_msg_tensor_is_zero_copy (got));
    s_assert_floats (proto_msg_tensor_data (got), count);
    proto_msg_destroy (&got);

    //  Misaligned by one byte: copied once into aligned memory.
    float *odd = (float *) (void *) (block + 1);
    got = s_decode_wrapped (odd, count);
    const float *view = proto_msg_tensor_data (got);
    cr_assert_neq (view, odd);
    cr_assert_eq ((uintptr_t) view % sizeof (float), 0);
    cr_assert_not (proto_msg_tensor_is_zero_copy (got));
    s_assert_floats (view, count);
    //  And it can still be re-encoded.
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    int n = proto_msg_encode (got, frames, NULL, 0);
    cr_assert_eq (n, 4);
    cr_assert_eq (zmq_msg_size (&frames[2]), count * 4);
    for (int i = 0; i < n; i++)
        zmq_msg_close (&frames[i]);
    proto_msg_destroy (&got);
    free (block);
}

//  ---------------------------------------------------------------------
//  Sender-side checks

Test (proto, setters_refuse_invalid_input)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t h = { .protocol_version = 1, .requested_device_id = -1 };
    memset (h.name, 'a', PROTO_NAME_MAX + 1);      //  not terminated within 64
    cr_assert_eq (proto_msg_set_hello (m, &h), -1);
    snprintf (h.name, sizeof h.name, "tab\there");
    cr_assert_eq (proto_msg_set_hello (m, &h), -1);
    snprintf (h.name, sizeof h.name, "ok");
    h.requested_device_id = -2;
    cr_assert_eq (proto_msg_set_hello (m, &h), -1);
    proto_msg_destroy (&m);

    m = proto_msg_new (PROTO_MSG_WELCOME);
    cr_assert_eq (proto_msg_set_config (m, "", 0), -1);
    cr_assert_eq (proto_msg_set_config (m, "{\"a\":\"\xc0\xaf\"}", 10), -1);
    cr_assert_eq (proto_msg_set_config (m, "{}\0{}", 5), -1);
    proto_msg_destroy (&m);

    m = proto_msg_new (PROTO_MSG_ERROR);
    char text[PROTO_TEXT_MAX + 2];
    memset (text, 'x', PROTO_TEXT_MAX + 1);
    text[PROTO_TEXT_MAX + 1] = 0;
    cr_assert_eq (proto_msg_set_error (m, 1, text), -1);
    cr_assert_eq (proto_msg_set_error (m, 0, "zero code"), -1);
    proto_msg_destroy (&m);

    m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    float x = 1;
    const uint32_t dims[5] = { 1, 1, 1, 1, 1 };
    cr_assert_eq (proto_msg_set_tensor_copy (m, &x, dims, 0), -1);
    cr_assert_eq (proto_msg_set_tensor_copy (m, &x, dims, 5), -1);
    const uint32_t huge[2] = { 1u << 31, 1u << 31 };
    cr_assert_eq (proto_msg_set_tensor_copy (m, &x, huge, 2), -1);
    proto_msg_destroy (&m);

    m = proto_msg_new (PROTO_MSG_MODEL);
    proto_slab_t desc = { .unit_end = 1, .count = 0 };
    cr_assert_eq (proto_msg_set_slab_copy (m, &desc, &x), -1);
    proto_msg_destroy (&m);

    m = proto_msg_new (PROTO_MSG_EVENTS);
    proto_event_t ev[2] = { s_event_at (0), s_event_at (1) };
    cr_assert_eq (proto_msg_set_events (m, ev, 0), -1);
    cr_assert_eq (proto_msg_set_events (m, ev, (size_t) PROTO_EVENTS_MAX + 1), -1);
    ev[1].stage = PROTO_STAGE_MAX + 1;
    cr_assert_eq (proto_msg_set_events (m, ev, 2), -1);
    ev[1] = s_event_at (1);
    ev[1].end_s = ev[1].start_s - 1e-6;
    cr_assert_eq (proto_msg_set_events (m, ev, 2), -1);
    ev[1] = s_event_at (1);
    ev[1].start_s = -0.5;
    cr_assert_eq (proto_msg_set_events (m, ev, 2), -1);
    ev[1].start_s = NAN;
    cr_assert_eq (proto_msg_set_events (m, ev, 2), -1);
    size_t count = 99;
    cr_assert_null (proto_msg_events (m, &count), "refused events are not kept");
    cr_assert_eq (count, 0);
    ev[1] = s_event_at (1);
    cr_assert_eq (proto_msg_set_events (m, ev, 2), 0);
    cr_assert_not_null (proto_msg_events (m, &count));
    cr_assert_eq (count, 2);
    proto_msg_destroy (&m);
}

Test (proto, send_refuses_incomplete_message_and_keeps_it)
{
    void *ctx = zmq_ctx_new ();
    void *sock = zmq_socket (ctx, ZMQ_PAIR);
    zmq_bind (sock, "inproc://incomplete");
    char err[512] = "";

    //  Activations without labels.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    const uint32_t dims[4] = { 2, 1, 1, 3 };
    float data[6] = { 0 };
    cr_assert_eq (proto_msg_set_tensor_copy (m, data, dims, 4), 0);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    cr_assert_not_null (strstr (err, "0 labels set for batch 2"), "%s", err);
    errno = 0;
    cr_assert_eq (proto_msg_send (&m, sock), -1);
    cr_assert_eq (errno, EINVAL);
    cr_assert_not_null (m, "a refused message stays with the caller");
    const int32_t labels[1] = { 0 };
    proto_msg_set_labels (m, labels, 1);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE, "%s", err);
    proto_msg_destroy (&m);

    //  Gradients whose loss count does not match the batch.
    m = proto_msg_new (PROTO_MSG_GRADIENTS);
    cr_assert_eq (proto_msg_set_tensor_copy (m, data, dims, 4), 0);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    cr_assert_eq (proto_msg_send (&m, sock), -1);
    proto_msg_destroy (&m);

    //  Slab, plan, stats and config left unset or invalid.
    m = proto_msg_new (PROTO_MSG_PARAMS);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    proto_msg_destroy (&m);
    m = proto_msg_new (PROTO_MSG_WELCOME);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    cr_assert_eq (proto_msg_set_config (m, "{}", 2), 0);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE, "zeroed plan is invalid");
    proto_assign_t plan = s_plan ();
    proto_msg_set_assign (m, &plan);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE, "no frame cap set");
    cr_assert (strstr (err, "frame cap 0 bytes"), "%s", err);
    cr_assert_eq (proto_msg_set_frame_cap (m, PROTO_HEADER_SIZE - 1), -1);
    cr_assert_eq (proto_msg_set_frame_cap (m, PROTO_DEFAULT_MAX_FRAME_BYTES + 1), -1);
    cr_assert_eq (proto_msg_frame_cap (m), 0);
    cr_assert_eq (proto_msg_set_frame_cap (m, PROTO_HEADER_SIZE), 0);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), 0, "%s", err);
    proto_msg_destroy (&m);
    m = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t s = { .idle_s = -1 };
    proto_msg_set_stats (m, &s);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE);
    proto_msg_destroy (&m);
    m = proto_msg_new (PROTO_MSG_ERROR);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE, "ERROR without a code");
    proto_msg_destroy (&m);
    m = proto_msg_new (PROTO_MSG_EVENTS);
    cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_SIZE, "EVENTS without events");
    cr_assert_not_null (strstr (err, "EVENTS: no events"), "%s", err);
    cr_assert_eq (proto_msg_send (&m, sock), -1);
    cr_assert_not_null (m);
    proto_msg_destroy (&m);

    zmq_close (sock);
    zmq_ctx_term (ctx);
}

Test (proto, failed_send_keeps_the_message)
{
    void *ctx = zmq_ctx_new ();
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    int one = 1;
    zmq_setsockopt (router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_bind (router, "inproc://mandatory");
    proto_msg_t *m = proto_msg_new (PROTO_MSG_HEARTBEAT);
    errno = 0;
    cr_assert_eq (proto_msg_send_to (&m, router, "nobody", 6), -1);
    cr_assert_eq (errno, EHOSTUNREACH);
    cr_assert_not_null (m);
    proto_msg_destroy (&m);
    zmq_close (router);
    zmq_ctx_term (ctx);
}

//  Issue 21, item 1: a frame over the receiver's ZMQ_MAXMSGSIZE makes
//  libzmq close the connection without a word. The sender refuses it
//  instead, saying which message, which frame, its size and the cap, and
//  keeps the message; a message within the cap (to the byte) goes.
Test (proto, a_frame_over_the_receivers_cap_is_refused_and_named)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://capped");
    char err[512] = "";
    //  ACTIVATIONS (1, 8, 8, 32): frame 2 is 8192 bytes.
    proto_msg_t *m = s_make_tensor (PROTO_MSG_ACTIVATIONS, 1, 8, 8, 32, 2);
    errno = 0;
    cr_assert_eq (proto_msg_send_capped (&m, p.a, 8191, err, sizeof err), -1);
    cr_assert_eq (errno, EMSGSIZE);
    cr_assert_not_null (m, "the message stays with the caller");
    cr_assert (strstr (err, "ACTIVATIONS: frame 2 is 8192 bytes, over the receiver's cap "
                            "of 8191 bytes"), "%s", err);
    proto_msg_t *got = NULL;
    zmq_setsockopt (p.b, ZMQ_RCVTIMEO, &(int) { 100 }, sizeof (int));
    cr_assert_eq (proto_msg_recv (&got, p.b, NULL, err, sizeof err), -1, "nothing was sent");
    cr_assert_eq (proto_msg_send_capped (&m, p.a, 8192, err, sizeof err), 0, "%s", err);
    cr_assert_null (m);
    cr_assert_eq (proto_msg_recv (&got, p.b, NULL, err, sizeof err), 0, "%s", err);
    proto_msg_destroy (&got);

    //  On a ROUTER, the header frame counts as well.
    m = proto_msg_new (PROTO_MSG_HEARTBEAT);
    cr_assert_eq (proto_msg_send_to_capped (&m, p.a, "x", 1, PROTO_HEADER_SIZE - 1, err,
                                            sizeof err), -1);
    cr_assert_eq (errno, EMSGSIZE);
    cr_assert (strstr (err, "HEARTBEAT: frame 0 is 40 bytes"), "%s", err);
    proto_msg_destroy (&m);

    //  An invalid message says why too (it was a bare EINVAL).
    m = proto_msg_new (PROTO_MSG_PARAMS);
    err[0] = 0;
    cr_assert_eq (proto_msg_send_capped (&m, p.a, 0, err, sizeof err), -1);
    cr_assert_eq (errno, EINVAL);
    cr_assert (strstr (err, "PARAMS"), "%s", err);
    proto_msg_destroy (&m);
    pltest_pair_close (&p);
}

Test (proto, recv_timeout_is_minus_one)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://timeout");
    int ms = 20;
    zmq_setsockopt (p.a, ZMQ_RCVTIMEO, &ms, sizeof ms);
    proto_msg_t *got = (proto_msg_t *) &p;      //  must be reset to NULL
    char err[256] = "";
    cr_assert_eq (proto_msg_recv (&got, p.a, NULL, err, sizeof err), -1);
    cr_assert_null (got);
    cr_assert_not (proto_code_is_malformed (-1));
    s_assert_in_step (&p, NULL);
    pltest_pair_close (&p);
}

Test (proto, limits_frame_bytes_is_the_largest_legitimate_frame)
{
    //  A pipelearn server for VGG5 at split 1, micro-batch 25: the largest
    //  frame is the bigger of the activations and the EVENTS frame.
    proto_limits_t l = { .max_batch = 25, .h = 14, .w = 14, .c = 32, .classes = 10,
                         .slab_count = 448 };
    size_t act = (size_t) 25 * 14 * 14 * 32 * 4;
    size_t events = (size_t) PROTO_EVENTS_MAX * PROTO_EVENT_SIZE;
    cr_assert_eq (proto_limits_frame_bytes (&l, true), act > events ? act : events);
    //  Fewer events allowed: the activations decide.
    l.max_events = 16;
    cr_assert_eq (proto_limits_frame_bytes (&l, true), act);
    //  A big slab decides; without tensors (fl) the shape does not count.
    l.slab_count = 1000000;
    cr_assert_eq (proto_limits_frame_bytes (&l, true), (size_t) 4000000);
    l.slab_count = 100;
    cr_assert_eq (proto_limits_frame_bytes (&l, false), (size_t) PROTO_JSON_MAX);
    //  Open limits ("any") or absurd shapes fall back to the protocol's cap.
    proto_limits_t any = { 0 };
    cr_assert_eq (proto_limits_frame_bytes (&any, true), PROTO_DEFAULT_MAX_FRAME_BYTES);
    cr_assert_eq (proto_limits_frame_bytes (NULL, false), PROTO_DEFAULT_MAX_FRAME_BYTES);
    proto_limits_t huge = { .max_batch = UINT32_MAX, .h = UINT32_MAX, .w = UINT32_MAX,
                            .c = UINT32_MAX, .slab_count = 1 };
    cr_assert_eq (proto_limits_frame_bytes (&huge, true), PROTO_DEFAULT_MAX_FRAME_BYTES);
}

Test (proto, socket_limit_sets_maxmsgsize_and_drops_bigger_frames)
{
    void *ctx = zmq_ctx_new ();
    void *rx = zmq_socket (ctx, ZMQ_PULL), *tx = zmq_socket (ctx, ZMQ_PUSH);
    pltest_sock_opts (rx);
    pltest_sock_opts (tx);
    int64_t v = 0;
    size_t len = sizeof v;
    cr_assert_eq (proto_socket_limit (rx, NULL), 0);
    zmq_getsockopt (rx, ZMQ_MAXMSGSIZE, &v, &len);
    cr_assert_eq (v, (int64_t) (PROTO_DEFAULT_MAX_FRAME_BYTES + PROTO_CURVE_FRAME_OVERHEAD));
    //  The cap leaves room for CurveZMQ's framing (libzmq counts it).
    proto_limits_t limits = { .max_frame_bytes = 4096 };
    cr_assert_eq (proto_socket_limit (rx, &limits), 0);
    zmq_getsockopt (rx, ZMQ_MAXMSGSIZE, &v, &len);
    cr_assert_eq (v, 4096 + (int64_t) PROTO_CURVE_FRAME_OVERHEAD);
    int ms = 300;
    zmq_setsockopt (rx, ZMQ_RCVTIMEO, &ms, sizeof ms);
    cr_assert_eq (zmq_bind (rx, "tcp://127.0.0.1:*"), 0);
    char endpoint[256];
    len = sizeof endpoint;
    zmq_getsockopt (rx, ZMQ_LAST_ENDPOINT, endpoint, &len);
    cr_assert_eq (zmq_connect (tx, endpoint), 0);
    //  Frame 2 of 8192 bytes: libzmq drops the connection; nothing arrives.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_MODEL);
    proto_slab_t desc = { .unit_end = 1, .count = 2048 };
    float *data = s_floats (2048);
    cr_assert_eq (proto_msg_set_slab_copy (m, &desc, data), 0);
    free (data);
    cr_assert_eq (proto_msg_send (&m, tx), 0);
    proto_msg_t *got = NULL;
    char err[256] = "";
    cr_assert_eq (proto_msg_recv (&got, rx, &limits, err, sizeof err), -1);
    cr_assert_null (got);
    zmq_close (rx);
    zmq_close (tx);
    zmq_ctx_term (ctx);
}

//  ---------------------------------------------------------------------
//  Decoder errors (each also checks the socket stays in step)

Test (proto, error_header_truncated)
{
    s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    uint8_t head[20];
    memcpy (head, r.data[0], 20);
    s_raw_set (&r, 0, head, 20);
    s_expect (&r, NULL, PROTO_E_SIZE, "header: 20 bytes, expected 40");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_set (&r, 0, "", 0);
    s_expect (&r, NULL, PROTO_E_SIZE, "header: 0 bytes");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    uint8_t longer[41] = { 0 };
    memcpy (longer, r.data[0], 40);
    s_raw_set (&r, 0, longer, 41);
    s_expect (&r, NULL, PROTO_E_SIZE, "header: 41 bytes");
}

Test (proto, error_header_magic)
{
    s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[0] = 'X';
    s_expect (&r, NULL, PROTO_E_MAGIC, "magic 0x4e524c58");
}

Test (proto, error_header_version_names_it)
{
    s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[4] = 1;
    s_expect (&r, NULL, PROTO_E_VERSION, "version 1 not supported (this build speaks 2)");

    //  A future version with a longer header is still told "version", not "size".
    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    uint8_t v7[48] = { 0 };
    memcpy (v7, r.data[0], 40);
    v7[4] = 7;
    s_raw_set (&r, 0, v7, 48);
    s_expect (&r, NULL, PROTO_E_VERSION, "version 7");
}

Test (proto, error_header_type_reserved_flags)
{
    const uint16_t bad_types[3] = { 0, 16, 0xFFFF };
    const char *needles[3] = { "unknown type 0", "unknown type 16", "unknown type 65535" };
    for (int i = 0; i < 3; i++) {
        s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
        s_raw_bytes (&r, 0)[6] = (uint8_t) bad_types[i];
        s_raw_bytes (&r, 0)[7] = (uint8_t) (bad_types[i] >> 8);
        s_expect (&r, NULL, PROTO_E_TYPE, needles[i]);
    }
    s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[28] = 1;
    s_expect (&r, NULL, PROTO_E_VALUE, "reserved is 0x00000001");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[11] = 0x80;
    s_expect (&r, NULL, PROTO_E_VALUE, "unknown flags 0x80000000");

    r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 2, 1, 1, 2, 2));
    s_raw_bytes (&r, 0)[8] |= PROTO_FLAG_EVAL_RESULT;
    s_expect (&r, NULL, PROTO_E_VALUE, "EVAL_RESULT set on a non-EVAL");

    r = s_raw_from (proto_msg_new (PROTO_MSG_BYE));
    s_raw_bytes (&r, 0)[8] |= PROTO_FLAG_LAST;
    s_expect (&r, NULL, PROTO_E_VALUE, "LAST");
}

Test (proto, error_frame_count)
{
    //  Too few: activations without the labels frame.
    s_raw_t r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 2, 1, 1, 2, 2));
    s_raw_drop (&r, 3);
    s_expect (&r, NULL, PROTO_E_FRAMES, "ACTIVATIONS: 3 frames, expected 4");

    //  Too many: a payload frame on a HEARTBEAT.
    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_set (&r, 1, "x", 1);
    s_expect (&r, NULL, PROTO_E_FRAMES, "HEARTBEAT: 2 frames, expected 1");

    //  Far too many: the extra frames are drained, not kept.
    r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 2, 1, 1, 2, 2));
    for (int i = 4; i < 8; i++)
        s_raw_set (&r, i, "extra", 5);
    s_expect (&r, NULL, PROTO_E_FRAMES, "ACTIVATIONS: 8 frames, expected 4");

    //  EVAL results are one payload frame; four is wrong for them.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_EVAL);
    proto_eval_result_t res = { .count = 1 };
    proto_msg_set_eval_result (m, &res);
    r = s_raw_from (m);
    s_raw_set (&r, 2, "x", 1);
    s_raw_set (&r, 3, "y", 1);
    s_expect (&r, NULL, PROTO_E_FRAMES, "EVAL: 4 frames, expected 2");

    //  A receiver's own cap below the type's count.
    r = s_raw_from (s_make_slab (PROTO_MSG_MODEL, 4));
    proto_limits_t limits = { .max_frames = 2 };
    s_expect (&r, &limits, PROTO_E_FRAMES, "3 frames exceeds limit 2");
}

Test (proto, error_frame_over_limit)
{
    proto_limits_t limits = { .max_frame_bytes = 4096 };
    s_raw_t r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 1, 8, 8, 32, 2));
    s_expect (&r, &limits, PROTO_E_SIZE, "frame 2 is 8192 bytes, limit 4096");
}

static s_raw_t
s_tensor_with_desc (int type, const uint8_t *desc, size_t len)
{
    s_raw_t r = s_raw_from (s_make_tensor (type, 2, 1, 1, 2, 2));
    s_raw_set (&r, 1, desc, len);
    return r;
}

Test (proto, error_tensor_rank_dims_overflow)
{
    const uint8_t rank0[4] = { 1, 0, 0, 0 };
    s_raw_t r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, rank0, 4);
    s_expect (&r, NULL, PROTO_E_SHAPE, "ACTIVATIONS: descriptor: rank 0 not in 1..4");

    uint8_t rank5[24] = { 1, 5, 0, 0 };
    for (int i = 0; i < 5; i++)
        rank5[4 + 4 * i] = 1;
    r = s_tensor_with_desc (PROTO_MSG_GRADIENTS, rank5, 24);
    s_expect (&r, NULL, PROTO_E_SHAPE, "GRADIENTS: descriptor: rank 5 not in 1..4");

    const uint8_t zero_dim[12] = { 1, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, zero_dim, 12);
    s_expect (&r, NULL, PROTO_E_SHAPE, "dims[1] is 0");

    //  2^31 x 2^31 floats would be 2^64 bytes.
    const uint8_t overflow[12] = { 1, 2, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x80 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, overflow, 12);
    s_expect (&r, NULL, PROTO_E_SHAPE, "dims 2147483648x2147483648 overflow");

    //  Largest u32 dims in every axis.
    const uint8_t max4[20] = { 1, 4, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
                               255, 255, 255, 255, 255, 255, 255, 255 };
    r = s_tensor_with_desc (PROTO_MSG_EVAL, max4, 20);
    s_expect (&r, NULL, PROTO_E_SHAPE, "overflow");

    const uint8_t dtype3[12] = { 3, 2, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, dtype3, 12);
    s_expect (&r, NULL, PROTO_E_VALUE, "dtype 3 not supported");
    //  A codec payload (dtype 2) carries rank 4 only.
    const uint8_t dtype2[12] = { 2, 2, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, dtype2, 12);
    s_expect (&r, NULL, PROTO_E_SHAPE, "a codec payload needs rank 4");

    const uint8_t pad[12] = { 1, 2, 0, 7, 2, 0, 0, 0, 2, 0, 0, 0 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, pad, 12);
    s_expect (&r, NULL, PROTO_E_VALUE, "padding");

    const uint8_t short_desc[10] = { 1, 2, 0, 0, 2, 0, 0, 0, 2, 0 };
    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, short_desc, 10);
    s_expect (&r, NULL, PROTO_E_SIZE, "descriptor: 10 bytes, rank 2 needs 12");

    r = s_tensor_with_desc (PROTO_MSG_ACTIVATIONS, short_desc, 2);
    s_expect (&r, NULL, PROTO_E_SIZE, "descriptor: 2 bytes, need at least 4");
}

Test (proto, error_tensor_shape_and_batch_limits)
{
    proto_limits_t limits = { .max_batch = 25, .h = 14, .w = 14, .c = 32, .classes = 10 };
    s_raw_t r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 5, 14, 14, 16, 10));
    s_expect (&r, &limits, PROTO_E_SHAPE,
              "per-sample shape 14x14x16 (h x w x c), expected 14x14x32");

    proto_limits_t c_only = { .c = 32 };
    r = s_raw_from (s_make_tensor (PROTO_MSG_GRADIENTS, 5, 7, 7, 16, 10));
    s_expect (&r, &c_only, PROTO_E_SHAPE, "expected *x*x32");

    //  With an expected shape the tensor must be rank 4.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    const uint32_t dims[2] = { 5, 14 * 14 * 32 };
    float *data = s_floats (5 * 14 * 14 * 32);
    proto_msg_set_tensor_copy (m, data, dims, 2);
    free (data);
    const int32_t labels[5] = { 0 };
    proto_msg_set_labels (m, labels, 5);
    r = s_raw_from (m);
    s_expect (&r, &limits, PROTO_E_SHAPE, "rank 2, expected 4");

    r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 26, 14, 14, 32, 10));
    s_expect (&r, &limits, PROTO_E_SHAPE, "batch 26 exceeds limit 25");
}

Test (proto, error_tensor_data_size)
{
    s_raw_t r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 3, 2, 2, 2, 2));
    r.size[2] -= 4;
    s_expect (&r, NULL, PROTO_E_SIZE, "ACTIVATIONS: data 92 bytes, shape needs 96");

    r = s_raw_from (s_make_tensor (PROTO_MSG_GRADIENTS, 3, 2, 2, 2, 2));
    uint8_t bigger[100] = { 0 };
    s_raw_set (&r, 2, bigger, 100);
    s_expect (&r, NULL, PROTO_E_SIZE, "GRADIENTS: data 100 bytes, shape needs 96");

    r = s_raw_from (s_make_tensor (PROTO_MSG_GRADIENTS, 3, 2, 2, 2, 2));
    r.size[3] = 8;
    s_expect (&r, NULL, PROTO_E_SIZE, "loss frame 8 bytes, expected 12");

    r = s_raw_from (s_make_tensor (PROTO_MSG_ACTIVATIONS, 3, 2, 2, 2, 2));
    r.size[3] = 8;
    s_expect (&r, NULL, PROTO_E_SIZE, "labels 8 bytes, batch 3 needs 12");
}

Test (proto, error_labels_out_of_range)
{
    proto_limits_t limits = { .classes = 10 };
    proto_msg_t *m = s_make_tensor (PROTO_MSG_ACTIVATIONS, 5, 1, 1, 4, 10);
    const int32_t labels[5] = { 0, 9, 1, 10, 2 };
    proto_msg_set_labels (m, labels, 5);
    s_raw_t r = s_raw_from (m);
    s_expect (&r, &limits, PROTO_E_LABEL, "labels[3] = 10 not in [0, 10)");

    //  Negative labels are refused even without a class count.
    r = s_raw_from (s_make_tensor (PROTO_MSG_EVAL, 5, 1, 1, 4, 10));
    memset (s_raw_bytes (&r, 3) + 8, 0xFF, 4);
    s_expect (&r, NULL, PROTO_E_LABEL, "labels[2] = -1 is negative");
}

Test (proto, error_gradients_loss_counts)
{
    proto_msg_t *m = s_make_tensor (PROTO_MSG_GRADIENTS, 4, 1, 1, 2, 2);
    s_raw_t r = s_raw_from (m);
    uint8_t *loss = s_raw_bytes (&r, 3);
    loss[4] = 5;        //  correct 5 > count 4
    s_expect (&r, NULL, PROTO_E_VALUE, "correct 5 count 4");

    r = s_raw_from (s_make_tensor (PROTO_MSG_GRADIENTS, 4, 1, 1, 2, 2));
    s_raw_bytes (&r, 3)[8] = 3;
    s_expect (&r, NULL, PROTO_E_VALUE, "count == batch 4");

    proto_msg_t *e = proto_msg_new (PROTO_MSG_EVAL);
    proto_eval_result_t res = { .loss_sum = 1, .correct = 2, .count = 2 };
    proto_msg_set_eval_result (e, &res);
    r = s_raw_from (e);
    s_raw_bytes (&r, 1)[8] = 3;
    s_expect (&r, NULL, PROTO_E_VALUE, "correct 3 exceeds count 2");

    e = proto_msg_new (PROTO_MSG_EVAL);
    proto_msg_set_eval_result (e, &res);
    r = s_raw_from (e);
    r.size[1] = 23;
    s_expect (&r, NULL, PROTO_E_SIZE, "EVAL: result 23 bytes, expected 24");
}

Test (proto, error_slab)
{
    proto_limits_t limits = { .slab_count = 1000, .spec_hash = s_hash () };
    s_raw_t r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 999));
    s_expect (&r, &limits, PROTO_E_SHAPE, "PARAMS: slab: count 999, expected 1000");

    r = s_raw_from (s_make_slab (PROTO_MSG_MODEL, 1000));
    s_raw_bytes (&r, 1)[0] ^= 0xFF;
    s_expect (&r, &limits, PROTO_E_SPEC, "spec hash 5fa1a2a3a4a5a6a7..., expected a0a1a2a3a4a5a6a7...");

    r = s_raw_from (s_make_slab (PROTO_MSG_MODEL, 10));
    r.size[2] = 36;
    s_expect (&r, NULL, PROTO_E_SIZE, "MODEL: data 36 bytes, count 10 needs 40");

    r = s_raw_from (s_make_slab (PROTO_MSG_MODEL, 10));
    s_raw_bytes (&r, 1)[48] = 1;
    s_expect (&r, NULL, PROTO_E_VALUE, "MODEL: slab: sample_count 1, must be 0");

    r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 10));
    memset (s_raw_bytes (&r, 1) + 48, 0, 8);
    s_expect (&r, NULL, PROTO_E_VALUE, "PARAMS: slab: sample_count is 0");

    r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 10));
    s_raw_bytes (&r, 1)[32] = 2;        //  unit_begin 2 == unit_end 2
    s_expect (&r, NULL, PROTO_E_VALUE, "unit range [2, 2) is empty");

    r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 10));
    memset (s_raw_bytes (&r, 1) + 40, 0xFF, 8);    //  count 2^64-1
    s_expect (&r, NULL, PROTO_E_SHAPE, "count 18446744073709551615 not in 1..");

    r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 10));
    r.size[1] = 55;
    s_expect (&r, NULL, PROTO_E_SIZE, "slab descriptor 55 bytes, expected 56");
}

//  CALIBRATE (PROTOCOL.md, "Calibration"): on MODEL, ACTIVATIONS and PARAMS
//  only; a PARAMS with it holds the part's buffers: buffer_count floats
//  when the receiver says so, else fewer than the slab's.
Test (proto, calibrate_flag_and_buffer_slabs)
{
    proto_limits_t limits = { .slab_count = 1000, .buffer_count = 40 };
    proto_msg_t *m = s_make_slab (PROTO_MSG_PARAMS, 40);
    proto_msg_set_calibrate (m, true);
    s_raw_t r = s_raw_from (m);
    proto_msg_t *got = NULL;
    char err[256] = "";
    cr_assert_eq (proto_msg_decode_bytes (&got, (const void *const *) r.data, r.size, r.count,
                                          &limits, err, sizeof err), 0, "%s", err);
    cr_assert (proto_msg_is_calibrate (got));
    cr_assert_eq (proto_msg_slab (got)->count, 40);
    proto_msg_destroy (&got);
    s_raw_free (&r);
    //  The same without CALIBRATE is a PARAMS of the wrong size.
    r = s_raw_from (s_make_slab (PROTO_MSG_PARAMS, 40));
    s_expect (&r, &limits, PROTO_E_SHAPE, "PARAMS: slab: count 40, expected 1000");

    m = s_make_slab (PROTO_MSG_PARAMS, 41);
    proto_msg_set_calibrate (m, true);
    r = s_raw_from (m);
    s_expect (&r, &limits, PROTO_E_SHAPE, "count 41 (CALIBRATE: the buffers), expected 40");

    //  Receiver without a buffer count: anything below the slab's.
    limits.buffer_count = 0;
    m = s_make_slab (PROTO_MSG_PARAMS, 1000);
    proto_msg_set_calibrate (m, true);
    r = s_raw_from (m);
    s_expect (&r, &limits, PROTO_E_SHAPE, "not below the slab's 1000");

    //  A MODEL with CALIBRATE is a whole slab.
    limits.buffer_count = 40;
    m = s_make_slab (PROTO_MSG_MODEL, 1000);
    proto_msg_set_calibrate (m, true);
    r = s_raw_from (m);
    cr_assert_eq (proto_msg_decode_bytes (&got, (const void *const *) r.data, r.size, r.count,
                                          &limits, err, sizeof err), 0, "%s", err);
    cr_assert (proto_msg_is_calibrate (got));
    proto_msg_destroy (&got);
    s_raw_free (&r);

    //  Nowhere else.
    proto_msg_t *stats = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t zero = { 0 };
    proto_msg_set_stats (stats, &zero);
    proto_msg_t *others[3] = { stats, proto_msg_new (PROTO_MSG_HEARTBEAT),
                               proto_msg_new (PROTO_MSG_BYE) };
    for (int i = 0; i < 3; i++) {
        r = s_raw_from (others[i]);
        s_raw_bytes (&r, 0)[8] |= PROTO_FLAG_CALIBRATE;
        s_expect (&r, NULL, PROTO_E_VALUE, "CALIBRATE set on a message other than MODEL");
    }
    r = s_raw_from (s_make_tensor (PROTO_MSG_GRADIENTS, 2, 1, 1, 2, 2));
    s_raw_bytes (&r, 0)[8] |= PROTO_FLAG_CALIBRATE;
    s_expect (&r, NULL, PROTO_E_VALUE, "GRADIENTS: header: flag CALIBRATE");
}

Test (proto, error_welcome_json_and_plan)
{
    struct { const char *bytes; size_t len; const char *needle; } bad[] = {
        { "{\"a\":1}\0", 8, "WELCOME: config: NUL byte at offset 7" },
        { "{\"\xc0\xaf\"}", 6, "invalid UTF-8 at offset 2 (byte 0xc0)" },      //  overlong '/'
        { "{\"\xed\xa0\x80\"}", 7, "invalid UTF-8 at offset 2 (byte 0xed)" },  //  surrogate
        { "{\"\x80\"}", 5, "invalid UTF-8 at offset 2" },                      //  lone continuation
        { "{\"\xe2\x82", 4, "invalid UTF-8 at offset 2" },                      //  truncated
        { "{\"\xf5\x80\x80\x80\"}", 8, "invalid UTF-8 at offset 2" },          //  > U+10FFFF
        { "{\"\xf4\x90\x80\x80\"}", 8, "invalid UTF-8 at offset 2" },          //  U+110000
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_raw_t r = s_raw_from (s_make_welcome ());
        s_raw_set (&r, 1, bad[i].bytes, bad[i].len);
        s_expect (&r, NULL, PROTO_E_TEXT, bad[i].needle);
    }
    s_raw_t r = s_raw_from (s_make_welcome ());
    s_raw_set (&r, 1, "", 0);
    s_expect (&r, NULL, PROTO_E_SIZE, "config is empty");

    proto_limits_t small = { .max_json_bytes = 16 };
    r = s_raw_from (s_make_welcome ());
    s_expect (&r, &small, PROTO_E_SIZE, "exceeds limit 16");

    //  Beyond the protocol's 64 KiB cap, whatever the receiver asks for.
    proto_limits_t big = { .max_json_bytes = 1 << 20 };
    char *huge = malloc (PROTO_JSON_MAX + 1);
    memset (huge, ' ', PROTO_JSON_MAX + 1);
    r = s_raw_from (s_make_welcome ());
    s_raw_set (&r, 1, huge, PROTO_JSON_MAX + 1);
    free (huge);
    s_expect (&r, &big, PROTO_E_SIZE, "65537 bytes exceeds limit 65536");

    struct { int offset; uint8_t value; const char *needle; } plan[] = {
        { 8, 101, "micro_batches 101 not in 1..batch_size 100" },
        { 20, 9, "mode 9 not in 1..4" },
        { 0, 4, "device_id 4 not below devices 4" },
        { 4, 0, "split_point 0 in mode pipelearn" },
        { 12, 0, "batch_size is 0" },
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        r = s_raw_from (s_make_welcome ());
        s_raw_bytes (&r, 2)[plan[i].offset] = plan[i].value;
        if (plan[i].offset == 12)
            s_raw_bytes (&r, 2)[8] = 0;
        s_expect (&r, NULL, PROTO_E_VALUE, plan[i].needle);
    }
    proto_limits_t max_batch = { .max_batch = 50 };
    r = s_raw_from (s_make_welcome ());
    s_expect (&r, &max_batch, PROTO_E_VALUE, "batch_size 100 exceeds limit 50");

    r = s_raw_from (s_make_welcome ());
    r.size[2] = 48;
    s_expect (&r, NULL, PROTO_E_SIZE, "plan 48 bytes, expected 64");

    //  Frame 3, the server's frame cap: a u64 of 8 bytes, in 40..256 MiB;
    //  a WELCOME without it (an older server's) is refused, not guessed.
    r = s_raw_from (s_make_welcome ());
    r.size[3] = 4;
    s_expect (&r, NULL, PROTO_E_SIZE, "WELCOME: frame cap 4 bytes, expected 8");
    r = s_raw_from (s_make_welcome ());
    memset (s_raw_bytes (&r, 3), 0, 8);
    s_raw_bytes (&r, 3)[0] = 39;
    s_expect (&r, NULL, PROTO_E_VALUE, "WELCOME: frame cap 39 bytes not in 40..268435456");
    r = s_raw_from (s_make_welcome ());
    memset (s_raw_bytes (&r, 3), 0, 8);
    s_raw_bytes (&r, 3)[3] = 0x10;                      //  256 MiB + 0
    s_raw_bytes (&r, 3)[0] = 1;                         //  + 1
    s_expect (&r, NULL, PROTO_E_VALUE, "frame cap 268435457 bytes not in");
    r = s_raw_from (s_make_welcome ());
    s_raw_drop (&r, 3);
    s_expect (&r, NULL, PROTO_E_FRAMES, "WELCOME: 3 frames, expected 4");

    //  The timeline origin: f64 at offset 48, finite and >= 0.
    r = s_raw_from (s_make_welcome ());
    const uint8_t quiet_nan[8] = { 0, 0, 0, 0, 0, 0, 0xF8, 0x7F };
    memcpy (s_raw_bytes (&r, 2) + 48, quiet_nan, 8);
    s_expect (&r, NULL, PROTO_E_TIME, "WELCOME: plan: origin_s is nan");
    r = s_raw_from (s_make_welcome ());
    s_raw_bytes (&r, 2)[55] |= 0x80;                    //  negative
    s_expect (&r, NULL, PROTO_E_TIME, "WELCOME: plan: origin_s is -1.754e+09");
}

Test (proto, error_hello)
{
    s_raw_t r = s_raw_from (s_make_hello ());
    s_raw_bytes (&r, 1)[20] = 0x07;
    s_expect (&r, NULL, PROTO_E_TEXT, "name byte 0x07 at offset 0 is not printable");

    r = s_raw_from (s_make_hello ());
    s_raw_bytes (&r, 1)[21] = 0;        //  an embedded NUL must not cut the check short
    s_expect (&r, NULL, PROTO_E_TEXT, "name byte 0x00 at offset 1");

    r = s_raw_from (s_make_hello ());
    s_raw_bytes (&r, 1)[18] = 15;       //  name is 14 bytes
    s_expect (&r, NULL, PROTO_E_SIZE, "payload 34 bytes, name length 15 needs 35");

    r = s_raw_from (s_make_hello ());
    s_raw_bytes (&r, 1)[18] = 65;
    s_expect (&r, NULL, PROTO_E_SIZE, "name length 65 exceeds 64");

    r = s_raw_from (s_make_hello ());
    memset (s_raw_bytes (&r, 1) + 6, 0xFE, 1);
    memset (s_raw_bytes (&r, 1) + 7, 0xFF, 3);    //  requested_device_id -2
    s_expect (&r, NULL, PROTO_E_VALUE, "requested_device_id -2");

    r = s_raw_from (s_make_hello ());
    memset (s_raw_bytes (&r, 1), 0, 2);
    s_expect (&r, NULL, PROTO_E_VALUE, "protocol_version is 0");

    r = s_raw_from (s_make_hello ());
    r.size[1] = 19;
    s_expect (&r, NULL, PROTO_E_SIZE, "HELLO: payload 19 bytes, need at least 20");
}

Test (proto, error_error_stats)
{
    //  ERROR text one byte over the limit.
    uint8_t text[4 + PROTO_TEXT_MAX + 1];
    memset (text, 'e', sizeof text);
    text[0] = 1, text[1] = text[2] = text[3] = 0;
    s_raw_t r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[6] = PROTO_MSG_ERROR;
    s_raw_set (&r, 1, text, sizeof text);
    s_expect (&r, NULL, PROTO_E_SIZE, "ERROR: text 1025 bytes exceeds 1024");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[6] = PROTO_MSG_ERROR;
    const uint8_t bad_utf8[6] = { 1, 0, 0, 0, 0xC3, 0x28 };
    s_raw_set (&r, 1, bad_utf8, 6);
    s_expect (&r, NULL, PROTO_E_TEXT, "ERROR: text: invalid UTF-8 at offset 0");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[6] = PROTO_MSG_ERROR;
    s_raw_set (&r, 1, "\0\0\0\0oops", 8);
    s_expect (&r, NULL, PROTO_E_VALUE, "ERROR: code is 0");

    r = s_raw_from (proto_msg_new (PROTO_MSG_HEARTBEAT));
    s_raw_bytes (&r, 0)[6] = PROTO_MSG_ERROR;
    s_raw_set (&r, 1, "\1\0", 2);
    s_expect (&r, NULL, PROTO_E_SIZE, "ERROR: payload 2 bytes, need at least 4");

    proto_msg_t *m = proto_msg_new (PROTO_MSG_STATS);
    proto_stats_t s = { .forward_s = 1 };
    proto_msg_set_stats (m, &s);
    r = s_raw_from (m);
    s_raw_bytes (&r, 1)[7] = 0xBF;     //  forward_s = -1.0
    s_expect (&r, NULL, PROTO_E_VALUE, "STATS: forward_s is -1");

    m = proto_msg_new (PROTO_MSG_STATS);
    proto_msg_set_stats (m, &s);
    r = s_raw_from (m);
    memset (s_raw_bytes (&r, 1) + 24, 0xFF, 8);    //  idle_s = NaN
    s_expect (&r, NULL, PROTO_E_VALUE, "STATS: idle_s is");

    m = proto_msg_new (PROTO_MSG_STATS);
    proto_msg_set_stats (m, &s);
    r = s_raw_from (m);
    r.size[1] = 75;
    s_expect (&r, NULL, PROTO_E_SIZE, "STATS: payload 75 bytes, expected 76");

    m = proto_msg_new (PROTO_MSG_STATS);
    proto_msg_set_stats (m, &s);
    r = s_raw_from (m);
    s_raw_bytes (&r, 1)[60] = 11;                  //  correct = 11
    s_raw_bytes (&r, 1)[68] = 10;                  //  samples = 10
    s_expect (&r, NULL, PROTO_E_VALUE, "STATS: correct 11 exceeds samples 10");

    m = proto_msg_new (PROTO_MSG_STATS);
    proto_msg_set_stats (m, &s);
    r = s_raw_from (m);
    memset (s_raw_bytes (&r, 1) + 52, 0xFF, 8);    //  loss_sum = NaN
    s_expect (&r, NULL, PROTO_E_VALUE, "STATS: loss_sum is");
}

//  An EVENTS message of `count` valid records with field `offset` of
//  record `index` overwritten by the 8 (f64) or 4 (u32) bytes of value.
static s_raw_t
s_events_with (size_t count, size_t index, int offset, const void *value, size_t size)
{
    s_raw_t r = s_raw_from (s_make_events (count));
    uint8_t *b = s_raw_bytes (&r, 1) + index * PROTO_EVENT_SIZE + offset;
    uint8_t le[8];
    if (size == 8) {
        uint64_t u;
        memcpy (&u, value, 8);
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t) (u >> (8 * i));
    }
    else {
        uint32_t u;
        memcpy (&u, value, 4);
        for (int i = 0; i < 4; i++)
            le[i] = (uint8_t) (u >> (8 * i));
    }
    memcpy (b, le, size);
    return r;
}

Test (proto, error_events)
{
    //  Sizes: not whole records, none at all, over the receiver's and the
    //  protocol's limits.
    s_raw_t r = s_raw_from (s_make_events (3));
    r.size[1] = 3 * PROTO_EVENT_SIZE - 1;
    s_expect (&r, NULL, PROTO_E_SIZE, "EVENTS: payload 95 bytes is not a multiple of 32");

    r = s_raw_from (s_make_events (1));
    r.size[1] = 0;
    s_expect (&r, NULL, PROTO_E_SIZE, "EVENTS: no events");

    proto_limits_t two = { .max_events = 2 };
    r = s_raw_from (s_make_events (3));
    s_expect (&r, &two, PROTO_E_SIZE, "EVENTS: 3 events exceeds limit 2");

    proto_limits_t big = { .max_events = UINT32_MAX };
    r = s_raw_from (s_make_events (1));
    size_t over = ((size_t) PROTO_EVENTS_MAX + 1) * PROTO_EVENT_SIZE;
    uint8_t *huge = calloc (1, over);
    cr_assert_not_null (huge);
    s_raw_set (&r, 1, huge, over);
    free (huge);
    s_expect (&r, &big, PROTO_E_SIZE, "EVENTS: 65537 events exceeds limit 65536");

    //  The stage enum, in the last record so every record is checked.
    const uint32_t stages[3] = { 0, PROTO_STAGE_MAX + 1, 0xFFFFFFFFu };
    const char *stage_needles[3] = { "EVENTS: event 4: stage 0 not in 1..5",
                                     "EVENTS: event 4: stage 6 not in 1..5",
                                     "EVENTS: event 4: stage 4294967295 not in 1..5" };
    for (int i = 0; i < 3; i++) {
        r = s_events_with (5, 4, 0, &stages[i], 4);
        s_expect (&r, NULL, PROTO_E_VALUE, stage_needles[i]);
    }

    //  Times: finite, >= 0, end not before start.
    struct { int offset; double value; const char *needle; } times[] = {
        { 16, NAN, "EVENTS: event 1: start_s is nan" },
        { 16, -1.0, "EVENTS: event 1: start_s is -1, must be finite and >= 0" },
        { 16, INFINITY, "EVENTS: event 1: start_s is inf" },
        { 24, -INFINITY, "EVENTS: event 1: end_s is -inf" },
        { 24, NAN, "EVENTS: event 1: end_s is nan" },
        { 24, 0.25, "EVENTS: event 1: end_s 0.25 is before start_s 0.50195" },
    };
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        r = s_events_with (3, 1, times[i].offset, &times[i].value, 8);
        s_expect (&r, NULL, PROTO_E_TIME, times[i].needle);
    }

    //  Any epoch, iteration and micro-batch is the daemon's to judge.
    const uint32_t any = 0xFFFFFFFEu;
    r = s_events_with (2, 1, 4, &any, 4);
    proto_msg_t *m = NULL;
    char err[512] = "";
    cr_assert_eq (proto_msg_decode_bytes (&m, (const void *const *) r.data, r.size, r.count,
                                          NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq (proto_msg_events (m, NULL)[1].epoch, any);
    proto_msg_destroy (&m);
    s_raw_free (&r);
}

//  ---------------------------------------------------------------------
//  Random input

Test (proto, random_frames_always_rejected)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://random");
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    uint8_t buf[128];
    for (int iter = 0; iter < 1000; iter++) {
        int frames = 1 + (int) (s_rand (&seed) % 6);
        for (int f = 0; f < frames; f++) {
            size_t size = s_rand (&seed) % 3 == 0 ? 40 : s_rand (&seed) % sizeof buf;
            for (size_t i = 0; i < size; i++)
                buf[i] = (uint8_t) s_rand (&seed);
            zmq_send (p.b, buf, size, f + 1 < frames ? ZMQ_SNDMORE : 0);
        }
        proto_msg_t *m = NULL;
        char err[512] = "";
        int rc = proto_msg_recv (&m, p.a, NULL, err, sizeof err);
        cr_assert (proto_code_is_malformed (rc), "iteration %d: rc %d (%s)", iter, rc, err);
        cr_assert_null (m);
        cr_assert_neq (err[0], 0, "every rejection says why");
    }
    s_assert_in_step (&p, NULL);
    pltest_pair_close (&p);
}

static proto_msg_t *
s_random_valid (uint64_t *seed)
{
    switch (s_rand (seed) % 12) {
        case 0: return s_make_hello ();
        case 1: return s_make_welcome ();
        case 2: return s_make_slab (PROTO_MSG_MODEL, 1 + s_rand (seed) % 16);
        case 3: return s_make_slab (PROTO_MSG_PARAMS, 1 + s_rand (seed) % 16);
        case 4: return s_make_tensor (PROTO_MSG_ACTIVATIONS, 1 + s_rand (seed) % 4, 2, 2, 3, 10);
        case 5: return s_make_tensor (PROTO_MSG_GRADIENTS, 1 + s_rand (seed) % 4, 2, 2, 3, 10);
        case 6: return s_make_tensor (PROTO_MSG_EVAL, 1 + s_rand (seed) % 4, 2, 2, 3, 10);
        case 7: {
            proto_msg_t *m = proto_msg_new (PROTO_MSG_STATS);
            proto_stats_t s = { .forward_s = 1, .bytes_up = 5, .epoch = 2 };
            proto_msg_set_stats (m, &s);
            return m;
        }
        case 8: {
            proto_msg_t *m = proto_msg_new (PROTO_MSG_ERROR);
            proto_msg_set_error (m, 4, "run full");
            return m;
        }
        case 9: {
            proto_msg_t *m = proto_msg_new (PROTO_MSG_EVAL);
            proto_eval_result_t r = { .loss_sum = 3, .correct = 1, .count = 2 };
            proto_msg_set_eval_result (m, &r);
            return m;
        }
        case 10: return s_make_events (1 + (size_t) (s_rand (seed) % 4));
        default: return proto_msg_new (PROTO_MSG_BYE);
    }
}

//  Valid messages with random damage: each is rejected with a code, or if
//  it still decodes, re-encoding it gives back exactly the bytes sent (the
//  encoding is canonical, so nothing was silently dropped or altered).
Test (proto, mutated_messages_rejected_or_canonical)
{
    pltest_pair_t p;
    pltest_pair_open (&p, "inproc://mutate");
    uint64_t seed = 42;
    proto_limits_t limits = { .classes = 10, .max_batch = 4 };
    int rejected = 0, accepted = 0;
    for (int iter = 0; iter < 1000; iter++) {
        s_raw_t r = s_raw_from (s_random_valid (&seed));
        int mutations = 1 + (int) (s_rand (&seed) % 3);
        for (int k = 0; k < mutations; k++) {
            int f = (int) (s_rand (&seed) % (uint64_t) r.count);
            switch (s_rand (&seed) % 5) {
                case 0: case 1:        //  flip a byte (header fields hit often)
                    if (r.size[f])
                        s_raw_bytes (&r, f)[s_rand (&seed) % r.size[f]] ^=
                            (uint8_t) (1 + s_rand (&seed) % 255);
                    break;
                case 2:                //  truncate
                    r.size[f] = r.size[f] ? s_rand (&seed) % r.size[f] : 0;
                    break;
                case 3:                //  drop a frame (keep at least one)
                    if (r.count > 1)
                        s_raw_drop (&r, f);
                    break;
                default:               //  append a frame
                    if (r.count < S_MAX_RAW)
                        s_raw_set (&r, r.count, "junk", 4);
                    break;
            }
        }
        s_raw_send (p.b, &r);
        proto_msg_t *m = NULL;
        char err[512] = "";
        int rc = proto_msg_recv (&m, p.a, &limits, err, sizeof err);
        if (rc == 0) {
            accepted++;
            zmq_msg_t frames[PROTO_MAX_FRAMES];
            int n = proto_msg_encode (m, frames, err, sizeof err);
            cr_assert_eq (n, r.count, "iteration %d: re-encode gave %d frames (%s)", iter, n, err);
            for (int i = 0; i < n; i++) {
                cr_assert_eq (zmq_msg_size (&frames[i]), r.size[i], "iteration %d frame %d", iter, i);
                cr_assert (memcmp (zmq_msg_data (&frames[i]), r.data[i], r.size[i]) == 0,
                           "iteration %d: frame %d not canonical", iter, i);
                zmq_msg_close (&frames[i]);
            }
            proto_msg_destroy (&m);
        }
        else {
            rejected++;
            cr_assert (proto_code_is_malformed (rc), "iteration %d: rc %d (%s)", iter, rc, err);
            cr_assert_null (m);
        }
        s_raw_free (&r);
    }
    cr_assert_gt (rejected, 500, "mutations should mostly break messages (%d)", rejected);
    cr_assert_gt (accepted, 0, "float and label flips stay valid (%d)", accepted);
    s_assert_in_step (&p, &limits);
    pltest_pair_close (&p);
}

//  ---------------------------------------------------------------------
//  Names and the state machine

Test (proto, names_and_codes)
{
    for (int t = PROTO_MSG_HELLO; t <= PROTO_MSG_ERROR; t++)
        cr_assert_str_neq (proto_type_name (t), "UNKNOWN");
    cr_assert_str_eq (proto_type_name (PROTO_MSG_ACTIVATIONS), "ACTIVATIONS");
    cr_assert_str_eq (proto_type_name (0), "UNKNOWN");
    cr_assert_str_eq (proto_type_name (PROTO_MSG_EVENTS), "EVENTS");
    cr_assert_str_eq (proto_type_name (PROTO_MSG_PLAN), "PLAN");
    cr_assert_str_eq (proto_type_name (16), "UNKNOWN");
    for (int a = PROTO_E_TIME; a <= PROTO_OK; a++) {
        cr_assert_str_neq (proto_strerror (a), "unknown error code");
        for (int b = a + 1; b <= PROTO_OK; b++)
            cr_assert_str_neq (proto_strerror (a), proto_strerror (b));
        cr_assert_eq (proto_code_is_malformed (a), a <= PROTO_E_MAGIC);
    }
    cr_assert_eq (pl_mode_from_name ("pipelearn"), PL_MODE_PIPELEARN);
    cr_assert_eq (pl_mode_from_name ("fl"), PL_MODE_FL);
    cr_assert_eq (pl_mode_from_name ("FL"), -1);
    cr_assert_str_eq (pl_mode_name (PL_MODE_SFL), "sfl");
    const char *stages[] = { "UNKNOWN", "forward", "backward", "update", "wait", "upload",
                             "UNKNOWN" };
    for (int st = 0; st <= PROTO_STAGE_MAX + 1; st++)
        cr_assert_str_eq (proto_stage_name (st), stages[st]);
    for (int st = 1; st <= PROTO_STAGE_MAX; st++)
        cr_assert_eq (proto_stage_from_name (stages[st]), st);
    cr_assert_eq (proto_stage_from_name ("Forward"), -1);
    cr_assert_eq (proto_stage_from_name (NULL), -1);
}

Test (proto, state_machine)
{
    const pl_mode_t pl = PL_MODE_PIPELEARN, fl = PL_MODE_FL;
    //  Before HELLO only HELLO, and only upwards.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_CONNECTING, PROTO_MSG_HELLO, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CONNECTING, PROTO_MSG_HEARTBEAT, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CONNECTING, PROTO_MSG_HELLO, PROTO_DOWN));
    //  Joining: WELCOME or ERROR down; heartbeats both ways.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_WELCOME, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_ERROR, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_HEARTBEAT, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_WELCOME, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_MODEL, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_HELLO, PROTO_UP));
    //  Joined: waiting for MODEL.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_MODEL, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_ACTIVATIONS, PROTO_UP));
    //  Training, split modes.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_ACTIVATIONS, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_GRADIENTS, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_GRADIENTS, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_PARAMS, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_MODEL, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_EVAL, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_EVAL, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_STATS, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_STATS, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_WELCOME, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_HELLO, PROTO_UP));
    //  fl: no activations, gradients or EVAL; PARAMS and MODEL as usual.
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_ACTIVATIONS, PROTO_UP));
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_GRADIENTS, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_EVAL, PROTO_UP));
    cr_assert (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_PARAMS, PROTO_UP));
    cr_assert (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_MODEL, PROTO_DOWN));
    //  Closed: nothing.
    //  EVENTS: device to server while training, in every mode.
    for (int mode = PL_MODE_FL; mode <= PL_MODE_PIPELEARN; mode++) {
        cr_assert (proto_type_allowed ((pl_mode_t) mode, PROTO_STATE_TRAINING,
                                       PROTO_MSG_EVENTS, PROTO_UP));
        cr_assert_not (proto_type_allowed ((pl_mode_t) mode, PROTO_STATE_TRAINING,
                                           PROTO_MSG_EVENTS, PROTO_DOWN));
    }
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CONNECTING, PROTO_MSG_EVENTS, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, PROTO_MSG_EVENTS, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_EVENTS, PROTO_UP));
    proto_msg_t *ev = s_make_events (2);
    cr_assert (proto_msg_allowed (fl, PROTO_STATE_TRAINING, ev, PROTO_UP));
    cr_assert_not (proto_msg_allowed (pl, PROTO_STATE_TRAINING, ev, PROTO_DOWN));
    cr_assert_eq (proto_state_next (PROTO_STATE_TRAINING, PROTO_MSG_EVENTS, PROTO_UP),
                  PROTO_STATE_TRAINING);
    proto_msg_destroy (&ev);
    for (int t = PROTO_MSG_HELLO; t <= PROTO_MSG_EVENTS; t++) {
        cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CLOSED, t, PROTO_UP));
        cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CLOSED, t, PROTO_DOWN));
    }
    //  EVAL's form must match its direction.
    proto_msg_t *eval = s_make_tensor (PROTO_MSG_EVAL, 2, 1, 1, 2, 10);
    cr_assert (proto_msg_allowed (pl, PROTO_STATE_TRAINING, eval, PROTO_UP));
    cr_assert_not (proto_msg_allowed (pl, PROTO_STATE_TRAINING, eval, PROTO_DOWN));
    proto_eval_result_t res = { .count = 2 };
    proto_msg_set_eval_result (eval, &res);
    cr_assert (proto_msg_allowed (pl, PROTO_STATE_TRAINING, eval, PROTO_DOWN));
    cr_assert_not (proto_msg_allowed (pl, PROTO_STATE_TRAINING, eval, PROTO_UP));
    cr_assert_not (proto_msg_allowed (fl, PROTO_STATE_TRAINING, eval, PROTO_DOWN));
    proto_msg_destroy (&eval);
    proto_msg_t *act = s_make_tensor (PROTO_MSG_ACTIVATIONS, 2, 1, 1, 2, 10);
    cr_assert (proto_msg_allowed (pl, PROTO_STATE_TRAINING, act, PROTO_UP));
    cr_assert_not (proto_msg_allowed (pl, PROTO_STATE_JOINED, act, PROTO_UP));
    proto_msg_destroy (&act);

    //  Transitions.
    proto_state_t s = PROTO_STATE_CONNECTING;
    s = proto_state_next (s, PROTO_MSG_HELLO, PROTO_UP);
    cr_assert_eq (s, PROTO_STATE_JOINING);
    s = proto_state_next (s, PROTO_MSG_HEARTBEAT, PROTO_DOWN);
    cr_assert_eq (s, PROTO_STATE_JOINING);
    s = proto_state_next (s, PROTO_MSG_WELCOME, PROTO_DOWN);
    cr_assert_eq (s, PROTO_STATE_JOINED);
    s = proto_state_next (s, PROTO_MSG_MODEL, PROTO_DOWN);
    cr_assert_eq (s, PROTO_STATE_TRAINING);
    s = proto_state_next (s, PROTO_MSG_MODEL, PROTO_DOWN);
    cr_assert_eq (s, PROTO_STATE_TRAINING);
    cr_assert_eq (proto_state_next (s, PROTO_MSG_BYE, PROTO_UP), PROTO_STATE_CLOSED);
    cr_assert_eq (proto_state_next (s, PROTO_MSG_ERROR, PROTO_DOWN), PROTO_STATE_CLOSED);
}
