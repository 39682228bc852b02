/*
 * backend-cuda.c - the CUDA backend on one device: its vtable, the device and pinned-host
 * memory pools, host<->device copies, the op dispatch and the backend's health.
 *
 * DESIGN
 * Streams. Every kernel and every pool block of a backend lives on cu->stream: the executor
 * releases the arena and intermediates as soon as their work is queued, and the pool hands a
 * released block to the next request of the same stream at once, which is safe exactly
 * because anything that later writes the block is queued behind the work still reading it.
 * Staged copies run on cu->copy_stream, fenced by events in both directions so that property
 * holds: before a staged copy, copy_stream waits for an event recorded on the compute stream
 * (everything queued earlier may still use the device block); after it, the compute stream
 * waits for an event recorded on copy_stream (everything queued later sees the data).
 *
 * Pinned staging. An upload of at least STAGE_MIN_BYTES goes through a pinned block in
 * chunks of STAGE_CHUNK bytes, so the host's memcpy of one chunk overlaps the DMA of the
 * previous one: it memcpys chunk k into the pinned block and queues its DMA on copy_stream,
 * then goes on to chunk k + 1 while the copy engine moves chunk k. The pinned block belongs
 * to a host-side pseudo stream (HOST_STREAM) and is marked used by copy_stream before
 * release, so the pool only reuses it once an event recorded after the DMAs has completed
 * (the host writes it next, not the stream). A download of at least STAGE_MIN_BYTES hands
 * out a pinned block itself as the new host tensor's memory: one DMA on copy_stream, no
 * memcpy and no page faults on fresh pageable memory; the block returns to the pinned pool
 * when the tensor's last reference goes, and counts as a live buffer of the backend until
 * then. The pinned pool is capped at PINNED_CAP bytes, so outputs a caller keeps cannot pin
 * unbounded memory: past the cap, and for smaller tensors, copies go straight from or to
 * pageable memory on the compute stream.
 *
 * Graphs. capture_begin starts a stream capture of cu->stream in relaxed mode (this thread
 * may still call cudaMalloc, which the pool needs when a capture's scratch misses the cache;
 * other threads are never affected); run_node then records instead of running. Scratch
 * blocks that kernels release during the capture stay with the graph (struct
 * rtx_backend_graph's held list) until it is freed, since every replay writes them again.
 * capture_end instantiates the graph; an invalidated capture (a kernel that synchronizes or
 * calls something a capture cannot record) ends with RTX_EGPU naming the CUDA error, and the
 * executor runs those nodes one by one instead. Graphs are counted with the live buffers,
 * so a backend freed while a plan still holds a graph is destroyed after the graph.
 *
 * Deferred checks (checks.c, DESIGN). No node waits for the stream mid-run: a result that a
 * kernel finds on the device (gather's indices out of range) is registered as a check that
 * synchronize reads; a captured graph keeps its checks and arms them again at each launch.
 *
 * Health. A CUDA error that corrupts the context (an illegal address in a kernel, say) is
 * sticky: every later call on the device fails. The first such error seen (by a call's
 * result, or by probing the stream after a failure) is kept in cu->fault and every later
 * vtable call fails with RTX_EGPU naming it, instead of returning confusing follow-on errors.
 *
 * Lifetime. Buffers hold blocks of the backend's pool and may outlive the backend (a tensor
 * kept by a caller). The backend counts live buffers; rtx_backend_free only marks it closing
 * when buffers remain, and the last buffer's release destroys it.
 */
#include <cublasLt.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/attention-cudnn.h"
#include "kernels/cuda/backend-cuda.h"
#include "kernels/cuda/cuda-impl.h"
#include "runtime/backend-impl.h"
#include "runtime/mem-pool.h"

#define BLASLT_WORKSPACE_BYTES ((size_t)32 << 20) /* bytes */
#define STAGE_MIN_BYTES ((size_t)1 << 20)         /* bytes: pinned staging from this size */
#define STAGE_CHUNK ((size_t)2 << 20)             /* bytes: one DMA of a staged copy */
#define PINNED_CAP ((size_t)1 << 30)              /* bytes: most pinned host memory held */

struct cuda_backend {
    struct rtx_backend be;       /* be.ctx points here */
    struct rtx_cuda cu;          /* shared with the op files */
    char name[32];               /* "cuda:N" */
    bool have_stream;
    atomic_int live_buffers;     /* buffers and graphs not yet released */
    atomic_bool closing;         /* rtx_backend_free called */
    atomic_bool destroyed;       /* destroy ran (free and the last release may race) */
    bool faulted;
    char fault[200];             /* the sticky error, when faulted */
    bool have_copy_stream, have_events;
    cudaEvent_t ev_ready;        /* compute stream -> copy stream */
    cudaEvent_t ev_done;         /* copy stream -> compute stream */
};

