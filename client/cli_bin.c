/*  cli_bin.c: pipelearn-client's main. See cli_main.c. */
#include "cli_run.h"
#include "pl_blas.h"
#include "pl_log.h"
#include "pl_summary.h"

int
main (int argc, char **argv)
{
    pl_log_setup_args (argc, argv, "pipelearn-client");
    if (pl_blas_setup (argv))
        return 2;
    pl_memory_setup ();
    return cli_run (argc, argv);
}
