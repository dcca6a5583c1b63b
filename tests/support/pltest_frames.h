/*  pltest_frames.h: a message's wire frames as plain buffers, for the
    proto tests that damage bytes and check the decoder refuses them. */
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

#endif
