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

#include "nn_codec.h"
#include "proto_msg.h"
#include "pl_le.h"
#include "pltest_frames.h"

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

static proto_profile_t
s_profile (uint32_t units)
{
    proto_profile_t p = { .units = units, .threads = 2,
                          .encode_Bps = { 3.5e10, 6.1e8, 3.3e8 },
                          .decode_Bps = { 4.4e10, 1.29e10, 3.4e10 } };
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
    for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
        cr_assert_eq (g->encode_Bps[c], want.encode_Bps[c], "codec %d encode", c + 1);
        cr_assert_eq (g->decode_Bps[c], want.decode_Bps[c], "codec %d decode", c + 1);
    }
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

//  plan sent in a message of type (WELCOME or PLAN) and received back.
static proto_msg_t *
s_assign_round (int type, const proto_assign_t *plan)
{
    proto_msg_t *m = proto_msg_new (type);
    if (type == PROTO_MSG_WELCOME) {
        cr_assert_eq (proto_msg_set_config (m, "{}", 2), 0);
        cr_assert_eq (proto_msg_set_frame_cap (m, 4096), 0);
    }
    proto_msg_set_assign (m, plan);
    return s_round (m, NULL);
}

//  The codecs of what crosses the split travel in the plan (WELCOME and
//  PLAN alike) and come back as sent.
Test (proto_plan, plan_codecs_round_trip)
{
    proto_assign_t plan = s_plan ();
    plan.codec_up = 2;                  //  int8, stochastic rounding
    plan.codec_down = 3;                //  topk
    plan.codec_flags = PROTO_ASSIGN_STOCHASTIC_UP;
    plan.topk_fraction = 0.01f;
    for (int type = PROTO_MSG_WELCOME; type <= PROTO_MSG_PLAN; type += PROTO_MSG_PLAN
                                                                   - PROTO_MSG_WELCOME) {
        proto_msg_t *got = s_assign_round (type, &plan);
        const proto_assign_t *g = proto_msg_assign (got);
        cr_assert_eq (g->codec_up, 2);
        cr_assert_eq (g->codec_down, 3);
        cr_assert_eq (g->codec_flags, PROTO_ASSIGN_STOCHASTIC_UP);
        cr_assert_eq (g->topk_fraction, 0.01f);
        cr_assert_eq (g->split_point, plan.split_point);
        cr_assert_eq (g->origin_s, plan.origin_s);
        proto_msg_destroy (&got);
    }
}

//  Byte 56 codec_up, 57 codec_down, 58 flags, 59 reserved, 60 f32 fraction.
static void
s_plan_damaged (proto_assign_t plan, int offset, uint8_t byte, float fraction, int code,
                const char *needle)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
    proto_msg_set_assign (m, &plan);
    pltest_frames_t f = pltest_frames_of (m);
    if (offset >= 0)
        f.data[1][offset] = byte;
    else
        pl_le_put_f32 (f.data[1] + 60, fraction);
    pltest_frames_refused (&f, NULL, code, needle);
}

Test (proto_plan, plan_with_unknown_or_misplaced_codec_refused)
{
    proto_assign_t plan = s_plan ();
    plan.codec_up = 1;
    plan.codec_down = 1;
    s_plan_damaged (plan, 57, 9, 0, PROTO_E_VALUE, "PLAN: codec id 9 unknown");
    s_plan_damaged (plan, 56, 200, 0, PROTO_E_VALUE, "PLAN: codec id 200 unknown");
    s_plan_damaged (plan, 56, 3, 0, PROTO_E_VALUE, "topk compresses gradients (down) only");
    s_plan_damaged (plan, 58, PROTO_ASSIGN_STOCHASTIC_UP, 0, PROTO_E_VALUE,
                    "codec_flags 0x01 not allowed with codecs fp16/fp16");
    s_plan_damaged (plan, 59, 1, 0, PROTO_E_VALUE, "reserved byte 59 is 1");
    s_plan_damaged (plan, -1, 0, 0.5f, PROTO_E_VALUE, "topk_fraction 0.5 with codec_down fp16");
    plan.codec_down = 3;
    plan.topk_fraction = 0.1f;
    s_plan_damaged (plan, -1, 0, 0.0f, PROTO_E_VALUE, "topk_fraction 0 with codec_down topk");
    s_plan_damaged (plan, -1, 0, NAN, PROTO_E_VALUE, "topk_fraction nan");
    s_plan_damaged (plan, -1, 0, 1.5f, PROTO_E_VALUE, "topk_fraction 1.5");
    //  fl moves whole models: no codec.
    plan = s_plan ();
    plan.mode = PL_MODE_FL;
    plan.split_point = 0;
    plan.micro_batches = 1;
    s_plan_damaged (plan, 56, 1, 0, PROTO_E_VALUE, "codecs fp16/none in mode fl");
    //  The sender refuses what the receiver would.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
    plan.codec_up = 3;
    proto_msg_set_assign (m, &plan);
    char err[256] = "";
    cr_assert_neq (proto_msg_check (m, err, sizeof err), 0);
    cr_assert_not_null (strstr (err, "codec_up topk"), "%s", err);
    proto_msg_destroy (&m);
}