/* A captured CUDA graph and the scratch blocks its kernels use. */
struct rtx_backend_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;        /* NULL until instantiated */
    void **held;                 /* scratch blocks released during the capture */
    int n_held, cap_held;
    struct rtx__cuda_checks checks; /* deferred checks of the captured nodes */
    bool failed;                 /* a held block or check could not be recorded: discard */
};

/* Pinned blocks belong to this pseudo stream: the host is what writes them next. */
static char host_stream_token;
#define HOST_STREAM ((void *)&host_stream_token)

static struct cuda_backend *from_cu(struct rtx_cuda *cu) {
    return (struct cuda_backend *)((char *)cu - offsetof(struct cuda_backend, cu));
}

/* ------------------------------------------------------------------------------------------
 * Health
 * ---------------------------------------------------------------------------------------- */

static bool is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorAssert: case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout: case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable: case cudaErrorUnknown:
        return true;
    default:
        return false;
    }
}

/* After a failed call: decides whether the device is gone for good (a sticky code is still
 * pending, or the stream answers with one) and if so records the fault. */
static void note_failure(struct cuda_backend *b, const struct rtx_err *err) {
    if (b->faulted) return;
    if (b->cu.capture) { /* nothing ran; querying a capturing stream would invalidate it */
        (void)cudaGetLastError();
        return;
    }
    cudaError_t last = cudaPeekAtLastError();
    cudaError_t probe = cudaStreamQuery(b->cu.stream);
    (void)cudaGetLastError();
    cudaError_t bad = is_sticky(last) ? last : is_sticky(probe) ? probe : cudaSuccess;
    if (bad == cudaSuccess) return;
    b->faulted = true;
    snprintf(b->fault, sizeof b->fault, "%s: %s", cudaGetErrorName(bad),
             cudaGetErrorString(bad));
}

/* RTX_EGPU when the backend faulted earlier; selects the device otherwise. */
static int enter(struct cuda_backend *b, struct rtx_err *err) {
    if (b->faulted)
        return rtx_err_set(err, RTX_EGPU, "%s is unusable after an earlier device error (%s)",
                           b->name, b->fault);
    int rc = RTX_CUDA_CHECK(err, cudaSetDevice(b->cu.device));
    if (rc) note_failure(b, err);
    return rc;
}

