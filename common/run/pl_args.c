/*  pl_args.c: the binaries' shared command-line conventions. See pl_args.h. */
#include "pl_args.h"

#include <getopt.h>
#include <pthread.h>

#include "nn_alloc.h"
#include "pl_log.h"

static pthread_mutex_t s_args_mutex = PTHREAD_MUTEX_INITIALIZER;

void
pl_args_lock (void)
{
    pthread_mutex_lock (&s_args_mutex);
    optind = 0;             //  glibc: 0 re-initialises getopt completely
}

void
pl_args_unlock (void)
{
    pthread_mutex_unlock (&s_args_mutex);
}

int
pl_args_config (pl_config_t *cfg, int argc, char **argv, const char **path_out)
{
    char err[NN_ERR_SIZE];
    if (pl_config_load_args (cfg, argc, argv, path_out, err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    return 0;
}

int
pl_args_set (pl_config_t *cfg, const char *key_value)
{
    char err[NN_ERR_SIZE];
    if (pl_config_set (cfg, key_value, err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    return 0;
}

int
pl_args_log_format (const char *name)
{
    if (pl_log_set_format_name (name)) {
        pl_log_error ("--log-format: want text or json, got \"%s\"", name);
        return -1;
    }
    return 0;
}

int
pl_args_end (int argc, char **argv, void (*usage) (FILE *out))
{
    if (optind < argc) {
        pl_log_error ("unexpected argument \"%s\"", argv[optind]);
        usage (stderr);
        return -1;
    }
    return 0;
}
