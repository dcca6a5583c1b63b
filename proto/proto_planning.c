/*  proto_planning.c: the planning messages (proto/PROTOCOL.md, "Planning")
    and the assignment they carry.

    WELCOME  frame 2 (and PLAN frame 1): the assignment, what the device
             does in the run (proto_assign_t).

    PROFILE  device -> server, after a WELCOME flagged PROFILE: what every
             split unit costs on the device (nn_profile's measurement).
    PROBE    both ways: the server times round trips of probes of chosen
             sizes to measure a device's RTT, downlink and uplink.
    PLAN     server -> device: the plan the device follows from the next
             MODEL on (a re-planned micro-batch count or split point).

    Same rules as the rest of proto/: every count is checked against the
    frame it came in before anything is read through it; one check serves
    the encoder and the decoder.
*/
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "proto_planning.h"

#include "nn_alloc.h"
#include "nn_codec.h"
#include "proto_internal.h"

static int
s_profile_check (const proto_profile_t *p, char *err, size_t err_size)
{
    if (p->units < 1 || p->units > PROTO_PROFILE_UNITS_MAX)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "PROFILE: units %" PRIu32 " not in 1..%d", p->units,
                           PROTO_PROFILE_UNITS_MAX);
    if (p->threads < 1)
        return proto_fail (err, err_size, PROTO_E_VALUE, "PROFILE: threads is 0");
    static const char *const codecs[PROTO_PROFILE_CODECS] = { "fp16", "int8", "topk" };
    for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
        const double v[2] = { p->encode_Bps[c], p->decode_Bps[c] };
        for (int k = 0; k < 2; k++)
            if (!isfinite (v[k]) || v[k] < 0 || v[k] > PROTO_CODEC_MAX_BPS)
                return proto_fail (err, err_size, PROTO_E_VALUE,
                                   "PROFILE: %s %s speed is %g bytes/s, must be in 0..%g",
                                   codecs[c], k ? "decode" : "encode", v[k],
                                   PROTO_CODEC_MAX_BPS);
    }
    static const char *const names[5] = { "fwd_s", "bwd_s", "fwd_fixed_s", "bwd_fixed_s",
                                          "upd_s" };
    for (uint32_t u = 0; u < p->units; u++) {
        const proto_unit_cost_t *c = &p->unit[u];
        const double v[5] = { c->fwd_s, c->bwd_s, c->fwd_fixed_s, c->bwd_fixed_s, c->upd_s };
        for (int k = 0; k < 5; k++)
            if (!isfinite (v[k]) || v[k] < 0 || v[k] > PROTO_COST_MAX_S)
                return proto_fail (err, err_size, PROTO_E_VALUE,
                                   "PROFILE: unit %" PRIu32 ": %s is %g, must be in 0..%g",
                                   u, names[k], v[k], PROTO_COST_MAX_S);
        if (c->fwd_fixed_s > c->fwd_s || c->bwd_fixed_s > c->bwd_s)
            return proto_fail (err, err_size, PROTO_E_VALUE,
                               "PROFILE: unit %" PRIu32 ": a fixed part exceeds its total", u);
    }
    if (p->zstd_rows != 0 && p->zstd_rows != p->units - 1)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "PROFILE: %" PRIu32 " zstd ratio rows for %" PRIu32 " units, "
                           "need %" PRIu32, p->zstd_rows, p->units, p->units - 1);
    static const char *const kinds[PROTO_ZSTD_RATIOS] = { "fp16 up", "fp16 down", "int8 up",
                                                          "int8 down" };
    for (uint32_t r = 0; r < p->zstd_rows; r++)
        for (int k = 0; k < PROTO_ZSTD_RATIOS; k++) {
            double v = p->zstd_ratio[r][k];
            if (!(isfinite (v) && v > 0 && v <= PROTO_ZSTD_RATIO_MAX))
                return proto_fail (err, err_size, PROTO_E_VALUE,
                                   "PROFILE: zstd ratio %s at split point %" PRIu32 " is %g, "
                                   "must be in (0, %g]", kinds[k], r + 1, v,
                                   PROTO_ZSTD_RATIO_MAX);
        }
    return 0;
}

