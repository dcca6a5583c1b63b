/*  nn_dataset.c: named datasets, per-dataset transforms (padding, default
    augmentation), the synthetic dataset, sharding across devices and batch
    assembly. File formats live in nn_dataset_idx.c, nn_dataset_cifar.c and
    nn_dataset_svhn.c (over nn_dataset_mat.c).
*/
#include "nn_dataset.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"

#define DS_PATH_MAX       4096
//  Debian's dataset-* packages install under this root; it is used when
//  nn_dataset_load_named is given no directory.
#define DS_DEFAULT_ROOT   "/usr/share/datasets"
#define DS_VALID_NAMES    "mnist, fashion-mnist, cifar10, svhn, synthetic"
#define DS_CIFAR_SUBDIR   "cifar-10-batches-bin"
#define DS_CIFAR_BATCHES  5
#define DS_SYNTH_TRAIN    2000
#define DS_SYNTH_TEST     500
#define DS_SYNTH_MAX      1000000         //  784 MB of pixels
#define DS_SYNTH_SEED     0x5eed7a1aULL
#define DS_PAD_MAX        1024
#define DS_CROP_PAD       4               //  the reference's RandomCrop padding

//  ---------------------------------------------------------------------
//  Named datasets

static int
s_join (char *out, const char *dir, const char *sub, const char *name,
        const char *suffix, char *err, size_t err_size)
{
    int n = sub ? snprintf (out, DS_PATH_MAX, "%s/%s/%s%s", dir, sub, name, suffix)
                : snprintf (out, DS_PATH_MAX, "%s/%s%s", dir, name, suffix);
    if (n < 0 || n >= DS_PATH_MAX)
        return nn_errf (err, err_size, "dataset: path too long: %s/%s", dir, name);
    return 0;
}

//  The plain file if present, else the .gz one.
static int
s_find_idx_file (char *out, const char *dir, const char *name,
                 char *err, size_t err_size)
{
    if (s_join (out, dir, NULL, name, "", err, err_size))
        return -1;
    if (access (out, F_OK) == 0)
        return 0;
    if (s_join (out, dir, NULL, name, ".gz", err, err_size))
        return -1;
    if (access (out, F_OK) == 0)
        return 0;
    return nn_errf (err, err_size, "dataset: %s/%s: not found (also tried .gz)",
                    dir, name);
}

static nn_dataset_t *
s_load_idx_named (const char *dir, bool train, int limit, float mean, float std,
                  nn_dataset_select_fn select, void *arg, char *err, size_t err_size)
{
    char images[DS_PATH_MAX], labels[DS_PATH_MAX];
    const char *split = train ? "train" : "t10k";
    char name[64];
    snprintf (name, sizeof name, "%s-images-idx3-ubyte", split);
    if (s_find_idx_file (images, dir, name, err, err_size))
        return NULL;
    snprintf (name, sizeof name, "%s-labels-idx1-ubyte", split);
    if (s_find_idx_file (labels, dir, name, err, err_size))
        return NULL;
    nn_dataset_t *ds = nn_dataset_load_idx_select (images, labels, limit, select, arg, err,
                                                   err_size);
    if (ds) {
        ds->mean[0] = mean;
        ds->std[0] = std;
    }
    return ds;
}

//  Batches sit either directly in dir or in the archive's own subdirectory.
static nn_dataset_t *
s_load_cifar_named (const char *dir, bool train, int limit,
                    char *err, size_t err_size)
{
    char storage[DS_CIFAR_BATCHES][DS_PATH_MAX];
    const char *paths[DS_CIFAR_BATCHES];
    int count = train ? DS_CIFAR_BATCHES : 1;
    const char *sub = NULL;
    if (s_join (storage[0], dir, NULL, train ? "data_batch_1" : "test_batch", ".bin",
                err, err_size))
        return NULL;
    if (access (storage[0], F_OK) != 0)
        sub = DS_CIFAR_SUBDIR;
    for (int i = 0; i < count; i++) {
        char name[32] = "test_batch";
        if (train)
            snprintf (name, sizeof name, "data_batch_%d", i + 1);
        if (s_join (storage[i], dir, sub, name, ".bin", err, err_size))
            return NULL;
        paths[i] = storage[i];
    }
    return nn_dataset_load_cifar10 (paths, count, limit, err, err_size);
}

