/*  pipelearn-codec-accuracy: what the split's codecs and the privacy noise
    cost in accuracy, and what they save in bytes, before the daemons carry
    them.

    pipelearn-codec-accuracy [-d DIR] [-n SAMPLES] [-t TEST] [-e EPOCHS]
                             [-p SPLIT] [-b BATCH] [-s SEED] [-c POINTS]

    One process trains VGG5 on Fashion-MNIST split at unit P the way a
    device and its server replica do in sfl (one device, whole mini-batch):
    the device part's forward, its activations (plus noise, if any) encoded
    and decoded by the codec up, the server part's forward, loss and
    backward, the activation gradient encoded and decoded by the codec down
    (topk keeps its residual, as a sender does), the device part's
    backward, one SGD step on each (lr 0.01, momentum 0.9). Every setting
    starts from the same weights and sees the same batches; the test set is
    evaluated on the trained parts without any codec (as the server
    evaluates the merged model). It prints one Markdown row per setting:
    test accuracy, its difference to none, and the bytes the device would
    send and receive per epoch (codec wire bytes of every micro-batch; none
    = the f32 tensors, as proto sends them today).

    -c POINTS: a check (the slow suite's codec_accuracy): exit 1 when a
    codec setting ends more than POINTS percentage points from none. Not
    held to it: the noise settings (noise is meant to cost accuracy) and
    topk at 0.01, which delivers 1% of a gradient per step and the rest
    late: how much that costs after 200 steps is the trajectory's, and the
    trajectory is the CPU's (-0.41 points on an AMD EPYC, -1.17 on an Intel
    Xeon, both AVX-512, the same code and seed; docs/codecs.md). topk at
    0.1 is held to it. Exit 77
    (skipped) when the dataset is not installed.
*/
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn_alloc.h"
#include "nn_codec.h"
#include "nn_dataset.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_noise.h"
#include "nn_optim.h"

typedef struct {
    const char *label;
    nn_codec_params_t up, down;
    nn_noise_t noise;
    bool unbounded;             //  printed, not held to -c (see -c)
} s_setting_t;

typedef struct {
    double test_acc, bytes_up, bytes_down, seconds;
} s_result_t;

static double
s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
s_die (const char *what)
{
    fprintf (stderr, "pipelearn-codec-accuracy: %s\n", what);
    exit (1);
}

//  Round trip through a codec: encoder (NULL = none, a plain copy) to out.
static double
s_through (nn_codec_encoder_t *enc, nn_codec_id_t id, const nn_codec_shape_t *shape,
           uint8_t *wire, const float *in, float *out, size_t count, nn_rng_t *rng)
{
    if (id == NN_CODEC_NONE) {
        memcpy (out, in, sizeof (float) * count);
        return 4.0 * (double) count;
    }
    char err[NN_ERR_SIZE];
    size_t bytes = nn_codec_encoder_bytes (enc);
    if (nn_codec_encode (enc, wire, bytes, in, rng, err, sizeof err)
    ||  nn_codec_decode (out, wire, nn_codec_encoder_last_bytes (enc), id, shape, err,
                         sizeof err))
        s_die (err);
    return (double) nn_codec_encoder_last_bytes (enc);
}

