/*  nn_codec.c: the split's tensor codecs (nn_codec.h, PROTOCOL.md "Codecs"). */
#include "nn_codec.h"

#include "nn_alloc.h"
#include "nn_isa.h"

#include <assert.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#   include <immintrin.h>
#   define S_F16C 1
#elif defined(__aarch64__) && defined(__FLT16_MAX__)
//  ARMv8-A converts in hardware (FCVT: round to nearest even under Linux's
//  default FPCR, NaNs quieted with their payload's top bits, as F16C).
#   define S_ARM_F16 1
__extension__ typedef _Float16 s_f16_t;
#endif

static const char *s_names[NN_CODEC_COUNT] = { "none", "fp16", "int8", "topk" };

struct _nn_codec_encoder_t {
    nn_codec_params_t params;
    nn_codec_shape_t shape;
    uint32_t count;
    uint32_t k;             //  topk
    size_t bytes;
    float *residual;        //  topk: count floats
    float *acc;             //  topk: input + residual, count floats
    float *scratch;         //  topk: selection scratch, count floats
    uint32_t *index;        //  topk: k indices
    float *lo, *hi;         //  int8: per-channel range, c floats each
    double *inv;            //  int8: 1 / scale per channel
    size_t last;            //  bytes of the last encoding
    uint8_t *raw;           //  zstd: the uncompressed encoding
    ZSTD_CCtx *zstd;        //  zstd: compression context
};

const char *
nn_codec_name (nn_codec_id_t id)
{
    return id >= 0 && id < NN_CODEC_COUNT ? s_names[id] : NULL;
}

int
nn_codec_parse (const char *name, nn_codec_id_t *id)
{
    for (int i = 0; name && i < NN_CODEC_COUNT; i++)
        if (strcmp (name, s_names[i]) == 0) {
            *id = (nn_codec_id_t) i;
            return 0;
        }
    return -1;
}

uint64_t
nn_codec_shape_count (const nn_codec_shape_t *s)
{
    //  Four u32 factors can overflow u64: saturate instead (any count
    //  above 2^32 - 1 is refused anyway).
    uint64_t count = 1;
    const uint32_t dims[4] = { s->n, s->h, s->w, s->c };
    for (int i = 0; i < 4; i++) {
        if (dims[i] == 0)
            return 0;
        if (count > UINT64_MAX / dims[i])
            return UINT64_MAX;
        count *= dims[i];
    }
    return count;
}

uint32_t
nn_codec_topk_k (uint64_t count, double fraction)
{
    assert (count >= 1 && count <= UINT32_MAX && fraction > 0.0 && fraction <= 1.0);
    double k = ceil (fraction * (double) count);
    if (k < 1.0)
        k = 1.0;
    if (k > (double) count)
        k = (double) count;
    return (uint32_t) k;
}

uint64_t
nn_codec_wire_bytes (nn_codec_id_t id, uint64_t count, uint32_t channels, uint32_t k)
{
    uint64_t body = 0;
    switch (id) {
        case NN_CODEC_NONE: body = 4 * count; break;
        case NN_CODEC_FP16: body = 2 * count; break;
        case NN_CODEC_INT8: body = 8 * (uint64_t) channels + count; break;
        case NN_CODEC_TOPK: body = 8 * (uint64_t) k; break;
        default: assert (!"unknown codec");
    }
    return NN_CODEC_HEADER_BYTES + body;
}

uint64_t
nn_codec_zstd_wire_bytes_max (uint64_t raw_wire_bytes)
{
    if (raw_wire_bytes < NN_CODEC_HEADER_BYTES)
        return NN_CODEC_HEADER_BYTES;
    uint64_t body = raw_wire_bytes - NN_CODEC_HEADER_BYTES;
    if (body >= ZSTD_MAX_INPUT_SIZE || body > SIZE_MAX / 2)
        return UINT64_MAX;
    return NN_CODEC_HEADER_BYTES + (uint64_t) ZSTD_compressBound ((size_t) body);
}

//  ---------------------------------------------------------------------
//  Little-endian fields, at any alignment

static void
s_put_u32 (uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
}

static uint32_t
s_get_u32 (const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
         | (uint32_t) p[3] << 24;
}

static void
s_put_f32 (uint8_t *p, float f)
{
    uint32_t v;
    memcpy (&v, &f, 4);
    s_put_u32 (p, v);
}

static float
s_get_f32 (const uint8_t *p)
{
    uint32_t v = s_get_u32 (p);
    float f;
    memcpy (&f, &v, 4);
    return f;
}

