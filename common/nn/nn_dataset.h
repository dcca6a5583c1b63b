/*  nn_dataset.h: image classification datasets, sharding, batches.

    Pixels stay in their stored 8-bit form (NHWC, (count, H, W, C)) and are
    normalised to float per batch, so a process holds the dataset at its
    size on disk. File readers are the only I/O of the core.

    Errors: functions that read files return NULL / -1 and write a message
    naming the file and the problem into err.
*/
#ifndef NN_DATASET_H_INCLUDED
#define NN_DATASET_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn_dataset_formats.h"
#include "nn_rng.h"

//  Named dataset from a directory: "fashion-mnist" and "mnist" read
//  {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; "cifar10" reads
//  data_batch_1..5.bin / test_batch.bin (also under cifar-10-batches-bin/);
//  "svhn" reads train_32x32.mat / test_32x32.mat.
//  train selects the training or test split. Sets mean/std to the dataset's
//  published values (SVHN: the reference's, ImageNet's statistics).
nn_dataset_t *nn_dataset_load_named (const char *name, const char *dir,
                                     bool train, int limit,
                                     char *err, size_t err_size);
//  nn_dataset_load_named keeping only the samples select picks, in its
//  order. IDX datasets never hold the others in memory; the others are
//  loaded whole, then cut down.
nn_dataset_t *nn_dataset_load_named_select (const char *name, const char *dir,
                                            bool train, int limit,
                                            nn_dataset_select_fn select, void *arg,
                                            char *err, size_t err_size);

//  Deterministic synthetic dataset: `count` samples of (h, w, c) with
//  `classes` classes, learnable (each class has a distinct pattern plus
//  noise) and identical for equal seeds.
nn_dataset_t *nn_dataset_synthetic (int count, int h, int w, int c, int classes,
                                    uint64_t seed);

typedef enum {
    NN_PARTITION_CONTIGUOUS = 0,    //  device d gets samples [d*n/D, (d+1)*n/D)
    NN_PARTITION_IID,               //  shuffled, equal sizes
    NN_PARTITION_DIRICHLET          //  per-class proportions ~ Dir(alpha)
} nn_partition_t;

//  Sample indices of device `device` out of `devices` for the first
//  `samples` samples of ds (samples <= 0 or > count means all). The same
//  rng state on every device gives disjoint shards covering the samples.
//  Returns an owned array (nn_free) and its length in *count_out; NULL with
//  a message if the arguments are invalid.
int *nn_dataset_shard (const nn_dataset_t *ds, nn_partition_t kind,
                       int devices, int device, int samples, double alpha,
                       const nn_rng_t *rng, int *count_out,
                       char *err, size_t err_size);

//  Pads every image in place to side x side (side >= h and >= w), centred
//  (an odd margin puts the extra row or column at the bottom or right),
//  with pixel value 0: black, before normalisation, as torchvision's Pad
//  ahead of ToTensor/Normalize, and the background of MNIST and
//  Fashion-MNIST. Lets every model take 28x28 digits as 32x32 (VGG11's
//  five 2x2 pools need 32). -1 with a message if side is smaller than the
//  images or larger than 1024.
int nn_dataset_pad (nn_dataset_t *self, int side, char *err, size_t err_size);

typedef struct {
    bool augment;           //  random crop with padding (+ flip if set)
    int crop_pad;           //  4 in the reference
    bool flip;              //  random horizontal flip
} nn_augment_t;

//  The training transform pipelearn uses for a named dataset when the
//  config leaves it to the dataset: CIFAR-10 random crop (4-pixel padding)
//  and horizontal flip, as the reference; SVHN the crop without the flip (a
//  mirrored digit is another glyph); MNIST, Fashion-MNIST and synthetic
//  none (docs/datasets.md gives the measurements behind this). crop_pad is
//  4 for every name; an unknown name gives no augmentation.
nn_augment_t nn_dataset_augment_default (const char *name);

//  The image shape a named dataset's files hold (before any padding):
//  28x28x1 for "mnist", "fashion-mnist" and "synthetic", 32x32x3 for
//  "cifar10" and "svhn". -1 for an unknown name.
int nn_dataset_shape (const char *name, int *h, int *w, int *c);

//  Assemble n samples ds[indices[i]] into x (n, h, w, c) float, normalised
//  ((p/255 - mean) / std), with augmentation drawn from rng when
//  aug->augment (aug may be NULL). Labels go to y (n).
void nn_dataset_batch (float *x, int *y, const nn_dataset_t *ds,
                       const int *indices, int n, const nn_augment_t *aug,
                       nn_rng_t *rng);

#endif
