/*  nn_dataset_formats.h: the file readers, one per format (IDX in
    nn_dataset_idx.c, CIFAR-10 in nn_dataset_cifar.c, SVHN's MAT file in
    nn_dataset_svhn.c). nn_dataset_load_named (nn_dataset.h) picks one by
    the dataset's name.
*/
#ifndef NN_DATASET_FORMATS_H_INCLUDED
#define NN_DATASET_FORMATS_H_INCLUDED

#include "nn_dataset_base.h"

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

#endif
