/*  srv_run.h: pipelearn-server as a function, so that tests can run a
    server and its devices in one process over inproc://. main (srv_bin.c,
    pl_daemon_main) adds the process setup (OpenBLAS core, malloc tuning)
    around it. */
#ifndef SRV_RUN_H_INCLUDED
#define SRV_RUN_H_INCLUDED

//  argv as pipelearn-server takes it (argv[0] the program name). Returns
//  the exit status. SIGINT/SIGTERM/SIGHUP handlers are installed for the
//  whole process.
int srv_run (int argc, char **argv);

#endif
