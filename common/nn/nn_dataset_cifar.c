/*  nn_dataset_cifar.c: CIFAR-10 binary batch reader.

    A batch file is a bare sequence of 3073-byte records: one label byte and
    a 32x32 image stored channel-planar (1024 R, 1024 G, 1024 B, each plane
    row-major). The core keeps pixels NHWC, so records are transposed here.
    The dataset is allocated from the files' sizes (regular files only), so
    nothing is allocated that the files do not hold.
*/
#include "nn_dataset_formats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"

#define CIFAR_SIDE      32
#define CIFAR_CHANNELS  3
#define CIFAR_PLANE     (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_IMAGE     (CIFAR_PLANE * CIFAR_CHANNELS)
#define CIFAR_RECORD    (1 + CIFAR_IMAGE)
#define CIFAR_CLASSES   10
#define CIFAR_MAX_COUNT 10000000LL

//  Records in one file, from its size; -1 with a message if the size is not
//  a whole number of records (the file was cut short) or it holds none.
static long long
s_file_records (const char *path, char *err, size_t err_size)
{
    struct stat st;
    if (stat (path, &st) != 0)
        return nn_errf (err, err_size, "cifar10: %s: cannot open: %s", path,
                        strerror (errno));
    if (!S_ISREG (st.st_mode))
        return nn_errf (err, err_size, "cifar10: %s: not a regular file", path);
    long long size = (long long) st.st_size;
    if (size == 0)
        return nn_errf (err, err_size, "cifar10: %s: empty file", path);
    if (size % CIFAR_RECORD != 0)
        return nn_errf (err, err_size,
                        "cifar10: %s: truncated: size %lld is not a multiple of "
                        "the %d-byte record", path, size, CIFAR_RECORD);
    return size / CIFAR_RECORD;
}

//  Total records over all files; sizes are checked before allocating.
static long long
s_total_records (const char *const *paths, int paths_count,
                 char *err, size_t err_size)
{
    long long total = 0;
    for (int i = 0; i < paths_count; i++) {
        long long n = s_file_records (paths[i], err, err_size);
        if (n < 0)
            return -1;
        total += n;
        if (total > CIFAR_MAX_COUNT)
            return nn_errf (err, err_size, "cifar10: %s: absurd total of %lld "
                            "records (max %lld)", paths[i], total, CIFAR_MAX_COUNT);
    }
    return total;
}

static void
s_planar_to_hwc (uint8_t *out, const uint8_t *planar)
{
    for (int p = 0; p < CIFAR_PLANE; p++)
        for (int ch = 0; ch < CIFAR_CHANNELS; ch++)
            out[p * CIFAR_CHANNELS + ch] = planar[ch * CIFAR_PLANE + p];
}

//  Reads `want` records of path into ds starting at sample `first`.
static int
s_read_file (nn_dataset_t *ds, int first, int want, const char *path,
             char *err, size_t err_size)
{
    //  The path may have changed since s_file_records looked at it: refuse
    //  anything but a regular file again, without trusting its size (short
    //  reads are caught below).
    long long size;
    int fd = nn_dataset_open_file (path, "cifar10", &size, err, err_size);
    if (fd < 0)
        return -1;
    FILE *file = fdopen (fd, "rb");
    if (!file) {
        int errnum = errno;
        close (fd);
        return nn_errf (err, err_size, "cifar10: %s: cannot open: %s", path,
                        strerror (errnum));
    }
    uint8_t record[CIFAR_RECORD];
    int rc = 0;
    for (int r = 0; r < want && rc == 0; r++) {
        size_t got = fread (record, 1, sizeof record, file);
        if (got != sizeof record)
            rc = nn_errf (err, err_size,
                          "cifar10: %s: truncated: record %d: expected %d bytes, got %zu",
                          path, r, CIFAR_RECORD, got);
        else if (record[0] >= CIFAR_CLASSES)
            rc = nn_errf (err, err_size,
                          "cifar10: %s: label %d of record %d out of range (classes %d)",
                          path, record[0], r, CIFAR_CLASSES);
        else {
            ds->labels[first + r] = record[0];
            s_planar_to_hwc (ds->pixels + (size_t) (first + r) * CIFAR_IMAGE,
                             record + 1);
        }
    }
    fclose (file);
    return rc;
}

static nn_dataset_t *
s_dataset_new (int count)
{
    static const float mean[3] = { 0.4914f, 0.4822f, 0.4465f };
    static const float std[3] = { 0.2023f, 0.1994f, 0.2010f };
    nn_dataset_t *ds = nn_calloc (1, sizeof *ds);
    ds->count = count;
    ds->h = ds->w = CIFAR_SIDE;
    ds->c = CIFAR_CHANNELS;
    ds->classes = CIFAR_CLASSES;
    ds->pixels = nn_malloc ((size_t) count * CIFAR_IMAGE);
    ds->labels = nn_malloc ((size_t) count);
    memcpy (ds->mean, mean, sizeof mean);
    memcpy (ds->std, std, sizeof std);
    return ds;
}

nn_dataset_t *
nn_dataset_load_cifar10 (const char *const *paths, int paths_count,
                         int limit, char *err, size_t err_size)
{
    if (paths_count < 1) {
        nn_errf (err, err_size, "cifar10: no batch files given");
        return NULL;
    }
    long long total = s_total_records (paths, paths_count, err, err_size);
    if (total < 0)
        return NULL;
    int count = limit > 0 && limit < total ? limit : (int) total;
    nn_dataset_t *ds = s_dataset_new (count);
    int filled = 0;
    for (int i = 0; i < paths_count && filled < count; i++) {
        //  Sizes were validated above; a file that changed since is caught
        //  by the short read in s_read_file.
        int want = (int) s_file_records (paths[i], err, err_size);
        if (want < 0)
            goto fail;
        if (want > count - filled)
            want = count - filled;
        if (s_read_file (ds, filled, want, paths[i], err, err_size))
            goto fail;
        filled += want;
    }
    return ds;
fail:
    nn_dataset_destroy (&ds);
    return NULL;
}
