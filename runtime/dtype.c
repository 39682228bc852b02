/*
 * dtype.c - the dtype table and IEEE half-precision conversions.
 */
#include <assert.h>
#include <string.h>

#include "runtime/runtime.h"

static const char *const dtype_names[] = {
#define DTYPE_NAME(name, str, size) str,
    RTX_DTYPE_MAP(DTYPE_NAME)
#undef DTYPE_NAME
};
static const size_t dtype_sizes[] = {
#define DTYPE_SIZE(name, str, size) size,
    RTX_DTYPE_MAP(DTYPE_SIZE)
#undef DTYPE_SIZE
};
static_assert(sizeof dtype_names / sizeof dtype_names[0] == RTX_DTYPE_COUNT, "dtype names");
static_assert(sizeof dtype_sizes / sizeof dtype_sizes[0] == RTX_DTYPE_COUNT, "dtype sizes");

const char *rtx_dtype_name(enum rtx_dtype dt) {
    return (unsigned)dt < RTX_DTYPE_COUNT ? dtype_names[dt] : "?";
}

size_t rtx_dtype_size(enum rtx_dtype dt) {
    return (unsigned)dt < RTX_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}

int rtx_dtype_from_name(const char *name, enum rtx_dtype *out) {
    for (int i = 0; i < RTX_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_names[i]) == 0) {
            *out = (enum rtx_dtype)i;
            return 0;
        }
    }
    return RTX_EINVAL;
}

bool rtx_dtype_is_float(enum rtx_dtype dt) {
    return dt == RTX_F32 || dt == RTX_F16 || dt == RTX_BF16;
}

float rtx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* zero */
    } else {
        /* subnormal: normalize */
        int shift = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            shift++;
        }
        man &= 0x3ffu;
        bits = sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = { .u = bits };
    return v.f;
}

uint16_t rtx_f32_to_f16(float f) {
    union { uint32_t u; float f; } v = { .f = f };
    uint32_t x = v.u;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) return sign | 0x7e00u; /* NaN */
    if (absx >= 0x477ff000u) return sign | 0x7c00u; /* rounds to inf (>= 65520) */
    if (absx < 0x38800000u) {
        /* result is subnormal or zero: value = absx as float; scale to units of 2^-24 */
        if (absx < 0x33000000u) return sign; /* < 2^-25 rounds to zero */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - e); /* 14 .. 24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    /* normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits, nearest even */
    uint32_t r = absx - 0x38000000u; /* exponent - 112 */
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (uint16_t)(r >> 13);
}