/* The result of a vtable call: a GPU failure is checked for stickiness. */
static int leave(struct cuda_backend *b, int rc, struct rtx_err *err) {
    if (rc == RTX_EGPU) note_failure(b, err);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Pool device interfaces
 * ---------------------------------------------------------------------------------------- */

static int dev_alloc(void *ctx, size_t bytes, void **ptr) {
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    *ptr = NULL;
    return e == cudaErrorMemoryAllocation ? RTX_ENOMEM : RTX_EGPU;
}

static void dev_free(void *ctx, void *ptr) {
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static int host_alloc(void *ctx, size_t bytes, void **ptr) {
    cudaError_t e = cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    *ptr = NULL;
    return e == cudaErrorMemoryAllocation ? RTX_ENOMEM : RTX_EGPU;
}

static void host_free(void *ctx, void *ptr) {
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static int ev_create(void *ctx, void **event) {
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? RTX_ENOMEM : RTX_EGPU;
    }
    *event = ev;
    return 0;
}

static int ev_record(void *ctx, void *event, void *stream) {
    /* the host pseudo stream has no queue: its point is reached at once */
    cudaStream_t s = stream == HOST_STREAM ? ((struct rtx_cuda *)ctx)->stream : stream;
    if (cudaEventRecord((cudaEvent_t)event, s) == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return RTX_EGPU;
}

static int ev_query(void *ctx, void *event) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError();
    return e == cudaErrorNotReady ? 0 : RTX_EGPU;
}

static void ev_destroy(void *ctx, void *event) {
    if (cudaEventDestroy((cudaEvent_t)event) != cudaSuccess) (void)cudaGetLastError();
}

static int dev_sync(void *ctx) {
    struct rtx_cuda *cu = ctx;
    if (cudaSetDevice(cu->device) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return RTX_EGPU;
}

static const struct rtx_mem_pool_device_i device_iface = {
    .alloc = dev_alloc, .free = dev_free, .event_create = ev_create,
    .event_record = ev_record, .event_query = ev_query, .event_destroy = ev_destroy,
    .synchronize = dev_sync,
};

static const struct rtx_mem_pool_device_i pinned_iface = {
    .alloc = host_alloc, .free = host_free, .event_create = ev_create,
    .event_record = ev_record, .event_query = ev_query, .event_destroy = ev_destroy,
    .synchronize = dev_sync,
};

/* ------------------------------------------------------------------------------------------
 * Teardown
 * ---------------------------------------------------------------------------------------- */

static void destroy(struct cuda_backend *b) {
    if (atomic_exchange(&b->destroyed, true)) return;
    struct rtx_cuda *cu = &b->cu;
    if (cudaSetDevice(cu->device) != cudaSuccess) (void)cudaGetLastError();
    if (b->have_stream && cudaStreamSynchronize(cu->stream) != cudaSuccess)
        (void)cudaGetLastError();
    rtx__cuda_checks_close(cu);
    rtx__cudnn_free(cu);
    if (cu->blaslt) cublasLtDestroy((cublasLtHandle_t)cu->blaslt);
    if (cu->blaslt_workspace) dev_free(cu, cu->blaslt_workspace);
    rtx_mem_pool_free(cu->pool);
    rtx_mem_pool_free(cu->pinned);
    if (b->have_copy_stream && cudaStreamSynchronize(cu->copy_stream) != cudaSuccess)
        (void)cudaGetLastError();
    if (b->have_events) {
        (void)cudaEventDestroy(b->ev_ready);
        (void)cudaEventDestroy(b->ev_done);
    }
    if (b->have_copy_stream && cudaStreamDestroy(cu->copy_stream) != cudaSuccess)
        (void)cudaGetLastError();
    if (b->have_stream && cudaStreamDestroy(cu->stream) != cudaSuccess)
        (void)cudaGetLastError();
    (void)cudaGetLastError();
    rtx_free(b);
}

static void cuda_free(struct rtx_backend *be) {
    struct cuda_backend *b = be->ctx;
    atomic_store(&b->closing, true);
    if (atomic_load(&b->live_buffers) == 0) destroy(b);
}

/* ------------------------------------------------------------------------------------------
 * Scratch, buffers, errors
 * ---------------------------------------------------------------------------------------- */

int rtx__cuda_scratch(struct rtx_cuda *cu, size_t bytes, void **ptr, struct rtx_err *err) {
    int rc = rtx_mem_pool_alloc(cu->pool, bytes, cu->stream, ptr, err);
    if (rc) rtx_err_prefix(err, "cuda:%d scratch of %zu bytes", cu->device, bytes);
    return rc;
}

void rtx__cuda_scratch_release(struct rtx_cuda *cu, void *ptr) {
    struct rtx_backend_graph *gr = cu->capture;
    if (gr && ptr && !gr->failed) {
        if (gr->n_held == gr->cap_held) {
            int ncap = gr->cap_held ? 2 * gr->cap_held : 8;
            void **nh = rtx_realloc(gr->held, sizeof *nh * (size_t)ncap);
            if (nh == NULL) {
                gr->failed = true; /* the capture is discarded: nothing will replay */
            } else {
                gr->held = nh;
                gr->cap_held = ncap;
            }
        }
        if (!gr->failed) {
            gr->held[gr->n_held++] = ptr;
            return;
        }
    }
    (void)rtx_mem_pool_release(cu->pool, ptr, NULL);
}

int rtx__cuda_check_defer(struct rtx_cuda *cu, const struct rtx__cuda_check *c,
                          struct rtx_err *err) {
    struct rtx_backend_graph *gr = cu->capture;
    struct rtx__cuda_check own = *c;
    own.owner = NULL;
    if (gr) {
        rtx__cuda_scratch_release(cu, c->flag); /* held by the graph, or failed */
        if (gr->failed || rtx__cuda_checks_push(&gr->checks, &own)) {
            gr->failed = true;
            rtx_free(c->label);
            rtx_free(c->paged);
        }
        return 0;
    }
    if (rtx__cuda_checks_push(&cu->pending, &own) == 0) return 0;
    (void)rtx_mem_pool_release(cu->pool, c->flag, NULL); /* stream-ordered after the kernels */
    rtx_free(c->label);
    rtx_free(c->paged);
    return rtx_err_set(err, RTX_ENOMEM, "cuda:%d: out of memory deferring a check", cu->device);
}

static void buffer_release(void *ctx, void *data) {
    struct cuda_backend *b = ctx;
    (void)rtx_mem_pool_release(b->cu.pool, data, NULL);
    if (atomic_fetch_sub(&b->live_buffers, 1) == 1 && atomic_load(&b->closing)) destroy(b);
}

static int cuda_buffer_new(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                           struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    struct rtx_buffer *buf = rtx_calloc(1, sizeof *buf);
    if (buf == NULL) return rtx_err_set(err, RTX_ENOMEM, "%s: buffer header", b->name);
    rc = rtx_mem_pool_alloc(b->cu.pool, bytes, b->cu.stream, &buf->data, err);
    if (rc) {
        rtx_free(buf);
        return leave(b, rc, err);
    }
    atomic_fetch_add(&b->live_buffers, 1);
    buf->refcount = 1;
    buf->bytes = bytes;
    buf->release = buffer_release;
    buf->release_ctx = b;
    *out = buf;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Copies
 * ---------------------------------------------------------------------------------------- */

static bool is_own_buffer(struct cuda_backend *b, const struct rtx_buffer *buf) {
    return buf && buf->release == buffer_release && buf->release_ctx == b;
}

/* copy_stream waits for the work queued so far on the compute stream. */
static int copy_after_compute(struct cuda_backend *b, struct rtx_err *err) {
    int rc = RTX_CUDA_CHECK(err, cudaEventRecord(b->ev_ready, b->cu.stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaStreamWaitEvent(b->cu.copy_stream, b->ev_ready, 0));
    return rc;
}

/* bytes from host memory to device memory at dst, ordered before later compute work (DESIGN:
 * chunked through pinned memory on copy_stream, or pageable on the compute stream). */
static int host_to_device(struct cuda_backend *b, void *dst, const void *src, size_t bytes,
                          struct rtx_err *err) {
    struct rtx_cuda *cu = &b->cu;
    void *stage = NULL;
    if (bytes == 0) return 0;
    if (bytes < STAGE_MIN_BYTES ||
        rtx_mem_pool_alloc(cu->pinned, bytes, HOST_STREAM, &stage, NULL) != 0)
        /* pageable: returns once the driver has staged the source */
        return RTX_CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                                   cu->stream));
    int rc = copy_after_compute(b, err);
    for (size_t off = 0; off < bytes && rc == 0; off += STAGE_CHUNK) {
        size_t len = bytes - off < STAGE_CHUNK ? bytes - off : STAGE_CHUNK;
        memcpy((char *)stage + off, (const char *)src + off, len);
        rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync((char *)dst + off, (char *)stage + off, len,
                                                 cudaMemcpyHostToDevice, cu->copy_stream));
    }
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaEventRecord(b->ev_done, cu->copy_stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaStreamWaitEvent(cu->stream, b->ev_done, 0));
    int rrc = rtx_mem_pool_record_stream(cu->pinned, stage, cu->copy_stream, NULL);
    if (rrc || rc) {
        /* cannot order the reuse after the copy: wait for it instead */
        if (cudaStreamSynchronize(cu->copy_stream) != cudaSuccess) (void)cudaGetLastError();
        if (rc == 0 && rrc != RTX_ENOMEM) rc = rtx_err_set(err, rrc, "pinned staging block");
    }
    (void)rtx_mem_pool_release(cu->pinned, stage, NULL);
    return rc;
}

/* bytes from device memory at src to pageable host memory at dst, after the work queued
 * before (the fallback of download_pinned). */
static int device_to_host(struct cuda_backend *b, void *dst, const void *src, size_t bytes,
                          struct rtx_err *err) {
    if (bytes == 0) return 0;
    int rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                                 b->cu.stream));
    return rc ? rc : RTX_CUDA_CHECK(err, cudaStreamSynchronize(b->cu.stream));
}

