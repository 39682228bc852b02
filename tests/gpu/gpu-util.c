/*
 * gpu-util.c - the check counter, notes, summary, device-count rule and tensor comparisons
 * of the GPU test programs (gpu-util.h). Linked into each of them, so each program keeps its own counts.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/backend-cuda.h"
#include "tests/allow-skip.h"
#include "tests/gpu/gpu-util.h"

static int n_passed, n_failed, n_notes;

bool gpu_check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        n_passed++;
    else
        n_failed++;
    return ok;
}

void gpu_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("info ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    n_notes++;
}

int gpu_check_summary(void) {
    if (n_notes)
        printf("%d passed, %d failed (and %d info lines, not checks)\n", n_passed, n_failed,
               n_notes);
    else
        printf("%d passed, %d failed\n", n_passed, n_failed);
    if (n_passed + n_failed == 0) printf("FAIL no check ran\n");
    return n_failed || n_passed + n_failed == 0 ? 1 : 0;
}

int gpu_device_count(const char *prog) {
    char why[256];
    bool fault = false;
    int n = rtx_cuda_device_count(why, sizeof why, &fault);
    if (n > 0) return n;
    bool node = access("/dev/nvidia0", F_OK) == 0;
    if (!node && rtx_test_skip_allowed("gpu")) {
        printf("%s: skipped: no CUDA device (%s); " RTX_ALLOW_SKIP_ENV " lists gpu\n", prog, why);
        return 0;
    }
    gpu_check(false, "a CUDA device is listed (the runtime says: %s%s)%s", why,
              fault ? ", a driver fault" : "",
              node ? "; a GPU device node (/dev/nvidia0) exists, so the driver is what fails"
                   : "; set " RTX_ALLOW_SKIP_ENV "=gpu where this machine is meant to have "
                     "no GPU");
    return -1;
}

bool gpu_close_to(const struct rtx_tensor *ref, const struct rtx_tensor *got, double tol,
                  char *why, size_t len) {
    if (!ref || !got || ref->dtype != got->dtype ||
        rtx_tensor_numel(ref) != rtx_tensor_numel(got)) {
        snprintf(why, len, "a tensor is missing, or the dtype or size differs");
        return false;
    }
    int64_t n = rtx_tensor_numel(ref), bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double a = rtx_tensor_get(ref, i), b = rtx_tensor_get(got, i);
        bool ok = isnan(a) || isnan(b) ? isnan(a) && isnan(b)
                                       : fabs(a - b) <= tol * fmax(1.0, fabs(a));
        if (!ok && first < 0) first = i;
        bad += !ok;
    }
    if (bad == 0) return true;
    snprintf(why, len, "%lld of %lld differ; first at %lld: cpu %.9g gpu %.9g", (long long)bad,
             (long long)n, (long long)first, rtx_tensor_get(ref, first),
             rtx_tensor_get(got, first));
    return false;
}

bool gpu_same_bits(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    return a && b && a->dtype == b->dtype && rtx_tensor_nbytes(a) == rtx_tensor_nbytes(b) &&
           memcmp(rtx_tensor_data(a), rtx_tensor_data(b), rtx_tensor_nbytes(a)) == 0;
}