//  zstd per direction (PROTO_ASSIGN_ZSTD_UP/DOWN): for any codec but none
//  in that direction, beside int8's stochastic flags; kept by the round
//  trip in PLAN and WELCOME.
Test (proto_plan, plan_zstd_flags_follow_the_codecs)
{
    const struct { uint8_t up, down, flags; } ok[] = {
        { NN_CODEC_INT8, NN_CODEC_NONE, PROTO_ASSIGN_ZSTD_UP },
        { NN_CODEC_FP16, NN_CODEC_NONE, PROTO_ASSIGN_ZSTD_UP },
        { NN_CODEC_NONE, NN_CODEC_TOPK, PROTO_ASSIGN_ZSTD_DOWN },
        { NN_CODEC_NONE, NN_CODEC_FP16, PROTO_ASSIGN_ZSTD_DOWN },
        { NN_CODEC_INT8, NN_CODEC_TOPK, PROTO_ASSIGN_ZSTD_UP | PROTO_ASSIGN_ZSTD_DOWN
                                        | PROTO_ASSIGN_STOCHASTIC_UP },
        { NN_CODEC_INT8, NN_CODEC_INT8, PROTO_ASSIGN_ZSTD_UP | PROTO_ASSIGN_ZSTD_DOWN
                                        | PROTO_ASSIGN_STOCHASTIC_UP
                                        | PROTO_ASSIGN_STOCHASTIC_DOWN },
        { NN_CODEC_FP16, NN_CODEC_INT8, PROTO_ASSIGN_ZSTD_DOWN } };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        for (int type = PROTO_MSG_WELCOME; type <= PROTO_MSG_PLAN;
             type += PROTO_MSG_PLAN - PROTO_MSG_WELCOME) {
            proto_assign_t plan = s_plan ();
            plan.codec_up = ok[i].up;
            plan.codec_down = ok[i].down;
            plan.codec_flags = ok[i].flags;
            plan.topk_fraction = ok[i].down == NN_CODEC_TOPK ? 0.01f : 0.0f;
            proto_msg_t *got = s_assign_round (type, &plan);
            const proto_assign_t *g = proto_msg_assign (got);
            cr_assert_eq (g->codec_up, ok[i].up, "case %zu", i);
            cr_assert_eq (g->codec_down, ok[i].down, "case %zu", i);
            cr_assert_eq (g->codec_flags, ok[i].flags, "case %zu: flags 0x%02x", i,
                          g->codec_flags);
            proto_msg_destroy (&got);
        }

    //  Refused by the receiver (byte 58 set on the wire) and by the sender.
    const struct { uint8_t up, down, flags; const char *needle; } bad[] = {
        { NN_CODEC_NONE, NN_CODEC_FP16, PROTO_ASSIGN_ZSTD_UP,
          "codec_flags 0x04 not allowed with codecs none/fp16" },
        { NN_CODEC_NONE, NN_CODEC_TOPK, PROTO_ASSIGN_ZSTD_UP | PROTO_ASSIGN_ZSTD_DOWN,
          "codec_flags 0x0c not allowed with codecs none/topk" },
        { NN_CODEC_FP16, NN_CODEC_NONE, PROTO_ASSIGN_ZSTD_DOWN,
          "codec_flags 0x08 not allowed with codecs fp16/none" },
        { NN_CODEC_INT8, NN_CODEC_NONE, PROTO_ASSIGN_ZSTD_UP | PROTO_ASSIGN_ZSTD_DOWN,
          "codec_flags 0x0c not allowed with codecs int8/none" },
        { NN_CODEC_NONE, NN_CODEC_NONE, PROTO_ASSIGN_ZSTD_UP,
          "codec_flags 0x04 not allowed with codecs none/none" },
        { NN_CODEC_INT8, NN_CODEC_TOPK, PROTO_ASSIGN_ZSTD_UP | 0x10,
          "codec_flags 0x14 not allowed with codecs int8/topk" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        proto_assign_t plan = s_plan ();
        plan.codec_up = bad[i].up;
        plan.codec_down = bad[i].down;
        plan.topk_fraction = bad[i].down == NN_CODEC_TOPK ? 0.01f : 0.0f;
        s_plan_damaged (plan, 58, bad[i].flags, 0, PROTO_E_VALUE, bad[i].needle);
        plan.codec_flags = bad[i].flags;
        proto_msg_t *m = proto_msg_new (PROTO_MSG_PLAN);
        proto_msg_set_assign (m, &plan);
        char err[256] = "";
        cr_assert_eq (proto_msg_check (m, err, sizeof err), PROTO_E_VALUE, "case %zu", i);
        cr_assert_not_null (strstr (err, bad[i].needle), "%s", err);
        proto_msg_destroy (&m);
    }
    //  fl: no codec, so no zstd either.
    proto_assign_t plan = s_plan ();
    plan.mode = PL_MODE_FL;
    plan.split_point = 0;
    plan.micro_batches = 1;
    s_plan_damaged (plan, 58, PROTO_ASSIGN_ZSTD_UP, 0, PROTO_E_VALUE,
                    "codec_flags 0x04 not allowed with codecs none/none");
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
    pltest_frames_t f = pltest_frames_of (s_profile_msg (3));
    f.data[1][0] = 4;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "4 units need");
    //  Units 0 and beyond the cap.
    f = pltest_frames_of (s_profile_msg (3));
    f.data[1][0] = 0;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "units 0");
    f = pltest_frames_of (s_profile_msg (3));
    f.data[1][0] = 200;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "units 200");
    //  Truncated below the fixed part.
    f = pltest_frames_of (s_profile_msg (3));
    f.size[1] = 5;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "need at least 56");
    //  A cost that is negative, NaN, absurd; a fixed part above its total.
    const double bad[3] = { -1.0, NAN, 1e9 };
    for (int k = 0; k < 3; k++) {
        f = pltest_frames_of (s_profile_msg (3));
        pl_le_put_f64 (f.data[1] + PROTO_PROFILE_FIXED_SIZE + PROTO_UNIT_COST_SIZE + 8,
                          bad[k]);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "unit 1: bwd_s");
    }
    f = pltest_frames_of (s_profile_msg (3));
    pl_le_put_f64 (f.data[1] + PROTO_PROFILE_FIXED_SIZE + 16, 5.0);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "fixed part exceeds");
    //  Threads 0.
    f = pltest_frames_of (s_profile_msg (3));
    memset (f.data[1] + 4, 0, 4);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "threads is 0");
    //  Codec speeds (offset 8: fp16 encode, 16 fp16 decode, 24 int8 encode,
    //  ...): negative, NaN, infinite, beyond 10 TB/s.
    const double bad_speed[4] = { -1.0, NAN, INFINITY, 2e13 };
    for (int k = 0; k < 4; k++) {
        f = pltest_frames_of (s_profile_msg (3));
        pl_le_put_f64 (f.data[1] + 24, bad_speed[k]);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "PROFILE: int8 encode speed");
        f = pltest_frames_of (s_profile_msg (3));
        pl_le_put_f64 (f.data[1] + 48, bad_speed[k]);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "PROFILE: topk decode speed");
    }
    //  0 is "not measured", allowed.
    f = pltest_frames_of (s_profile_msg (3));
    pl_le_put_f64 (f.data[1] + 8, 0.0);
    proto_msg_t *ok = NULL;
    char err[256] = "";
    cr_assert_eq (proto_msg_decode_bytes (&ok, (const void *const *) f.data, f.size, f.count,
                                          NULL, err, sizeof err), 0,
                  "a codec speed of 0 (not measured) must be accepted: %s", err);
    cr_assert_eq (proto_msg_profile (ok)->encode_Bps[0], 0.0);
    proto_msg_destroy (&ok);
    pltest_frames_free (&f);
}

