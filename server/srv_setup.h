/*  srv_setup.h: building a run from its checked config (models, replicas
    and workers, the ROUTER, CURVE), resuming it from a checkpoint, and
    tearing it down. Internal to the server (srv_internal.h).
*/
#ifndef SRV_SETUP_H_INCLUDED
#define SRV_SETUP_H_INCLUDED

#include "srv_internal.h"

//  Command-line settings besides the config (srv_main.c parses them).
typedef struct {
    const char *config_path;
    const char *results_dir;
    const char *bind;
    const char *endpoint_file;
    bool resume;                //  continue from the newest checkpoint
    bool force;                 //  a new run over an earlier run's checkpoints
    const char *cert;           //  server secret certificate
    const char *allow;          //  directory of allowed device certificates
    bool insecure;
    bool quiet;
} srv_args_t;

//  self->cfg checked, results, origin, summary and timeline set. 0 or -1
//  (logged).
int srv_setup (srv_t *self, const srv_args_t *args);
//  --resume: the models, the round and the epochs so far from the newest
//  valid checkpoint; the run restarts when its devices have joined. 0
//  (resumed, or no checkpoint yet: a new run), 1 when the run was already
//  complete, -1 on error.
int srv_setup_resume (srv_t *self);
//  --resume of a complete run: its results must be there (model.ckpt and
//  summary.json are written again from the final checkpoint if missing).
//  0, or 1 when they cannot be.
int srv_setup_complete_results (srv_t *self);
void srv_setup_teardown (srv_t *self);

#endif
