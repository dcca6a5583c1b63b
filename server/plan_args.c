/*  plan_args.c: pipelearn-plan's command line. See plan_args.h. */
#include "plan_args.h"

#include "nn_alloc.h"
#include "nn_estimate.h"
#include "pl_args.h"
#include "pl_log.h"
#include "pl_models.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The shipped network profiles (docs/planner.md): Mbit/s = 10^6 bit/s as
//  tc and netem count them; RTT = twice the one-way delay.
typedef struct {
    const char *name;
    double up_mbps, down_mbps, rtt_ms;
} s_link_t;

static const s_link_t s_links[] = {
    { "4g", 10.0, 25.0, 60.0 },
    { "4g-plus", 20.0, 60.0, 40.0 },
    { "wifi", 50.0, 100.0, 6.0 },
};

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: pipelearn-plan --config FILE [--set KEY=VALUE]... [--link NAME]\n"
        "                      [--uplink-mbps X] [--downlink-mbps Y] [--rtt-ms R]\n"
        "                      [--devices D] [--costs FILE.json] [--device-slowdown F]\n"
        "                      [--write-costs FILE.json] [--forward-first] [--json]\n"
        "                      [--host-cores C] [--host-copy-mbps X]\n"
        "       pipelearn-plan --list-models\n"
        "Estimates the iteration time of every split point P and micro-batch count N\n"
        "for the config's model, batch size and devices, chooses the fastest (P, N),\n"
        "and estimates the epoch time of fl, sl, sfl and pipelearn.\n"
        "  --link NAME         4g (10/25 Mbit/s, RTT 60 ms), 4g-plus (20/60, 40 ms),\n"
        "                      wifi (50/100, 6 ms). Default link: 4g, i.e. uplink\n"
        "                      10 Mbit/s, downlink 25 Mbit/s, RTT 60 ms.\n"
        "  --uplink-mbps X     device -> server rate, Mbit/s (10^6 bit/s)\n"
        "  --downlink-mbps Y   server -> device rate, Mbit/s\n"
        "  --rtt-ms R          round-trip time, ms\n"
        "  --devices D         devices sharing the server (default: the config's)\n"
        "  --host-cores C      the server and every device run on one host with C\n"
        "                      cores (a lab, a demo, loopback): an iteration also\n"
        "                      takes at least all their CPU work / C (config key\n"
        "                      host_cores; 0 = each on its own hardware)\n"
        "  --host-copy-mbps X  with --host-cores: Mbit/s one core moves through the\n"
        "                      network stack (host_copy_mbps; default: measured)\n"
        "  --costs FILE        read per-unit costs instead of profiling this host\n"
        "  --write-costs FILE  write the profiled costs as a cost file\n"
        "  --device-slowdown F devices are F times slower than the profile or the\n"
        "                      cost file says (default 1)\n"
        "  --forward-first     model devices that run all forwards before any backward\n"
        "                      (pipelearn-client runs an arrived gradient's first)\n"
        "  --json              print {\"candidates\", \"chosen\", \"modes\"} as JSON\n"
        "split_point / micro_batches given as numbers in the config are honoured;\n"
        "\"auto\" lets the planner choose. The config's codec is costed (its bytes and\n"
        "this host's codec speeds); \"codec\": \"auto\" (or per direction / device)\n"
        "lets the planner choose none, fp16 or int8 for each device and direction\n"
        "(never topk). Without --costs this host is profiled and\n"
        "its costs stand for both the devices and the server (1 thread each, as the\n"
        "daemons run by default). See docs/planner.md.\n");
}

//  A number from a flag: > 0, or >= 0 when allow_zero.
static int
s_number (const char *flag, const char *text, bool allow_zero, double *out)
{
    char *end;
    double v = strtod (text, &end);
    if (*end || end == text || !isfinite (v) || v < 0.0 || (!allow_zero && v == 0.0)) {
        pl_log_error ("%s: want a number %s 0, got \"%s\"", flag, allow_zero ? ">=" : ">",
                      text);
        return -1;
    }
    *out = v;
    return 0;
}

