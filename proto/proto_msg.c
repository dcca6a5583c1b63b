/*  proto_msg.c: the message envelope, the fixed-layout payloads (HELLO,
    WELCOME, STATS, EVENTS, ERROR, EVAL results), socket I/O and the state machine
    (proto/PROTOCOL.md). The float-carrying payloads are in proto_tensor.c.

    One set of checks serves both directions: the decoder parses bytes into
    the payload structs and runs the s_*_check functions with the
    receiver's limits; the encoder runs the same checks with default limits
    before it writes a byte, so we never send what a peer would reject.

    Every length a peer announces is compared with the frame that arrived
    before anything is read through it. Frames are counted and sized before
    any payload is parsed.
*/
#include "proto_msg.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"
#include "proto_internal.h"

//  Header field offsets (PROTOCOL.md, "Frame 0: header").
#define S_OFF_MAGIC      0
#define S_OFF_VERSION    4
#define S_OFF_TYPE       6
#define S_OFF_FLAGS      8
#define S_OFF_DEVICE     12
#define S_OFF_EPOCH      16
#define S_OFF_ITERATION  20
#define S_OFF_MICRO      24
#define S_OFF_RESERVED   28
#define S_OFF_SEQUENCE   32

#define S_FLAGS_KNOWN    (PROTO_FLAG_EVAL_RESULT | PROTO_FLAG_LAST | PROTO_FLAG_PROFILE \
                          | PROTO_FLAG_CALIBRATE)
#define S_TYPE_MAX       PROTO_MSG_PLAN

//  Frames of a message of this type, header included.
static int
s_frames_for (int type, uint32_t flags)
{
    switch (type) {
        case PROTO_MSG_HELLO:       return 2;
        case PROTO_MSG_WELCOME:     return 4;
        case PROTO_MSG_MODEL:       return 3;
        case PROTO_MSG_PARAMS:      return 3;
        case PROTO_MSG_ACTIVATIONS: return 4;
        case PROTO_MSG_GRADIENTS:   return 4;
        case PROTO_MSG_EVAL:        return flags & PROTO_FLAG_EVAL_RESULT ? 2 : 4;
        case PROTO_MSG_STATS:       return 2;
        case PROTO_MSG_EVENTS:      return 2;
        case PROTO_MSG_ERROR:       return 2;
        case PROTO_MSG_PROFILE:     return 2;
        case PROTO_MSG_PROBE:       return 3;
        case PROTO_MSG_PLAN:        return 2;
        default:                    return 1;   //  HEARTBEAT, BYE
    }
}

//  ---------------------------------------------------------------------
//  Header

void
proto_header_encode (uint8_t out[PROTO_HEADER_SIZE], const proto_header_t *h)
{
    pl_le_put_u32 (out + S_OFF_MAGIC, h->magic);
    pl_le_put_u16 (out + S_OFF_VERSION, h->version);
    pl_le_put_u16 (out + S_OFF_TYPE, h->type);
    pl_le_put_u32 (out + S_OFF_FLAGS, h->flags);
    pl_le_put_u32 (out + S_OFF_DEVICE, h->device_id);
    pl_le_put_u32 (out + S_OFF_EPOCH, h->epoch);
    pl_le_put_u32 (out + S_OFF_ITERATION, h->iteration);
    pl_le_put_u32 (out + S_OFF_MICRO, h->micro_batch);
    pl_le_put_u32 (out + S_OFF_RESERVED, h->reserved);
    pl_le_put_u64 (out + S_OFF_SEQUENCE, h->sequence);
}

//  Type, reserved and flags: shared by the decoder and the encoder.
static int
s_header_check (const proto_header_t *h, char *err, size_t err_size)
{
    if (h->type < 1 || h->type > S_TYPE_MAX)
        return proto_fail (err, err_size, PROTO_E_TYPE,
                           "header: unknown type %u (known 1..%d)",
                           (unsigned) h->type, S_TYPE_MAX);
    const char *tn = proto_type_name (h->type);
    if (h->reserved != 0)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: reserved is 0x%08" PRIx32 ", must be 0",
                           tn, h->reserved);
    if (h->flags & ~S_FLAGS_KNOWN)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: unknown flags 0x%08" PRIx32 " (known 0x%08x)",
                           tn, h->flags, S_FLAGS_KNOWN);
    if ((h->flags & PROTO_FLAG_EVAL_RESULT) && h->type != PROTO_MSG_EVAL)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: flag EVAL_RESULT set on a non-EVAL message", tn);
    if ((h->flags & PROTO_FLAG_PROFILE) && h->type != PROTO_MSG_WELCOME)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: flag PROFILE set on a non-WELCOME message", tn);
    if ((h->flags & PROTO_FLAG_CALIBRATE) && h->type != PROTO_MSG_MODEL
    &&  h->type != PROTO_MSG_ACTIVATIONS && h->type != PROTO_MSG_PARAMS)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: flag CALIBRATE set on a message other than MODEL, "
                           "ACTIVATIONS or PARAMS", tn);
    if ((h->flags & PROTO_FLAG_LAST) && !proto_type_is_tensor (h->type))
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "%s: header: flag LAST set on a message without a sequence", tn);
    return 0;
}

int
proto_header_decode (proto_header_t *h, const uint8_t *buf, size_t len,
                     char *err, size_t err_size)
{
    memset (h, 0, sizeof *h);
    //  Magic and version sit at fixed offsets in every version, so a peer
    //  speaking another version is told so even if its header is longer.
    if (len >= 4) {
        h->magic = pl_le_get_u32 (buf + S_OFF_MAGIC);
        if (h->magic != PROTO_MAGIC)
            return proto_fail (err, err_size, PROTO_E_MAGIC,
                               "header: magic 0x%08" PRIx32 ", expected 0x%08x (\"PLRN\")",
                               h->magic, PROTO_MAGIC);
    }
    if (len >= 6) {
        h->version = pl_le_get_u16 (buf + S_OFF_VERSION);
        if (h->version != PROTO_VERSION)
            return proto_fail (err, err_size, PROTO_E_VERSION,
                               "header: protocol version %u not supported (this build speaks %d)",
                               (unsigned) h->version, PROTO_VERSION);
    }
    if (len != PROTO_HEADER_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "header: %zu bytes, expected %d", len, PROTO_HEADER_SIZE);
    h->type = pl_le_get_u16 (buf + S_OFF_TYPE);
    h->flags = pl_le_get_u32 (buf + S_OFF_FLAGS);
    h->device_id = pl_le_get_u32 (buf + S_OFF_DEVICE);
    h->epoch = pl_le_get_u32 (buf + S_OFF_EPOCH);
    h->iteration = pl_le_get_u32 (buf + S_OFF_ITERATION);
    h->micro_batch = pl_le_get_u32 (buf + S_OFF_MICRO);
    h->reserved = pl_le_get_u32 (buf + S_OFF_RESERVED);
    h->sequence = pl_le_get_u64 (buf + S_OFF_SEQUENCE);
    return s_header_check (h, err, err_size);
}

