/*  pipelearn-plan: choose the split point and micro-batch count for a
    config, and estimate FL / SL / SFL / PipeLearn epoch times.

    pipelearn-plan --config FILE [--set KEY=VALUE]... [--link 4g|4g-plus|wifi]
                   [--uplink-mbps X] [--downlink-mbps Y] [--rtt-ms R]
                   [--devices D] [--costs FILE.json] [--write-costs FILE.json]
                   [--device-slowdown F] [--forward-first] [--json]
                   [--host-cores C] [--host-copy-mbps X]

    Without --costs it profiles this host (nn_profile) and uses the same
    costs for the devices and the server. The model is nn_estimate.h's;
    docs/planner.md explains it and the cost file format.
*/
#include "nn_alloc.h"
#include "nn_dataset.h"
#include "nn_model.h"
#include "nn_estimate.h"
#include "nn_profile.h"
#include "pl_args.h"
#include "pl_blas.h"
#include "pl_config.h"
#include "pl_hostcopy.h"
#include "pl_log.h"
#include "pl_models.h"
#include "pl_summary.h"
#include "pl_timeline.h"

#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_COSTS_FILE (1024 * 1024)

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

typedef struct {
    const char *config_path;
    const char *costs_path;
    const char *write_costs_path;
    double up_mbps, down_mbps, rtt_ms;
    int devices;                    //  0 = the config's
    double device_slowdown;         //  device costs = profiled costs times this
    bool forward_first;
    bool json;
} s_args_t;

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
        "\"auto\" lets the planner choose. Without --costs this host is profiled and\n"
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

static int
s_parse_args (int argc, char **argv, s_args_t *args, pl_config_t *cfg)
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
    if (copy.split_point == PL_AUTO)
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

//  ---------------------------------------------------------------------
//  Cost files (docs/planner.md)

