/*
 * gpu-tests.c - rtx-gpu-tests, the GPU machine's test program (make test-gpu): CUDA device
 * discovery, properties, the self-test on every device, and the error paths (an index that is
 * not a device gives RTX_EGPU with a message, and the process keeps working afterwards); then
 * the CUDA backend's parity with the CPU reference on every healthy device (gpu-parity.c,
 * gpu-attention.c for attention, gpu-generation.c for rope and paged_attention).
 * Prints one line per check and "N passed, M failed"; exits 1 when a check failed.
 *
 * DESIGN
 * A plain C program rather than a Check suite: Check forks per test, and a CUDA context does
 * not survive fork. Without a GPU it fails: `make test-gpu` is for a GPU machine, where a
 * missing device means a missing driver. Only RTX_ALLOW_SKIP=gpu (tests/allow-skip.h: this
 * machine is meant to have no GPU) and no GPU device node (/dev/nvidia0) make it print that it
 * skipped and exit 0 (gpu-util.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/backend-cuda.h"
#include "tests/gpu/gpu-tests.h"

static double gib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

/* Properties a real CUDA device must have. */
static void test_properties(const struct rtx_cuda_device *d) {
    printf("device %d: %s, %d SMs, %.1f GiB (%.1f GiB free), cc %d.%d, pci %s\n", d->index,
           d->name, d->sm_count, gib(d->memory_bytes), gib(d->memory_free_bytes), d->cc_major,
           d->cc_minor, d->pci_bus_id);
    gpu_check(d->healthy, "device %d is healthy%s%s", d->index, d->healthy ? "" : ": ", d->detail);
    gpu_check(d->name[0] != '\0', "device %d has a name", d->index);
    gpu_check(d->sm_count > 0 && d->sm_count < 10000, "device %d: SM count %d is plausible",
              d->index, d->sm_count);
    gpu_check(d->cc_major >= 3 && d->cc_major < 100 && d->cc_minor >= 0 && d->cc_minor < 10,
              "device %d: compute capability %d.%d is plausible", d->index, d->cc_major,
              d->cc_minor);
    gpu_check(d->memory_bytes >= ((size_t)1 << 30), "device %d: %zu bytes of memory (>= 1 GiB)",
              d->index, d->memory_bytes);
    gpu_check(d->memory_free_bytes > 0 && d->memory_free_bytes <= d->memory_bytes,
              "device %d: free memory %zu within total", d->index, d->memory_free_bytes);
    gpu_check(strlen(d->pci_bus_id) >= 7 && strchr(d->pci_bus_id, ':'),
              "device %d: PCI bus id '%s'", d->index, d->pci_bus_id);
}

/* A second query gives the same description as the listing. */
static void test_query_again(const struct rtx_cuda_device *d) {
    struct rtx_cuda_device q;
    struct rtx_err err = {0};
    int rc = rtx_cuda_device_query(d->index, &q, &err);
    gpu_check(rc == 0, "device %d: query again%s%s", d->index, rc ? ": " : "", err.msg);
    if (rc != 0) return;
    gpu_check(strcmp(q.name, d->name) == 0 && q.sm_count == d->sm_count &&
                  q.memory_bytes == d->memory_bytes && q.cc_major == d->cc_major &&
                  q.cc_minor == d->cc_minor && strcmp(q.pci_bus_id, d->pci_bus_id) == 0,
              "device %d: query again gives the same properties", d->index);
}

/* The self-test passes, twice (it cleans up after itself). */
static void test_selftest(int index) {
    for (int round = 1; round <= 2; round++) {
        struct rtx_err err = {0};
        int rc = rtx_cuda_device_selftest(index, &err);
        gpu_check(rc == 0, "device %d: self-test run %d%s%s", index, round, rc ? ": " : "",
                  err.msg);
    }
}

/* An index that is not a device: RTX_EGPU with a message naming the call; then the devices
 * still work. */
static void test_bad_index(int n) {
    const int bad[] = {n, n + 7, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct rtx_err err = {0};
        struct rtx_cuda_device q;
        int rc = rtx_cuda_device_query(bad[i], &q, &err);
        gpu_check(rc == RTX_EGPU && strstr(err.msg, "cudaGetDeviceProperties") &&
                      strstr(err.msg, "device.c:"),
                  "query of device %d gives RTX_EGPU naming the call (%s)", bad[i], err.msg);
        memset(&err, 0, sizeof err);
        rc = rtx_cuda_device_selftest(bad[i], &err);
        gpu_check(rc == RTX_EGPU && strstr(err.msg, "cudaSetDevice") && err.code == RTX_EGPU,
                  "self-test of device %d gives RTX_EGPU naming the call (%s)", bad[i], err.msg);
    }
    if (n > 0) {
        struct rtx_err err = {0};
        int rc = rtx_cuda_device_selftest(0, &err);
        gpu_check(rc == 0, "device 0 still runs work after the errors%s%s", rc ? ": " : "",
                  err.msg);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = gpu_device_count("rtx-gpu-tests");
    if (n <= 0) return n == 0 ? 0 : gpu_check_summary();

    struct rtx_cuda_devices l;
    struct rtx_err err = {0};
    int rc = rtx_cuda_devices_init(&l, true, &err);
    gpu_check(rc == 0 && l.n == n, "%d CUDA device(s) listed%s%s", l.n, rc ? ": " : "", err.msg);
    for (int i = 0; i < l.n; i++) {
        gpu_check(l.devs[i].index == i, "device %d has index %d", i, l.devs[i].index);
        test_properties(&l.devs[i]);
        test_query_again(&l.devs[i]);
        test_selftest(i);
    }
    test_bad_index(n);
    /* RTX_GPU_ONLY=parity|attention|exec|generation runs one group of backend tests */
    const char *only = getenv("RTX_GPU_ONLY");
#define GROUP(name) (only == NULL || only[0] == '\0' || strcmp(only, name) == 0)
    for (int i = 0; i < l.n; i++)
        if (l.devs[i].healthy) {
            if (GROUP("parity")) gpu_parity_tests(i);
            if (GROUP("attention")) gpu_attention_tests(i);
            if (GROUP("exec")) gpu_exec_tests(i);
            if (GROUP("generation")) gpu_generation_tests(i);
        }
#undef GROUP
    gpu_check(rtx_cuda_device_count(NULL, 0, NULL) == n, "the count is unchanged after errors");
    rtx_cuda_devices_close(&l);
    rtx_cuda_devices_close(NULL);

    return gpu_check_summary();
}