//  ---------------------------------------------------------------------
//  Payload checks, shared by decoder and encoder

//  0 if s[0..len) is UTF-8 (RFC 3629: no overlongs, surrogates or code
//  points past U+10FFFF) without NUL; else PROTO_E_TEXT.
static int
s_text_check (const uint8_t *s, size_t len, const char *what, char *err, size_t err_size)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c == 0)
            return proto_fail (err, err_size, PROTO_E_TEXT,
                               "%s: NUL byte at offset %zu", what, i);
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need = 0;
        uint8_t lo = 0x80, hi = 0xBF;       //  range of the first continuation
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c == 0xE0)
            need = 2, lo = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
            need = 2;
        else if (c == 0xED)
            need = 2, hi = 0x9F;
        else if (c == 0xF0)
            need = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3)
            need = 3;
        else if (c == 0xF4)
            need = 3, hi = 0x8F;
        bool ok = need > 0 && len - i - 1 >= need;
        for (size_t k = 1; ok && k <= need; k++) {
            uint8_t b = s[i + k];
            ok = k == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xBF;
        }
        if (!ok)
            return proto_fail (err, err_size, PROTO_E_TEXT,
                               "%s: invalid UTF-8 at offset %zu (byte 0x%02x)", what, i, c);
        i += need + 1;
    }
    return 0;
}

static int
s_name_check (const char *name, size_t len, char *err, size_t err_size)
{
    if (len > PROTO_NAME_MAX)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "HELLO: name length %zu exceeds %d", len, PROTO_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) name[i];
        if (c < 0x20 || c > 0x7E)
            return proto_fail (err, err_size, PROTO_E_TEXT,
                               "HELLO: name byte 0x%02x at offset %zu is not printable ASCII",
                               c, i);
    }
    return 0;
}

static int
s_hello_check (const proto_hello_t *h, char *err, size_t err_size)
{
    if (h->protocol_version < 1)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "HELLO: protocol_version is 0, must be >= 1");
    if (h->requested_device_id < -1)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "HELLO: requested_device_id %" PRId32 ", must be >= 0 or -1 (any)",
                           h->requested_device_id);
    return s_name_check (h->name, strnlen (h->name, sizeof h->name), err, err_size);
}

static int
s_eval_result_check (const proto_eval_result_t *r, char *err, size_t err_size)
{
    if (r->correct > r->count)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "EVAL: result: correct %" PRIu64 " exceeds count %" PRIu64,
                           r->correct, r->count);
    return 0;
}

static int
s_stats_check (const proto_stats_t *s, char *err, size_t err_size)
{
    const double t[4] = { s->forward_s, s->backward_s, s->update_s, s->idle_s };
    static const char *const names[4] = { "forward_s", "backward_s", "update_s", "idle_s" };
    for (int i = 0; i < 4; i++)
        if (!isfinite (t[i]) || t[i] < 0)
            return proto_fail (err, err_size, PROTO_E_VALUE,
                               "STATS: %s is %g, must be finite and >= 0", names[i], t[i]);
    if (!isfinite (s->loss_sum) || s->loss_sum < 0)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "STATS: loss_sum is %g, must be finite and >= 0", s->loss_sum);
    if (s->correct > s->samples)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "STATS: correct %" PRIu64 " exceeds samples %" PRIu64,
                           s->correct, s->samples);
    return 0;
}

//  One EVENTS record; index names it in the message.
static int
s_event_check (const proto_event_t *e, size_t index, char *err, size_t err_size)
{
    if (e->stage < 1 || e->stage > PROTO_STAGE_MAX)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "EVENTS: event %zu: stage %" PRIu32 " not in 1..%d",
                           index, e->stage, PROTO_STAGE_MAX);
    if (!isfinite (e->start_s) || e->start_s < 0)
        return proto_fail (err, err_size, PROTO_E_TIME,
                           "EVENTS: event %zu: start_s is %g, must be finite and >= 0",
                           index, e->start_s);
    if (!isfinite (e->end_s) || e->end_s < 0)
        return proto_fail (err, err_size, PROTO_E_TIME,
                           "EVENTS: event %zu: end_s is %g, must be finite and >= 0",
                           index, e->end_s);
    if (e->end_s < e->start_s)
        return proto_fail (err, err_size, PROTO_E_TIME,
                           "EVENTS: event %zu: end_s %.9g is before start_s %.9g",
                           index, e->end_s, e->start_s);
    return 0;
}

//  The record count against the limit, then every record.
static int
s_events_check (const proto_event_t *events, size_t count, uint32_t max_events,
                char *err, size_t err_size)
{
    if (count == 0)
        return proto_fail (err, err_size, PROTO_E_SIZE, "EVENTS: no events");
    if (count > max_events)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "EVENTS: %zu events exceeds limit %" PRIu32, count, max_events);
    for (size_t i = 0; i < count; i++) {
        int rc = s_event_check (&events[i], i, err, err_size);
        if (rc)
            return rc;
    }
    return 0;
}

static int
s_error_check (uint32_t code, char *err, size_t err_size)
{
    if (code == 0)
        return proto_fail (err, err_size, PROTO_E_VALUE, "ERROR: code is 0, must be >= 1");
    return 0;
}

//  ---------------------------------------------------------------------
//  Messages