//  A profile of units with zstd ratios for every split point.
static proto_msg_t *
s_profile_zstd_msg (uint32_t units)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t p = s_profile (units);
    p.zstd_rows = units - 1;
    for (uint32_t r = 0; r < p.zstd_rows; r++)
        for (int k = 0; k < PROTO_ZSTD_RATIOS; k++)
            p.zstd_ratio[r][k] = 0.5 + 0.01 * r + 0.1 * k;
    cr_assert_eq (proto_msg_set_profile (m, &p), 0);
    return m;
}

Test (proto_plan, profile_zstd_ratios_round_trip)
{
    proto_msg_t *got = s_round (s_profile_zstd_msg (5), NULL);
    const proto_profile_t *g = proto_msg_profile (got);
    cr_assert_eq (g->zstd_rows, 4);
    for (uint32_t r = 0; r < 4; r++)
        for (int k = 0; k < PROTO_ZSTD_RATIOS; k++)
            cr_assert_eq (g->zstd_ratio[r][k], 0.5 + 0.01 * r + 0.1 * k, "row %u kind %d", r,
                          k);
    proto_msg_destroy (&got);
    //  Without the section: no rows (a device that measured none).
    got = s_round (s_profile_msg (5), NULL);
    cr_assert_eq (proto_msg_profile (got)->zstd_rows, 0);
    proto_msg_destroy (&got);
}

