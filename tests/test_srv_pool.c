/*  test_srv_pool: the server's replicas and compute workers (srv_pool.h,
    srv_worker.h) driven as the reactor drives them, without sockets to
    devices. What is checked is order, never time: a mini-batch's last
    GRADIENTS reach the reactor before the worker steps SGD on the replica,
    the replica stays lent (no other ACTIVATIONS, no PARAMS refusal, no
    aggregation) until the worker says the step ended, and the step is the
    one a plain SGD step on the accumulated gradients gives. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "nn_rng.h"
#include "pl_clock.h"
#include "pl_timeline.h"
#include "proto_msg.h"
#include "proto_tensor.h"
#include "pltest.h"
#include "srv_bufpool.h"
#include "srv_pool.h"

TestSuite (srv_pool, .timeout = 60);

enum { SPLIT = 2, MICRO = 5, BATCH = 10, SEED = 7 };

typedef struct {
    nn_model_spec_t spec;
    srv_bufpool_t *bufpool;
    srv_pool_t *pool;
    zpoller_t *poller;
    nn_shape_t in;              //  the replica's input (unit SPLIT's)
    float *x[3];                //  micro-batches' activations (MICRO, in)
    int y[3][MICRO];
} s_fix_t;

static void
s_setup (s_fix_t *f, int workers)
{
    char err[256];
    memset (f, 0, sizeof *f);
    cr_assert_eq (nn_model_spec_by_name (&f->spec, "vgg5-nobn", 1, 28, 28, 10, err,
                                         sizeof err), 0, "%s", err);
    f->bufpool = srv_bufpool_new (4);
    int splits[1] = { SPLIT };
    srv_pool_args_t a = {
        .spec = &f->spec, .splits = splits, .replicas = 1, .workers = workers,
        .max_batch = MICRO, .batch_size = BATCH, .seed = SEED,
        .sgd = { .learning_rate = 0.1f, .momentum = 0.9f },
        .origin = pl_wall_clock (), .bufpool = f->bufpool
    };
    f->pool = srv_pool_new (&a, err, sizeof err);
    cr_assert_not_null (f->pool, "%s", err);
    f->poller = zpoller_new (NULL);
    srv_pool_attach (f->pool, f->poller);
    f->in = nn_model_input_shape (srv_pool_model (f->pool, 0));
    nn_rng_t rng;
    nn_rng_seed (&rng, 99);
    size_t count = (size_t) MICRO * nn_shape_size (f->in);
    for (int m = 0; m < 3; m++) {
        f->x[m] = nn_alloc_aligned (sizeof (float) * count);
        for (size_t i = 0; i < count; i++)
            f->x[m][i] = (float) nn_rng_uniform (&rng) - 0.5f;
        for (int i = 0; i < MICRO; i++)
            f->y[m][i] = (m * MICRO + i) % 10;
    }
}

static void
s_teardown (s_fix_t *f)
{
    srv_pool_destroy (&f->pool);        //  removes its workers from the poller
    zpoller_destroy (&f->poller);
    srv_bufpool_destroy (&f->bufpool);
    for (int m = 0; m < 3; m++)
        nn_free (f->x[m]);
}

//  ACTIVATIONS of micro-batch m (data x[k]) of iteration it, device 0.
static proto_msg_t *
s_act (s_fix_t *f, int k, uint32_t it, uint32_t m, bool last)
{
    proto_msg_t *msg = proto_msg_new (PROTO_MSG_ACTIVATIONS);
    proto_msg_set_route (msg, 0, 0, it, m);
    proto_msg_set_last (msg, last);
    uint32_t dims[4] = { MICRO, (uint32_t) f->in.h, (uint32_t) f->in.w, (uint32_t) f->in.c };
    cr_assert_eq (proto_msg_set_tensor_copy (msg, f->x[k], dims, 4), 0);
    int32_t labels[MICRO];
    for (int i = 0; i < MICRO; i++)
        labels[i] = f->y[k][i];
    proto_msg_set_labels (msg, labels, MICRO);
    return msg;
}

//  The next worker reply: srv_pool_recv's return code, *grad_p its GRADIENTS.
static int
s_reply (s_fix_t *f, proto_msg_t **grad_p)
{
    void *which = zpoller_wait (f->poller, 20000);
    cr_assert_not_null (which, "no worker reply within 20 s");
    return srv_pool_recv (f->pool, which, grad_p);
}

//  What a worker computes for micro-batch k on model ref: the input
//  gradient into dx, the weight gradients accumulated in ref.
static void
s_reference_step (s_fix_t *f, nn_model_t *ref, int k, float *dx)
{
    nn_rng_t rng;
    nn_rng_seed (&rng, 1);
    const float *out = nn_model_forward (ref, f->x[k], MICRO, true, &rng);
    float dlogits[MICRO * 10];
    nn_softmax_xent (dlogits, out, f->y[k], MICRO, 10, (float) MICRO / (float) BATCH, NULL);
    memset (dx, 0, sizeof (float) * MICRO * nn_shape_size (f->in));
    nn_model_backward (ref, dlogits, dx);
}

Test (srv_pool, last_gradients_leave_before_the_step)
{
    s_fix_t f;
    s_setup (&f, 1);
    char err[256];
    nn_model_t *ref = nn_model_new (&f.spec, SPLIT, f.spec.units_count, MICRO, err,
                                    sizeof err);
    cr_assert_not_null (ref, "%s", err);
    nn_rng_t seeded;
    nn_rng_seed (&seeded, SEED);
    nn_model_init (ref, &seeded);
    nn_model_t *rep = srv_pool_model (f.pool, 0);
    size_t nw = nn_model_weights_count (rep);
    cr_assert_eq (nn_model_weights_count (ref), nw);
    cr_assert_eq (memcmp (nn_model_weights (ref), nn_model_weights (rep), sizeof (float) * nw),
                  0, "the replica does not start as the seed's model");
    size_t count = (size_t) MICRO * nn_shape_size (f.in);
    float *dx = nn_alloc_aligned (sizeof (float) * count);

    //  Micro-batch 0: an ordinary GRAD frees the replica at once.
    proto_msg_t *act = s_act (&f, 0, 0, 0, false), *grad = NULL;
    srv_pool_enqueue (f.pool, 0, &act);
    cr_assert (srv_pool_busy (f.pool, 0) && srv_pool_pending (f.pool, 0));
    cr_assert_eq (s_reply (&f, &grad), 1);
    cr_assert_not_null (grad);
    cr_assert (!srv_pool_busy (f.pool, 0) && !srv_pool_pending (f.pool, 0));
    cr_assert (!srv_pool_stepping (f.pool));
    s_reference_step (&f, ref, 0, dx);
    cr_assert_lt (pltest_max_rel_diff_floats (proto_msg_tensor_data (grad), dx, count), 1e-6);
    proto_msg_destroy (&grad);

    //  Micro-batch 1, the last: its GRADIENTS come first, computed before
    //  the step (the same as without one), and the replica stays lent.
    act = s_act (&f, 1, 0, 1, true);
    srv_pool_enqueue (f.pool, 0, &act);
    cr_assert_eq (s_reply (&f, &grad), 1, "the last GRADIENTS did not come first");
    cr_assert_not_null (grad);
    cr_assert (proto_msg_is_last (grad));
    s_reference_step (&f, ref, 1, dx);
    cr_assert_lt (pltest_max_rel_diff_floats (proto_msg_tensor_data (grad), dx, count), 1e-6);
    proto_msg_destroy (&grad);
    cr_assert (srv_pool_stepping (f.pool), "no step after the last GRADIENTS");
    cr_assert (srv_pool_busy (f.pool, 0), "a stepping replica is not lent");
    //  The device has every gradient: its PARAMS must not read as early.
    cr_assert (!srv_pool_pending (f.pool, 0));
    //  The next iteration's ACTIVATIONS wait for the step.
    act = s_act (&f, 2, 1, 0, false);
    srv_pool_enqueue (f.pool, 0, &act);
    cr_assert_eq (srv_pool_queued (f.pool, 0), 1, "dispatched onto a stepping replica");
    cr_assert (srv_pool_pending (f.pool, 0));

    //  Then STEP: the replica is free, its weights one SGD step on.
    cr_assert_eq (s_reply (&f, &grad), 2, "the step's end was not the next reply");
    cr_assert_null (grad);
    cr_assert (!srv_pool_stepping (f.pool));
    cr_assert (!srv_pool_busy (f.pool, 0));
    nn_sgd_t sgd = { .learning_rate = 0.1f, .momentum = 0.9f };
    nn_sgd_step (nn_model_weights (ref), nn_model_optim_state (ref), nn_model_grads (ref),
                 nn_model_params_count (ref), &sgd);
    double d = pltest_max_rel_diff_floats (nn_model_weights (rep), nn_model_weights (ref), nw);
    cr_log_info ("replica after the step against a plain SGD step: %g", d);
    cr_assert_lt (d, 1e-6);
    for (size_t i = 0; i < nn_model_params_count (rep); i++)
        cr_assert_eq (nn_model_grads (rep)[i], 0.0f, "gradient %zu not zeroed", i);

    //  The worker's timeline: the step is an "update" row after the last
    //  micro-batch's compute, as a device's update follows its backward.
    pl_timeline_t *tl = pl_timeline_new (0.0);
    srv_pool_dispatch (f.pool);
    cr_assert_eq (s_reply (&f, &grad), 1);
    proto_msg_destroy (&grad);
    srv_pool_take_events (f.pool, tl);
    const pl_event_t *ev = pl_timeline_events (tl);
    const pl_event_t *last = NULL, *update = NULL;
    int updates = 0;
    for (size_t i = 0; i < pl_timeline_count (tl); i++) {
        cr_assert_str_eq (ev[i].who, "server:d0");
        if (strcmp (ev[i].stage, "compute") == 0 && ev[i].iteration == 0
        &&  ev[i].micro_batch == 1)
            last = &ev[i];
        if (strcmp (ev[i].stage, "update") == 0) {
            update = &ev[i];
            updates++;
        }
    }
    cr_assert_eq (updates, 1, "%d update rows for one step", updates);
    cr_assert (last && update);
    cr_assert_eq (update->iteration, 0);
    cr_assert_eq (update->micro_batch, -1);
    cr_assert_geq (update->start_s, last->end_s);
    pl_timeline_destroy (&tl);
    nn_free (dx);
    nn_model_destroy (&ref);
    s_teardown (&f);
}

//  A pool destroyed while a worker steps (a run stopped right after a
//  mini-batch's last GRADIENTS) takes the STEP off the pipe and frees
//  everything (the ASan build checks for leaks).
Test (srv_pool, destroyed_while_stepping)
{
    s_fix_t f;
    s_setup (&f, 2);
    proto_msg_t *act = s_act (&f, 0, 0, 0, true), *grad = NULL;
    srv_pool_enqueue (f.pool, 0, &act);
    cr_assert_eq (s_reply (&f, &grad), 1);
    proto_msg_destroy (&grad);
    cr_assert (srv_pool_stepping (f.pool));
    //  And one whose last GRADIENTS were never read.
    act = s_act (&f, 1, 1, 0, true);
    srv_pool_enqueue (f.pool, 0, &act);
    cr_assert_eq (srv_pool_queued (f.pool, 0), 1);
    s_teardown (&f);
    cr_assert_null (f.pool);
}
