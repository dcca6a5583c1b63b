/*  nn_dataset_mat.c: MATLAB level-5 MAT file reader (see nn_dataset_mat.h).

    Layout (MathWorks, "MAT-File Format", level 5): a 128-byte header (116
    bytes of text, 8 of subsystem offset, a 2-byte version 0x0100 and the
    endian mark "IM" as written by a little-endian machine, "MI" by a
    big-endian one). Then top-level data elements. Inside an miMATRIX, in
    order: array flags (miUINT32, 8 bytes: class in the low byte, the
    complex flag 0x800), dimensions (miINT32, at least two), name (miINT8),
    real part (any numeric type: MATLAB stores a double array whose values
    fit as miUINT8, for example). Sub-elements are padded to 8 bytes; a
    top-level miCOMPRESSED element is not (scipy and MATLAB both start the
    next element right after its zlib stream).
*/
#include "nn_dataset_mat.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "nn_alloc.h"
#include "nn_dataset_base.h"

#define MAT_HEADER       128
#define MAT_VERSION_5    0x0100
#define MAT_VERSION_73   0x0200
#define MI_INT8          1
#define MI_UINT8         2
#define MI_INT16         3
#define MI_UINT16        4
#define MI_INT32         5
#define MI_UINT32        6
#define MI_SINGLE        7
#define MI_DOUBLE        9
#define MI_INT64         12
#define MI_UINT64        13
#define MI_MATRIX        14
#define MI_COMPRESSED    15
#define MI_UTF8          16
//  Deflate expands at most 1032:1 (a run of one byte).
#define MAT_DEFLATE_MAX_RATIO 1032LL
#define MAT_ZBUF         65536
#define MAT_CONVERT      4096       //  elements per piece in nn_mat_read_double

struct _nn_mat_t {
    char *path;
    FILE *file;
    long long size;         //  file size
    long long pos;          //  file offset of the next byte read from the file
    bool swap;              //  the file's byte order is not the host's
    //  The current top-level element.
    long long elem_at;      //  its file offset, for messages
    long long elem_end;     //  file offset of the element after it
    bool compressed;
    long long zsize;        //  compressed bytes of the element
    long long zin_left;     //  compressed bytes not yet given to inflate
    bool z_live;
    z_stream z;
    //  The current variable.
    long long left;         //  bytes of its miMATRIX not yet consumed
    int64_t real_left;      //  elements of its real part not yet read
    int real_type, real_size;
    long long real_pad;     //  padding after the real part
    bool real_small;        //  the real part is in small, not in the stream
    uint8_t small[4];
    size_t small_at;
    uint8_t zbuf[MAT_ZBUF];
};

//  ---------------------------------------------------------------------
//  Bytes in: from the file, or inflated from the current compressed element

static int
s_file_read (nn_mat_t *self, void *buf, size_t n, const char *what,
             char *err, size_t err_size)
{
    size_t got = fread (buf, 1, n, self->file);
    self->pos += (long long) got;
    if (got == n)
        return 0;
    if (ferror (self->file))
        return nn_errf (err, err_size, "mat: %s: read error: %s", self->path,
                        strerror (errno));
    return nn_errf (err, err_size, "mat: %s: truncated: %s at offset %lld needs %zu bytes, "
                    "the file ends after %zu", self->path, what, self->pos - (long long) got,
                    n, got);
}

static int
s_inflate_read (nn_mat_t *self, uint8_t *buf, size_t n, const char *what,
                char *err, size_t err_size)
{
    self->z.next_out = buf;
    self->z.avail_out = (uInt) n;
    while (self->z.avail_out > 0) {
        if (self->z.avail_in == 0) {
            if (self->zin_left == 0)
                return nn_errf (err, err_size, "mat: %s: compressed element at offset %lld "
                                "ends inside %s (%u bytes short)", self->path,
                                self->elem_at, what, self->z.avail_out);
            size_t chunk = self->zin_left < MAT_ZBUF ? (size_t) self->zin_left : MAT_ZBUF;
            if (s_file_read (self, self->zbuf, chunk, "compressed data", err, err_size))
                return -1;
            self->zin_left -= (long long) chunk;
            self->z.next_in = self->zbuf;
            self->z.avail_in = (uInt) chunk;
        }
        int rc = inflate (&self->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END && self->z.avail_out > 0)
            return nn_errf (err, err_size, "mat: %s: compressed element at offset %lld "
                            "ends inside %s (%u bytes short)", self->path, self->elem_at,
                            what, self->z.avail_out);
        if (rc == Z_STREAM_END)
            break;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && self->z.avail_in == 0))
            return nn_errf (err, err_size, "mat: %s: corrupt compressed element at offset "
                            "%lld: %s", self->path, self->elem_at,
                            self->z.msg ? self->z.msg : zError (rc));
    }
    return 0;
}

