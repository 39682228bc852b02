/*
 * daemon.c - the daemon's shared state (daemon.h): init (locks, start time, CPU name and
 * memory), close, the reply bound read under the config lock, and the drain entry point shared
 * by Admin.Drain and SIGTERM.
 */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int64_t now_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The "model name" line of /proc/cpuinfo, else the machine name from uname. */
static void read_cpu_name(char *out, size_t size) {
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            const char *v = strchr(line, ':');
            if (!v) continue;
            v++;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = strcspn(v, "\n");
            while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            snprintf(out, size, "%.*s", (int)n, v);
            break;
        }
        fclose(f);
    }
    if (!out[0]) {
        struct utsname u;
        snprintf(out, size, "%s", uname(&u) == 0 ? u.machine : "cpu");
    }
}

int rtx__daemon_init(struct rtx_daemon *d, struct rtx_err *err) {
    memset(d, 0, sizeof *d);
    if (pthread_rwlock_init(&d->cfg_lock, NULL) != 0)
        return rtx_err_set(err, RTX_ENOMEM, "cannot create the config lock");
    if (pthread_mutex_init(&d->drain_mu, NULL) != 0) {
        pthread_rwlock_destroy(&d->cfg_lock);
        return rtx_err_set(err, RTX_ENOMEM, "cannot create the drain lock");
    }
    atomic_init(&d->draining, false);
    d->started_ms = now_unix_ms();
    read_cpu_name(d->cpu_name, sizeof d->cpu_name);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    d->memory_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    return 0;
}

int64_t rtx__daemon_uptime_ms(const struct rtx_daemon *d) {
    return now_unix_ms() - d->started_ms;
}

int64_t rtx__daemon_max_reply_bytes(struct rtx_daemon *d) {
    if (!d->cfg) return 0;
    pthread_rwlock_rdlock(&d->cfg_lock);
    int64_t v = d->cfg->max_message_bytes;
    pthread_rwlock_unlock(&d->cfg_lock);
    return v;
}

void rtx__daemon_close(struct rtx_daemon *d) {
    rtx_cuda_devices_close(&d->gpus);
    pthread_mutex_destroy(&d->drain_mu);
    pthread_rwlock_destroy(&d->cfg_lock);
}

bool rtx__daemon_drain_begin(struct rtx_daemon *d, int grace_ms, int *running, int *queued,
                             int *grace_used) {
    pthread_mutex_lock(&d->drain_mu);
    bool first = !d->drain_begun;
    if (first) {
        d->drain_begun = true;
        atomic_store(&d->draining, true);
        int r = 0, q = 0;
        if (d->jobs) rtx_jobs_drain(d->jobs, &r, &q);
        d->drain_running = r;
        d->drain_queued = q;
        d->drain_grace_ms = grace_ms;
    }
    if (running) *running = d->drain_running;
    if (queued) *queued = d->drain_queued;
    if (grace_used) *grace_used = d->drain_grace_ms;
    pthread_mutex_unlock(&d->drain_mu);
    return first;
}
