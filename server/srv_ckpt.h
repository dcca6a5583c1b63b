/*  srv_ckpt.h: the server's run checkpoints, for crash safety and --resume.

    At every aggregation point (and when training starts) the server writes
    DIR/checkpoints/round-EEEEEE-IIIIII/ (the round that starts at epoch E,
    iteration I) holding:
      devpart.ckpt      the device part at the largest split point any device
                        trains at (nn_checkpoint); with devices at different
                        split points the narrower parts are cut from it
                        (every holder of a unit holds the same values at an
                        aggregation point)
      replica-K.ckpt    server replica K (units P_K..U of its device's split
                        point) with its optimiser state (split modes)
      state.json        epoch, round_iter, the run's config, the assignment
                        (per device: split point and micro-batch count), the
                        summary's epochs so far, origin_s (the run's time 0), and
                        "checksum": BLAKE2b-256 (hex) of the file's own text
                        with these 64 digits read as '0's ("format": 2;
                        format 1, from before the checksum, still loads)
    It is written as round-...tmp-PID, every file fsynced, then renamed into
    place and the parent directory fsynced: a crash leaves either the whole
    checkpoint or none. The newest `keep` are kept.

    Loading walks the checkpoints newest first and takes the first whose
    files all load (nn_checkpoint verifies each file's BLAKE2b checksum and
    shapes; state.json its checksum and every field's range: epoch
    1..1000001, round_iter within an epoch's batches, replicas, origin_s, no
    more epochs summarised than have ended); a corrupt or truncated one is
    reported and skipped. A
    checkpoint made for a different run (model, dataset, mode, devices,
    split, micro-batches, batch size, seed, samples differ) is an error, not
    skipped: resuming someone else's run is never what the operator meant.
    A config that says "auto" for the split point or micro-batches matches
    any number there (checkpoints from before the assignment was recorded
    on its own carry the planned numbers in their config).

    Devices do not keep optimiser state across a restart: after a resume
    their momentum starts from zero (the server replicas' is restored).
*/
#ifndef SRV_CKPT_H_INCLUDED
#define SRV_CKPT_H_INCLUDED

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "nn_model.h"
#include "pl_config.h"
#include "srv_assign.h"

typedef struct {
    int epoch;                  //  the round starts in this epoch (1-based)
    unsigned round_iter;        //  at this iteration
    double origin_s;            //  the run's time 0 for timeline.csv (pl_wall_clock)
} srv_ckpt_point_t;

//  Write a checkpoint of the models for the round at point, with the
//  assignment and the summary's epochs array so far (both borrowed), then
//  prune to the newest keep. 0, or -1 with a message.
int srv_ckpt_save (const char *results_dir, int keep, srv_ckpt_point_t point,
                   const pl_config_t *cfg, const srv_assign_t *assign,
                   nn_model_t *devpart, nn_model_t **replicas,
                   int replicas_count, const cJSON *epochs, char *err, size_t err_size);

//  Load the newest valid checkpoint into the models. On success fills
//  point, *epochs_out (the caller owns it; may be an empty array) and
//  chosen (the checkpoint's directory), and returns 0. -2 when there is no
//  checkpoint at all (a first start: nothing to resume); -1 with a message
//  when none is valid or the newest readable one belongs to another run.
//  Skipped (corrupt) checkpoints are logged. A point past the run's last
//  epoch means the run was complete.
int srv_ckpt_load (const char *results_dir, const pl_config_t *cfg, nn_model_t *devpart,
                   nn_model_t **replicas, int replicas_count, srv_ckpt_point_t *point,
                   cJSON **epochs_out, char *chosen, size_t chosen_size,
                   char *err, size_t err_size);

//  A new run (no --resume) is about to write into results_dir: 0 if it
//  holds no checkpoint, or it did and force deleted them all (a new run
//  among an old one's higher rounds could never be resumed); -1 with a
//  message naming the newest one when it holds some and force is false.
int srv_ckpt_claim_fresh (const char *results_dir, bool force, char *err, size_t err_size);

//  The assignment of the newest checkpoint that has one for devices
//  devices (a run planned with "auto" resumes with the plan it ran; the
//  planner may still move it once the devices are in); from a checkpoint
//  older than the recorded assignment, its config's numbers for every
//  device. 0, or -1 if none.
int srv_ckpt_peek_assign (const char *results_dir, int devices, srv_assign_t *assign);

//  The run's time 0 (origin_s) from the newest checkpoint that has one, so
//  that a resumed run's timeline.csv goes on in the same time base. 0, or
//  -1 if none has it (no checkpoint, or only ones older than the field).
int srv_ckpt_peek_origin (const char *results_dir, double *origin_s);

#endif