static int cuda_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx_tensor **dev, struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    struct rtx_tensor *hc = NULL;
    struct rtx_buffer *buf = NULL;
    *dev = NULL;
    int rc = enter(b, err);
    if (rc) return rc;
    if ((rc = rtx_tensor_contiguous(host, &hc, err))) return rc;
    size_t bytes = rtx_tensor_nbytes(hc);
    if ((rc = cuda_buffer_new(be, bytes, &buf, err))) goto out;
    if ((rc = rtx_tensor_from_buffer(buf, 0, hc->dtype, hc->ndim, hc->dims, dev, err))) goto out;
    rc = host_to_device(b, buf->data, rtx_tensor_data(hc), bytes, err);
out:
    rtx_buffer_unref(buf);
    rtx_tensor_unref(hc);
    if (rc) {
        rtx_tensor_unref(*dev);
        *dev = NULL;
        rtx_err_prefix(err, "%s upload", b->name);
    }
    return leave(b, rc, err);
}

static void pinned_release(void *ctx, void *data) {
    struct cuda_backend *b = ctx;
    (void)rtx_mem_pool_release(b->cu.pinned, data, NULL);
    if (atomic_fetch_sub(&b->live_buffers, 1) == 1 && atomic_load(&b->closing)) destroy(b);
}

/* A download into a pinned block that becomes the host tensor's memory (DESIGN). 1 when no
 * pinned block or buffer header was available (nothing done), else 0 or the error. */
