/*
 * main.c - rtxd's process lifecycle: settings, logs, the store, the job manager, the gRPC
 * server, and a libuv loop for signals, the hourly retention and the drain.
 *
 * DESIGN
 * The loop thread owns every uv handle. Signals arrive as uv_signal_t callbacks; the first
 * SIGTERM or SIGINT begins the drain (rtx__daemon_drain_begin: Submit answers UNAVAILABLE,
 * queued jobs stay in the journal), and the blocking rest of it (wait for running jobs up to
 * the grace, then stop the server) runs as a uv_work_t on libuv's thread pool, so the loop
 * keeps handling signals meanwhile: a second SIGTERM/SIGINT closes the store and exits with
 * status 1 at once. Admin.Drain begins the same drain on a completion-queue thread and wakes
 * the loop with uv_async_send; sends coalesce, so the callback reads the drain state rather
 * than counting wake-ups. When the drain work is done every handle is closed, the loop runs
 * dry and uv_loop_close must return 0; then the job manager stops and the store closes.
 * Retention runs once before serving, then hourly and after each SIGHUP, on the thread pool.
 * SIGHUP re-reads the settings (rtx_config_reload logs each change) and applies the mutable
 * ones to the modules holding copies (logs, retention, restart policy, and the lanes'
 * settings to the job manager's schedulers and the model versions'); the drain grace is read
 * when a drain begins. The lanes are handed over on every reload, changed or not, so one
 * that failed for memory is retried by the next SIGHUP. The HTTP server (daemon/http.c)
 * lives on this loop too; the drain work stops it first (rtx_http_shutdown blocks that pool
 * thread while the loop finishes its requests and closes its connections and handles), then
 * the gRPC server.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/jobs.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "device/device.h"
#include "store/store.h"

#define RETENTION_PERIOD_MS (3600 * 1000) /* hourly */
#define SERVER_GRACE_MS 5000              /* calls in flight when the server stops */
#define MAX_LANES 16                      /* struct rtx_jobs_stats holds 16 lanes */

struct app {
    uv_loop_t loop;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_async_t drain_async;
    uv_timer_t retention_timer;
    uv_work_t drain_work, retention_work;
    bool handles_closed;
    bool retention_busy;
    bool drain_started;
    int stop_signals; /* SIGTERM/SIGINT received */
    int drain_grace_ms;

    struct rtx_config cfg;
    struct rtx_daemon d;
    struct rtx_store *store;
    struct rtx_jobs *jobs;
    struct rtx_server *srv;
    struct rtx_http *http; /* NULL when http.listen is empty */
    int n_lanes;
    char *lanes[MAX_LANES];

    /* retention result, written by the work callback, read after it */
    int retention_rc;
    int64_t retention_freed; /* bytes */
    char retention_error[256];
};

static int64_t now_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(FILE *out) {
    fprintf(out,
            "Usage: rtxd [--config PATH] [--SECTION.KEY=VALUE | --SECTION.KEY VALUE]...\n"
            "            [--print-config] [--help] [--version]\n"
            "\n"
            "rtxd runs computation graphs submitted over gRPC (rtx.v1.Jobs, rtx.v1.Admin).\n"
            "Settings come from the defaults, then the INI file (--config PATH or $RTXD_CONFIG),\n"
            "then RTXD_SECTION_KEY environment variables, then flags.\n"
            "\n"
            "  --config PATH     read settings from this INI file\n"
            "  --print-config    print the effective settings with their origins and exit\n"
            "  --help, -h        print this help and exit\n"
            "  --version         print the version and build id and exit\n"
            "\n"
            "Signals: SIGTERM/SIGINT drain and exit 0 (a second one exits 1 at once);\n"
            "SIGHUP reloads the mutable settings.\n"
            "\n");
    rtx_config_usage(out);
}

static int restart_policy_from_name(const char *s, enum rtx_restart_policy *out) {
    if (s && strcmp(s, "rerun") == 0)
        *out = RTX_RESTART_RERUN;
    else if (s && strcmp(s, "fail") == 0)
        *out = RTX_RESTART_FAIL;
    else
        return RTX_EINVAL;
    return 0;
}

