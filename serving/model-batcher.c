/*
 * model-batcher.c - a model version's queue and workers: requests in the order of the
 * version's SLA scheduler, the held list, cancel and expiry sweeps, and the dynamic batcher
 * that forms each batch an instance's worker runs (model-exec.c).
 *
 * DESIGN
 * Queue: each version has an SLA scheduler (scheduler/sched.h) with one executor per
 * instance (requests are admitted in model-infer.c). Workers take requests in the
 * scheduler's order (earliest deadline first in a lane, weighted fair share across lanes). A
 * request the scheduler handed out that cannot join the batch being formed (other non-batch
 * shapes, or it does not fit) waits on a short "held" list that is served before the
 * scheduler. Each request's share of its batch's run time (rows / total rows) is reported as
 * its run time, so the scheduler learns the cost of a request of this version (key
 * "name:version") as batched. Requests whose deadline passed are answered RTX_EEXPIRED
 * without running; cancelled ones leave the queue at the next sweep (every 10 ms while a
 * worker looks for work).
 *
 * Batching: at most one worker "gathers" at a time (the role of Triton's batch scheduler): it
 * takes the next request and, with dynamic batching on, adds requests whose non-batch
 * dimensions equal the first one's, in the scheduler's order, until the batch reaches
 * max_batch_size or a compatible request does not fit. When a prefix of the gathered requests
 * adds up to a preferred batch size, the longest such prefix runs at once and the rest go to
 * the front of the held list; otherwise it waits for arrivals until max_queue_delay_us (times
 * the scheduler's brownout delay factor) after the first request arrived, then runs what it
 * has. Requests whose deadline passed or whose cancel flag is up fail as they are met. The
 * gatherer then releases the role, so another idle instance can form the next batch while
 * this one runs.
 *
 * Health: a worker whose device is unhealthy (device/device.h; a sticky fault found by any
 * consumer) takes no more requests, so they go to the version's other instances; when none
 * of them is on a healthy device, it fails what is queued with RTX_EUNAVAILABLE naming the
 * device and its fault (model-infer.c refuses new requests with the same message). The
 * server's fault listener wakes the workers when a device turns unhealthy.
 */
#include <stdio.h>
#include <time.h>

#include "serving/model-impl.h"

static bool compatible(const struct request *a, const struct request *b, int n_inputs) {
    for (int i = 0; i < n_inputs; i++) {
        const struct rtx_tensor *x = a->in[i], *y = b->in[i];
        if (x->ndim != y->ndim) return false;
        for (int d = 1; d < x->ndim; d++)
            if (x->dims[d] != y->dims[d]) return false;
    }
    return true;
}

static bool is_preferred(const struct rtx_model_info *info, int total) {
    for (int i = 0; i < info->n_preferred; i++)
        if (info->preferred_batch_sizes[i] == total) return true;
    return false;
}

/* Removes r (whose predecessor is prev, NULL for the head) from the held list. Under m->mu. */
static void unlink_request(struct rtx_model *m, struct request *prev, struct request *r) {
    if (prev)
        prev->next = r->next;
    else
        m->head = r->next;
    if (m->tail == r) m->tail = prev;
    r->next = NULL;
    m->n_queued--;
}

/* Appends r (dispatched by the scheduler, still counted in n_queued) to the held list. */
static void held_append(struct rtx_model *m, struct request *r) {
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
}

/* Adds r to / removes it from the list of requests queued in the scheduler. Under m->mu. */
void rtx__queue_link(struct rtx_model *m, struct request *r) {
    r->qprev = NULL;
    r->qnext = m->qhead;
    if (m->qhead) m->qhead->qprev = r;
    m->qhead = r;
    r->queued = true;
}

static void q_unlink(struct rtx_model *m, struct request *r) {
    if (r->qprev)
        r->qprev->qnext = r->qnext;
    else
        m->qhead = r->qnext;
    if (r->qnext) r->qnext->qprev = r->qprev;
    r->qprev = r->qnext = NULL;
    r->queued = false;
}

/* Fails every request of the list: with code and why when code is not 0, else with the
 * reason each is dead (deadline, cancel). */
static void fail_list_why(struct request *dead, int code, const char *why) {
    while (dead) {
        struct request *next = dead->next;
        char msg[256];
        int c = code ? code : rtx__request_dead(dead, rtx_mono_ns(), msg, sizeof msg);
        if (code) snprintf(msg, sizeof msg, "%s", why);
        if (!c) { /* only dead requests are listed: the flag was seen up */
            c = RTX_ECANCELED;
            snprintf(msg, sizeof msg, "request canceled before it ran");
        }
        rtx__request_fail(dead, c, msg);
        dead = next;
    }
}

static void fail_list(struct request *dead, int code) {
    fail_list_why(dead, code, "server shutting down");
}