static int download_pinned(struct cuda_backend *b, const struct rtx_tensor *dev,
                           struct rtx_tensor **host, struct rtx_err *err) {
    struct rtx_cuda *cu = &b->cu;
    size_t bytes = rtx_tensor_nbytes(dev);
    void *blk = NULL;
    if (rtx_mem_pool_alloc(cu->pinned, bytes, HOST_STREAM, &blk, NULL) != 0) return 1;
    struct rtx_buffer *buf = rtx_calloc(1, sizeof *buf);
    if (buf == NULL) {
        (void)rtx_mem_pool_release(cu->pinned, blk, NULL);
        return 1;
    }
    int rc = copy_after_compute(b, err);
    if (rc == 0)
        rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(blk, rtx_tensor_data(dev), bytes,
                                                 cudaMemcpyDeviceToHost, cu->copy_stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaStreamSynchronize(cu->copy_stream));
    if (rc) {
        if (cudaStreamSynchronize(cu->copy_stream) != cudaSuccess) (void)cudaGetLastError();
        (void)rtx_mem_pool_release(cu->pinned, blk, NULL);
        rtx_free(buf);
        return rc;
    }
    atomic_fetch_add(&b->live_buffers, 1);
    buf->refcount = 1;
    buf->data = blk;
    buf->bytes = bytes;
    buf->release = pinned_release;
    buf->release_ctx = b;
    rc = rtx_tensor_from_buffer(buf, 0, dev->dtype, dev->ndim, dev->dims, host, err);
    rtx_buffer_unref(buf);
    return rc;
}

static int cuda_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                         struct rtx_tensor **host, struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    *host = NULL;
    int rc = enter(b, err);
    if (rc) return rc;
    if (!rtx_tensor_is_contiguous(dev))
        return rtx_err_set(err, RTX_EINVAL, "%s download: tensor is not contiguous", b->name);
    if (rtx_tensor_nbytes(dev) >= STAGE_MIN_BYTES &&
        (rc = download_pinned(b, dev, host, err)) != 1) {
        if (rc) rtx_err_prefix(err, "%s download", b->name);
        return leave(b, rc, err);
    }
    rc = 0;
    struct rtx_tensor *t = NULL;
    if ((rc = rtx_tensor_new(dev->dtype, dev->ndim, dev->dims, &t, err))) return rc;
    rc = device_to_host(b, rtx_tensor_data(t), rtx_tensor_data(dev), rtx_tensor_nbytes(dev),
                        err);
    if (rc) {
        rtx_tensor_unref(t);
        rtx_err_prefix(err, "%s download", b->name);
        return leave(b, rc, err);
    }
    *host = t;
    return 0;
}

static int cuda_copy_into(struct rtx_backend *be, const struct rtx_tensor *src,
                          struct rtx_tensor *dst, struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    if (!is_own_buffer(b, dst->buf))
        return rtx_err_set(err, RTX_EINVAL, "%s copy: the destination is not %s memory",
                           b->name, b->name);
    size_t bytes = rtx_tensor_nbytes(src);
    if (bytes == 0 || rtx_tensor_data(src) == rtx_tensor_data(dst)) return 0;
    if (is_own_buffer(b, src->buf))
        rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(rtx_tensor_data(dst), rtx_tensor_data(src),
                                                 bytes, cudaMemcpyDeviceToDevice, b->cu.stream));
    else
        rc = host_to_device(b, rtx_tensor_data(dst), rtx_tensor_data(src), bytes, err);
    if (rc) rtx_err_prefix(err, "%s copy", b->name);
    return leave(b, rc, err);
}

/* ------------------------------------------------------------------------------------------
 * Graphs
 * ---------------------------------------------------------------------------------------- */

/* Frees a graph struct: its held scratch back to the pool, the CUDA objects destroyed. */
static void graph_destroy(struct cuda_backend *b, struct rtx_backend_graph *gr) {
    for (int i = 0; i < gr->n_held; i++) (void)rtx_mem_pool_release(b->cu.pool, gr->held[i], NULL);
    if (gr->exec && cudaGraphExecDestroy(gr->exec) != cudaSuccess) (void)cudaGetLastError();
    if (gr->graph && cudaGraphDestroy(gr->graph) != cudaSuccess) (void)cudaGetLastError();
    rtx_free(gr->held);
    rtx__cuda_checks_free(&gr->checks); /* their flags are among the held blocks */
    rtx_free(gr);
}

static int cuda_capture_begin(struct rtx_backend *be, struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    if (b->cu.capture)
        return rtx_err_set(err, RTX_EINVAL, "%s: a graph capture is already open", b->name);
    struct rtx_backend_graph *gr = rtx_calloc(1, sizeof *gr);
    if (gr == NULL) return rtx_err_set(err, RTX_ENOMEM, "%s: graph capture state", b->name);
    rc = RTX_CUDA_CHECK(err, cudaStreamBeginCapture(b->cu.stream,
                                                    cudaStreamCaptureModeRelaxed));
    if (rc) {
        rtx_free(gr);
        rtx_err_prefix(err, "%s capture", b->name);
        return leave(b, rc, err);
    }
    b->cu.capture = gr;
    return 0;
}

