/*  test_proto_plan: the planning messages PROFILE, PROBE and PLAN and the
    WELCOME flag PROFILE (proto/PROTOCOL.md, "Planning").

    Round trips through the pure codec (encode to frames, decode the
    frames), then every way a peer can get them wrong, each rejected with
    its own code and a message naming the field, and where the state
    machine allows them.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "proto_msg.h"
#include "pl_le.h"

//  Encode m (destroyed), decode the frames again: the decoded message,
//  with limits.
static proto_msg_t *
s_round (proto_msg_t *m, const proto_limits_t *limits)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[512] = "";
    int n = proto_msg_encode (m, frames, err, sizeof err);
    cr_assert (n > 0, "encode: %d %s", n, err);
    proto_msg_destroy (&m);
    proto_msg_t *got = NULL;
    int rc = proto_msg_decode_frames (&got, frames, n, limits, err, sizeof err);
    for (int i = 0; i < n; i++)
        zmq_msg_close (&frames[i]);
    cr_assert_eq (rc, 0, "decode: %d %s", rc, err);
    return got;
}

//  Raw frames of a valid message, to damage.
typedef struct {
    uint8_t *data[PROTO_MAX_FRAMES];
    size_t size[PROTO_MAX_FRAMES];
    int count;
} s_frames_t;

static s_frames_t
s_bytes_of (proto_msg_t *m)
{
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    char err[512] = "";
    int n = proto_msg_encode (m, frames, err, sizeof err);
    cr_assert (n > 0, "encode: %d %s", n, err);
    proto_msg_destroy (&m);
    s_frames_t f = { .count = n };
    for (int i = 0; i < n; i++) {
        f.size[i] = zmq_msg_size (&frames[i]);
        f.data[i] = malloc (f.size[i] + 1);
        memcpy (f.data[i], zmq_msg_data (&frames[i]), f.size[i]);
        zmq_msg_close (&frames[i]);
    }
    return f;
}

//  f must be refused with code and an error naming needle; frees f.
static void
s_refused (s_frames_t *f, const proto_limits_t *limits, int code, const char *needle)
{
    proto_msg_t *m = NULL;
    char err[512] = "";
    int rc = proto_msg_decode_bytes (&m, (const void *const *) f->data, f->size, f->count,
                                     limits, err, sizeof err);
    cr_assert_eq (rc, code, "rc %d (%s), expected %d", rc, err, code);
    cr_assert_null (m);
    cr_assert (proto_code_is_malformed (rc));
    cr_assert_not_null (strstr (err, needle), "\"%s\" lacks \"%s\"", err, needle);
    for (int i = 0; i < f->count; i++)
        free (f->data[i]);
}

static proto_profile_t
s_profile (uint32_t units)
{
    proto_profile_t p = { .units = units, .threads = 2 };
    for (uint32_t u = 0; u < units; u++)
        p.unit[u] = (proto_unit_cost_t) { .fwd_s = 0.01 * (u + 1), .bwd_s = 0.02 * (u + 1),
                                          .fwd_fixed_s = 0.001, .bwd_fixed_s = 0.002,
                                          .upd_s = 1e-4 * u };
    return p;
}

static proto_msg_t *
s_profile_msg (uint32_t units)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROFILE);
    proto_msg_set_route (m, 1, 0, 0, 0);
    proto_profile_t p = s_profile (units);
    cr_assert_eq (proto_msg_set_profile (m, &p), 0);
    return m;
}

static proto_assign_t
s_plan (void)
{
    return (proto_assign_t) { .device_id = 1, .split_point = 2, .micro_batches = 10,
                            .batch_size = 100, .devices = 2, .mode = PL_MODE_PIPELEARN,
                            .seed = 7, .origin_s = 1.5e9 };
}

Test (proto_plan, profile_round_trip_is_exact)
{
    proto_msg_t *got = s_round (s_profile_msg (5), NULL);
    const proto_profile_t *g = proto_msg_profile (got);
    proto_profile_t want = s_profile (5);
    cr_assert_eq (g->units, 5);
    cr_assert_eq (g->threads, 2);
    cr_assert (memcmp (g->unit, want.unit, 5 * sizeof want.unit[0]) == 0);
    cr_assert_eq (proto_msg_header (got)->device_id, 1);
    proto_msg_destroy (&got);
}

Test (proto_plan, probe_round_trip_carries_sizes)
{
    for (size_t bytes = 0; bytes <= 300000; bytes += 150000) {
        proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
        proto_probe_t p = { .probe_id = 77, .reply_bytes = 123456 };
        cr_assert_eq (proto_msg_set_probe (m, &p, bytes), 0);
        proto_msg_t *got = s_round (m, NULL);
        cr_assert_eq (proto_msg_probe (got)->probe_id, 77);
        cr_assert_eq (proto_msg_probe (got)->reply_bytes, 123456);
        cr_assert_eq (proto_msg_probe_payload_bytes (got), bytes);
        proto_msg_destroy (&got);
    }
}

Test (proto_plan, plan_and_welcome_flag_round_trip)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
    proto_assign_t plan = s_plan ();
    proto_msg_set_assign (m, &plan);
    proto_msg_t *got = s_round (m, NULL);
    cr_assert (memcmp (proto_msg_assign (got), &plan, sizeof plan) == 0);
    proto_msg_destroy (&got);

    m = proto_msg_new (PROTO_MSG_WELCOME);
    cr_assert_eq (proto_msg_set_config (m, "{}", 2), 0);
    proto_msg_set_assign (m, &plan);
    cr_assert_eq (proto_msg_set_frame_cap (m, 4096), 0);
    proto_msg_set_profile_request (m, true);
    got = s_round (m, NULL);
    cr_assert (proto_msg_profile_requested (got));
    proto_msg_destroy (&got);
}

Test (proto_plan, setters_refuse_bad_values)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t p = s_profile (3);
    p.unit[1].bwd_s = NAN;
    cr_assert_eq (proto_msg_set_profile (m, &p), -1);
    p = s_profile (0);
    cr_assert_eq (proto_msg_set_profile (m, &p), -1);
    char err[256];
    cr_assert_neq (proto_msg_check (m, err, sizeof err), 0, "no profile set must not encode");
    proto_msg_destroy (&m);
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t probe = { .reply_bytes = PROTO_PROBE_MAX_BYTES + 1 };
    cr_assert_eq (proto_msg_set_probe (m, &probe, 0), -1);
    proto_msg_destroy (&m);
}

Test (proto_plan, malformed_profile_refused)
{
    //  Units field larger than the frame holds.
    s_frames_t f = s_bytes_of (s_profile_msg (3));
    f.data[1][0] = 4;
    s_refused (&f, NULL, PROTO_E_SIZE, "4 units need");
    //  Units 0 and beyond the cap.
    f = s_bytes_of (s_profile_msg (3));
    f.data[1][0] = 0;
    s_refused (&f, NULL, PROTO_E_VALUE, "units 0");
    f = s_bytes_of (s_profile_msg (3));
    f.data[1][0] = 200;
    s_refused (&f, NULL, PROTO_E_VALUE, "units 200");
    //  Truncated below the fixed part.
    f = s_bytes_of (s_profile_msg (3));
    f.size[1] = 5;
    s_refused (&f, NULL, PROTO_E_SIZE, "need at least 8");
    //  A cost that is negative, NaN, absurd; a fixed part above its total.
    const double bad[3] = { -1.0, NAN, 1e9 };
    for (int k = 0; k < 3; k++) {
        f = s_bytes_of (s_profile_msg (3));
        pl_le_put_f64 (f.data[1] + PROTO_PROFILE_FIXED_SIZE + PROTO_UNIT_COST_SIZE + 8,
                          bad[k]);
        s_refused (&f, NULL, PROTO_E_VALUE, "unit 1: bwd_s");
    }
    f = s_bytes_of (s_profile_msg (3));
    pl_le_put_f64 (f.data[1] + PROTO_PROFILE_FIXED_SIZE + 16, 5.0);
    s_refused (&f, NULL, PROTO_E_VALUE, "fixed part exceeds");
    //  Threads 0.
    f = s_bytes_of (s_profile_msg (3));
    memset (f.data[1] + 4, 0, 4);
    s_refused (&f, NULL, PROTO_E_VALUE, "threads is 0");
}

Test (proto_plan, malformed_probe_and_plan_refused)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t probe = { .probe_id = 1, .reply_bytes = 10 };
    proto_msg_set_probe (m, &probe, 64);
    s_frames_t f = s_bytes_of (m);
    pl_le_put_u32 (f.data[1] + 4, PROTO_PROBE_MAX_BYTES + 1);
    s_refused (&f, NULL, PROTO_E_VALUE, "reply_bytes");
    //  A payload bigger than the receiver's frame limit.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 4096);
    f = s_bytes_of (m);
    proto_limits_t small = { .max_frame_bytes = 1024 };
    s_refused (&f, &small, PROTO_E_SIZE, "limit 1024");
    //  A payload that is not zeros.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 64);
    f = s_bytes_of (m);
    f.data[2][40] = 7;
    s_refused (&f, NULL, PROTO_E_VALUE, "payload byte 40 is 7");
    //  PROBE without its payload frame.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 0);
    f = s_bytes_of (m);
    free (f.data[2]);
    f.count = 2;
    s_refused (&f, NULL, PROTO_E_FRAMES, "expected 3");
    //  PLAN: micro-batches beyond the batch, a short frame.
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_assign_t plan = s_plan ();
    proto_msg_set_assign (m, &plan);
    f = s_bytes_of (m);
    pl_le_put_u32 (f.data[1] + 8, 101);
    s_refused (&f, NULL, PROTO_E_VALUE, "PLAN: micro_batches 101");
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_msg_set_assign (m, &plan);
    f = s_bytes_of (m);
    f.size[1] = 40;
    s_refused (&f, NULL, PROTO_E_SIZE, "PLAN: payload 40 bytes");
    //  The PROFILE flag is WELCOME's alone.
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_msg_set_assign (m, &plan);
    f = s_bytes_of (m);
    f.data[0][8] |= PROTO_FLAG_PROFILE;
    s_refused (&f, NULL, PROTO_E_VALUE, "flag PROFILE set on a non-WELCOME");
}

Test (proto_plan, state_machine_places_planning)
{
    const pl_mode_t pl = PL_MODE_PIPELEARN, fl = PL_MODE_FL;
    //  Joined: PROFILE up, PROBE both ways, PLAN down; split modes only.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PROFILE, PROTO_UP));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PROFILE, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PROBE, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PROBE, PROTO_DOWN));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PLAN, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINED, PROTO_MSG_PLAN, PROTO_UP));
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_JOINED, PROTO_MSG_PROFILE, PROTO_UP));
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_JOINED, PROTO_MSG_PROBE, PROTO_DOWN));
    //  Training: PROBE and PLAN again (re-planning), PROFILE no more.
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_PROBE, PROTO_UP));
    cr_assert (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_PLAN, PROTO_DOWN));
    cr_assert_not (proto_type_allowed (pl, PROTO_STATE_TRAINING, PROTO_MSG_PROFILE, PROTO_UP));
    cr_assert_not (proto_type_allowed (fl, PROTO_STATE_TRAINING, PROTO_MSG_PLAN, PROTO_DOWN));
    //  Before WELCOME: none of them.
    for (int t = PROTO_MSG_PROFILE; t <= PROTO_MSG_PLAN; t++) {
        cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, t, PROTO_UP));
        cr_assert_not (proto_type_allowed (pl, PROTO_STATE_JOINING, t, PROTO_DOWN));
        cr_assert_not (proto_type_allowed (pl, PROTO_STATE_CLOSED, t, PROTO_DOWN));
    }
    cr_assert_str_eq (proto_type_name (PROTO_MSG_PROBE), "PROBE");
    cr_assert_str_eq (proto_type_name (PROTO_MSG_PLAN), "PLAN");
}
