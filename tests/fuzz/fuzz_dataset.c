/*  fuzz_dataset.c: libFuzzer harness for the dataset files pipelearn reads
    that no Debian package vouches for: SVHN's MAT files
    (nn_dataset_load_svhn over the level-5 MAT reader) and CIFAR-10 binary
    batches (nn_dataset_load_cifar10).

    Input: [selector u8][file bytes]. Selector bit 0: 0 SVHN, 1 CIFAR-10;
    bit 1: load with limit 1 (the reader stops early) instead of all. The
    file goes into a memfd read through /proc/self/fd/N, as from a disk.

    Contracts checked besides "no crash, no leak, no UB":
    - a failed load says why, naming the file;
    - a loaded dataset has a sane shape (count >= 1, within the limit,
      1..3 channels, 10 classes), labels below classes, and every pixel is
      read (so ASan checks the allocation covers the shape).
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "nn_alloc.h"
#include "nn_dataset.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define S_SEL_CIFAR 1u
#define S_SEL_LIMIT 2u

static void
s_check (const nn_dataset_t *ds, int limit)
{
    if (ds->count < 1 || (limit > 0 && ds->count > limit))
        fuzz_die ("loaded %d samples (limit %d)", ds->count, limit);
    if (ds->h < 1 || ds->w < 1 || ds->c < 1 || ds->c > 3 || ds->classes != 10)
        fuzz_die ("loaded shape %dx%dx%d, %d classes", ds->h, ds->w, ds->c, ds->classes);
    size_t bytes = (size_t) ds->count * ds->h * ds->w * ds->c;
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; i++)
        sum += ds->pixels[i];
    for (int i = 0; i < ds->count; i++)
        if (ds->labels[i] >= ds->classes)
            fuzz_die ("label %d at %d", ds->labels[i], i);
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_dataset: %d x %dx%dx%d, pixel sum %u\n", ds->count, ds->h,
                 ds->w, ds->c, sum);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    int fd = memfd_create ("dataset", MFD_CLOEXEC);
    if (fd < 0)
        fuzz_die ("memfd_create failed");
    if (size > 1 && write (fd, data + 1, size - 1) != (ssize_t) (size - 1))
        fuzz_die ("memfd write failed");
    char path[64];
    snprintf (path, sizeof path, "/proc/self/fd/%d", fd);
    int limit = sel & S_SEL_LIMIT ? 1 : 0;
    char err[NN_ERR_SIZE] = "";
    nn_dataset_t *ds;
    if (sel & S_SEL_CIFAR) {
        const char *paths[1] = { path };
        ds = nn_dataset_load_cifar10 (paths, 1, limit, err, sizeof err);
    }
    else
        ds = nn_dataset_load_svhn (path, limit, err, sizeof err);
    if (ds)
        s_check (ds, limit);
    else
    if (!strstr (err, path))
        fuzz_die ("failed load without the file in its message: \"%s\"", err);
    else
    if (fuzz_verbose ())
        fprintf (stderr, "fuzz_dataset: %s\n", err);
    nn_dataset_destroy (&ds);
    close (fd);
    return 0;
}