static bool
s_little_endian (void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy (&b, &one, 1);
    return b == 1;
}

//  ---------------------------------------------------------------------
//  fp16

//  Bit-exact round to nearest even without float arithmetic tricks that
//  depend on the rounding mode: the mantissa is shifted with the rounding
//  done on integers.
static uint16_t
s_half_from_bits (uint32_t f)
{
    uint16_t sign = (uint16_t) ((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7FFFFFFFu;
    if (a >= 0x7F800000u)       //  inf or NaN
        return a > 0x7F800000u ? (uint16_t) (sign | 0x7E00u | ((a >> 13) & 0x3FFu))
                               : (uint16_t) (sign | 0x7C00u);
    if (a >= 0x477FF000u)       //  >= 65520: rounds to 2^16, which is inf
        return (uint16_t) (sign | 0x7C00u);
    int exp = (int) (a >> 23) - 127;
    uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;    //  24 significant bits
    int shift;                  //  bits of mant below the half's last bit
    uint32_t base;              //  the half's exponent field
    if (exp >= -14) {
        shift = 13;
        base = (uint32_t) (exp + 15) << 10;
        mant &= 0x7FFFFFu;      //  the implicit bit is in the exponent field
    }
    else {
        //  Subnormal half: the value is mant * 2^(exp - 23), the half's
        //  unit is 2^-24, so mant is shifted right by -exp - 1 bits.
        shift = -exp - 1;
        base = 0;
        if (shift > 24)         //  below half the smallest subnormal: 0
            return sign;
        if (a == 0)
            return sign;
    }
    uint32_t q = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u)))
        q++;
    //  A carry out of the mantissa moves into the exponent field, which is
    //  the right result (up to inf, excluded above).
    return (uint16_t) (sign | (base + q));
}

static uint32_t
s_bits_from_half (uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F)
        return sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u);
    if (exp)
        return sign | ((exp + 112u) << 23) | (mant << 13);
    if (!mant)
        return sign;
    //  Subnormal: normalise. mant * 2^-24 with its top bit at position b
    //  is 1.x * 2^(b - 24).
    int b = 31 - __builtin_clz (mant);
    return sign | ((uint32_t) (b - 24 + 127) << 23) | ((mant << (23 - b)) & 0x7FFFFFu);
}

//  The portable fast path (F. Giesen's float_to_half_fast3_rtne, with
//  our NaN rule): one float addition rounds subnormal halves (in the
//  default round-to-nearest-even mode, which the process never changes),
//  and an integer add with the rounding bias rounds the normal ones. Few
//  branches, so it does not stall on data that mixes zeros and values.
static uint16_t
s_half_from_bits_fast (uint32_t f)
{
    const uint32_t magic_bits = 126u << 23;         //  0.5f
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint32_t o;
    if (f >= (127u + 16u) << 23)                    //  >= 2^16: inf or NaN
        o = f > 0x7F800000u ? 0x7E00u | ((f >> 13) & 0x3FFu) : 0x7C00u;
    else
    if (f < 113u << 23) {                           //  below 2^-14: subnormal half
        float x, magic;
        memcpy (&x, &f, 4);
        memcpy (&magic, &magic_bits, 4);
        x += magic;
        memcpy (&o, &x, 4);
        o -= magic_bits;
    }
    else {
        uint32_t odd = (f >> 13) & 1u;
        f += ((uint32_t) (15 - 127) << 23) + 0xFFFu + odd;
        o = f >> 13;
    }
    return (uint16_t) (o | (sign >> 16));
}

static uint32_t
s_bits_from_half_fast (uint16_t h)
{
    const uint32_t shifted_exp = 0x7C00u << 13;
    uint32_t o = (uint32_t) (h & 0x7FFFu) << 13;
    uint32_t exp = o & shifted_exp;
    o += (uint32_t) (127 - 15) << 23;
    if (exp == shifted_exp) {                       //  inf or NaN
        o += (uint32_t) (128 - 16) << 23;
        if (o & 0x7FFFFFu)
            o |= 0x400000u;                         //  NaN made quiet
    }
    else
    if (exp == 0) {                                 //  zero or subnormal: renormalise
        const uint32_t magic_bits = 113u << 23;
        float x, magic;
        o += 1u << 23;
        memcpy (&x, &o, 4);
        memcpy (&magic, &magic_bits, 4);
        x -= magic;
        memcpy (&o, &x, 4);
    }
    return o | (uint32_t) (h & 0x8000u) << 16;
}

