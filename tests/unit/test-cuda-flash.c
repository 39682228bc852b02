/*
 * test-cuda-flash.c - the host side of the fused attention kernels (kernels/cuda/
 * attention-flash.h) where CI runs it, without a GPU: which problems the fused route takes
 * (dtype, head dims, lengths, pointer alignment, mask dtype, compute capability), the names of
 * the tile configurations RTX_ATTN_ROUTE accepts, and the launcher refusing a problem it does
 * not support, or queuing nothing for an empty one, before any CUDA call. The kernels
 * themselves run on the GPU machine (tests/gpu/gpu-attention.c).
 */
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/attention-flash.h"
#include "tests/unit/test-util.h"

/* 16-byte aligned stand-ins for device pointers (never dereferenced). */
static _Alignas(16) char buf[64];
#define P16 ((const void *)buf)
#define P8 ((const void *)(buf + 8))
#define P2 ((const void *)(buf + 2))

static bool supported(enum rtx_dtype dt, int64_t d, int64_t dv, int cc) {
    return rtx__cuda_flash_supported(dt, d, dv, 100, 200, P16, P16, P16, P16, NULL, cc);
}

START_TEST(flash_supports_f16_bf16_head_dims_64_128) {
    ck_assert(supported(RTX_F16, 64, 64, 90));
    ck_assert(supported(RTX_BF16, 128, 128, 90));
    ck_assert(supported(RTX_BF16, 64, 64, 80));
    ck_assert(!supported(RTX_F32, 64, 64, 90));
    ck_assert(!supported(RTX_I32, 64, 64, 90));
    ck_assert(!supported(RTX_F16, 96, 96, 90));
    ck_assert(!supported(RTX_F16, 32, 32, 90));
    ck_assert(!supported(RTX_F16, 64, 128, 90)); /* v's head dim differs */
    ck_assert(!supported(RTX_F16, 64, 64, 75));  /* no bf16 / f16 mma.sync m16n8k16 path */
}
END_TEST

START_TEST(flash_needs_aligned_pointers_and_int32_lengths) {
    ck_assert(rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, 1, P16, P16, P16, P2, NULL, 90) ==
              false); /* out must be 4-byte aligned */
    ck_assert(rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, 1, P16, P16, P16, P8, NULL, 90));
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, 1, P8, P16, P16, P16, NULL, 90));
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, 1, P16, P8, P16, P16, NULL, 90));
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, 1, P16, P16, P8, P16, NULL, 90));
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, (int64_t)1 << 31, 1, P16, P16, P16, P16,
                                         NULL, 90));
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, 1, -1, P16, P16, P16, P16, NULL, 90));
}
END_TEST

START_TEST(flash_mask_must_be_bool_or_the_input_dtype) {
    struct rtx_cuda_attn_mask mk;
    memset(&mk, 0, sizeof mk);
    mk.data = P16;
    mk.dt = RTX_BOOL;
    ck_assert(rtx__cuda_flash_supported(RTX_F16, 64, 64, 9, 9, P16, P16, P16, P16, &mk, 90));
    mk.dt = RTX_F16;
    ck_assert(rtx__cuda_flash_supported(RTX_F16, 64, 64, 9, 9, P16, P16, P16, P16, &mk, 90));
    mk.dt = RTX_BF16;
    ck_assert(!rtx__cuda_flash_supported(RTX_F16, 64, 64, 9, 9, P16, P16, P16, P16, &mk, 90));
    mk.data = NULL; /* no mask: its dtype does not matter */
    ck_assert(rtx__cuda_flash_supported(RTX_F16, 64, 64, 9, 9, P16, P16, P16, P16, &mk, 90));
}
END_TEST

START_TEST(flash_tile_names) {
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("auto"), RTX_FLASH_TILE_AUTO);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("m64n64"), RTX_FLASH_TILE_M64_N64);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("m128n64"), RTX_FLASH_TILE_M128_N64);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("wg1n64"), RTX_FLASH_TILE_WG1_N64);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("wp1n64"), RTX_FLASH_TILE_WP1_N64);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse(""), -1);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("m64n65"), -1);
    ck_assert_int_eq(rtx__cuda_flash_tile_parse("WG1N64"), -1);
}
END_TEST

/* A problem the kernels cannot take is refused before any CUDA call; an empty one queues
 * nothing (both hold without a GPU). */
START_TEST(flash_launcher_refuses_before_any_cuda_call) {
    struct rtx_cuda_flash p;
    memset(&p, 0, sizeof p);
    p.q = p.k = p.v = P16;
    p.out = buf;
    p.bh = 2;
    p.lq = 0;
    p.lk = 5;
    p.d = 64;
    p.dt = RTX_BF16;
    p.cc = 90;
    p.scale = 0.125f;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaSuccess); /* lq 0 */
    p.lq = 5;
    p.bh = 0;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaSuccess); /* no heads */
    p.bh = -1;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
    p.bh = 2;
    p.d = 96;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
    p.d = 64;
    p.dt = RTX_F32;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
    p.dt = RTX_F16;
    p.tile = RTX_FLASH_TILE_COUNT;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
    p.tile = -1;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
    p.tile = RTX_FLASH_TILE_AUTO;
    p.q = P8;
    ck_assert_int_eq(rtx__cuda_flash_attention(&p, NULL), cudaErrorInvalidValue);
}
END_TEST

Suite *rtx_cuda_flash_suite(void) {
    Suite *s = suite_create("cuda_flash");
    TCase *tc = tcase_create("host");
    tcase_add_test(tc, flash_supports_f16_bf16_head_dims_64_128);
    tcase_add_test(tc, flash_needs_aligned_pointers_and_int32_lengths);
    tcase_add_test(tc, flash_mask_must_be_bool_or_the_input_dtype);
    tcase_add_test(tc, flash_tile_names);
    tcase_add_test(tc, flash_launcher_refuses_before_any_cuda_call);
    suite_add_tcase(s, tc);
    return s;
}
