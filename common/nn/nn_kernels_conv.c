/*  nn_kernels_conv.c: convolution (NHWC), dense and grouped: im2col and a
    GEMM per group (our register tile, nn_kernels_gemm.h, or OpenBLAS),
    small patches by direct loops (nn_kernels_direct.c), dense 3x3
    stride-1 ones by Winograd's F(2x2, 3x3) or F(4x4, 3x3)
    (nn_kernels_wino.c), and
    depthwise convolutions by their own direct kernels
    (nn_kernels_dwconv.c). */
#include "nn_kernels.h"

#include "nn_kernels_conv.h"
#include "nn_kernels_gemm.h"
#include "nn_kernels_simd.h"

#include <cblas.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

//  Scratch for one chunk of im2col rows: big enough to feed sgemm well,
//  small enough to stay in L2 (2 MiB per core here).
#define S_COLS_TARGET (384 * 1024)

int
nn_conv_shape_finish (nn_conv_shape_t *s)
{
    if (s->stride < 1 || s->pad < 0 || s->r < 1 || s->s < 1 || s->c < 1 || s->k < 1)
        return -1;
    if (s->groups == 0)
        s->groups = 1;
    if (s->groups < 1 || s->c % s->groups || s->k % s->groups)
        return -1;
    int hp = s->h + 2 * s->pad - s->r;
    int wp = s->w + 2 * s->pad - s->s;
    if (hp < 0 || wp < 0)
        return -1;
    s->p = hp / s->stride + 1;
    s->q = wp / s->stride + 1;
    return 0;
}

//  Rows of im2col (each `row_len` floats) per chunk: big enough to feed
//  sgemm well, small enough to stay in L2; at most `rows`.
static int
s_chunk_rows (size_t row_len, size_t rows)
{
    size_t chunk = S_COLS_TARGET / (row_len ? row_len : 1);
    if (chunk < 1)
        chunk = 1;
    return (int) (chunk < rows ? chunk : rows);
}

static size_t
s_gemm_scratch_count (const nn_conv_shape_t *s)
{
    //  im2col rows of one group, then our tile's transposed w (forward) or
    //  dw (backward) of all groups, r*s*c/groups * k floats.
    size_t patch = (size_t) s->r * s->s * (s->c / s_groups (s));
    size_t cols = (size_t) s_chunk_rows (patch, (size_t) s->n * s->p * s->q) * patch;
    return cols + patch * s->k;
}

static nn_conv_shape_t s_live_shape (const nn_conv_shape_t *s);

size_t
nn_conv2d_scratch_count (const nn_conv_shape_t *s)
{
    if (s_depthwise (s))
        return nn_dwconv_scratch_count (s);
    nn_conv_shape_t live = s_live_shape (s);
    size_t cols = s_gemm_scratch_count (s), live_cols = s_gemm_scratch_count (&live);
    cols = cols > live_cols ? cols : live_cols;
    size_t direct = nn_direct_takes (s) ? nn_direct_scratch_count (s) : 0;
    cols = cols > direct ? cols : direct;
    size_t wino = nn_wino_takes (s) ? nn_wino_scratch_count (s) : 0;
    return cols > wino ? cols : wino;
}

//  Output rows [g0, g0 + rows) of the batch -> cols (rows, r*s*cg), each
//  row laid out (r, s, cg) like a weight row of a group: the input
//  channels [c0, c0 + cg) of each tap (all of them when cg == c).
S_BODY void
s_im2col_rows_body (float *cols, const float *in, const nn_conv_shape_t *s, int g0, int rows,
                    int c0, int cg)
{
    size_t row_len = (size_t) s->r * s->s * cg;
    size_t in_size = (size_t) s->h * s->w * s->c;
    size_t tap = sizeof (float) * cg;
    bool whole = cg == s->c;
    int n, p, q;
    s_pixel (s, g0, &n, &p, &q);
    for (int i = 0; i < rows; i++, s_pixel_next (s, &n, &p, &q)) {
        float *row = cols + (size_t) i * row_len;
        const float *img = in + n * in_size + c0;
        for (int r = 0; r < s->r; r++) {
            int ih = p * s->stride - s->pad + r;
            float *dst = row + (size_t) r * s->s * cg;
            if (ih < 0 || ih >= s->h) {
                memset (dst, 0, tap * s->s);
                continue;
            }
            int iw0 = q * s->stride - s->pad;
            if (whole && iw0 >= 0 && iw0 + s->s <= s->w) {
                //  Whole kernel row inside: one contiguous run in NHWC.
                memcpy (dst, img + ((size_t) ih * s->w + iw0) * s->c, tap * s->s);
                continue;
            }
            for (int k = 0; k < s->s; k++) {
                int iw = iw0 + k;
                if (iw < 0 || iw >= s->w)
                    memset (dst + k * cg, 0, tap);
                else
                    memcpy (dst + k * cg, img + ((size_t) ih * s->w + iw) * s->c, tap);
            }
        }
    }
}
S_DISPATCH (static, s_im2col_rows,
            (float *cols, const float *in, const nn_conv_shape_t *s, int g0, int rows,
             int c0, int cg),
            (cols, in, s, g0, rows, c0, cg))