//  n bytes of the current element's content.
static int
s_in (nn_mat_t *self, void *buf, size_t n, const char *what, char *err, size_t err_size)
{
    if (!self->compressed)
        return n ? s_file_read (self, buf, n, what, err, err_size) : 0;
    //  zlib counts in uInt: larger reads go in pieces.
    for (size_t at = 0; at < n; at += (size_t) 1 << 30) {
        size_t piece = n - at < (size_t) 1 << 30 ? n - at : (size_t) 1 << 30;
        if (s_inflate_read (self, (uint8_t *) buf + at, piece, what, err, err_size))
            return -1;
    }
    return 0;
}

static void
s_swap (void *p, int size)
{
    uint8_t *b = p;
    for (int i = 0; i < size / 2; i++) {
        uint8_t t = b[i];
        b[i] = b[size - 1 - i];
        b[size - 1 - i] = t;
    }
}

static uint32_t
s_u32 (const nn_mat_t *self, const uint8_t *p)
{
    uint32_t v;
    memcpy (&v, p, 4);
    if (self->swap)
        s_swap (&v, 4);
    return v;
}

static int
s_elem_size (int type)
{
    switch (type) {
        case MI_INT8: case MI_UINT8: return 1;
        case MI_INT16: case MI_UINT16: return 2;
        case MI_INT32: case MI_UINT32: case MI_SINGLE: return 4;
        case MI_DOUBLE: case MI_INT64: case MI_UINT64: return 8;
        default: return 0;
    }
}

static long long
s_pad8 (long long n)
{
    return (8 - n % 8) % 8;
}

//  ---------------------------------------------------------------------
//  Opening

nn_mat_t *
nn_mat_open (const char *path, char *err, size_t err_size)
{
    long long size;
    int fd = nn_dataset_open_file (path, "mat", &size, err, err_size);
    if (fd < 0)
        return NULL;
    FILE *file = fdopen (fd, "rb");
    if (!file) {
        int errnum = errno;
        close (fd);
        nn_errf (err, err_size, "mat: %s: cannot open: %s", path, strerror (errnum));
        return NULL;
    }
    nn_mat_t *self = nn_calloc (1, sizeof *self);
    self->path = nn_strdup (path);
    self->file = file;
    self->size = size;
    uint8_t header[MAT_HEADER];
    if (size < MAT_HEADER) {
        nn_errf (err, err_size, "mat: %s: not a MAT file: %lld bytes, shorter than the "
                 "%d-byte level-5 header", path, size, MAT_HEADER);
        goto fail;
    }
    if (s_file_read (self, header, MAT_HEADER, "header", err, err_size))
        goto fail;
    uint16_t host_order = 1;
    bool host_le = *(uint8_t *) &host_order == 1;
    if (header[126] == 'I' && header[127] == 'M')
        self->swap = !host_le;
    else
    if (header[126] == 'M' && header[127] == 'I')
        self->swap = host_le;
    else {
        nn_errf (err, err_size, "mat: %s: not a MATLAB level-5 MAT file (no endian mark "
                 "\"IM\" or \"MI\" at byte 126)", path);
        goto fail;
    }
    uint16_t version;
    memcpy (&version, header + 124, 2);
    if (self->swap)
        s_swap (&version, 2);
    if (version == MAT_VERSION_73) {
        nn_errf (err, err_size, "mat: %s: a MATLAB v7.3 (HDF5) MAT file: not supported, "
                 "save it with -v7 (the format SVHN ships)", path);
        goto fail;
    }
    if (version != MAT_VERSION_5) {
        nn_errf (err, err_size, "mat: %s: unknown MAT version 0x%04x (level 5 is 0x0100)",
                 path, version);
        goto fail;
    }
    self->elem_end = self->pos;
    return self;
fail:
    nn_mat_destroy (&self);
    return NULL;
}

static void
s_end_inflate (nn_mat_t *self)
{
    if (self->z_live)
        inflateEnd (&self->z);
    self->z_live = false;
    self->compressed = false;
}

void
nn_mat_destroy (nn_mat_t **self_p)
{
    assert (self_p);
    nn_mat_t *self = *self_p;
    if (!self)
        return;
    s_end_inflate (self);
    if (self->file)
        fclose (self->file);
    nn_free (self->path);
    nn_free (self);
    *self_p = NULL;
}

