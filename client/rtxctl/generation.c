/*
 * generation.c - rtxctl generation: the generation engines of the daemon's ready generative
 * models (rtx.v1.Admin/Generation): lanes, KV cache, prefix cache, tokens, requests and
 * latency percentiles, once or every --watch interval.
 *
 * DESIGN
 * The daemon reports counters since each engine started; rates (tokens per second and the
 * like) need two samples, so they appear from the second sample of --watch on, computed over
 * the time between the two calls on this side's monotonic clock. A model whose version
 * changed, or whose counters went back (a reload), gets no rate for that interval.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/rtxctl/rtxctl-impl.h"

#define BAR_WIDTH 30
#define MAX_WATCH_MS 86400000 /* one day */

/* Rates of one model over the interval between two samples, per second. */
struct gen_rates {
    bool valid;
    double generation_tokens, prompt_tokens, requests, steps;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The rates of cur against its sample in prev (same name and version), dt seconds apart. */
static struct gen_rates rates_of(const struct rtx_client_gen_model *cur,
                                 const struct rtx_client_generation *prev, double dt) {
    struct gen_rates r = {0};
    for (int i = 0; prev && dt > 0 && i < prev->n_models; i++) {
        const struct rtx_client_gen_model *p = &prev->models[i];
        if (strcmp(p->name, cur->name) != 0 || p->version != cur->version) continue;
        int64_t req_p = p->requests_finished + p->requests_canceled + p->requests_failed;
        int64_t req_c = cur->requests_finished + cur->requests_canceled + cur->requests_failed;
        if (cur->generation_tokens < p->generation_tokens ||
            cur->prompt_tokens < p->prompt_tokens || req_c < req_p || cur->steps < p->steps)
            return r; /* counters went back: another engine */
        r.valid = true;
        r.generation_tokens = (double)(cur->generation_tokens - p->generation_tokens) / dt;
        r.prompt_tokens = (double)(cur->prompt_tokens - p->prompt_tokens) / dt;
        r.requests = (double)(req_c - req_p) / dt;
        r.steps = (double)(cur->steps - p->steps) / dt;
    }
    return r;
}

static double kv_usage(const struct rtx_client_gen_model *m) {
    return m->kv_blocks_total > 0 ? (double)m->kv_blocks_used / (double)m->kv_blocks_total : 0.0;
}

/* ------------------------------------------------------------------------------------------
 * JSON
 * ---------------------------------------------------------------------------------------- */

static json_t *latency_json(const struct rtx_client_gen_latency *l) {
    json_t *o = ctl_json_object();
    ctl_json_set_int(o, "count", l->count);
    ctl_json_set_real(o, "sum_s", l->sum_s);
    ctl_json_set_real(o, "mean_s", l->mean_s);
    ctl_json_set_real(o, "p50_s", l->p50_s);
    ctl_json_set_real(o, "p99_s", l->p99_s);
    return o;
}

static json_t *model_json(const struct rtx_client_gen_model *m, const struct gen_rates *r) {
    json_t *o = ctl_json_object();
    ctl_json_set_str(o, "name", m->name);
    ctl_json_set_int(o, "version", m->version);
    ctl_json_set_str(o, "device", m->device);
    ctl_json_set_str(o, "arch", m->arch);
    ctl_json_set_int(o, "context_length", m->context_length);
    json_t *lanes = ctl_json_array();
    ctl_json_set(o, "lanes", lanes);
    for (int i = 0; i < m->n_lanes; i++) {
        json_t *l = ctl_json_object();
        ctl_json_append(lanes, l);
        ctl_json_set_str(l, "lane", m->lanes[i].lane);
        ctl_json_set_int(l, "running", m->lanes[i].running);
        ctl_json_set_int(l, "waiting", m->lanes[i].waiting);
        ctl_json_set_int(l, "preempted", m->lanes[i].preempted);
        ctl_json_set_int(l, "refused", m->lanes[i].refused);
    }
    ctl_json_set_int(o, "kv_blocks_total", m->kv_blocks_total);
    ctl_json_set_int(o, "kv_blocks_used", m->kv_blocks_used);
    ctl_json_set_int(o, "kv_blocks_cached", m->kv_blocks_cached);
    ctl_json_set_real(o, "kv_usage", kv_usage(m));
    ctl_json_set_int(o, "block_size", m->block_size);
    ctl_json_set_int(o, "kv_cache_bytes", m->kv_cache_bytes);
    ctl_json_set_int(o, "weight_bytes", m->weight_bytes);
    ctl_json_set_int(o, "prefix_queries", m->prefix_queries);
    ctl_json_set_int(o, "prefix_hits", m->prefix_hits);
    ctl_json_set_real(o, "prefix_hit_rate", m->prefix_hit_rate);
    ctl_json_set_int(o, "kv_evictions", m->kv_evictions);
    ctl_json_set_int(o, "prompt_tokens", m->prompt_tokens);
    ctl_json_set_int(o, "generation_tokens", m->generation_tokens);
    ctl_json_set_int(o, "requests_finished", m->requests_finished);
    ctl_json_set_int(o, "requests_canceled", m->requests_canceled);
    ctl_json_set_int(o, "requests_failed", m->requests_failed);
    ctl_json_set_int(o, "steps", m->steps);
    ctl_json_set(o, "ttft", latency_json(&m->ttft));
    ctl_json_set(o, "itl", latency_json(&m->itl));
    ctl_json_set(o, "tpot", latency_json(&m->tpot));
    ctl_json_set(o, "e2e", latency_json(&m->e2e));
    if (r) {
        if (!r->valid) {
            ctl_json_set(o, "rates", json_null());
        } else {
            json_t *rates = ctl_json_object();
            ctl_json_set(o, "rates", rates);
            ctl_json_set_real(rates, "generation_tokens_per_s", r->generation_tokens);
            ctl_json_set_real(rates, "prompt_tokens_per_s", r->prompt_tokens);
            ctl_json_set_real(rates, "requests_per_s", r->requests);
            ctl_json_set_real(rates, "steps_per_s", r->steps);
        }
    }
    return o;
}

/* One sample as one JSON line; with --watch every model has "rates" (null on the first). */
static void print_json(const struct rtx_client_generation *g,
                       const struct rtx_client_generation *prev, double dt, bool watch) {
    json_t *doc = ctl_json_object();
    if (watch) {
        ctl_json_set_int(doc, "time_unix_ms", ctl_now_unix_ms());
        ctl_json_set_real(doc, "interval_s", prev ? dt : 0.0);
    }
    json_t *models = ctl_json_array();
    ctl_json_set(doc, "models", models);
    for (int i = 0; i < g->n_models; i++) {
        struct gen_rates r = rates_of(&g->models[i], prev, dt);
        ctl_json_append(models, model_json(&g->models[i], watch ? &r : NULL));
    }
    ctl_json_print(doc);
    fflush(stdout); /* each sample as it comes */
}

/* ------------------------------------------------------------------------------------------
 * Text
 * ---------------------------------------------------------------------------------------- */

/* "[###+++.....]": blocks used (#), cached (+) and free (.) of the pool. */
static void kv_bar(const struct rtx_client_gen_model *m, char *buf) {
    int64_t total = m->kv_blocks_total > 0 ? m->kv_blocks_total : 1;
    int used = (int)((m->kv_blocks_used * BAR_WIDTH + total - 1) / total);
    int cached = (int)((m->kv_blocks_cached * BAR_WIDTH + total - 1) / total);
    if (used > BAR_WIDTH) used = BAR_WIDTH;
    if (cached > BAR_WIDTH - used) cached = BAR_WIDTH - used;
    buf[0] = '[';
    for (int i = 0; i < BAR_WIDTH; i++)
        buf[1 + i] = i < used ? '#' : i < used + cached ? '+' : '.';
    buf[1 + BAR_WIDTH] = ']';
    buf[2 + BAR_WIDTH] = '\0';
}

static void latency_row(struct ctl_table *t, const char *name,
                        const struct rtx_client_gen_latency *l) {
    char b1[32], b2[32], b3[32];
    ctl_table_add(t, "%s", name);
    ctl_table_add(t, "%" PRId64, l->count);
    if (l->count == 0) {
        for (int i = 0; i < 3; i++)
            ctl_table_add(t, "-");
        return;
    }
    ctl_table_add(t, "%s", ctl_fmt_us((int64_t)(l->mean_s * 1e6 + 0.5), b1, sizeof b1));
    ctl_table_add(t, "%s", ctl_fmt_us((int64_t)(l->p50_s * 1e6 + 0.5), b2, sizeof b2));
    ctl_table_add(t, "%s", ctl_fmt_us((int64_t)(l->p99_s * 1e6 + 0.5), b3, sizeof b3));
}

static void print_model(const struct rtx_client_gen_model *m, const struct gen_rates *r) {
    char bar[BAR_WIDTH + 3], b1[32], b2[32];
    printf("%s  version %" PRId64 ", %s on %s, context %d tokens\n", m->name, m->version,
           ctl_dash(m->arch), ctl_dash(m->device), m->context_length);
    kv_bar(m, bar);
    printf("  %-9s %s %" PRId64 "/%" PRId64 " blocks used (%.1f%%), %" PRId64
           " cached; %d tokens a block, %s\n",
           "kv cache", bar, m->kv_blocks_used, m->kv_blocks_total, 100.0 * kv_usage(m),
           m->kv_blocks_cached, m->block_size, ctl_fmt_bytes(m->kv_cache_bytes, b1, sizeof b1));
    printf("  %-9s %s\n", "weights", ctl_fmt_bytes(m->weight_bytes, b2, sizeof b2));
    if (m->prefix_queries > 0)
        printf("  %-9s %.1f%% of %" PRId64 " full blocks found, %" PRId64 " evictions\n", "prefix",
               100.0 * m->prefix_hit_rate, m->prefix_queries, m->kv_evictions);
    else
        printf("  %-9s no full block looked up yet, %" PRId64 " evictions\n", "prefix",
               m->kv_evictions);
    printf("  %-9s %" PRId64 " prompt, %" PRId64 " generated", "tokens", m->prompt_tokens,
           m->generation_tokens);
    if (r && r->valid)
        printf("; %.1f tok/s generated, %.1f tok/s prompt, %.1f steps/s", r->generation_tokens,
               r->prompt_tokens, r->steps);
    printf("\n  %-9s %" PRId64 " finished, %" PRId64 " canceled, %" PRId64 " failed; %" PRId64
           " steps\n",
           "requests", m->requests_finished, m->requests_canceled, m->requests_failed, m->steps);
    static const char *const lane_headers[] = {"LANE", "RUNNING", "WAITING", "PREEMPTED",
                                               "REFUSED"};
    struct ctl_table t = {.ncols = 5, .headers = lane_headers};
    for (int i = 0; i < m->n_lanes; i++) {
        ctl_table_add(&t, "%s", ctl_dash(m->lanes[i].lane));
        ctl_table_add(&t, "%d", m->lanes[i].running);
        ctl_table_add(&t, "%d", m->lanes[i].waiting);
        ctl_table_add(&t, "%" PRId64, m->lanes[i].preempted);
        ctl_table_add(&t, "%" PRId64, m->lanes[i].refused);
    }
    ctl_table_print(&t, 2);
    ctl_table_free(&t);
    static const char *const lat_headers[] = {"LATENCY", "COUNT", "MEAN", "P50", "P99"};
    struct ctl_table lt = {.ncols = 5, .headers = lat_headers};
    latency_row(&lt, "ttft", &m->ttft);
    latency_row(&lt, "itl", &m->itl);
    latency_row(&lt, "tpot", &m->tpot);
    latency_row(&lt, "e2e", &m->e2e);
    ctl_table_print(&lt, 2);
    ctl_table_free(&lt);
}

static void print_text(struct ctl *ctl, const struct rtx_client_generation *g,
                       const struct rtx_client_generation *prev, double dt, int64_t watch_ms) {
    if (watch_ms > 0) {
        char when[64], every[32];
        if (prev && isatty(STDOUT_FILENO))
            fputs("\033[H\033[2J", stdout); /* a live view: clear the terminal */
        else if (prev)
            putchar('\n');
        printf("rtxd at %s, %s UTC, every %s\n\n", ctl->address,
               ctl_fmt_time(ctl_now_unix_ms(), false, when, sizeof when),
               ctl_fmt_us(watch_ms * 1000, every, sizeof every));
    }
    if (g->n_models == 0) printf("no generative model is ready\n");
    for (int i = 0; i < g->n_models; i++) {
        struct gen_rates r = rates_of(&g->models[i], prev, dt);
        if (i > 0) putchar('\n');
        print_model(&g->models[i], &r);
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------- */

struct gen_args {
    const char *model;
    int64_t watch_ms; /* 0: one sample */
    int64_t count;    /* samples with --watch; 0: until interrupted */
};

static int parse_args(int argc, char **argv, struct gen_args *a) {
    const char *cmd = "generation ";
    bool has_count = false;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m;
        if ((m = ctl_opt_value(cmd, "--watch", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_duration_ms(v, &a->watch_ms) || a->watch_ms < 1 ||
                a->watch_ms > MAX_WATCH_MS)
                return ctl_usage_error(cmd,
                                       "--watch wants an interval of 1ms to 1d (\"2\" is 2 s, "
                                       "\"500ms\"), got '%s'",
                                       v);
            continue;
        }
        if ((m = ctl_opt_value(cmd, "--count", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, INT32_MAX, &a->count))
                return ctl_usage_error(cmd, "--count wants a positive integer, got '%s'", v);
            has_count = true;
            continue;
        }
        int p = ctl_positional(cmd, argv[i], &a->model, "model name");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (has_count && a->watch_ms == 0) return ctl_usage_error(cmd, "--count needs --watch");
    return EXIT_OK;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int ctl_cmd_generation(struct ctl *ctl, int argc, char **argv) {
    struct gen_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_generation *prev = NULL;
    double prev_t = 0;
    for (int64_t n = 0; rc == EXIT_OK && (a.watch_ms == 0 ? n < 1 : a.count == 0 || n < a.count);
         n++) {
        if (n > 0) sleep_ms(a.watch_ms);
        struct rtx_client_generation *g = NULL;
        struct rtx_client_err err;
        if (rtx_client_generation(ctl->client, a.model, &g, &err) < 0) {
            char what[200];
            snprintf(what, sizeof what, "generation%s%s", a.model ? " of model " : "",
                     a.model ? a.model : "");
            rc = ctl_call_failed(ctl, what, &err);
            break;
        }
        double t = now_s(), dt = prev ? t - prev_t : 0.0;
        if (ctl->json)
            print_json(g, prev, dt, a.watch_ms > 0);
        else
            print_text(ctl, g, prev, dt, a.watch_ms);
        rtx_client_generation_free(prev);
        prev = g;
        prev_t = t;
    }
    rtx_client_generation_free(prev);
    return rc;
}
