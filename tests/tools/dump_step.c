/*  dump_step: training steps of a model written to files, for comparison
    with PyTorch (tests/torch_parity.py).

    dump_step DIR SIDE BATCH BN THREADS [SEED [MODEL CHANNELS STEPS [LR]]]
    Without MODEL: VGG5 (BN 0: vgg5-nobn) on SIDE x SIDE x 1, one step.
    With MODEL: the registry's model on SIDE x SIDE x CHANNELS, STEPS steps
    on STEPS batches; its dropout is set to p = 0 (masks cannot match
    another implementation's), BN is ignored.
    Writes DIR/{weights,x,y,grads,dx,after}.bin (little-endian float32 /
    int32): the initial weights, every step's batch and labels, the first
    step's gradients and input gradient, the last step's gradients
    (grads_last.bin), the logits in evaluation mode after the last step
    on the first batch (eval.bin), the weights after the last SGD
    step (lr LR, default 0.01, momentum 0.9, weight decay 5e-4), BN running statistics
    included; DIR/tensors.txt (name offset count per line), DIR/loss.txt
    (each step's loss) and DIR/spec.txt (per layer: unit, index in the
    unit, kind, out_channels, kernel, stride, pad, bias, groups, from[0],
    from[1]).
*/
#include "dump_files.h"
#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"

#include <stdio.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
    if (argc != 6 && argc != 7 && argc != 10 && argc != 11) {
        fprintf (stderr, "usage: dump_step DIR SIDE BATCH BN THREADS [SEED [MODEL CHANNELS STEPS [LR]]]\n");
        return 2;
    }
    const char *dir = argv[1];
    int side = atoi (argv[2]), n = atoi (argv[3]), bn = atoi (argv[4]), threads = atoi (argv[5]);
    int channels = argc >= 10 ? atoi (argv[8]) : 1, steps = argc >= 10 ? atoi (argv[9]) : 1;
    float lr = argc == 11 ? (float) atof (argv[10]) : 0.01f;
    static nn_model_spec_t spec;
    char err[256];
    if (argc >= 10) {
        if (nn_model_spec_by_name (&spec, argv[7], channels, side, side, 10, err, sizeof err)) {
            fprintf (stderr, "dump_step: %s\n", err);
            return 1;
        }
        for (int u = 0; u < spec.units_count; u++)
            for (int l = 0; l < spec.units[u].layers_count; l++)
                spec.units[u].layers[l].p = 0.0f;
    }
    else
        nn_model_spec_vgg5 (&spec, 1, side, 10, bn != 0);
    nn_model_t *m = nn_model_new (&spec, 0, spec.units_count, n, err, sizeof err);
    if (!m) {
        fprintf (stderr, "dump_step: %s\n", err);
        return 1;
    }
    nn_model_set_threads (m, threads);
    nn_rng_t rng;
    nn_rng_seed (&rng, argc >= 7 ? (uint64_t) atoll (argv[6]) : 3);
    nn_model_init (m, &rng);
    float *w = nn_model_weights (m);
    //  Non-trivial biases and BN affine terms.
    for (size_t i = 0; i < nn_model_params_count (m); i++)
        w[i] += 0.05f * (nn_rng_uniform (&rng) - 0.5f);
    size_t in_count = (size_t) n * side * side * channels;
    float *x = nn_malloc (sizeof (float) * in_count * (size_t) steps);
    for (size_t i = 0; i < in_count * (size_t) steps; i++)
        x[i] = 2.0f * nn_rng_uniform (&rng) - 1.0f;
    int *y = nn_malloc (sizeof (int) * (size_t) (n * steps));
    for (int i = 0; i < n * steps; i++)
        y[i] = (int) nn_rng_below (&rng, 10);
    size_t wc = nn_model_weights_count (m), pc = nn_model_params_count (m);
    if (dump_write (dir, "weights.bin", w, 4 * wc)
        || dump_write (dir, "x.bin", x, 4 * in_count * (size_t) steps)
        || dump_write (dir, "y.bin", y, 4 * (size_t) (n * steps)))
        return 1;
    float *d = nn_malloc (sizeof (float) * 10 * (size_t) n);
    float *dx = nn_malloc (sizeof (float) * in_count);
    float losses[16];
    nn_sgd_t sgd = { lr, 0.9f, 5e-4f };
    for (int step = 0; step < steps && step < 16; step++) {
        nn_model_zero_grad (m);
        const float *out = nn_model_forward (m, x + (size_t) step * in_count, n, true, NULL);
        losses[step] = nn_softmax_xent (d, out, y + step * n, n, 10, 1.0f, NULL);
        nn_model_backward (m, d, dx);
        if (step == 0 && (dump_write (dir, "grads.bin", nn_model_grads (m), 4 * pc)
                          || dump_write (dir, "dx.bin", dx, 4 * in_count)))
            return 1;
        if (step == steps - 1 && dump_write (dir, "grads_last.bin", nn_model_grads (m), 4 * pc))
            return 1;
        nn_sgd_step (w, nn_model_optim_state (m), nn_model_grads (m), pc, &sgd);
    }
    if (dump_write (dir, "after.bin", w, 4 * wc))
        return 1;
    //  Evaluation mode (BN's running statistics) on the first batch.
    const float *eval = nn_model_forward (m, x, n, false, NULL);
    if (dump_write (dir, "eval.bin", eval, 4 * 10 * (size_t) n))
        return 1;
    if (dump_tensors (dir, m) || dump_spec (dir, &spec))
        return 1;
    char path[1024];
    snprintf (path, sizeof path, "%s/loss.txt", dir);
    FILE *f = fopen (path, "w");
    for (int step = 0; step < steps && step < 16; step++)
        fprintf (f, "%.9g\n", (double) losses[step]);
    fclose (f);
    nn_free (x), nn_free (y), nn_free (d), nn_free (dx);
    nn_model_destroy (&m);
    return 0;
}
