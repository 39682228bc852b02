/*
 * jobs-devices.c - the job manager's device slots (the CPU and each CUDA device listed at
 * start), job classes ("cpu", "auto", "cuda", "cuda:N"), placement of a class over the devices,
 * device health and the GPU backends the workers run on (the Placement paragraph of DESIGN in
 * jobs-impl.h). Kept apart from the job logic so that a device layer can take it over.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "daemon/log.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"

/* ------------------------------------------------------------------------------------------
 * Devices and job classes
 * ---------------------------------------------------------------------------------------- */

/* The requested_device text of a class: "cpu", "auto", "cuda", "cuda:N". */
void rtx__jobs_class_text(enum job_class c, char *buf, size_t len) {
    if (c == CLS_CPU)
        snprintf(buf, len, "cpu");
    else if (c == CLS_AUTO)
        snprintf(buf, len, "auto");
    else if (c == CLS_GPU_ANY)
        snprintf(buf, len, "cuda");
    else
        snprintf(buf, len, "cuda:%d", (int)(c - CLS_GPU0));
}

/* "this host has no CUDA device (why)" or "this host lists N CUDA device(s)". */
static void host_gpus_text(const struct rtx_jobs *j, char *buf, size_t len) {
    int n = j->n_devs - 1;
    if (n == 0)
        snprintf(buf, len, "this host has no CUDA device (%.150s)", j->no_gpu_why);
    else if (n == 1)
        snprintf(buf, len, "this host lists 1 CUDA device, cuda:0");
    else
        snprintf(buf, len, "this host lists %d CUDA devices, cuda:0 to cuda:%d", n, n - 1);
}

/* Parses a device name ("auto", "cpu", "cuda", "cuda:N"); whether the device can take jobs is
 * rtx__jobs_placement_error's business. RTX_EINVAL naming the problem. */
int rtx__jobs_class_parse(const struct rtx_jobs *j, const char *s, enum job_class *out,
                          struct rtx_err *err) {
    if (strcmp(s, "auto") == 0) {
        *out = CLS_AUTO;
    } else if (strcmp(s, "cpu") == 0) {
        *out = CLS_CPU;
    } else if (strcmp(s, "cuda") == 0) {
        *out = CLS_GPU_ANY;
    } else if (strncmp(s, "cuda:", 5) == 0) {
        const char *num = s + 5;
        size_t len = strlen(num);
        if (len == 0 || len > 6 || strspn(num, "0123456789") != len)
            return rtx_err_set(err, RTX_EINVAL,
                               "device '%.40s': 'cuda:' must be followed by a device index", s);
        long n = strtol(num, NULL, 10);
        if (n >= RTX_JOBS_MAX_GPUS || 1 + n >= j->n_devs) {
            char host[200];
            host_gpus_text(j, host, sizeof host);
            return rtx_err_set(err, RTX_EINVAL, "device '%s' does not exist: %s", s, host);
        }
        *out = (enum job_class)(CLS_GPU0 + n);
    } else {
        return rtx_err_set(err, RTX_EINVAL,
                           "unknown device '%.40s' (devices: auto, cpu, cuda, cuda:N)", s);
    }
    return 0;
}

bool rtx__jobs_dev_usable(const struct dev *d) {
    return d->healthy && d->n_workers > 0;
}

/* Whether some GPU can take jobs (under mu). */
static bool any_gpu_usable(const struct rtx_jobs *j) {
    for (int d = 1; d < j->n_devs; d++)
        if (rtx__jobs_dev_usable(&j->devs[d])) return true;
    return false;
}

/* Why a job of class c cannot be placed now (under mu): 0, RTX_EINVAL when the host has no
 * such device, RTX_EUNAVAILABLE when it is unhealthy or runs no jobs. */
int rtx__jobs_placement_error(const struct rtx_jobs *j, enum job_class c, struct rtx_err *err) {
    char host[200];
    if (c == CLS_CPU || c == CLS_AUTO) return 0;
    if (c == CLS_GPU_ANY) {
        if (j->n_devs == 1) {
            host_gpus_text(j, host, sizeof host);
            return rtx_err_set(err, RTX_EINVAL, "device 'cuda': %s", host);
        }
        if (any_gpu_usable(j)) return 0;
        char why[200] = "";
        for (int d = 1; d < j->n_devs; d++) {
            char one[120];
            const struct dev *dv = &j->devs[d];
            snprintf(one, sizeof one, "%s %s", dv->name,
                     dv->healthy ? "runs no jobs" : "is unhealthy");
            list_append(why, sizeof why, one);
        }
        return rtx_err_set(err, RTX_EUNAVAILABLE, "device 'cuda': no usable CUDA device (%s)",
                           why);
    }
    int slot = 1 + (int)(c - CLS_GPU0);
    if (slot >= j->n_devs) {
        host_gpus_text(j, host, sizeof host);
        return rtx_err_set(err, RTX_EINVAL, "device 'cuda:%d' does not exist: %s", slot - 1,
                           host);
    }
    const struct dev *dv = &j->devs[slot];
    if (!dv->healthy)
        return rtx_err_set(err, RTX_EUNAVAILABLE, "device %s is unhealthy: %s", dv->name,
                           dv->detail);
    if (dv->n_workers == 0)
        return rtx_err_set(err, RTX_EUNAVAILABLE,
                           "device %s runs no jobs (jobs.gpu_workers_per_device is 0)", dv->name);
    return 0;
}

