/*  nn_estimate.h: the planner. Chooses each device's split point P and
    micro-batch count N from measured costs, and estimates FL, SL, SFL and
    PipeLearn epoch times for the same inputs.

    Pure: no clock, no I/O, no globals. Costs come in as plain structs
    (nn_profile measures them; a cost file or a server fills them too).

    The model (docs/planner.md has the formulas and why):

    - A mini-batch of B samples is cut into N micro-batches of B/N samples;
      N must divide B (the daemons refuse anything else, so no sample is
      dropped and every micro-batch has the same shape) and B/N must be at
      least min_micro_batch samples (BatchNorm needs 2 for batch statistics),
      N at most max_micro_batches.
    - A unit's compute for m samples is fixed + (total - fixed) * m / B,
      where total is its time for the whole batch and fixed the per-call part
      (nn_profile fits it from two batch sizes; 0 gives the reference's
      total/N). So many small micro-batches cost more compute than one big
      batch, which is what stops N from growing without bound.
    - Per micro-batch i: device forward(i) -> upload(i) -> server step(i)
      (forward + loss + backward) -> download(i) -> device backward(i).
      Resources are exclusive and FIFO: the device's one compute stream runs
      forwards and backwards (a backward whose gradient has arrived goes
      first, as pipelearn-client does, unless forward_first; forwards never
      wait otherwise), each link sends one message at a time, the device's
      server replica runs one step at a time. A transfer occupies its link for bytes / rate and
      arrives RTT/2 later (propagation does not block the next send).
      Then both sides step SGD. Iteration time = when both have finished.
    - D devices share a server of W workers: every server duration is
      multiplied by share = max(1, D / W) (processor sharing when all
      devices are busy at once). nn_estimate_simulate_events with pooled = true
      simulates the real pool (W workers, round-robin over the replicas as
      srv_main dispatches) to check that approximation.
    - One host for everything (host_cores > 0: a lab, a demo, loopback):
      the server and all devices share host_cores cores, so an iteration
      of the parallel modes also takes at least all their CPU work divided
      by the cores: every device's forwards, backwards and update, the
      server's steps and updates for every device (no share factor), and
      the bytes all devices move through the host's network stack, at
      host_copy_Bps per core. The estimate is the larger of the pipeline
      above and that floor (each candidate (P, N) is taken as every
      device's). SL runs one device at a time and gets no floor.
    - Aggregation: every aggregation_frequency iterations (-1: once per
      epoch, and always at the end of an epoch) each device sends its part's
      weights up and receives them back: bytes/uplink + bytes/downlink + RTT.
      Rounds are barriers: an epoch is the sum over rounds of the slowest
      device's round.
    - Codecs (nn_codec.h), per device and direction, when the input has
      codecs: a micro-batch's activations go up as the codec's wire bytes
      (nn_codec_wire_bytes; none: the f32 tensor as today) and the
      gradients come down likewise. Encoding and decoding cost CPU at the
      measured speed of the side that does it (float32 bytes per second of
      one thread): the device encodes after each forward and decodes
      before each backward; the server decodes before and encodes after
      each step (times the share factor, like its other work). With
      NN_ESTIMATE_CODEC_AUTO a device's codec for that direction is chosen per
      candidate (P, N): the pair with the smallest epoch estimate, and
      among pairs within near_best of it the least lossy (none, fp16,
      int8 in that order). auto never chooses topk: what top-k costs in
      accuracy depends on the fraction and the model, which the estimate
      cannot weigh; name it to use it.
*/
#ifndef NN_ESTIMATE_H_INCLUDED
#define NN_ESTIMATE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "nn_codec.h"
#include "nn_squeeze.h"
#include "pl_mode.h"
#include "nn_model.h"

#define NN_ESTIMATE_MAX_DEVICES 64
//  A device's codec for a direction is the planner's to choose.
#define NN_ESTIMATE_CODEC_AUTO (-1)

//  One side's cost of one split unit, all in seconds.
typedef struct {
    double fwd_s;           //  forward of the whole mini-batch (B samples)
    double bwd_s;           //  backward of the whole mini-batch
    double fwd_fixed_s;     //  per-call part of fwd_s (0 <= fixed <= fwd_s)
    double bwd_fixed_s;     //  per-call part of bwd_s
    double upd_s;           //  SGD step of the unit's parameters
} nn_estimate_unit_cost_t;