/* Splits jobs.lanes ("a, b,c") into a->lanes. */
static int parse_lanes(struct app *a, struct rtx_err *err) {
    const char *p = a->cfg.lanes ? a->cfg.lanes : "";
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t'))
            m--;
        if (m > 0) {
            if (a->n_lanes == MAX_LANES)
                return rtx_err_set(err, RTX_EINVAL, "jobs.lanes: at most %d lanes", MAX_LANES);
            char *name = rtx_malloc(m + 1);
            if (!name) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
            memcpy(name, p, m);
            name[m] = '\0';
            for (int i = 0; i < a->n_lanes; i++)
                if (strcmp(a->lanes[i], name) == 0) {
                    rtx_free(name);
                    return rtx_err_set(err, RTX_EINVAL, "jobs.lanes: lane '%s' listed twice",
                                       a->lanes[i]);
                }
            a->lanes[a->n_lanes++] = name;
        }
        p += n;
    }
    if (a->n_lanes == 0) return rtx_err_set(err, RTX_EINVAL, "jobs.lanes: no lane named");
    for (int i = 0; i < a->n_lanes; i++)
        if (a->cfg.default_lane && strcmp(a->lanes[i], a->cfg.default_lane) == 0) return 0;
    return rtx_err_set(err, RTX_EINVAL, "jobs.default_lane: '%s' is not one of jobs.lanes (%s)",
                       a->cfg.default_lane ? a->cfg.default_lane : "", a->cfg.lanes);
}

/* ------------------------------------------------------------------------------------------
 * Retention
 * ---------------------------------------------------------------------------------------- */

static void retention_run(struct app *a) {
    struct rtx_err err = {0};
    a->retention_freed = 0;
    a->retention_rc = rtx_store_retention_run(a->store, now_unix_ms(), &a->retention_freed, &err);
    snprintf(a->retention_error, sizeof a->retention_error, "%.*s", (int)(sizeof a->retention_error) - 1, err.msg);
}

static void retention_log(struct app *a) {
    if (a->retention_rc != 0) {
        rtx_log(RTX_LOG_ERROR, "retention failed", "error", a->retention_error, NULL);
        return;
    }
    char freed[32];
    snprintf(freed, sizeof freed, "%lld", (long long)a->retention_freed);
    rtx_log(a->retention_freed ? RTX_LOG_INFO : RTX_LOG_DEBUG, "retention ran", "freed_bytes",
            freed, NULL);
}

static void retention_work_cb(uv_work_t *w) {
    retention_run(w->data);
}

static void retention_after_cb(uv_work_t *w, int status) {
    struct app *a = w->data;
    a->retention_busy = false;
    if (status == 0) retention_log(a);
}

/* Runs retention on the thread pool unless a run is in flight or the drain began. */
static void retention_schedule(struct app *a) {
    if (a->retention_busy || a->drain_started) return;
    a->retention_busy = true;
    a->retention_work.data = a;
    int rc = uv_queue_work(&a->loop, &a->retention_work, retention_work_cb, retention_after_cb);
    if (rc != 0) {
        a->retention_busy = false;
        rtx_log(RTX_LOG_ERROR, "cannot schedule retention", "error", uv_strerror(rc), NULL);
    }
}

static void on_retention_timer(uv_timer_t *t) {
    retention_schedule(t->data);
}

