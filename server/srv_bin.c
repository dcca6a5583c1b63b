/*  srv_bin.c: pipelearn-server's main. See srv_main.c. */
#include "pl_blas.h"
#include "pl_log.h"
#include "pl_summary.h"
#include "srv_run.h"

int
main (int argc, char **argv)
{
    pl_log_setup_args (argc, argv, "pipelearn-server");
    if (pl_blas_setup (argv))
        return 2;
    pl_memory_setup ();
    return srv_run (argc, argv);
}