//  Compute costs of one side (a device or one server worker) for every
//  unit of the model. units_count equals the model's.
typedef struct {
    int units_count;
    nn_estimate_unit_cost_t unit[NN_MAX_UNITS];
} nn_estimate_costs_t;

//  What the model sends, for B samples, in bytes.
typedef struct {
    int units_count;                    //  U >= 2
    double out_bytes[NN_MAX_UNITS];     //  unit u's output activation (float32)
    double param_bytes[NN_MAX_UNITS];   //  unit u's weights slab (what aggregation sends)
    int out_channels[NN_MAX_UNITS];     //  channels of unit u's output (its last axis:
                                        //  int8's per-channel parameters); 0 = unknown,
                                        //  counted as 1
    double input_bytes;                 //  the model's input (not sent; for reference)
    double label_bytes;                 //  labels, sent with every activation
} nn_estimate_model_t;

typedef struct {
    nn_estimate_costs_t costs;  //  this device's compute
    double uplink_Bps;          //  bytes/s device -> server (> 0)
    double downlink_Bps;        //  bytes/s server -> device (> 0)
    double rtt_s;               //  round-trip time (>= 0)
} nn_estimate_device_t;

//  Codec speeds of one side, one thread: float32 bytes per second it
//  encodes and decodes, per codec id (nn_profile_codecs measures them;
//  pipelearn-bench-codec prints them). none's entries are not used (none
//  is the f32 tensor, whose copy the estimate does not count). 0 = not
//  measured: that work is taken as free, which auto refuses (see
//  nn_estimate_check).
typedef struct {
    double encode_Bps[NN_CODEC_COUNT];
    double decode_Bps[NN_CODEC_COUNT];
} nn_estimate_codec_speed_t;

//  One device's codecs.
typedef struct {
    int up;                             //  activations: NN_CODEC_NONE, _FP16, _INT8 or
                                        //  NN_ESTIMATE_CODEC_AUTO
    int down;                           //  gradients: the same or NN_CODEC_TOPK
    double topk_fraction;               //  down = topk: share of elements sent, (0, 1]
    nn_estimate_codec_speed_t speed;    //  the device's own codec speeds
    bool zstd;                          //  fp16/int8/topk bodies also go through zstd
    nn_squeeze_t squeeze;               //  zstd's ratios at each split point, measured
                                        //  on the device's samples (nn_squeeze.h);
                                        //  boundaries 0 (or topk): taken as 1
} nn_estimate_codec_t;

typedef struct {
    nn_estimate_model_t model;
    nn_estimate_costs_t server;             //  one worker (one thread) of the server
    int server_workers;                     //  W >= 1
    int batch_size;                         //  B >= 1
    int iterations;                         //  per epoch, the same on every device (>= 1)
    int aggregation_frequency;              //  iterations per round; -1 (or 0) = once per epoch
    int max_micro_batches;                  //  cap on N; 0 = 100 (the reference's cap)
    int min_micro_batch;                    //  smallest micro-batch in samples; 0 = 2
                                            //  (see nn_estimate_min_micro_batch)
    double near_best;                       //  relative; 0 = 0.01 (see nn_estimate_new)
    bool forward_first;                     //  the device runs all N forwards before any
                                            //  backward; false = pipelearn-client's order
                                            //  (an arrived gradient's backward first)
    int split_point;                        //  0 = choose, else P is pinned to this
    int micro_batches;                      //  0 = choose, else N is pinned to this
    int devices_count;                      //  D, 1..NN_ESTIMATE_MAX_DEVICES
    const nn_estimate_device_t *devices;    //  D entries, borrowed
    int host_cores;                         //  > 0: server and devices share one host with
                                            //  this many cores; 0 = each on its own hardware
    double host_copy_Bps;                   //  with host_cores: bytes/s one core moves through
                                            //  the host's network stack (0 = moving is free)
    const nn_estimate_codec_t *codecs;      //  devices_count entries, borrowed (copied by
                                            //  nn_estimate_new); NULL = none both ways
    nn_estimate_codec_speed_t server_codec; //  one server worker's codec speeds
} nn_estimate_input_t;

