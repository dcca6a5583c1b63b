/*  pl_daemon.c: the daemons' process and run setup. See pl_daemon.h. */
#include "pl_daemon.h"

#include <czmq.h>

#include "pl_blas.h"
#include "pl_log.h"
#include "pl_proc.h"

int
pl_daemon_main (int argc, char **argv, const char *program,
                int (*run) (int argc, char **argv))
{
    pl_log_setup_args (argc, argv, program);
    if (pl_blas_setup (argv))
        return 2;
    pl_memory_setup ();
    return run (argc, argv);
}

int
pl_daemon_run_setup (pl_stop_t *stop, bool hup)
{
    pl_blas_set_threads (1);
    zsys_init ();
    zsys_handler_set (NULL);
    if (pl_stop_attach (stop, hup))
        return -1;
    if (zsys_interrupted)
        stop->stop = 1;
    return 0;
}