//  Bytes of PROFILE's optional zstd section for units (u32 rows, rows x
//  PROTO_ZSTD_RATIOS f64).
static size_t
s_zstd_section_bytes (uint32_t units)
{
    return 4 + (size_t) (units - 1) * PROTO_ZSTD_RATIOS * 8;
}

static int
s_probe_check (const proto_probe_t *p, char *err, size_t err_size)
{
    if (p->reply_bytes > PROTO_PROBE_MAX_BYTES)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "PROBE: reply_bytes %" PRIu32 " exceeds %" PRIu32,
                           p->reply_bytes, PROTO_PROBE_MAX_BYTES);
    return 0;
}

//  ---------------------------------------------------------------------
//  Setters and accessors

//  ---------------------------------------------------------------------
//  The assignment

//  The codec fields: known ids a direction can carry (topk: gradients
//  only), none in fl, flags only for int8, a fraction only for topk.
static int
s_assign_codecs_check (const proto_assign_t *p, const char *w, char *err, size_t err_size)
{
    const char *up = nn_codec_name ((nn_codec_id_t) p->codec_up);
    const char *down = nn_codec_name ((nn_codec_id_t) p->codec_down);
    if (!up || !down)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: codec id %u unknown (0 none, 1 fp16, 2 int8, 3 topk)", w,
                           (unsigned) (up ? p->codec_down : p->codec_up));
    if (p->codec_up == NN_CODEC_TOPK)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: codec_up topk: topk compresses gradients (down) only", w);
    if (p->mode == PL_MODE_FL && (p->codec_up || p->codec_down))
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: codecs %s/%s in mode fl, where nothing crosses a split", w,
                           up, down);
    unsigned allowed = (p->codec_up == NN_CODEC_INT8 ? PROTO_ASSIGN_STOCHASTIC_UP : 0)
                     | (p->codec_down == NN_CODEC_INT8 ? PROTO_ASSIGN_STOCHASTIC_DOWN : 0)
                     | (p->codec_up != NN_CODEC_NONE ? PROTO_ASSIGN_ZSTD_UP : 0)
                     | (p->codec_down != NN_CODEC_NONE ? PROTO_ASSIGN_ZSTD_DOWN : 0);
    if (p->codec_flags & ~allowed)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: codec_flags 0x%02x not allowed with codecs %s/%s", w,
                           (unsigned) p->codec_flags, up, down);
    bool topk = p->codec_down == NN_CODEC_TOPK;
    if (topk ? !(p->topk_fraction > 0 && p->topk_fraction <= 1) : p->topk_fraction != 0)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: topk_fraction %g with codec_down %s (topk: in (0, 1]; "
                           "else 0)", w, (double) p->topk_fraction, down);
    return 0;
}

int
proto_assign_check (const proto_assign_t *p, const proto_limits_t *l, const char *w,
                    char *err, size_t err_size)
{
    if (p->mode < PL_MODE_FL || p->mode > PL_MODE_PIPELEARN)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: mode %" PRIu32 " not in 1..4 (fl, sl, sfl, pipelearn)",
                           w, p->mode);
    if (p->devices < 1 || p->device_id >= p->devices)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: device_id %" PRIu32 " not below devices %" PRIu32,
                           w, p->device_id, p->devices);
    if (p->batch_size < 1)
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: batch_size is 0", w);
    if (l->max_batch && p->batch_size > l->max_batch)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: batch_size %" PRIu32 " exceeds limit %" PRIu32,
                           w, p->batch_size, l->max_batch);
    if (p->micro_batches < 1 || p->micro_batches > p->batch_size)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: micro_batches %" PRIu32 " not in 1..batch_size %" PRIu32,
                           w, p->micro_batches, p->batch_size);
    if (p->mode == PL_MODE_FL ? p->split_point != 0 : p->split_point < 1)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: split_point %" PRIu32 " in mode %s (fl: 0, others: >= 1)",
                           w, p->split_point, pl_mode_name ((int) p->mode));
    if (p->shard_count > UINT64_MAX - p->shard_begin)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: shard %" PRIu64 " + %" PRIu64 " overflows",
                           w, p->shard_begin, p->shard_count);
    if (!isfinite (p->origin_s) || p->origin_s < 0)
        return proto_fail (err, err_size, PROTO_E_TIME,
                           "%s: origin_s is %g, must be finite and >= 0", w, p->origin_s);
    return s_assign_codecs_check (p, w, err, err_size);
}