//  Per-iteration totals of one candidate (sums over the N micro-batches).
typedef struct {
    double device_forward_s;
    double upload_s;            //  time the uplink is busy (bytes / rate)
    double server_s;            //  server steps, after the share factor
    double download_s;
    double device_backward_s;
    double device_update_s;
    double server_update_s;     //  after the share factor
    double latency_s;           //  RTT/2 each way, paid once on the critical path
    double bytes_up;            //  activations (as the codec sends them) + labels
    double bytes_down;          //  gradients (as the codec sends them)
    double codec_s;             //  encode + decode, device and server (server's after
                                //  the share factor); included in the times above
} nn_estimate_stages_t;

typedef struct {
    int split_point;            //  P: units [0, P) on the device
    int micro_batches;          //  N
    int codec_up;               //  nn_codec_id_t of the activations (the pin or auto's choice)
    int codec_down;             //  nn_codec_id_t of the gradients
    double iteration_s;         //  estimated time of one iteration
    double aggregation_s;       //  one round's parameter exchange for this device
    double epoch_s;             //  iterations * iteration_s + rounds * aggregation_s
    double host_floor_s;        //  one host: all CPU work per iteration / host_cores
                                //  (iteration_s is at least this); 0 otherwise
    nn_estimate_stages_t stages;
} nn_estimate_candidate_t;

//  A training technique's estimate for the whole set of devices.
typedef struct {
    double epoch_s;             //  estimated epoch time
    double iteration_s;         //  the slowest device's iteration
    int split_point;            //  P used (FL: U); 0 when devices use different P
    int micro_batches;          //  N used; 0 when devices use different N
} nn_estimate_mode_t;

typedef struct _nn_estimate_t nn_estimate_t;

//  Validate an input: ranges, finite non-negative costs, fixed parts
//  within totals, positive rates, pins that fit. -1 with a message naming
//  the field.
int nn_estimate_check (const nn_estimate_input_t *in, char *err, size_t err_size);

//  Evaluate every candidate (P in 1..U-1, N in the allowed set) for every
//  device, choose each device's plan and estimate the four modes. A
//  device's plan: among the candidates whose epoch contribution is within
//  near_best (relative) of the smallest, the one with the smallest P, then
//  the fewest micro-batches, then the smallest estimate. Estimates closer
//  than the costs' measurement noise are ties; a device's compute in a run
//  costs more than its profile (1.2-1.5x in the lab), so the plan leaving
//  less of the model on the device is the one the estimate flatters least,
//  and fewer, larger micro-batches cost less in what the model leaves out
//  (messages, memory, BatchNorm on tiny batches). The input is copied
//  (devices too). NULL with a message if nn_estimate_check fails.
nn_estimate_t *nn_estimate_new (const nn_estimate_input_t *in, char *err, size_t err_size);
void nn_estimate_destroy (nn_estimate_t **self_p);

//  Candidates of one device in (P, N) order; borrowed until destroy.
int nn_estimate_candidates_count (const nn_estimate_t *self, int device);
const nn_estimate_candidate_t *nn_estimate_candidate (const nn_estimate_t *self, int device, int index);
//  The device's chosen plan (honours the pins in the input).
const nn_estimate_candidate_t *nn_estimate_chosen (const nn_estimate_t *self, int device);
//  The device's candidate for (P, N), or NULL if (P, N) was not evaluated
//  (N not in the allowed set). For re-planning: compare the running
//  plan's estimate under new costs with the new choice.
const nn_estimate_candidate_t *nn_estimate_find (const nn_estimate_t *self, int device,
                                         int split_point, int micro_batches);
//  Whether the input's pins (split point, micro-batches) allow c: the
//  candidates the chooser picked among.
bool nn_estimate_allowed (const nn_estimate_t *self, const nn_estimate_candidate_t *c);
//  One (P, N) for every device, for a server that cannot run different
//  plans per device: the allowed (P, N) with the smallest parallel epoch
//  (rounds as barriers, the slowest device per round), by the same
//  near-best rule (smallest P, then fewest micro-batches). Fills split_point, micro_batches
//  and returns the epoch estimate.
double nn_estimate_common (const nn_estimate_t *self, int *split_point, int *micro_batches);
const nn_estimate_mode_t *nn_estimate_mode (const nn_estimate_t *self, pl_mode_t mode);
//  max(1, D / W): the factor server durations get.
double nn_estimate_server_share (const nn_estimate_input_t *in);
//  Payload bytes/s of a link given in Mbit/s on the wire, as tc shapes and
//  operators quote it: TCP over Ethernet (MTU 1500, timestamps on) carries
//  1448 payload bytes in every 1514-byte frame. Measured (probed) rates are
//  payload already and are not converted.
double nn_estimate_link_payload_Bps (double mbps);

