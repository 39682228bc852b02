/*
 * clock.c - the monotonic clock every module measures on (rtx_mono_ns, runtime/runtime.h).
 */
#include <time.h>

#include "runtime/runtime.h"

int64_t rtx_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
