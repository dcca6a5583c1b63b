/*  test_bufpool: the server's reused GRADIENTS buffers (srv_bufpool.h):
    reuse without new mappings, zeroed on every hand-out, the keep bound,
    and buffers that come back after the pool is destroyed (as libzmq
    frees queued messages after the server's teardown). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "srv_bufpool.h"

TestSuite (bufpool, .timeout = 60);

Test (bufpool, reuses_zeroed_aligned_buffers)
{
    srv_bufpool_t *pool = srv_bufpool_new (2);
    float *a = srv_bufpool_zeroed (pool, 627360);
    cr_assert_not_null (a);
    cr_assert_eq ((uintptr_t) a % 64, 0, "not 64-byte aligned");
    for (size_t i = 0; i < 627360 / sizeof (float); i++)
        a[i] = 1.0f;
    srv_bufpool_free (a);
    float *b = srv_bufpool_zeroed (pool, 627360);
    cr_assert_eq (b, a, "an idle buffer of the right size was not reused");
    for (size_t i = 0; i < 627360 / sizeof (float); i++)
        cr_assert_eq (b[i], 0.0f, "reused buffer not zeroed at %zu", i);
    //  A smaller request fits the same buffer; a bigger one maps anew.
    srv_bufpool_free (b);
    float *c = srv_bufpool_zeroed (pool, 1000);
    cr_assert_eq (c, a);
    float *d = srv_bufpool_zeroed (pool, 2508800);
    cr_assert_neq (d, a);
    long mapped;
    int idle;
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (mapped, 2);
    cr_assert_eq (idle, 0);
    srv_bufpool_free (c);
    srv_bufpool_free (d);
    srv_bufpool_free (NULL);
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (idle, 2);
    srv_bufpool_destroy (&pool);
    cr_assert_null (pool);
}

Test (bufpool, keeps_at_most_keep_idle)
{
    srv_bufpool_t *pool = srv_bufpool_new (2);
    float *b[5];
    for (int i = 0; i < 5; i++)
        b[i] = srv_bufpool_zeroed (pool, 4096);
    for (int i = 0; i < 5; i++)
        srv_bufpool_free (b[i]);
    long mapped;
    int idle;
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (mapped, 5);
    cr_assert_eq (idle, 2, "%d idle buffers kept, want the bound 2", idle);
    //  Taking 2 again maps nothing new.
    float *x = srv_bufpool_zeroed (pool, 4096), *y = srv_bufpool_zeroed (pool, 4096);
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (mapped, 5);
    srv_bufpool_free (x);
    srv_bufpool_free (y);
    srv_bufpool_destroy (&pool);
}

//  A full pool keeps the bigger buffers: after a re-plan to larger tensors
//  the old small ones must not crowd the new ones out.
Test (bufpool, full_pool_keeps_the_bigger_buffers)
{
    srv_bufpool_t *pool = srv_bufpool_new (2);
    float *s1 = srv_bufpool_zeroed (pool, 4096), *s2 = srv_bufpool_zeroed (pool, 4096);
    srv_bufpool_free (s1);
    srv_bufpool_free (s2);
    float *b1 = srv_bufpool_zeroed (pool, 1 << 20), *b2 = srv_bufpool_zeroed (pool, 1 << 20);
    srv_bufpool_free (b1);
    srv_bufpool_free (b2);
    long mapped;
    int idle;
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (mapped, 4);
    cr_assert_eq (idle, 2);
    //  Both big ones are idle now: taking two big buffers maps nothing.
    float *x = srv_bufpool_zeroed (pool, 1 << 20), *y = srv_bufpool_zeroed (pool, 1 << 20);
    srv_bufpool_counts (pool, &mapped, &idle);
    cr_assert_eq (mapped, 4, "the small buffers crowded out the big ones");
    srv_bufpool_free (x);
    srv_bufpool_free (y);
    srv_bufpool_destroy (&pool);
}

//  Buffers still out when the owner destroys the pool come back later,
//  from another thread (libzmq's I/O thread, in the server); the pool
//  lives until the last one is back, and that one frees it.
typedef struct {
    float **bufs;
    int from, to;
} s_give_t;

static void *
s_give_back (void *arg)
{
    const s_give_t *g = arg;
    for (int i = g->from; i < g->to; i++)
        srv_bufpool_free (g->bufs[i]);
    return NULL;
}

static void
s_give_back_in_thread (float **bufs, int from, int to)
{
    s_give_t g = { bufs, from, to };
    pthread_t t;
    cr_assert_eq (pthread_create (&t, NULL, s_give_back, &g), 0);
    pthread_join (t, NULL);
}

static void
s_pool_freed (void *arg)
{
    atomic_int *freed = arg;
    atomic_fetch_add (freed, 1);
}

Test (bufpool, buffers_outlive_the_pool)
{
    atomic_int freed = 0;
    srv_bufpool_t *pool = srv_bufpool_new (4);
    srv_bufpool_on_free (pool, s_pool_freed, &freed);
    float *bufs[3];
    for (int i = 0; i < 3; i++) {
        bufs[i] = srv_bufpool_zeroed (pool, 65536);
        bufs[i][0] = (float) i;
    }
    srv_bufpool_destroy (&pool);
    cr_assert_null (pool);
    cr_assert_eq (atomic_load (&freed), 0, "the pool was freed with 3 buffers out");
    s_give_back_in_thread (bufs, 0, 2);
    cr_assert_eq (atomic_load (&freed), 0, "the pool was freed with a buffer still out");
    s_give_back_in_thread (bufs, 2, 3);
    cr_assert_eq (atomic_load (&freed), 1, "the last buffer back did not free the pool");
}

Test (bufpool, an_idle_pool_is_freed_at_destroy)
{
    atomic_int freed = 0;
    srv_bufpool_t *pool = srv_bufpool_new (2);
    srv_bufpool_on_free (pool, s_pool_freed, &freed);
    srv_bufpool_free (srv_bufpool_zeroed (pool, 4096));     //  back before the end
    srv_bufpool_destroy (&pool);
    cr_assert_eq (atomic_load (&freed), 1);
}