static int cuda_capture_end(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                            struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    struct rtx_backend_graph *gr = b->cu.capture;
    *graph = NULL;
    if (gr == NULL) return rtx_err_set(err, RTX_EINVAL, "%s: no graph capture is open", b->name);
    if (cudaSetDevice(b->cu.device) != cudaSuccess) (void)cudaGetLastError();
    cudaError_t e = cudaStreamEndCapture(b->cu.stream, &gr->graph);
    b->cu.capture = NULL;
    int rc = 0;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        gr->graph = NULL;
        rc = rtx_err_set(err, RTX_EGPU, "%s: the graph capture failed: %s (%s)", b->name,
                         cudaGetErrorName(e), cudaGetErrorString(e));
    } else if (gr->failed) {
        rc = rtx_err_set(err, RTX_ENOMEM,
                         "%s: out of memory recording the graph's scratch or checks", b->name);
    } else if (keep) {
        rc = RTX_CUDA_CHECK(err, cudaGraphInstantiateWithFlags(&gr->exec, gr->graph, 0));
        if (rc) {
            gr->exec = NULL;
            rtx_err_prefix(err, "%s graph", b->name);
        }
    }
    if (rc || !keep) {
        graph_destroy(b, gr);
        return rc;
    }
    atomic_fetch_add(&b->live_buffers, 1);
    *graph = gr;
    return 0;
}

static int cuda_graph_launch(struct rtx_backend *be, struct rtx_backend_graph *gr,
                             struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    if (rtx__cuda_checks_reserve(&b->cu.pending, gr->checks.n))
        return rtx_err_set(err, RTX_ENOMEM, "%s graph: out of memory arming its checks",
                           b->name);
    rc = RTX_CUDA_CHECK(err, cudaGraphLaunch(gr->exec, b->cu.stream));
    if (rc) {
        rtx_err_prefix(err, "%s graph", b->name);
        return leave(b, rc, err);
    }
    rtx__cuda_checks_arm(&b->cu, &gr->checks, gr);
    return 0;
}

static void cuda_graph_free(struct rtx_backend *be, struct rtx_backend_graph *gr) {
    struct cuda_backend *b = be->ctx;
    if (cudaSetDevice(b->cu.device) != cudaSuccess) (void)cudaGetLastError();
    /* replays still queued use the held scratch: wait for them before it goes back */
    if (cudaStreamSynchronize(b->cu.stream) != cudaSuccess) (void)cudaGetLastError();
    rtx__cuda_checks_forget(&b->cu, gr); /* launches not yet read lose them with the graph */
    graph_destroy(b, gr);
    if (atomic_fetch_sub(&b->live_buffers, 1) == 1 && atomic_load(&b->closing)) destroy(b);
}

/* ------------------------------------------------------------------------------------------
 * The vtable
 * ---------------------------------------------------------------------------------------- */

static const char *cuda_name(struct rtx_backend *be) {
    return ((struct cuda_backend *)be->ctx)->name;
}

static bool cuda_supports_node(struct rtx_backend *be, const struct rtx_graph *g,
                               const struct rtx_node *node) {
    if (node == NULL || (unsigned)node->op >= RTX_OP_COUNT) return false;
    return rtx__cuda_elementwise_supports(g, node) || rtx__cuda_shape_supports(g, node) ||
           rtx__cuda_linalg_supports(g, node) || rtx__cuda_reduce_supports(g, node) ||
           rtx__cuda_conv_supports(g, node) || rtx__cuda_generation_supports(g, node);
}

/* One node through its op group (the backend is entered). */
static int dispatch(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    int rc;
    switch (a->node->op) {
    case RTX_OP_ADD: case RTX_OP_SUB: case RTX_OP_MUL: case RTX_OP_DIV: case RTX_OP_POW:
    case RTX_OP_NEG: case RTX_OP_ABS: case RTX_OP_SQRT: case RTX_OP_RSQRT: case RTX_OP_EXP:
    case RTX_OP_LOG: case RTX_OP_TANH: case RTX_OP_ERF: case RTX_OP_RELU: case RTX_OP_GELU:
    case RTX_OP_SILU: case RTX_OP_SIGMOID: case RTX_OP_CAST: case RTX_OP_WHERE:
    case RTX_OP_EQUAL: case RTX_OP_LESS: case RTX_OP_GREATER:
        rc = rtx__cuda_elementwise(cu, a, err);
        break;
    case RTX_OP_REDUCE_SUM: case RTX_OP_REDUCE_MEAN: case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN: case RTX_OP_ARGMAX: case RTX_OP_SOFTMAX: case RTX_OP_LOG_SOFTMAX:
    case RTX_OP_LAYER_NORM: case RTX_OP_RMS_NORM:
        rc = rtx__cuda_reduce(cu, a, err);
        break;
    case RTX_OP_MATMUL: case RTX_OP_GEMM: case RTX_OP_ATTENTION:
        rc = rtx__cuda_linalg(cu, a, err);
        break;
    case RTX_OP_TRANSPOSE: case RTX_OP_RESHAPE: case RTX_OP_EXPAND: case RTX_OP_CONCAT:
    case RTX_OP_SLICE: case RTX_OP_GATHER: case RTX_OP_CONSTANT:
        rc = rtx__cuda_shape(cu, a, err);
        break;
    case RTX_OP_CONV2D: case RTX_OP_MAX_POOL2D: case RTX_OP_AVG_POOL2D:
        rc = rtx__cuda_conv(cu, a, err);
        break;
    case RTX_OP_ROPE: case RTX_OP_PAGED_ATTENTION:
        rc = rtx__cuda_generation(cu, a, err);
        break;
    case RTX_OP_COUNT:
    default:
        rc = rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "op %d has no CUDA kernel",
                                   (int)a->node->op);
        break;
    }
    return rc;
}