/* The scheduler's next request, taken off the queued list with its handle (NULL when nothing
 * may be dispatched now). Requests whose deadline passed in the queue go to *dead (the
 * scheduler counted them expired). Under m->mu. */
static struct request *sched_next(struct rtx_model *m, int64_t now, struct request **dead) {
    struct rtx_sched_item it;
    for (;;) {
        enum rtx_sched_pick p = rtx_sched_dispatch(m->sched, now, &it);
        if (p == RTX_SCHED_NONE) return NULL;
        struct request *r = it.data;
        q_unlink(m, r);
        if (p == RTX_SCHED_EXPIRED) {
            r->handle = 0;
            m->n_queued--;
            r->next = *dead;
            *dead = r;
            continue;
        }
        r->handle = it.handle;
        return r;
    }
}

/* At most every 10 ms: queued requests whose client cancelled leave the scheduler, and those
 * whose deadline passed are expired; both go to *dead. Under m->mu. */
static void sweep(struct rtx_model *m, int64_t now, struct request **dead) {
    if (now - m->last_sweep_ns < 10 * 1000000LL) return;
    m->last_sweep_ns = now;
    for (struct request *r = m->qhead, *next; r; r = next) {
        next = r->qnext;
        if (!r->cancel || !__atomic_load_n(r->cancel, __ATOMIC_RELAXED)) continue;
        if (rtx_sched_cancel(m->sched, r->handle, now, NULL, NULL) != 0) continue;
        q_unlink(m, r);
        r->handle = 0;
        m->n_queued--;
        r->next = *dead;
        *dead = r;
    }
    struct rtx_sched_item items[32];
    int n;
    do {
        n = rtx_sched_expire(m->sched, now, items, 32);
        for (int i = 0; i < n; i++) {
            struct request *r = items[i].data;
            q_unlink(m, r);
            r->handle = 0;
            m->n_queued--;
            r->next = *dead;
            *dead = r;
        }
    } while (n == 32);
}

/* Takes every queued and held request (stop with fail_queued) into *dead; queued ones are
 * cancelled in the scheduler, held ones keep their handle (rtx__request_fail finishes them). */
static void take_all(struct rtx_model *m, int64_t now, struct request **dead) {
    while (m->qhead) {
        struct request *r = m->qhead;
        q_unlink(m, r);
        rtx_sched_cancel(m->sched, r->handle, now, NULL, NULL);
        r->handle = 0;
        r->next = *dead;
        *dead = r;
    }
    while (m->head) {
        struct request *r = m->head;
        m->head = r->next;
        r->next = *dead;
        *dead = r;
    }
    m->tail = NULL;
    m->n_queued = 0;
}

/* Adds compatible requests to the batch, from the held list and then in the scheduler's
 * order; dead ones go to *dead, incompatible ones wait on the held list. Under m->mu.
 * Returns true when the batch cannot grow (max reached or the next compatible one does not
 * fit). */
static bool gather(struct rtx_model *m, struct request **batch, int *nb, int *total,
                   struct request **dead) {
    const struct rtx_model_info *info = &m->cfg.info;
    struct request *prev = NULL, *r = m->head;
    int64_t now = rtx_mono_ns();
    char msg[8];
    while (r && *total < info->max_batch_size) {
        struct request *next = r->next;
        if (rtx__request_dead(r, now, msg, sizeof msg)) {
            unlink_request(m, prev, r);
            r->next = *dead;
            *dead = r;
        } else if (compatible(batch[0], r, info->n_inputs)) {
            if (*total + r->batch > info->max_batch_size) return true;
            unlink_request(m, prev, r);
            batch[(*nb)++] = r;
            *total += r->batch;
        } else {
            prev = r;
        }
        r = next;
    }
    while (*total < info->max_batch_size && (r = sched_next(m, now, dead))) {
        if (rtx__request_dead(r, now, msg, sizeof msg)) {
            m->n_queued--;
            r->next = *dead;
            *dead = r;
        } else if (!compatible(batch[0], r, info->n_inputs)) {
            held_append(m, r);
        } else if (*total + r->batch > info->max_batch_size) {
            held_append(m, r);
            return true;
        } else {
            m->n_queued--;
            batch[(*nb)++] = r;
            *total += r->batch;
        }
    }
    return *total >= info->max_batch_size;
}

/* Puts batch[0..n) back at the front of the held list, in order. Under m->mu. */
static void held_push_front(struct rtx_model *m, struct request **batch, int n) {
    for (int k = n - 1; k >= 0; k--) {
        batch[k]->next = m->head;
        m->head = batch[k];
        if (!m->tail) m->tail = batch[k];
        m->n_queued++;
    }
}

/* With preferred sizes: the longest prefix of the batch whose rows add up to a preferred
 * size; the requests after it go back to the front of the held list, in order, and the
 * prefix runs now (Triton sends the largest preferred batch it can form). Returns whether it
 * cut. Under m->mu. */
