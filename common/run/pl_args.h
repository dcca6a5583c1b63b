/*  pl_args.h: the command-line conventions the pipelearn binaries share
    (pipelearn-server, -client, -plan, -train), around each one's own
    getopt_long loop:

        pl_args_lock ();                            //  in-process runs only
        if (pl_args_config (cfg, argc, argv, &path)) ...   //  --config first
        while ((c = getopt_long (...)) != -1)
            'c': nothing (loaded); 's': pl_args_set; 'L': pl_args_log_format
        if (pl_args_end (argc, argv, s_usage)) ...  //  no operand left
        pl_args_unlock ();

    Every function logs its error (pl_log_error) and returns -1; the
    caller only stops.
*/
#ifndef PL_ARGS_H_INCLUDED
#define PL_ARGS_H_INCLUDED

#include <stdio.h>

#include "pl_config.h"

//  getopt keeps its state in globals: a process that runs daemons in
//  threads (the in-process tests) parses one command line at a time
//  between these; the lock also resets getopt. Plain binaries do not need
//  them.
void pl_args_lock (void);
void pl_args_unlock (void);

//  Overlays the --config FILE of argv, if there is one, onto cfg before any
//  other flag is applied, so that every other flag overrides the file
//  whatever their order; *path_out as pl_config_load_args.
int pl_args_config (pl_config_t *cfg, int argc, char **argv, const char **path_out);
//  --set KEY=VALUE.
int pl_args_set (pl_config_t *cfg, const char *key_value);
//  --log-format text|json.
int pl_args_log_format (const char *name);
//  After the getopt loop: an operand left over is an error (usage to stderr).
int pl_args_end (int argc, char **argv, void (*usage) (FILE *out));

#endif
