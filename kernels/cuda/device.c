/*
 * device.c - CUDA device discovery through the CUDA runtime: how many devices, what each one
 * is (name, SMs, memory, compute capability, PCI bus id, free memory), and a self-test that
 * runs the probe kernel (probe.cu) on a device and checks what it wrote.
 *
 * DESIGN
 * No GPU is the normal case on build and CI machines, so cudaGetDeviceCount's "no device" and
 * "no driver" answers are reasons, not errors: rtx_cuda_device_count turns them into a sentence
 * for the caller's one log line. cudaErrorInsufficientDriver means two things, told apart by
 * cudaDriverGetVersion: 0 means no driver is installed at all, a number means a driver too old
 * for this runtime (a fault an operator must fix). Every other CUDA call goes through
 * RTX_CUDA_CHECK and gives RTX_EGPU. Each public function saves the calling thread's current
 * device and restores it, so callers on per-device threads keep their own selection.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/backend-cuda.h"
#include "kernels/cuda/cuda-impl.h"

#define SELFTEST_ELEMS (1u << 20) /* 4 MiB of uint32_t: many blocks, still instant */
#define SELFTEST_SEED 0x5eed1234u

int rtx__cuda_check(cudaError_t e, const char *stmt, const char *func, const char *file, int line,
                    struct rtx_err *err) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* clear it: this failure is reported here, once */
    return rtx_err_set(err, RTX_EGPU, "%s: %s (%s in %s, %s:%d)", cudaGetErrorName(e),
                       cudaGetErrorString(e), stmt, func, file, line);
}

/* "13.0" from a CUDA version number (1000 * major + 10 * minor). */
static void version_text(int v, char *out, size_t size) {
    snprintf(out, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

int rtx_cuda_device_count(char *why, size_t why_size, bool *driver_fault) {
    char reason[256] = "";
    bool fault = false;
    int count = 0;
    struct rtx_err cerr = {0};
    cudaError_t ce = cudaSuccess;
    if (RTX_CUDA_CHECK(&cerr, ce = cudaGetDeviceCount(&count)) != 0) {
        count = 0;
        int drv = 0, rt = 0;
        char drv_s[16], rt_s[16];
        if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
        if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
        (void)cudaGetLastError();
        version_text(drv, drv_s, sizeof drv_s);
        version_text(rt, rt_s, sizeof rt_s);
        if (ce == cudaErrorNoDevice) {
            snprintf(reason, sizeof reason, "the driver (CUDA %s) reports no CUDA device", drv_s);
        } else if (ce == cudaErrorInsufficientDriver && drv == 0) {
            snprintf(reason, sizeof reason, "no NVIDIA driver is installed");
        } else if (ce == cudaErrorInsufficientDriver) {
            snprintf(reason, sizeof reason, "the driver supports CUDA %s, the runtime needs %s",
                     drv_s, rt_s);
            fault = true;
        } else {
            snprintf(reason, sizeof reason, "the driver does not answer: %.200s", cerr.msg);
            fault = true;
        }
    } else if (count <= 0) {
        count = 0;
        snprintf(reason, sizeof reason, "the driver reports no CUDA device");
    }
    if (why && why_size) snprintf(why, why_size, "%s", reason);
    if (driver_fault) *driver_fault = fault;
    return count;
}

/* The calling thread's current device, to restore after selecting another (-1: none yet). */
static int current_device(void) {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        dev = -1;
    }
    return dev;
}

static void restore_device(int dev) {
    if (dev >= 0 && cudaSetDevice(dev) != cudaSuccess) (void)cudaGetLastError();
}

int rtx_cuda_device_query(int index, struct rtx_cuda_device *out, struct rtx_err *err) {
    if (!out) return rtx_err_set(err, RTX_EINVAL, "rtx_cuda_device_query: out is NULL");
    memset(out, 0, sizeof *out);
    out->index = index;
    struct cudaDeviceProp p;
    int rc = RTX_CUDA_CHECK(err, cudaGetDeviceProperties(&p, index));
    if (rc != 0) return rc;
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof p.name, p.name);
    out->sm_count = p.multiProcessorCount;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->memory_bytes = p.totalGlobalMem;
    rc =
        RTX_CUDA_CHECK(err, cudaDeviceGetPCIBusId(out->pci_bus_id, sizeof out->pci_bus_id, index));
    if (rc != 0) return rc;

    int prev = current_device();
    size_t free_b = 0, total_b = 0;
    rc = RTX_CUDA_CHECK(err, cudaSetDevice(index));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaMemGetInfo(&free_b, &total_b));
    restore_device(prev);
    if (rc != 0) return rc;
    out->memory_free_bytes = free_b;
    out->healthy = true;
    return 0;
}

