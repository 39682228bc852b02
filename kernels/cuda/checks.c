/*
 * checks.c - deferred checks of the CUDA backend: results that kernels find on the device
 * (gather's indices out of range, paged_attention's metadata faults) and that synchronize
 * reads, so that no node waits for the stream mid-run and every node can be captured into a
 * CUDA graph.
 *
 * DESIGN
 * A node whose kernels validate data only the device sees does not wait for the verdict: its
 * kernels write a flag in scratch memory and the node registers a check (rtx__cuda_check_defer
 * in backend-cuda.c: the flag, a copy of the node's label, what the message needs) in
 * cu->pending, in the order the nodes ran. synchronize, which the executor calls at the end
 * of every run before it reads any output, queues one copy of each pending flag into a small
 * pinned array (CHECK_BATCH flags per stream wait), waits for the stream once, releases the
 * flags and fails with RTX_EINVAL and the message of the first failed check, which is the
 * node that ran first and the CPU backend's message for the same node. A failed check is
 * never RTX_EGPU: the device is fine, and rtx_device_check does not take it for a fault.
 * Under a capture the check goes with the graph (struct rtx_backend_graph's checks, owner
 * NULL there) and its flag with the graph's held scratch; every launch of the graph appends
 * copies of its checks to cu->pending with the graph as their owner (the graph's recorded
 * memset re-arms the flags), and freeing the graph takes them off. A node that fails while
 * checks are pending reads them first (backend-cuda.c nodes_done), so a bad index before it
 * is still the run's error; the executor synchronizes after any failed run (runtime/plan.c,
 * DESIGN: deferred errors), so a check of a canceled run goes with it instead of failing the
 * next one; a faulted backend and its destruction drop them.
 */
#include "kernels/cuda/cuda-impl.h"
#include "kernels/gen-geometry.h"
#include "runtime/mem-pool.h"

#define CHECK_BATCH 64 /* deferred checks read per stream wait */

int rtx__cuda_checks_open(struct rtx_cuda *cu, struct rtx_err *err) {
    void *flags = NULL;
    int rc = RTX_CUDA_CHECK(err, cudaHostAlloc(&flags, CHECK_BATCH * 2 * sizeof *cu->check_flags,
                                               cudaHostAllocDefault));
    if (rc == 0) cu->check_flags = flags;
    return rc;
}

void rtx__cuda_checks_close(struct rtx_cuda *cu) {
    rtx__cuda_checks_drop(cu);
    rtx_free(cu->pending.v);
    cu->pending = (struct rtx__cuda_checks){0};
    if (cu->check_flags && cudaFreeHost(cu->check_flags) != cudaSuccess) (void)cudaGetLastError();
    cu->check_flags = NULL;
}

int rtx__cuda_checks_reserve(struct rtx__cuda_checks *l, int more) {
    int need = l->n + more;
    if (need <= l->cap) return 0;
    int ncap = l->cap ? 2 * l->cap : 8;
    while (ncap < need)
        ncap *= 2;
    struct rtx__cuda_check *nv = rtx_realloc(l->v, sizeof *nv * (size_t)ncap);
    if (nv == NULL) return RTX_ENOMEM;
    l->v = nv;
    l->cap = ncap;
    return 0;
}

int rtx__cuda_checks_push(struct rtx__cuda_checks *l, const struct rtx__cuda_check *c) {
    int rc = rtx__cuda_checks_reserve(l, 1);
    if (rc == 0) l->v[l->n++] = *c;
    return rc;
}

void rtx__cuda_checks_free(struct rtx__cuda_checks *l) {
    for (int i = 0; i < l->n; i++) {
        rtx_free(l->v[i].label);
        rtx_free(l->v[i].paged);
    }
    rtx_free(l->v);
    *l = (struct rtx__cuda_checks){0};
}

void rtx__cuda_checks_arm(struct rtx_cuda *cu, const struct rtx__cuda_checks *l,
                          const void *owner) {
    for (int i = 0; i < l->n; i++) {
        cu->pending.v[cu->pending.n] = l->v[i];
        cu->pending.v[cu->pending.n++].owner = owner;
    }
}

void rtx__cuda_checks_forget(struct rtx_cuda *cu, const void *owner) {
    int kept = 0;
    for (int i = 0; i < cu->pending.n; i++)
        if (cu->pending.v[i].owner != owner) cu->pending.v[kept++] = cu->pending.v[i];
    cu->pending.n = kept;
}

void rtx__cuda_checks_drop(struct rtx_cuda *cu) {
    for (int i = 0; i < cu->pending.n; i++) {
        struct rtx__cuda_check *c = &cu->pending.v[i];
        if (c->owner) continue;
        (void)rtx_mem_pool_release(cu->pool, c->flag, NULL); /* stream-ordered */
        rtx_free(c->label);
        rtx_free(c->paged);
    }
    cu->pending.n = 0;
}

int rtx__cuda_checks_settle(struct rtx_cuda *cu, struct rtx_err *err) {
    const struct rtx__cuda_checks *l = &cu->pending;
    unsigned long long *h = cu->check_flags;
    const struct rtx__cuda_check *bad = NULL;
    unsigned long long first = 0, index = 0;
    int rc = 0, done = 0;
    do {
        int n = l->n - done < CHECK_BATCH ? l->n - done : CHECK_BATCH;
        for (int i = 0; i < n && rc == 0; i++)
            rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(h + 2 * i, l->v[done + i].flag, 2 * sizeof *h,
                                                     cudaMemcpyDeviceToHost, cu->stream));
        if (rc == 0) rc = RTX_CUDA_CHECK(err, cudaStreamSynchronize(cu->stream));
        for (int i = 0; i < n && rc == 0 && bad == NULL; i++)
            if (h[2 * i] != ~0ull) {
                bad = &l->v[done + i];
                first = h[2 * i];
                index = h[2 * i + 1];
            }
        done += n;
    } while (rc == 0 && bad == NULL && done < l->n);
    if (bad && bad->paged) {
        char why[256];
        rtx__paged_fault_why(bad->paged, first, why, sizeof why);
        rc = rtx_err_set(err, RTX_EINVAL, "%s%s", bad->label, why);
    } else if (bad) {
        rc = rtx_err_set(err, RTX_EINVAL,
                         "%sindex %lld (indices element %llu) out of range for axis %lld of "
                         "size %lld",
                         bad->label, (long long)index, first, (long long)bad->axis,
                         (long long)bad->axis_dim);
    }
    rtx__cuda_checks_drop(cu);
    return rc;
}
