/*  pltest_frames.h: for the proto tests: a message's wire frames as plain
    buffers, to damage bytes and check the decoder refuses them; and a
    pair of connected sockets in a context of their own, to send messages
    through. */
#ifndef PLTEST_FRAMES_H_INCLUDED
#define PLTEST_FRAMES_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "proto_msg.h"

typedef struct {
    uint8_t *data[PROTO_MAX_FRAMES];    //  malloc'd, one spare byte each
    size_t size[PROTO_MAX_FRAMES];
    int count;
} pltest_frames_t;

//  The frames m encodes to (m is destroyed); the test fails if it does not encode.
pltest_frames_t pltest_frames_of (proto_msg_t *m);
//  f must be refused with code and an error holding needle; frees f.
void pltest_frames_refused (pltest_frames_t *f, const proto_limits_t *limits, int code,
                            const char *needle);
void pltest_frames_free (pltest_frames_t *f);

//  How long a pair's socket waits to send or receive before it fails
//  (EAGAIN): a test that waits for a message that never comes fails.
#define PLTEST_PAIR_TIMEOUT_MS 3000

typedef struct {
    void *ctx;      //  the pair's own libzmq context
    void *a;        //  binds; receives in most tests
    void *b;        //  connects
} pltest_pair_t;

//  sock: linger 0, send and receive timeouts PLTEST_PAIR_TIMEOUT_MS.
void pltest_sock_opts (void *sock);
//  A new context with a (type_a, bound to endpoint) and b (type_b,
//  connected to it), both with pltest_sock_opts; b gets routing id `id`
//  when id is not NULL (for a ROUTER on a). The test fails if either
//  cannot be made. pltest_pair_close ends them.
void pltest_pair_open_id (pltest_pair_t *p, int type_a, int type_b, const char *endpoint,
                          const char *id);
//  The same with two PAIR sockets and no routing id.
void pltest_pair_open (pltest_pair_t *p, const char *endpoint);
//  Closes both sockets and terminates the context.
void pltest_pair_close (pltest_pair_t *p);

#endif
