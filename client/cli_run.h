/*  cli_run.h: pipelearn-client as a function, so that tests can run a
    server and its devices in one process over inproc://. main (cli_bin.c,
    pl_daemon_main) adds the process setup (OpenBLAS core, malloc tuning)
    around it. */
#ifndef CLI_RUN_H_INCLUDED
#define CLI_RUN_H_INCLUDED

//  argv as pipelearn-client takes it (argv[0] the program name). Returns
//  the exit status.
int cli_run (int argc, char **argv);

#endif
