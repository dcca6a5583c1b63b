/*  srv_abuse.h: rate limiting of peers that are not devices of the run.

    Peers that keep earning ERRORs (garbage, refused HELLOs, messages
    before HELLO) are ignored for a while, by IP address: no reply, no log
    line, so a flood costs the server a receive and a decode per message
    and nothing more. Joined devices are exempt (the caller does not ask).
*/
#ifndef SRV_ABUSE_H_INCLUDED
#define SRV_ABUSE_H_INCLUDED

#include <stdbool.h>

#define SRV_ABUSE_SLOTS    64
#define SRV_ABUSE_LIMIT    32          //  ERRORs per window before a block
#define SRV_ABUSE_WINDOW_S 10.0
#define SRV_ABUSE_BLOCK_S  30.0

typedef struct _srv_abuse_t srv_abuse_t;

srv_abuse_t *srv_abuse_new (void);
void srv_abuse_destroy (srv_abuse_t **self_p);
//  Is peer (an address; "" for inproc) blocked at time now (seconds)?
bool srv_abuse_blocked (srv_abuse_t *self, const char *peer, double now);
//  peer earned an ERROR at time now. true when this blocks it (the caller
//  logs that once).
bool srv_abuse_note (srv_abuse_t *self, const char *peer, double now);

#endif