proto_msg_t *
proto_msg_new (int type)
{
    assert (type >= 1 && type <= S_TYPE_MAX);
    proto_msg_t *self = nn_calloc (1, sizeof *self);
    self->header.magic = PROTO_MAGIC;
    self->header.version = PROTO_VERSION;
    self->header.type = (uint16_t) type;
    if (type == PROTO_MSG_HELLO) {
        self->hello.protocol_version = PROTO_VERSION;
        self->hello.requested_device_id = -1;
    }
    return self;
}

void
proto_msg_destroy (proto_msg_t **self_p)
{
    assert (self_p);
    proto_msg_t *self = *self_p;
    if (!self)
        return;
    proto_msg_data_clear (self);
    nn_free (self->config);
    nn_free (self->labels);
    nn_free (self->error_text);
    nn_free (self->events);
    nn_free (self->profile);
    nn_free (self);
    *self_p = NULL;
}

int
proto_msg_type (const proto_msg_t *self)
{
    assert (self);
    return self->header.type;
}

const proto_header_t *
proto_msg_header (const proto_msg_t *self)
{
    assert (self);
    return &self->header;
}

void
proto_msg_set_route (proto_msg_t *self, uint32_t device_id, uint32_t epoch,
                     uint32_t iteration, uint32_t micro_batch)
{
    assert (self);
    self->header.device_id = device_id;
    self->header.epoch = epoch;
    self->header.iteration = iteration;
    self->header.micro_batch = micro_batch;
}

void
proto_msg_set_sequence (proto_msg_t *self, uint64_t sequence)
{
    assert (self);
    self->header.sequence = sequence;
}

void
proto_msg_set_last (proto_msg_t *self, bool last)
{
    assert (self && proto_type_is_tensor (self->header.type));
    if (last)
        self->header.flags |= PROTO_FLAG_LAST;
    else
        self->header.flags &= ~PROTO_FLAG_LAST;
}

bool
proto_msg_is_last (const proto_msg_t *self)
{
    assert (self);
    return (self->header.flags & PROTO_FLAG_LAST) != 0;
}

void
proto_msg_set_calibrate (proto_msg_t *self, bool calibrate)
{
    assert (self);
    int t = self->header.type;
    assert (t == PROTO_MSG_MODEL || t == PROTO_MSG_ACTIVATIONS || t == PROTO_MSG_PARAMS);
    if (calibrate)
        self->header.flags |= PROTO_FLAG_CALIBRATE;
    else
        self->header.flags &= ~PROTO_FLAG_CALIBRATE;
}

bool
proto_msg_is_calibrate (const proto_msg_t *self)
{
    assert (self);
    return (self->header.flags & PROTO_FLAG_CALIBRATE) != 0;
}

int
proto_msg_set_hello (proto_msg_t *self, const proto_hello_t *hello)
{
    assert (self && hello && self->header.type == PROTO_MSG_HELLO);
    if (s_hello_check (hello, NULL, 0))
        return -1;
    self->hello = *hello;
    return 0;
}

const proto_hello_t *
proto_msg_hello (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_HELLO);
    return &self->hello;
}

int
proto_msg_set_config (proto_msg_t *self, const char *json, size_t len)
{
    assert (self && json && self->header.type == PROTO_MSG_WELCOME);
    if (len == 0 || len > PROTO_JSON_MAX
        || s_text_check ((const uint8_t *) json, len, "config", NULL, 0))
        return -1;
    char *copy = nn_malloc (len + 1);
    memcpy (copy, json, len);
    copy[len] = 0;
    nn_free (self->config);
    self->config = copy;
    self->config_len = len;
    return 0;
}

//  A cap below a header or above the protocol's frame limit is no cap a
//  server can mean: a device could send nothing, or more than any
//  receiver decodes.
static int
s_frame_cap_check (uint64_t cap, char *err, size_t err_size)
{
    if (cap < PROTO_HEADER_SIZE || cap > PROTO_DEFAULT_MAX_FRAME_BYTES)
        return proto_fail (err, err_size, PROTO_E_VALUE,
                           "WELCOME: frame cap %" PRIu64 " bytes not in %d..%zu", cap,
                           PROTO_HEADER_SIZE, PROTO_DEFAULT_MAX_FRAME_BYTES);
    return 0;
}

int
proto_msg_set_frame_cap (proto_msg_t *self, uint64_t max_frame_bytes)
{
    assert (self && self->header.type == PROTO_MSG_WELCOME);
    if (s_frame_cap_check (max_frame_bytes, NULL, 0))
        return -1;
    self->frame_cap = max_frame_bytes;
    return 0;
}

uint64_t
proto_msg_frame_cap (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_WELCOME);
    return self->frame_cap;
}

const char *
proto_msg_config (const proto_msg_t *self, size_t *len_out)
{
    assert (self && self->header.type == PROTO_MSG_WELCOME);
    if (len_out)
        *len_out = self->config_len;
    return self->config;
}

void
proto_msg_set_eval_result (proto_msg_t *self, const proto_eval_result_t *r)
{
    assert (self && r && self->header.type == PROTO_MSG_EVAL);
    proto_msg_data_clear (self);
    nn_free (self->labels);
    self->labels = NULL;
    self->labels_count = 0;
    memset (&self->tensor, 0, sizeof self->tensor);
    self->eval = *r;
    self->header.flags |= PROTO_FLAG_EVAL_RESULT;
}

bool
proto_msg_is_eval_result (const proto_msg_t *self)
{
    assert (self);
    return self->header.type == PROTO_MSG_EVAL
        && (self->header.flags & PROTO_FLAG_EVAL_RESULT);
}

const proto_eval_result_t *
proto_msg_eval_result (const proto_msg_t *self)
{
    assert (proto_msg_is_eval_result (self));
    return &self->eval;
}

void
proto_msg_set_stats (proto_msg_t *self, const proto_stats_t *stats)
{
    assert (self && stats && self->header.type == PROTO_MSG_STATS);
    self->stats = *stats;
}

const proto_stats_t *
proto_msg_stats (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_STATS);
    return &self->stats;
}

int
proto_msg_set_events (proto_msg_t *self, const proto_event_t *events, size_t count)
{
    assert (self && self->header.type == PROTO_MSG_EVENTS && (events || count == 0));
    if (s_events_check (events, count, PROTO_EVENTS_MAX, NULL, 0))
        return -1;
    proto_event_t *copy = nn_malloc (count * sizeof *copy);
    memcpy (copy, events, count * sizeof *copy);
    nn_free (self->events);
    self->events = copy;
    self->events_count = count;
    return 0;
}

