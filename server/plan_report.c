/*  plan_report.c: pipelearn-plan's output. See plan_report.h. */
#include "plan_report.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

//  A candidate's codecs (the pinned ones or auto's choice).
static void
s_codecs_json (const nn_estimate_candidate_t *c, cJSON *o)
{
    cJSON_AddStringToObject (o, "codec_up", nn_codec_name ((nn_codec_id_t) c->codec_up));
    cJSON_AddStringToObject (o, "codec_down", nn_codec_name ((nn_codec_id_t) c->codec_down));
}

//  "int8" or "int8 (auto)" for device d's direction.
static const char *
s_codec_text (const nn_estimate_input_t *in, int d, bool up, int codec, char *buf,
              size_t size)
{
    bool is_auto = in->codecs && (up ? in->codecs[d].up : in->codecs[d].down)
                                 == NN_ESTIMATE_CODEC_AUTO;
    snprintf (buf, size, "%s%s", nn_codec_name ((nn_codec_id_t) codec),
              is_auto ? " (auto)" : "");
    return buf;
}

static cJSON *
s_candidate_json (const nn_estimate_candidate_t *c)
{
    cJSON *o = cJSON_CreateObject ();
    cJSON_AddNumberToObject (o, "split_point", c->split_point);
    cJSON_AddNumberToObject (o, "micro_batches", c->micro_batches);
    s_codecs_json (c, o);
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
    cJSON_AddNumberToObject (s, "codec_s", st->codec_s);
    cJSON_AddNumberToObject (o, "bytes_per_iteration", st->bytes_up + st->bytes_down);
    cJSON_AddNumberToObject (o, "bytes_up", st->bytes_up);
    cJSON_AddNumberToObject (o, "bytes_down", st->bytes_down);
    return o;
}

void
plan_report_json (const nn_estimate_t *plan, const nn_estimate_input_t *in,
                  bool heterogeneous)
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
    s_codecs_json (ch, chosen);
    //  Each device's codecs at its own choice (auto picks per device).
    cJSON *dc = cJSON_AddArrayToObject (chosen, "codecs");
    for (int d = 0; d < in->devices_count; d++) {
        const nn_estimate_candidate_t *c = nn_estimate_chosen (plan, d);
        cJSON *o = cJSON_CreateObject ();
        cJSON_AddNumberToObject (o, "device", d);
        s_codecs_json (c, o);
        cJSON_AddBoolToObject (o, "codec_up_auto", in->codecs
                               && in->codecs[d].up == NN_ESTIMATE_CODEC_AUTO);
        cJSON_AddBoolToObject (o, "codec_down_auto", in->codecs
                               && in->codecs[d].down == NN_ESTIMATE_CODEC_AUTO);
        cJSON_AddNumberToObject (o, "estimated_epoch_s", c->epoch_s);
        cJSON_AddItemToArray (dc, o);
    }
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
            s_codecs_json (c, o);
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

void
plan_report_text (const nn_estimate_t *plan, const nn_estimate_input_t *in,
                  bool heterogeneous)
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
        printf ("%3s %4s %9s %9s %8s %8s %8s %8s %8s %8s %9s%s%s\n", "P", "N", "iter_s",
                "epoch_s", "dev_fwd", "upload", "server", "download", "dev_bwd", "update",
                "MB/iter", in->host_cores > 0 ? "    host_s" : "",
                in->codecs ? "  codecs up/down" : "");
        const nn_estimate_candidate_t *ch = nn_estimate_chosen (plan, d);
        for (int i = 0; i < nn_estimate_candidates_count (plan, d); i++) {
            const nn_estimate_candidate_t *c = nn_estimate_candidate (plan, d, i);
            const nn_estimate_stages_t *s = &c->stages;
            char host[32] = "";
            if (in->host_cores > 0)
                snprintf (host, sizeof host, " %9.4f", c->host_floor_s);
            char codec[32] = "";
            if (in->codecs)
                snprintf (codec, sizeof codec, "  %s/%s",
                          nn_codec_name ((nn_codec_id_t) c->codec_up),
                          nn_codec_name ((nn_codec_id_t) c->codec_down));
            printf ("%3d %4d %9.4f %9.2f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %9.3f%s%s%s\n",
                    c->split_point, c->micro_batches, c->iteration_s, c->epoch_s,
                    s->device_forward_s, s->upload_s, s->server_s, s->download_s,
                    s->device_backward_s, s->device_update_s + s->server_update_s,
                    (s->bytes_up + s->bytes_down) / 1e6, host, codec,
                    c == ch ? "  <- chosen" : "");
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
    //  Each device's codecs at its own choice (auto picks per device and
    //  direction).
    for (int d = 0; in->codecs && d < in->devices_count; d++) {
        const nn_estimate_candidate_t *c = nn_estimate_chosen (plan, d);
        char up[32], down[32];
        printf ("%scodecs for device %d: up %s, down %s at split_point %d, micro_batches %d: "
                "%.4f s/iteration, %.2f s/epoch (codec CPU %.4f s/iteration)\n",
                d ? "" : "\n", d, s_codec_text (in, d, true, c->codec_up, up, sizeof up),
                s_codec_text (in, d, false, c->codec_down, down, sizeof down),
                c->split_point, c->micro_batches, c->iteration_s, c->epoch_s,
                c->stages.codec_s);
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
