/*  pipelearn-train: the centralised baseline. One process trains the whole
    model on the whole training set, with the same config and the same
    summary.json as the daemons, so their results compare directly.

    pipelearn-train [--config FILE] [--results DIR] [--set KEY=VALUE]...
                    [--epochs N] [--samples N] [--threads N] [--data-dir DIR]
                    [--seed N] [--quiet]
*/
#include "nn_alloc.h"
#include "nn_checkpoint.h"
#include "nn_dataset.h"
#include "nn_kernels.h"
#include "nn_model.h"
#include "nn_optim.h"
#include "pl_args.h"
#include "pl_blas.h"
#include "pl_config.h"
#include "pl_log.h"
#include "pl_models.h"
#include "pl_timeline.h"
#include "pl_summary.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *config_path;
    const char *results_dir;        //  overrides config results_dir
    bool quiet;
} s_args_t;

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: pipelearn-train [--config FILE] [--results DIR] [--set KEY=VALUE]...\n"
        "                       [--epochs N] [--samples N] [--threads N]\n"
        "                       [--data-dir DIR] [--seed N] [--quiet]\n"
        "       pipelearn-train --list-models\n"
        "Trains the configured model on one host (the centralised baseline) and\n"
        "writes DIR/summary.json. Config keys: see docs/config.md.\n");
}

//  Parse the command line into cfg (after the file, so flags win).
static int
s_parse_args (int argc, char **argv, s_args_t *args, pl_config_t *cfg)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "results", required_argument, NULL, 'r' },
        { "set", required_argument, NULL, 's' },
        { "epochs", required_argument, NULL, 'e' },
        { "samples", required_argument, NULL, 'n' },
        { "threads", required_argument, NULL, 't' },
        { "data-dir", required_argument, NULL, 'd' },
        { "seed", required_argument, NULL, 'S' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { "list-models", no_argument, NULL, 'L' },
        { NULL, 0, NULL, 0 }
    };
    if (pl_args_config (cfg, argc, argv, &args->config_path))
        return -1;
    int c;
    while ((c = getopt_long (argc, argv, "c:r:s:e:n:t:d:S:qhL", opts, NULL)) != -1) {
        char set[1024];
        const char *key = NULL;
        switch (c) {
            case 'c': continue;
            case 'r': args->results_dir = optarg; continue;
            case 'q': args->quiet = true; continue;
            case 'h': s_usage (stdout); exit (0);
            case 'L': pl_models_print (stdout); exit (0);
            case 's': snprintf (set, sizeof set, "%s", optarg); break;
            case 'e': key = "epochs"; break;
            case 'n': key = "samples"; break;
            case 't': key = "threads"; break;
            case 'd': key = "data_dir"; break;
            case 'S': key = "seed"; break;
            default: s_usage (stderr); return -1;
        }
        if (key)
            snprintf (set, sizeof set, "%s=%s", key, optarg);
        if (pl_args_set (cfg, set))
            return -1;
    }
    if (pl_args_end (argc, argv, s_usage))
        return -1;
    char err[NN_ERR_SIZE];
    if (pl_config_check (cfg, args->config_path ? args->config_path : "config",
                         err, sizeof err)) {
        pl_log_error ("%s", err);
        return -1;
    }
    return 0;
}

typedef struct {
    nn_model_t *model;
    float *x;
    int *y;
    float *dlogits;
    int batch;
    int classes;
} s_trainer_t;

//  One pass over the test set in evaluation mode.
static void
s_evaluate (s_trainer_t *t, const nn_dataset_t *test, double *loss, double *acc)
{
    int *idx = nn_malloc (sizeof (int) * (size_t) t->batch);
    double total = 0.0;
    int correct = 0;
    for (int start = 0; start < test->count; start += t->batch) {
        int n = test->count - start < t->batch ? test->count - start : t->batch;
        for (int i = 0; i < n; i++)
            idx[i] = start + i;
        nn_dataset_batch (t->x, t->y, test, idx, n, NULL, NULL);
        const float *out = nn_model_forward (t->model, t->x, n, false, NULL);
        total += (double) nn_softmax_xent (NULL, out, t->y, n, t->classes, 1.0f, &correct) * n;
    }
    *loss = test->count ? total / test->count : 0.0;
    *acc = test->count ? (double) correct / test->count : 0.0;
    nn_free (idx);
}

