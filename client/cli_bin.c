/*  cli_bin.c: pipelearn-client's main. See cli_main.c. */
#include "cli_run.h"
#include "pl_daemon.h"

int
main (int argc, char **argv)
{
    return pl_daemon_main (argc, argv, "pipelearn-client", cli_run);
}
