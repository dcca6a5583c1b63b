/*  srv_linkrate.c: PROBE round trips and traffic spacing. See
    srv_linkrate.h. */
#include "srv_linkrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_timeline.h"

#define S_PINGS    3
#define S_FIRST    ((size_t) 256 << 10)
#define S_MAX      ((size_t) 4 << 20)
#define S_TARGET_S 0.2              //  a timed transfer should take this long
//  and the transfers of that size, together, at least this long (at most
//  S_REPEATS of them): a device under a CPU quota (10 ms of every 100 ms
//  at 10% of a core) or a connection in TCP slow start delays a transfer
//  by a pause or a few round trips; over six periods one such delay is a
//  sixth of the time, not half of it.
#define S_WINDOW_S 0.6
#define S_REPEATS  SRV_LINKRATE_REPEATS
//  At least this many counted transfers, so that one slow one is outvoted
//  (see srv_linkrate.h).
#define S_COUNTED_MIN 3
#define S_MAX_BPS  12.5e9           //  100 Gbit/s: loopback timing noise above it

enum {
    S_IDLE = 0,
    S_PING,
    S_DOWN,
    S_UP,
    S_DONE
};

void
srv_linkrate_reset (srv_linkrate_t *self)
{
    uint32_t id = self->id;
    memset (self, 0, sizeof *self);
    self->id = id;
}

bool
srv_linkrate_busy (const srv_linkrate_t *self)
{
    return self->step != S_IDLE && self->step != S_DONE;
}

bool
srv_linkrate_done (const srv_linkrate_t *self)
{
    return self->step == S_DONE;
}

void
srv_linkrate_abandon (srv_linkrate_t *self)
{
    self->step = S_IDLE;
}

static proto_msg_t *
s_send (srv_linkrate_t *self, int id, int epoch)
{
    proto_probe_t pr = { .probe_id = self->id + 1,
                         .reply_bytes = self->step == S_UP ? (uint32_t) self->size : 0 };
    size_t payload = self->step == S_DOWN ? self->size : 0;
    proto_msg_t *m = proto_msg_new (PROTO_MSG_PROBE);
    proto_msg_set_route (m, (uint32_t) id, (uint32_t) epoch, 0, 0);
    proto_msg_set_probe (m, &pr, payload);
    self->id = pr.probe_id;
    self->expect = pr.reply_bytes;
    self->sent = pl_monotonic ();
    return m;
}

static int
s_cmp_double (const void *a_, const void *b_)
{
    double a = *(const double *) a_, b = *(const double *) b_;
    return (a > b) - (a < b);
}

//  The median of v[0..n) (the upper one for even n), 0 < n <=
//  SRV_LINKRATE_SAMPLES; v is left as it is.
static double
s_median (const double *v, int n)
{
    double r[SRV_LINKRATE_SAMPLES];
    memcpy (r, v, sizeof (double) * (size_t) n);
    qsort (r, (size_t) n, sizeof r[0], s_cmp_double);
    return r[n / 2];
}
_Static_assert (SRV_LINKRATE_REPEATS <= SRV_LINKRATE_SAMPLES, "s_median's buffer holds a probe's");

//  A direction's rate from its n counted transfers: their bytes over
//  their time (summed), or their median rate (the upper one of an even
//  count) when that is higher. A stall (a retransmission timeout, a quota
//  pause that fell on one transfer) only slows what it hits: in the sum
//  it weighs as its share of the time, the median ignores it while most
//  transfers ran clean; pauses that hit every transfer (a device
//  throttled throughout) move both.
static double
s_rate (double summed, const double *xfer_Bps, int n)
{
    double median = s_median (xfer_Bps, n);
    return median > summed ? median : summed;
}

proto_msg_t *
srv_linkrate_probe (srv_linkrate_t *self, int id, int epoch)
{
    self->step = S_PING;
    self->expect = 0;
    self->sent = 0.0;
    self->size = 0;
    self->pings = 0;
    self->grown = false;
    self->xfers = 0;
    self->sum_bytes = self->sum_s = 0.0;
    self->repeats = 0;
    self->rtt_s = INFINITY;
    self->down_Bps = self->up_Bps = 0.0;
    return s_send (self, id, epoch);
}

