/*  pl_daemon.h: what pipelearn-server and pipelearn-client do for their
    process (once, in main) and at the start of each run (srv_run,
    cli_run: also when a test runs several in one process).
*/
#ifndef PL_DAEMON_H_INCLUDED
#define PL_DAEMON_H_INCLUDED

//  A daemon's whole main: the log's format and program name, OpenBLAS's
//  core (which may re-execute the process), malloc tuned for reused frames
//  (pl_memory_setup), then run (argc, argv)'s exit status; 2 when
//  PIPELEARN_ISA names no level (logged).
int pl_daemon_main (int argc, char **argv, const char *program,
                    int (*run) (int argc, char **argv));

#include <stdbool.h>

#include "pl_stop.h"

//  The start of a run, after its arguments are parsed: one OpenBLAS thread
//  (the daemons' own threads do the parallel work), CZMQ initialised with
//  its own signal handling off, and stop attached (pl_stop_attach; SIGHUP
//  too when hup) so that the run's flags decide. A SIGINT or SIGTERM that
//  came before the attach (while CZMQ's own handler was in place, which
//  only sets zsys_interrupted) is this run's stop as well: without that a
//  server never stopped and spun at 100 % CPU, since every zpoller_wait
//  returns at once once zsys_interrupted is set. -1 as pl_stop_attach
//  (too many runs attached; stop not attached).
int pl_daemon_run_setup (pl_stop_t *stop, bool hup);

#endif
