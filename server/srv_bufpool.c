/*  srv_bufpool.c: reused buffers for the tensors the server sends
    (srv_bufpool.h). */
#include "srv_bufpool.h"

#include "nn_alloc.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

//  Each buffer is one mapping: this header, then the data at offset
//  S_HEADER (64-byte aligned, as the kernels like).
#define S_HEADER 64

typedef struct {
    srv_bufpool_t *pool;
    size_t map_bytes;               //  the whole mapping
} s_header_t;

struct srv_bufpool_t {
    pthread_mutex_t lock;
    int keep;                       //  idle buffers kept at most
    int idle_count;
    s_header_t **idle;              //  [keep]
    long out;                       //  buffers handed out, not yet back
    long mapped;                    //  mappings made (for tests)
    bool closed;                    //  destroyed by its owner
    void (*on_free) (void *arg);    //  srv_bufpool_on_free, or NULL
    void *on_free_arg;
};

static size_t
s_capacity (const s_header_t *h)
{
    return h->map_bytes - S_HEADER;
}

srv_bufpool_t *
srv_bufpool_new (int keep)
{
    assert (keep >= 1);
    srv_bufpool_t *self = nn_calloc (1, sizeof *self);
    pthread_mutex_init (&self->lock, NULL);
    self->keep = keep;
    self->idle = nn_calloc ((size_t) keep, sizeof *self->idle);
    return self;
}

static void
s_free_pool (srv_bufpool_t *self)
{
    if (self->on_free)
        self->on_free (self->on_free_arg);
    pthread_mutex_destroy (&self->lock);
    nn_free (self->idle);
    nn_free (self);
}

void
srv_bufpool_destroy (srv_bufpool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    srv_bufpool_t *self = *self_p;
    *self_p = NULL;
    pthread_mutex_lock (&self->lock);
    self->closed = true;
    for (int i = 0; i < self->idle_count; i++)
        munmap (self->idle[i], self->idle[i]->map_bytes);
    self->idle_count = 0;
    bool last = self->out == 0;
    pthread_mutex_unlock (&self->lock);
    if (last)
        s_free_pool (self);
}

float *
srv_bufpool_zeroed (srv_bufpool_t *self, size_t bytes)
{
    assert (self);
    s_header_t *h = NULL;
    pthread_mutex_lock (&self->lock);
    for (int i = 0; i < self->idle_count; i++)
        if (s_capacity (self->idle[i]) >= bytes) {
            h = self->idle[i];
            self->idle[i] = self->idle[--self->idle_count];
            break;
        }
    self->out++;
    pthread_mutex_unlock (&self->lock);
    if (!h) {
        size_t page = (size_t) sysconf (_SC_PAGESIZE);
        size_t map_bytes = (S_HEADER + bytes + page - 1) / page * page;
        void *p = mmap (NULL, map_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            pthread_mutex_lock (&self->lock);
            self->out--;
            pthread_mutex_unlock (&self->lock);
            return NULL;
        }
        h = p;
        h->pool = self;
        h->map_bytes = map_bytes;
        pthread_mutex_lock (&self->lock);
        self->mapped++;
        pthread_mutex_unlock (&self->lock);
        return (float *) ((char *) h + S_HEADER);   //  fresh pages are zero
    }
    float *data = (float *) ((char *) h + S_HEADER);
    memset (data, 0, bytes);
    return data;
}

void
srv_bufpool_free (void *data)
{
    if (!data)
        return;
    s_header_t *h = (s_header_t *) ((char *) data - S_HEADER);
    srv_bufpool_t *self = h->pool;
    s_header_t *drop = h;               //  what gets unmapped, if anything
    pthread_mutex_lock (&self->lock);
    self->out--;
    if (!self->closed && self->idle_count < self->keep) {
        self->idle[self->idle_count++] = h;
        drop = NULL;
    }
    else
    if (!self->closed) {
        //  Full: keep the bigger buffers (after a re-plan to a split with
        //  larger tensors the old ones would otherwise fill the pool and
        //  every new one would be mapped afresh).
        int smallest = 0;
        for (int i = 1; i < self->idle_count; i++)
            if (self->idle[i]->map_bytes < self->idle[smallest]->map_bytes)
                smallest = i;
        if (self->idle[smallest]->map_bytes < h->map_bytes) {
            drop = self->idle[smallest];
            self->idle[smallest] = h;
        }
    }
    bool last = self->closed && self->out == 0;
    pthread_mutex_unlock (&self->lock);
    if (drop)
        munmap (drop, drop->map_bytes);
    if (last)
        s_free_pool (self);
}

void
srv_bufpool_on_free (srv_bufpool_t *self, void (*fn) (void *arg), void *arg)
{
    pthread_mutex_lock (&self->lock);
    self->on_free = fn;
    self->on_free_arg = arg;
    pthread_mutex_unlock (&self->lock);
}

void
srv_bufpool_counts (srv_bufpool_t *self, long *mapped, int *idle)
{
    pthread_mutex_lock (&self->lock);
    *mapped = self->mapped;
    *idle = self->idle_count;
    pthread_mutex_unlock (&self->lock);
}