int rtx_cuda_device_selftest(int index, struct rtx_err *err) {
    const uint32_t n = SELFTEST_ELEMS;
    const size_t bytes = (size_t)n * sizeof(uint32_t);
    uint32_t *host = NULL, *dbuf = NULL;
    cudaStream_t stream = NULL;
    bool have_stream = false;
    int prev = current_device();

    int rc = RTX_CUDA_CHECK(err, cudaSetDevice(index));
    if (rc != 0) goto out;
    host = rtx_malloc(bytes);
    if (!host) {
        rc = rtx_err_set(err, RTX_ENOMEM, "self-test: out of memory for %zu host bytes", bytes);
        goto out;
    }
    rc = RTX_CUDA_CHECK(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (rc != 0) goto out;
    have_stream = true;
    rc = RTX_CUDA_CHECK(err, cudaMalloc((void **)&dbuf, bytes));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaMemsetAsync(dbuf, 0, bytes, stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, rtx__cuda_probe_launch(dbuf, n, SELFTEST_SEED, stream));
    if (rc == 0)
        rc = RTX_CUDA_CHECK(err,
                            cudaMemcpyAsync(host, dbuf, bytes, cudaMemcpyDeviceToHost, stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaStreamSynchronize(stream));
    if (rc != 0) goto out;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t want = rtx__cuda_probe_value(SELFTEST_SEED, i);
        if (host[i] != want) {
            rc = rtx_err_set(err, RTX_EGPU,
                             "self-test: element %u of %u is 0x%08x, expected 0x%08x", i, n,
                             host[i], want);
            goto out;
        }
    }

out:
    /* Cleanup failures matter only when everything before them worked. */
    if (dbuf) {
        int frc = RTX_CUDA_CHECK(rc == 0 ? err : NULL, cudaFree(dbuf));
        if (rc == 0) rc = frc;
    }
    if (have_stream) {
        int src = RTX_CUDA_CHECK(rc == 0 ? err : NULL, cudaStreamDestroy(stream));
        if (rc == 0) rc = src;
    }
    rtx_free(host);
    restore_device(prev);
    return rc;
}

int rtx_cuda_devices_init(struct rtx_cuda_devices *l, bool selftest, struct rtx_err *err) {
    if (!l) return rtx_err_set(err, RTX_EINVAL, "rtx_cuda_devices_init: list is NULL");
    memset(l, 0, sizeof *l);
    int n = rtx_cuda_device_count(l->absent, sizeof l->absent, &l->driver_fault);
    if (n == 0) return 0;
    l->devs = rtx_calloc((size_t)n, sizeof *l->devs);
    if (!l->devs) return rtx_err_set(err, RTX_ENOMEM, "out of memory listing %d CUDA devices", n);
    l->n = n;
    for (int i = 0; i < n; i++) {
        struct rtx_cuda_device *d = &l->devs[i];
        struct rtx_err derr = {0};
        int rc = rtx_cuda_device_query(i, d, &derr);
        if (rc == 0 && selftest) rc = rtx_cuda_device_selftest(i, &derr);
        if (rc == RTX_ENOMEM) return rtx_err_set(err, rc, "device %d: %s", i, derr.msg);
        if (rc != 0) {
            d->index = i;
            d->healthy = false;
            snprintf(d->detail, sizeof d->detail, "%.*s", (int)(sizeof d->detail) - 1, derr.msg);
        }
    }
    return 0;
}

void rtx_cuda_devices_close(struct rtx_cuda_devices *l) {
    if (!l) return;
    rtx_free(l->devs);
    memset(l, 0, sizeof *l);
}
