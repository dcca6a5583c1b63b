/*  srv_abuse.c: per-address error counts and blocks. See srv_abuse.h. */
#include "srv_abuse.h"

#include <stdio.h>
#include <string.h>

#include "nn_alloc.h"

typedef struct {
    char addr[64];              //  "" = free slot
    double window_start;
    int count;
    double blocked_until;
} s_entry_t;

struct _srv_abuse_t {
    s_entry_t entry[SRV_ABUSE_SLOTS];
};

srv_abuse_t *
srv_abuse_new (void)
{
    return nn_calloc (1, sizeof (srv_abuse_t));
}

void
srv_abuse_destroy (srv_abuse_t **self_p)
{
    nn_free (*self_p);
    *self_p = NULL;
}

//  peer's entry; with create, the oldest one is taken for a new peer.
static s_entry_t *
s_entry (srv_abuse_t *self, const char *peer, bool create)
{
    s_entry_t *oldest = &self->entry[0];
    for (int i = 0; i < SRV_ABUSE_SLOTS; i++) {
        s_entry_t *a = &self->entry[i];
        if (a->addr[0] && strcmp (a->addr, peer) == 0)
            return a;
        if (a->window_start < oldest->window_start)
            oldest = a;
    }
    if (!create)
        return NULL;
    memset (oldest, 0, sizeof *oldest);
    snprintf (oldest->addr, sizeof oldest->addr, "%s", peer);
    return oldest;
}

bool
srv_abuse_blocked (srv_abuse_t *self, const char *peer, double now)
{
    if (!peer[0])
        return false;
    const s_entry_t *a = s_entry (self, peer, false);
    return a && now < a->blocked_until;
}

bool
srv_abuse_note (srv_abuse_t *self, const char *peer, double now)
{
    if (!peer[0])
        return false;                   //  inproc: no address to hold against
    s_entry_t *a = s_entry (self, peer, true);
    if (now - a->window_start > SRV_ABUSE_WINDOW_S) {
        a->window_start = now;
        a->count = 0;
    }
    if (++a->count > SRV_ABUSE_LIMIT && now >= a->blocked_until) {
        a->blocked_until = now + SRV_ABUSE_BLOCK_S;
        return true;
    }
    return false;
}