Test (proto_plan, malformed_profile_zstd_ratios_refused)
{
    const size_t rows_at = PROTO_PROFILE_FIXED_SIZE + 3 * PROTO_UNIT_COST_SIZE;
    //  A row count that is not units - 1.
    const uint32_t bad_rows[3] = { 0, 1, 7 };
    for (int k = 0; k < 3; k++) {
        pltest_frames_t f = pltest_frames_of (s_profile_zstd_msg (3));
        pl_le_put_u32 (f.data[1] + rows_at, bad_rows[k]);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "zstd ratio rows for 3 units");
    }
    //  A section cut short: neither size.
    pltest_frames_t f = pltest_frames_of (s_profile_zstd_msg (3));
    f.size[1] -= 8;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "(244 with zstd ratios)");
    //  A ratio that is 0, negative, NaN, infinite or above 2 (int8 down of
    //  split point 2: row 1, kind 3).
    const double bad[5] = { 0.0, -0.5, NAN, INFINITY, 2.5 };
    for (int k = 0; k < 5; k++) {
        f = pltest_frames_of (s_profile_zstd_msg (3));
        pl_le_put_f64 (f.data[1] + rows_at + 4 + (1 * PROTO_ZSTD_RATIOS + 3) * 8, bad[k]);
        pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "zstd ratio int8 down at split point 2");
    }
    //  One unit has no split point: a section (of 4 bytes) is refused.
    f = pltest_frames_of (s_profile_zstd_msg (2));
    f.data[1][0] = 1;
    f.size[1] = PROTO_PROFILE_FIXED_SIZE + PROTO_UNIT_COST_SIZE + 4;
    pl_le_put_u32 (f.data[1] + PROTO_PROFILE_FIXED_SIZE + PROTO_UNIT_COST_SIZE, 0);
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "1 units need 96");
    //  The setter refuses what the decoder refuses.
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROFILE);
    proto_profile_t p = s_profile (3);
    p.zstd_rows = 3;
    cr_assert_eq (proto_msg_set_profile (m, &p), -1);
    p.zstd_rows = 2;
    p.zstd_ratio[0][0] = p.zstd_ratio[0][1] = p.zstd_ratio[0][2] = p.zstd_ratio[0][3] = 0.5;
    p.zstd_ratio[1][0] = p.zstd_ratio[1][1] = p.zstd_ratio[1][2] = 0.5;
    cr_assert_eq (proto_msg_set_profile (m, &p), -1, "a ratio of 0 must be refused");
    p.zstd_ratio[1][3] = 1.5;
    cr_assert_eq (proto_msg_set_profile (m, &p), 0);
    proto_msg_destroy (&m);
}

Test (proto_plan, malformed_probe_and_plan_refused)
{
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
    proto_probe_t probe = { .probe_id = 1, .reply_bytes = 10 };
    proto_msg_set_probe (m, &probe, 64);
    pltest_frames_t f = pltest_frames_of (m);
    pl_le_put_u32 (f.data[1] + 4, PROTO_PROBE_MAX_BYTES + 1);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "reply_bytes");
    //  A payload bigger than the receiver's frame limit.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 4096);
    f = pltest_frames_of (m);
    proto_limits_t small = { .max_frame_bytes = 1024 };
    pltest_frames_refused (&f, &small, PROTO_E_SIZE, "limit 1024");
    //  A payload that is not zeros.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 64);
    f = pltest_frames_of (m);
    f.data[2][40] = 7;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "payload byte 40 is 7");
    //  PROBE without its payload frame.
    m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_probe (m, &probe, 0);
    f = pltest_frames_of (m);
    free (f.data[2]);
    f.count = 2;
    pltest_frames_refused (&f, NULL, PROTO_E_FRAMES, "expected 3");
    //  PLAN: micro-batches beyond the batch, a short frame.
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_assign_t plan = s_plan ();
    proto_msg_set_assign (m, &plan);
    f = pltest_frames_of (m);
    pl_le_put_u32 (f.data[1] + 8, 101);
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "PLAN: micro_batches 101");
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_msg_set_assign (m, &plan);
    f = pltest_frames_of (m);
    f.size[1] = 40;
    pltest_frames_refused (&f, NULL, PROTO_E_SIZE, "PLAN: payload 40 bytes");
    //  The PROFILE flag is WELCOME's alone.
    m = proto_msg_new (PROTO_MSG_PLAN);
    proto_msg_set_assign (m, &plan);
    f = pltest_frames_of (m);
    f.data[0][8] |= PROTO_FLAG_PROFILE;
    pltest_frames_refused (&f, NULL, PROTO_E_VALUE, "flag PROFILE set on a non-WELCOME");
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
