/*
 * admin.c - rtxctl's commands about the daemon itself (rtx.v1.Admin): status, devices, pools,
 * lanes, health, config and drain.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

/* Rejects any argument of a command that takes none. */
static int no_args(const char *cmd, int argc, char **argv) {
    if (argc > 0) return ctl_usage_error(cmd, "unexpected argument '%s'", argv[0]);
    return EXIT_OK;
}

static json_t *device_json(const struct rtx_client_device *d) {
    json_t *o = ctl_json_object();
    ctl_json_set_int(o, "index", d->index);
    ctl_json_set_str(o, "kind", d->kind);
    ctl_json_set_str(o, "name", d->name);
    ctl_json_set_int(o, "threads", d->threads);
    ctl_json_set_int(o, "sm_count", d->sm_count);
    ctl_json_set_int(o, "memory_bytes", d->memory_bytes);
    ctl_json_set_str(o, "compute_capability", d->compute_capability);
    ctl_json_set_bool(o, "healthy", d->healthy);
    ctl_json_set_str(o, "detail", d->detail);
    ctl_json_set_int(o, "workers", d->workers);
    ctl_json_set_int(o, "budget_bytes", d->budget_bytes);
    ctl_json_set_int(o, "reserved_bytes", d->reserved_bytes);
    ctl_json_set_int(o, "used_bytes", d->used_bytes);
    ctl_json_set_int(o, "plan_cache_hits", d->plan_cache_hits);
    ctl_json_set_int(o, "plan_cache_misses", d->plan_cache_misses);
    ctl_json_set_int(o, "plan_cache_evictions", d->plan_cache_evictions);
    ctl_json_set_int(o, "plans_kept", d->plans_kept);
    ctl_json_set_int(o, "backends", d->backends);
    json_t *cons = ctl_json_array();
    ctl_json_set(o, "consumers", cons);
    for (int i = 0; i < d->n_consumers; i++) {
        const struct rtx_client_device_consumer *c = &d->consumers[i];
        json_t *item = ctl_json_object();
        ctl_json_append(cons, item);
        ctl_json_set_str(item, "name", c->name);
        ctl_json_set_int(item, "reserved_bytes", c->reserved_bytes);
        ctl_json_set_int(item, "used_bytes", c->used_bytes);
        ctl_json_set_int(item, "peak_bytes", c->peak_bytes);
        ctl_json_set_int(item, "refusals", c->refusals);
    }
    return o;
}

/* The consumers of every device: their budget shares (rtxctl devices). */
static void print_consumers(const struct rtx_client_device *devs, int n) {
    static const char *const headers[] = {"DEVICE", "CONSUMER", "RESERVED",
                                          "USED",   "PEAK",     "REFUSALS"};
    struct ctl_table t = {.ncols = 6, .headers = headers};
    int rows = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < devs[i].n_consumers; k++, rows++) {
            const struct rtx_client_device_consumer *c = &devs[i].consumers[k];
            char b1[64], b2[64], b3[64];
            if (strcmp(devs[i].kind, "cuda") == 0)
                ctl_table_add(&t, "cuda:%d", devs[i].index);
            else
                ctl_table_add(&t, "%s", ctl_dash(devs[i].kind));
            ctl_table_add(&t, "%s", ctl_dash(c->name));
            ctl_table_add(&t, "%s", ctl_fmt_bytes(c->reserved_bytes, b1, sizeof b1));
            ctl_table_add(&t, "%s", ctl_fmt_bytes(c->used_bytes, b2, sizeof b2));
            ctl_table_add(&t, "%s", ctl_fmt_bytes(c->peak_bytes, b3, sizeof b3));
            ctl_table_add(&t, "%" PRId64, c->refusals);
        }
    }
    if (rows > 0) {
        printf("\n");
        ctl_table_print(&t, 0);
    }
    ctl_table_free(&t);
}

