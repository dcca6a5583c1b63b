/*  nn_dataset_base.c: freeing a dataset, opening its files. See
    nn_dataset_base.h.
*/
#include "nn_dataset_base.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_alloc.h"

void
nn_dataset_destroy (nn_dataset_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        nn_free ((*self_p)->pixels);
        nn_free ((*self_p)->labels);
        nn_free (*self_p);
        *self_p = NULL;
    }
}

int
nn_dataset_open_file (const char *path, const char *what, long long *size_out,
                      char *err, size_t err_size)
{
    int fd = open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return nn_errf (err, err_size, "%s: %s: cannot open: %s", what, path,
                        strerror (errno));
    struct stat st;
    int rc = fstat (fd, &st);
    int errnum = errno;
    if (rc != 0 || !S_ISREG (st.st_mode)) {
        close (fd);
        return rc != 0 ? nn_errf (err, err_size, "%s: %s: cannot stat: %s", what, path,
                                  strerror (errnum))
                       : nn_errf (err, err_size, "%s: %s: not a regular file", what, path);
    }
    *size_out = (long long) st.st_size;
    return fd;
}
