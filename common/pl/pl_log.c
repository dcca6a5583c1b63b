/*  pl_log.c: see pl_log.h. */
#include "pl_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static void
s_log (const char *level, const char *fmt, va_list ap)
{
    struct timeval tv;
    gettimeofday (&tv, NULL);
    struct tm tm;
    gmtime_r (&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf (line, sizeof line, "%02d:%02d:%02d.%03d %s ", tm.tm_hour, tm.tm_min,
                      tm.tm_sec, (int) (tv.tv_usec / 1000), level);
    if (n < 0 || (size_t) n >= sizeof line)
        n = 0;
    vsnprintf (line + n, sizeof line - (size_t) n, fmt, ap);
    //  One fputs per message keeps lines whole across threads.
    fprintf (stderr, "%s\n", line);
}

void
pl_log_info (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    s_log ("I", fmt, ap);
    va_end (ap);
}

void
pl_log_warn (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    s_log ("W", fmt, ap);
    va_end (ap);
}

void
pl_log_error (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    s_log ("E", fmt, ap);
    va_end (ap);
}
