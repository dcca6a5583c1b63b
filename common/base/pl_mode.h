/*  pl_mode.h: the run's mode, one enum for the config, the wire and the
    daemons. The values are the wire's (proto/PROTOCOL.md, the assignment's
    "mode" field): do not renumber.
*/
#ifndef PL_MODE_H_INCLUDED
#define PL_MODE_H_INCLUDED

typedef enum {
    PL_MODE_FL = 1,             //  federated: the whole model on each device
    PL_MODE_SL = 2,             //  split learning: devices take turns
    PL_MODE_SFL = 3,            //  split federated: devices in parallel
    PL_MODE_PIPELEARN = 4       //  SFL with the micro-batch pipeline
} pl_mode_t;

//  "fl" | "sl" | "sfl" | "pipelearn" -> the mode, or -1 (also for NULL).
int pl_mode_from_name (const char *name);
//  The mode's name, or "UNKNOWN" for a value that is none.
const char *pl_mode_name (int mode);

#endif