static char *
s_read_file (const char *path, char *err, size_t err_size)
{
    FILE *f = fopen (path, "rb");
    if (!f) {
        nn_errf (err, err_size, "%s: cannot open: %s", path, strerror (errno));
        return NULL;
    }
    char *buf = nn_malloc (S_MAX_COSTS_FILE + 1);
    size_t n = fread (buf, 1, S_MAX_COSTS_FILE + 1, f);
    bool bad = ferror (f);
    fclose (f);
    if (bad || n > S_MAX_COSTS_FILE) {
        nn_errf (err, err_size, "%s: %s", path, bad ? "read error" : "larger than 1 MiB");
        nn_free (buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

//  An array of `units` non-negative numbers under key into out; absent is
//  fine when optional (out left as is).
static int
s_json_array (const cJSON *obj, const char *key, int units, double *out, bool optional,
              const char *where, char *err, size_t err_size)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive (obj, key);
    if (!a)
        return optional ? 0 : nn_errf (err, err_size, "%s: \"%s\" is missing", where, key);
    if (!cJSON_IsArray (a) || cJSON_GetArraySize (a) != units)
        return nn_errf (err, err_size, "%s: \"%s\": expected an array of %d numbers (one "
                        "per split unit)", where, key, units);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach (v, a) {
        if (!cJSON_IsNumber (v) || !isfinite (v->valuedouble) || v->valuedouble < 0.0)
            return nn_errf (err, err_size, "%s: \"%s\"[%d]: expected a number >= 0", where,
                            key, i);
        out[i++] = v->valuedouble;
    }
    return 0;
}

//  An optional number under key: > 0, or >= 0 when allow_zero.
static int
s_json_number (const cJSON *obj, const char *key, bool allow_zero, double *out,
               const char *where, char *err, size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber (v) || !isfinite (v->valuedouble) || v->valuedouble < 0.0
    ||  (!allow_zero && v->valuedouble == 0.0))
        return nn_errf (err, err_size, "%s: \"%s\": expected a number %s 0", where, key,
                        allow_zero ? ">=" : ">");
    *out = v->valuedouble;
    return 0;
}

static int
s_json_costs (const cJSON *obj, int units, nn_estimate_costs_t *c, bool optional,
              const char *where, char *err, size_t err_size)
{
    static const char *keys[] = { "fwd_s", "bwd_s", "fwd_fixed_s", "bwd_fixed_s", "upd_s" };
    double v[5][NN_MAX_UNITS];
    for (int k = 0; k < 5; k++)
        for (int u = 0; u < units; u++) {
            const nn_estimate_unit_cost_t *x = &c->unit[u];
            double cur[5] = { x->fwd_s, x->bwd_s, x->fwd_fixed_s, x->bwd_fixed_s, x->upd_s };
            v[k][u] = cur[k];
        }
    for (int k = 0; k < 5; k++)
        if (s_json_array (obj, keys[k], units, v[k], optional || k >= 2, where, err,
                          err_size))
            return -1;
    c->units_count = units;
    for (int u = 0; u < units; u++) {
        nn_estimate_unit_cost_t *x = &c->unit[u];
        *x = (nn_estimate_unit_cost_t) { v[0][u], v[1][u], v[2][u], v[3][u], v[4][u] };
        if (x->fwd_fixed_s > x->fwd_s || x->bwd_fixed_s > x->bwd_s)
            return nn_errf (err, err_size, "%s: unit %d: a *_fixed_s exceeds the whole "
                            "batch's time", where, u);
    }
    static const char *known[] = { "fwd_s", "bwd_s", "fwd_fixed_s", "bwd_fixed_s", "upd_s",
                                   "uplink_mbps", "downlink_mbps", "rtt_ms" };
    const cJSON *item;
    cJSON_ArrayForEach (item, obj) {
        size_t i, n = sizeof known / sizeof known[0];
        for (i = 0; i < n && strcmp (item->string, known[i]); i++)
            ;
        if (i == n)
            return nn_errf (err, err_size, "%s: unknown key \"%s\"", where, item->string);
    }
    return 0;
}

//  Read a cost file into in (model, server, devices) for batch B. The
//  model's bytes are already filled from the spec; the file may override
//  them. *heterogeneous is set when the file lists devices.
static int
s_load_costs (const char *path, int batch, int devices, nn_estimate_input_t *in,
              nn_estimate_device_t *devs, bool *heterogeneous, char *err, size_t err_size)
{
    char *text = s_read_file (path, err, err_size);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse (text);
    nn_free (text);
    if (!root || !cJSON_IsObject (root)) {
        cJSON_Delete (root);
        return nn_errf (err, err_size, "%s: not a JSON object", path);
    }
    int rc = -1, units = in->model.units_count;
    char where[600];
    static const char *known[] = { "batch_size", "out_bytes", "param_bytes", "input_bytes",
                                   "label_bytes", "server", "device", "devices", "comment" };
    const cJSON *item;
    cJSON_ArrayForEach (item, root) {
        size_t i, n = sizeof known / sizeof known[0];
        for (i = 0; i < n && strcmp (item->string, known[i]); i++)
            ;
        if (i == n) {
            nn_errf (err, err_size, "%s: unknown key \"%s\"", path, item->string);
            goto done;
        }
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive (root, "batch_size");
    if (!cJSON_IsNumber (b) || b->valuedouble != (double) batch) {
        nn_errf (err, err_size, "%s: batch_size: the costs must be measured at the config's "
                 "batch_size %d (got %s)", path, batch,
                 cJSON_IsNumber (b) ? "another" : "none");
        goto done;
    }
    nn_estimate_model_t *m = &in->model;
    if (s_json_array (root, "out_bytes", units, m->out_bytes, true, path, err, err_size)
    ||  s_json_array (root, "param_bytes", units, m->param_bytes, true, path, err, err_size)
    ||  s_json_number (root, "input_bytes", true, &m->input_bytes, path, err,
                       err_size)
    ||  s_json_number (root, "label_bytes", true, &m->label_bytes, path, err,
                       err_size))
        goto done;
    const cJSON *srv = cJSON_GetObjectItemCaseSensitive (root, "server");
    if (!cJSON_IsObject (srv)) {
        nn_errf (err, err_size, "%s: \"server\": expected an object of per-unit arrays", path);
        goto done;
    }
    snprintf (where, sizeof where, "%s: server", path);
    if (s_json_costs (srv, units, &in->server, false, where, err, err_size))
        goto done;
    //  Devices default to the server's costs (one host profiled).
    nn_estimate_costs_t dev_costs = in->server;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive (root, "device");
    if (dev) {
        snprintf (where, sizeof where, "%s: device", path);
        if (!cJSON_IsObject (dev)) {
            nn_errf (err, err_size, "%s: expected an object", where);
            goto done;
        }
        if (s_json_costs (dev, units, &dev_costs, false, where, err, err_size))
            goto done;
    }
    for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++)
        devs[d].costs = dev_costs;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive (root, "devices");
    *heterogeneous = false;
    if (list) {
        int n = cJSON_GetArraySize (list);
        if (!cJSON_IsArray (list) || n < 1 || n > NN_ESTIMATE_MAX_DEVICES) {
            nn_errf (err, err_size, "%s: \"devices\": expected an array of 1..%d objects",
                     path, NN_ESTIMATE_MAX_DEVICES);
            goto done;
        }
        if (devices != n) {
            nn_errf (err, err_size, "%s: \"devices\" lists %d devices, the run has %d "
                     "(set devices=%d or --devices %d)", path, n, devices, n, n);
            goto done;
        }
        for (int d = 0; d < n; d++) {
            const cJSON *o = cJSON_GetArrayItem (list, d);
            snprintf (where, sizeof where, "%s: devices[%d]", path, d);
            if (!cJSON_IsObject (o)) {
                nn_errf (err, err_size, "%s: expected an object", where);
                goto done;
            }
            double up = devs[d].uplink_Bps * 8e-6, down = devs[d].downlink_Bps * 8e-6;
            double rtt = devs[d].rtt_s * 1e3;
            if (s_json_costs (o, units, &devs[d].costs, true, where, err, err_size)
            ||  s_json_number (o, "uplink_mbps", false, &up, where, err, err_size)
            ||  s_json_number (o, "downlink_mbps", false, &down, where, err, err_size)
            ||  s_json_number (o, "rtt_ms", true, &rtt, where, err, err_size))
                goto done;
            devs[d].uplink_Bps = nn_estimate_link_payload_Bps (up);
            devs[d].downlink_Bps = nn_estimate_link_payload_Bps (down);
            devs[d].rtt_s = rtt / 1e3;
        }
        *heterogeneous = true;
    }
    rc = 0;
done:
    cJSON_Delete (root);
    return rc;
}

static cJSON *
s_costs_json (const nn_estimate_costs_t *c)
{
    cJSON *o = cJSON_CreateObject ();
    double v[5][NN_MAX_UNITS];
    for (int u = 0; u < c->units_count; u++) {
        const nn_estimate_unit_cost_t *x = &c->unit[u];
        v[0][u] = x->fwd_s;
        v[1][u] = x->bwd_s;
        v[2][u] = x->fwd_fixed_s;
        v[3][u] = x->bwd_fixed_s;
        v[4][u] = x->upd_s;
    }
    static const char *keys[] = { "fwd_s", "bwd_s", "fwd_fixed_s", "bwd_fixed_s", "upd_s" };
    for (int k = 0; k < 5; k++)
        cJSON_AddItemToObject (o, keys[k], cJSON_CreateDoubleArray (v[k], c->units_count));
    return o;
}

static int
s_write_costs (const char *path, int batch, const nn_estimate_input_t *in, const char *model,
               char *err, size_t err_size)
{
    cJSON *root = cJSON_CreateObject ();
    char comment[256];
    snprintf (comment, sizeof comment, "pipelearn-plan profile of %s at batch %d on this "
              "host (OpenBLAS core %s), 1 thread", model, batch, pl_blas_corename ());
    cJSON_AddStringToObject (root, "comment", comment);
    cJSON_AddNumberToObject (root, "batch_size", batch);
    int units = in->model.units_count;
    cJSON_AddItemToObject (root, "out_bytes", cJSON_CreateDoubleArray (in->model.out_bytes,
                                                                       units));
    cJSON_AddItemToObject (root, "param_bytes",
                           cJSON_CreateDoubleArray (in->model.param_bytes, units));
    cJSON_AddNumberToObject (root, "input_bytes", in->model.input_bytes);
    cJSON_AddNumberToObject (root, "label_bytes", in->model.label_bytes);
    cJSON_AddItemToObject (root, "server", s_costs_json (&in->server));
    cJSON_AddItemToObject (root, "device", s_costs_json (&in->devices[0].costs));
    char *text = cJSON_Print (root);
    cJSON_Delete (root);
    if (!text)
        return nn_errf (err, err_size, "%s: out of memory printing JSON", path);
    size_t n = strlen (text);
    char *line = nn_malloc (n + 1);
    memcpy (line, text, n);
    line[n] = '\n';
    free (text);
    int rc = pl_write_file_atomic (path, line, n + 1, err, err_size);
    nn_free (line);
    return rc;
}

//  ---------------------------------------------------------------------
//  Output

static cJSON *
s_candidate_json (const nn_estimate_candidate_t *c)
{
    cJSON *o = cJSON_CreateObject ();
    cJSON_AddNumberToObject (o, "split_point", c->split_point);
    cJSON_AddNumberToObject (o, "micro_batches", c->micro_batches);
    cJSON_AddNumberToObject (o, "estimated_iteration_s", c->iteration_s);
    cJSON_AddNumberToObject (o, "estimated_epoch_s", c->epoch_s);
    cJSON_AddNumberToObject (o, "host_floor_s", c->host_floor_s);
    cJSON *s = cJSON_AddObjectToObject (o, "stages");
    const nn_estimate_stages_t *st = &c->stages;
    cJSON_AddNumberToObject (s, "device_forward_s", st->device_forward_s);
    cJSON_AddNumberToObject (s, "upload_s", st->upload_s);
    cJSON_AddNumberToObject (s, "server_s", st->server_s);
    cJSON_AddNumberToObject (s, "download_s", st->download_s);
    cJSON_AddNumberToObject (s, "device_backward_s", st->device_backward_s);
    cJSON_AddNumberToObject (s, "device_update_s", st->device_update_s);
    cJSON_AddNumberToObject (s, "server_update_s", st->server_update_s);
    cJSON_AddNumberToObject (s, "latency_s", st->latency_s);
    cJSON_AddNumberToObject (s, "aggregation_s", c->aggregation_s);
    cJSON_AddNumberToObject (o, "bytes_per_iteration", st->bytes_up + st->bytes_down);
    cJSON_AddNumberToObject (o, "bytes_up", st->bytes_up);
    cJSON_AddNumberToObject (o, "bytes_down", st->bytes_down);
    return o;
}

static void
s_print_json (const nn_estimate_t *plan, const nn_estimate_input_t *in, bool heterogeneous)
{
    cJSON *root = cJSON_CreateObject ();
    cJSON *cands = cJSON_AddArrayToObject (root, "candidates");
    for (int i = 0; i < nn_estimate_candidates_count (plan, 0); i++)
        cJSON_AddItemToArray (cands, s_candidate_json (nn_estimate_candidate (plan, 0, i)));
    const nn_estimate_candidate_t *ch = nn_estimate_chosen (plan, 0);
    cJSON *chosen = cJSON_AddObjectToObject (root, "chosen");
    cJSON_AddNumberToObject (chosen, "split_point", ch->split_point);
    cJSON_AddNumberToObject (chosen, "micro_batches", ch->micro_batches);
    cJSON_AddNumberToObject (chosen, "estimated_iteration_s", ch->iteration_s);
    cJSON_AddNumberToObject (chosen, "estimated_epoch_s", ch->epoch_s);
    cJSON_AddNumberToObject (chosen, "host_floor_s", ch->host_floor_s);
    if (heterogeneous) {
        //  Candidates are device 0's; each device's own choice is here.
        cJSON *per = cJSON_AddArrayToObject (chosen, "per_device");
        for (int d = 0; d < in->devices_count; d++) {
            const nn_estimate_candidate_t *c = nn_estimate_chosen (plan, d);
            cJSON *o = cJSON_CreateObject ();
            cJSON_AddNumberToObject (o, "device", d);
            cJSON_AddNumberToObject (o, "split_point", c->split_point);
            cJSON_AddNumberToObject (o, "micro_batches", c->micro_batches);
            cJSON_AddNumberToObject (o, "estimated_iteration_s", c->iteration_s);
            cJSON_AddNumberToObject (o, "estimated_epoch_s", c->epoch_s);
            cJSON_AddItemToArray (per, o);
        }
        int p = 0, n = 0;
        double epoch = nn_estimate_common (plan, &p, &n);
        cJSON *common = cJSON_AddObjectToObject (chosen, "common");
        cJSON_AddNumberToObject (common, "split_point", p);
        cJSON_AddNumberToObject (common, "micro_batches", n);
        cJSON_AddNumberToObject (common, "estimated_epoch_s", epoch);
    }
    cJSON *modes = cJSON_AddObjectToObject (root, "modes");
    for (pl_mode_t k = PL_MODE_FL; k <= PL_MODE_PIPELEARN; k++)
        cJSON_AddNumberToObject (modes, pl_mode_name (k), nn_estimate_mode (plan, k)->epoch_s);
    char *text = cJSON_Print (root);
    if (text)
        printf ("%s\n", text);
    free (text);
    cJSON_Delete (root);
}

static void
s_print_text (const nn_estimate_t *plan, const nn_estimate_input_t *in, bool heterogeneous)
{
    int devs = heterogeneous ? in->devices_count : 1;
    for (int d = 0; d < devs; d++) {
        const nn_estimate_device_t *dv = &in->devices[d];
        double wire = nn_estimate_link_payload_Bps (1.0);     //  payload B/s per Mbit/s
        printf ("%sdevice %d: uplink %.1f Mbit/s, downlink %.1f Mbit/s on the wire (TCP "
                "payload %.1f/%.1f), RTT %.1f ms; %d device(s), %d server worker(s), batch %d, "
                "%d iterations/epoch\n", d ? "\n" : "", d, dv->uplink_Bps / wire,
                dv->downlink_Bps / wire, dv->uplink_Bps * 8e-6, dv->downlink_Bps * 8e-6,
                dv->rtt_s * 1e3, in->devices_count, in->server_workers, in->batch_size,
                in->iterations);
        if (in->host_cores > 0)
            printf ("one host with %d core(s) (host_s: all CPU work per iteration / cores; "
                    "iter_s is at least that); moving bytes costs a core %.0f Mbit/s\n",
                    in->host_cores, in->host_copy_Bps * 8e-6);
        printf ("%3s %4s %9s %9s %8s %8s %8s %8s %8s %8s %9s%s\n", "P", "N", "iter_s",
                "epoch_s", "dev_fwd", "upload", "server", "download", "dev_bwd", "update",
                "MB/iter", in->host_cores > 0 ? "    host_s" : "");
        const nn_estimate_candidate_t *ch = nn_estimate_chosen (plan, d);
        for (int i = 0; i < nn_estimate_candidates_count (plan, d); i++) {
            const nn_estimate_candidate_t *c = nn_estimate_candidate (plan, d, i);
            const nn_estimate_stages_t *s = &c->stages;
            char host[32] = "";
            if (in->host_cores > 0)
                snprintf (host, sizeof host, " %9.4f", c->host_floor_s);
            printf ("%3d %4d %9.4f %9.2f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %9.3f%s%s\n",
                    c->split_point, c->micro_batches, c->iteration_s, c->epoch_s,
                    s->device_forward_s, s->upload_s, s->server_s, s->download_s,
                    s->device_backward_s, s->device_update_s + s->server_update_s,
                    (s->bytes_up + s->bytes_down) / 1e6, host, c == ch ? "  <- chosen" : "");
        }
        //  The reference's closed form at the chosen split, for comparison.
        int p = ch->split_point;
        double dfwd = 0.0, dbwd = 0.0, sfwd = 0.0, sbwd = 0.0;
        for (int u = 0; u < in->model.units_count; u++) {
            if (u < p) {
                dfwd += dv->costs.unit[u].fwd_s;
                dbwd += dv->costs.unit[u].bwd_s;
            }
            else {
                sfwd += in->server.unit[u].fwd_s;
                sbwd += in->server.unit[u].bwd_s;
            }
        }
        double bytes = in->model.out_bytes[p - 1];
        int ref = nn_estimate_reference_micro_batches (dfwd, dbwd, sfwd, sbwd,
                                                   bytes / dv->uplink_Bps,
                                                   bytes / dv->downlink_Bps, in->batch_size);
        printf ("chosen for device %d: split_point %d, micro_batches %d: %.4f s/iteration, "
                "%.2f s/epoch (the reference's formula would give N = %d at P = %d)\n", d,
                ch->split_point, ch->micro_batches, ch->iteration_s, ch->epoch_s, ref, p);
    }
    if (heterogeneous) {
        int p = 0, n = 0;
        double epoch = nn_estimate_common (plan, &p, &n);
        printf ("\none plan for every device: split_point %d, micro_batches %d, %.2f s/epoch "
                "(per-device plans: %.2f s/epoch)\n", p, n, epoch,
                nn_estimate_mode (plan, PL_MODE_PIPELEARN)->epoch_s);
    }
    printf ("\n%-10s %10s %10s %4s %4s\n", "mode", "epoch_s", "iter_s", "P", "N");
    for (pl_mode_t k = PL_MODE_FL; k <= PL_MODE_PIPELEARN; k++) {
        const nn_estimate_mode_t *m = nn_estimate_mode (plan, k);
        char p[16], n[16];
        //  0: the devices' plans differ (see each device's choice above).
        snprintf (p, sizeof p, "%d", m->split_point);
        snprintf (n, sizeof n, "%d", m->micro_batches);
        if (!m->split_point)
            snprintf (p, sizeof p, "each");
        if (!m->micro_batches)
            snprintf (n, sizeof n, "each");
        printf ("%-10s %10.2f %10.4f %4s %4s\n", pl_mode_name (k), m->epoch_s,
                m->iteration_s, p, n);
    }
    double pl = nn_estimate_mode (plan, PL_MODE_PIPELEARN)->epoch_s;
    printf ("pipelearn speed-up (estimated; > 1 = pipelearn faster): vs fl %.2fx, "
            "vs sfl %.2fx, vs sl %.2fx\n",
            nn_estimate_mode (plan, PL_MODE_FL)->epoch_s / pl,
            nn_estimate_mode (plan, PL_MODE_SFL)->epoch_s / pl,
            nn_estimate_mode (plan, PL_MODE_SL)->epoch_s / pl);
}

//  Devices f times slower: every device time, per-call parts included.
static void
s_slow_devices (nn_estimate_device_t *devs, double f)
{
    if (f <= 0.0 || f == 1.0)
        return;
    for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++)
        for (int u = 0; u < devs[d].costs.units_count; u++) {
            nn_estimate_unit_cost_t *k = &devs[d].costs.unit[u];
            *k = (nn_estimate_unit_cost_t) { k->fwd_s * f, k->bwd_s * f, k->fwd_fixed_s * f,
                                         k->bwd_fixed_s * f, k->upd_s * f };
        }
    pl_log_info ("devices modelled %g times slower than the costs given", f);
}