const proto_event_t *
proto_msg_events (const proto_msg_t *self, size_t *count_out)
{
    assert (self && self->header.type == PROTO_MSG_EVENTS);
    if (count_out)
        *count_out = self->events_count;
    return self->events;
}

int
proto_msg_set_error (proto_msg_t *self, uint32_t code, const char *text)
{
    assert (self && text && self->header.type == PROTO_MSG_ERROR);
    size_t len = strlen (text);
    if (code == 0 || len > PROTO_TEXT_MAX
        || s_text_check ((const uint8_t *) text, len, "text", NULL, 0))
        return -1;
    nn_free (self->error_text);
    self->error_text = nn_strdup (text);
    self->error_code = code;
    return 0;
}

uint32_t
proto_msg_error_code (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_ERROR);
    return self->error_code;
}

const char *
proto_msg_error_text (const proto_msg_t *self)
{
    assert (self && self->header.type == PROTO_MSG_ERROR);
    return self->error_text ? self->error_text : "";
}

//  ---------------------------------------------------------------------
//  Encoding

int
proto_msg_check (const proto_msg_t *self, char *err, size_t err_size)
{
    assert (self);
    const proto_limits_t l = proto_limits_resolve (NULL);
    const proto_header_t *h = &self->header;
    int rc = s_header_check (h, err, err_size);
    if (rc)
        return rc;
    switch (h->type) {
        case PROTO_MSG_HELLO:
            return s_hello_check (&self->hello, err, err_size);
        case PROTO_MSG_WELCOME:
            if (!self->config)
                return proto_fail (err, err_size, PROTO_E_VALUE, "WELCOME: no config set");
            rc = s_frame_cap_check (self->frame_cap, err, err_size);
            if (rc)
                return rc;
            return proto_assign_check (&self->assign, &l, "WELCOME: plan", err, err_size);
        case PROTO_MSG_MODEL:
        case PROTO_MSG_PARAMS:
            return proto_msg_slab_check (self, err, err_size);
        case PROTO_MSG_STATS:
            return s_stats_check (&self->stats, err, err_size);
        case PROTO_MSG_EVENTS:
            return s_events_check (self->events, self->events_count, l.max_events,
                                   err, err_size);
        case PROTO_MSG_ERROR:
            return s_error_check (self->error_code, err, err_size);
        case PROTO_MSG_HEARTBEAT:
        case PROTO_MSG_BYE:
            return 0;
        case PROTO_MSG_PROFILE:
        case PROTO_MSG_PROBE:
        case PROTO_MSG_PLAN:
            return proto_msg_planning_check (self, err, err_size);
        default:
            break;
    }
    if (proto_msg_is_eval_result (self))
        return s_eval_result_check (&self->eval, err, err_size);
    return proto_msg_tensor_check (self, err, err_size);
}

int
proto_msg_encode (proto_msg_t *self, zmq_msg_t frames[PROTO_MAX_FRAMES],
                  char *err, size_t err_size)
{
    int rc = proto_msg_check (self, err, err_size);
    if (rc)
        return rc;
    const int type = self->header.type;
    const int count = s_frames_for (type, self->header.flags);
    proto_header_encode (proto_frame_alloc (&frames[0], PROTO_HEADER_SIZE), &self->header);
    uint8_t *b;
    switch (type) {
        case PROTO_MSG_HELLO: {
            size_t name_len = strnlen (self->hello.name, sizeof self->hello.name);
            b = proto_frame_alloc (&frames[1], PROTO_HELLO_FIXED_SIZE + name_len);
            pl_le_put_u16 (b, self->hello.protocol_version);
            pl_le_put_u32 (b + 2, self->hello.capabilities);
            pl_le_put_i32 (b + 6, self->hello.requested_device_id);
            pl_le_put_u64 (b + 10, self->hello.sample_count);
            pl_le_put_u16 (b + 18, (uint16_t) name_len);
            memcpy (b + 20, self->hello.name, name_len);
            break;
        }
        case PROTO_MSG_WELCOME: {
            b = proto_frame_alloc (&frames[1], self->config_len);
            memcpy (b, self->config, self->config_len);
            proto_assign_put (proto_frame_alloc (&frames[2], PROTO_ASSIGN_SIZE), &self->assign);
            pl_le_put_u64 (proto_frame_alloc (&frames[3], PROTO_CAP_SIZE), self->frame_cap);
            break;
        }
        case PROTO_MSG_MODEL:
        case PROTO_MSG_PARAMS:
            proto_msg_encode_slab (self, frames);
            break;
        case PROTO_MSG_STATS: {
            const proto_stats_t *s = &self->stats;
            b = proto_frame_alloc (&frames[1], PROTO_STATS_SIZE);
            pl_le_put_f64 (b, s->forward_s);
            pl_le_put_f64 (b + 8, s->backward_s);
            pl_le_put_f64 (b + 16, s->update_s);
            pl_le_put_f64 (b + 24, s->idle_s);
            pl_le_put_u64 (b + 32, s->bytes_up);
            pl_le_put_u64 (b + 40, s->bytes_down);
            pl_le_put_u32 (b + 48, s->epoch);
            pl_le_put_f64 (b + 52, s->loss_sum);
            pl_le_put_u64 (b + 60, s->correct);
            pl_le_put_u64 (b + 68, s->samples);
            break;
        }
        case PROTO_MSG_EVENTS: {
            b = proto_frame_alloc (&frames[1], self->events_count * PROTO_EVENT_SIZE);
            for (size_t i = 0; i < self->events_count; i++, b += PROTO_EVENT_SIZE) {
                const proto_event_t *e = &self->events[i];
                pl_le_put_u32 (b, e->stage);
                pl_le_put_u32 (b + 4, e->epoch);
                pl_le_put_u32 (b + 8, e->iteration);
                pl_le_put_u32 (b + 12, e->micro_batch);
                pl_le_put_f64 (b + 16, e->start_s);
                pl_le_put_f64 (b + 24, e->end_s);
            }
            break;
        }
        case PROTO_MSG_ERROR: {
            const char *text = proto_msg_error_text (self);
            size_t len = strlen (text);
            b = proto_frame_alloc (&frames[1], 4 + len);
            pl_le_put_u32 (b, self->error_code);
            memcpy (b + 4, text, len);
            break;
        }
        case PROTO_MSG_HEARTBEAT:
        case PROTO_MSG_BYE:
            break;
        case PROTO_MSG_PROFILE:
        case PROTO_MSG_PROBE:
        case PROTO_MSG_PLAN:
            proto_msg_encode_planning (self, frames);
            break;
        default:
            if (proto_msg_is_eval_result (self)) {
                b = proto_frame_alloc (&frames[1], PROTO_EVAL_RESULT_SIZE);
                pl_le_put_f64 (b, self->eval.loss_sum);
                pl_le_put_u64 (b + 8, self->eval.correct);
                pl_le_put_u64 (b + 16, self->eval.count);
                break;
            }
            proto_msg_encode_tensor (self, frames);
            break;
    }
    return count;
}