//  PROTOCOL.md, "WELCOME" frame 2 (also PLAN frame 1).
void
proto_assign_put (uint8_t *b, const proto_assign_t *p)
{
    pl_le_put_u32 (b, p->device_id);
    pl_le_put_u32 (b + 4, p->split_point);
    pl_le_put_u32 (b + 8, p->micro_batches);
    pl_le_put_u32 (b + 12, p->batch_size);
    pl_le_put_u32 (b + 16, p->devices);
    pl_le_put_u32 (b + 20, p->mode);
    pl_le_put_u64 (b + 24, p->shard_begin);
    pl_le_put_u64 (b + 32, p->shard_count);
    pl_le_put_u64 (b + 40, p->seed);
    pl_le_put_f64 (b + 48, p->origin_s);
    b[56] = p->codec_up;
    b[57] = p->codec_down;
    b[58] = p->codec_flags;
    b[59] = 0;
    pl_le_put_f32 (b + 60, p->topk_fraction);
}

int
proto_assign_get (proto_assign_t *p, const uint8_t *b, const char *w, char *err,
                  size_t err_size)
{
    p->device_id = pl_le_get_u32 (b);
    p->split_point = pl_le_get_u32 (b + 4);
    p->micro_batches = pl_le_get_u32 (b + 8);
    p->batch_size = pl_le_get_u32 (b + 12);
    p->devices = pl_le_get_u32 (b + 16);
    p->mode = pl_le_get_u32 (b + 20);
    p->shard_begin = pl_le_get_u64 (b + 24);
    p->shard_count = pl_le_get_u64 (b + 32);
    p->seed = pl_le_get_u64 (b + 40);
    p->origin_s = pl_le_get_f64 (b + 48);
    p->codec_up = b[56];
    p->codec_down = b[57];
    p->codec_flags = b[58];
    p->topk_fraction = pl_le_get_f32 (b + 60);
    if (b[59])
        return proto_fail (err, err_size, PROTO_E_VALUE, "%s: reserved byte 59 is %u, "
                           "must be 0", w, (unsigned) b[59]);
    return 0;
}

void
proto_msg_set_assign (proto_msg_t *self, const proto_assign_t *assign)
{
    assert (self && assign && (self->header.type == PROTO_MSG_WELCOME
                             || self->header.type == PROTO_MSG_PLAN));
    self->assign = *assign;
}

const proto_assign_t *
proto_msg_assign (const proto_msg_t *self)
{
    assert (self && (self->header.type == PROTO_MSG_WELCOME
                     || self->header.type == PROTO_MSG_PLAN));
    return &self->assign;
}

void
proto_msg_set_profile_request (proto_msg_t *self, bool request)
{
    assert (self && self->header.type == PROTO_MSG_WELCOME);
    if (request)
        self->header.flags |= PROTO_FLAG_PROFILE;
    else
        self->header.flags &= ~PROTO_FLAG_PROFILE;
}

bool
proto_msg_profile_requested (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_WELCOME);
    return (self->header.flags & PROTO_FLAG_PROFILE) != 0;
}

//  ---------------------------------------------------------------------
//  PROFILE, PROBE

int
proto_msg_set_profile (proto_msg_t *self, const proto_profile_t *profile)
{
    assert (self && profile && self->header.type == PROTO_MSG_PROFILE);
    if (s_profile_check (profile, NULL, 0))
        return -1;
    if (!self->profile)
        self->profile = nn_malloc (sizeof *self->profile);
    *self->profile = *profile;
    return 0;
}

const proto_profile_t *
proto_msg_profile (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_PROFILE);
    return self->profile;
}