static bool cut_to_preferred(struct rtx_model *m, struct request **batch, int *nb, int *total) {
    const struct rtx_model_info *info = &m->cfg.info;
    int rows = 0, cut = 0, cut_rows = 0;
    for (int k = 0; k < *nb; k++) {
        rows += batch[k]->batch;
        if (is_preferred(info, rows)) {
            cut = k + 1;
            cut_rows = rows;
        }
    }
    if (cut == 0 || cut == *nb) return cut == *nb;
    held_push_front(m, batch + cut, *nb - cut);
    *nb = cut;
    *total = cut_rows;
    return true;
}

static void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ns) {
    struct timespec ts = {.tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000};
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The next request to start a batch with: the held list's first, else the scheduler's next;
 * NULL when none may start now. Under m->mu. */
static struct request *first_request(struct rtx_model *m, int64_t now, struct request **dead) {
    if (m->head) {
        struct request *r = m->head;
        unlink_request(m, NULL, r);
        return r;
    }
    struct request *r = sched_next(m, now, dead);
    if (r) m->n_queued--;
    return r;
}

/* Reports once that the instance's device turned unhealthy. */
static void log_sick(const struct instance *in) {
    char detail[256], version[32];
    rtx_device_detail(in->dev, detail, sizeof detail);
    snprintf(version, sizeof version, "%lld", (long long)in->m->cfg.info.version);
    rtx__serving_log(in->m->log, RTX_SERVING_LOG_WARN,
                     "device unhealthy: the instance takes no more batches", "model",
                     in->m->cfg.info.name, "version", version, "device",
                     rtx_device_name(in->dev), "error", detail, NULL);
}

void *rtx__model_worker(void *arg) {
    struct instance *in = arg;
    struct rtx_model *m = in->m;
    rtx_thread_name("rtx-inst-%d-%s", (int)(in - m->inst), m->cfg.info.name);
    const struct rtx_model_info *info = &m->cfg.info;
    bool batching = info->dynamic_batching && info->max_batch_size > 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        struct request *dead = NULL;
        int64_t now = rtx_mono_ns();
        if (m->stopping && m->fail_queued && m->n_queued > 0) {
            take_all(m, now, &dead);
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, RTX_EUNAVAILABLE);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        if (m->stopping && m->n_queued == 0) break; /* nothing left */
        if (!rtx_device_healthy(in->dev)) { /* takes no more batches */
            char why[256];
            if (!in->sick) {
                in->sick = true;
                pthread_mutex_unlock(&m->mu);
                log_sick(in);
                pthread_mutex_lock(&m->mu);
                continue;
            }
            if (m->n_queued > 0 && rtx__model_healthy(m, why, sizeof why)) {
                take_all(m, now, &dead); /* no instance can run them */
                pthread_mutex_unlock(&m->mu);
                fail_list_why(dead, RTX_EUNAVAILABLE, why);
            } else {
                cond_wait_until(&m->cv, &m->mu, now + 50 * 1000000LL);
                pthread_mutex_unlock(&m->mu);
            }
            pthread_mutex_lock(&m->mu);
            continue;
        }
        struct request *r = NULL;
        if (!m->gathering) {
            sweep(m, now, &dead);
            r = first_request(m, now, &dead);
        }
        if (!r) {
            if (!dead) /* wait for work; wake for the next sweep while requests wait */
                cond_wait_until(&m->cv, &m->mu, now + 50 * 1000000LL);
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, 0);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        char msg[256];
        int code = rtx__request_dead(r, now, msg, sizeof msg);
        if (code) {
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, 0);
            rtx__request_fail(r, code, msg);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        int nb = 1, total = r->batch;
        in->batch[0] = r;
        if (batching) {
            m->gathering = true;
            double factor = rtx_sched_batch_delay_factor(m->sched); /* < 1 in brownout */
            int64_t until = r->t_enqueue + (int64_t)((double)info->max_queue_delay_us * 1000.0 *
                                                     factor);
            for (;;) {
                bool full = gather(m, in->batch, &nb, &total, &dead);
                if (full || m->stopping || cut_to_preferred(m, in->batch, &nb, &total)) break;
                if (rtx_mono_ns() >= until) break;
                cond_wait_until(&m->cv, &m->mu, until);
            }
            m->gathering = false;
            pthread_cond_broadcast(&m->cv); /* another instance may gather now */
        }
        if (!rtx_device_healthy(in->dev)) { /* it turned unhealthy while the batch formed */
            held_push_front(m, in->batch, nb);
            pthread_cond_broadcast(&m->cv);
            pthread_mutex_unlock(&m->mu);
            fail_list(dead, 0);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        m->n_running += nb;
        pthread_mutex_unlock(&m->mu);
        fail_list(dead, 0);
        rtx__instance_run_batch(in, in->batch, nb, total); /* takes the batch off n_running */
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}