/* ------------------------------------------------------------------------------------------
 * Drain and exit
 * ---------------------------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) {
    (void)h;
}

static void close_handles(struct app *a) {
    if (a->handles_closed) return;
    a->handles_closed = true;
    uv_handle_t *hs[] = {
        (uv_handle_t *)&a->sig_term,        (uv_handle_t *)&a->sig_int,
        (uv_handle_t *)&a->sig_hup,         (uv_handle_t *)&a->drain_async,
        (uv_handle_t *)&a->retention_timer,
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (!uv_is_closing(hs[i])) uv_close(hs[i], on_handle_closed);
}

static void drain_work_cb(uv_work_t *w) {
    struct app *a = w->data;
    rtx_jobs_wait_idle(a->jobs, a->drain_grace_ms);
    if (a->http) {
        rtx_log(RTX_LOG_INFO, "stopping the HTTP server", NULL);
        rtx_http_shutdown(a->http, SERVER_GRACE_MS);
    }
    rtx_log(RTX_LOG_INFO, "stopping the server", NULL);
    rtx_server_shutdown(a->srv, SERVER_GRACE_MS);
}

static void drain_after_cb(uv_work_t *w, int status) {
    struct app *a = w->data;
    (void)status;
    close_handles(a);
}

/* Starts the blocking part of the drain on the thread pool (once). */
static void drain_start(struct app *a) {
    if (a->drain_started) return;
    a->drain_started = true;
    uv_timer_stop(&a->retention_timer);
    int grace = 0;
    rtx__daemon_drain_begin(&a->d, 0, NULL, NULL, &grace);
    a->drain_grace_ms = grace;
    a->drain_work.data = a;
    int rc = uv_queue_work(&a->loop, &a->drain_work, drain_work_cb, drain_after_cb);
    if (rc != 0) { /* no thread pool: do it here, signals wait */
        rtx_log(RTX_LOG_WARN, "draining on the loop thread", "error", uv_strerror(rc), NULL);
        drain_work_cb(&a->drain_work);
        drain_after_cb(&a->drain_work, 0);
    }
}

static void drain_begin(struct app *a, const char *by) {
    int grace_cfg = a->cfg.drain_grace_ms; /* only the loop thread writes cfg */
    int running = 0, queued = 0, grace = 0;
    if (rtx__daemon_drain_begin(&a->d, grace_cfg, &running, &queued, &grace)) {
        char rs[16], qs[16], gs[16];
        snprintf(rs, sizeof rs, "%d", running);
        snprintf(qs, sizeof qs, "%d", queued);
        snprintf(gs, sizeof gs, "%d", grace);
        rtx_log(RTX_LOG_INFO, "draining", "by", by, "running", rs, "queued", qs, "grace_ms", gs,
                NULL);
    }
    drain_start(a);
}

/* Admin.Drain (a completion-queue thread): wake the loop. */
static void on_drain_request(struct rtx_daemon *d) {
    struct app *a = d->on_drain_ctx;
    uv_async_send(&a->drain_async);
}

/* Sends coalesce: look at the drain state, not at how many arrived. */
static void on_drain_async(uv_async_t *h) {
    struct app *a = h->data;
    pthread_mutex_lock(&a->d.drain_mu);
    bool begun = a->d.drain_begun;
    pthread_mutex_unlock(&a->d.drain_mu);
    if (begun) drain_start(a);
}

/* ------------------------------------------------------------------------------------------
 * SIGHUP
 * ---------------------------------------------------------------------------------------- */

/* The lanes' settings and the scheduler's knobs in force (a->cfg.sched) to every live
 * scheduler: the job manager's, one per device, and each loaded model version's. Each owner
 * takes them all or not at all. Runs on the loop thread, the only writer of a->cfg. */
static void apply_lanes(struct app *a) {
    struct rtx_err err = {0};
    if (a->jobs && rtx_jobs_reconfigure(a->jobs, &a->cfg.sched, &err) != 0)
        rtx_log(RTX_LOG_ERROR, "reload: the job schedulers keep their lane settings", "error",
                err.msg, NULL);
    if (a->d.serving && rtx_serving_reconfigure(a->d.serving, &a->cfg.sched, &err) != 0)
        rtx_log(RTX_LOG_ERROR, "reload: the model versions keep their lane settings", "error",
                err.msg, NULL);
}

/* rtx_config_reload logs each setting it changes (and each immutable one it cannot); this
 * applies the new values to the modules that hold copies. */