int
proto_msg_set_probe (proto_msg_t *self, const proto_probe_t *probe, size_t payload_bytes)
{
    assert (self && probe && self->header.type == PROTO_MSG_PROBE);
    if (s_probe_check (probe, NULL, 0))
        return -1;
    self->probe = *probe;
    self->probe_bytes = payload_bytes;
    return 0;
}

const proto_probe_t *
proto_msg_probe (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_PROBE);
    return &self->probe;
}

size_t
proto_msg_probe_payload_bytes (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_PROBE);
    return self->probe_bytes;
}

//  ---------------------------------------------------------------------
//  Codec hooks (proto_msg.c calls these for the three types)

int
proto_msg_planning_check (const proto_msg_t *self, char *err, size_t err_size)
{
    const proto_limits_t l = proto_limits_resolve (NULL);
    switch (self->header.type) {
        case PROTO_MSG_PROFILE:
            if (!self->profile)
                return proto_fail (err, err_size, PROTO_E_VALUE, "PROFILE: no profile set");
            return s_profile_check (self->profile, err, err_size);
        case PROTO_MSG_PROBE:
            return s_probe_check (&self->probe, err, err_size);
        default:
            return proto_assign_check (&self->assign, &l, "PLAN", err, err_size);
    }
}

void
proto_msg_encode_planning (proto_msg_t *self, zmq_msg_t *frames)
{
    uint8_t *b;
    switch (self->header.type) {
        case PROTO_MSG_PROFILE: {
            const proto_profile_t *p = self->profile;
            b = proto_frame_alloc (&frames[1], PROTO_PROFILE_FIXED_SIZE
                                               + p->units * PROTO_UNIT_COST_SIZE
                                               + (p->zstd_rows
                                                  ? s_zstd_section_bytes (p->units) : 0));
            pl_le_put_u32 (b, p->units);
            pl_le_put_u32 (b + 4, p->threads);
            for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
                pl_le_put_f64 (b + 8 + 16 * c, p->encode_Bps[c]);
                pl_le_put_f64 (b + 16 + 16 * c, p->decode_Bps[c]);
            }
            b += PROTO_PROFILE_FIXED_SIZE;
            for (uint32_t u = 0; u < p->units; u++, b += PROTO_UNIT_COST_SIZE) {
                const proto_unit_cost_t *c = &p->unit[u];
                pl_le_put_f64 (b, c->fwd_s);
                pl_le_put_f64 (b + 8, c->bwd_s);
                pl_le_put_f64 (b + 16, c->fwd_fixed_s);
                pl_le_put_f64 (b + 24, c->bwd_fixed_s);
                pl_le_put_f64 (b + 32, c->upd_s);
            }
            if (p->zstd_rows) {
                pl_le_put_u32 (b, p->zstd_rows);
                b += 4;
                for (uint32_t r = 0; r < p->zstd_rows; r++)
                    for (int k = 0; k < PROTO_ZSTD_RATIOS; k++, b += 8)
                        pl_le_put_f64 (b, p->zstd_ratio[r][k]);
            }
            break;
        }
        case PROTO_MSG_PROBE:
            b = proto_frame_alloc (&frames[1], PROTO_PROBE_SIZE);
            pl_le_put_u32 (b, self->probe.probe_id);
            pl_le_put_u32 (b + 4, self->probe.reply_bytes);
            b = proto_frame_alloc (&frames[2], self->probe_bytes);
            if (self->probe_bytes)
                memset (b, 0, self->probe_bytes);
            break;
        default:
            proto_assign_put (proto_frame_alloc (&frames[1], PROTO_ASSIGN_SIZE), &self->assign);
            break;
    }
}