//  ---------------------------------------------------------------------
//  Decoding

static int
s_decode_hello (proto_msg_t *self, zmq_msg_t *frames, char *err, size_t err_size)
{
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    if (len < PROTO_HELLO_FIXED_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "HELLO: payload %zu bytes, need at least %d",
                           len, PROTO_HELLO_FIXED_SIZE);
    proto_hello_t *h = &self->hello;
    h->protocol_version = pl_le_get_u16 (b);
    h->capabilities = pl_le_get_u32 (b + 2);
    h->requested_device_id = pl_le_get_i32 (b + 6);
    h->sample_count = pl_le_get_u64 (b + 10);
    size_t name_len = pl_le_get_u16 (b + 18);
    if (name_len > PROTO_NAME_MAX)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "HELLO: name length %zu exceeds %d", name_len, PROTO_NAME_MAX);
    if (len != PROTO_HELLO_FIXED_SIZE + name_len)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "HELLO: payload %zu bytes, name length %zu needs %zu",
                           len, name_len, PROTO_HELLO_FIXED_SIZE + name_len);
    //  Check the raw bytes: an embedded NUL must not hide the rest.
    int rc = s_name_check ((const char *) b + 20, name_len, err, err_size);
    if (rc)
        return rc;
    memcpy (h->name, b + 20, name_len);
    h->name[name_len] = 0;
    return s_hello_check (h, err, err_size);
}

static int
s_decode_welcome (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
                  char *err, size_t err_size)
{
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    if (len == 0)
        return proto_fail (err, err_size, PROTO_E_SIZE, "WELCOME: config is empty");
    if (len > l->max_json_bytes)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "WELCOME: config %zu bytes exceeds limit %zu",
                           len, l->max_json_bytes);
    int rc = s_text_check (b, len, "WELCOME: config", err, err_size);
    if (rc)
        return rc;
    size_t plen;
    const uint8_t *p = proto_frame_bytes (&frames[2], &plen);
    if (plen != PROTO_ASSIGN_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "WELCOME: plan %zu bytes, expected %d", plen, PROTO_ASSIGN_SIZE);
    rc = proto_assign_get (&self->assign, p, "WELCOME: plan", err, err_size);
    if (rc)
        return rc;
    rc = proto_assign_check (&self->assign, l, "WELCOME: plan", err, err_size);
    if (rc)
        return rc;
    const uint8_t *c = proto_frame_bytes (&frames[3], &plen);
    if (plen != PROTO_CAP_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "WELCOME: frame cap %zu bytes, expected %d", plen, PROTO_CAP_SIZE);
    self->frame_cap = pl_le_get_u64 (c);
    rc = s_frame_cap_check (self->frame_cap, err, err_size);
    if (rc)
        return rc;
    self->config = nn_malloc (len + 1);
    memcpy (self->config, b, len);
    self->config[len] = 0;
    self->config_len = len;
    return 0;
}

//  The record count comes from the frame size, checked against the limit
//  before anything is allocated for it.
static int
s_decode_events (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
                 char *err, size_t err_size)
{
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[1], &len);
    if (len % PROTO_EVENT_SIZE)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "EVENTS: payload %zu bytes is not a multiple of %d",
                           len, PROTO_EVENT_SIZE);
    size_t count = len / PROTO_EVENT_SIZE;
    if (count == 0)
        return proto_fail (err, err_size, PROTO_E_SIZE, "EVENTS: no events");
    if (count > l->max_events)
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "EVENTS: %zu events exceeds limit %" PRIu32, count, l->max_events);
    proto_event_t *events = nn_malloc (count * sizeof *events);
    for (size_t i = 0; i < count; i++, b += PROTO_EVENT_SIZE) {
        proto_event_t *e = &events[i];
        e->stage = pl_le_get_u32 (b);
        e->epoch = pl_le_get_u32 (b + 4);
        e->iteration = pl_le_get_u32 (b + 8);
        e->micro_batch = pl_le_get_u32 (b + 12);
        e->start_s = pl_le_get_f64 (b + 16);
        e->end_s = pl_le_get_f64 (b + 24);
        int rc = s_event_check (e, i, err, err_size);
        if (rc) {
            nn_free (events);
            return rc;
        }
    }
    self->events = events;
    self->events_count = count;
    return 0;
}