static s_result_t
s_train (const s_setting_t *st, const nn_model_spec_t *spec, int split, int batch, int epochs,
         const nn_dataset_t *train, const nn_dataset_t *test, uint64_t seed)
{
    char err[NN_ERR_SIZE];
    int units = spec->units_count;
    nn_model_t *dev = nn_model_new (spec, 0, split, batch, err, sizeof err);
    nn_model_t *srv = dev ? nn_model_new (spec, split, units, batch, err, sizeof err) : NULL;
    if (!srv)
        s_die (err);
    nn_rng_t init;
    nn_rng_seed (&init, seed);
    nn_model_init (dev, &init);
    nn_model_init (srv, &init);
    nn_shape_t a = nn_model_output_shape (dev), in = nn_model_input_shape (dev);
    nn_codec_shape_t shape = { (uint32_t) batch, (uint32_t) a.h, (uint32_t) a.w,
                               (uint32_t) a.c };
    size_t act = (size_t) batch * (size_t) (a.h * a.w * a.c);
    nn_codec_encoder_t *up = NULL, *down = NULL;
    if (st->up.id != NN_CODEC_NONE && !(up = nn_codec_encoder_new (&st->up, &shape, err,
                                                                   sizeof err)))
        s_die (err);
    if (st->down.id != NN_CODEC_NONE && !(down = nn_codec_encoder_new (&st->down, &shape, err,
                                                                       sizeof err)))
        s_die (err);
    size_t wire_size = nn_codec_wire_bytes (NN_CODEC_NONE, act, (uint32_t) a.c, 0);
    if (up && nn_codec_encoder_bytes (up) > wire_size)
        wire_size = nn_codec_encoder_bytes (up);
    if (down && nn_codec_encoder_bytes (down) > wire_size)
        wire_size = nn_codec_encoder_bytes (down);
    uint8_t *wire = nn_malloc (wire_size);
    float *x = nn_malloc (sizeof (float) * (size_t) batch * (size_t) (in.h * in.w * in.c));
    float *sent = nn_malloc (sizeof (float) * act), *recv = nn_malloc (sizeof (float) * act);
    float *dact = nn_malloc (sizeof (float) * act);
    float *dlogits = nn_malloc (sizeof (float) * (size_t) batch * (size_t) spec->classes);
    int *y = nn_malloc (sizeof (int) * (size_t) batch);
    int *order = nn_malloc (sizeof (int) * (size_t) train->count);
    for (int i = 0; i < train->count; i++)
        order[i] = i;
    nn_sgd_t hp = { .learning_rate = 0.01f, .momentum = 0.9f };
    nn_rng_t rng, codec_rng, noise_rng;
    nn_rng_seed (&rng, seed + 1);
    nn_rng_seed (&codec_rng, seed + 2);
    nn_rng_seed (&noise_rng, seed + 3);
    s_result_t r = { 0 };
    double t0 = s_now ();
    int iterations = train->count / batch;
    for (int e = 0; e < epochs; e++) {
        nn_rng_shuffle_int (&rng, order, train->count);
        for (int it = 0; it < iterations; it++) {
            nn_dataset_batch (x, y, train, order + (size_t) it * (size_t) batch, batch, NULL,
                              &rng);
            nn_model_zero_grad (dev);
            nn_model_zero_grad (srv);
            memcpy (sent, nn_model_forward (dev, x, batch, true, &rng), sizeof (float) * act);
            if (st->noise.kind != NN_NOISE_NONE)
                nn_noise_add (sent, act, &st->noise, &noise_rng);
            r.bytes_up += s_through (up, st->up.id, &shape, wire, sent, recv, act, &codec_rng)
                        + 4.0 * batch;     //  the labels
            const float *logits = nn_model_forward (srv, recv, batch, true, &rng);
            nn_softmax_xent (dlogits, logits, y, batch, spec->classes, 1.0f, NULL);
            nn_model_backward (srv, dlogits, dact);
            r.bytes_down += s_through (down, st->down.id, &shape, wire, dact, recv, act,
                                       &codec_rng);
            nn_model_backward (dev, recv, NULL);
            nn_model_t *parts[2] = { dev, srv };
            for (int k = 0; k < 2; k++)
                nn_sgd_step (nn_model_weights (parts[k]), nn_model_optim_state (parts[k]),
                             nn_model_grads (parts[k]), nn_model_params_count (parts[k]), &hp);
        }
    }
    r.seconds = (s_now () - t0) / epochs;
    r.bytes_up /= epochs;
    r.bytes_down /= epochs;
    int correct = 0, evaluated = 0;
    int *test_idx = nn_malloc (sizeof (int) * (size_t) batch);
    for (int i = 0; i + batch <= test->count; i += batch) {
        for (int k = 0; k < batch; k++)
            test_idx[k] = i + k;
        nn_dataset_batch (x, y, test, test_idx, batch, NULL, NULL);
        const float *h = nn_model_forward (dev, x, batch, false, NULL);
        const float *logits = nn_model_forward (srv, h, batch, false, NULL);
        nn_softmax_xent (NULL, logits, y, batch, spec->classes, 1.0f, &correct);
        evaluated += batch;
    }
    r.test_acc = evaluated ? (double) correct / evaluated : NAN;
    nn_free (test_idx);
    nn_free (order);
    nn_free (y);
    nn_free (dlogits);
    nn_free (dact);
    nn_free (recv);
    nn_free (sent);
    nn_free (x);
    nn_free (wire);
    nn_codec_encoder_destroy (&up);
    nn_codec_encoder_destroy (&down);
    nn_model_destroy (&dev);
    nn_model_destroy (&srv);
    return r;
}

