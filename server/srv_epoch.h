/*  srv_epoch.h: what an epoch's end records (evaluation, summary.json,
    timeline.csv, the terminal's table) and the run's final results.
    Internal to the server; the step function (srv_step.c) decides when.
*/
#ifndef SRV_EPOCH_H_INCLUDED
#define SRV_EPOCH_H_INCLUDED

#include "srv_internal.h"

//  Every device finished the epoch: merge, evaluate, record. Returns
//  whether summary.json was written (rc becomes 1 if not).
bool srv_epoch_record (srv_t *self);
//  After the last epoch: model.ckpt, the checkpoint that marks the run
//  complete (only with model.ckpt and summary.json written), BYE to every
//  device; the run is done.
void srv_epoch_finish (srv_t *self, bool summary_written);

#endif