static void
s_from_float_portable (uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t f;
        memcpy (&f, &in[i], 4);
        out[i] = s_half_from_bits_fast (f);
    }
}

static void
s_to_float_portable (float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t f = s_bits_from_half_fast (in[i]);
        memcpy (&out[i], &f, 4);
    }
}

void
nn_codec_fp16_from_float_ref (uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t f;
        memcpy (&f, &in[i], 4);
        out[i] = s_half_from_bits (f);
    }
}

void
nn_codec_fp16_to_float_ref (float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t f = s_bits_from_half (in[i]);
        memcpy (&out[i], &f, 4);
    }
}

#ifdef S_F16C
static bool
s_f16c (void)
{
    nn_isa_t isa = nn_isa_active ();
    return isa == NN_ISA_AVX2 || isa == NN_ISA_AVX512;
}

__attribute__ ((target ("avx,f16c"))) static void
s_from_float_f16c (uint16_t *out, const float *in, size_t count)
{
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m256 x = _mm256_loadu_ps (in + i);
        _mm_storeu_si128 ((__m128i *) (out + i),
                          _mm256_cvtps_ph (x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    s_from_float_portable (out + i, in + i, count - i);
}

__attribute__ ((target ("avx,f16c"))) static void
s_to_float_f16c (float *out, const uint16_t *in, size_t count)
{
    size_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps (out + i, _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) (in + i))));
    s_to_float_portable (out + i, in + i, count - i);
}
#endif

#ifdef S_ARM_F16
static void
s_from_float_arm (uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        s_f16_t h = (s_f16_t) in[i];
        memcpy (&out[i], &h, 2);
    }
}

static void
s_to_float_arm (float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        s_f16_t h;
        memcpy (&h, &in[i], 2);
        out[i] = (float) h;
    }
}
#endif

void
nn_codec_fp16_from_float (uint16_t *out, const float *in, size_t count)
{
#ifdef S_ARM_F16
    s_from_float_arm (out, in, count);
    return;
#endif
#ifdef S_F16C
    if (s_f16c ()) {
        s_from_float_f16c (out, in, count);
        return;
    }
#endif
    s_from_float_portable (out, in, count);
}

void
nn_codec_fp16_to_float (float *out, const uint16_t *in, size_t count)
{
#ifdef S_ARM_F16
    s_to_float_arm (out, in, count);
    return;
#endif
#ifdef S_F16C
    if (s_f16c ()) {
        s_to_float_f16c (out, in, count);
        return;
    }
#endif
    s_to_float_portable (out, in, count);
}

//  ---------------------------------------------------------------------
//  topk selection

//  The k-th largest of v[0..count) (v is reordered): quickselect with a
//  median-of-three pivot and Hoare partitioning, which splits runs of equal
//  values evenly (gradients hold many zeros).
static float
s_kth_largest (float *v, uint32_t count, uint32_t k)
{
    size_t lo = 0, hi = count - 1, target = count - k;    //  ascending position
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        float a = v[lo], b = v[mid], c = v[hi];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        //  Now v[lo..j] <= pivot <= v[i..hi] and j < i.
        if (target <= j)
            hi = j;
        else
        if (target >= i)
            lo = i;
        else
            return v[target];   //  between j and i: equal to the pivot
    }
    return v[target];
}

void
nn_codec_topk_select (uint32_t *index, const float *x, uint32_t count, uint32_t k,
                      float *scratch)
{
    assert (k >= 1 && k <= count);
    for (uint32_t i = 0; i < count; i++)
        scratch[i] = fabsf (x[i]);
    float threshold = s_kth_largest (scratch, count, k);
    uint32_t above = 0;
    for (uint32_t i = 0; i < count; i++)
        above += fabsf (x[i]) > threshold;
    //  Every element above the threshold, and the first (k - above) equal
    //  to it in index order: ties go to the lower index, as in the reference.
    uint32_t ties = k - above, taken = 0;
    for (uint32_t i = 0; i < count && taken < k; i++) {
        float a = fabsf (x[i]);
        if (a > threshold || (a == threshold && ties > 0)) {
            if (a == threshold)
                ties--;
            index[taken++] = i;
        }
    }
    assert (taken == k);
}

typedef struct {
    float mag;
    uint32_t i;
} s_ranked_t;

