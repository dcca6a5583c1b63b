/*  nn_dataset_svhn.c: SVHN's cropped-digit files (train_32x32.mat,
    test_32x32.mat) as http://ufldl.stanford.edu/housenumbers/ ships them.

    Each is a MATLAB level-5 MAT file (read by nn_dataset_mat.c) holding
    X, uint8 of dimensions 32x32x3xN, and y, N x 1 labels 1..10 where 10 is
    the digit 0 (double in the shipped files; uint8 accepted). MATLAB is
    column-major: X(h, w, c, n) sits at h + H (w + W (c + C n)), so each
    image is three planes stored column by column. The core keeps NHWC
    (row-major per image), so images are transposed as they stream in.
*/
#include "nn_dataset_formats.h"

#include <string.h>

#include "nn_alloc.h"
#include "nn_dataset_mat.h"

#define SVHN_CLASSES    10
#define SVHN_MAX_SIDE   1024
#define SVHN_MAX_COUNT  10000000LL
#define SVHN_CHUNK      ((size_t) 1 << 20)      //  bytes of X read per piece
#define SVHN_LABELS     4096                    //  labels converted per piece

typedef struct {
    const char *path;
    int limit;
    nn_dataset_t *ds;       //  shape and pixels once X is read
    int64_t x_count;        //  -1 until X is seen
    uint8_t *labels;
    int64_t y_count;        //  -1 until y is seen
} s_svhn_t;

static const char *
s_class_name (int klass)
{
    static const char *names[] = { "unknown", "cell", "struct", "object", "char",
                                   "sparse", "double", "single", "int8", "uint8",
                                   "int16", "uint16", "int32", "uint32", "int64",
                                   "uint64" };
    return klass >= 0 && klass < (int) (sizeof names / sizeof names[0]) ? names[klass]
                                                                        : "unknown";
}

//  One image from MATLAB's column-major planes to row-major HWC.
static void
s_image_to_hwc (uint8_t *out, const uint8_t *col, int h, int w, int c)
{
    for (int ch = 0; ch < c; ch++)
        for (int x = 0; x < w; x++)
            for (int y = 0; y < h; y++)
                out[((size_t) y * w + x) * c + ch] = *col++;
}

static int
s_read_images (s_svhn_t *s, nn_mat_t *mat, const nn_mat_var_t *var,
               char *err, size_t err_size)
{
    if (s->x_count >= 0)
        return nn_errf (err, err_size, "svhn: %s: two variables named X", s->path);
    if (var->klass != NN_MAT_CLASS_UINT8 || var->complex || var->elem_size != 1)
        return nn_errf (err, err_size, "svhn: %s: X is a %s%s array stored in %d-byte "
                        "elements, expected uint8 images", s->path,
                        var->complex ? "complex " : "", s_class_name (var->klass),
                        var->elem_size);
    //  MATLAB drops trailing singleton dimensions: one image is H x W x C.
    int64_t n = var->ndims == 4 ? var->dims[3] : 1;
    if ((var->ndims != 3 && var->ndims != 4)
    ||  var->dims[0] < 1 || var->dims[0] > SVHN_MAX_SIDE
    ||  var->dims[1] < 1 || var->dims[1] > SVHN_MAX_SIDE
    ||  var->dims[2] < 1 || var->dims[2] > 3 || n < 1 || n > SVHN_MAX_COUNT)
        return nn_errf (err, err_size, "svhn: %s: X has %d dimensions (%lld x %lld x ...), "
                        "expected H x W x C x N with H, W in 1..%d, C in 1..3, N in "
                        "1..%lld", s->path, var->ndims, (long long) var->dims[0],
                        (long long) var->dims[1], SVHN_MAX_SIDE, SVHN_MAX_COUNT);
    int h = (int) var->dims[0], w = (int) var->dims[1], c = (int) var->dims[2];
    size_t image = (size_t) h * w * c;
    //  nn_mat bounded count by the variable's size, which the file (or
    //  deflate's ratio) bounds: what is allocated here the file can hold.
    int64_t keep = s->limit > 0 && s->limit < n ? s->limit : n;
    nn_dataset_t *ds = nn_calloc (1, sizeof *ds);
    *ds = (nn_dataset_t) { .count = (int) keep, .h = h, .w = w, .c = c,
                           .classes = SVHN_CLASSES };
    ds->pixels = nn_malloc (image * (size_t) keep);
    s->ds = ds;
    s->x_count = n;
    size_t per_piece = SVHN_CHUNK / image + 1;
    uint8_t *piece = nn_malloc (image * per_piece);
    int rc = 0;
    for (int64_t at = 0; at < keep && rc == 0; at += (int64_t) per_piece) {
        int64_t m = keep - at < (int64_t) per_piece ? keep - at : (int64_t) per_piece;
        rc = nn_mat_read_raw (mat, piece, m * (int64_t) image, err, err_size);
        for (int64_t i = 0; i < m && rc == 0; i++)
            s_image_to_hwc (ds->pixels + (size_t) (at + i) * image, piece + i * image,
                            h, w, c);
    }
    nn_free (piece);
    return rc;
}