/* The result of nodes that ran (the backend is entered): a failure reads the pending checks
 * first, since their nodes ran before, and one that failed is the error (checks.c, DESIGN). */
static int nodes_done(struct cuda_backend *b, int rc, struct rtx_err *err) {
    rc = leave(b, rc, err);
    if (rc == 0 || b->cu.pending.n == 0 || b->cu.capture) return rc;
    if (b->faulted) {
        rtx__cuda_checks_drop(&b->cu);
        return rc;
    }
    struct rtx_err ce = {0};
    int crc = rtx__cuda_checks_settle(&b->cu, &ce);
    if (crc == RTX_EINVAL) {
        if (err) *err = ce;
        return crc;
    }
    if (crc) note_failure(b, &ce);
    return rc;
}

static int cuda_run_node(struct rtx_backend *be, const struct rtx_node_args *a,
                         struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    return nodes_done(b, dispatch(&b->cu, a, err), err);
}

static int cuda_fused_span(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                           int n, const int *uses) {
    return rtx__cuda_fused_span(g, order, n, uses);
}

static int cuda_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                          struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) return rc;
    return nodes_done(b, rtx__cuda_run_fused(&b->cu, args, n, dispatch, err), err);
}

static int cuda_synchronize(struct rtx_backend *be, struct rtx_err *err) {
    struct cuda_backend *b = be->ctx;
    int rc = enter(b, err);
    if (rc) {
        rtx__cuda_checks_drop(&b->cu);
        return rc;
    }
    rc = rtx__cuda_checks_settle(&b->cu, err); /* waits for the stream */
    if (rc == RTX_EINVAL) return rc; /* a node's message, as the CPU backend words it */
    if (rc == 0) {
        /* an asynchronous error raised by earlier work, not yet reported */
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) rc = RTX_CUDA_CHECK(err, cudaGetLastError());
    }
    if (rc) rtx_err_prefix(err, "%s", b->name);
    return leave(b, rc, err);
}

#define CUDA_IFACE_COMMON                                                                         \
    .name = cuda_name,                   /* "cuda:N" */                                          \
    .free = cuda_free,                   /* destroys once no buffer or graph is left */          \
    .supports_node = cuda_supports_node, /* the union of the op groups' supports */             \
    .buffer_new = cuda_buffer_new,       /* a block of the device pool, on cu->stream */         \
    .run_node = cuda_run_node,           /* one switch over the op groups */                     \
    .synchronize = cuda_synchronize,     /* waits, reads deferred checks, sticky errors */       \
    .upload = cuda_upload,               /* host -> (pinned, chunked) -> device */               \
    .download = cuda_download,           /* device -> a pinned block as the new host tensor */   \
    .copy_into = cuda_copy_into,         /* host or device -> an existing device tensor */       \
    .fused_span = cuda_fused_span,       /* matmul + bias add (+ tanh gelu): fused.c */          \
    .run_fused = cuda_run_fused          /* one cuBLASLt call with an epilogue */

static const struct rtx_backend_i cuda_iface = {
    CUDA_IFACE_COMMON,
    .capture_begin = cuda_capture_begin, /* thread-local stream capture of cu->stream */
    .capture_end = cuda_capture_end,     /* instantiates, or discards */
    .graph_launch = cuda_graph_launch,   /* cudaGraphLaunch on cu->stream */
    .graph_free = cuda_graph_free,       /* after queued replays; held scratch to the pool */
};

/* rtx_cuda_options.disable_graphs: no capture slots, plans run node by node. */
static const struct rtx_backend_i cuda_iface_no_graphs = {CUDA_IFACE_COMMON};

/* ------------------------------------------------------------------------------------------
 * Creation
 * ---------------------------------------------------------------------------------------- */

static int blaslt_check(cublasStatus_t s, const char *stmt, struct rtx_err *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    return rtx_err_set(err, RTX_EGPU, "%s: %s (%s)", cublasLtGetStatusName(s),
                       cublasLtGetStatusString(s), stmt);
}

