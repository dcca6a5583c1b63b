/*  pl_log.c: see pl_log.h. */
#include "pl_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

//  Process-wide settings, the one exception to "no mutable globals": the
//  process has one stderr, and every module logs through here. Written
//  once at start; atomics keep reads from other threads defined.
static atomic_int s_format = PL_LOG_TEXT;
static atomic_int s_device = -1;
static _Atomic (const char *) s_program = NULL;

int
pl_log_set_format_name (const char *name)
{
    if (strcmp (name, "text") == 0)
        atomic_store (&s_format, PL_LOG_TEXT);
    else
    if (strcmp (name, "json") == 0)
        atomic_store (&s_format, PL_LOG_JSON);
    else
        return -1;
    return 0;
}

pl_log_format_t
pl_log_format (void)
{
    return (pl_log_format_t) atomic_load (&s_format);
}

void
pl_log_setup_args (int argc, char **argv, const char *program)
{
    atomic_store (&s_program, program);
    for (int i = 1; i < argc; i++) {
        if (strcmp (argv[i], "--") == 0)
            break;
        if (strcmp (argv[i], "--log-format") == 0 && i + 1 < argc)
            pl_log_set_format_name (argv[i + 1]);
        else
        if (strncmp (argv[i], "--log-format=", 13) == 0)
            pl_log_set_format_name (argv[i] + 13);
    }
}

void
pl_log_set_device (int device)
{
    atomic_store (&s_device, device);
}

//  Append s as the inside of a JSON string: quotes, backslashes and
//  control characters escaped, bytes that are not UTF-8 (a peer's text can
//  hold anything) replaced by U+FFFD. Stops before overflowing out.
static size_t
s_json_escape (char *out, size_t size, size_t n, const char *s)
{
    const unsigned char *p = (const unsigned char *) s;
    while (*p && n + 8 < size) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char) c;
            p++;
        }
        else
        if (c < 0x20 || c == 0x7f) {
            n += (size_t) snprintf (out + n, size - n, "\\u%04x", c);
            p++;
        }
        else
        if (c < 0x80) {
            out[n++] = (char) c;
            p++;
        }
        else {
            //  A well-formed sequence (no overlongs, no surrogates) is kept.
            int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            bool ok = len > 0;
            for (int k = 1; ok && k < len; k++)
                ok = (p[k] & 0xc0) == 0x80;
            if (ok && len == 3)
                ok = !(c == 0xe0 && p[1] < 0xa0) && !(c == 0xed && p[1] > 0x9f);
            if (ok && len == 4)
                ok = !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] > 0x8f);
            if (ok) {
                memcpy (out + n, p, (size_t) len);
                n += (size_t) len;
                p += len;
            }
            else {
                memcpy (out + n, "\xef\xbf\xbd", 3);
                n += 3;
                p++;
            }
        }
    }
    out[n] = 0;
    return n;
}

//  The number after the first "word " in text (e.g. "device 3"), or -1.
static long
s_number_after (const char *text, const char *word)
{
    size_t len = strlen (word);
    for (const char *p = strstr (text, word); p; p = strstr (p + 1, word)) {
        bool starts = p == text || !((p[-1] >= 'a' && p[-1] <= 'z') || p[-1] == '_');
        if (!starts || p[len] != ' ' || p[len + 1] < '0' || p[len + 1] > '9')
            continue;
        char *end;
        long v = strtol (p + len + 1, &end, 10);
        return v >= 0 && v < INT32_MAX ? v : -1;
    }
    return -1;
}

static void
s_log_json (const char *level, const struct timeval *tv, const struct tm *tm,
            const char *message)
{
    const char *program = atomic_load (&s_program);
    program = program ? program : "pipelearn";
    //  "server: ..." -> component "server", message the rest.
    char component[32];
    snprintf (component, sizeof component, "%s", program);
    const char *colon = strstr (message, ": ");
    size_t plen = colon ? (size_t) (colon - message) : 0;
    bool prefix = plen > 0 && plen < sizeof component;
    for (size_t i = 0; prefix && i < plen; i++) {
        char c = message[i];
        prefix = (c >= 'a' && c <= 'z') || c == '-' || c == '_' || (c >= '0' && c <= '9');
    }
    if (prefix) {
        memcpy (component, message, plen);
        component[plen] = 0;
        message = colon + 2;
    }
    int device = atomic_load (&s_device);
    if (device < 0)
        device = (int) s_number_after (message, "device");
    long epoch = s_number_after (message, "epoch");
    long iteration = s_number_after (message, "iteration");

    char line[4096];
    size_t n = (size_t) snprintf (line, sizeof line,
        "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":\"%s\","
        "\"component\":\"", tm->tm_year + 1900, tm->tm_mon + 1, tm->tm_mday,
        tm->tm_hour, tm->tm_min, tm->tm_sec, (int) (tv->tv_usec / 1000), level);
    n = s_json_escape (line, sizeof line - 256, n, component);
    n += (size_t) snprintf (line + n, sizeof line - n, "\"");
    if (device >= 0)
        n += (size_t) snprintf (line + n, sizeof line - n, ",\"device\":%d", device);
    n += (size_t) snprintf (line + n, sizeof line - n, ",\"message\":\"");
    n = s_json_escape (line, sizeof line - 256, n, message);
    n += (size_t) snprintf (line + n, sizeof line - n, "\",\"fields\":{\"program\":\"");
    n = s_json_escape (line, sizeof line - 200, n, program);
    n += (size_t) snprintf (line + n, sizeof line - n, "\",\"pid\":%ld", (long) getpid ());
    if (epoch >= 0)
        n += (size_t) snprintf (line + n, sizeof line - n, ",\"epoch\":%ld", epoch);
    if (iteration >= 0)
        n += (size_t) snprintf (line + n, sizeof line - n, ",\"iteration\":%ld", iteration);
    snprintf (line + n, sizeof line - n, "}}");
    fprintf (stderr, "%s\n", line);
}

static void
s_log (const char *level, const char *fmt, va_list ap)
{
    struct timeval tv;
    gettimeofday (&tv, NULL);
    struct tm tm;
    gmtime_r (&tv.tv_sec, &tm);
    char line[2048];
    if (atomic_load (&s_format) == PL_LOG_JSON) {
        vsnprintf (line, sizeof line, fmt, ap);
        s_log_json (level[0] == 'I' ? "info" : level[0] == 'W' ? "warning" : "error", &tv,
                    &tm, line);
        return;
    }
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
