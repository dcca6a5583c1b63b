/*  pl_le.h: little-endian integers and IEEE floats, byte by byte, so no
    host struct layout or byte order leaks into a file or onto the wire.
    p points to at least the value's size in bytes.
*/
#ifndef PL_LE_H_INCLUDED
#define PL_LE_H_INCLUDED

#include <stdint.h>
#include <string.h>

static inline void
pl_le_put_u16 (uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
}

static inline void
pl_le_put_u32 (uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static inline void
pl_le_put_u64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static inline uint16_t
pl_le_get_u16 (const uint8_t *p)
{
    return (uint16_t) (p[0] | (uint16_t) p[1] << 8);
}

static inline uint32_t
pl_le_get_u32 (const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint64_t
pl_le_get_u64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

//  Two's complement without relying on implementation-defined conversion.
static inline int32_t
pl_le_get_i32 (const uint8_t *p)
{
    uint32_t u = pl_le_get_u32 (p);
    return u <= INT32_MAX ? (int32_t) u : -(int32_t) (~u) - 1;
}

static inline void
pl_le_put_i32 (uint8_t *p, int32_t v)
{
    pl_le_put_u32 (p, (uint32_t) v);
}

//  Floats travel as the little-endian bytes of their IEEE-754 bit pattern.
static inline void
pl_le_put_f32 (uint8_t *p, float v)
{
    uint32_t u;
    memcpy (&u, &v, sizeof u);
    pl_le_put_u32 (p, u);
}

static inline float
pl_le_get_f32 (const uint8_t *p)
{
    uint32_t u = pl_le_get_u32 (p);
    float v;
    memcpy (&v, &u, sizeof v);
    return v;
}

static inline void
pl_le_put_f64 (uint8_t *p, double v)
{
    uint64_t u;
    memcpy (&u, &v, sizeof u);
    pl_le_put_u64 (p, u);
}

static inline double
pl_le_get_f64 (const uint8_t *p)
{
    uint64_t u = pl_le_get_u64 (p);
    double v;
    memcpy (&v, &u, sizeof v);
    return v;
}

#endif
