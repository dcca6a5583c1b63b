/*  pl_files.c: results files written whole or not at all. See pl_files.h. */
#include "pl_files.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nn_alloc.h"
#include "pl_clock.h"
#include "pl_log.h"

int
pl_mkdirs (const char *path, char *err, size_t err_size)
{
    char buf[1024];
    if (snprintf (buf, sizeof buf, "%s", path) >= (int) sizeof buf)
        return nn_errf (err, err_size, "%s: path too long", path);
    for (char *p = buf + 1; ; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir (buf, 0755) && errno != EEXIST)
                return nn_errf (err, err_size, "%s: cannot create directory: %s", buf,
                                strerror (errno));
            if (end)
                break;
            *p = '/';
        }
    }
    return 0;
}

bool
pl_fd_wait (double *deadline)
{
    int e = errno;
    if (e != EMFILE && e != ENFILE)
        return false;
    double now = pl_monotonic ();
    if (*deadline == 0.0) {
        *deadline = now + PL_FD_WAIT_S;
        pl_log_warn ("out of file descriptors (%s); waiting up to %.0f s for one",
                     strerror (e), PL_FD_WAIT_S);
    }
    if (now >= *deadline)
        return false;
    nanosleep (&(struct timespec) { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 }, NULL);
    errno = e;
    return true;
}

int
pl_write_file_atomic (const char *path, const char *data, size_t size, char *err,
                      size_t err_size)
{
    char tmp[1100];
    if (snprintf (tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int) sizeof tmp)
        return nn_errf (err, err_size, "%s: path too long", path);
    double deadline = 0.0;
    int fd;
    while ((fd = mkstemp (tmp)) < 0 && pl_fd_wait (&deadline))
        snprintf (tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    if (fd < 0)
        return nn_errf (err, err_size, "%s: cannot create: %s", path, strerror (errno));
    size_t done = 0;
    while (done < size) {
        ssize_t n = write (fd, data + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close (fd);
            unlink (tmp);
            return nn_errf (err, err_size, "%s: write failed: %s", path, strerror (e));
        }
        done += (size_t) n;
    }
    if (fsync (fd) || close (fd)) {
        int e = errno;
        unlink (tmp);
        return nn_errf (err, err_size, "%s: fsync failed: %s", path, strerror (e));
    }
    if (chmod (tmp, 0644) || rename (tmp, path)) {
        int e = errno;
        unlink (tmp);
        return nn_errf (err, err_size, "%s: rename failed: %s", path, strerror (e));
    }
    char dir[1100];
    snprintf (dir, sizeof dir, "%s", path);
    int dfd = open (dirname (dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync (dfd);
        close (dfd);
    }
    return 0;
}