int rtx_backend_cuda_new(const struct rtx_cuda_options *opt, struct rtx_backend **out,
                         struct rtx_err *err) {
    if (out == NULL) return rtx_err_set(err, RTX_EINVAL, "cuda: out is NULL");
    *out = NULL;
    int device = opt ? opt->device : 0;
    char why[256] = "";
    int n = rtx_cuda_device_count(why, sizeof why, NULL);
    if (n == 0) return rtx_err_set(err, RTX_EGPU, "cuda:%d: no CUDA device: %s", device, why);
    if (device < 0 || device >= n)
        return rtx_err_set(err, RTX_EGPU, "cuda:%d: no such device (%d listed)", device, n);
    struct cuda_backend *b = rtx_calloc(1, sizeof *b);
    if (b == NULL) return rtx_err_set(err, RTX_ENOMEM, "cuda:%d: backend context", device);
    struct rtx_cuda *cu = &b->cu;
    b->be.iface = opt && opt->disable_graphs ? &cuda_iface_no_graphs : &cuda_iface;
    b->be.ctx = b;
    snprintf(b->name, sizeof b->name, "cuda:%d", device);
    atomic_init(&b->live_buffers, 0);
    atomic_init(&b->closing, false);
    atomic_init(&b->destroyed, false);
    cu->device = device;
    cu->allow_tf32 = opt ? opt->allow_tf32 : false;

    struct cudaDeviceProp p;
    int rc = RTX_CUDA_CHECK(err, cudaSetDevice(device));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaGetDeviceProperties(&p, device));
    if (rc == 0) {
        cu->sm_count = p.multiProcessorCount;
        cu->cc_major = p.major;
        cu->cc_minor = p.minor;
        rc = RTX_CUDA_CHECK(err, cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking));
    }
    if (rc) goto fail;
    b->have_stream = true;
    rc = RTX_CUDA_CHECK(err, cudaStreamCreateWithFlags(&cu->copy_stream, cudaStreamNonBlocking));
    if (rc) goto fail;
    b->have_copy_stream = true;
    cudaEvent_t *evs[2] = {&b->ev_ready, &b->ev_done};
    int made = 0;
    while (rc == 0 && made < 2) {
        rc = RTX_CUDA_CHECK(err, cudaEventCreateWithFlags(evs[made], cudaEventDisableTiming));
        if (rc == 0) made++;
    }
    if (rc) {
        for (int i = 0; i < made; i++) (void)cudaEventDestroy(*evs[i]);
        goto fail;
    }
    b->have_events = true;
    if ((rc = rtx__cuda_checks_open(cu, err))) goto fail;
    struct rtx_mem_pool_config pc = {.name = b->name,
                                     .cap_bytes = opt ? opt->memory_cap_bytes : 0,
                                     .account = opt ? opt->account : NULL};
    if ((rc = rtx_mem_pool_new(&device_iface, cu, &pc, &cu->pool, err))) goto fail;
    char pname[48];
    snprintf(pname, sizeof pname, "%s pinned", b->name);
    struct rtx_mem_pool_config hc = {.name = pname, .cap_bytes = PINNED_CAP};
    if ((rc = rtx_mem_pool_new(&pinned_iface, cu, &hc, &cu->pinned, err))) goto fail;
    cublasLtHandle_t lt = NULL;
    if ((rc = blaslt_check(cublasLtCreate(&lt), "cublasLtCreate", err))) goto fail;
    cu->blaslt = lt;
    rc = RTX_CUDA_CHECK(err, cudaMalloc(&cu->blaslt_workspace, BLASLT_WORKSPACE_BYTES));
    if (rc) {
        cu->blaslt_workspace = NULL;
        goto fail;
    }
    cu->blaslt_workspace_bytes = BLASLT_WORKSPACE_BYTES;
    *out = &b->be;
    return 0;
fail:
    rtx_err_prefix(err, "cuda:%d", device);
    destroy(b);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Pool statistics (for Admin.Pools)
 * ---------------------------------------------------------------------------------------- */

/* Whether be is a CUDA backend, with or without graph capture. */
static bool is_cuda(const struct rtx_backend *be) {
    return be && (be->iface == &cuda_iface || be->iface == &cuda_iface_no_graphs);
}

const char *rtx_backend_cuda_attention_route(struct rtx_backend *be) {
    if (!is_cuda(be)) return "";
    struct cuda_backend *b = be->ctx;
    return b->cu.attention_route ? b->cu.attention_route : "";
}

int rtx_backend_cuda_pool_stats(struct rtx_backend *be, struct rtx_mem_pool_stats *device,
                                struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    if (!is_cuda(be))
        return rtx_err_set(err, RTX_EINVAL, "pool statistics: %s is not a CUDA backend",
                           rtx_backend_name(be));
    struct cuda_backend *b = be->ctx;
    if (device) rtx_mem_pool_get_stats(b->cu.pool, device);
    if (pinned) rtx_mem_pool_get_stats(b->cu.pinned, pinned);
    return 0;
}