int
plan_args_parse (int argc, char **argv, plan_args_t *args, pl_config_t *cfg)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "set", required_argument, NULL, 's' },
        { "link", required_argument, NULL, 'l' },
        { "uplink-mbps", required_argument, NULL, 'u' },
        { "downlink-mbps", required_argument, NULL, 'd' },
        { "rtt-ms", required_argument, NULL, 'r' },
        { "devices", required_argument, NULL, 'D' },
        { "costs", required_argument, NULL, 'C' },
        { "write-costs", required_argument, NULL, 'W' },
        { "forward-first", no_argument, NULL, 'F' },
        { "device-slowdown", required_argument, NULL, 'S' },
        { "json", no_argument, NULL, 'j' },
        { "host-cores", required_argument, NULL, 'H' },
        { "host-copy-mbps", required_argument, NULL, 'M' },
        { "help", no_argument, NULL, 'h' },
        { "list-models", no_argument, NULL, 'L' },
        { NULL, 0, NULL, 0 }
    };
    if (pl_args_config (cfg, argc, argv, &args->config_path))
        return -1;
    args->up_mbps = s_links[0].up_mbps;
    args->down_mbps = s_links[0].down_mbps;
    args->rtt_ms = s_links[0].rtt_ms;
    double up = -1.0, down = -1.0, rtt = -1.0;
    int c;
    while ((c = getopt_long (argc, argv, "c:s:l:u:d:r:D:C:W:FS:jhH:M:L", opts, NULL)) != -1) {
        switch (c) {
            case 'c':
                break;
            case 's':
                if (pl_args_set (cfg, optarg))
                    return -1;
                break;
            case 'l': {
                size_t i, n = sizeof s_links / sizeof s_links[0];
                for (i = 0; i < n && strcmp (s_links[i].name, optarg); i++)
                    ;
                if (i == n) {
                    pl_log_error ("--link: want 4g, 4g-plus or wifi, got \"%s\"", optarg);
                    return -1;
                }
                args->up_mbps = s_links[i].up_mbps;
                args->down_mbps = s_links[i].down_mbps;
                args->rtt_ms = s_links[i].rtt_ms;
                break;
            }
            case 'u':
                if (s_number ("--uplink-mbps", optarg, false, &up))
                    return -1;
                break;
            case 'd':
                if (s_number ("--downlink-mbps", optarg, false, &down))
                    return -1;
                break;
            case 'r':
                if (s_number ("--rtt-ms", optarg, true, &rtt))
                    return -1;
                break;
            case 'D': {
                char *end;
                long d = strtol (optarg, &end, 10);
                if (*end || d < 1 || d > NN_ESTIMATE_MAX_DEVICES) {
                    pl_log_error ("--devices: want 1..%d, got \"%s\"", NN_ESTIMATE_MAX_DEVICES,
                                  optarg);
                    return -1;
                }
                args->devices = (int) d;
                break;
            }
            case 'C': args->costs_path = optarg; break;
            case 'W': args->write_costs_path = optarg; break;
            case 'F': args->forward_first = true; break;
            case 'S':
                if (s_number ("--device-slowdown", optarg, false, &args->device_slowdown))
                    return -1;
                break;
            case 'j': args->json = true; break;
            case 'H': {
                char key[64], err[NN_ERR_SIZE];
                snprintf (key, sizeof key, "host_cores=%s", optarg);
                if (pl_config_set (cfg, key, err, sizeof err)) {
                    pl_log_error ("--host-cores: %s", err);
                    return -1;
                }
                break;
            }
            case 'M': {
                double v;
                if (s_number ("--host-copy-mbps", optarg, false, &v))
                    return -1;
                cfg->host_copy_mbps = v;
                break;
            }
            case 'h': s_usage (stdout); exit (0);
            case 'L': pl_models_print (stdout); exit (0);
            default: s_usage (stderr); return -1;
        }
    }
    if (pl_args_end (argc, argv, s_usage))
        return -1;
    char err[NN_ERR_SIZE];
    //  Explicit rates win over --link, whatever the order.
    if (up > 0.0)
        args->up_mbps = up;
    if (down > 0.0)
        args->down_mbps = down;
    if (rtt >= 0.0)
        args->rtt_ms = rtt;
    if (args->devices) {
        char set[64];
        snprintf (set, sizeof set, "devices=%d", args->devices);
        if (pl_config_set (cfg, set, err, sizeof err)) {
            pl_log_error ("--devices: %s", err);
            return -1;
        }
    }
    //  pl_config_check refuses "auto" until the daemons plan; here "auto"
    //  is the point, so check a copy with numbers in its place.
    pl_config_t copy = *cfg;
    if (copy.split_point == PL_AUTO || copy.split_point == PL_PER_DEVICE)
        copy.split_point = 1;
    if (copy.micro_batches == PL_AUTO)
        copy.micro_batches = 1;
    if (pl_config_check (&copy, args->config_path ? args->config_path : "config", err,
                         sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    return 0;
}
