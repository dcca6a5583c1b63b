/*  pl_stop.h: a run's stop flags, and the one bridge from the process's
    signal handlers to them.

    A signal is the process's; the flags are the run's (srv_t, cli_run's
    frame). A run attaches its flags for its lifetime; the handler sets the
    matching flag of every run attached at that moment, so SIGINT/SIGTERM
    stop each run in progress (as they would stop the process), while a run
    started later begins with clear flags, and a run stopped by setting its
    own flag (a test) stops no other. This file's table is the only
    process-wide state involved.
*/
#ifndef PL_STOP_H_INCLUDED
#define PL_STOP_H_INCLUDED

#include <signal.h>
#include <stdbool.h>

//  At most this many runs attached at once (in-process tests run a server
//  and its devices; a binary runs one).
#define PL_STOP_MAX_RUNS 32

typedef struct {
    volatile sig_atomic_t stop;     //  SIGINT or SIGTERM came: end the run
    volatile sig_atomic_t reload;   //  SIGHUP came (with hup): re-read what can be
    bool hup;                       //  set by pl_stop_attach
} pl_stop_t;

//  Clears self and routes SIGINT and SIGTERM (and SIGHUP when hup) to it
//  until pl_stop_detach; the handlers are installed while any run is
//  attached and the process's earlier ones restored when the last one
//  detaches. -1 (self not attached; nothing changed) when
//  PL_STOP_MAX_RUNS runs are attached already.
int pl_stop_attach (pl_stop_t *self, bool hup);
//  After it returns no handler touches self (it waits for one running on
//  another thread): self may be freed. Accepts a self never attached.
void pl_stop_detach (pl_stop_t *self);

#endif
