/*
 * gpu-util.h - what every GPU test program (rtx-gpu-tests, rtx-gpu-linalg-tests,
 * rtx-gpu-jobs-tests) shares: one check function that counts and prints results, a note
 * function for figures that are not checks (timings, bandwidths), the closing summary, the
 * rule for a machine without a CUDA device, and two comparisons of host tensors.
 */
#ifndef RTX_TESTS_GPU_UTIL_H
#define RTX_TESTS_GPU_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Records one check; prints "ok" or "FAIL" with the formatted description; returns ok. */
bool gpu_check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "info" with the formatted text: a figure (a time, a bandwidth) or a remark, which is
 * not a check: it counts neither as passed nor as failed (the summary counts notes apart).
 * Where measuring the figure failed, the caller records a failed gpu_check instead. */
void gpu_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "N passed, M failed" for the checks so far (and the number of notes, which are not
 * checks); returns the program's exit status: 1 when a check failed or none ran, else 0. */
int gpu_check_summary(void);

struct rtx_tensor;

/* Two host tensors of one dtype and size agree within tol per element, |got - ref| <= tol *
 * max(1, |ref|), NaN meeting NaN; otherwise (or when one is NULL) why says how many differ
 * and where the first is. */
bool gpu_close_to(const struct rtx_tensor *ref, const struct rtx_tensor *got, double tol,
                  char *why, size_t len);
/* Two host tensors hold the same bytes (both not NULL). */
bool gpu_same_bits(const struct rtx_tensor *a, const struct rtx_tensor *b);

/* The number of CUDA devices, for program `prog` (its name in messages). With none it is a
 * failed check naming the runtime's reason, and -1; unless RTX_ALLOW_SKIP lists "gpu"
 * (tests/allow-skip.h: this machine is meant to have no GPU) and no GPU device node
 * (/dev/nvidia0) exists, in which case it prints "prog: skipped: no CUDA device (why)" and
 * returns 0. With a device node the driver, not the GPU, is what is missing: always a
 * failure. */
int gpu_device_count(const char *prog);

#endif /* RTX_TESTS_GPU_UTIL_H */