static int
s_decode_payload (proto_msg_t *self, zmq_msg_t *frames, const proto_limits_t *l,
                  char *err, size_t err_size)
{
    size_t len;
    const uint8_t *b;
    switch (self->header.type) {
        case PROTO_MSG_HELLO:
            return s_decode_hello (self, frames, err, err_size);
        case PROTO_MSG_WELCOME:
            return s_decode_welcome (self, frames, l, err, err_size);
        case PROTO_MSG_MODEL:
        case PROTO_MSG_PARAMS:
            return proto_msg_decode_slab (self, frames, l, err, err_size);
        case PROTO_MSG_STATS: {
            b = proto_frame_bytes (&frames[1], &len);
            if (len != PROTO_STATS_SIZE)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "STATS: payload %zu bytes, expected %d",
                                   len, PROTO_STATS_SIZE);
            proto_stats_t *s = &self->stats;
            s->forward_s = pl_le_get_f64 (b);
            s->backward_s = pl_le_get_f64 (b + 8);
            s->update_s = pl_le_get_f64 (b + 16);
            s->idle_s = pl_le_get_f64 (b + 24);
            s->bytes_up = pl_le_get_u64 (b + 32);
            s->bytes_down = pl_le_get_u64 (b + 40);
            s->epoch = pl_le_get_u32 (b + 48);
            s->loss_sum = pl_le_get_f64 (b + 52);
            s->correct = pl_le_get_u64 (b + 60);
            s->samples = pl_le_get_u64 (b + 68);
            return s_stats_check (s, err, err_size);
        }
        case PROTO_MSG_EVENTS:
            return s_decode_events (self, frames, l, err, err_size);
        case PROTO_MSG_ERROR: {
            b = proto_frame_bytes (&frames[1], &len);
            if (len < 4)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "ERROR: payload %zu bytes, need at least 4", len);
            if (len - 4 > PROTO_TEXT_MAX)
                return proto_fail (err, err_size, PROTO_E_SIZE,
                                   "ERROR: text %zu bytes exceeds %d", len - 4, PROTO_TEXT_MAX);
            self->error_code = pl_le_get_u32 (b);
            int rc = s_error_check (self->error_code, err, err_size);
            if (!rc)
                rc = s_text_check (b + 4, len - 4, "ERROR: text", err, err_size);
            if (rc)
                return rc;
            self->error_text = nn_malloc (len - 4 + 1);
            memcpy (self->error_text, b + 4, len - 4);
            self->error_text[len - 4] = 0;
            return 0;
        }
        case PROTO_MSG_HEARTBEAT:
        case PROTO_MSG_BYE:
            return 0;
        case PROTO_MSG_PROFILE:
        case PROTO_MSG_PROBE:
        case PROTO_MSG_PLAN:
            return proto_msg_decode_planning (self, frames, l, err, err_size);
        default:
            break;
    }
    if (self->header.flags & PROTO_FLAG_EVAL_RESULT) {
        b = proto_frame_bytes (&frames[1], &len);
        if (len != PROTO_EVAL_RESULT_SIZE)
            return proto_fail (err, err_size, PROTO_E_SIZE,
                               "EVAL: result %zu bytes, expected %d",
                               len, PROTO_EVAL_RESULT_SIZE);
        self->eval.loss_sum = pl_le_get_f64 (b);
        self->eval.correct = pl_le_get_u64 (b + 8);
        self->eval.count = pl_le_get_u64 (b + 16);
        return s_eval_result_check (&self->eval, err, err_size);
    }
    return proto_msg_decode_tensor (self, frames, l, err, err_size);
}

//  count is the number of frames that arrived; only the first
//  min (count, PROTO_MAX_FRAMES) exist in frames[], and nothing past the
//  type's frame count is touched until count has been checked.
static int
s_decode (proto_msg_t **out, zmq_msg_t *frames, int count,
          const proto_limits_t *limits, char *err, size_t err_size)
{
    assert (out);
    *out = NULL;
    if (count < 1)
        return proto_fail (err, err_size, PROTO_E_FRAMES, "message: no frames");
    const proto_limits_t l = proto_limits_resolve (limits);
    proto_header_t h;
    size_t len;
    const uint8_t *b = proto_frame_bytes (&frames[0], &len);
    int rc = proto_header_decode (&h, b, len, err, err_size);
    if (rc)
        return rc;
    const char *tn = proto_type_name (h.type);
    const int expect = s_frames_for (h.type, h.flags);
    if (count != expect)
        return proto_fail (err, err_size, PROTO_E_FRAMES,
                           "%s: %d frames, expected %d", tn, count, expect);
    if (count > l.max_frames)
        return proto_fail (err, err_size, PROTO_E_FRAMES,
                           "%s: %d frames exceeds limit %d", tn, count, l.max_frames);
    //  Every frame against the size limit before any payload is parsed.
    for (int i = 1; i < count; i++) {
        size_t size = zmq_msg_size (&frames[i]);
        if (size > l.max_frame_bytes)
            return proto_fail (err, err_size, PROTO_E_SIZE,
                               "%s: frame %d is %zu bytes, limit %zu",
                               tn, i, size, l.max_frame_bytes);
    }
    proto_msg_t *self = proto_msg_new (h.type);
    self->header = h;
    rc = s_decode_payload (self, frames, &l, err, err_size);
    if (rc) {
        proto_msg_destroy (&self);
        return rc;
    }
    *out = self;
    return 0;
}

int
proto_msg_decode_frames (proto_msg_t **out, zmq_msg_t *frames, int count,
                         const proto_limits_t *limits, char *err, size_t err_size)
{
    assert (out && (frames || count == 0));
    //  Beyond PROTO_MAX_FRAMES no type matches; s_decode reads only frame 0
    //  before it says so.
    return s_decode (out, frames, count, limits, err, err_size);
}

int
proto_msg_decode_bytes (proto_msg_t **out, const void *const *data, const size_t *sizes,
                        int count, const proto_limits_t *limits,
                        char *err, size_t err_size)
{
    assert (out && (count == 0 || (data && sizes)));
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    int built = count < PROTO_MAX_FRAMES ? count : PROTO_MAX_FRAMES;
    for (int i = 0; i < built; i++) {
        proto_frame_init_size (&frames[i], sizes[i]);
        if (sizes[i])
            memcpy (zmq_msg_data (&frames[i]), data[i], sizes[i]);
    }
    int rc = s_decode (out, frames, count, limits, err, err_size);
    for (int i = 0; i < built; i++)
        zmq_msg_close (&frames[i]);
    return rc;
}

//  ---------------------------------------------------------------------
//  Sockets