nn_dataset_t *
nn_dataset_load_named (const char *name, const char *dir, bool train, int limit,
                       char *err, size_t err_size)
{
    return nn_dataset_load_named_select (name, dir, train, limit, NULL, NULL, err, err_size);
}

//  ds cut down to the samples select picks, in its order (in place).
static int
s_select (nn_dataset_t *ds, nn_dataset_select_fn select, void *arg, char *err,
          size_t err_size)
{
    int n = 0;
    int *picks = select (ds, &n, arg, err, err_size);
    if (!picks)
        return -1;
    size_t sample = (size_t) ds->h * ds->w * ds->c;
    uint8_t *pixels = nn_malloc (sample * (size_t) (n > 0 ? n : 1));
    uint8_t *labels = nn_malloc ((size_t) (n > 0 ? n : 1));
    uint8_t *seen = nn_calloc ((size_t) ds->count + 1, 1);
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        int i = picks[k];
        if (i < 0 || i >= ds->count || seen[i])
            rc = nn_errf (err, err_size, "dataset: selection: index %d %s", i,
                          i < 0 || i >= ds->count ? "out of range" : "picked twice");
        else {
            seen[i] = 1;
            memcpy (pixels + (size_t) k * sample, ds->pixels + (size_t) i * sample, sample);
            labels[k] = ds->labels[i];
        }
    }
    nn_free (seen);
    nn_free (picks);
    if (rc) {
        nn_free (pixels);
        nn_free (labels);
        return -1;
    }
    nn_free (ds->pixels);
    nn_free (ds->labels);
    ds->pixels = pixels;
    ds->labels = labels;
    ds->count = n;
    return 0;
}

nn_dataset_t *
nn_dataset_load_named_select (const char *name, const char *dir, bool train, int limit,
                              nn_dataset_select_fn select, void *arg,
                              char *err, size_t err_size)
{
    assert (name);
    nn_dataset_t *ds = NULL;
    char fallback[DS_PATH_MAX];
    if (!dir || !*dir) {
        snprintf (fallback, sizeof fallback, "%s/%s", DS_DEFAULT_ROOT, name);
        dir = fallback;
    }
    if (strcmp (name, "fashion-mnist") == 0)
        return s_load_idx_named (dir, train, limit, 0.2860f, 0.3530f, select, arg, err,
                                 err_size);
    if (strcmp (name, "mnist") == 0)
        return s_load_idx_named (dir, train, limit, 0.1307f, 0.3081f, select, arg, err,
                                 err_size);
    if (strcmp (name, "cifar10") == 0)
        ds = s_load_cifar_named (dir, train, limit, err, err_size);
    else
    if (strcmp (name, "svhn") == 0) {
        char path[DS_PATH_MAX];
        if (s_join (path, dir, NULL, train ? "train_32x32" : "test_32x32", ".mat", err,
                    err_size))
            return NULL;
        ds = nn_dataset_load_svhn (path, limit, err, err_size);
    }
    else
    if (strcmp (name, "synthetic") == 0) {
        int count = limit > 0 ? limit : train ? DS_SYNTH_TRAIN : DS_SYNTH_TEST;
        //  Generated, not read: no file bounds it, so a bound of its own
        //  keeps a huge sample count an error rather than an abort.
        if (count > DS_SYNTH_MAX) {
            nn_errf (err, err_size, "dataset: synthetic: %d samples asked for, at most %d",
                     count, DS_SYNTH_MAX);
            return NULL;
        }
        ds = nn_dataset_synthetic (count, 28, 28, 1, 10, DS_SYNTH_SEED + (train ? 0 : 1));
    }
    else {
        nn_errf (err, err_size, "dataset: unknown name '%s' (valid: %s)", name,
                 DS_VALID_NAMES);
        return NULL;
    }
    if (ds && select && s_select (ds, select, arg, err, err_size))
        nn_dataset_destroy (&ds);
    return ds;
}

nn_augment_t
nn_dataset_augment_default (const char *name)
{
    assert (name);
    bool cifar = strcmp (name, "cifar10") == 0;
    bool svhn = strcmp (name, "svhn") == 0;
    return (nn_augment_t) { .augment = cifar || svhn, .crop_pad = DS_CROP_PAD,
                            .flip = cifar };
}

