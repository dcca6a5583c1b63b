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

//  Peak resident set size of this process, in KiB.
long pl_peak_rss_kb (void);
//  Keep message-sized buffers (0.1-8 MiB, one or two per message) in
//  glibc's heap and reuse them: below 8 MiB nothing is mmapped, and up to
//  32 MiB of free heap top is kept rather than trimmed. A fresh mapping per
//  message page-faults on every page it touches: with a fixed 256 KiB
//  threshold, loopback pipelearn (1 GB per epoch) spent 2.5x the trainer's
//  epoch time, most of it in faults (11.0 -> 4.5 s per epoch with reuse).
//  At most two arenas bound what the threads can hold. Call first in main.
void pl_memory_setup (void);
//  mkdir -p; 0 or -1 with a message.
int pl_mkdirs (const char *path, char *err, size_t err_size);
//  Longest a results write waits for a file descriptor (pl_fd_wait).
#define PL_FD_WAIT_S 10.0
//  After an open/mkstemp that failed: true when it failed for want of a
//  file descriptor (EMFILE, ENFILE) and *deadline (a pl_monotonic second;
//  0 sets it PL_FD_WAIT_S ahead) has not passed, after a short sleep: try
//  again. Connections that never finish their handshake hold descriptors
//  until libzmq closes them (ZMQ_HANDSHAKE_IVL); a result waits for that
//  rather than being lost. errno is kept.
bool pl_fd_wait (double *deadline);
//  Write a whole file atomically (temporary file, fsync, rename); waits
//  for a file descriptor as pl_fd_wait says.
int pl_write_file_atomic (const char *path, const char *data, size_t size,
                          char *err, size_t err_size);

#endif
