/*  nn_dataset_mat.h: a reader of MATLAB level-5 MAT files (private to the
    dataset readers: nn_dataset_svhn.c reads SVHN's X and y through it).

    Level 5 ("-v6" and "-v7", what MATLAB and scipy.io.savemat write): a
    128-byte header, then data elements, each a tag (type, byte count; or the
    small format: both in 4 bytes, data in the next 4) and its data, padded
    to 8 bytes. A variable is an miMATRIX element holding array flags
    (class), dimensions, name and real part; -v7 wraps each variable in an
    miCOMPRESSED element (a zlib stream holding the miMATRIX element). The
    reader streams: a variable's real part is read in pieces the caller asks
    for, so a 200 MB compressed array is never held twice.

    Everything here is file content: malformed input is reported through err
    ("mat: PATH: ..."), never asserted. Every byte count is checked against
    what encloses it (the file, the compressed element, the matrix) before it
    is trusted, so a lying header fails as a clear error, not an allocation.
*/
#ifndef NN_DATASET_MAT_H_INCLUDED
#define NN_DATASET_MAT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _nn_mat_t nn_mat_t;

//  MATLAB array classes (mxCLASS_ID) the readers name.
#define NN_MAT_CLASS_DOUBLE 6
#define NN_MAT_CLASS_SINGLE 7
#define NN_MAT_CLASS_UINT8  9
#define NN_MAT_MAX_DIMS     8
#define NN_MAT_NAME_MAX     64

//  One variable's header, valid until the next nn_mat_next.
typedef struct {
    char name[NN_MAT_NAME_MAX];     //  "" if the variable has no name
    int klass;                      //  mxCLASS_ID
    bool complex;
    int ndims;
    int64_t dims[NN_MAT_MAX_DIMS];  //  column-major, as MATLAB gives them
    int64_t count;                  //  product of dims (bounded, see .c)
    int data_type;                  //  miUINT8, miDOUBLE, ... of the real part
    int elem_size;                  //  bytes per element of data_type
} nn_mat_var_t;

//  Opens path and checks the 128-byte header. NULL with a message (a v7.3
//  HDF5 file and a level-4 file are named as such).
nn_mat_t *nn_mat_open (const char *path, char *err, size_t err_size);
void nn_mat_destroy (nn_mat_t **self_p);

//  Advances to the next numeric variable and reads its header up to the
//  real part (other elements and non-numeric arrays are skipped). Returns 1
//  with *var filled, 0 at the end of the file, -1 with a message.
int nn_mat_next (nn_mat_t *self, nn_mat_var_t *var, char *err, size_t err_size);

//  Bytes of compressed input behind the current variable (0 if it is not
//  compressed): deflate expands at most 1032:1, so a real part larger than
//  1032 times this is a lie and can be refused before allocating for it.
long long nn_mat_compressed_size (const nn_mat_t *self);
//  Bytes the current variable's real part may still hold according to the
//  file (uncompressed) or its enclosing element (compressed).
long long nn_mat_budget (const nn_mat_t *self);

//  Reads the next n elements of the current variable's real part as raw
//  bytes (n * elem_size, in file byte order swapped to the host's).
int nn_mat_read_raw (nn_mat_t *self, void *out, int64_t n, char *err, size_t err_size);
//  Reads the next n elements converted to double (any numeric data type).
int nn_mat_read_double (nn_mat_t *self, double *out, int64_t n,
                        char *err, size_t err_size);

#endif