static int
s_send (proto_msg_t **self_p, void *socket, const void *routing_id, size_t routing_id_len,
        size_t cap, char *err, size_t err_size)
{
    assert (self_p && *self_p && socket);
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    int count = proto_msg_encode (*self_p, frames, err, err_size);
    if (count < 0) {
        errno = EINVAL;
        return -1;
    }
    //  The receiver's libzmq would close the connection on a larger frame
    //  and tell nobody why: refuse it here, where the reason is known.
    if (cap == 0 || cap > PROTO_DEFAULT_MAX_FRAME_BYTES)
        cap = PROTO_DEFAULT_MAX_FRAME_BYTES;
    for (int i = 0; i < count; i++) {
        size_t size = zmq_msg_size (&frames[i]);
        if (size > cap) {
            proto_fail (err, err_size, PROTO_E_SIZE,
                        "%s: frame %d is %zu bytes, over the receiver's cap of %zu bytes",
                        proto_type_name ((*self_p)->header.type), i, size, cap);
            for (int j = 0; j < count; j++)
                zmq_msg_close (&frames[j]);
            errno = EMSGSIZE;
            return -1;
        }
    }
    //  Once the first frame is accepted libzmq takes the rest of a
    //  multipart message too, so a failure leaves nothing half sent.
    //  Large frames go in chunks (proto_chunk.c says why).
    int rc = 0;
    if (routing_id && zmq_send (socket, routing_id, routing_id_len, ZMQ_SNDMORE) == -1)
        rc = -1;
    for (int i = 0; rc == 0 && i < count; i++)
        rc = proto_chunk_send (socket, &frames[i], i + 1 < count);
    int saved = errno;
    for (int i = 0; i < count; i++)
        zmq_msg_close (&frames[i]);
    if (rc == 0)
        proto_msg_destroy (self_p);
    else
        proto_fail (err, err_size, PROTO_E_SOCKET, "%s: %s",
                    proto_type_name ((*self_p)->header.type), zmq_strerror (saved));
    errno = saved;
    return rc;
}

int
proto_msg_send (proto_msg_t **self_p, void *socket)
{
    return s_send (self_p, socket, NULL, 0, 0, NULL, 0);
}

int
proto_msg_send_to (proto_msg_t **self_p, void *socket,
                   const void *routing_id, size_t routing_id_len)
{
    assert (routing_id && routing_id_len >= 1 && routing_id_len <= PROTO_ROUTING_ID_MAX);
    return s_send (self_p, socket, routing_id, routing_id_len, 0, NULL, 0);
}

int
proto_msg_send_capped (proto_msg_t **self_p, void *socket, size_t cap,
                       char *err, size_t err_size)
{
    return s_send (self_p, socket, NULL, 0, cap, err, err_size);
}

int
proto_msg_send_to_capped (proto_msg_t **self_p, void *socket, const void *routing_id,
                          size_t routing_id_len, size_t cap, char *err, size_t err_size)
{
    assert (routing_id && routing_id_len >= 1 && routing_id_len <= PROTO_ROUTING_ID_MAX);
    return s_send (self_p, socket, routing_id, routing_id_len, cap, err, err_size);
}

static void
s_close_frames (zmq_msg_t *frames, int count)
{
    for (int i = 0; i < count; i++)
        zmq_msg_close (&frames[i]);
}

static int
s_recv (proto_msg_t **msg_out, void *socket, uint8_t *routing_id, size_t *routing_id_len,
        proto_peer_t *peer, const proto_limits_t *limits, char *err, size_t err_size)
{
    assert (msg_out && socket);
    *msg_out = NULL;
    if (peer) {
        peer->address[0] = peer->user_id[0] = 0;
        peer->fd = -1;
    }
    bool want_meta = peer != NULL;
    if (routing_id_len)
        *routing_id_len = 0;
    //  Frames beyond what any type has are counted and dropped as they
    //  arrive, never kept. A frame sent in chunks is joined first
    //  (proto_chunk.c), within the frame limit.
    const proto_limits_t l = proto_limits_resolve (limits);
    zmq_msg_t frames[PROTO_MAX_FRAMES];
    proto_chunks_t run = { .limit = l.max_frame_bytes };
    int total = 0;                  //  frames after the routing id
    int failed = 0;                 //  a chunk rule broken: drain, then say so
    char why[PROTO_TEXT_MAX] = "";
    bool first = true, more = true;
    bool want_id = routing_id != NULL;
    size_t id_size = 0;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init (&part);
        int r;
        //  The rest of a multipart message is already queued: finish it
        //  even if a signal arrives, or the next read starts mid-message.
        do
            r = zmq_msg_recv (&part, socket, 0);
        while (r == -1 && errno == EINTR && !first);
        if (r == -1) {
            int e = errno;
            zmq_msg_close (&part);
            s_close_frames (frames, total < PROTO_MAX_FRAMES ? total : PROTO_MAX_FRAMES);
            proto_chunks_reset (&run);
            if (e == EAGAIN || e == EINTR || e == ETERM)
                return proto_fail (err, err_size, PROTO_E_AGAIN, "recv: %s", zmq_strerror (e));
            return proto_fail (err, err_size, PROTO_E_SOCKET, "recv: %s", zmq_strerror (e));
        }
        if (want_meta) {
            //  libzmq's per-connection metadata. A ROUTER makes the routing
            //  id frame itself, without metadata, so take it from the first
            //  frame that came off the wire (one that has any).
            const char *addr = zmq_msg_gets (&part, "Peer-Address");
            const char *user = zmq_msg_gets (&part, "User-Id");
            if (addr)
                snprintf (peer->address, sizeof peer->address, "%s", addr);
            if (user)
                snprintf (peer->user_id, sizeof peer->user_id, "%s", user);
            if (addr || user)
                peer->fd = zmq_msg_get (&part, ZMQ_SRCFD);
            want_meta = !addr && !user;
        }
        first = false;
        more = zmq_msg_more (&part);
        if (want_id) {
            want_id = false;
            id_size = zmq_msg_size (&part);
            if (id_size >= 1 && id_size <= PROTO_ROUTING_ID_MAX) {
                memcpy (routing_id, zmq_msg_data (&part), id_size);
                *routing_id_len = id_size;
            }
            zmq_msg_close (&part);
            continue;
        }
        if (failed) {
            zmq_msg_close (&part);
            continue;
        }
        const bool keep = total < PROTO_MAX_FRAMES;
        zmq_msg_t whole;
        int taken = proto_chunks_take (&run, &part, total, keep, &whole, why, sizeof why);
        if (taken < 0)
            failed = taken;
        if (taken <= 0)
            continue;
        if (keep)
            frames[total] = whole;
        else
            zmq_msg_close (&whole);
        if (total < INT32_MAX)
            total++;
    }
    int rc;
    if (routing_id && (id_size < 1 || id_size > PROTO_ROUTING_ID_MAX))
        rc = proto_fail (err, err_size, PROTO_E_SIZE,
                         "message: routing id of %zu bytes, expected 1..%d (not a ROUTER?)",
                         id_size, PROTO_ROUTING_ID_MAX);
    else if (failed)
        rc = proto_fail (err, err_size, failed, "%s", why);
    else if (run.open)
        rc = proto_fail (err, err_size, PROTO_E_FRAMES,
                         "message: ends inside frame %d's chunks (no chunk shorter than %zu "
                         "bytes)", total, (size_t) PROTO_CHUNK_BYTES);
    else if (total == 0)
        rc = proto_fail (err, err_size, PROTO_E_FRAMES, "message: no frames after the routing id");
    else
        rc = s_decode (msg_out, frames, total, limits, err, err_size);
    s_close_frames (frames, total < PROTO_MAX_FRAMES ? total : PROTO_MAX_FRAMES);
    proto_chunks_reset (&run);
    return rc;
}