//  ---------------------------------------------------------------------
//  Elements

//  Reads a tag of the current element's content; small-format elements
//  (byte count in the upper half of the first word) give their <= 4 bytes
//  of data in small and set *is_small. *padded_out is the bytes the
//  element takes after its tag, padding included (0 when small).
static int
s_tag (nn_mat_t *self, int *type_out, uint32_t *nbytes_out, uint8_t small[4],
       bool *is_small, long long *padded_out, const char *what, char *err, size_t err_size)
{
    uint8_t tag[8];
    if (s_in (self, tag, 8, what, err, err_size))
        return -1;
    uint32_t first = s_u32 (self, tag);
    if (first >> 16) {
        *type_out = (int) (first & 0xffff);
        *nbytes_out = first >> 16;
        if (*nbytes_out > 4)
            return nn_errf (err, err_size, "mat: %s: %s in element at offset %lld: "
                            "small-format element of %u bytes (at most 4)", self->path,
                            what, self->elem_at, *nbytes_out);
        memcpy (small, tag + 4, 4);
        *is_small = true;
        *padded_out = 0;
        return 0;
    }
    *is_small = false;
    *type_out = (int) first;
    *nbytes_out = s_u32 (self, tag + 4);
    *padded_out = (long long) *nbytes_out + s_pad8 (*nbytes_out);
    return 0;
}

//  A sub-element of the current matrix: its tag, bounds and data (into
//  buf, at most cap bytes). Consumes the padding too.
static int
s_sub (nn_mat_t *self, int want_type, uint8_t *buf, size_t cap, uint32_t *nbytes_out,
       const char *what, char *err, size_t err_size)
{
    if (self->left < 8)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld ends before its "
                        "%s", self->path, self->elem_at, what);
    int type;
    uint32_t nbytes;
    uint8_t small[4];
    bool is_small;
    long long padded;
    if (s_tag (self, &type, &nbytes, small, &is_small, &padded, what, err, err_size))
        return -1;
    self->left -= 8;
    bool name_type = want_type == MI_INT8 && (type == MI_UINT8 || type == MI_UTF8);
    if (type != want_type && !name_type)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: %s has data type "
                        "%d, expected %d", self->path, self->elem_at, what, type, want_type);
    if (nbytes > cap)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: %s of %u bytes "
                        "(at most %zu)", self->path, self->elem_at, what, nbytes, cap);
    if (padded > self->left)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: %s of %u bytes "
                        "exceeds the %lld bytes left of the variable", self->path,
                        self->elem_at, what, nbytes, self->left);
    if (is_small)
        memcpy (buf, small, nbytes);
    else {
        if (s_in (self, buf, nbytes, what, err, err_size))
            return -1;
        uint8_t pad[8];
        if (s_in (self, pad, (size_t) (padded - nbytes), what, err, err_size))
            return -1;
    }
    self->left -= padded;
    *nbytes_out = nbytes;
    return 0;
}

//  Positions the file after the current element, ending its inflate.
static int
s_leave_element (nn_mat_t *self, char *err, size_t err_size)
{
    s_end_inflate (self);
    self->real_left = 0;
    if (self->pos == self->elem_end)
        return 0;
    if (fseeko (self->file, (off_t) self->elem_end, SEEK_SET) != 0)
        return nn_errf (err, err_size, "mat: %s: cannot seek to offset %lld: %s",
                        self->path, self->elem_end, strerror (errno));
    self->pos = self->elem_end;
    return 0;
}