static int
s_by_magnitude (const void *pa, const void *pb)
{
    const s_ranked_t *a = pa, *b = pb;
    if (a->mag != b->mag)
        return a->mag > b->mag ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int
s_by_index (const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *) pa, b = *(const uint32_t *) pb;
    return (a > b) - (a < b);
}

void
nn_codec_topk_select_ref (uint32_t *index, const float *x, uint32_t count, uint32_t k)
{
    assert (k >= 1 && k <= count);
    s_ranked_t *r = nn_malloc (sizeof (s_ranked_t) * count);
    for (uint32_t i = 0; i < count; i++)
        r[i] = (s_ranked_t) { fabsf (x[i]), i };
    qsort (r, count, sizeof *r, s_by_magnitude);
    for (uint32_t i = 0; i < k; i++)
        index[i] = r[i].i;
    qsort (index, k, sizeof *index, s_by_index);
    nn_free (r);
}

//  ---------------------------------------------------------------------
//  Encoder

nn_codec_encoder_t *
nn_codec_encoder_new (const nn_codec_params_t *params, const nn_codec_shape_t *shape,
                      char *err, size_t err_size)
{
    assert (params && shape);
    const char *name = nn_codec_name (params->id);
    if (!name) {
        nn_errf (err, err_size, "codec: unknown codec id %d", (int) params->id);
        return NULL;
    }
    uint64_t count = nn_codec_shape_count (shape);
    if (count == 0 || count > UINT32_MAX) {
        nn_errf (err, err_size, "codec: %s: shape (%" PRIu32 ", %" PRIu32 ", %" PRIu32
                 ", %" PRIu32 ") must have 1..4294967295 elements", name, shape->n,
                 shape->h, shape->w, shape->c);
        return NULL;
    }
    if (params->id == NN_CODEC_TOPK
    &&  !(params->topk_fraction > 0.0 && params->topk_fraction <= 1.0)) {
        nn_errf (err, err_size, "codec: topk: fraction must be in (0, 1], got %g",
                 params->topk_fraction);
        return NULL;
    }
    if (params->zstd && params->id == NN_CODEC_NONE) {
        nn_errf (err, err_size, "codec: none: zstd compresses codec payloads only");
        return NULL;
    }
    nn_codec_encoder_t *self = nn_calloc (1, sizeof *self);
    self->params = *params;
    self->shape = *shape;
    self->count = (uint32_t) count;
    if (params->id == NN_CODEC_TOPK) {
        self->k = nn_codec_topk_k (count, params->topk_fraction);
        self->residual = nn_calloc (count, sizeof (float));
        self->acc = nn_malloc (sizeof (float) * count);
        self->scratch = nn_malloc (sizeof (float) * count);
        self->index = nn_malloc (sizeof (uint32_t) * self->k);
    }
    if (params->id == NN_CODEC_INT8) {
        self->lo = nn_malloc (sizeof (float) * shape->c);
        self->hi = nn_malloc (sizeof (float) * shape->c);
        self->inv = nn_malloc (sizeof (double) * shape->c);
    }
    self->bytes = (size_t) nn_codec_wire_bytes (params->id, count, shape->c, self->k);
    if (params->zstd) {
        uint64_t max = nn_codec_zstd_wire_bytes_max (self->bytes);
        self->zstd = max == UINT64_MAX ? NULL : ZSTD_createCCtx ();
        if (!self->zstd) {
            nn_errf (err, err_size, "codec: %s: cannot compress %zu bytes with zstd", name,
                     self->bytes);
            nn_codec_encoder_destroy (&self);
            return NULL;
        }
        ZSTD_CCtx_setParameter (self->zstd, ZSTD_c_compressionLevel, NN_CODEC_ZSTD_LEVEL);
        ZSTD_CCtx_setParameter (self->zstd, ZSTD_c_contentSizeFlag, 1);
        ZSTD_CCtx_setParameter (self->zstd, ZSTD_c_checksumFlag, 0);
        self->raw = nn_malloc (self->bytes);
        self->bytes = (size_t) max;
    }
    return self;
}

void
nn_codec_encoder_destroy (nn_codec_encoder_t **self_p)
{
    assert (self_p);
    nn_codec_encoder_t *self = *self_p;
    if (!self)
        return;
    nn_free (self->residual);
    nn_free (self->acc);
    nn_free (self->scratch);
    nn_free (self->index);
    nn_free (self->lo);
    nn_free (self->hi);
    nn_free (self->inv);
    nn_free (self->raw);
    ZSTD_freeCCtx (self->zstd);
    nn_free (self);
    *self_p = NULL;
}