int
nn_dataset_shape (const char *name, int *h, int *w, int *c)
{
    assert (name && h && w && c);
    bool colour = strcmp (name, "cifar10") == 0 || strcmp (name, "svhn") == 0;
    bool grey = strcmp (name, "mnist") == 0 || strcmp (name, "fashion-mnist") == 0
             || strcmp (name, "synthetic") == 0;
    if (!colour && !grey)
        return -1;
    *h = *w = colour ? 32 : 28;
    *c = colour ? 3 : 1;
    return 0;
}

int
nn_dataset_pad (nn_dataset_t *self, int side, char *err, size_t err_size)
{
    assert (self && self->pixels);
    if (side < self->h || side < self->w || side > DS_PAD_MAX)
        return nn_errf (err, err_size, "dataset: pad_to %d: must be at least the image "
                        "side (%dx%d) and at most %d", side, self->h, self->w, DS_PAD_MAX);
    if (side == self->h && side == self->w)
        return 0;
    int top = (side - self->h) / 2, left = (side - self->w) / 2;
    size_t row = (size_t) self->w * self->c;
    size_t image = (size_t) side * side * self->c;
    uint8_t *pixels = nn_calloc ((size_t) (self->count > 0 ? self->count : 1), image);
    for (int i = 0; i < self->count; i++) {
        const uint8_t *src = self->pixels + (size_t) i * self->h * row;
        uint8_t *dst = pixels + (size_t) i * image;
        for (int y = 0; y < self->h; y++)
            memcpy (dst + ((size_t) (top + y) * side + left) * self->c, src + y * row, row);
    }
    nn_free (self->pixels);
    self->pixels = pixels;
    self->h = self->w = side;
    return 0;
}

//  ---------------------------------------------------------------------
//  Synthetic dataset

//  Class k owns cell k of a g x g grid (g = ceil(sqrt(classes))) and that
//  cell is bright. The pattern depends on the class only, not the seed, so
//  a train and a test set built with different seeds share it. Classes are
//  distinct whenever h and w are at least g.
static bool
s_in_class_block (int y, int x, int h, int w, int k, int grid)
{
    int row = k / grid, col = k % grid;
    return y >= row * h / grid && y < (row + 1) * h / grid
        && x >= col * w / grid && x < (col + 1) * w / grid;
}

static void
s_set_stats (nn_dataset_t *ds)
{
    size_t pixels = (size_t) ds->count * ds->h * ds->w;
    for (int ch = 0; ch < 3; ch++) {
        ds->mean[ch] = 0.0f;
        ds->std[ch] = 1.0f;
    }
    for (int ch = 0; ch < ds->c; ch++) {
        double sum = 0.0, sq = 0.0;
        for (size_t i = 0; i < pixels; i++) {
            double v = ds->pixels[i * ds->c + ch] / 255.0;
            sum += v;
            sq += v * v;
        }
        double mean = sum / pixels;
        double var = sq / pixels - mean * mean;
        ds->mean[ch] = (float) mean;
        ds->std[ch] = var > 1e-12 ? (float) sqrt (var) : 1.0f;
    }
}

nn_dataset_t *
nn_dataset_synthetic (int count, int h, int w, int c, int classes, uint64_t seed)
{
    assert (count > 0 && h > 0 && w > 0 && classes > 0 && classes <= 256);
    assert (c >= 1 && c <= 3);      //  mean/std hold three channels
    nn_dataset_t *ds = nn_calloc (1, sizeof *ds);
    *ds = (nn_dataset_t) { .count = count, .h = h, .w = w, .c = c,
                           .classes = classes };
    ds->pixels = nn_malloc ((size_t) count * h * w * c);
    ds->labels = nn_malloc ((size_t) count);
    int grid = (int) ceil (sqrt ((double) classes));
    nn_rng_t rng;
    nn_rng_seed (&rng, seed);
    uint8_t *p = ds->pixels;
    for (int i = 0; i < count; i++) {
        int k = (int) nn_rng_below (&rng, (uint32_t) classes);
        ds->labels[i] = (uint8_t) k;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int base = s_in_class_block (y, x, h, w, k, grid) ? 140 : 0;
                for (int ch = 0; ch < c; ch++)
                    *p++ = (uint8_t) (base + (int) nn_rng_below (&rng, 116));
            }
    }
    s_set_stats (ds);
    return ds;
}