static int
s_read_labels (s_svhn_t *s, nn_mat_t *mat, const nn_mat_var_t *var,
               char *err, size_t err_size)
{
    if (s->y_count >= 0)
        return nn_errf (err, err_size, "svhn: %s: two variables named y", s->path);
    if ((var->klass != NN_MAT_CLASS_DOUBLE && var->klass != NN_MAT_CLASS_UINT8)
    ||  var->complex)
        return nn_errf (err, err_size, "svhn: %s: y is a %s%s array, expected double or "
                        "uint8 labels", s->path, var->complex ? "complex " : "",
                        s_class_name (var->klass));
    if (var->ndims != 2 || (var->dims[0] != 1 && var->dims[1] != 1) || var->count < 1
    ||  var->count > SVHN_MAX_COUNT)
        return nn_errf (err, err_size, "svhn: %s: y has dimensions %lld x %lld%s, expected "
                        "N x 1", s->path, (long long) var->dims[0],
                        (long long) var->dims[1], var->ndims > 2 ? " x ..." : "");
    int64_t n = var->count;
    s->labels = nn_malloc ((size_t) n);
    s->y_count = n;
    double values[SVHN_LABELS];
    for (int64_t at = 0; at < n; at += SVHN_LABELS) {
        int64_t m = n - at < SVHN_LABELS ? n - at : SVHN_LABELS;
        if (nn_mat_read_double (mat, values, m, err, err_size))
            return -1;
        for (int64_t i = 0; i < m; i++) {
            double v = values[i];
            //  Written so that NaN fails too.
            if (!(v >= 1.0 && v <= 10.0) || v != (double) (int) v)
                return nn_errf (err, err_size, "svhn: %s: label y(%lld) = %g out of range "
                                "(1..10, 10 is the digit 0)", s->path,
                                (long long) (at + i + 1), v);
            s->labels[at + i] = (uint8_t) ((int) v % 10);
        }
    }
    return 0;
}

nn_dataset_t *
nn_dataset_load_svhn (const char *path, int limit, char *err, size_t err_size)
{
    s_svhn_t s = { .path = path, .limit = limit, .x_count = -1, .y_count = -1 };
    nn_mat_t *mat = nn_mat_open (path, err, err_size);
    if (!mat)
        return NULL;
    nn_mat_var_t var;
    int rc;
    while ((rc = nn_mat_next (mat, &var, err, err_size)) == 1) {
        if (strcmp (var.name, "X") == 0)
            rc = s_read_images (&s, mat, &var, err, err_size);
        else
        if (strcmp (var.name, "y") == 0)
            rc = s_read_labels (&s, mat, &var, err, err_size);
        else
            rc = 0;         //  another variable: skipped
        if (rc)
            break;
    }
    nn_mat_destroy (&mat);
    if (rc == 0 && (s.x_count < 0 || s.y_count < 0))
        rc = nn_errf (err, err_size, "svhn: %s: no variable %s (SVHN files hold X, uint8 "
                      "H x W x 3 x N images, and y, N x 1 labels)", path,
                      s.x_count < 0 ? "X" : "y");
    if (rc == 0 && s.x_count != s.y_count)
        rc = nn_errf (err, err_size, "svhn: %s: X holds %lld images, y %lld labels", path,
                      (long long) s.x_count, (long long) s.y_count);
    if (rc) {
        nn_dataset_destroy (&s.ds);
        nn_free (s.labels);
        return NULL;
    }
    nn_dataset_t *ds = s.ds;
    ds->labels = s.labels;
    //  The reference's values for SVHN (ImageNet's statistics), see
    //  docs/datasets.md; one channel gets the first.
    static const float mean[3] = { 0.485f, 0.456f, 0.406f };
    static const float std[3] = { 0.229f, 0.224f, 0.225f };
    memcpy (ds->mean, mean, sizeof mean);
    memcpy (ds->std, std, sizeof std);
    return ds;
}
