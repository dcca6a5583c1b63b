/*  pl_log.h: one-line log messages on stderr with a UTC timestamp and
    the program's level tag. Stateless: safe from any thread. */
#ifndef PL_LOG_H_INCLUDED
#define PL_LOG_H_INCLUDED

void pl_log_info (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void pl_log_warn (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void pl_log_error (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

#endif
