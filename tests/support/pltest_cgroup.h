/*  pltest_cgroup.h: a CPU-quota cgroup for a test's child process.

    The group is made under the calling process's own cpu cgroup (v2:
    cpu.max; v1: cpu.cfs_quota_us and cpu.cfs_period_us), found from
    /proc/self/cgroup and /proc/self/mountinfo, so that its quota is one
    more limit below whatever the test already runs under (a low-priority
    CI group): a child there gets at most the quota, and less only if its
    parents give it less. Needs root (or a delegated subtree); a test that
    cannot make one skips (pltest_cgroup_new says why).
*/
#ifndef PLTEST_CGROUP_H_INCLUDED
#define PLTEST_CGROUP_H_INCLUDED

#include <stddef.h>

typedef struct {
    char dir[4096];             //  the group's directory
    int version;                //  1 or 2
} pltest_cgroup_t;

//  Makes a group limited to quota_us per period_us of CPU time. 0, or -1
//  with why filled (no cpu controller, no permission, ...).
int pltest_cgroup_new (pltest_cgroup_t *self, const char *name, long quota_us,
                       long period_us, char *why, size_t why_size);
//  Moves the calling process into the group (call in the child after
//  fork). 0 or -1.
int pltest_cgroup_join (const pltest_cgroup_t *self);
//  The group's throttled periods so far (cpu.stat nr_throttled), -1 if unread.
long pltest_cgroup_throttled (const pltest_cgroup_t *self);
//  Removes the group; its processes must have exited (retries briefly
//  while the kernel lets go of them). 0 or -1.
int pltest_cgroup_remove (pltest_cgroup_t *self);

#endif