static void print_devices(const struct rtx_client_device *devs, int n, int indent) {
    static const char *const headers[] = {
        "INDEX", "KIND",   "NAME", "THREADS", "SMS",      "MEMORY",   "CC",     "BUDGET",
        "USED",  "PLANS",  "HITS", "MISSES",  "EVICTED",  "BACKENDS", "HEALTHY", "DETAIL"};
    struct ctl_table t = {.ncols = 16, .headers = headers};
    for (int i = 0; i < n; i++) {
        const struct rtx_client_device *d = &devs[i];
        char b[64];
        ctl_table_add(&t, "%d", d->index);
        ctl_table_add(&t, "%s", ctl_dash(d->kind));
        ctl_table_add(&t, "%s", ctl_dash(d->name));
        ctl_table_add(&t, d->threads ? "%d" : "-", d->threads);
        ctl_table_add(&t, d->sm_count ? "%d" : "-", d->sm_count);
        ctl_table_add(&t, "%s",
                      d->memory_bytes ? ctl_fmt_bytes(d->memory_bytes, b, sizeof b) : "-");
        ctl_table_add(&t, "%s", ctl_dash(d->compute_capability));
        ctl_table_add(&t, "%s",
                      d->budget_bytes ? ctl_fmt_bytes(d->budget_bytes, b, sizeof b) : "-");
        ctl_table_add(&t, "%s", ctl_fmt_bytes(d->used_bytes, b, sizeof b));
        ctl_table_add(&t, "%d", d->plans_kept);
        ctl_table_add(&t, "%" PRId64, d->plan_cache_hits);
        ctl_table_add(&t, "%" PRId64, d->plan_cache_misses);
        ctl_table_add(&t, "%" PRId64, d->plan_cache_evictions);
        ctl_table_add(&t, "%d", d->backends);
        ctl_table_add(&t, "%s", d->healthy ? "yes" : "no");
        ctl_table_add(&t, "%s", ctl_dash(d->detail));
    }
    ctl_table_print(&t, indent);
    ctl_table_free(&t);
}

int ctl_cmd_status(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("status ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_status *st = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_status(ctl->client, &st, &err) < 0)
        return ctl_call_failed(ctl, "status", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "address", ctl->address);
        ctl_json_set_str(doc, "version", st->version);
        ctl_json_set_str(doc, "build_id", st->build_id);
        ctl_json_set_int(doc, "uptime_ms", st->uptime_ms);
        ctl_json_set_bool(doc, "draining", st->draining);
        ctl_json_set_int(doc, "jobs_succeeded", st->jobs_succeeded);
        ctl_json_set_int(doc, "jobs_failed", st->jobs_failed);
        json_t *store = ctl_json_object();
        ctl_json_set(doc, "store", store);
        ctl_json_set_bool(store, "ok", st->store.ok);
        ctl_json_set_str(store, "path", st->store.path);
        ctl_json_set_int(store, "db_bytes", st->store.db_bytes);
        ctl_json_set_int(store, "jobs", st->store.jobs);
        ctl_json_set_int(store, "blob_bytes", st->store.blob_bytes);
        ctl_json_set_str(store, "last_error", st->store.last_error);
        json_t *devices = ctl_json_array();
        ctl_json_set(doc, "devices", devices);
        for (int i = 0; i < st->n_devices; i++)
            ctl_json_append(devices, device_json(&st->devices[i]));
        json_t *lanes = ctl_json_array();
        ctl_json_set(doc, "lanes", lanes);
        for (int i = 0; i < st->n_lanes; i++) {
            json_t *item = ctl_json_object();
            ctl_json_append(lanes, item);
            ctl_json_set_str(item, "lane", st->lanes[i].lane);
            ctl_json_set_int(item, "queued", st->lanes[i].queued);
            ctl_json_set_int(item, "running", st->lanes[i].running);
        }
        ctl_json_print(doc);
    } else {
        char b1[64], b2[64], b3[64];
        printf("rtxd %s (build %s) at %s\n", ctl_dash(st->version), ctl_dash(st->build_id),
               ctl->address);
        printf("%-9s %s\n", "uptime:", ctl_fmt_duration(st->uptime_ms, b1, sizeof b1));
        printf("%-9s %s\n", "state:", st->draining ? "draining" : "serving");
        printf("%-9s %" PRId64 " succeeded, %" PRId64 " failed since start\n",
               "jobs:", st->jobs_succeeded, st->jobs_failed);
        printf("%-9s %s, %s: database %s, %" PRId64 " jobs, outputs %s\n",
               "store:", st->store.ok ? "ok" : "FAILING", ctl_dash(st->store.path),
               ctl_fmt_bytes(st->store.db_bytes, b2, sizeof b2), st->store.jobs,
               ctl_fmt_bytes(st->store.blob_bytes, b3, sizeof b3));
        if (*st->store.last_error) printf("%-9s %s\n", "", st->store.last_error);
        printf("devices:\n");
        print_devices(st->devices, st->n_devices, 2);
        printf("lanes:\n");
        static const char *const headers[] = {"LANE", "QUEUED", "RUNNING"};
        struct ctl_table t = {.ncols = 3, .headers = headers};
        for (int i = 0; i < st->n_lanes; i++) {
            ctl_table_add(&t, "%s", st->lanes[i].lane);
            ctl_table_add(&t, "%d", st->lanes[i].queued);
            ctl_table_add(&t, "%d", st->lanes[i].running);
        }
        ctl_table_print(&t, 2);
        ctl_table_free(&t);
    }
    rtx_client_status_free(st);
    return EXIT_OK;
}