//  Aggregation rounds per epoch (>= 1).
int nn_estimate_rounds (const nn_estimate_input_t *in);

//  The smallest micro-batch a plan may cut for spec: configured (> 0), or
//  by default the model's (its registry entry's min_micro_batch; at least
//  2, BN's two samples). BN normalises each micro-batch over its own
//  samples, and small ones cost some models accuracy: ResNet18, one epoch
//  of 2 x 10,000 Fashion-MNIST images in pipelearn at split point 1,
//  tested at 70.4 / 68.2% (two seeds) with micro-batches of 25, 70.4 /
//  68.3% with 50, fl 69.0 / 69.9%, but 66.3 / 62.7% with micro-batches of
//  10, while VGG5 with micro-batches of 10 tested as fl (docs/planner.md).
int nn_estimate_min_micro_batch (const nn_model_spec_t *spec, int configured);

//  The allowed micro-batch counts for the input's B and caps, ascending,
//  into ns (room for cap entries); returns how many. 1 is always allowed.
int nn_estimate_micro_batch_set (const nn_estimate_input_t *in, int *ns, int cap);

//  One device's iteration time at (P, N) under the model above, with
//  every server duration multiplied by server_share. stages may be NULL.
//  in must pass nn_estimate_check; P in 1..U-1, N >= 1 (programmer errors
//  otherwise). Codecs: the device's pinned ones, none for an auto
//  direction (nn_estimate_iteration_codecs takes them explicitly).
double nn_estimate_iteration (const nn_estimate_input_t *in, int device, int split_point,
                         int micro_batches, double server_share,
                         nn_estimate_stages_t *stages);
//  The same with the codecs given: up none/fp16/int8, down none..topk
//  (topk with the device's topk_fraction, which must be set).
double nn_estimate_iteration_codecs (const nn_estimate_input_t *in, int device, int split_point,
                                int micro_batches, double server_share, int codec_up,
                                int codec_down, nn_estimate_stages_t *stages);

//  One FL iteration of a device: the whole model, whole batch, plus update.
double nn_estimate_iteration_fl (const nn_estimate_input_t *in, int device);

//  One host (host_cores > 0): the CPU work of one iteration of every device
//  at (P, N), the server's share included, divided by host_cores; P = U is
//  FL (no server, nothing moved per iteration). 0 when host_cores is 0.
//  Codecs: each device's pinned ones (none for auto).
double nn_estimate_host_floor (const nn_estimate_input_t *in, int split_point, int micro_batches);

//  One aggregation round's exchange for a device whose part is units
//  [0, units): its weights up and back down, plus one RTT.
double nn_estimate_aggregation_s (const nn_estimate_input_t *in, int device, int units);

//  Brute-force discrete-event simulation of one iteration, independent of
//  nn_estimate_iteration's recurrence (an event queue and explicit resources).
//  split_points / micro_batches: one per device. pooled false: each device
//  alone, server durations times nn_estimate_server_share (the estimator's
//  model; equal to nn_estimate_iteration up to rounding). pooled true: all D
//  devices start together against W real workers, a replica on at most one
//  worker at a time, idle workers taking replicas round-robin (srv_main's
//  dispatch), no share factor. Codecs: each device's pinned ones (none
//  for auto). Writes each device's iteration time.
void nn_estimate_simulate_events (const nn_estimate_input_t *in, const int *split_points,
                              const int *micro_batches, bool pooled,
                              double *iteration_s);

//  The PipeLearn reference's closed-form N for a split, for comparison:
//  N = ceil((up + s_fwd + s_bwd + down) / min(d_fwd, d_bwd)) + 1, capped
//  at min(N, B/2, 100) (at least 1), then N = B / (B / N) in integers.
//  Times are the whole batch's, in seconds. The result need not divide B
//  (the reference drops the remainder).
int nn_estimate_reference_micro_batches (double d_fwd_s, double d_bwd_s, double s_fwd_s,
                                     double s_bwd_s, double up_s, double down_s,
                                     int batch_size);

#endif
