/*
 * gpu-tests.h - what the files of rtx-gpu-tests share: the one check function that counts
 * and prints results, and the parity suite's entry point.
 */
#ifndef RTX_TESTS_GPU_H
#define RTX_TESTS_GPU_H

#include <stdbool.h>

/* Records one check; prints "ok" or "FAIL" with the formatted description; returns ok. */
bool gpu_check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CUDA backend against the CPU reference on device `index` (tests/gpu/gpu-parity.c). */
void gpu_parity_tests(int index);

#endif /* RTX_TESTS_GPU_H */
