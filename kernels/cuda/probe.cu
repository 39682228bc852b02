/*
 * probe.cu - the smallest kernel that proves a device runs work: each thread writes one element
 * of a known pattern. rtx_cuda_device_selftest (device.c) launches it and checks the result on
 * the host, so a device that enumerates but cannot execute is marked unhealthy.
 */
#include "kernels/cuda/cuda-impl.h"

__global__ static void probe_fill(uint32_t *buf, uint32_t n, uint32_t seed) {
    uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = rtx__cuda_probe_value(seed, i);
}

extern "C" cudaError_t rtx__cuda_probe_launch(uint32_t *buf, uint32_t n, uint32_t seed,
                                              cudaStream_t stream) {
    const uint32_t threads = 256;
    uint32_t blocks = (n + threads - 1) / threads;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 1024) blocks = 1024; /* grid-stride loop covers the rest */
    probe_fill<<<blocks, threads, 0, stream>>>(buf, n, seed);
    return cudaGetLastError();
}