//  Adjoint of s_im2col_rows: channels [c0, c0 + cg) of din (the batch) +=
//  scatter of cols, output rows [g0, g0 + rows).
S_BODY void
s_col2im_rows_add_body (float *din, const float *cols, const nn_conv_shape_t *s, int g0,
                        int rows, int c0, int cg)
{
    size_t row_len = (size_t) s->r * s->s * cg;
    size_t in_size = (size_t) s->h * s->w * s->c;
    int n, p, q;
    s_pixel (s, g0, &n, &p, &q);
    for (int i = 0; i < rows; i++, s_pixel_next (s, &n, &p, &q)) {
        const float *row = cols + (size_t) i * row_len;
        float *img = din + n * in_size + c0;
        for (int r = 0; r < s->r; r++) {
            int ih = p * s->stride - s->pad + r;
            if (ih < 0 || ih >= s->h)
                continue;
            for (int k = 0; k < s->s; k++) {
                int iw = q * s->stride - s->pad + k;
                if (iw < 0 || iw >= s->w)
                    continue;
                float *dst = img + ((size_t) ih * s->w + iw) * s->c;
                const float *src = row + ((size_t) r * s->s + k) * cg;
                for (int c = 0; c < cg; c++)
                    dst[c] += src[c];
            }
        }
    }
}
S_DISPATCH (static, s_col2im_rows_add,
            (float *din, const float *cols, const nn_conv_shape_t *s, int g0, int rows,
             int c0, int cg),
            (din, cols, s, g0, rows, c0, cg))

//  The live taps of a convolution: the kernel rows and columns that read
//  an input pixel for at least one output pixel. The others read only
//  padding, so their products are zeros: on ResNet18's last stage at
//  28x28 or 32x32 inputs (2x2 -> 1x1 at stride 2, then 1x1 images), a
//  3x3 kernel has 4 and 1 live taps of 9, and its im2col and GEMMs did
//  9x the work (and read 9x the weights) for nothing. Kernel row r is
//  live when 0 <= p*stride - pad + r < h for some output row p < P, i.e.
//  pad - (P-1)*stride <= r <= h - 1 + pad (all of them between when
//  stride <= h; the hull otherwise, which only keeps some dead taps).
//  The live shape is the kernel cut to [lo, r_hi] x [lo, s_hi] with pad
//  - lo (one pad for both axes, so lo is the smaller of the two first
//  live taps); the same p, q, or the shape itself when nothing is cut.
static void
s_live_range (int taps, int in, int out, int stride, int pad, int *lo, int *hi)
{
    int first = pad - (out - 1) * stride, last = in - 1 + pad;
    *lo = first > 0 ? first : 0;
    *hi = last < taps - 1 ? last : taps - 1;
}

static nn_conv_shape_t
s_live_shape (const nn_conv_shape_t *s)
{
    int r_lo, r_hi, s_lo, s_hi;
    s_live_range (s->r, s->h, s->p, s->stride, s->pad, &r_lo, &r_hi);
    s_live_range (s->s, s->w, s->q, s->stride, s->pad, &s_lo, &s_hi);
    int lo = r_lo < s_lo ? r_lo : s_lo;
    nn_conv_shape_t live = *s;
    if (lo == 0 && r_hi == s->r - 1 && s_hi == s->s - 1)
        return live;
    live.r = r_hi - lo + 1;
    live.s = s_hi - lo + 1;
    live.pad = s->pad - lo;
    if (live.r < 1 || live.s < 1 || nn_conv_shape_finish (&live) || live.p != s->p
    ||  live.q != s->q)
        return *s;
    return live;
}