size_t
nn_codec_encoder_bytes (const nn_codec_encoder_t *self)
{
    return self->bytes;
}

size_t
nn_codec_encoder_last_bytes (const nn_codec_encoder_t *self)
{
    return self->last;
}

const float *
nn_codec_encoder_residual (const nn_codec_encoder_t *self)
{
    return self->residual;
}

void
nn_codec_encoder_reset (nn_codec_encoder_t *self)
{
    if (self->residual)
        memset (self->residual, 0, sizeof (float) * self->count);
}

static void
s_header (const nn_codec_encoder_t *self, uint8_t *out, uint8_t flags)
{
    out[0] = (uint8_t) self->params.id;
    out[1] = flags;
    out[2] = out[3] = 0;
    s_put_u32 (out + 4, self->shape.n);
    s_put_u32 (out + 8, self->shape.h);
    s_put_u32 (out + 12, self->shape.w);
    s_put_u32 (out + 16, self->shape.c);
    s_put_u32 (out + 20, self->k);
}

//  int8: per channel, code q in 0..255 stands for zero + q * scale, with
//  zero the channel's minimum and scale its range / 255, so the range maps
//  exactly onto the codes and rounding to nearest is off by at most half a
//  step. (An integer zero point, as in most int8 schemes, would shift the
//  range by up to half a step and the bound with it.)
static int
s_encode_int8 (nn_codec_encoder_t *self, uint8_t *out, const float *in, nn_rng_t *rng,
               char *err, size_t err_size)
{
    uint32_t c = self->shape.c, rows = self->count / c;
    float *lo = self->lo, *hi = self->hi;
    for (uint32_t j = 0; j < c; j++)
        lo[j] = hi[j] = in[j];
    bool finite = true;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + (size_t) r * c;
        for (uint32_t j = 0; j < c; j++) {
            finite &= isfinite (x[j]);
            lo[j] = x[j] < lo[j] ? x[j] : lo[j];
            hi[j] = x[j] > hi[j] ? x[j] : hi[j];
        }
    }
    if (!finite)
        return nn_errf (err, err_size, "codec: int8: the tensor holds a non-finite value");
    uint8_t *params = out + NN_CODEC_HEADER_BYTES, *codes = params + 8 * (size_t) c;
    double *inv = self->inv;
    for (uint32_t j = 0; j < c; j++) {
        double range = (double) hi[j] - (double) lo[j];
        float scale = range > 0.0 ? (float) (range / 255.0) : 1.0f;
        if (!(scale > 0.0f))    //  a range below 255 * FLT_TRUE_MIN
            scale = FLT_TRUE_MIN;
        //  The decoder refuses zero + 255 scale beyond FLT_MAX; rounding
        //  the scale up can get there for ranges near FLT_MAX.
        while ((double) lo[j] + 255.0 * (double) scale > FLT_MAX)
            scale = nextafterf (scale, 0.0f);
        s_put_f32 (params + 8 * (size_t) j, scale);
        s_put_f32 (params + 8 * (size_t) j + 4, lo[j]);
        inv[j] = 1.0 / (double) scale;
    }
    //  In double: x - lo overflows float for ranges beyond FLT_MAX, and
    //  1 / scale for subnormal scales.
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in + (size_t) r * c;
        uint8_t *q = codes + (size_t) r * c;
        for (uint32_t j = 0; j < c; j++) {
            //  t >= 0, so truncating t + 0.5 rounds to nearest (ties up:
            //  still within half a step) and vectorises, unlike nearbyint.
            double t = ((double) x[j] - (double) lo[j]) * inv[j];
            t += self->params.stochastic ? nn_rng_uniform_double (rng) : 0.5;
            q[j] = (uint8_t) (t < 0.0 ? 0.0 : t > 255.0 ? 255.0 : t);
        }
    }
    return 0;
}

//  topk with error feedback: acc = in + residual; send the k largest |acc|,
//  keep the rest as the next residual.
static int
s_encode_topk (nn_codec_encoder_t *self, uint8_t *out, const float *in, char *err,
               size_t err_size)
{
    uint32_t count = self->count, k = self->k;
    bool finite = true;
    for (uint32_t i = 0; i < count; i++) {
        self->acc[i] = in[i] + self->residual[i];
        finite &= isfinite (self->acc[i]);
    }
    if (!finite)
        return nn_errf (err, err_size, "codec: topk: the gradient (plus residual) holds a "
                        "non-finite value");
    nn_codec_topk_select (self->index, self->acc, count, k, self->scratch);
    memcpy (self->residual, self->acc, sizeof (float) * count);
    uint8_t *idx = out + NN_CODEC_HEADER_BYTES, *val = idx + 4 * (size_t) k;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i = self->index[j];
        s_put_u32 (idx + 4 * (size_t) j, i);
        s_put_f32 (val + 4 * (size_t) j, self->acc[i]);
        self->residual[i] = 0.0f;
    }
    return 0;
}

