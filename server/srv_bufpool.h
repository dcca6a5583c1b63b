/*  srv_bufpool.h: reused buffers for the tensors the server sends.

    A worker's step ends with the input gradient (the GRADIENTS tensor),
    which it hands to libzmq without a copy; libzmq's I/O thread frees it
    once the bytes are on the socket. Allocated from glibc, those buffers
    either come fresh from the kernel every time (above the mmap
    threshold: every page faults, most of the loopback overhead once) or
    share glibc's heaps with libzmq's receive buffers, whose sizes differ
    by a few bytes, and the heap fragments (docs/architecture.md,
    "Measurements"). The pool keeps them apart: each buffer is its own
    mapping, reused while the pool holds it, unmapped when the pool is
    full or gone.

    Thread safety: srv_bufpool_zeroed from any thread, srv_bufpool_free
    from any thread (libzmq's I/O thread calls it). srv_bufpool_destroy
    may run while buffers are still out (in libzmq's queues): each one
    unmaps itself when freed, and the last one frees the pool.
*/
#ifndef SRV_BUFPOOL_H_INCLUDED
#define SRV_BUFPOOL_H_INCLUDED

#include <stddef.h>

typedef struct srv_bufpool_t srv_bufpool_t;

//  A pool that keeps up to `keep` idle buffers (>= 1).
srv_bufpool_t *srv_bufpool_new (int keep);

//  Close the pool: idle buffers are unmapped at once, buffers still out
//  when they come back. *self_p becomes NULL.
void srv_bufpool_destroy (srv_bufpool_t **self_p);

//  A zeroed buffer of at least `bytes` bytes, 64-byte aligned; NULL if
//  the system has no memory for it. Give it back with srv_bufpool_free
//  (or hand it to a message with srv_bufpool_free as its free function).
float *srv_bufpool_zeroed (srv_bufpool_t *self, size_t bytes);

//  Give a buffer back to its pool (any thread). NULL is ignored.
void srv_bufpool_free (void *data);

//  fn (arg) runs when the pool itself is freed: at srv_bufpool_destroy
//  when no buffer is out, else when the last one comes back (on that
//  thread). For tests and for owners that must know the pool is gone.
void srv_bufpool_on_free (srv_bufpool_t *self, void (*fn) (void *arg), void *arg);

//  Buffers mapped so far and buffers idle in the pool (for tests).
void srv_bufpool_counts (srv_bufpool_t *self, long *mapped, int *idle);

#endif