//  ---------------------------------------------------------------------
//  Sharding

static int
s_check_shard_args (const nn_dataset_t *ds, nn_partition_t kind, int devices,
                    int device, int samples, double alpha,
                    char *err, size_t err_size)
{
    if (kind != NN_PARTITION_CONTIGUOUS && kind != NN_PARTITION_IID
    &&  kind != NN_PARTITION_DIRICHLET)
        return nn_errf (err, err_size, "shard: unknown partition kind %d", (int) kind);
    if (devices < 1)
        return nn_errf (err, err_size, "shard: devices must be >= 1, got %d", devices);
    if (device < 0 || device >= devices)
        return nn_errf (err, err_size, "shard: device must be in [0, %d), got %d",
                        devices, device);
    if (samples < devices)
        return nn_errf (err, err_size, "shard: %d samples cannot cover %d devices "
                        "(need samples >= devices)", samples, devices);
    if (kind == NN_PARTITION_DIRICHLET && !(alpha > 0.0 && isfinite (alpha)))
        return nn_errf (err, err_size, "shard: dirichlet alpha must be > 0, got %g",
                        alpha);
    return 0;
}

//  Slice [d*n/D, (d+1)*n/D) of order, or of 0..n-1 when order is NULL.
static int *
s_slice (const int *order, int n, int devices, int device, int *count_out)
{
    int begin = (int) ((long long) device * n / devices);
    int end = (int) ((long long) (device + 1) * n / devices);
    int *out = nn_malloc ((size_t) (end - begin) * sizeof *out);
    for (int i = begin; i < end; i++)
        out[i - begin] = order ? order[i] : i;
    *count_out = end - begin;
    return out;
}