//  The encoding without zstd into out (the codec's exact wire bytes).
static int
s_encode_raw (nn_codec_encoder_t *self, uint8_t *out, const float *in, nn_rng_t *rng,
              char *err, size_t err_size)
{
    uint8_t *body = out + NN_CODEC_HEADER_BYTES;
    int rc = 0;
    switch (self->params.id) {
        case NN_CODEC_NONE:
            if (s_little_endian ())
                memcpy (body, in, 4 * (size_t) self->count);
            else
                for (uint32_t i = 0; i < self->count; i++)
                    s_put_f32 (body + 4 * (size_t) i, in[i]);
            break;
        case NN_CODEC_FP16: {
            //  Convert in blocks through an aligned buffer: the output may
            //  sit at any offset and must be little-endian.
            uint16_t block[1024];
            for (uint32_t i = 0; i < self->count; i += 1024) {
                size_t m = self->count - i < 1024 ? self->count - i : 1024;
                nn_codec_fp16_from_float (block, in + i, m);
                if (s_little_endian ())
                    memcpy (body + 2 * (size_t) i, block, 2 * m);
                else
                    for (size_t j = 0; j < m; j++) {
                        body[2 * (i + j)] = (uint8_t) block[j];
                        body[2 * (i + j) + 1] = (uint8_t) (block[j] >> 8);
                    }
            }
            break;
        }
        case NN_CODEC_INT8:
            rc = s_encode_int8 (self, out, in, rng, err, err_size);
            break;
        case NN_CODEC_TOPK:
            rc = s_encode_topk (self, out, in, err, err_size);
            break;
        default:
            assert (!"unknown codec");
    }
    if (rc == 0)
        s_header (self, out,
                  self->params.id == NN_CODEC_INT8 && self->params.stochastic
                  ? NN_CODEC_FLAG_STOCHASTIC : 0);
    return rc;
}

int
nn_codec_encode (nn_codec_encoder_t *self, uint8_t *out, size_t out_size,
                 const float *in, nn_rng_t *rng, char *err, size_t err_size)
{
    assert (self && out && in);
    assert (out_size >= self->bytes);
    assert (!(self->params.id == NN_CODEC_INT8 && self->params.stochastic) || rng);
    if (!self->zstd) {
        int rc = s_encode_raw (self, out, in, rng, err, err_size);
        self->last = rc ? self->last : self->bytes;
        return rc;
    }
    if (s_encode_raw (self, self->raw, in, rng, err, err_size))
        return -1;
    size_t raw_body = (size_t) nn_codec_wire_bytes (self->params.id, self->count,
                                                    self->shape.c, self->k)
                      - NN_CODEC_HEADER_BYTES;
    size_t z = ZSTD_compress2 (self->zstd, out + NN_CODEC_HEADER_BYTES,
                               out_size - NN_CODEC_HEADER_BYTES,
                               self->raw + NN_CODEC_HEADER_BYTES, raw_body);
    if (ZSTD_isError (z))
        return nn_errf (err, err_size, "codec: %s: zstd: %s",
                        nn_codec_name (self->params.id), ZSTD_getErrorName (z));
    memcpy (out, self->raw, NN_CODEC_HEADER_BYTES);
    out[1] |= NN_CODEC_FLAG_ZSTD;
    self->last = NN_CODEC_HEADER_BYTES + z;
    return 0;
}

//  ---------------------------------------------------------------------
//  Decoder

