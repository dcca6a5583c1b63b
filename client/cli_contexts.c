/*  cli_contexts.c: the device's model contexts: one per micro-batch in
    flight (sharing the weights), their input buffers, and the receive
    limits that follow from the split point and micro-batch count. */
#include <stdio.h>
#include <string.h>

#include "cli_state.h"
#include "nn_alloc.h"

void
cli_contexts_free (cli_t *self)
{
    for (int i = CLI_MAX_MICRO - 1; i >= 0; i--) {
        nn_model_destroy (&self->ctx[i]);       //  shared contexts before ctx[0]
        nn_free (self->x[i]);
        nn_free (self->y[i]);
        self->x[i] = NULL;
        self->y[i] = NULL;
    }
    nn_free (self->labels);
    nn_free (self->dlogits);
    self->labels = NULL;
    self->dlogits = NULL;
}

int
cli_contexts_build (cli_t *self, int units, int micro, char *err, size_t err_size)
{
    bool fl = self->mode == PL_MODE_FL;
    if (units < 1 || units > self->spec.units_count
    ||  (!fl && units >= self->spec.units_count)) {
        snprintf (err, err_size, "split point %d does not fit %s (%d units)", units,
                  self->cfg.model, self->spec.units_count);
        return -1;
    }
    if (micro < 1 || micro > CLI_MAX_MICRO || self->batch % micro) {
        snprintf (err, err_size, "%d micro-batches do not divide the batch of %d (at most "
                  "%d)", micro, self->batch, CLI_MAX_MICRO);
        return -1;
    }
    int max_batch = fl ? self->batch : self->batch / micro;
    nn_model_t *base = nn_model_new (&self->spec, 0, units, max_batch, err, err_size);
    if (!base)
        return -1;
    nn_model_init (base, &self->rng);
    nn_model_t *old = self->ctx[0];
    if (old) {
        //  A re-plan: keep what this device has learnt. Momentum carries
        //  over only when the part is the same (a new micro-batch count).
        nn_model_copy_tensors (base, old);
        if (nn_model_unit_end (old) == units)
            memcpy (nn_model_optim_state (base), nn_model_optim_state_const (old),
                    sizeof (float) * nn_model_params_count (base));
    }
    cli_contexts_free (self);
    self->ctx[0] = base;
    for (int i = 1; i < micro && !fl; i++)
        if (!(self->ctx[i] = nn_model_new_shared (base, err, err_size)))
            return -1;
    size_t sample = nn_shape_size (nn_model_input_shape (base));
    int contexts = fl ? 1 : micro;
    for (int i = 0; i < contexts; i++) {
        nn_model_set_threads (self->ctx[i], self->args.threads);
        self->x[i] = nn_alloc_aligned (sizeof (float) * sample * (size_t) max_batch);
        self->y[i] = nn_malloc (sizeof (int) * (size_t) max_batch);
    }
    self->labels = nn_malloc (sizeof (int32_t) * (size_t) max_batch);
    self->dlogits = nn_malloc (sizeof (float) * (size_t) max_batch
                               * (size_t) self->spec.classes);
    self->micro = micro;
    self->mb = self->batch / micro;
    self->limits.max_batch = (uint32_t) max_batch;
    self->limits.classes = (uint32_t) self->spec.classes;
    self->limits.slab_count = nn_model_weights_count (base);
    self->limits.buffer_count = nn_model_weights_count (base) - nn_model_params_count (base);
    self->calibrated = false;
    self->limits.spec_hash = self->spec_hash;
    if (!fl) {
        nn_shape_t s = nn_model_output_shape (base);
        self->limits.h = (uint32_t) s.h;
        self->limits.w = (uint32_t) s.w;
        self->limits.c = (uint32_t) s.c;
    }
    return 0;
}