static void reload(struct app *a) {
    struct rtx_err err = {0};
    int changed = 0;
    pthread_rwlock_wrlock(&a->d.cfg_lock);
    int rc = rtx_config_reload(&a->cfg, &changed, &err);
    pthread_rwlock_unlock(&a->d.cfg_lock);
    if (rc != 0) {
        rtx_log(RTX_LOG_ERROR, "reload failed; settings unchanged", "error", err.msg, NULL);
        return;
    }
    if (rtx_log_configure(a->cfg.log_format, a->cfg.log_level) != 0)
        rtx_log(RTX_LOG_ERROR, "reload: invalid log settings", "format", a->cfg.log_format,
                "level", a->cfg.log_level, NULL);
    rtx_store_set_retention(a->store, a->cfg.retention_max_age_s * 1000,
                            a->cfg.retention_max_bytes);
    retention_schedule(a); /* new limits apply now, not at the next hourly run */
    enum rtx_restart_policy policy;
    if (restart_policy_from_name(a->cfg.restart_policy, &policy) == 0)
        rtx_jobs_set_restart_policy(a->jobs, policy);
    apply_lanes(a);
    char n[16];
    snprintf(n, sizeof n, "%d", changed);
    rtx_log(RTX_LOG_INFO, "settings reloaded", "changed", n, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Signals
 * ---------------------------------------------------------------------------------------- */

static void on_signal(uv_signal_t *h, int signum) {
    struct app *a = h->data;
    const char *name = signum == SIGTERM ? "SIGTERM" : signum == SIGINT ? "SIGINT" : "SIGHUP";
    if (signum == SIGHUP) {
        rtx_log(RTX_LOG_INFO, "signal", "signal", name, NULL);
        reload(a);
        return;
    }
    if (++a->stop_signals > 1) {
        rtx_log(RTX_LOG_WARN, "second stop signal: exiting now", "signal", name, NULL);
        rtx_store_close(a->store);
        _exit(1);
    }
    rtx_log(RTX_LOG_INFO, "signal", "signal", name, NULL);
    drain_begin(a, name);
}

/* ------------------------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------------------------- */

static int loop_setup(struct app *a) {
    int rc = uv_loop_init(&a->loop);
    if (rc != 0) return rc;
    uv_signal_t *sigs[] = {&a->sig_term, &a->sig_int, &a->sig_hup};
    const int nums[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&a->loop, sigs[i]);
        sigs[i]->data = a;
    }
    uv_async_init(&a->loop, &a->drain_async, on_drain_async);
    a->drain_async.data = a;
    uv_timer_init(&a->loop, &a->retention_timer);
    a->retention_timer.data = a;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = uv_signal_start(sigs[i], on_signal, nums[i]);
    if (rc == 0)
        rc = uv_timer_start(&a->retention_timer, on_retention_timer, RETENTION_PERIOD_MS,
                            RETENTION_PERIOD_MS);
    return rc;
}

/* Closes every handle and runs the loop dry; returns uv_loop_close's result. */
static int loop_finish(struct app *a) {
    close_handles(a);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&a->loop);
    if (rc != 0) rtx_log(RTX_LOG_ERROR, "uv_loop_close", "error", uv_strerror(rc), NULL);
    return rc;
}

/* Lists the CUDA devices once, at start: one line per device, or one line saying why there is
 * none (info when the host has no GPU or driver, warn when an installed driver fails). */
/* The device set (device/device.h) that jobs and serving share, made once from the CUDA
 * devices gpus_probe found; rtx_devices_free after serving and jobs stopped. CPU backends get
 * jobs.cpu_threads threads. */
static int devices_start(struct app *a, int cpu_threads, struct rtx_err *err) {
    struct rtx_devices_options o = {
        .gpus = &a->d.gpus,
        .cpu_threads = cpu_threads,
        .memory_fraction = a->cfg.memory_fraction,
        .memory_cap_bytes = (size_t)a->cfg.memory_cap_bytes,
        .plan_cache = a->cfg.plan_cache,
        .plan_cache_bytes = (size_t)a->cfg.plan_cache_bytes,
    };
    int rc = rtx_devices_new(&o, &a->d.devices, err);
    if (rc != 0) return rc;
    for (int s = 0; s < rtx_devices_count(a->d.devices); s++) {
        struct rtx_device_info info;
        rtx_device_info(rtx_devices_get(a->d.devices, s), &info);
        char budget[32], jobs[32];
        snprintf(budget, sizeof budget, "%zu", info.budget_bytes);
        snprintf(jobs, sizeof jobs, "%.0f", (double)info.budget_bytes * a->cfg.jobs_reserve);
        rtx_log(RTX_LOG_INFO, "device budget", "device", info.name, "budget_bytes", budget,
                "jobs_reserve_bytes", jobs, NULL);
    }
    return 0;
}