/* A backend of a usable GPU that jobs of class c may run on, to ask supports_node (under mu):
 * device N's first worker for GPU_N, the first usable GPU's for AUTO and GPU_ANY; NULL for
 * the CPU class and when no GPU is usable. */
struct rtx_backend *rtx__jobs_gpu_backend_for(const struct rtx_jobs *j, enum job_class c) {
    if (c == CLS_CPU) return NULL;
    for (int i = j->n_cpu_workers; i < j->n_workers; i++) {
        const struct worker *w = &j->workers[i];
        const struct dev *d = &j->devs[w->dev];
        if (!rtx__jobs_dev_usable(d)) continue;
        if (c == CLS_AUTO || c == CLS_GPU_ANY || c == (enum job_class)(CLS_GPU0 + d->cuda))
            return w->be;
    }
    return NULL;
}

/* The first node of g that be cannot run, or -1 when it runs them all. */
int rtx__jobs_first_unsupported(struct rtx_backend *be, const struct rtx_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!rtx_backend_supports_node(be, g, &g->nodes[i])) return i;
    return -1;
}

/* The reason a GPU refuses node `ni` of g. */
void rtx__jobs_unsupported_text(struct rtx_backend *be, const struct rtx_graph *g, int ni,
                                char *buf, size_t len) {
    const struct rtx_node *n = &g->nodes[ni];
    snprintf(buf, len,
             "node %d '%.60s' (%s) cannot run on %s: its backend has no kernel for it with "
             "these dtypes; submit the job with device cpu or auto",
             ni, n->name ? n->name : "", rtx_op_name(n->op), rtx_backend_name(be));
}

/* Jobs per worker queued or running on device slot d, x1000 (under mu): the load that
 * spreads "cuda" and "auto" jobs over the GPUs. */
static int64_t dev_load(const struct rtx_jobs *j, int d) {
    const struct dev *dv = &j->devs[d];
    return (int64_t)(dv->queued + dv->running) * 1000 / (dv->n_workers > 0 ? dv->n_workers : 1);
}

/* The device slots a job of class c may be queued on now, least loaded first (under mu);
 * returns how many. */
