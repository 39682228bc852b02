/*
 * jobs-devices.c - the job manager's device slots (the CPU and each CUDA device listed at
 * start), job classes ("cpu", "auto", "cuda", "cuda:N"), placement of a class over the devices,
 * the device layer's side of the job manager: its consumer "jobs" on each device, the workers'
 * backends, device faults and load (the Placement paragraph of DESIGN in jobs-impl.h; health,
 * memory, plans and placement order are device/device.h's).
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
        snprintf(buf, len, "this host has no CUDA device (%.150s)",
                 rtx_devices_no_gpu_reason(j->devices));
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
    return d->n_workers > 0 && rtx_device_healthy(d->d);
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
                     rtx_device_healthy(dv->d) ? "runs no jobs" : "is unhealthy");
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
    if (!rtx_device_healthy(dv->d)) {
        char detail[256];
        rtx_device_detail(dv->d, detail, sizeof detail);
        return rtx_err_set(err, RTX_EUNAVAILABLE, "device %s is unhealthy: %s", dv->name, detail);
    }
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

/* The device slots a job of class c may be queued on now (under mu): the CPU, device N, or
 * the usable GPUs in the device layer's placement order (least loaded per executor first,
 * then most headroom; rtx_devices_place). Returns how many. */
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
    int placed[RTX_DEVICES_MAX];
    struct rtx_device_place req = {0};
    int m = rtx_devices_place(j->devices, &req, placed);
    for (int k = 0; k < m; k++) {
        int d = placed[k];
        if (d > 0 && d < j->n_devs && rtx__jobs_dev_usable(&j->devs[d]) && j->devs[d].sched)
            out[n++] = d;
    }
    return n;
}

/* Reports a job's load on the device whose scheduler holds it (delta +1 when it is queued
 * there, -1 when it leaves the scheduler); placement reads it (under mu). */
void rtx__jobs_load_add(struct rtx_jobs *j, struct job *job, int64_t delta) {
    rtx_device_load_add(j->devs[job->dev].d, delta);
}

/* What the consumer "jobs" of device slot dv holds now (zeros when it has none). */
struct rtx_device_consumer_info rtx__jobs_share(const struct dev *dv) {
    struct rtx_device_consumer_info ci[16], out = {0};
    int n = dv->consumer ? rtx_device_consumers(dv->d, ci, 16) : 0;
    for (int c = 0; c < n && c < 16; c++)
        if (strcmp(ci[c].name, "jobs") == 0) out = ci[c];
    return out;
}

/* ------------------------------------------------------------------------------------------
 * Device faults
 * ---------------------------------------------------------------------------------------- */

/* The device layer's fault listener: a device became unhealthy (a sticky error found by a
 * job, a model's batch or a warm-up). Wakes the workers: that device's workers then move its
 * queued jobs to other devices or fail them (rtx__jobs_worker_main). */
static void on_device_fault(void *ctx, struct rtx_device *d, const char *why) {
    struct rtx_jobs *j = ctx;
    int slot = rtx_device_slot(d);
    pthread_mutex_lock(&j->mu);
    bool ours = slot < j->n_devs && j->devs[slot].n_workers > 0;
    pthread_cond_broadcast(&j->work_cv);
    pthread_mutex_unlock(&j->mu);
    if (!ours) return;
    rtx_log(RTX_LOG_ERROR, "device unhealthy: it takes no more jobs", "device",
            rtx_device_name(d), "error", why, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Device slots, their GPU backends and schedulers (at start)
 * ---------------------------------------------------------------------------------------- */

/* Fills the device slots from the device set (the CPU, then each CUDA device up to the
 * maximum) and registers the fault listener; returns how many GPU workers the devices
 * healthy now get, or an error. */
int rtx__jobs_devices_init(struct rtx_jobs *j, const struct rtx_jobs_options *o,
                           struct rtx_err *err) {
    j->devices = o->devices;
    int count = rtx_devices_count(o->devices);
    j->n_devs = count < MAX_DEVS ? count : MAX_DEVS;
    int n_workers = 0;
    for (int d = 0; d < j->n_devs; d++) {
        struct dev *dv = &j->devs[d];
        dv->d = rtx_devices_get(o->devices, d);
        snprintf(dv->name, sizeof dv->name, "%s", rtx_device_name(dv->d));
        dv->cuda = rtx_device_cuda_index(dv->d);
        if (d == DEV_CPU)
            dv->n_workers = o->workers;
        else if (rtx_device_healthy(dv->d))
            n_workers += dv->n_workers = o->gpu_workers_per_device;
    }
    if (count - 1 > RTX_JOBS_MAX_GPUS) {
        char n[16];
        snprintf(n, sizeof n, "%d", count - 1);
        rtx_log(RTX_LOG_WARN, "more CUDA devices than the job manager uses", "devices", n,
                "used", "16", NULL);
    }
    int rc = rtx_devices_on_fault(o->devices, on_device_fault, j, err);
    if (rc < 0) return rtx_err_prefix(err, "jobs");
    j->on_fault = true;
    return n_workers;
}

/* Creates the consumer "jobs" of device slot d (its reservation: jobs_reserve of the budget)
 * and the backends of its workers (appended to j->workers). On a GPU that cannot take them
 * (the reservation does not fit, or a backend cannot be made: the device layer then marks
 * the device unhealthy) the device's workers are dropped with a warning and 0 returned; on
 * the CPU that is an error. */
int rtx__jobs_workers_new(struct rtx_jobs *j, int d, struct rtx_err *err) {
    struct dev *dv = &j->devs[d];
    if (dv->n_workers <= 0) return 0;
    struct rtx_device_info info;
    rtx_device_info(dv->d, &info);
    dv->reserve_bytes = (size_t)((double)info.budget_bytes * j->jobs_reserve);
    struct rtx_err berr = {0};
    int first = j->n_workers, k = 0;
    int rc = rtx_device_consumer_new(dv->d, "jobs", dv->reserve_bytes, &dv->consumer, &berr);
    for (; rc == 0 && k < dv->n_workers; k++) {
        struct worker *w = &j->workers[first + k];
        w->j = j;
        w->dev = d;
        rc = rtx_device_backend_new(dv->consumer, &w->be, &berr);
    }
    if (rc == 0) {
        j->n_workers += dv->n_workers;
        return 0;
    }
    for (int q = 0; q < k; q++) {
        rtx_device_backend_free(dv->consumer, j->workers[first + q].be);
        j->workers[first + q].be = NULL;
    }
    rtx_device_consumer_free(dv->consumer);
    dv->consumer = NULL;
    dv->n_workers = 0;
    if (d == DEV_CPU) {
        *err = berr;
        return rtx_err_prefix(err, "jobs: the CPU's workers");
    }
    rtx_log(RTX_LOG_WARN, "device runs no jobs", "device", dv->name, "error", berr.msg, NULL);
    return 0;
}

/* Frees the workers' backends and the consumers, and removes the fault listener; the
 * workers must have been joined. */
void rtx__jobs_devices_close(struct rtx_jobs *j) {
    if (j->on_fault) rtx_devices_off_fault(j->devices, on_device_fault, j);
    j->on_fault = false;
    for (int i = 0; i < j->n_workers; i++) {
        struct worker *w = &j->workers[i];
        rtx_device_backend_free(j->devs[w->dev].consumer, w->be);
        w->be = NULL;
    }
    for (int d = 0; d < j->n_devs; d++) {
        rtx_device_consumer_free(j->devs[d].consumer);
        j->devs[d].consumer = NULL;
    }
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
