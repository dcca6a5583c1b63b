/*  proto_chunk.c: frames of PROTO_CHUNK_BYTES or more cross the wire as a
    run of chunks (PROTOCOL.md, "Chunks").

    Why: libzmq's ZMTP heartbeat (ZMQ_HEARTBEAT_TIMEOUT) starts its timer
    when it sends a PING and cancels it only when a whole ZMTP frame has
    been decoded (stream_engine_base_t::decode_and_push, libzmq 4.3);
    bytes of a frame still arriving do not count. One 45 MB slab frame on
    a 10 Mbit/s uplink takes 36 s, and the receiver closed the connection
    after heartbeat_timeout_s (30 s) in the middle of it. In chunks a
    frame ends every PROTO_CHUNK_BYTES (0.2 s at 10 Mbit/s), so the
    heartbeat keeps meaning "the peer is alive" during a transfer and
    still catches a dead peer within its timeout.

    The rule: a frame of size s goes as floor (s / C) chunks of exactly
    C = PROTO_CHUNK_BYTES bytes and a last chunk of s mod C bytes (possibly
    empty), C or more bytes being what says "a run continues". A frame
    smaller than C goes as it is, so small messages do not change on the
    wire.
*/
#include "proto_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn_alloc.h"

//  The chunks of one frame share its buffer: the frame moves into a box
//  that the last chunk libzmq releases (from its I/O thread) closes.
typedef struct {
    zmq_msg_t whole;
    atomic_size_t refs;
} s_shared_t;

static void
s_release (void *data, void *hint)
{
    (void) data;
    s_shared_t *box = (s_shared_t *) hint;
    if (atomic_fetch_sub (&box->refs, 1) == 1) {
        zmq_msg_close (&box->whole);
        nn_free (box);
    }
}

int
proto_chunk_send (void *socket, zmq_msg_t *frame, bool more)
{
    assert (socket && frame);
    const size_t size = zmq_msg_size (frame);
    if (size < PROTO_CHUNK_BYTES)
        return zmq_msg_send (frame, socket, more ? ZMQ_SNDMORE : 0) == -1 ? -1 : 0;
    //  No copy: each chunk points into the frame's buffer (an owned tensor
    //  stays zero-copy to the socket). The last chunk is size % C bytes,
    //  empty when C divides size; it needs no buffer.
    const size_t full = size / PROTO_CHUNK_BYTES;
    const size_t tail = size % PROTO_CHUNK_BYTES;
    s_shared_t *box = nn_malloc (sizeof *box);
    zmq_msg_init (&box->whole);
    zmq_msg_move (&box->whole, frame);
    atomic_init (&box->refs, full + (tail ? 1 : 0));
    uint8_t *b = (uint8_t *) zmq_msg_data (&box->whole);
    //  Every chunk is handed to libzmq or released here, so the box goes
    //  with the last reference whatever fails.
    int rc = 0, saved = 0;
    for (size_t i = 0; i <= full; i++) {
        const size_t len = i < full ? PROTO_CHUNK_BYTES : tail;
        const bool last = i == full;
        zmq_msg_t chunk;
        if (len == 0)
            zmq_msg_init (&chunk);
        else
        if (zmq_msg_init_data (&chunk, b + i * PROTO_CHUNK_BYTES, len, s_release, box)) {
            fprintf (stderr, "pipelearn: out of memory for a chunk of a %zu-byte frame\n",
                     size);
            abort ();
        }
        if (rc == 0 && zmq_msg_send (&chunk, socket, last && !more ? 0 : ZMQ_SNDMORE) == -1) {
            rc = -1;
            saved = errno;
        }
        if (rc)
            zmq_msg_close (&chunk);
    }
    errno = saved;
    return rc;
}

static void
s_free_run (void *data, void *hint)
{
    (void) hint;
    nn_free (data);
}

int
proto_chunks_take (proto_chunks_t *self, zmq_msg_t *part, int index, bool keep,
                   zmq_msg_t *out, char *err, size_t err_size)
{
    assert (self && part && out);
    const size_t size = zmq_msg_size (part);
    if (size > PROTO_CHUNK_BYTES) {
        zmq_msg_close (part);
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "message: frame %d has a wire frame of %zu bytes, over the "
                           "%zu-byte chunk size", index, size, (size_t) PROTO_CHUNK_BYTES);
    }
    if (!self->open && size < PROTO_CHUNK_BYTES) {
        zmq_msg_init (out);
        zmq_msg_move (out, part);
        zmq_msg_close (part);
        return 1;
    }
    //  A run: checked against the frame limit before it is kept, so a peer
    //  cannot make this side buffer more than one frame may hold.
    self->open = true;
    if (size > self->limit || self->size > self->limit - size) {
        zmq_msg_close (part);
        return proto_fail (err, err_size, PROTO_E_SIZE,
                           "message: frame %d, sent in chunks, grows past the limit of "
                           "%zu bytes", index, self->limit);
    }
    if (keep && size) {
        if (self->size + size > self->cap) {
            size_t cap = self->cap ? self->cap : 4 * (size_t) PROTO_CHUNK_BYTES;
            while (cap < self->size + size)
                cap = cap > self->limit / 2 ? self->limit : 2 * cap;
            self->buf = nn_realloc (self->buf, cap);
            self->cap = cap;
        }
        memcpy (self->buf + self->size, zmq_msg_data (part), size);
    }
    self->size += size;
    zmq_msg_close (part);
    if (size == PROTO_CHUNK_BYTES)
        return 0;
    //  The run's last chunk: the frame is whole. It keeps the buffer.
    //  A run holds at least one whole chunk, so a kept one has a buffer.
    if (keep) {
        if (zmq_msg_init_data (out, self->buf, self->size, s_free_run, NULL) != 0) {
            fprintf (stderr, "pipelearn: out of memory wrapping a %zu-byte frame\n",
                     self->size);
            abort ();
        }
        self->buf = NULL;
        self->cap = 0;
    }
    else
        zmq_msg_init (out);
    self->size = 0;
    self->open = false;
    return 1;
}

void
proto_chunks_reset (proto_chunks_t *self)
{
    assert (self);
    nn_free (self->buf);
    self->buf = NULL;
    self->size = self->cap = 0;
    self->open = false;
}
