/*  pl_files.h: directories and whole-file writes for results and
    checkpoints, patient with a shortage of file descriptors. */
#ifndef PL_FILES_H_INCLUDED
#define PL_FILES_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

//  mkdir -p; 0 or -1 with a message.
int pl_mkdirs (const char *path, char *err, size_t err_size);
//  Longest a results write waits for a file descriptor (pl_fd_wait).
#define PL_FD_WAIT_S 10.0
//  After an open/mkstemp that failed: true when it failed for want of a
//  file descriptor (EMFILE, ENFILE) and *deadline (a pl_monotonic second;
//  0 sets it PL_FD_WAIT_S ahead) has not passed, after a short sleep: try
//  again. Connections that never finish their handshake hold descriptors
//  until libzmq closes them (ZMQ_HANDSHAKE_IVL); a result waits for that
//  rather than being lost. errno is kept.
bool pl_fd_wait (double *deadline);
//  Write a whole file atomically (temporary file, fsync, rename); waits
//  for a file descriptor as pl_fd_wait says.
int pl_write_file_atomic (const char *path, const char *data, size_t size,
                          char *err, size_t err_size);

#endif
