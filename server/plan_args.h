/*  plan_args.h: pipelearn-plan's command line (see plan_main.c). */
#ifndef PLAN_ARGS_H_INCLUDED
#define PLAN_ARGS_H_INCLUDED

#include <stdbool.h>

#include "pl_config.h"

typedef struct {
    const char *config_path;
    const char *costs_path;
    const char *write_costs_path;
    double up_mbps, down_mbps, rtt_ms;
    int devices;                    //  0 = the config's
    double device_slowdown;         //  device costs = profiled costs times this
    bool forward_first;
    bool json;
} plan_args_t;

//  Parses argv into args and cfg (--config first, then the other flags;
//  --link's rates unless --uplink-mbps etc. say otherwise) and checks cfg
//  with "auto" allowed for split_point and micro_batches. --help and
//  --list-models print and exit 0. -1 logged.
int plan_args_parse (int argc, char **argv, plan_args_t *args, pl_config_t *cfg);

#endif
