/*
 * allow-skip.h - the skip rule of `make test` and `make test-gpu` for the C test programs
 * (rtx-unit-tests and the rtx-gpu-* programs): a check that cannot run because a dependency
 * is missing is a failure unless the environment variable RTX_ALLOW_SKIP, a comma-separated
 * list of names, says the dependency is meant to be absent on this machine. The names are
 * those of tests/skips.py (the Python suites' side of the rule): "gpu" (no CUDA device),
 * "cudnn" (no cuDNN headers at build time or libcudnn.so.9 at run time), ...
 */
#ifndef RTX_TESTS_ALLOW_SKIP_H
#define RTX_TESTS_ALLOW_SKIP_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define RTX_ALLOW_SKIP_ENV "RTX_ALLOW_SKIP"

/* Whether RTX_ALLOW_SKIP lists `name` (entries separated by commas, spaces around them
 * ignored). */
static inline bool rtx_test_skip_allowed(const char *name) {
    const char *p = getenv(RTX_ALLOW_SKIP_ENV);
    size_t n = strlen(name);
    while (p && *p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ",");
        size_t used = len;
        while (used > 0 && p[used - 1] == ' ')
            used--;
        if (used == n && strncmp(p, name, n) == 0) return true;
        p += len;
    }
    return false;
}

#endif /* RTX_TESTS_ALLOW_SKIP_H */