//  The GEMM a convolution runs: the live shape (im2col and col2im walk
//  it), and where its weights sit in the full weight rows (ld floats:
//  r*s*c/groups): segs runs of seg floats, step apart, the first at off.
//  One run (off 0, seg = ld) when no tap is cut; one when whole kernel
//  rows are cut (the live rows are contiguous); else one per live row.
typedef struct {
    nn_conv_shape_t s;
    int groups, cg, kg, len;    //  len: a live im2col row, r'*s'*cg
    int ld, off, seg, segs, step;
    bool plain;                 //  1x1, stride 1, no padding: the input is the im2col
} s_gemm_shape_t;

static s_gemm_shape_t
s_gemm_shape (const nn_conv_shape_t *full)
{
    s_gemm_shape_t g;
    g.s = s_live_shape (full);
    const nn_conv_shape_t *s = &g.s;
    g.groups = s_groups (s);
    g.cg = s->c / g.groups;
    g.kg = s->k / g.groups;
    g.len = s->r * s->s * g.cg;
    g.ld = full->r * full->s * g.cg;
    int lo = full->pad - s->pad;
    g.off = (lo * full->s + lo) * g.cg;
    g.step = full->s * g.cg;
    if (s->s == full->s) {
        g.seg = g.len;
        g.segs = 1;
    }
    else {
        g.seg = s->s * g.cg;
        g.segs = s->r;
    }
    g.plain = s->r == 1 && s->s == 1 && s->stride == 1 && s->pad == 0;
    return g;
}

//  Run j of group i's weights, kg rows ld apart.
static inline const float *
s_gemm_w (const float *w, const s_gemm_shape_t *gs, int i, int j)
{
    return w + (size_t) i * gs->kg * gs->ld + gs->off + (size_t) j * gs->step;
}

//  The im2col rows [g, g + rows) of group i: the input itself when plain
//  (rows C apart), else gathered into cols (rows len apart). *ld: the row
//  stride of what is returned.
static const float *
s_gemm_a (float *cols, const float *in, const s_gemm_shape_t *gs, int g, int rows, int i,
          int *ld)
{
    if (gs->plain) {
        *ld = gs->s.c;
        return in + (size_t) g * gs->s.c + (size_t) i * gs->cg;
    }
    s_im2col_rows (cols, in, &gs->s, g, rows, i * gs->cg, gs->cg);
    *ld = gs->len;
    return cols;
}

//  dst[j * ldd + i] (+)= src[i * lds + j] for i < rows, j < cols, in 16 x
//  16 blocks: our tile reads w transposed, and makes dw transposed.
//  Element by element down the columns, MobileNetV3's 576 x 1024 1x1
//  weights took 3.2 ms, a cache miss each.
void
nn_conv_transpose (float *dst, size_t ldd, const float *src, size_t lds, int rows, int cols,
                   bool add)
{
    for (int i0 = 0; i0 < rows; i0 += 16)
        for (int j0 = 0; j0 < cols; j0 += 16) {
            int i1 = rows - i0 < 16 ? rows : i0 + 16, j1 = cols - j0 < 16 ? cols : j0 + 16;
            for (int j = j0; j < j1; j++)
                for (int i = i0; i < i1; i++) {
                    float v = src[(size_t) i * lds + j];
                    dst[(size_t) j * ldd + i] = add ? dst[(size_t) j * ldd + i] + v : v;
                }
        }
}

//  Whether our tile takes a product over `rows` output pixels that
//  transposes the weights (forward) or dw (weight gradient), c n wide
//  summing J terms: the transpose costs about as much as the tile saves
//  over OpenBLAS at a few hundred pixels (a 1x1 convolution on 25 pixels,
//  576 -> 1024, took 3.6 ms through the tile and 0.4 ms in OpenBLAS).
#define S_TILE_MIN_ROWS 256
static bool
s_tile_pays (int rows, int n, int J)
{
    return rows >= S_TILE_MIN_ROWS && nn_tile_fits (n, J);
}