static int gpus_probe(struct app *a, struct rtx_err *err) {
    struct rtx_cuda_devices *l = &a->d.gpus;
    int rc = rtx_cuda_devices_init(l, true, err);
    if (rc != 0) return rc;
    if (l->n == 0) {
        rtx_logf(l->driver_fault ? RTX_LOG_WARN : RTX_LOG_INFO,
                 "no CUDA device: %s; running on the CPU backend", l->absent);
        return 0;
    }
    for (int i = 0; i < l->n; i++) {
        const struct rtx_cuda_device *g = &l->devs[i];
        char idx[16], sms[16], mem[32], mfree[32], cc[16];
        snprintf(idx, sizeof idx, "%d", g->index);
        snprintf(sms, sizeof sms, "%d", g->sm_count);
        snprintf(mem, sizeof mem, "%zu", g->memory_bytes);
        snprintf(mfree, sizeof mfree, "%zu", g->memory_free_bytes);
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        if (g->healthy)
            rtx_log(RTX_LOG_INFO, "cuda device", "index", idx, "name", g->name, "sms", sms,
                    "memory_bytes", mem, "free_bytes", mfree, "cc", cc, "pci", g->pci_bus_id,
                    NULL);
        else
            rtx_log(RTX_LOG_WARN, "cuda device unhealthy", "index", idx, "name", g->name, "error",
                    g->detail, NULL);
    }
    char why[256], ver[32];
    long v = rtx_cuda_cudnn_version(why, sizeof why);
    snprintf(ver, sizeof ver, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
    if (v)
        rtx_log(RTX_LOG_INFO, "attention uses cuDNN's fused engine where it applies", "cudnn", ver,
                NULL);
    else
        rtx_log(RTX_LOG_INFO, "attention uses rtxd's own kernels (no cuDNN)", "reason", why, NULL);
    return 0;
}

/* The models module's events, through the daemon's log. */
static void serving_log(enum rtx_serving_log_level level, const char *msg,
                        const char *const *fields) {
    static const enum rtx_log_level map[] = {
        [RTX_SERVING_LOG_DEBUG] = RTX_LOG_DEBUG, [RTX_SERVING_LOG_INFO] = RTX_LOG_INFO,
        [RTX_SERVING_LOG_WARN] = RTX_LOG_WARN, [RTX_SERVING_LOG_ERROR] = RTX_LOG_ERROR};
    rtx_log_fields((unsigned)level <= RTX_SERVING_LOG_ERROR ? map[level] : RTX_LOG_ERROR, msg,
                   fields);
}

/* Starts inference serving when models.repository is set (d.serving stays NULL otherwise) on
 * the daemon's device set (its CPU backends get the set's threads); models.startup is split
 * at commas. */
/* models.cpu_threads, 0 meaning one thread per online CPU (a model instance's CPU backend
 * has the host to itself unless jobs run beside it). */
static int models_cpu_threads(const struct rtx_config *c) {
    if (c->models_cpu_threads > 0) return c->models_cpu_threads;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 ? (int)ncpu : 1;
}

static int serving_start(struct app *a, const struct rtx_limits *limits, struct rtx_err *err) {
    const struct rtx_config *c = &a->cfg;
    if (!c->models_repository || !c->models_repository[0]) return 0;
    struct rtx_serving_options so = {
        .repository = c->models_repository,
        .poll_ms = c->models_poll_ms,
        .limits = *limits,
        .devices = a->d.devices,
        .cpu_threads = models_cpu_threads(c),
        .max_queue = c->models_max_queue,
        .sched = &c->sched,
        .default_lane = c->default_lane,
        .log = serving_log,
    };
    if (rtx_model_control_from_name(c->models_control, &so.control) != 0)
        return rtx_err_set(err, RTX_EINVAL, "models.control: '%s'", c->models_control);
    char *list = rtx_strdup(c->models_startup ? c->models_startup : "");
    const char *names[256];
    if (!list) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        size_t n = strlen(t);
        while (n > 0 && t[n - 1] == ' ') t[--n] = '\0';
        if (n == 0) continue;
        if (so.n_startup_models == (int)(sizeof names / sizeof names[0])) {
            rtx_free(list);
            return rtx_err_set(err, RTX_EINVAL, "models.startup: more than 256 models");
        }
        names[so.n_startup_models++] = t;
    }
    so.startup_models = names;
    int rc = rtx_serving_start(&so, &a->d.serving, err);
    rtx_free(list);
    if (rc != 0) return rc;
    struct rtx_model_index_entry *idx = NULL;
    int n = 0;
    if (rtx_serving_index(a->d.serving, true, &idx, &n, err) == 0) {
        char ns[16];
        snprintf(ns, sizeof ns, "%d", n);
        rtx_log(RTX_LOG_INFO, "serving models", "repository", c->models_repository, "control",
                c->models_control, "ready", ns, NULL);
        rtx_free(idx);
    }
    return 0;
}

