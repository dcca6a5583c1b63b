/*  nn_alloc.h: the one allocation wrapper of the training core, and the
    error-message helper every fallible core function uses.

    Out of memory is not an error a caller can handle here: nn_malloc and
    friends abort (STYLE 3). Everything a file or a peer controls is reported
    through an error buffer instead: functions that can fail take
    `char *err, size_t err_size`, return NULL or -1, and write one line that
    names what failed ("idx: /x/train-images: truncated: ..."). err may be NULL.
*/
#ifndef NN_ALLOC_H_INCLUDED
#define NN_ALLOC_H_INCLUDED

#include <stddef.h>

#define NN_ERR_SIZE 512

//  Allocate size bytes (never NULL; aborts on exhaustion). size 0 gives a
//  valid unique pointer. Free with nn_free.
void *nn_malloc (size_t size);
//  Zeroed array of count elements of size bytes; aborts on overflow.
void *nn_calloc (size_t count, size_t size);
//  64-byte aligned, zeroed; for tensors and slabs. Free with nn_free.
void *nn_alloc_aligned (size_t size);
//  Resize; aborts on exhaustion.
void *nn_realloc (void *ptr, size_t size);
void nn_free (void *ptr);
//  strdup that aborts on exhaustion.
char *nn_strdup (const char *s);

//  Format an error message into err (if not NULL). Returns -1 so callers
//  can write `return nn_errf (err, n, "...")`.
int nn_errf (char *err, size_t err_size, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
