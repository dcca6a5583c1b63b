/*  pl_stop.c: signals to the runs' stop flags. See pl_stop.h. */
#include "pl_stop.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

//  The attached runs. The handler only loads these pointers (lock-free
//  atomics, async-signal-safe); attach and detach change them under the
//  mutex. s_in_handler counts handlers running, so that detach can wait
//  until none can still hold the pointer it removed.
static _Atomic (pl_stop_t *) s_runs[PL_STOP_MAX_RUNS];
static atomic_int s_in_handler;
static pthread_mutex_t s_mutex = PTHREAD_MUTEX_INITIALIZER;
static int s_attached;                  //  under s_mutex
static int s_hup_attached;              //  of those, with hup
static struct sigaction s_old_int, s_old_term, s_old_hup;

static void
s_on_signal (int sig)
{
    atomic_fetch_add (&s_in_handler, 1);
    for (int i = 0; i < PL_STOP_MAX_RUNS; i++) {
        pl_stop_t *run = atomic_load (&s_runs[i]);
        if (!run)
            continue;
        if (sig != SIGHUP)
            run->stop = 1;
        else
        if (run->hup)
            run->reload = 1;
    }
    atomic_fetch_sub (&s_in_handler, 1);
}

static void
s_install (int sig, struct sigaction *old)
{
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    sigaction (sig, &sa, old);
}

int
pl_stop_attach (pl_stop_t *self, bool hup)
{
    self->stop = 0;
    self->reload = 0;
    self->hup = hup;
    pthread_mutex_lock (&s_mutex);
    int slot = -1;
    for (int i = 0; i < PL_STOP_MAX_RUNS && slot < 0; i++)
        if (!atomic_load (&s_runs[i]))
            slot = i;
    if (slot >= 0) {
        if (s_attached++ == 0) {
            s_install (SIGINT, &s_old_int);
            s_install (SIGTERM, &s_old_term);
        }
        if (hup && s_hup_attached++ == 0)
            s_install (SIGHUP, &s_old_hup);
        atomic_store (&s_runs[slot], self);
    }
    pthread_mutex_unlock (&s_mutex);
    return slot >= 0 ? 0 : -1;
}

void
pl_stop_detach (pl_stop_t *self)
{
    pthread_mutex_lock (&s_mutex);
    for (int i = 0; i < PL_STOP_MAX_RUNS; i++) {
        if (atomic_load (&s_runs[i]) != self)
            continue;
        atomic_store (&s_runs[i], NULL);
        if (self->hup && --s_hup_attached == 0)
            sigaction (SIGHUP, &s_old_hup, NULL);
        if (--s_attached == 0) {
            sigaction (SIGINT, &s_old_int, NULL);
            sigaction (SIGTERM, &s_old_term, NULL);
        }
        break;
    }
    pthread_mutex_unlock (&s_mutex);
    while (atomic_load (&s_in_handler))
        sched_yield ();
}