int
srv_linkrate_answer (srv_linkrate_t *self, const proto_msg_t *msg, int id, int epoch,
                     size_t cap, proto_msg_t **next, char *why, size_t why_size)
{
    *next = NULL;
    const proto_probe_t *pr = proto_msg_probe (msg);
    size_t bytes = proto_msg_probe_payload_bytes (msg);
    if (!srv_linkrate_busy (self) || pr->probe_id != self->id || pr->reply_bytes != 0
    ||  bytes != self->expect) {
        snprintf (why, why_size, "PROBE answer (id %u, %zu bytes) for no probe out "
                  "(id %u, %u bytes)", pr->probe_id, bytes, self->id, self->expect);
        return -1;
    }
    cap = cap && cap < S_MAX ? cap : S_MAX;
    double t = pl_monotonic () - self->sent;
    if (self->step == S_PING) {
        self->rtt_s = t < self->rtt_s ? t : self->rtt_s;
        if (++self->pings >= S_PINGS) {
            self->step = S_DOWN;
            self->size = S_FIRST < cap ? S_FIRST : cap;
        }
        *next = s_send (self, id, epoch);
        return 0;
    }
    if (!self->grown && t < S_TARGET_S && self->size < cap) {
        self->size = self->size * 4 < cap ? self->size * 4 : cap;
        self->xfers++;
        *next = s_send (self, id, epoch);
        return 0;
    }
    //  Grown: the transfers of this size are summed, bytes and time, all
    //  but the direction's first (the warm-up, see srv_linkrate.h). A
    //  transfer's time is its round trip less the RTT of an empty probe.
    self->grown = true;
    if (self->xfers++ == 0) {
        *next = s_send (self, id, epoch);
        return 0;
    }
    double xfer = t - self->rtt_s;
    xfer = xfer > 1e-6 ? xfer : 1e-6;
    self->sum_bytes += (double) self->size;
    self->sum_s += xfer;
    self->xfer_Bps[self->repeats] = (double) self->size / xfer;
    if (++self->repeats < S_REPEATS
    &&  (self->sum_s < S_WINDOW_S || self->repeats < S_COUNTED_MIN)) {
        *next = s_send (self, id, epoch);
        return 0;
    }
    double rate = s_rate (self->sum_bytes / self->sum_s, self->xfer_Bps, self->repeats);
    rate = rate < S_MAX_BPS ? rate : S_MAX_BPS;
    self->grown = false;
    self->xfers = 0;
    self->sum_bytes = self->sum_s = 0.0;
    self->repeats = 0;
    if (self->step == S_DOWN) {
        self->down_Bps = rate;
        self->step = S_UP;
        self->size = S_FIRST < cap ? S_FIRST : cap;
        *next = s_send (self, id, epoch);
        return 0;
    }
    self->up_Bps = rate;
    self->step = S_DONE;
    return 0;
}

bool
srv_linkrate_overdue (const srv_linkrate_t *self, double timeout, char *why, size_t why_size)
{
    double now = pl_monotonic ();
    if (!srv_linkrate_busy (self) || now - self->sent <= timeout)
        return false;
    snprintf (why, why_size, "no answer to a PROBE in %.1f s (device_timeout_s %g)",
              now - self->sent, timeout);
    return true;
}

void
srv_linkrate_on_activations (srv_linkrate_t *self, const proto_msg_t *msg, double now)
{
    const proto_header_t *h = proto_msg_header (msg);
    if (h->micro_batch == 0) {
        if (!self->period_valid || h->epoch != self->period_epoch
        ||  h->iteration < self->period_iter1) {
            //  A new epoch (or a device that started over): a new span.
            self->period_valid = true;
            self->period_epoch = h->epoch;
            self->period_iter0 = self->period_iter1 = h->iteration;
            self->period_t0 = self->period_t1 = now;
        }
        else
        if (h->iteration > self->period_iter1) {
            self->period_iter1 = h->iteration;
            self->period_t1 = now;
        }
    }
    //  Back-to-back micro-batches of one iteration: when the uplink is the
    //  bottleneck their spacing is its transfer time; otherwise it is
    //  longer, so the rate is a floor for the link's.
    if (self->act_valid && h->epoch == self->act_epoch && h->iteration == self->act_iter
    &&  h->micro_batch == self->act_mb + 1 && now > self->act_t) {
        //  The bytes as they travelled: f32, or the codec's payload.
        double bytes = PROTO_HEADER_SIZE + (double) proto_msg_tensor_wire_bytes (msg)
                     + 4.0 * (double) proto_msg_labels_count (msg);
        self->rates[self->rates_count % SRV_LINKRATE_SAMPLES] = bytes / (now - self->act_t);
        self->rates_count++;
    }
    self->act_t = now;
    self->act_epoch = h->epoch;
    self->act_iter = h->iteration;
    self->act_mb = h->micro_batch;
    self->act_valid = true;
}

double
srv_linkrate_traffic (srv_linkrate_t *self)
{
    int n = self->rates_count < SRV_LINKRATE_SAMPLES ? self->rates_count
                                                     : SRV_LINKRATE_SAMPLES;
    double median = n >= 3 ? s_median (self->rates, n) : 0.0;
    self->rates_count = 0;
    self->act_valid = false;
    return median;
}

double
srv_linkrate_period (srv_linkrate_t *self)
{
    uint32_t span = self->period_iter1 - self->period_iter0;
    double period = self->period_valid && span >= 2 && self->period_t1 > self->period_t0
                  ? (self->period_t1 - self->period_t0) / span : 0.0;
    self->period_valid = false;
    return period;
}
