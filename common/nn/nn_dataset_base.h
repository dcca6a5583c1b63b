/*  nn_dataset_base.h: the dataset value and what every file reader
    shares: freeing it, opening a file safely, the choice of samples a
    load keeps. The readers (nn_dataset_formats.h) and the named datasets,
    sharding and batches (nn_dataset.h) build on it.
*/
#ifndef NN_DATASET_BASE_H_INCLUDED
#define NN_DATASET_BASE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

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

#endif
