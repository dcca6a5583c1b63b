/*  plan_report.h: what pipelearn-plan prints: every candidate (P, N) of
    device 0 with its stages, each device's choice, one (P, N) for every
    device, and the four modes' epoch estimates; as JSON or as text.
*/
#ifndef PLAN_REPORT_H_INCLUDED
#define PLAN_REPORT_H_INCLUDED

#include <stdbool.h>

#include "nn_estimate.h"

//  heterogeneous: the devices' costs differ (a cost file listed them), so
//  each device's choice is printed too.
void plan_report_json (const nn_estimate_t *plan, const nn_estimate_input_t *in,
                       bool heterogeneous);
void plan_report_text (const nn_estimate_t *plan, const nn_estimate_input_t *in,
                       bool heterogeneous);

#endif