/* Everything after the settings; returns the exit status. */
static int run(struct app *a) {
    struct rtx_err err = {0};
    int status = 1;
    bool loop_ready = false;

    if (parse_lanes(a, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "invalid settings", "error", err.msg, NULL);
        return 2;
    }
    enum rtx_restart_policy policy;
    if (restart_policy_from_name(a->cfg.restart_policy, &policy) != 0) {
        rtx_log(RTX_LOG_ERROR, "invalid settings", "error",
                "jobs.restart_policy must be rerun or fail", NULL);
        return 2;
    }
    if (rtx__daemon_init(&a->d, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot start", "error", err.msg, NULL);
        return 1;
    }
    if (gpus_probe(a, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot list the CUDA devices", "error", err.msg, NULL);
        goto out;
    }

    struct rtx_store_options so = {
        .path = a->cfg.store_path,
        .retention_max_age_ms = a->cfg.retention_max_age_s * 1000,
        .retention_max_bytes = a->cfg.retention_max_bytes,
        .sync_normal = strcmp(a->cfg.store_sync, "normal") == 0,
    };
    if (rtx_store_open(&so, &a->store, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot open the store", "path", a->cfg.store_path, "error",
                err.msg, NULL);
        goto out;
    }
    retention_run(a);
    retention_log(a);

    int cpu_threads = a->cfg.cpu_threads;
    if (cpu_threads <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_threads = ncpu > a->cfg.workers ? (int)(ncpu / a->cfg.workers) : 1;
    }
    if (devices_start(a, cpu_threads, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot make the device set", "error", err.msg, NULL);
        goto out;
    }
    /* the learned costs of jobs and served models, before either starts */
    if (rtx_devices_costs_open(a->d.devices, a->store, &err) != 0)
        rtx_log(RTX_LOG_WARN, "cannot load learned costs", "error", err.msg, NULL);
    struct rtx_limits limits = rtx_limits_default();
    limits.max_nodes = a->cfg.max_graph_nodes;
    limits.max_tensor_bytes = a->cfg.max_tensor_bytes;
    struct rtx_jobs_options jo = {
        .store = a->store,
        .workers = a->cfg.workers,
        .cpu_threads = cpu_threads,
        .limits = limits,
        .max_queued = a->cfg.max_queued,
        .default_restart_policy = policy,
        .n_lanes = a->n_lanes,
        .lanes = (const char *const *)a->lanes,
        .default_lane = a->cfg.default_lane,
        .sched = &a->cfg.sched,
        .devices = a->d.devices,
        .jobs_reserve = a->cfg.jobs_reserve,
        .gpu_workers_per_device = a->cfg.gpu_workers_per_device,
        .default_device = a->cfg.device,
    };
    if (rtx_jobs_start(&jo, &a->jobs, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot start the job manager", "error", err.msg, NULL);
        goto out;
    }

    a->d.cfg = &a->cfg;
    a->d.store = a->store;
    a->d.jobs = a->jobs;
    a->d.on_drain = on_drain_request;
    a->d.on_drain_ctx = a;
    /* clients' shared-memory regions (KServe v2), shared by the gRPC and HTTP servers */
    if (rtx_shm_new(&a->d.shm, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot create the shared-memory registry", "error", err.msg,
                NULL);
        goto out;
    }
    /* serving before the servers that use it (stopped after them) */
    if (serving_start(a, &limits, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot start serving", "repository", a->cfg.models_repository,
                "error", err.msg, NULL);
        goto out;
    }
    int rc = loop_setup(a);
    loop_ready = true;
    if (rc != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot set up the event loop", "error", uv_strerror(rc), NULL);
        goto out;
    }

    struct rtx_server_options sopt = {
        .listen = a->cfg.listen,
        .cq_threads = a->cfg.cq_threads,
        .max_message_bytes = a->cfg.max_message_bytes,
        .daemon = &a->d,
    };
    int port = 0;
    if (rtx_server_start(&sopt, &a->srv, &port, &err) != 0) {
        rtx_log(RTX_LOG_ERROR, "cannot start the server", "error", err.msg, NULL);
        goto out;
    }
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    if (strncmp(a->cfg.listen, "unix:", 5) == 0) /* no port to tell */
        rtx_log(RTX_LOG_INFO, "listening", "address", a->cfg.listen, "version", RTX_VERSION,
                "build", RTX_BUILD_ID, "store", a->cfg.store_path, NULL);
    else
        rtx_log(RTX_LOG_INFO, "listening", "address", a->cfg.listen, "port", ports, "version",
                RTX_VERSION, "build", RTX_BUILD_ID, "store", a->cfg.store_path, NULL);

    /* HTTP after gRPC, so that a gRPC address in use is the error reported first */
    if (a->cfg.http_listen && a->cfg.http_listen[0]) {
        struct rtx_http_options ho = {
            .listen = a->cfg.http_listen,
            .max_body_bytes = a->cfg.http_max_body_bytes,
            .daemon = &a->d,
            .loop = &a->loop, /* the main thread: h2o's per-thread caches live to the end */
        };
        int http_port = 0;
        if (rtx_http_start(&ho, &a->http, &http_port, &err) != 0) {
            rtx_log(RTX_LOG_ERROR, "cannot start the HTTP server", "error", err.msg, NULL);
            goto out;
        }
        char hport[16];
        snprintf(hport, sizeof hport, "%d", http_port);
        rtx_log(RTX_LOG_INFO, "http listening", "address", a->cfg.http_listen, "port", hport,
                NULL);
    }

    uv_run(&a->loop, UV_RUN_DEFAULT);
    status = 0;

out:
    if (loop_ready && loop_finish(a) != 0) status = 1;
    rtx_http_free(a->http);
    rtx_server_free(a->srv);
    rtx_serving_stop(a->d.serving); /* after both servers: every callback has run */
    a->d.serving = NULL;
    rtx_shm_free(a->d.shm); /* after both servers: no request maps a region any more */
    a->d.shm = NULL;
    rtx_jobs_stop(a->jobs);
    rtx_devices_free(a->d.devices); /* after serving and jobs: their consumers are gone */
    a->d.devices = NULL;
    rtx_store_close(a->store);
    rtx__daemon_close(&a->d);
    if (status == 0) rtx_log(RTX_LOG_INFO, "stopped", NULL);
    return status;
}

int main(int argc, char **argv) {
    rtx_host_memory_keep_freed();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("rtxd %s (build %s)\n", RTX_VERSION, RTX_BUILD_ID);
            return 0;
        }
    }

    static struct app app; /* large; lives for the whole run */
    struct app *a = &app;
    struct rtx_err err = {0};
    if (rtx_config_load(&a->cfg, &argc, argv, &err) != 0) {
        fprintf(stderr, "rtxd: %s\n", err.msg);
        return 2;
    }
    bool print_config = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--print-config") == 0) {
            print_config = true;
        } else {
            fprintf(stderr, "rtxd: unknown argument '%s' (see rtxd --help)\n", argv[i]);
            rtx_config_free(&a->cfg);
            return 2;
        }
    }
    if (print_config) {
        rtx_config_print(&a->cfg, stdout);
        rtx_config_free(&a->cfg);
        return 0;
    }
    if (rtx_log_configure(a->cfg.log_format, a->cfg.log_level) != 0) {
        fprintf(stderr, "rtxd: invalid log.format '%s' or log.level '%s'\n", a->cfg.log_format,
                a->cfg.log_level);
        rtx_config_free(&a->cfg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    int status = run(a);

    for (int i = 0; i < a->n_lanes; i++)
        rtx_free(a->lanes[i]);
    rtx_config_free(&a->cfg);
    return status;
}
