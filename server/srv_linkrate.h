/*  srv_linkrate.h: measuring one device's link, for the planner.

    Two sources. PROBE round trips (proto/PROTOCOL.md "Planning"): one
    probe outstanding at a time; pings for the RTT, then timed transfers
    down and up of growing size until one takes long enough to time, then
    more of that size until together they span several CPU-quota periods
    and number at least three. The rate is their bytes over their time
    (a pause of a throttled device weighs as its share of the time), or
    the median of their rates when that is higher: one transfer that
    stalled (a lost tail's retransmission timeout) is outvoted. In the
    headline run of 2026-11-26 22:47 one 10%-of-a-core device's 4g
    uplink read 5.6 Mbit/s where every other run of the day read
    8.2-9.2, and the planner put its whole model on the device. The
    first transfer of a direction never counts: it is a growth step or, when the first size already
    takes long enough, a warm-up. A fresh TCP direction starts in slow
    start with no threshold and can overshoot a shallow bottleneck queue
    (a tbf, a radio's buffer); the tail it loses costs a retransmission
    timeout (200 ms minimum on Linux). In one CI run the first upload read
    a 10 Mbit/s uplink as 7.0 where the later rounds read 9.6 (not
    reproduced on the development host, bbr or cubic). And
    the training traffic: back-to-back ACTIVATIONS of one iteration are
    spaced by at least their transfer time, so their rate is a floor for
    the uplink's. No sockets: a call returns the PROBE to send.
*/
#ifndef SRV_LINKRATE_H_INCLUDED
#define SRV_LINKRATE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_msg.h"

#define SRV_LINKRATE_SAMPLES 64
//  Counted transfers per direction, at most.
#define SRV_LINKRATE_REPEATS 8

typedef struct {
    //  The probe in progress.
    int step;                   //  idle, ping, down, up, done (srv_linkrate.c)
    uint32_t id;                //  outstanding probe_id
    uint32_t expect;            //  payload bytes its answer must carry
    double sent;                //  pl_monotonic when it went out
    size_t size;                //  transfer size of the current step
    int pings;
    bool grown;                 //  the size is final: transfers are summed
    int xfers;                  //  transfers of this direction answered
    double sum_bytes, sum_s;    //  the summed transfers of this direction
    double xfer_Bps[SRV_LINKRATE_REPEATS];     //  and each one's rate
    int repeats;
    double rtt_s, down_Bps, up_Bps;     //  of the probe in progress
    //  Training traffic: spacing of consecutive ACTIVATIONS of one iteration.
    double act_t;
    uint32_t act_epoch, act_iter, act_mb;
    bool act_valid;
    double rates[SRV_LINKRATE_SAMPLES];    //  bytes/s samples this epoch (ring)
    int rates_count;
    //  The iteration period: arrivals of the first micro-batch of the
    //  epoch's first and latest iterations.
    bool period_valid;
    uint32_t period_epoch, period_iter0, period_iter1;
    double period_t0, period_t1;
} srv_linkrate_t;

//  A new device: forget the last one's figures (the probe id goes on).
void srv_linkrate_reset (srv_linkrate_t *self);
//  Starts a measurement: the first PROBE for device id (caller sends it).
proto_msg_t *srv_linkrate_probe (srv_linkrate_t *self, int id, int epoch);
//  A probe is out.
bool srv_linkrate_busy (const srv_linkrate_t *self);
//  The last measurement finished (rtt_s, down_Bps, up_Bps hold it).
bool srv_linkrate_done (const srv_linkrate_t *self);
//  The device left: its probe is abandoned.
void srv_linkrate_abandon (srv_linkrate_t *self);
//  A PROBE answer: 0 with *next the PROBE to send (NULL when the
//  measurement is done), -1 with why filled when it answers no probe out.
//  cap: the largest transfer (the server's frame limit).
int srv_linkrate_answer (srv_linkrate_t *self, const proto_msg_t *msg, int id, int epoch,
                         size_t cap, proto_msg_t **next, char *why, size_t why_size);
//  The probe out has waited more than timeout seconds (why filled).
bool srv_linkrate_overdue (const srv_linkrate_t *self, double timeout, char *why,
                           size_t why_size);
//  One ACTIVATIONS of the device arrived at now (pl_monotonic seconds).
void srv_linkrate_on_activations (srv_linkrate_t *self, const proto_msg_t *msg, double now);
//  The epoch's traffic estimate of the uplink in bytes/s (the median of
//  its samples; 0 with fewer than 3), and the samples are reset.
double srv_linkrate_traffic (srv_linkrate_t *self);
//  The epoch's iteration period in seconds: the time between the arrivals
//  of the first micro-batches of its first and latest iterations over the
//  iterations between them (0 with fewer than 3 iterations seen); then
//  forgotten. What a device's iteration takes as the server sees it, its
//  pipeline's fill and drain included once an iteration.
double srv_linkrate_period (srv_linkrate_t *self);

#endif