int rtx__jobs_candidates(const struct rtx_jobs *j, enum job_class c, int out[MAX_DEVS]) {
    int n = 0;
    if (c == CLS_CPU || (c == CLS_AUTO && !any_gpu_usable(j))) {
        out[n++] = DEV_CPU;
        return n;
    }
    if (c >= CLS_GPU0) {
        int d = 1 + (int)(c - CLS_GPU0);
        if (d < j->n_devs && rtx__jobs_dev_usable(&j->devs[d]) && j->devs[d].sched) out[n++] = d;
        return n;
    }
    for (int d = 1; d < j->n_devs; d++)
        if (rtx__jobs_dev_usable(&j->devs[d]) && j->devs[d].sched) out[n++] = d;
    for (int a = 1; a < n; a++) { /* insertion sort by load: 16 devices at most */
        int x = out[a], b = a;
        int64_t lx = dev_load(j, x);
        while (b > 0 && dev_load(j, out[b - 1]) > lx) {
            out[b] = out[b - 1];
            b--;
        }
        out[b] = x;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Device health
 * ---------------------------------------------------------------------------------------- */

/* Marks a device unhealthy (once) with why and wakes the workers: the device's own workers
 * then move its queued jobs to other devices or fail them (rtx__jobs_worker_main). */
static void device_fault(struct rtx_jobs *j, struct dev *d, const char *why) {
    pthread_mutex_lock(&j->mu);
    bool first = d->healthy;
    if (first) {
        d->healthy = false;
        snprintf(d->detail, sizeof d->detail, "%s", why);
        pthread_cond_broadcast(&j->work_cv);
    }
    pthread_mutex_unlock(&j->mu);
    if (!first) return;
    rtx_log(RTX_LOG_ERROR, "device unhealthy: it takes no more jobs", "device", d->name, "error",
            why, NULL);
}

/* After a job failed on a GPU worker: a backend that no longer synchronizes with RTX_EGPU
 * kept a sticky error, so its device is marked unhealthy and reason (a failure reason of
 * `len` bytes) says so. Other failures (out of memory, a bad argument) leave it usable. */
void rtx__jobs_check_device(struct worker *w, char *reason, size_t len) {
    struct rtx_err herr = {0};
    if (rtx_backend_synchronize(w->be, &herr) == 0 || herr.code != RTX_EGPU) return;
    struct dev *d = &w->j->devs[w->dev];
    device_fault(w->j, d, herr.msg);
    size_t used = strlen(reason);
    if (used + 1 < len)
        snprintf(reason + used, len - used, " [%s is now unhealthy and takes no more jobs]",
                 d->name);
}

/* ------------------------------------------------------------------------------------------
 * Device slots, their GPU backends and schedulers (at start)
 * ---------------------------------------------------------------------------------------- */

static int cuda_gpu_backend_new(void *ctx, int device, struct rtx_backend **out,
                                struct rtx_err *err) {
    struct rtx_jobs *j = ctx;
    struct rtx_cuda_options co = {.device = device, .memory_cap_bytes = j->gpu_pool_cap};
    return rtx_backend_cuda_new(&co, out, err);
}

static int cuda_gpu_pool_stats(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                               struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    return rtx_backend_cuda_pool_stats(be, dev, pinned, err);
}

static const struct rtx_jobs_gpu_i cuda_gpu_iface = {
    .backend_new = cuda_gpu_backend_new,
    .pool_stats = cuda_gpu_pool_stats,
};

/* Fills the device slots (the CPU, then each listed CUDA device up to the maximum) and the
 * GPU interface; returns how many GPU workers the healthy devices get. */
int rtx__jobs_devices_init(struct rtx_jobs *j, const struct rtx_jobs_options *o) {
    j->gpu_iface = o->gpu_iface ? o->gpu_iface : &cuda_gpu_iface;
    j->gpu_ctx = o->gpu_iface ? o->gpu_ctx : j;
    j->gpu_pool_cap = o->gpu_pool_cap_bytes;
    struct dev *cpu = &j->devs[DEV_CPU];
    snprintf(cpu->name, sizeof cpu->name, "cpu");
    cpu->cuda = -1;
    cpu->healthy = true;
    cpu->n_workers = o->workers;
    j->n_devs = 1;
    const struct rtx_cuda_devices *g = o->gpus;
    if (!g || g->n <= 0)
        snprintf(j->no_gpu_why, sizeof j->no_gpu_why, "%s",
                 g && g->absent[0] ? g->absent : "none was listed at start");
    int n_workers = 0;
    for (int i = 0; g && i < g->n && j->n_devs < MAX_DEVS; i++) {
        struct dev *d = &j->devs[j->n_devs++];
        snprintf(d->name, sizeof d->name, "cuda:%d", i);
        d->cuda = i;
        d->healthy = g->devs[i].healthy;
        snprintf(d->detail, sizeof d->detail, "%s", g->devs[i].detail);
        d->n_workers = d->healthy ? o->gpu_workers_per_device : 0;
        n_workers += d->n_workers;
    }
    if (g && g->n > RTX_JOBS_MAX_GPUS) {
        char n[16];
        snprintf(n, sizeof n, "%d", g->n);
        rtx_log(RTX_LOG_WARN, "more CUDA devices than the job manager uses", "devices", n,
                "used", "16", NULL);
    }
    return n_workers;
}

/* Creates the workers of device slot d (appended to j->workers). When a backend cannot be
 * made, the device's workers are dropped and it is marked unhealthy with the error. */
void rtx__jobs_gpu_workers_new(struct rtx_jobs *j, int d) {
    struct dev *dv = &j->devs[d];
    int first = j->n_workers;
    for (int k = 0; k < dv->n_workers; k++) {
        struct worker *w = &j->workers[first + k];
        struct rtx_err berr = {0};
        w->j = j;
        w->dev = d;
        if (j->gpu_iface->backend_new(j->gpu_ctx, dv->cuda, &w->be, &berr) == 0) continue;
        for (int q = 0; q < k; q++) {
            rtx_backend_free(j->workers[first + q].be);
            j->workers[first + q].be = NULL;
        }
        w->be = NULL;
        dv->healthy = false;
        dv->n_workers = 0;
        snprintf(dv->detail, sizeof dv->detail, "cannot create its backend: %.220s", berr.msg);
        rtx_log(RTX_LOG_WARN, "device unhealthy: no jobs run on it", "device", dv->name, "error",
                dv->detail, NULL);
        return;
    }
    j->n_workers += dv->n_workers;
}

/* cfg as device slot dv's scheduler runs it: executors and max_running are its workers. */
struct rtx_sched_config rtx__jobs_device_sched_config(const struct rtx_sched_config *cfg,
                                                      const struct dev *dv) {
    struct rtx_sched_config c = *cfg;
    c.executors = dv->n_workers;
    c.max_running = dv->n_workers;
    return c;
}

/* Creates the scheduler of every device slot with workers: the shared lane configuration,
 * with executors and max_running set to the slot's worker count. */
int rtx__jobs_scheds_new(struct rtx_jobs *j, struct rtx_err *err) {
    for (int d = 0; d < j->n_devs; d++) {
        struct dev *dv = &j->devs[d];
        if (dv->n_workers <= 0) continue;
        struct rtx_sched_config c = rtx__jobs_device_sched_config(&j->sched_cfg, dv);
        int rc = rtx_sched_new(&c, sched_now(), &dv->sched, err);
        if (rc < 0) return rtx_err_prefix(err, "jobs: the scheduler of %s", dv->name);
    }
    return 0;
}