int
proto_msg_recv (proto_msg_t **msg_out, void *socket, const proto_limits_t *limits,
                char *err, size_t err_size)
{
    return s_recv (msg_out, socket, NULL, NULL, NULL, limits, err, err_size);
}

int
proto_msg_recv_from (proto_msg_t **msg_out, void *socket, uint8_t *routing_id,
                     size_t *routing_id_len, const proto_limits_t *limits,
                     char *err, size_t err_size)
{
    assert (routing_id && routing_id_len);
    return s_recv (msg_out, socket, routing_id, routing_id_len, NULL, limits, err, err_size);
}

int
proto_msg_recv_from_peer (proto_msg_t **msg_out, void *socket, uint8_t *routing_id,
                          size_t *routing_id_len, proto_peer_t *peer,
                          const proto_limits_t *limits, char *err, size_t err_size)
{
    assert (routing_id && routing_id_len && peer);
    return s_recv (msg_out, socket, routing_id, routing_id_len, peer, limits, err, err_size);
}

int
proto_socket_limit (void *socket, const proto_limits_t *limits)
{
    assert (socket);
    const proto_limits_t l = proto_limits_resolve (limits);
    size_t max = l.max_frame_bytes < PROTO_HEADER_SIZE ? PROTO_HEADER_SIZE : l.max_frame_bytes;
    //  libzmq compares ZMQ_MAXMSGSIZE with the frame as it arrives, before
    //  the security mechanism decodes it: under CurveZMQ each frame is a
    //  MESSAGE command, PROTO_CURVE_FRAME_OVERHEAD bytes longer than the
    //  message. A cap of the message's size alone made libzmq drop, without
    //  a word, every peer that sent a frame of exactly the run's largest
    //  size (sfl/sl at split 1, batch 100: 2508800 bytes).
    max = max > SIZE_MAX - PROTO_CURVE_FRAME_OVERHEAD ? SIZE_MAX
                                                      : max + PROTO_CURVE_FRAME_OVERHEAD;
    int64_t v = max > (size_t) INT64_MAX ? INT64_MAX : (int64_t) max;
    return zmq_setsockopt (socket, ZMQ_MAXMSGSIZE, &v, sizeof v);
}

//  ---------------------------------------------------------------------
//  State machine

bool
proto_type_allowed (pl_mode_t mode, proto_state_t state, int type, proto_dir_t dir)
{
    if (dir != PROTO_UP && dir != PROTO_DOWN)
        return false;
    const bool up = dir == PROTO_UP;
    //  Session control, allowed both ways once HELLO has been sent.
    const bool control = type == PROTO_MSG_HEARTBEAT || type == PROTO_MSG_BYE
                      || type == PROTO_MSG_ERROR;
    //  Planning, split modes only: a PROFILE once, before the first MODEL;
    //  PROBEs both ways and a PLAN before any MODEL.
    const bool split_mode = mode >= PL_MODE_SL && mode <= PL_MODE_PIPELEARN;
    const bool planning = split_mode && (type == PROTO_MSG_PROBE
                                         || (!up && type == PROTO_MSG_PLAN));
    switch (state) {
        case PROTO_STATE_CONNECTING:
            return up && type == PROTO_MSG_HELLO;
        case PROTO_STATE_JOINING:
            return control || (!up && type == PROTO_MSG_WELCOME);
        case PROTO_STATE_JOINED:
            return control || planning || (!up && type == PROTO_MSG_MODEL)
                || (split_mode && up && type == PROTO_MSG_PROFILE);
        case PROTO_STATE_TRAINING: {
            if (mode < PL_MODE_FL || mode > PL_MODE_PIPELEARN)
                return false;
            const bool split = mode != PL_MODE_FL;
            switch (type) {
                case PROTO_MSG_ACTIVATIONS: return up && split;
                case PROTO_MSG_GRADIENTS:   return !up && split;
                case PROTO_MSG_EVAL:        return split;
                case PROTO_MSG_PARAMS:      return up;
                case PROTO_MSG_STATS:       return up;
                case PROTO_MSG_EVENTS:      return up;
                case PROTO_MSG_MODEL:       return !up;
                default:                    return control || planning;
            }
        }
        default:
            return false;
    }
}

bool
proto_msg_allowed (pl_mode_t mode, proto_state_t state, const proto_msg_t *msg,
                   proto_dir_t dir)
{
    assert (msg);
    int type = msg->header.type;
    if (type == PROTO_MSG_EVAL && proto_msg_is_eval_result (msg) != (dir == PROTO_DOWN))
        return false;
    return proto_type_allowed (mode, state, type, dir);
}

proto_state_t
proto_state_next (proto_state_t state, int type, proto_dir_t dir)
{
    if (state == PROTO_STATE_CLOSED || type == PROTO_MSG_BYE || type == PROTO_MSG_ERROR)
        return PROTO_STATE_CLOSED;
    if (state == PROTO_STATE_CONNECTING && type == PROTO_MSG_HELLO && dir == PROTO_UP)
        return PROTO_STATE_JOINING;
    if (state == PROTO_STATE_JOINING && type == PROTO_MSG_WELCOME && dir == PROTO_DOWN)
        return PROTO_STATE_JOINED;
    if (state == PROTO_STATE_JOINED && type == PROTO_MSG_MODEL && dir == PROTO_DOWN)
        return PROTO_STATE_TRAINING;
    return state;
}
