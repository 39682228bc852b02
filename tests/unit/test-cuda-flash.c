/*
 * test-cuda-flash.c - the host side of the fused attention kernels (kernels/cuda/
 * attention-flash.h) where CI runs it, without a GPU: which problems the fused route takes
 * (dtype, head dims, lengths, pointer alignment, mask dtype, compute capability), the names of
 * the tile configurations RTX_ATTN_ROUTE accepts, and the launcher refusing a problem it does
 * not support, or queuing nothing for an empty one, before any CUDA call. Also the cuDNN
 * route's side that needs no GPU (kernels/cuda/attention-cudnn.h): which problems it takes,
 * and that loading libcudnn.so.9 either succeeds with a 9.x version or says why not. The
 * kernels themselves run on the GPU machine (tests/gpu/gpu-attention.c).
 *
 * cuDNN is expected on the build machines (its headers and library come with the CUDA
 * toolkit there): built without cuDNN's headers, the route supports nothing and its host
 * checks cannot run, so the suite registers one failing test saying so; a library that
 * cannot be loaded fails too. RTX_ALLOW_SKIP=cudnn (tests/allow-skip.h) says the machine is
 * meant to lack cuDNN: then, without the headers, the route's checks are not registered and
 * the suite says so on stderr, and without the library the test checks only that the loader
 * says why (docs/decisions.md).
 */
#include <stdint.h>
#include <string.h>

#include <stdio.h>

#include "kernels/cuda/attention-cudnn.h"
#include "kernels/cuda/attention-flash.h"
#include "tests/allow-skip.h"
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

/* A contiguous [2, 4, lq, d] problem of dtype dt on 16-byte aligned stand-in pointers. */
static struct rtx_cuda_sdpa sdpa(enum rtx_dtype dt, int64_t lq, int64_t lk, int64_t d) {
    struct rtx_cuda_sdpa p = {
        .dt = dt, .b = 2, .h = 4, .lq = lq, .lk = lk, .d = d, .dv = d,
        .q_str = {4 * lq * d, lq * d, d, 1}, .k_str = {4 * lk * d, lk * d, d, 1},
        .v_str = {4 * lk * d, lk * d, d, 1}, .o_str = {4 * lq * d, lq * d, d, 1},
        .scale = 0.125f, .q = P16, .k = P16, .v = P16, .out = (void *)buf,
    };
    return p;
}

/* Whether the cuDNN route was built (with cuDNN's headers): without them it supports nothing,
 * not even this plain problem. */
static bool cudnn_route_built(void) {
    struct rtx_cuda_sdpa p = sdpa(RTX_BF16, 100, 200, 64);
    return rtx__cudnn_sdpa_supported(&p, 90);
}

START_TEST(cudnn_route_is_built) {
    ck_abort_msg("rtxd was built without cuDNN's headers (cudnn_graph.h, looked for with "
                 "__has_include in kernels/cuda/attention-cudnn.c), so the cuDNN route's "
                 "checks cannot run: install them with the CUDA toolkit, or set "
                 "RTX_ALLOW_SKIP=cudnn where this machine is meant to lack cuDNN");
}
END_TEST

START_TEST(cudnn_route_takes_f16_bf16_head_dims_multiple_of_8) {
    struct rtx_cuda_sdpa p = sdpa(RTX_BF16, 100, 200, 64);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    ck_assert(rtx__cudnn_sdpa_supported(&p, 80));
    p = sdpa(RTX_F16, 1, 1, 128);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_F16, 17, 33, 256);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 80)); /* 256 needs Hopper */
    p = sdpa(RTX_F16, 17, 33, 72);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_F16, 17, 33, 68); /* not a multiple of 8 */
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_F32, 17, 33, 64);
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_BF16, 17, 33, 64);
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 75));
    p.lk = 0;
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
}
END_TEST

START_TEST(cudnn_route_needs_unit_last_strides_and_alignment) {
    struct rtx_cuda_sdpa p = sdpa(RTX_BF16, 64, 64, 64);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    /* [b, s, h, d] layout: strides permuted, still unit last stride: taken */
    int64_t bshd[4] = {64 * 4 * 64, 64, 4 * 64, 1};
    memcpy(p.q_str, bshd, sizeof bshd);
    ck_assert(rtx__cudnn_sdpa_supported(&p, 90));
    p.k_str[3] = 2;
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_BF16, 64, 64, 64);
    p.v_str[2] = 60; /* 120 bytes between rows: not 16-byte aligned */
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
    p = sdpa(RTX_BF16, 64, 64, 64);
    p.out = (void *)(buf + 8);
    ck_assert(!rtx__cudnn_sdpa_supported(&p, 90));
}
END_TEST

START_TEST(cudnn_library_loads_as_9x_or_says_why) {
    char why[256] = "";
    long v = rtx__cudnn_version(why, sizeof why);
    if (v) {
        ck_assert_int_eq(v / 10000, 9);
    } else {
        ck_assert(why[0] != '\0');
        ck_assert(strstr(why, "cuDNN") != NULL || strstr(why, "libcudnn") != NULL);
        ck_assert_msg(rtx_test_skip_allowed("cudnn"),
                      "cuDNN cannot be loaded (%s): set RTX_ALLOW_SKIP=cudnn where this "
                      "machine is meant to lack it",
                      why);
    }
    /* the answer is remembered: a second call agrees */
    ck_assert_int_eq(rtx__cudnn_version(NULL, 0), v);
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
    if (cudnn_route_built()) {
        tcase_add_test(tc, cudnn_route_takes_f16_bf16_head_dims_multiple_of_8);
        tcase_add_test(tc, cudnn_route_needs_unit_last_strides_and_alignment);
    } else if (rtx_test_skip_allowed("cudnn")) {
        fprintf(stderr, "cuda_flash: the cuDNN route's 2 host checks are NOT registered: built "
                        "without cuDNN's headers, and RTX_ALLOW_SKIP lists cudnn\n");
    } else {
        tcase_add_test(tc, cudnn_route_is_built);
    }
    tcase_add_test(tc, cudnn_library_loads_as_9x_or_says_why);
    suite_add_tcase(s, tc);
    return s;
}
