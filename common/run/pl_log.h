/*  pl_log.h: one-line log messages on stderr with a UTC timestamp and
    the program's level tag. Safe from any thread.

    Two formats. text (the default): "HH:MM:SS.mmm L message". json, for
    journald/Loki: one object per line,
      {"time": "2026-11-25T12:34:56.789Z", "level": "info",
       "component": "server", "device": 1, "message": "...",
       "fields": {"program": "pipelearn-server", "pid": 123, "epoch": 2}}
    component is the message's "word: " prefix (the program's name when it
    has none); device is the process's device id (pl_log_set_device), else
    the first "device N" in the message, else absent; fields carries the
    program, the pid and any "epoch N" / "iteration N" in the message.
*/
#ifndef PL_LOG_H_INCLUDED
#define PL_LOG_H_INCLUDED

#include <stdbool.h>

typedef enum {
    PL_LOG_TEXT = 0,
    PL_LOG_JSON = 1
} pl_log_format_t;

void pl_log_info (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void pl_log_warn (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void pl_log_error (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

//  The format is a process-wide setting (one stderr per process), set in
//  main before any thread starts; reading it is atomic, so a late change
//  is still safe. "text" or "json" -> 0, anything else -1.
int pl_log_set_format_name (const char *name);
pl_log_format_t pl_log_format (void);
//  Apply "--log-format X" / "--log-format=X" found in argv before the
//  command line is parsed, so that lines logged before it (OpenBLAS setup,
//  the re-exec) have the format too. An unknown name is left for the
//  daemon's parser to refuse. program names the binary in json lines.
void pl_log_setup_args (int argc, char **argv, const char *program);
//  The device id a client runs as (json "device"); -1 = none.
void pl_log_set_device (int device);

#endif