static int *
s_shard_iid (int n, int devices, int device, const nn_rng_t *rng, int *count_out)
{
    nn_rng_t local = *rng;
    int *order = nn_malloc ((size_t) n * sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = i;
    nn_rng_shuffle_int (&local, order, n);
    int *out = s_slice (order, n, devices, device, count_out);
    nn_free (order);
    return out;
}

//  Splits one class's (shuffled) members among devices by proportions
//  drawn from Dir(alpha), writing each member's device into owner.
static void
s_dirichlet_class (int *owner, int *members, int m, int devices, double alpha,
                   double *props, nn_rng_t *rng)
{
    double sum = 0.0;
    for (int d = 0; d < devices; d++)
        sum += props[d] = nn_rng_gamma (rng, alpha);
    nn_rng_shuffle_int (rng, members, m);
    if (!(sum > 0.0)) {
        //  Every gamma draw underflowed (tiny alpha): one device takes all.
        for (int d = 0; d < devices; d++)
            props[d] = d == 0;
        sum = 1.0;
    }
    double cum = 0.0;
    int begin = 0;
    for (int d = 0; d < devices; d++) {
        cum += props[d];
        int end = d == devices - 1 ? m : (int) llround (cum / sum * m);
        if (end > m)
            end = m;
        if (end < begin)
            end = begin;
        for (int i = begin; i < end; i++)
            owner[members[i]] = d;
        begin = end;
    }
}

//  Small alpha can leave a device with nothing, which would stall it. Each
//  empty device takes one sample, the highest index of the currently
//  largest shard (lowest device on ties). This is deterministic, so every
//  device computes the same fix-up.
static void
s_fill_empty (int *owner, int n, int devices)
{
    int *sizes = nn_calloc ((size_t) devices, sizeof *sizes);
    for (int i = 0; i < n; i++)
        sizes[owner[i]]++;
    for (int d = 0; d < devices; d++) {
        if (sizes[d] > 0)
            continue;
        int largest = 0;
        for (int e = 1; e < devices; e++)
            if (sizes[e] > sizes[largest])
                largest = e;
        int i = n - 1;
        while (owner[i] != largest)
            i--;
        owner[i] = d;
        sizes[largest]--;
        sizes[d]++;
    }
    nn_free (sizes);
}

//  Returns the device's samples in ascending index order.
static int *
s_shard_dirichlet (const nn_dataset_t *ds, int n, int devices, int device,
                   double alpha, const nn_rng_t *rng, int *count_out)
{
    nn_rng_t local = *rng;
    int *owner = nn_malloc ((size_t) n * sizeof *owner);
    int *members = nn_malloc ((size_t) n * sizeof *members);
    double *props = nn_malloc ((size_t) devices * sizeof *props);
    for (int k = 0; k < ds->classes; k++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (ds->labels[i] == k)
                members[m++] = i;
        s_dirichlet_class (owner, members, m, devices, alpha, props, &local);
    }
    s_fill_empty (owner, n, devices);
    int count = 0;
    for (int i = 0; i < n; i++)
        if (owner[i] == device)
            members[count++] = i;
    int *out = nn_malloc ((size_t) count * sizeof *out);
    memcpy (out, members, (size_t) count * sizeof *out);
    *count_out = count;
    nn_free (owner);
    nn_free (members);
    nn_free (props);
    return out;
}

int *
nn_dataset_shard (const nn_dataset_t *ds, nn_partition_t kind, int devices,
                  int device, int samples, double alpha, const nn_rng_t *rng,
                  int *count_out, char *err, size_t err_size)
{
    assert (ds && count_out);
    int n = samples <= 0 || samples > ds->count ? ds->count : samples;
    *count_out = 0;
    if (s_check_shard_args (ds, kind, devices, device, n, alpha, err, err_size))
        return NULL;
    assert (rng || kind == NN_PARTITION_CONTIGUOUS);
    if (kind == NN_PARTITION_CONTIGUOUS)
        return s_slice (NULL, n, devices, device, count_out);
    if (kind == NN_PARTITION_IID)
        return s_shard_iid (n, devices, device, rng, count_out);
    return s_shard_dirichlet (ds, n, devices, device, alpha, rng, count_out);
}

//  ---------------------------------------------------------------------
//  Batches

//  One sample's placement: output (y, x) reads source (y + dy, sx + dx)
//  where sx mirrors x when flipped. This is RandomCrop(padding) followed by
//  RandomHorizontalFlip, as in the torchvision reference pipeline.
typedef struct {
    int dy, dx;
    bool flip;
} s_placement_t;

static s_placement_t
s_draw_placement (const nn_augment_t *aug, nn_rng_t *rng)
{
    s_placement_t pl = { 0, 0, false };
    if (!aug || !aug->augment)
        return pl;
    assert (rng && aug->crop_pad >= 0);
    int pad = aug->crop_pad;
    if (pad > 0) {
        pl.dy = (int) nn_rng_below (rng, (uint32_t) (2 * pad + 1)) - pad;
        pl.dx = (int) nn_rng_below (rng, (uint32_t) (2 * pad + 1)) - pad;
    }
    if (aug->flip)
        pl.flip = nn_rng_uniform (rng) < 0.5f;
    return pl;
}

//  out (h, w, c) from src (h, w, c); padding is pixel value 0, normalised
//  like any other pixel.
static void
s_place_sample (float *out, const uint8_t *src, const nn_dataset_t *ds,
                s_placement_t pl, const float lut[][256])
{
    int h = ds->h, w = ds->w, c = ds->c;
    for (int y = 0; y < h; y++) {
        int sy = y + pl.dy;
        for (int x = 0; x < w; x++) {
            int sx = (pl.flip ? w - 1 - x : x) + pl.dx;
            bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
            const uint8_t *p = inside ? src + ((size_t) sy * w + sx) * c : NULL;
            for (int ch = 0; ch < c; ch++)
                *out++ = lut[ch][p ? p[ch] : 0];
        }
    }
}

void
nn_dataset_batch (float *x, int *y, const nn_dataset_t *ds, const int *indices,
                  int n, const nn_augment_t *aug, nn_rng_t *rng)
{
    assert (x && y && ds && (indices || n == 0));
    assert (ds->c >= 1 && ds->c <= 3);
    float lut[3][256];
    for (int ch = 0; ch < ds->c; ch++)
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ((float) v / 255.0f - ds->mean[ch]) / ds->std[ch];
    size_t sample = (size_t) ds->h * ds->w * ds->c;
    for (int i = 0; i < n; i++) {
        int idx = indices[i];
        assert (idx >= 0 && idx < ds->count);
        s_placement_t pl = s_draw_placement (aug, rng);
        s_place_sample (x + (size_t) i * sample, ds->pixels + (size_t) idx * sample,
                        ds, pl, (const float (*)[256]) lut);
        y[i] = ds->labels[idx];
    }
}
