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

#include "nn_rng.h"

typedef struct {
    int count;              //  samples
    int h, w, c;            //  per-sample shape (NHWC)
    int classes;
    uint8_t *pixels;        //  (count, h, w, c), owned
    uint8_t *labels;        //  (count), each < classes, owned
    float mean[3], std[3];  //  per-channel normalisation (of pixel/255)
} nn_dataset_t;

void nn_dataset_destroy (nn_dataset_t **self_p);

//  Opens path read-only if it is a regular file: a FIFO would block the
//  open (it is opened O_NONBLOCK to look), a device never ends, and only a
//  regular file has a size that bounds what may be allocated for it.
//  Returns the descriptor (the caller's to close) and the size in
//  *size_out; -1 with "<what>: <path>: <reason>" in err.
int nn_dataset_open_file (const char *path, const char *what, long long *size_out,
                          char *err, size_t err_size);

//  Chooses the samples a load keeps, given the dataset before its pixels
//  are read (count, shape, classes, labels, mean/std set; pixels NULL for
//  IDX files, which stream, already loaded for the others). Uses labels only.
//  Returns an owned (nn_malloc) array of distinct indices in [0, count), in
//  the order wanted, and its length in *count_out; NULL with a message in
//  err fails the load.
typedef int *(*nn_dataset_select_fn) (const nn_dataset_t *unloaded, int *count_out,
                                      void *arg, char *err, size_t err_size);

//  MNIST IDX pair (idx3 ubyte images, idx1 ubyte labels), plain or gzip
//  (detected by content, not name). limit > 0 keeps the first `limit`
//  samples. classes is 10. Checks magic, dimensions, truncation, label
//  range, and that the two files agree on the count.
nn_dataset_t *nn_dataset_load_idx (const char *images_path,
                                   const char *labels_path, int limit,
                                   char *err, size_t err_size);
//  The same keeping only the samples select picks (in its order): the
//  labels are read first, then the images stream past and only the picked
//  ones are kept, so a device holds its shard, not the whole file.
nn_dataset_t *nn_dataset_load_idx_select (const char *images_path,
                                          const char *labels_path, int limit,
                                          nn_dataset_select_fn select, void *arg,
                                          char *err, size_t err_size);

//  CIFAR-10 binary batches (records of 1 label byte + 3072 CHW bytes),
//  one or more files concatenated in order; converted to HWC on load.
nn_dataset_t *nn_dataset_load_cifar10 (const char *const *paths, int paths_count,
                                       int limit, char *err, size_t err_size);

//  SVHN cropped digits: one MATLAB level-5 MAT file (train_32x32.mat or
//  test_32x32.mat as shipped, compressed or not) holding X, uint8
//  H x W x C x N in MATLAB's column-major order, and y, N x 1 labels
//  1..10 (double or uint8; 10 is the digit 0, stored as label 0). Images
//  come out NHWC. limit > 0 keeps the first `limit` samples. Every size in
//  the file is checked against the file before anything is allocated.
nn_dataset_t *nn_dataset_load_svhn (const char *path, int limit,
                                    char *err, size_t err_size);

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