//  Iterations per epoch as the devices compute them: every device runs
//  as many as the largest shard needs (cli_main.c's s_prepare).
static int
s_iterations (const pl_config_t *cfg, const nn_dataset_t *train, char *err, size_t err_size)
{
    nn_rng_t rng, shard_rng;
    nn_rng_seed (&rng, cfg->seed);
    shard_rng = nn_rng_split (&rng, 2000);
    int max_count = 0;
    for (int d = 0; d < cfg->devices; d++) {
        int count = 0;
        int *s = nn_dataset_shard (train, cfg->partition, cfg->devices, d, cfg->samples,
                                   cfg->dirichlet_alpha, &shard_rng, &count, err, err_size);
        if (!s)
            return -1;
        nn_free (s);
        if (count == 0)
            return nn_errf (err, err_size, "device %d's shard is empty (%d devices, %d "
                            "samples)", d, cfg->devices, cfg->samples);
        if (count > max_count)
            max_count = count;
    }
    return (max_count + cfg->batch_size - 1) / cfg->batch_size;
}

int
main (int argc, char **argv)
{
    pl_memory_setup ();                 //  as the daemons: the copy cost matches theirs
    if (pl_blas_setup (argv))
        return 2;
    pl_config_t cfg;
    pl_config_defaults (&cfg);
    s_args_t args = { 0 };
    if (s_parse_args (argc, argv, &args, &cfg))
        return 2;
    pl_blas_set_threads (1);

    char err[NN_ERR_SIZE];
    const char *dir = cfg.data_dir[0] ? cfg.data_dir : NULL;
    nn_dataset_t *train = nn_dataset_load_named (cfg.dataset, dir, true, cfg.samples, err,
                                                 sizeof err);
    if (train && cfg.pad_to > 0 && nn_dataset_pad (train, cfg.pad_to, err, sizeof err))
        nn_dataset_destroy (&train);
    if (!train) {
        pl_log_error ("%s", err);
        return 1;
    }
    nn_model_spec_t spec;
    int iterations = -1;
    if (nn_model_spec_by_name (&spec, cfg.model, train->c, train->h, train->w,
                               train->classes, err, sizeof err)
    ||  (iterations = s_iterations (&cfg, train, err, sizeof err)) < 0) {
        pl_log_error ("config: %s", err);
        nn_dataset_destroy (&train);
        return 1;
    }
    nn_dataset_destroy (&train);

    static nn_estimate_device_t devs[NN_ESTIMATE_MAX_DEVICES];
    nn_estimate_input_t in = { 0 };
    in.batch_size = cfg.batch_size;
    in.iterations = iterations;
    in.aggregation_frequency = cfg.aggregation_frequency;
    in.devices_count = cfg.devices;
    in.devices = devs;
    //  The server's pool: one worker per core (threads), at most one per
    //  device (srv_parts.c, srv_parts_workers).
    int cores = cfg.threads > 0 ? cfg.threads : (int) sysconf (_SC_NPROCESSORS_ONLN);
    in.server_workers = cores < 1 ? 1 : cores > cfg.devices ? cfg.devices : cores;
    in.forward_first = args.forward_first;
    in.split_point = cfg.split_point == PL_AUTO ? 0 : cfg.split_point;
    in.micro_batches = cfg.micro_batches == PL_AUTO ? 0 : cfg.micro_batches;
    if (nn_profile_model_bytes (&spec, cfg.batch_size, &in.model, err, sizeof err)) {
        pl_log_error ("%s", err);
        return 1;
    }
    for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++) {
        devs[d].uplink_Bps = nn_estimate_link_payload_Bps (args.up_mbps);
        devs[d].downlink_Bps = nn_estimate_link_payload_Bps (args.down_mbps);
        devs[d].rtt_s = args.rtt_ms / 1e3;
    }
    bool heterogeneous = false;
    if (args.costs_path) {
        if (s_load_costs (args.costs_path, cfg.batch_size, cfg.devices, &in, devs,
                          &heterogeneous, err, sizeof err)) {
            pl_log_error ("%s", err);
            return 1;
        }
        s_slow_devices (devs, args.device_slowdown);
    }
    else {
        pl_log_info ("profiling %s at batch %d on this host (1 thread, OpenBLAS core %s); "
                     "the same costs stand for the devices and the server", cfg.model,
                     cfg.batch_size, pl_blas_corename ());
        nn_profile_args_t pa = { .batch_size = cfg.batch_size, .seed = cfg.seed,
                                 .now = pl_monotonic_clock };
        nn_profile_report_t rep;
        if (nn_profile_run (&spec, &pa, &in.server, NULL, &rep, err, sizeof err)) {
            pl_log_error ("%s", err);
            return 1;
        }
        for (int d = 0; d < NN_ESTIMATE_MAX_DEVICES; d++)
            devs[d].costs = in.server;
        pl_log_info ("profile: units forward %.4f s + backward %.4f s per batch; the whole "
                     "model %.4f s + %.4f s", rep.units_fwd_s, rep.units_bwd_s,
                     rep.whole_fwd_s, rep.whole_bwd_s);
        //  The units and the whole model do the same work; far apart, the
        //  host was busy while one of them ran and the plan rests on noise.
        double units = rep.units_fwd_s + rep.units_bwd_s;
        double whole = rep.whole_fwd_s + rep.whole_bwd_s;
        if (units > 1.3 * whole || whole > 1.3 * units)
            pl_log_warn ("profile: the units and the whole model differ by more than 30%%; "
                         "the host looks busy, so the costs are noisy (profile on a quiet "
                         "host and save them with --write-costs)");
        s_slow_devices (devs, args.device_slowdown);
        if (args.write_costs_path) {
            if (s_write_costs (args.write_costs_path, cfg.batch_size, &in, cfg.model, err,
                               sizeof err)) {
                pl_log_error ("%s", err);
                return 1;
            }
            pl_log_info ("costs written to %s", args.write_costs_path);
        }
    }
    if (args.write_costs_path && args.costs_path)
        pl_log_warn ("--write-costs is ignored with --costs (nothing was profiled)");

    if (cfg.host_cores > 0) {
        in.host_cores = cfg.host_cores;
        in.host_copy_Bps = pl_hostcopy_rate (cfg.host_copy_mbps, in.model.out_bytes[0],
                                             err, sizeof err);
        if (in.host_copy_Bps < 0.0) {
            pl_log_error ("%s", err);
            return 1;
        }
        pl_log_info ("one host: the server and %d device(s) share %d core(s); moving bytes "
                     "costs a core %.0f Mbit/s%s", in.devices_count, in.host_cores,
                     in.host_copy_Bps * 8e-6, cfg.host_copy_mbps > 0.0 ? "" : " (measured)");
    }

    nn_estimate_t *plan = nn_estimate_new (&in, err, sizeof err);
    if (!plan) {
        pl_log_error ("%s", err);
        return 1;
    }
    if (in.split_point || in.micro_batches)
        pl_log_info ("config pins%s%s; set them to \"auto\" to let the planner choose",
                     in.split_point ? " split_point" : "",
                     in.micro_batches ? " micro_batches" : "");
    if (args.json)
        s_print_json (plan, &in, heterogeneous);
    else
        s_print_text (plan, &in, heterogeneous);
    nn_estimate_destroy (&plan);
    return 0;
}