//  Enters the top-level element at the file position. Returns 1 when it
//  holds an miMATRIX (self->left set to its size), 0 when it is to be
//  skipped, -1 on error.
static int
s_enter_element (nn_mat_t *self, char *err, size_t err_size)
{
    self->elem_at = self->pos;
    long long rest = self->size - self->pos;
    if (rest < 8)
        return nn_errf (err, err_size, "mat: %s: truncated: %lld stray bytes at offset "
                        "%lld, too few for an element's tag", self->path, rest, self->pos);
    int type;
    uint32_t nbytes;
    uint8_t small[4];
    bool is_small;
    long long padded;
    if (s_tag (self, &type, &nbytes, small, &is_small, &padded, "element tag", err, err_size))
        return -1;
    rest -= 8;
    if ((long long) nbytes > rest)
        return nn_errf (err, err_size, "mat: %s: truncated: element at offset %lld claims "
                        "%u bytes, the file has %lld left", self->path, self->elem_at,
                        nbytes, rest);
    if (type == MI_COMPRESSED) {
        //  The zlib stream is not padded: the next element follows it.
        self->elem_end = self->pos + nbytes;
        memset (&self->z, 0, sizeof self->z);
        if (inflateInit (&self->z) != Z_OK)
            return nn_errf (err, err_size, "mat: %s: cannot start zlib", self->path);
        self->z_live = true;
        self->compressed = true;
        self->zsize = nbytes;
        self->zin_left = nbytes;
        if (s_tag (self, &type, &nbytes, small, &is_small, &padded, "compressed element's tag", err,
                   err_size))
            return -1;
        if ((long long) nbytes > self->zsize * MAT_DEFLATE_MAX_RATIO)
            return nn_errf (err, err_size, "mat: %s: compressed element at offset %lld "
                            "claims %u bytes, more than %lld compressed bytes can hold",
                            self->path, self->elem_at, nbytes, self->zsize);
    }
    else {
        long long end = self->pos + padded;
        self->elem_end = end < self->size ? end : self->size;
        self->zsize = 0;
    }
    self->left = type == MI_MATRIX ? (long long) nbytes : 0;
    return type == MI_MATRIX && !is_small;
}

static bool
s_numeric_class (int klass)
{
    return klass >= NN_MAT_CLASS_DOUBLE && klass <= 15;
}

//  Dimensions and their product, refused when the product cannot fit in
//  the variable (every element takes at least one byte).
static int
s_read_dims (nn_mat_t *self, nn_mat_var_t *var, char *err, size_t err_size)
{
    uint8_t buf[4 * NN_MAT_MAX_DIMS];
    uint32_t nbytes;
    if (s_sub (self, MI_INT32, buf, sizeof buf, &nbytes, "dimensions", err, err_size))
        return -1;
    if (nbytes % 4 || nbytes < 8)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: %u bytes of "
                        "dimensions (need two or more 4-byte values)", self->path,
                        self->elem_at, nbytes);
    var->ndims = (int) nbytes / 4;
    int64_t count = 1;
    for (int i = 0; i < var->ndims; i++) {
        int32_t d = (int32_t) s_u32 (self, buf + 4 * i);
        if (d < 0)
            return nn_errf (err, err_size, "mat: %s: variable at offset %lld: negative "
                            "dimension %d", self->path, self->elem_at, (int) d);
        var->dims[i] = d;
        count *= d;
        if (count > self->left)
            return nn_errf (err, err_size, "mat: %s: variable at offset %lld: dimensions "
                            "hold more elements than its %lld remaining bytes",
                            self->path, self->elem_at, self->left);
    }
    var->count = count;
    return 0;
}

//  Array flags, dimensions and name of the miMATRIX just entered; then, for
//  a numeric class, the real part's tag. Returns 1 for a numeric variable,
//  0 for one to skip.
static int
s_read_var (nn_mat_t *self, nn_mat_var_t *var, char *err, size_t err_size)
{
    memset (var, 0, sizeof *var);
    uint8_t flags[8];
    uint32_t nbytes;
    if (s_sub (self, MI_UINT32, flags, sizeof flags, &nbytes, "array flags", err, err_size))
        return -1;
    if (nbytes != 8)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: array flags of "
                        "%u bytes, expected 8", self->path, self->elem_at, nbytes);
    uint32_t word = s_u32 (self, flags);
    var->klass = (int) (word & 0xff);
    var->complex = (word & 0x800) != 0;
    if (s_read_dims (self, var, err, err_size))
        return -1;
    if (s_sub (self, MI_INT8, (uint8_t *) var->name, NN_MAT_NAME_MAX - 1, &nbytes, "name",
               err, err_size))
        return -1;
    var->name[nbytes] = 0;
    if (strlen (var->name) != nbytes)
        return nn_errf (err, err_size, "mat: %s: variable at offset %lld: name holds a NUL "
                        "byte", self->path, self->elem_at);
    if (!s_numeric_class (var->klass))
        return 0;
    //  The real part: any numeric data type, exactly count elements.
    int type;
    uint8_t small[4];
    bool is_small;
    long long padded;
    if (self->left < 8)
        return nn_errf (err, err_size, "mat: %s: variable '%s' at offset %lld has no real "
                        "part", self->path, var->name, self->elem_at);
    if (s_tag (self, &type, &nbytes, small, &is_small, &padded, "real part", err, err_size))
        return -1;
    self->left -= 8;
    var->data_type = type;
    var->elem_size = s_elem_size (type);
    if (var->elem_size == 0)
        return nn_errf (err, err_size, "mat: %s: variable '%s' at offset %lld: real part "
                        "of data type %d is not numeric", self->path, var->name,
                        self->elem_at, type);
    if ((int64_t) nbytes != var->count * var->elem_size)
        return nn_errf (err, err_size, "mat: %s: variable '%s' at offset %lld: dimensions "
                        "give %lld elements of %d bytes, the real part holds %u bytes",
                        self->path, var->name, self->elem_at, (long long) var->count,
                        var->elem_size, nbytes);
    if (!is_small && (long long) nbytes > self->left)
        return nn_errf (err, err_size, "mat: %s: variable '%s' at offset %lld: real part "
                        "of %u bytes exceeds the %lld bytes left of the variable",
                        self->path, var->name, self->elem_at, nbytes, self->left);
    self->real_left = var->count;
    self->real_type = type;
    self->real_size = var->elem_size;
    self->real_pad = padded - nbytes;
    //  scipy writes up to 4 bytes of data in the tag itself.
    self->real_small = is_small;
    self->small_at = 0;
    memcpy (self->small, small, sizeof small);
    return 1;
}