static void
s_progress (bool tty, int epoch, int epochs, int done, int total, double loss, double rate)
{
    if (!tty)
        return;
    fprintf (stderr, "\repoch %d/%d  %5.1f%%  loss %.4f  %.0f img/s   ", epoch, epochs,
             100.0 * done / total, loss, rate);
    fflush (stderr);
}

int
main (int argc, char **argv)
{
    if (pl_blas_setup (argv))
        return 2;
    pl_config_t cfg;
    pl_config_defaults (&cfg);
    s_args_t args = { 0 };
    if (s_parse_args (argc, argv, &args, &cfg))
        return 2;
    const char *results = args.results_dir ? args.results_dir : cfg.results_dir;
    //  The model splits batches across threads itself; OpenBLAS runs one.
    int threads = pl_blas_set_threads (cfg.threads);
    pl_blas_set_threads (1);

    char err[NN_ERR_SIZE];
    const char *dir = cfg.data_dir[0] ? cfg.data_dir : NULL;
    nn_dataset_t *train = nn_dataset_load_named (cfg.dataset, dir, true, cfg.samples,
                                                 err, sizeof err);
    nn_dataset_t *test = train ? nn_dataset_load_named (cfg.dataset, dir, false,
                                                        cfg.test_samples, err, sizeof err)
                               : NULL;
    if (train && test && cfg.pad_to > 0
    &&  (nn_dataset_pad (train, cfg.pad_to, err, sizeof err)
    ||   nn_dataset_pad (test, cfg.pad_to, err, sizeof err)))
        nn_dataset_destroy (&test);
    if (!train || !test) {
        pl_log_error ("%s", err);
        nn_dataset_destroy (&train);
        return 1;
    }
    nn_model_spec_t spec;
    if (nn_model_spec_by_name (&spec, cfg.model, train->c, train->h, train->w,
                               train->classes, err, sizeof err)) {
        pl_log_error ("config: model: %s", err);
        return 1;
    }
    s_trainer_t t = { .batch = cfg.batch_size, .classes = train->classes };
    t.model = nn_model_new (&spec, 0, spec.units_count, cfg.batch_size, err, sizeof err);
    if (!t.model) {
        pl_log_error ("%s", err);
        return 1;
    }
    nn_model_set_threads (t.model, threads);
    nn_rng_t rng;
    nn_rng_seed (&rng, cfg.seed);
    nn_model_init (t.model, &rng);
    //  Each epoch's shuffle and augmentation draw from a stream of their own
    //  (as on the devices), so an epoch's data does not depend on the ones
    //  before it.
    const nn_rng_t data_base = nn_rng_split (&rng, 1000);
    nn_rng_t data_rng;
    size_t sample = nn_shape_size (nn_model_input_shape (t.model));
    t.x = nn_alloc_aligned (sizeof (float) * sample * (size_t) cfg.batch_size);
    t.y = nn_malloc (sizeof (int) * (size_t) cfg.batch_size);
    t.dlogits = nn_malloc (sizeof (float) * (size_t) cfg.batch_size * (size_t) t.classes);
    int *order = nn_malloc (sizeof (int) * (size_t) train->count);
    nn_augment_t aug = { .augment = cfg.augment, .crop_pad = 4, .flip = cfg.flip };
    nn_sgd_t sgd = { (float) cfg.learning_rate, (float) cfg.momentum,
                     (float) cfg.weight_decay };

    pl_log_info ("pipelearn-train: %s on %s: %d train / %d test samples, batch %d, "
                 "%d epoch(s), %d thread(s), %zu parameters",
                 cfg.model, cfg.dataset, train->count, test->count, cfg.batch_size,
                 cfg.epochs, threads, nn_model_params_count (t.model));
    pl_summary_t *summary = pl_summary_new (&cfg, results, "pipelearn-train", threads);
    bool tty = !args.quiet && isatty (STDERR_FILENO);
    int batches = train->count / cfg.batch_size;     //  last partial batch dropped
    if (batches == 0) {
        pl_log_error ("config: batch_size %d exceeds the %d training samples",
                      cfg.batch_size, train->count);
        return 1;
    }
    printf ("%5s %10s %10s %10s %10s %10s %8s\n", "epoch", "loss", "train_acc",
            "test_acc", "images/s", "wall_s", "eval_s");
    int rc = 0;
    for (int epoch = 1; epoch <= cfg.epochs; epoch++) {
        for (int i = 0; i < train->count; i++)
            order[i] = i;
        data_rng = nn_rng_split (&data_base, (uint64_t) epoch);
        nn_rng_shuffle_int (&data_rng, order, train->count);
        double start = pl_monotonic (), loss_sum = 0.0;
        int correct = 0;
        for (int b = 0; b < batches; b++) {
            nn_dataset_batch (t.x, t.y, train, order + (size_t) b * cfg.batch_size,
                              cfg.batch_size, &aug, &data_rng);
            nn_model_zero_grad (t.model);
            const float *out = nn_model_forward (t.model, t.x, cfg.batch_size, true, &rng);
            float loss = nn_softmax_xent (t.dlogits, out, t.y, cfg.batch_size, t.classes,
                                          1.0f, &correct);
            if (!isfinite (loss)) {
                pl_log_error ("epoch %d batch %d: loss is %g; lower learning_rate", epoch,
                              b, (double) loss);
                rc = 1;
                break;
            }
            loss_sum += loss;
            nn_model_backward (t.model, t.dlogits, NULL);
            nn_sgd_step (nn_model_weights (t.model), nn_model_optim_state (t.model),
                         nn_model_grads (t.model), nn_model_params_count (t.model), &sgd);
            if ((b & 7) == 0 || b == batches - 1)
                s_progress (tty, epoch, cfg.epochs, b + 1, batches, loss_sum / (b + 1),
                            (b + 1) * cfg.batch_size / (pl_monotonic () - start));
        }
        if (rc)
            break;
        double wall = pl_monotonic () - start;
        if (tty)
            fprintf (stderr, "\r%*s\r", 70, "");
        pl_epoch_stats_t st = { .epoch = epoch, .wall_s = wall };
        st.train_loss = loss_sum / batches;
        st.train_acc = (double) correct / ((double) batches * cfg.batch_size);
        st.images_per_s = (double) batches * cfg.batch_size / wall;
        double eval_start = pl_monotonic ();
        s_evaluate (&t, test, &st.test_loss, &st.test_acc);
        st.eval_s = pl_monotonic () - eval_start;
        pl_summary_add_epoch (summary, &st);
        printf ("%5d %10.4f %9.2f%% %9.2f%% %10.0f %10.2f %8.2f\n", epoch, st.train_loss,
                100.0 * st.train_acc, 100.0 * st.test_acc, st.images_per_s, wall, st.eval_s);
        fflush (stdout);
        if (pl_summary_write (summary, results, err, sizeof err)) {
            pl_log_error ("%s", err);
            rc = 1;
            break;
        }
    }
    if (rc == 0) {
        //  The final parameters, so runs can be compared with the daemons'.
        char path[1024];
        snprintf (path, sizeof path, "%s/model.ckpt", results);
        if (nn_checkpoint_save (path, t.model, false, err, sizeof err)) {
            pl_log_error ("%s", err);
            rc = 1;
        }
    }
    if (rc == 0)
        pl_log_info ("results: %s/summary.json (peak RSS %ld KiB)", results, pl_peak_rss_kb ());
    pl_summary_destroy (&summary);
    nn_free (order);
    nn_free (t.x);
    nn_free (t.y);
    nn_free (t.dlogits);
    nn_model_destroy (&t.model);
    nn_dataset_destroy (&train);
    nn_dataset_destroy (&test);
    return rc;
}
