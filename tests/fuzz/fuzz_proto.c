/*  fuzz_proto.c: libFuzzer harness for every decoder in proto/.

    Input: [path][profile][custom limits?][u16 length + bytes]... (see
    fuzz_common.h). The path byte picks the entry point -- the frame and
    byte decoders, a ROUTER or a DEALER socket fed over inproc (the code the
    daemons call), or the header and tensor-descriptor decoders alone -- and
    the profile byte the limits a daemon would pass.

    Beyond "no crash, no leak, no UB" the harness checks proto's contracts:
    a failure is a malformed-input code with a message; a decoded message
    passes proto_msg_check, re-encodes to exactly the frames that arrived
    (the encoding is canonical), and those decode again.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "fuzz_common.h"
#include "proto_msg.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define S_ERR_SIZE 512

//  One ROUTER and one DEALER over inproc, made on first use and kept for
//  the life of the process.
static void *s_ctx, *s_router, *s_dealer;
static const char s_dealer_id[] = "fuzz-device";

static void
s_sockets (void)
{
    if (s_ctx)
        return;
    s_ctx = zmq_ctx_new ();
    s_router = zmq_socket (s_ctx, ZMQ_ROUTER);
    s_dealer = zmq_socket (s_ctx, ZMQ_DEALER);
    if (!s_ctx || !s_router || !s_dealer)
        fuzz_die ("zmq: %s", zmq_strerror (zmq_errno ()));
    int one = 1, timeout = 5000;
    zmq_setsockopt (s_router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt (s_dealer, ZMQ_ROUTING_ID, s_dealer_id, strlen (s_dealer_id));
    zmq_setsockopt (s_router, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (s_dealer, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (s_router, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (s_dealer, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    if (zmq_bind (s_router, "inproc://pl-fuzz") || zmq_connect (s_dealer, "inproc://pl-fuzz"))
        fuzz_die ("zmq: %s", zmq_strerror (zmq_errno ()));
}

//  free function for frames that own a malloc'd block starting `offset`
//  bytes before their data.
static void
s_free_shifted (void *data, void *hint)
{
    free ((uint8_t *) data - (uintptr_t) hint);
}

//  A frame holding a copy of bytes in its own block, ending exactly at the
//  block's end so ASan sees any read past it; odd puts it at an odd address.
static void
s_frame_init (zmq_msg_t *frame, const uint8_t *bytes, size_t size, bool odd)
{
    size_t shift = odd ? 1 : 0;
    uint8_t *block = malloc (size + shift ? size + shift : 1);
    if (!block)
        fuzz_die ("out of memory");
    if (size)
        memcpy (block + shift, bytes, size);
    if (zmq_msg_init_data (frame, block + shift, size, s_free_shifted,
                           (void *) (uintptr_t) shift))
        fuzz_die ("zmq_msg_init_data: %s", zmq_strerror (zmq_errno ()));
}

static void
s_send_frames (void *socket, const uint8_t **frames, const size_t *sizes, int count,
               bool routed)
{
    if (routed && zmq_send (socket, s_dealer_id, strlen (s_dealer_id), ZMQ_SNDMORE) == -1)
        fuzz_die ("send routing id: %s", zmq_strerror (zmq_errno ()));
    for (int i = 0; i < count; i++)
        if (zmq_send (socket, frames[i], sizes[i], i + 1 < count ? ZMQ_SNDMORE : 0) == -1)
            fuzz_die ("send frame %d: %s", i, zmq_strerror (zmq_errno ()));
}

//  A failed decode: the code says "malformed" and the message is there.
static void
s_check_failure (int rc, const char *err, const char *what)
{
    if (!proto_code_is_malformed (rc))
        fuzz_die ("%s returned %d, not a malformed-input code", what, rc);
    if (!memchr (err, 0, S_ERR_SIZE) || err[0] == 0)
        fuzz_die ("%s returned %d without a message", what, rc);
}

//  Read every payload byte the accessors hand out, so ASan checks their
//  extents, and walk the state machine.
static void
s_touch (const proto_msg_t *msg)
{
    volatile float fsink = 0;
    volatile unsigned isink = 0;     //  unsigned: sums may wrap
    const int type = proto_msg_type (msg);
    const float *f = proto_msg_tensor_data (msg);
    size_t n = proto_msg_tensor_count (msg);
    for (size_t i = 0; f && i < n; i++)
        fsink += f[i];
    if (type == PROTO_MSG_ACTIVATIONS || (type == PROTO_MSG_EVAL
                                          && !proto_msg_is_eval_result (msg))) {
        const int32_t *labels = proto_msg_labels (msg);
        size_t count = proto_msg_labels_count (msg);
        if (count != proto_msg_tensor (msg)->dims[0])
            fuzz_die ("%zu labels for batch %u", count, proto_msg_tensor (msg)->dims[0]);
        for (size_t i = 0; i < count; i++)
            isink += (unsigned) labels[i];
    }
    if (type == PROTO_MSG_WELCOME) {
        size_t len;
        const char *config = proto_msg_config (msg, &len);
        if (strlen (config) != len)
            fuzz_die ("WELCOME config of %zu bytes has strlen %zu", len, strlen (config));
    }
    if (type == PROTO_MSG_EVENTS) {
        size_t count;
        const proto_event_t *e = proto_msg_events (msg, &count);
        for (size_t i = 0; i < count; i++)
            isink += e[i].stage;
    }
    if (type == PROTO_MSG_ERROR)
        isink += (unsigned) strlen (proto_msg_error_text (msg));
    for (int mode = PL_MODE_FL; mode <= PL_MODE_PIPELEARN; mode++)
        for (int state = PROTO_STATE_CONNECTING; state <= PROTO_STATE_CLOSED; state++)
            for (int dir = PROTO_UP; dir <= PROTO_DOWN; dir++)
                if (proto_msg_allowed ((pl_mode_t) mode, (proto_state_t) state, msg,
                                       (proto_dir_t) dir))
                    isink += (unsigned) proto_state_next ((proto_state_t) state, type,
                                                     (proto_dir_t) dir);
    (void) fsink;
    (void) isink;
}

//  A decoded message re-encodes to the very frames it came from, and they
//  decode again under the same limits.
static void
s_check_success (proto_msg_t *msg, const uint8_t **frames, const size_t *sizes, int count,
                 const proto_limits_t *limits)
{
    char err[S_ERR_SIZE] = "";
    s_touch (msg);
    int rc = proto_msg_check (msg, err, sizeof err);
    if (rc)
        fuzz_die ("decoded %s fails proto_msg_check: %d %s",
                  proto_type_name (proto_msg_type (msg)), rc, err);
    zmq_msg_t out[PROTO_MAX_FRAMES];
    int n = proto_msg_encode (msg, out, err, sizeof err);
    if (n != count)
        fuzz_die ("decoded %s of %d frames re-encodes to %d (%s)",
                  proto_type_name (proto_msg_type (msg)), count, n, err);
    for (int i = 0; i < n; i++)
        if (zmq_msg_size (&out[i]) != sizes[i]
            || (sizes[i] && memcmp (zmq_msg_data (&out[i]), frames[i], sizes[i])))
            fuzz_die ("%s frame %d re-encodes differently (%zu bytes in, %zu out)",
                      proto_type_name (proto_msg_type (msg)), i, sizes[i],
                      zmq_msg_size (&out[i]));
    //  Limits only ever restrict: what passed them passes the defaults too.
    //  Decoding moves the data frame out, so each pass decodes a fresh
    //  encoding.
    for (int pass = 0; pass < 2; pass++) {
        if (pass && proto_msg_encode (msg, out, err, sizeof err) != n)
            fuzz_die ("second encoding of %s failed: %s",
                      proto_type_name (proto_msg_type (msg)), err);
        proto_msg_t *again = NULL;
        rc = proto_msg_decode_frames (&again, out, n, pass ? NULL : limits, err, sizeof err);
        if (rc || !again)
            fuzz_die ("re-encoded %s does not decode%s: %d %s",
                      proto_type_name (proto_msg_type (msg)),
                      pass ? " with default limits" : "", rc, err);
        proto_msg_destroy (&again);
        for (int i = 0; i < n; i++)
            zmq_msg_close (&out[i]);
    }
    //  proto_limits_frame_bytes is what a daemon sets ZMQ_MAXMSGSIZE to:
    //  no frame of a message valid under the limits may be larger, or
    //  libzmq would drop an honest peer.
    const int type = proto_msg_type (msg);
    const bool tensor = type == PROTO_MSG_ACTIVATIONS || type == PROTO_MSG_GRADIENTS
                     || (type == PROTO_MSG_EVAL && !proto_msg_is_eval_result (msg));
    const size_t cap = proto_limits_frame_bytes (limits, tensor);
    for (int i = 0; i < count; i++)
        if (sizes[i] > cap)
            fuzz_die ("valid %s has a %zu-byte frame %d, but proto_limits_frame_bytes "
                      "(tensors %s) allows %zu", proto_type_name (type), sizes[i], i,
                      tensor ? "true" : "false", cap);
}

static void
s_pieces (const uint8_t **frames, const size_t *sizes, int count)
{
    char err[S_ERR_SIZE] = "";
    if (count < 1)
        return;
    proto_header_t h;
    int rc = proto_header_decode (&h, frames[0], sizes[0], err, sizeof err);
    if (rc)
        s_check_failure (rc, err, "proto_header_decode");
    else {
        uint8_t again[PROTO_HEADER_SIZE];
        proto_header_encode (again, &h);
        if (memcmp (again, frames[0], PROTO_HEADER_SIZE))
            fuzz_die ("header re-encodes differently");
    }
    if (count < 2)
        return;
    proto_tensor_desc_t d;
    uint64_t elements = 0;
    err[0] = 0;
    rc = proto_tensor_desc_decode (&d, &elements, frames[1], sizes[1], err, sizeof err);
    if (rc)
        s_check_failure (rc, err, "proto_tensor_desc_decode");
    else {
        uint8_t again[4 + 4 * PROTO_MAX_RANK];
        size_t n = proto_tensor_desc_encode (again, &d);
        if (n != sizes[1] || memcmp (again, frames[1], n))
            fuzz_die ("tensor descriptor re-encodes differently");
        if (elements == 0 || elements > SIZE_MAX / 4)
            fuzz_die ("descriptor accepted with %llu elements", (unsigned long long) elements);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const int path = data[0] % FUZZ_PATHS;
    const int profile = data[1] % FUZZ_PROFILES;
    size_t at = 2;
    const uint8_t *custom = NULL;
    if (profile == FUZZ_PROFILE_CUSTOM) {
        if (size - at < FUZZ_CUSTOM_SIZE)
            return 0;
        custom = data + at;
        at += FUZZ_CUSTOM_SIZE;
    }
    fuzz_limits_t holder;
    const proto_limits_t *limits = fuzz_limits (&holder, profile, custom);
    const uint8_t *frames[FUZZ_MAX_FRAMES];
    size_t sizes[FUZZ_MAX_FRAMES];
    const int count = fuzz_split_frames (data + at, size - at, frames, sizes);

    char err[S_ERR_SIZE] = "";
    proto_msg_t *msg = NULL;
    int rc;
    const char *what;
    switch (path) {
        case FUZZ_PATH_FRAMES:
        case FUZZ_PATH_FRAMES_ODD: {
            zmq_msg_t zf[FUZZ_MAX_FRAMES];
            for (int i = 0; i < count; i++)
                s_frame_init (&zf[i], frames[i], sizes[i], path == FUZZ_PATH_FRAMES_ODD);
            what = "proto_msg_decode_frames";
            rc = proto_msg_decode_frames (&msg, zf, count, limits, err, sizeof err);
            for (int i = 0; i < count; i++)
                zmq_msg_close (&zf[i]);
            break;
        }
        case FUZZ_PATH_BYTES: {
            const void *ptrs[FUZZ_MAX_FRAMES];
            for (int i = 0; i < count; i++)
                ptrs[i] = frames[i];
            what = "proto_msg_decode_bytes";
            rc = proto_msg_decode_bytes (&msg, ptrs, sizes, count, limits, err, sizeof err);
            break;
        }
        case FUZZ_PATH_SERVER: {
            if (count < 1)      //  ZeroMQ has no message of zero frames
                return 0;
            s_sockets ();
            s_send_frames (s_dealer, frames, sizes, count, false);
            uint8_t rid[PROTO_ROUTING_ID_MAX];
            size_t rid_len = 0;
            what = "proto_msg_recv_from";
            rc = proto_msg_recv_from (&msg, s_router, rid, &rid_len, limits, err, sizeof err);
            if (rid_len != strlen (s_dealer_id) || memcmp (rid, s_dealer_id, rid_len))
                fuzz_die ("routing id of %zu bytes, not the dealer's", rid_len);
            break;
        }
        case FUZZ_PATH_CLIENT: {
            if (count < 1)
                return 0;
            s_sockets ();
            s_send_frames (s_router, frames, sizes, count, true);
            what = "proto_msg_recv";
            rc = proto_msg_recv (&msg, s_dealer, limits, err, sizeof err);
            break;
        }
        default:
            s_pieces (frames, sizes, count);
            return 0;
    }
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_proto: path %d profile %d, %d frame(s): %s: %s\n", path,
                 profile, count, what, rc ? err : proto_type_name (proto_msg_type (msg)));
    if (rc == 0) {
        if (!msg)
            fuzz_die ("%s returned 0 without a message", what);
        s_check_success (msg, frames, sizes, count, limits);
        proto_msg_destroy (&msg);
    }
    else {
        if (msg)
            fuzz_die ("%s returned %d and a message", what, rc);
        s_check_failure (rc, err, what);
    }
    return 0;
}
