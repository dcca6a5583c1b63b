/*  pltest_device.c: a device scripted by a test (pltest_device.h). */
#include "pltest_device.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "nn_model.h"

proto_msg_t *
pltest_device_recv (pltest_device_t *self, const char *what)
{
    while (true) {
        zmq_pollitem_t item = { self->sock, 0, ZMQ_POLLIN, 0 };
        cr_assert_eq (zmq_poll (&item, 1, PLTEST_DEVICE_WAIT_MS), 1,
                      "%s: nothing from the server", what);
        proto_msg_t *msg = NULL;
        char err[512];
        cr_assert_eq (proto_msg_recv (&msg, self->sock, NULL, err, sizeof err), 0,
                      "%s: %s", what, err);
        if (proto_msg_type (msg) != PROTO_MSG_HEARTBEAT)
            return msg;
        proto_msg_destroy (&msg);
    }
}

void
pltest_device_join (pltest_device_t *self, const char *endpoint, int id, int rcvhwm)
{
    self->ctx = zmq_ctx_new ();
    self->sock = zmq_socket (self->ctx, ZMQ_DEALER);
    int linger = 0, sndtimeo = PLTEST_DEVICE_WAIT_MS;
    zmq_setsockopt (self->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (self->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
    if (rcvhwm > 0) {
        int rcvbuf = 4096;
        zmq_setsockopt (self->sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
        zmq_setsockopt (self->sock, ZMQ_RCVBUF, &rcvbuf, sizeof rcvbuf);
    }
    cr_assert_eq (zmq_connect (self->sock, endpoint), 0);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_HELLO);
    proto_hello_t hello = { .protocol_version = PROTO_VERSION,
                            .capabilities = PROTO_CAP_FL | PROTO_CAP_SPLIT,
                            .requested_device_id = id, .sample_count = 0 };
    snprintf (hello.name, sizeof hello.name, "scripted%d", id);
    cr_assert_eq (proto_msg_set_hello (msg, &hello), 0);
    cr_assert_eq (proto_msg_send (&msg, self->sock), 0);
    msg = pltest_device_recv (self, "WELCOME");
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_WELCOME, "got %s, want WELCOME",
                  proto_type_name (proto_msg_type (msg)));
    self->plan = *proto_msg_assign (msg);
    cr_assert_eq (self->plan.device_id, (uint32_t) id);
    proto_msg_destroy (&msg);
}

void
pltest_device_model (pltest_device_t *self)
{
    proto_msg_t *msg = pltest_device_recv (self, "MODEL");
    while (proto_msg_type (msg) == PROTO_MSG_PLAN) {
        self->plan = *proto_msg_assign (msg);
        proto_msg_destroy (&msg);
        msg = pltest_device_recv (self, "MODEL");
    }
    cr_assert_eq (proto_msg_type (msg), PROTO_MSG_MODEL, "got %s, want MODEL",
                  proto_type_name (proto_msg_type (msg)));
    self->slab = *proto_msg_slab (msg);
    free (self->w);
    self->w = malloc (sizeof (float) * self->slab.count);
    cr_assert_not_null (self->w);
    memcpy (self->w, proto_msg_tensor_data (msg), sizeof (float) * self->slab.count);
    self->epoch = proto_msg_header (msg)->epoch;
    self->iter = proto_msg_header (msg)->iteration;
    proto_msg_destroy (&msg);
}

void
pltest_device_activations (pltest_device_t *self, float value, uint32_t mb)
{
    nn_model_spec_t spec;
    char err[256];
    cr_assert_eq (nn_model_spec_by_name (&spec, "vgg5", 1, 28, 28, 10, err, sizeof err), 0);
    nn_shape_t s = nn_model_spec_unit_output (&spec, (int) self->plan.split_point - 1);
    uint32_t n = self->plan.batch_size / self->plan.micro_batches;
    cr_assert (n > 0 && n <= 256, "micro-batch of %u samples", n);
    uint32_t dims[4] = { n, (uint32_t) s.h, (uint32_t) s.w, (uint32_t) s.c };
    size_t count = (size_t) n * s.h * s.w * s.c;
    float *x = malloc (sizeof (float) * count);
    cr_assert_not_null (x);
    for (size_t i = 0; i < count; i++)
        x[i] = value;
    int32_t labels[256];
    for (uint32_t i = 0; i < n; i++)
        labels[i] = (int32_t) (i % 10);
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (msg, self->plan.device_id, self->epoch, self->iter, mb);
    proto_msg_set_last (msg, mb + 1 == self->plan.micro_batches);
    cr_assert_eq (proto_msg_set_tensor_copy (msg, x, dims, 4), 0);
    proto_msg_set_labels (msg, labels, n);
    free (x);
    cr_assert_eq (proto_msg_send (&msg, self->sock), 0, "send ACTIVATIONS: %s",
                  zmq_strerror (errno));
}

void
pltest_device_close (pltest_device_t *self)
{
    zmq_close (self->sock);
    zmq_ctx_term (self->ctx);
    free (self->w);
    self->w = NULL;
}