void
nn_conv2d_forward_rows (float *out, const float *in, const float *w, const float *b,
                        const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    if (s_depthwise (s)) {
        nn_dwconv_forward_rows (out, in, w, b, s, r0, r1, scratch);
        return;
    }
    if (nn_direct_takes (s)) {
        nn_direct_forward_rows (out, in, w, b, s, r0, r1, scratch);
        return;
    }
    if (nn_wino_pays (s, r0, r1)) {
        nn_wino_forward_rows (out, in, w, b, s, r0, r1, scratch);
        return;
    }
    s_gemm_shape_t gs = s_gemm_shape (s);
    int K = s->k, len = gs.len, kg = gs.kg;
    int chunk = s_chunk_rows ((size_t) len, (size_t) s->n * s->p * s->q);
    bool own = s_tile_pays (r1 - r0, kg, len);
    //  Our tile reads each group's live weights transposed, (len, kg).
    float *wt = scratch + (gs.plain ? 0 : (size_t) chunk * len);
    if (own)
        for (int i = 0; i < gs.groups; i++)
            for (int j = 0; j < gs.segs; j++)
                nn_conv_transpose (wt + ((size_t) i * len + (size_t) j * gs.seg) * kg,
                                   (size_t) kg, s_gemm_w (w, &gs, i, j), (size_t) gs.ld, kg,
                                   gs.seg, false);
    for (int g = r0; g < r1; g += chunk) {
        int rows = r1 - g < chunk ? r1 - g : chunk;
        float *o = out + (size_t) g * K;
        float beta = 0.0f;
        if (b) {
            for (int i = 0; i < rows; i++)
                memcpy (o + (size_t) i * K, b, sizeof (float) * K);
            beta = 1.0f;
        }
        for (int i = 0; i < gs.groups; i++) {
            int lda;
            const float *a = s_gemm_a (scratch, in, &gs, g, rows, i, &lda);
            //  out[:, group] (rows, kg) = cols (rows, len) . w_group^T (len, kg),
            //  a run of the live weights at a time
            if (own)
                nn_tile_gemm (o + i * kg, K, a, lda, 1, wt + (size_t) i * len * kg, kg, rows,
                              kg, len, b != NULL);
            else
                for (int j = 0; j < gs.segs; j++)
                    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, rows, kg, gs.seg,
                                 1.0f, a + (size_t) j * gs.seg, lda, s_gemm_w (w, &gs, i, j),
                                 gs.ld, j ? 1.0f : beta, o + i * kg, K);
        }
    }
}

void
nn_conv2d_backward_weights_rows (float *dw, float *db, const float *dout, const float *in,
                                 const nn_conv_shape_t *s, int r0, int r1, float *scratch)
{
    if (s_depthwise (s)) {
        nn_dwconv_backward_weights_rows (dw, db, dout, in, s, r0, r1, scratch);
        return;
    }
    if (nn_direct_takes (s)) {
        nn_direct_backward_weights_rows (dw, db, dout, in, s, r0, r1, scratch);
        return;
    }
    if (db)
        for (int g = r0; g < r1; g++) {
            const float *d = dout + (size_t) g * s->k;
            for (int k = 0; k < s->k; k++)
                db[k] += d[k];
        }
    if (nn_wino_pays (s, r0, r1)) {
        nn_wino_backward_weights_rows (dw, dout, in, s, r0, r1, scratch);
        return;
    }
    //  The dead taps' gradients are sums of zeros: dw keeps them.
    s_gemm_shape_t gs = s_gemm_shape (s);
    int K = s->k, len = gs.len, kg = gs.kg;
    int chunk = s_chunk_rows ((size_t) len, (size_t) s->n * s->p * s->q);
    //  Not the AVX2 tile: its 16-wide tiles re-read a^T's strided values
    //  and ran at 89-96 GFLOP/s against OpenBLAS's (Haswell) 104 for
    //  VGG5's conv2 and conv3 on a Zen 4 core (forward and input gradient:
    //  104-111 against 104-106).
    bool own = s_tile_pays (r1 - r0, kg, r1 - r0) && nn_isa_active () != NN_ISA_AVX2;
    float *dwt = scratch + (gs.plain ? 0 : (size_t) chunk * len);
    if (own)
        memset (dwt, 0, sizeof (float) * len * K);
    for (int g = r0; g < r1; g += chunk) {
        int rows = r1 - g < chunk ? r1 - g : chunk;
        for (int i = 0; i < gs.groups; i++) {
            int lda;
            const float *a = s_gemm_a (scratch, in, &gs, g, rows, i, &lda);
            const float *d = dout + (size_t) g * K + i * kg;
            //  dw_group (kg, len) += dout_group^T (kg, rows) . cols (rows, len);
            //  ours makes dw_group^T (len, kg) += cols^T . dout_group, kg wide
            //  like its tiles.
            if (own)
                nn_tile_gemm (dwt + (size_t) i * len * kg, kg, a, 1, lda, d, K, len, kg, rows,
                              true);
            else
                for (int j = 0; j < gs.segs; j++)
                    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, kg, gs.seg, rows,
                                 1.0f, d, K, a + (size_t) j * gs.seg, lda, 1.0f,
                                 (float *) s_gemm_w (dw, &gs, i, j), gs.ld);
        }
    }
    if (own)
        for (int i = 0; i < gs.groups; i++)
            for (int j = 0; j < gs.segs; j++)
                nn_conv_transpose ((float *) s_gemm_w (dw, &gs, i, j), (size_t) gs.ld,
                                   dwt + ((size_t) i * len + (size_t) j * gs.seg) * kg,
                                   (size_t) kg, gs.seg, kg, true);
}