//  A payload with the zstd flag (header checked by nn_codec_decode; want:
//  the bytes of the same encoding without zstd): its body inflated into a
//  buffer of exactly want bytes, then decoded as that encoding.
static int
s_decode_zstd (float *out, const uint8_t *p, size_t size, uint64_t want,
               nn_codec_id_t id, const nn_codec_shape_t *expected, char *err,
               size_t err_size)
{
    const char *name = nn_codec_name (id);
    uint64_t max = nn_codec_zstd_wire_bytes_max (want);
    if ((uint64_t) size > max)
        return nn_errf (err, err_size, "codec: %s: zstd payload is %zu bytes, more than "
                        "the %" PRIu64 " its shape allows", name, size, max);
    const uint8_t *body = p + NN_CODEC_HEADER_BYTES;
    size_t zsize = size - NN_CODEC_HEADER_BYTES, raw_body = (size_t) (want
                                                                - NN_CODEC_HEADER_BYTES);
    if (ZSTD_findFrameCompressedSize (body, zsize) != zsize)
        return nn_errf (err, err_size, "codec: %s: the %zu-byte body is not one whole zstd "
                        "frame", name, zsize);
    unsigned long long content = ZSTD_getFrameContentSize (body, zsize);
    if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR)
        return nn_errf (err, err_size, "codec: %s: the zstd frame declares no content size",
                        name);
    if (content != (unsigned long long) raw_body)
        return nn_errf (err, err_size, "codec: %s: the zstd frame declares %llu bytes, the "
                        "header and shape need %zu", name, content, raw_body);
    uint8_t *raw = nn_malloc ((size_t) want);
    memcpy (raw, p, NN_CODEC_HEADER_BYTES);
    raw[1] &= (uint8_t) ~NN_CODEC_FLAG_ZSTD;
    size_t got = ZSTD_decompress (raw + NN_CODEC_HEADER_BYTES, raw_body, body, zsize);
    int rc = 0;
    if (ZSTD_isError (got))
        rc = nn_errf (err, err_size, "codec: %s: zstd: %s", name, ZSTD_getErrorName (got));
    else
    if (got != raw_body)
        rc = nn_errf (err, err_size, "codec: %s: the zstd frame holds %zu bytes, the header "
                      "and shape need %zu", name, got, raw_body);
    else
        rc = nn_codec_decode (out, raw, (size_t) want, id, expected, err, err_size);
    nn_free (raw);
    return rc;
}

