/*  srv_bin.c: pipelearn-server's main. See srv_main.c. */
#include "pl_daemon.h"
#include "srv_run.h"

int
main (int argc, char **argv)
{
    return pl_daemon_main (argc, argv, "pipelearn-server", srv_run);
}