//  din[:, group] (rows, cg; C apart) = dout[:, group] (rows, kg) . w_group
//  (kg, cg): a 1x1 stride-1 convolution's input gradient (or one cut to
//  its one live tap), no col2im.
static void
s_plain_backward_input (float *din, const float *dout, const float *w,
                        const s_gemm_shape_t *gs)
{
    const nn_conv_shape_t *s = &gs->s;
    int total = s->n * s->p * s->q, C = s->c, K = s->k, cg = gs->cg, kg = gs->kg;
    for (int i = 0; i < gs->groups; i++) {
        const float *d = dout + (size_t) i * kg, *wg = s_gemm_w (w, gs, i, 0);
        float *dx = din + (size_t) i * cg;
        if (nn_tile_fits (cg, kg))
            nn_tile_gemm (dx, C, d, K, 1, wg, gs->ld, total, cg, kg, false);
        else
            cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, total, cg, kg, 1.0f, d,
                         K, wg, gs->ld, 0.0f, dx, C);
    }
}

void
nn_conv2d_backward_input (float *din, const float *dout, const float *w,
                          const nn_conv_shape_t *s, float *scratch)
{
    if (s_depthwise (s)) {
        nn_dwconv_backward_input (din, dout, w, s, scratch);
        return;
    }
    if (nn_wino_pays (s, 0, s->n * s->p * s->q)) {
        nn_wino_backward_input (din, dout, w, s, scratch);
        return;
    }
    s_gemm_shape_t gs = s_gemm_shape (s);
    if (gs.plain) {
        //  A 1x1 live shape covers every input pixel (p == h, q == w).
        s_plain_backward_input (din, dout, w, &gs);
        return;
    }
    int len = gs.len, kg = gs.kg, K = s->k, total = s->n * s->p * s->q;
    int chunk = s_chunk_rows ((size_t) len, (size_t) total);
    bool own = nn_tile_fits (gs.seg, kg);
    memset (din, 0, sizeof (float) * s->n * s->h * s->w * s->c);
    for (int g = 0; g < total; g += chunk) {
        int rows = total - g < chunk ? total - g : chunk;
        for (int i = 0; i < gs.groups; i++) {
            const float *d = dout + (size_t) g * K + i * kg;
            //  dcols (rows, len) = dout_group (rows, kg) . w_group (kg, len),
            //  a run of the live weights at a time
            for (int j = 0; j < gs.segs; j++) {
                float *dc = scratch + (size_t) j * gs.seg;
                const float *wg = s_gemm_w (w, &gs, i, j);
                if (own)
                    nn_tile_gemm (dc, len, d, K, 1, wg, gs.ld, rows, gs.seg, kg, false);
                else
                    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, gs.seg, kg,
                                 1.0f, d, K, wg, gs.ld, 0.0f, dc, len);
            }
            s_col2im_rows_add (din, scratch, &gs.s, g, rows, i * gs.cg, gs.cg);
        }
    }
}

void
nn_conv2d_forward (float *out, const float *in, const float *w, const float *b,
                   const nn_conv_shape_t *s, float *scratch)
{
    nn_conv2d_forward_rows (out, in, w, b, s, 0, s->n * s->p * s->q, scratch);
}

void
nn_conv2d_backward (float *din, float *dw, float *db, const float *dout,
                    const float *in, const float *w, const nn_conv_shape_t *s,
                    float *scratch)
{
    nn_conv2d_backward_weights_rows (dw, db, dout, in, s, 0, s->n * s->p * s->q, scratch);
    if (din)
        nn_conv2d_backward_input (din, dout, w, s, scratch);
}