int
proto_msg_decode_planning (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
                           char *err, size_t err_size)
{
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    switch (self->header.type) {
        case PROTO_MSG_PROFILE: {
            if (len < PROTO_PROFILE_FIXED_SIZE)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "PROFILE: payload %zu bytes, need at least %d",
                                   len, PROTO_PROFILE_FIXED_SIZE);
            uint32_t units = pl_le_get_u32 (b);
            if (units < 1 || units > PROTO_PROFILE_UNITS_MAX)
                return proto_fail (err, err_size, PROTO_E_VALUE,
                                   "PROFILE: units %" PRIu32 " not in 1..%d", units,
                                   PROTO_PROFILE_UNITS_MAX);
            size_t need = PROTO_PROFILE_FIXED_SIZE + (size_t) units * PROTO_UNIT_COST_SIZE;
            size_t with_zstd = need + s_zstd_section_bytes (units);
            //  One unit has no split point: no zstd section (one encoding).
            if (len != need && (units < 2 || len != with_zstd))
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "PROFILE: payload %zu bytes, %" PRIu32 " units need %zu "
                                   "(%zu with zstd ratios)", len, units, need,
                                   units < 2 ? need : with_zstd);
            proto_profile_t *p = nn_calloc (1, sizeof *p);
            p->units = units;
            p->threads = pl_le_get_u32 (b + 4);
            for (int c = 0; c < PROTO_PROFILE_CODECS; c++) {
                p->encode_Bps[c] = pl_le_get_f64 (b + 8 + 16 * c);
                p->decode_Bps[c] = pl_le_get_f64 (b + 16 + 16 * c);
            }
            const uint8_t *r = b + PROTO_PROFILE_FIXED_SIZE;
            for (uint32_t u = 0; u < units; u++, r += PROTO_UNIT_COST_SIZE) {
                proto_unit_cost_t *c = &p->unit[u];
                c->fwd_s = pl_le_get_f64 (r);
                c->bwd_s = pl_le_get_f64 (r + 8);
                c->fwd_fixed_s = pl_le_get_f64 (r + 16);
                c->bwd_fixed_s = pl_le_get_f64 (r + 24);
                c->upd_s = pl_le_get_f64 (r + 32);
            }
            if (len == with_zstd) {
                //  The count is checked against units before a row is read.
                p->zstd_rows = pl_le_get_u32 (r);
                if (p->zstd_rows != units - 1) {
                    nn_free (p);
                    return proto_fail (err, err_size, PROTO_E_VALUE,
                                       "PROFILE: %" PRIu32 " zstd ratio rows for %" PRIu32
                                       " units, need %" PRIu32, pl_le_get_u32 (r), units,
                                       units - 1);
                }
                r += 4;
                for (uint32_t q = 0; q < p->zstd_rows; q++)
                    for (int k = 0; k < PROTO_ZSTD_RATIOS; k++, r += 8)
                        p->zstd_ratio[q][k] = pl_le_get_f64 (r);
            }
            int rc = s_profile_check (p, err, err_size);
            if (rc) {
                nn_free (p);
                return rc;
            }
            self->profile = p;
            return 0;
        }
        case PROTO_MSG_PROBE: {
            if (len != PROTO_PROBE_SIZE)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "PROBE: payload %zu bytes, expected %d",
                                   len, PROTO_PROBE_SIZE);
            self->probe.probe_id = pl_le_get_u32 (b);
            self->probe.reply_bytes = pl_le_get_u32 (b + 4);
            //  The payload was sized against max_frame_bytes with every
            //  frame; only its length is kept. It must be zeros, so that a
            //  PROBE has one encoding (and carries nothing else).
            size_t plen;
            const uint8_t *pb = proto_frame_bytes (&frames[2], &plen);
            for (size_t i = 0; i < plen; i++)
                if (pb[i])
                    return proto_fail (err, err_size, PROTO_E_VALUE,
                                       "PROBE: payload byte %zu is %u, must be 0", i,
                                       (unsigned) pb[i]);
            self->probe_bytes = plen;
            return s_probe_check (&self->probe, err, err_size);
        }
        default:
            if (len != PROTO_ASSIGN_SIZE)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "PLAN: payload %zu bytes, expected %d", len, PROTO_ASSIGN_SIZE);
            int rc = proto_assign_get (&self->assign, b, "PLAN", err, err_size);
            if (rc)
                return rc;
            //  max_batch limits tensors; the plan's batch is the session's
            //  (the device compares it with its own).
            proto_limits_t pl = *l;
            pl.max_batch = 0;
            return proto_assign_check (&self->assign, &pl, "PLAN", err, err_size);
    }
}