int
nn_mat_next (nn_mat_t *self, nn_mat_var_t *var, char *err, size_t err_size)
{
    assert (self && var);
    while (true) {
        if (s_leave_element (self, err, err_size))
            return -1;
        if (self->pos >= self->size)
            return 0;
        int rc = s_enter_element (self, err, err_size);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        rc = s_read_var (self, var, err, err_size);
        if (rc != 0)
            return rc;
    }
}

long long
nn_mat_compressed_size (const nn_mat_t *self)
{
    return self->compressed ? self->zsize : 0;
}

long long
nn_mat_budget (const nn_mat_t *self)
{
    return self->left;
}

int
nn_mat_read_raw (nn_mat_t *self, void *out, int64_t n, char *err, size_t err_size)
{
    assert (self && n >= 0 && n <= self->real_left);
    size_t bytes = (size_t) n * (size_t) self->real_size;
    if (self->real_small) {
        memcpy (out, self->small + self->small_at, bytes);
        self->small_at += bytes;
    }
    else {
        if (s_in (self, out, bytes, "real part", err, err_size))
            return -1;
        self->left -= (long long) bytes;
    }
    self->real_left -= n;
    if (self->swap && self->real_size > 1)
        for (int64_t i = 0; i < n; i++)
            s_swap ((uint8_t *) out + i * self->real_size, self->real_size);
    if (self->real_left == 0 && self->real_pad > 0) {
        //  The padding is not data: a stream that ends right after the
        //  data has given all there is.
        long long pad = self->real_pad < self->left ? self->real_pad : self->left;
        uint8_t sink[8];
        if (pad > 0 && s_in (self, sink, (size_t) pad, "padding", err, err_size))
            return -1;
        self->left -= pad;
        self->real_pad = 0;
    }
    return 0;
}

static double
s_to_double (const uint8_t *p, int type)
{
    switch (type) {
        case MI_INT8: { int8_t v; memcpy (&v, p, 1); return v; }
        case MI_UINT8: return *p;
        case MI_INT16: { int16_t v; memcpy (&v, p, 2); return v; }
        case MI_UINT16: { uint16_t v; memcpy (&v, p, 2); return v; }
        case MI_INT32: { int32_t v; memcpy (&v, p, 4); return v; }
        case MI_UINT32: { uint32_t v; memcpy (&v, p, 4); return v; }
        case MI_SINGLE: { float v; memcpy (&v, p, 4); return v; }
        case MI_DOUBLE: { double v; memcpy (&v, p, 8); return v; }
        case MI_INT64: { int64_t v; memcpy (&v, p, 8); return (double) v; }
        case MI_UINT64: { uint64_t v; memcpy (&v, p, 8); return (double) v; }
        default: assert (false); return 0.0;
    }
}

int
nn_mat_read_double (nn_mat_t *self, double *out, int64_t n, char *err, size_t err_size)
{
    assert (self && n >= 0 && n <= self->real_left);
    uint8_t piece[MAT_CONVERT * 8];
    for (int64_t at = 0; at < n; at += MAT_CONVERT) {
        int64_t m = n - at < MAT_CONVERT ? n - at : MAT_CONVERT;
        if (nn_mat_read_raw (self, piece, m, err, err_size))
            return -1;
        for (int64_t i = 0; i < m; i++)
            out[at + i] = s_to_double (piece + i * self->real_size, self->real_type);
    }
    return 0;
}
