/*  plan_costs.c: pipelearn-plan's cost files. See plan_costs.h. */
#include "plan_costs.h"

#include "nn_alloc.h"
#include "pl_blas.h"
#include "pl_files.h"
#include "pl_log.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_COSTS_FILE (1024 * 1024)

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

int
plan_costs_load (const char *path, int batch, int devices, nn_estimate_input_t *in,
                 nn_estimate_device_t *devs, bool *heterogeneous, char *err,
                 size_t err_size)
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

int
plan_costs_write (const char *path, int batch, const nn_estimate_input_t *in,
                  const char *model, char *err, size_t err_size)
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

void
plan_costs_slow_devices (nn_estimate_device_t *devs, double f)
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