int
main (int argc, char **argv)
{
    const char *dir = "/usr/share/datasets/fashion-mnist";
    int samples = 10000, test_samples = 10000, epochs = 1, split = 1, batch = 100;
    uint64_t seed = 1;
    double check = -1.0;
    int opt;
    while ((opt = getopt (argc, argv, "d:n:t:e:p:b:s:c:")) != -1) {
        if (opt == 'c') {
            check = strtod (optarg, NULL);
            if (!(check >= 0.0))
                s_die ("-c takes a number of percentage points >= 0");
            continue;
        }
        if (opt == 'd') {
            dir = optarg;
            continue;
        }
        long v = strtol (optarg, NULL, 10);
        if (v < 1)
            s_die ("numeric options take positive integers");
        switch (opt) {
            case 'n': samples = (int) v; break;
            case 't': test_samples = (int) v; break;
            case 'e': epochs = (int) v; break;
            case 'p': split = (int) v; break;
            case 'b': batch = (int) v; break;
            case 's': seed = (uint64_t) v; break;
            default: s_die ("usage: pipelearn-codec-accuracy [-d DIR] [-n SAMPLES] [-t TEST] "
                            "[-e EPOCHS] [-p SPLIT] [-b BATCH] [-s SEED] [-c POINTS]");
        }
    }
    char err[NN_ERR_SIZE];
    char probe[1024];
    snprintf (probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
    FILE *f = fopen (probe, "rb");
    if (!f) {
        printf ("pipelearn-codec-accuracy: no Fashion-MNIST in %s: skipped\n", dir);
        return 77;
    }
    fclose (f);
    nn_dataset_t *train = nn_dataset_load_named ("fashion-mnist", dir, true, samples, err,
                                                 sizeof err);
    nn_dataset_t *test = train ? nn_dataset_load_named ("fashion-mnist", dir, false,
                                                        test_samples, err, sizeof err) : NULL;
    if (!test)
        s_die (err);
    nn_model_spec_t spec;
    if (nn_model_spec_by_name (&spec, "vgg5", train->c, train->h, train->w, train->classes,
                               err, sizeof err))
        s_die (err);
    if (split < 1 || split >= spec.units_count)
        s_die ("the split point must be in 1..units-1");
    if (batch > train->count)
        s_die ("the batch is larger than the training set");

    const s_setting_t settings[] = {
        { "none / none", { .id = NN_CODEC_NONE }, { .id = NN_CODEC_NONE }, { 0 }, false },
        { "fp16 / fp16", { .id = NN_CODEC_FP16 }, { .id = NN_CODEC_FP16 }, { 0 }, false },
        { "int8 / int8", { .id = NN_CODEC_INT8 }, { .id = NN_CODEC_INT8 }, { 0 }, false },
        { "int8 + zstd / int8 + zstd", { .id = NN_CODEC_INT8, .zstd = true },
          { .id = NN_CODEC_INT8, .zstd = true }, { 0 }, false },
        { "int8 stochastic / int8 stochastic", { .id = NN_CODEC_INT8, .stochastic = true },
          { .id = NN_CODEC_INT8, .stochastic = true }, { 0 }, false },
        { "int8 / topk 0.1", { .id = NN_CODEC_INT8 },
          { .id = NN_CODEC_TOPK, .topk_fraction = 0.1 }, { 0 }, false },
        { "int8 / topk 0.01", { .id = NN_CODEC_INT8 },
          { .id = NN_CODEC_TOPK, .topk_fraction = 0.01 }, { 0 }, true },
        { "none / none, gaussian noise 0.1", { .id = NN_CODEC_NONE }, { .id = NN_CODEC_NONE },
          { NN_NOISE_GAUSSIAN, 0.1 }, false },
        { "none / none, laplace noise 0.5", { .id = NN_CODEC_NONE }, { .id = NN_CODEC_NONE },
          { NN_NOISE_LAPLACE, 0.5 }, false },
    };
    printf ("VGG5, Fashion-MNIST: %d training samples, %d test, %d epoch(s), batch %d, split "
            "%d, seed %llu, one thread\n\n", train->count, test->count, epochs, batch, split,
            (unsigned long long) seed);
    printf ("| codec up / down | test acc | vs none | MB up / epoch | MB down / epoch | "
            "s / epoch |\n|---|---:|---:|---:|---:|---:|\n");
    fflush (stdout);
    double base = NAN;
    int off = 0;
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        s_result_t r = s_train (&settings[i], &spec, split, batch, epochs, train, test, seed);
        if (i == 0)
            base = r.test_acc;
        double diff = 100 * (r.test_acc - base);
        printf ("| %s | %.2f%% | %+.2f | %.2f | %.2f | %.1f |\n", settings[i].label,
                100 * r.test_acc, diff, r.bytes_up / 1e6, r.bytes_down / 1e6, r.seconds);
        fflush (stdout);
        if (check >= 0.0 && settings[i].noise.kind == NN_NOISE_NONE && !settings[i].unbounded
        &&  !(fabs (diff) <= check)) {
            fprintf (stderr, "pipelearn-codec-accuracy: %s is %.2f points from none (limit "
                     "%.2f)\n", settings[i].label, diff, check);
            off++;
        }
    }
    nn_dataset_destroy (&train);
    nn_dataset_destroy (&test);
    return off ? 1 : 0;
}