int
nn_codec_decode (float *out, const void *buf, size_t size, nn_codec_id_t expected_id,
                 const nn_codec_shape_t *expected, char *err, size_t err_size)
{
    assert (out && expected && (buf || size == 0));
    const uint8_t *p = buf;
    if (size < NN_CODEC_HEADER_BYTES)
        return nn_errf (err, err_size, "codec: payload of %zu bytes is shorter than the "
                        "%d-byte header", size, NN_CODEC_HEADER_BYTES);
    const char *name = nn_codec_name ((nn_codec_id_t) p[0]);
    if (!name)
        return nn_errf (err, err_size, "codec: unknown codec id %u", p[0]);
    if (p[0] != (uint8_t) expected_id)
        return nn_errf (err, err_size, "codec: payload is %s, the plan says %s", name,
                        nn_codec_name (expected_id) ? nn_codec_name (expected_id) : "?");
    uint8_t flags = p[1];
    uint8_t allowed = (expected_id == NN_CODEC_INT8 ? NN_CODEC_FLAG_STOCHASTIC : 0)
                    | (expected_id != NN_CODEC_NONE ? NN_CODEC_FLAG_ZSTD : 0);
    if (flags & ~allowed)
        return nn_errf (err, err_size, "codec: %s: flags 0x%02x not allowed", name, flags);
    if (p[2] || p[3])
        return nn_errf (err, err_size, "codec: %s: reserved bytes must be 0", name);
    nn_codec_shape_t s = { s_get_u32 (p + 4), s_get_u32 (p + 8), s_get_u32 (p + 12),
                           s_get_u32 (p + 16) };
    if (s.n != expected->n || s.h != expected->h || s.w != expected->w
    ||  s.c != expected->c)
        return nn_errf (err, err_size, "codec: %s: shape (%" PRIu32 ", %" PRIu32 ", %" PRIu32
                        ", %" PRIu32 ") is not the expected (%" PRIu32 ", %" PRIu32 ", %"
                        PRIu32 ", %" PRIu32 ")", name, s.n, s.h, s.w, s.c, expected->n,
                        expected->h, expected->w, expected->c);
    uint64_t count = nn_codec_shape_count (&s);
    if (count == 0 || count > UINT32_MAX)
        return nn_errf (err, err_size, "codec: %s: %" PRIu64 " elements; need 1..%" PRIu32,
                        name, count, UINT32_MAX);
    uint32_t k = s_get_u32 (p + 20);
    if (expected_id != NN_CODEC_TOPK && k != 0)
        return nn_errf (err, err_size, "codec: %s: k must be 0, got %" PRIu32, name, k);
    if (k > count)
        return nn_errf (err, err_size, "codec: topk: k %" PRIu32 " exceeds the %" PRIu64
                        " elements", k, count);
    uint64_t want = nn_codec_wire_bytes (expected_id, count, s.c, k);
    if (flags & NN_CODEC_FLAG_ZSTD)
        return s_decode_zstd (out, p, size, want, expected_id, expected, err, err_size);
    if ((uint64_t) size != want)
        return nn_errf (err, err_size, "codec: %s: payload is %zu bytes, the header says %"
                        PRIu64, name, size, want);
    const uint8_t *body = p + NN_CODEC_HEADER_BYTES;
    switch (expected_id) {
        case NN_CODEC_NONE:
            if (s_little_endian ())
                memcpy (out, body, 4 * (size_t) count);
            else
                for (uint64_t i = 0; i < count; i++)
                    out[i] = s_get_f32 (body + 4 * i);
            break;
        case NN_CODEC_FP16: {
            uint16_t block[1024];
            for (uint64_t i = 0; i < count; i += 1024) {
                size_t m = count - i < 1024 ? (size_t) (count - i) : 1024;
                if (s_little_endian ())
                    memcpy (block, body + 2 * i, 2 * m);
                else
                    for (size_t j = 0; j < m; j++)
                        block[j] = (uint16_t) (body[2 * (i + j)] | body[2 * (i + j) + 1] << 8);
                nn_codec_fp16_to_float (out + i, block, m);
            }
            break;
        }
        case NN_CODEC_INT8: {
            uint32_t c = s.c;
            for (uint32_t j = 0; j < c; j++) {
                float scale = s_get_f32 (body + 8 * (size_t) j);
                float zero = s_get_f32 (body + 8 * (size_t) j + 4);
                if (!(isfinite (scale) && scale > 0.0f))
                    return nn_errf (err, err_size, "codec: int8: channel %" PRIu32
                                    ": scale %g must be finite and > 0", j, (double) scale);
                if (!isfinite (zero) || !((double) zero + 255.0 * (double) scale <= FLT_MAX))
                    return nn_errf (err, err_size, "codec: int8: channel %" PRIu32
                                    ": zero %g + 255 scale %g is not a finite float", j,
                                    (double) zero, (double) scale);
            }
            //  Channels in blocks whose parameters fit on the stack; the
            //  value is computed in double (exact product, one rounding),
            //  so it never exceeds the range the check above allowed.
            const uint8_t *codes = body + 8 * (size_t) c;
            uint32_t rows = (uint32_t) (count / c);
            double scale[256], zero[256];
            for (uint32_t j0 = 0; j0 < c; j0 += 256) {
                uint32_t m = c - j0 < 256 ? c - j0 : 256;
                for (uint32_t j = 0; j < m; j++) {
                    scale[j] = s_get_f32 (body + 8 * (size_t) (j0 + j));
                    zero[j] = s_get_f32 (body + 8 * (size_t) (j0 + j) + 4);
                }
                for (uint32_t r = 0; r < rows; r++) {
                    const uint8_t *q = codes + (size_t) r * c + j0;
                    float *y = out + (size_t) r * c + j0;
                    for (uint32_t j = 0; j < m; j++)
                        y[j] = (float) (zero[j] + (double) q[j] * scale[j]);
                }
            }
            break;
        }
        case NN_CODEC_TOPK: {
            const uint8_t *idx = body, *val = body + 4 * (size_t) k;
            for (uint32_t j = 0; j < k; j++) {
                uint32_t i = s_get_u32 (idx + 4 * (size_t) j);
                if (i >= count)
                    return nn_errf (err, err_size, "codec: topk: index %" PRIu32 " (entry %"
                                    PRIu32 ") is out of range 0..%" PRIu64, i, j, count - 1);
                if (j > 0 && i <= s_get_u32 (idx + 4 * (size_t) (j - 1)))
                    return nn_errf (err, err_size, "codec: topk: indices must be strictly "
                                    "increasing: entry %" PRIu32 " is %" PRIu32 " after %"
                                    PRIu32, j, i, s_get_u32 (idx + 4 * (size_t) (j - 1)));
            }
            memset (out, 0, sizeof (float) * (size_t) count);
            for (uint32_t j = 0; j < k; j++)
                out[s_get_u32 (idx + 4 * (size_t) j)] = s_get_f32 (val + 4 * (size_t) j);
            break;
        }
        default:
            assert (!"unknown codec");
    }
    return 0;
}
