/*  pltest_cgroup.c: a CPU-quota cgroup for a test's child. See
    pltest_cgroup.h. */
#define _GNU_SOURCE
#include "pltest_cgroup.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool
s_has_token (const char *list, const char *token)
{
    size_t n = strlen (token);
    for (const char *p = list; *p; ) {
        const char *end = strchr (p, ',');
        size_t len = end ? (size_t) (end - p) : strlen (p);
        if (len == n && strncmp (p, token, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

static int
s_write (const char *dir, const char *file, const char *value)
{
    char path[4200];
    snprintf (path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen (path, "w");
    if (!f)
        return -1;
    int rc = fputs (value, f) < 0 ? -1 : 0;
    if (fclose (f))
        rc = -1;
    return rc;
}

//  The mount point of the cpu hierarchy of the given version, or -1.
static int
s_mount (int version, char *mnt, size_t mnt_size)
{
    FILE *f = fopen ("/proc/self/mountinfo", "r");
    if (!f)
        return -1;
    char line[4096];
    int rc = -1;
    while (rc && fgets (line, sizeof line, f)) {
        //  id parent major:minor root mountpoint options... - fstype source super
        char root[1024], point[1024], fstype[64], source[256], super[1024];
        const char *dash = strstr (line, " - ");
        if (!dash || sscanf (line, "%*s %*s %*s %1023s %1023s", root, point) != 2
        ||  sscanf (dash + 3, "%63s %255s %1023s", fstype, source, super) != 3)
            continue;
        if ((version == 1 && strcmp (fstype, "cgroup") == 0 && s_has_token (super, "cpu"))
        ||  (version == 2 && strcmp (fstype, "cgroup2") == 0)) {
            snprintf (mnt, mnt_size, "%s", point);
            rc = 0;
        }
    }
    fclose (f);
    return rc;
}

int
pltest_cgroup_new (pltest_cgroup_t *self, const char *name, long quota_us, long period_us,
                   char *why, size_t why_size)
{
    memset (self, 0, sizeof *self);
    FILE *f = fopen ("/proc/self/cgroup", "r");
    if (!f) {
        snprintf (why, why_size, "cannot read /proc/self/cgroup: %s", strerror (errno));
        return -1;
    }
    //  "N:cpu,cpuacct:/path" (v1 with a cpu controller) wins over "0::/path" (v2).
    char line[4096], v1[2048] = "", v2[2048] = "";
    bool have_v1 = false, have_v2 = false;
    while (fgets (line, sizeof line, f)) {
        line[strcspn (line, "\n")] = 0;
        char *c1 = strchr (line, ':'), *c2 = c1 ? strchr (c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        if (c1[1] == 0 && strncmp (line, "0:", 2) == 0) {
            snprintf (v2, sizeof v2, "%s", c2 + 1);
            have_v2 = true;
        }
        else if (s_has_token (c1 + 1, "cpu")) {
            snprintf (v1, sizeof v1, "%s", c2 + 1);
            have_v1 = true;
        }
    }
    fclose (f);
    char mnt[1024], parent[3072];
    if (have_v1 && s_mount (1, mnt, sizeof mnt) == 0) {
        self->version = 1;
        snprintf (parent, sizeof parent, "%s%s", mnt, v1);
    }
    else
    if (have_v2 && s_mount (2, mnt, sizeof mnt) == 0) {
        self->version = 2;
        snprintf (parent, sizeof parent, "%s%s", mnt, v2);
        //  The cpu controller must be on for the parent's children.
        char ctl[4200];
        snprintf (ctl, sizeof ctl, "%s/cgroup.controllers", parent);
        FILE *c = fopen (ctl, "r");
        char list[512] = "";
        if (c) {
            if (!fgets (list, sizeof list, c))
                list[0] = 0;
            fclose (c);
        }
        if (!strstr (list, "cpu")) {
            snprintf (why, why_size, "cgroup v2 %s has no cpu controller", parent);
            return -1;
        }
        if (s_write (parent, "cgroup.subtree_control", "+cpu")) {
            snprintf (why, why_size, "cannot enable cpu in %s/cgroup.subtree_control: %s "
                      "(a v2 group with processes of its own cannot)", parent,
                      strerror (errno));
            return -1;
        }
    }
    else {
        snprintf (why, why_size, "no cpu cgroup (v1 or v2) mounted for this process");
        return -1;
    }
    snprintf (self->dir, sizeof self->dir, "%s/%s-%ld", parent, name, (long) getpid ());
    if (mkdir (self->dir, 0755)) {
        snprintf (why, why_size, "cannot make %s: %s", self->dir, strerror (errno));
        self->dir[0] = 0;
        return -1;
    }
    char value[64];
    int rc;
    if (self->version == 2) {
        snprintf (value, sizeof value, "%ld %ld", quota_us, period_us);
        rc = s_write (self->dir, "cpu.max", value);
    }
    else {
        snprintf (value, sizeof value, "%ld", period_us);
        rc = s_write (self->dir, "cpu.cfs_period_us", value);
        snprintf (value, sizeof value, "%ld", quota_us);
        if (rc == 0)
            rc = s_write (self->dir, "cpu.cfs_quota_us", value);
    }
    if (rc) {
        snprintf (why, why_size, "cannot set the quota of %s: %s", self->dir,
                  strerror (errno));
        pltest_cgroup_remove (self);
        return -1;
    }
    return 0;
}

int
pltest_cgroup_join (const pltest_cgroup_t *self)
{
    char pid[32];
    snprintf (pid, sizeof pid, "%ld", (long) getpid ());
    return s_write (self->dir, "cgroup.procs", pid);
}

long
pltest_cgroup_throttled (const pltest_cgroup_t *self)
{
    char path[4200];
    snprintf (path, sizeof path, "%s/cpu.stat", self->dir);
    FILE *f = fopen (path, "r");
    if (!f)
        return -1;
    char key[64];
    long long v, out = -1;
    while (fscanf (f, "%63s %lld", key, &v) == 2)
        if (strcmp (key, "nr_throttled") == 0)
            out = v;
    fclose (f);
    return (long) out;
}

int
pltest_cgroup_remove (pltest_cgroup_t *self)
{
    if (!self->dir[0])
        return 0;
    for (int i = 0; i < 100; i++) {
        if (rmdir (self->dir) == 0 || errno == ENOENT) {
            self->dir[0] = 0;
            return 0;
        }
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep (&ts, NULL);
    }
    return -1;
}
