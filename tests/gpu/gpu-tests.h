/*
 * gpu-tests.h - what the files of rtx-gpu-tests share: the check function (gpu-util.h, common
 * to every GPU test program) and the suites' entry points.
 */
#ifndef RTX_TESTS_GPU_H
#define RTX_TESTS_GPU_H

#include "tests/gpu/gpu-util.h"

/* CUDA backend against the CPU reference on device `index` (tests/gpu/gpu-parity.c). */
void gpu_parity_tests(int index);

/* conv2d and pools against the CPU, CUDA graph replay, device-resident execution and staged
 * copies on device `index` (tests/gpu/gpu-exec.c). */
void gpu_exec_tests(int index);

/* The CUDA backend's attention (fused and unfused routes) against the CPU reference on device
 * `index` (tests/gpu/gpu-attention.c). */
void gpu_attention_tests(int index);

/* rope and paged_attention on the CUDA backend against the CPU reference on device `index`
 * (tests/gpu/gpu-generation.c). */
void gpu_generation_tests(int index);
/* The same cases with ref as the reference and dev under test: any two backends (the CPU in
 * both roles checks the cases themselves). */
struct rtx_backend;
void gpu_generation_run(struct rtx_backend *ref, struct rtx_backend *dev);

#endif /* RTX_TESTS_GPU_H */
