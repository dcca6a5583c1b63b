/*  train_steps: many SGD steps of a registry model on batches given in
    files, for a step-by-step comparison with PyTorch from the same initial
    weights (tests/torch_steps.py).

    train_steps DIR MODEL CHANNELS SIDE BATCH STEPS LR DROPOUT [SEED [THREADS]]

    Reads DIR/x.bin (STEPS x BATCH x SIDE x SIDE x CHANNELS float32, NHWC)
    and DIR/y.bin (STEPS x BATCH int32 labels 0..9). Builds MODEL for 10
    classes, initialises it as pipelearn does (nn_model_init, seed SEED,
    default 1) and trains STEPS steps in train mode with the reference's
    optimiser: SGD, lr LR, momentum 0.9, no weight decay, mean loss.
    DROPOUT >= 0 sets p of every dropout layer (0 for an exact comparison:
    masks cannot match another implementation's); -1 keeps the model's.
    Writes DIR/weights.bin (the initial weights, BN running statistics
    included), DIR/tensors.txt, DIR/spec.txt (dump_files.h), DIR/loss.txt
    (each step's loss), DIR/gnorm.txt (per step, the 2-norm of every
    tensor's gradient in tensors.txt's order; 0 for BN running statistics)
    and DIR/after.bin (the weights after the last step). A step whose loss
    is not finite ends the run there (exit 0: the files say what happened).
*/
#include "dump_files.h"
#include "nn_alloc.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
    if (argc < 9 || argc > 11) {
        fprintf (stderr, "usage: train_steps DIR MODEL CHANNELS SIDE BATCH STEPS LR DROPOUT "
                 "[SEED [THREADS]]\n");
        return 2;
    }
    const char *dir = argv[1], *model = argv[2];
    int channels = atoi (argv[3]), side = atoi (argv[4]), n = atoi (argv[5]);
    int steps = atoi (argv[6]);
    float lr = (float) atof (argv[7]), dropout = (float) atof (argv[8]);
    uint64_t seed = argc >= 10 ? (uint64_t) atoll (argv[9]) : 1;
    int threads = argc >= 11 ? atoi (argv[10]) : 1;
    if (channels < 1 || side < 1 || n < 1 || steps < 1 || !(lr > 0.0f) || threads < 1) {
        fprintf (stderr, "train_steps: CHANNELS, SIDE, BATCH, STEPS, LR and THREADS must be > 0\n");
        return 2;
    }
    static nn_model_spec_t spec;
    char err[256];
    if (nn_model_spec_by_name (&spec, model, channels, side, side, 10, err, sizeof err)) {
        fprintf (stderr, "train_steps: %s\n", err);
        return 1;
    }
    if (dropout >= 0.0f)
        for (int u = 0; u < spec.units_count; u++)
            for (int l = 0; l < spec.units[u].layers_count; l++)
                if (spec.units[u].layers[l].kind == NN_LAYER_DROPOUT)
                    spec.units[u].layers[l].p = dropout;
    nn_model_t *m = nn_model_new (&spec, 0, spec.units_count, n, err, sizeof err);
    if (!m) {
        fprintf (stderr, "train_steps: %s\n", err);
        return 1;
    }
    nn_model_set_threads (m, threads);
    nn_rng_t rng, masks;
    nn_rng_seed (&rng, seed);
    nn_model_init (m, &rng);
    nn_rng_seed (&masks, seed + 1);
    size_t in_count = (size_t) n * side * side * channels;
    float *x = nn_malloc (sizeof (float) * in_count * (size_t) steps);
    int *y = nn_malloc (sizeof (int) * (size_t) n * (size_t) steps);
    size_t wc = nn_model_weights_count (m), pc = nn_model_params_count (m);
    float *w = nn_model_weights (m);
    if (dump_read (dir, "x.bin", x, sizeof (float) * in_count * (size_t) steps)
        || dump_read (dir, "y.bin", y, sizeof (int) * (size_t) n * (size_t) steps)
        || dump_write (dir, "weights.bin", w, sizeof (float) * wc)
        || dump_tensors (dir, m) || dump_spec (dir, &spec))
        return 1;
    for (size_t i = 0; i < (size_t) n * (size_t) steps; i++)
        if (y[i] < 0 || y[i] > 9) {
            fprintf (stderr, "train_steps: label %d at %zu is not in 0..9\n", y[i], i);
            return 1;
        }
    char path[1024];
    snprintf (path, sizeof path, "%s/loss.txt", dir);
    FILE *losses = fopen (path, "w");
    snprintf (path, sizeof path, "%s/gnorm.txt", dir);
    FILE *gnorms = fopen (path, "w");
    if (!losses || !gnorms) {
        fprintf (stderr, "train_steps: cannot write loss.txt or gnorm.txt in %s\n", dir);
        return 1;
    }
    float *d = nn_malloc (sizeof (float) * 10 * (size_t) n);
    const float *g = nn_model_grads (m);
    nn_sgd_t sgd = { lr, 0.9f, 0.0f };
    for (int step = 0; step < steps; step++) {
        nn_model_zero_grad (m);
        const float *out = nn_model_forward (m, x + (size_t) step * in_count, n, true, &masks);
        float loss = nn_softmax_xent (d, out, y + (size_t) step * n, n, 10, 1.0f, NULL);
        fprintf (losses, "%.9g\n", (double) loss);
        if (!isfinite (loss))
            break;
        nn_model_backward (m, d, NULL);
        for (int t = 0; t < nn_model_tensors_count (m); t++) {
            nn_tensor_info_t info;
            nn_model_tensor (m, t, &info);
            double sum = 0.0;
            for (size_t i = 0; info.trainable && i < info.count; i++)
                sum += (double) g[info.offset + i] * g[info.offset + i];
            fprintf (gnorms, "%s%.6g", t ? " " : "", sqrt (sum));
        }
        fputc ('\n', gnorms);
        nn_sgd_step (w, nn_model_optim_state (m), g, pc, &sgd);
    }
    int rc = fclose (losses) | fclose (gnorms);
    if (rc || dump_write (dir, "after.bin", w, sizeof (float) * wc))
        return 1;
    nn_free (x), nn_free (y), nn_free (d);
    nn_model_destroy (&m);
    return 0;
}