int ctl_cmd_devices(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("devices ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_device_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_devices(ctl->client, &l, &err) < 0)
        return ctl_call_failed(ctl, "devices", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_array();
        for (int i = 0; i < l->n_devices; i++)
            ctl_json_append(doc, device_json(&l->devices[i]));
        ctl_json_print(doc);
    } else {
        print_devices(l->devices, l->n_devices, 0);
        print_consumers(l->devices, l->n_devices);
    }
    rtx_client_device_list_free(l);
    return EXIT_OK;
}

int ctl_cmd_pools(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("pools ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_pool_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_pools(ctl->client, &l, &err) < 0)
        return ctl_call_failed(ctl, "pools", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_array();
        for (int i = 0; i < l->n_pools; i++) {
            const struct rtx_client_pool *p = &l->pools[i];
            json_t *item = ctl_json_object();
            ctl_json_append(doc, item);
            ctl_json_set_str(item, "device", p->device);
            ctl_json_set_str(item, "kind", p->kind);
            ctl_json_set_int(item, "pools", p->pools);
            ctl_json_set_int(item, "allocated_bytes", p->allocated_bytes);
            ctl_json_set_int(item, "reserved_bytes", p->reserved_bytes);
            ctl_json_set_int(item, "active_bytes", p->active_bytes);
            ctl_json_set_int(item, "allocated_peak_bytes", p->allocated_peak_bytes);
            ctl_json_set_int(item, "reserved_peak_bytes", p->reserved_peak_bytes);
            ctl_json_set_real(item, "fragmentation", p->fragmentation);
            ctl_json_set_int(item, "alloc_retries", p->alloc_retries);
            ctl_json_set_int(item, "ooms", p->ooms);
            ctl_json_set_int(item, "cap_bytes", p->cap_bytes);
            ctl_json_set_int(item, "free_bytes", p->free_bytes);
            ctl_json_set_int(item, "allocs", p->allocs);
            ctl_json_set_int(item, "cache_hits", p->cache_hits);
            ctl_json_set_int(item, "segments", p->segments);
            ctl_json_set_bool(item, "healthy", p->healthy);
            ctl_json_set_str(item, "detail", p->detail);
        }
        ctl_json_print(doc);
    } else {
        static const char *const headers[] = {"DEVICE", "ALLOCATED", "RESERVED", "ACTIVE",
                                              "PEAK",   "FRAG",      "RETRIES",  "OOMS",
                                              "CAP",    "HEALTHY"};
        struct ctl_table t = {.ncols = 10, .headers = headers};
        for (int i = 0; i < l->n_pools; i++) {
            const struct rtx_client_pool *p = &l->pools[i];
            char b1[64], b2[64], b3[64], b4[64], b5[64];
            bool pooled = p->pools > 0;
            ctl_table_add(&t, "%s", ctl_dash(p->device));
            ctl_table_add(&t, "%s",
                          pooled ? ctl_fmt_bytes(p->allocated_bytes, b1, sizeof b1) : "-");
            ctl_table_add(&t, "%s",
                          pooled ? ctl_fmt_bytes(p->reserved_bytes, b2, sizeof b2) : "-");
            ctl_table_add(&t, "%s", pooled ? ctl_fmt_bytes(p->active_bytes, b3, sizeof b3) : "-");
            ctl_table_add(&t, "%s", ctl_fmt_bytes(p->allocated_peak_bytes, b4, sizeof b4));
            ctl_table_add(&t, pooled ? "%.3f" : "-", p->fragmentation);
            ctl_table_add(&t, pooled ? "%" PRId64 : "-", p->alloc_retries);
            ctl_table_add(&t, pooled ? "%" PRId64 : "-", p->ooms);
            ctl_table_add(&t, "%s",
                          p->cap_bytes ? ctl_fmt_bytes(p->cap_bytes, b5, sizeof b5) : "-");
            ctl_table_add(&t, "%s", p->healthy ? "yes" : "no");
        }
        ctl_table_print(&t, 0);
        ctl_table_free(&t);
        for (int i = 0; i < l->n_pools; i++)
            if (*l->pools[i].detail) printf("%s: %s\n", l->pools[i].device, l->pools[i].detail);
    }
    rtx_client_pool_list_free(l);
    return EXIT_OK;
}

static json_t *lane_json(const struct rtx_client_lane *l) {
    json_t *o = ctl_json_object();
    ctl_json_set_str(o, "device", l->device);
    ctl_json_set_str(o, "lane", l->lane);
    ctl_json_set_int(o, "priority", l->priority);
    ctl_json_set_int(o, "target_p99_us", l->target_p99_us);
    ctl_json_set_int(o, "weight", l->weight);
    ctl_json_set_int(o, "max_queued", l->max_queued);
    ctl_json_set_str(o, "on_timeout", l->on_timeout);
    ctl_json_set_bool(o, "preemptible", l->preemptible);
    ctl_json_set_int(o, "queued", l->queued);
    ctl_json_set_int(o, "delayed", l->delayed);
    ctl_json_set_int(o, "running", l->running);
    ctl_json_set_int(o, "queued_work_us", l->queued_work_us);
    ctl_json_set_int(o, "est_delay_us", l->est_delay_us);
    ctl_json_set_real(o, "pressure", l->pressure);
    ctl_json_set_bool(o, "shed", l->shed);
    ctl_json_set_int(o, "wait_samples", l->wait_samples);
    ctl_json_set_int(o, "wait_p50_us", l->wait_p50_us);
    ctl_json_set_int(o, "wait_p90_us", l->wait_p90_us);
    ctl_json_set_int(o, "wait_p99_us", l->wait_p99_us);
    ctl_json_set_int(o, "wait_max_us", l->wait_max_us);
    ctl_json_set_int(o, "admitted", l->admitted);
    ctl_json_set_int(o, "rejected_full", l->rejected_full);
    ctl_json_set_int(o, "rejected_deadline", l->rejected_deadline);
    ctl_json_set_int(o, "rejected_shed", l->rejected_shed);
    ctl_json_set_int(o, "expired", l->expired);
    ctl_json_set_int(o, "dispatched", l->dispatched);
    ctl_json_set_int(o, "completed", l->completed);
    ctl_json_set_int(o, "failed", l->failed);
    ctl_json_set_int(o, "cancelled", l->cancelled);
    ctl_json_set_int(o, "preempted", l->preempted);
    return o;
}

int ctl_cmd_lanes(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("lanes ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_lane_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_lanes(ctl->client, &l, &err) < 0)
        return ctl_call_failed(ctl, "lanes", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "default_lane", l->default_lane);
        json_t *schedulers = ctl_json_array();
        ctl_json_set(doc, "schedulers", schedulers);
        for (int i = 0; i < l->n_schedulers; i++) {
            const struct rtx_client_lane_scheduler *s = &l->schedulers[i];
            json_t *item = ctl_json_object();
            ctl_json_append(schedulers, item);
            ctl_json_set_str(item, "device", s->device);
            ctl_json_set_str(item, "kind", s->kind);
            ctl_json_set_int(item, "executors", s->executors);
            ctl_json_set_bool(item, "healthy", s->healthy);
            ctl_json_set_int(item, "running", s->running);
            ctl_json_set_int(item, "brownout_level", s->brownout_level);
            ctl_json_set_int(item, "brownout_entries", s->brownout_entries);
            ctl_json_set_int(item, "brownout_exits", s->brownout_exits);
            ctl_json_set_real(item, "batch_delay_factor", s->batch_delay_factor);
            ctl_json_set_int(item, "cost_keys", s->cost_keys);
        }
        json_t *lanes = ctl_json_array();
        ctl_json_set(doc, "lanes", lanes);
        for (int i = 0; i < l->n_lanes; i++)
            ctl_json_append(lanes, lane_json(&l->lanes[i]));
        ctl_json_print(doc);
    } else {
        static const char *const headers[] = {
            "DEVICE",   "LANE",     "TARGET",   "WEIGHT", "QUEUED",  "RUNNING",   "WAIT_P50",
            "WAIT_P99", "ADMITTED", "REJECTED", "SHED",   "EXPIRED", "COMPLETED", "STATE"};
        struct ctl_table t = {.ncols = 14, .headers = headers};
        for (int i = 0; i < l->n_lanes; i++) {
            const struct rtx_client_lane *x = &l->lanes[i];
            char b1[32], b2[32], b3[32];
            ctl_table_add(&t, "%s", ctl_dash(x->device));
            ctl_table_add(&t, "%s", ctl_dash(x->lane));
            ctl_table_add(&t, "%s", ctl_fmt_us(x->target_p99_us, b1, sizeof b1));
            ctl_table_add(&t, "%d", x->weight);
            ctl_table_add(&t, "%" PRId64 "/%" PRId64, x->queued + x->delayed, x->max_queued);
            ctl_table_add(&t, "%" PRId64, x->running);
            ctl_table_add(&t, "%s",
                          x->wait_samples ? ctl_fmt_us(x->wait_p50_us, b2, sizeof b2) : "-");
            ctl_table_add(&t, "%s",
                          x->wait_samples ? ctl_fmt_us(x->wait_p99_us, b3, sizeof b3) : "-");
            ctl_table_add(&t, "%" PRId64, x->admitted);
            ctl_table_add(&t, "%" PRId64, x->rejected_full + x->rejected_deadline);
            ctl_table_add(&t, "%" PRId64, x->rejected_shed);
            ctl_table_add(&t, "%" PRId64, x->expired);
            ctl_table_add(&t, "%" PRId64, x->completed);
            ctl_table_add(&t, "%s", x->shed ? "shed" : "open");
        }
        ctl_table_print(&t, 0);
        ctl_table_free(&t);
        for (int i = 0; i < l->n_schedulers; i++) {
            const struct rtx_client_lane_scheduler *s = &l->schedulers[i];
            bool infer = strcmp(s->kind, "inference") == 0;
            printf("%s: %d %s%s, %" PRId64 " running, brownout %s (level %d; %" PRId64
                   " entries, %" PRId64 " exits), %" PRId64 " learned cost%s\n",
                   s->device, s->executors, infer ? "model instance" : "executor",
                   s->executors == 1 ? "" : "s", s->running, s->brownout_level ? "on" : "off",
                   s->brownout_level, s->brownout_entries, s->brownout_exits, s->cost_keys,
                   s->cost_keys == 1 ? "" : "s");
        }
        printf("default lane: %s\n", l->default_lane);
    }
    rtx_client_lane_list_free(l);
    return EXIT_OK;
}

int ctl_cmd_health(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("health ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_health *h = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_health(ctl->client, &h, &err) < 0)
        return ctl_call_failed(ctl, "health", &err);
    const char *s = h->status == RTX_CLIENT_SERVING       ? "serving"
                    : h->status == RTX_CLIENT_NOT_SERVING ? "not_serving"
                                                          : "unspecified";
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "status", s);
        ctl_json_set_str(doc, "detail", h->detail);
        ctl_json_print(doc);
    } else {
        printf("%s%s%s\n", s, *h->detail ? ": " : "", h->detail);
    }
    rc = h->status == RTX_CLIENT_SERVING ? EXIT_OK : EXIT_ERROR;
    rtx_client_health_free(h);
    return rc;
}

int ctl_cmd_config(struct ctl *ctl, int argc, char **argv) {
    int rc = no_args("config ", argc, argv);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_config *cfg = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_config(ctl->client, &cfg, &err) < 0)
        return ctl_call_failed(ctl, "config", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_array();
        for (int i = 0; i < cfg->n_settings; i++) {
            const struct rtx_client_setting *s = &cfg->settings[i];
            json_t *item = ctl_json_object();
            ctl_json_append(doc, item);
            ctl_json_set_str(item, "name", s->name);
            ctl_json_set_str(item, "value", s->value);
            ctl_json_set_str(item, "origin", s->origin);
            ctl_json_set_bool(item, "mutable", s->is_mutable);
            ctl_json_set_str(item, "description", s->description);
        }
        ctl_json_print(doc);
    } else {
        static const char *const headers[] = {"SETTING", "VALUE", "ORIGIN", "MUTABLE",
                                              "DESCRIPTION"};
        struct ctl_table t = {.ncols = 5, .headers = headers};
        for (int i = 0; i < cfg->n_settings; i++) {
            const struct rtx_client_setting *s = &cfg->settings[i];
            ctl_table_add(&t, "%s", s->name);
            ctl_table_add(&t, "%s", *s->value ? s->value : "\"\"");
            ctl_table_add(&t, "%s", ctl_dash(s->origin));
            ctl_table_add(&t, "%s", s->is_mutable ? "yes" : "no");
            ctl_table_add(&t, "%s", s->description);
        }
        ctl_table_print(&t, 0);
        ctl_table_free(&t);
    }
    rtx_client_config_free(cfg);
    return EXIT_OK;
}

int ctl_cmd_drain(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "drain ";
    int64_t grace = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = ctl_opt_value(cmd, "--grace-ms", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m == 0) return ctl_usage_error(cmd, "unexpected argument '%s'", argv[i]);
        if (!ctl_parse_i64(v, 0, INT32_MAX, &grace))
            return ctl_usage_error(cmd, "--grace-ms wants milliseconds (0..%d), got '%s'",
                                   INT32_MAX, v);
    }
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_drain_result r;
    struct rtx_client_err err;
    if (rtx_client_drain(ctl->client, (int)grace, &r, &err) < 0)
        return ctl_call_failed(ctl, "drain", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_int(doc, "running", r.running);
        ctl_json_set_int(doc, "queued", r.queued);
        ctl_json_print(doc);
    } else {
        printf("rtxd at %s is draining: %d running job%s may finish", ctl->address, r.running,
               r.running == 1 ? "" : "s");
        if (grace > 0)
            printf(" within %lld ms", (long long)grace);
        else
            printf(" within its drain.grace_ms");
        printf(", %d queued job%s kept for its next start; it exits when done\n", r.queued,
               r.queued == 1 ? "" : "s");
    }
    return EXIT_OK;
}
