/*  pl_summary.h: the results file every binary writes, DIR/summary.json:
    {"config": {...}, "binary": "...", "epochs": [{"epoch": 1, "wall_s",
    "eval_s", "train_loss", "train_acc", "test_loss", "test_acc",
    "images_per_s", ...}], "openblas_core": "...", "threads": N,
    "peak_rss_kb": N}. Accuracies are fractions in 0..1; wall_s is the
    epoch's training time (aggregation included, evaluation excluded).
*/
#ifndef PL_SUMMARY_H_INCLUDED
#define PL_SUMMARY_H_INCLUDED

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "pl_config.h"
//  Results files (pl_write_file_atomic, pl_mkdirs) and the process's peak
//  RSS, which summary.json reports, for the summary's users.
#include "pl_files.h"
#include "pl_proc.h"

typedef struct {
    int epoch;                  //  1-based
    double wall_s, eval_s;
    double train_loss, train_acc;
    double test_loss, test_acc;
    double images_per_s;
} pl_epoch_stats_t;

typedef struct _pl_summary_t pl_summary_t;

//  results: the directory the run's files go to (--results, else the
//  config's results_dir); summary.json records it, in its config too.
pl_summary_t *pl_summary_new (const pl_config_t *config, const char *results,
                              const char *binary, int threads);
void pl_summary_destroy (pl_summary_t **self_p);
//  Append an epoch; returns its JSON object (borrowed) so a daemon can add
//  its own fields (server busy/idle, per-device figures).
cJSON *pl_summary_add_epoch (pl_summary_t *self, const pl_epoch_stats_t *stats);
//  Replace the epochs recorded so far with `epochs` (a JSON array; ownership
//  moves to the summary): a resumed run keeps the epochs before the crash.
void pl_summary_set_epochs (pl_summary_t *self, cJSON *epochs);
//  The epochs array so far (borrowed).
const cJSON *pl_summary_epochs (const pl_summary_t *self);
//  The top-level object (borrowed), for extra fields.
cJSON *pl_summary_root (pl_summary_t *self);
//  Write DIR/summary.json atomically, creating DIR if needed. Updates
//  peak_rss_kb first.
int pl_summary_write (pl_summary_t *self, const char *dir, char *err, size_t err_size);
//  Called at each pl_summary_write (every epoch end and the finish) with
//  the whole summary, before the file is written, on the writer's thread
//  (a live view: the server's metrics). root is borrowed for the call.
typedef void (pl_summary_listener_fn) (void *arg, const cJSON *root);
void pl_summary_set_listener (pl_summary_t *self, pl_summary_listener_fn *fn, void *arg);


#endif
