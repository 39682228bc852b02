/*
 * jobs.c - rtxctl's job commands (rtx.v1.Jobs): jobs list, show, wait and cancel; and what submit
 * shares with them: a job as JSON, waiting for a job while printing its state changes, and the
 * exit code of a final state.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

/* ------------------------------------------------------------------------------------------
 * Jobs: printing
 * ---------------------------------------------------------------------------------------- */

json_t *ctl_job_json(const struct rtx_client_job *job) {
    json_t *obj = ctl_json_object();
    ctl_json_set_str(obj, "id", job->id);
    ctl_json_set_str(obj, "state", rtx_client_job_state_name(job->state));
    ctl_json_set_str(obj, "reason", job->reason);
    ctl_json_set_str(obj, "lane", job->lane);
    json_t *labels = ctl_json_object();
    ctl_json_set(obj, "labels", labels);
    for (int i = 0; i < job->n_labels; i++)
        ctl_json_set_str(labels, job->labels[i].key, job->labels[i].value);
    ctl_json_set_str(obj, "graph_name", job->graph_name);
    ctl_json_set_str(obj, "idempotency_key", job->idempotency_key);
    ctl_json_set_str(obj, "restart_policy", rtx_client_restart_policy_name(job->restart_policy));
    ctl_json_set_int(obj, "created_unix_ms", job->created_unix_ms);
    ctl_json_set_int(obj, "started_unix_ms", job->started_unix_ms);
    ctl_json_set_int(obj, "finished_unix_ms", job->finished_unix_ms);
    ctl_json_set_int(obj, "deadline_unix_ms", job->deadline_unix_ms);
    ctl_json_set_int(obj, "attempts", job->attempts);
    ctl_json_set_real(obj, "run_ms", job->run_ms);
    ctl_json_set_int(obj, "peak_bytes", job->peak_bytes);
    json_t *outputs = ctl_json_array();
    ctl_json_set(obj, "outputs", outputs);
    for (int i = 0; i < job->n_outputs; i++) {
        const struct rtx_client_output_info *o = &job->outputs[i];
        json_t *item = ctl_json_object();
        ctl_json_append(outputs, item);
        ctl_json_set_str(item, "name", o->name);
        ctl_json_set_str(item, "dtype", rtx_client_dtype_name(o->dtype));
        ctl_json_set(item, "shape", ctl_json_shape(o->ndim, o->dims));
        ctl_json_set_int(item, "bytes", o->bytes);
        ctl_json_set_str(item, "sha256", o->sha256);
    }
    ctl_json_set_bool(obj, "outputs_available", job->outputs_available);
    ctl_json_set_str(obj, "device", job->device);
    ctl_json_set_str(obj, "requested_device", job->requested_device);
    ctl_json_set_str(obj, "exec_mode", job->exec_mode);
    ctl_json_set_bool(obj, "plan_reused", job->plan_reused);
    ctl_json_set_str(obj, "failure_code", job->failure_code);
    return obj;
}

/* "a=b,c=d" into buf. */
static const char *fmt_labels(const struct rtx_client_job *job, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < job->n_labels && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", i ? "," : "", job->labels[i].key,
                              job->labels[i].value);
    return ctl_dash(buf);
}

static void print_job(const struct rtx_client_job *job) {
    char t1[64], t2[64], b[64], l[1024];
    printf("%-16s %s\n", "id:", job->id);
    printf("%-16s %s\n", "state:", rtx_client_job_state_name(job->state));
    if (*job->reason) printf("%-16s %s\n", "reason:", job->reason);
    if (*job->failure_code) printf("%-16s %s\n", "failure code:", job->failure_code);
    printf("%-16s %s\n", "graph:", ctl_dash(job->graph_name));
    printf("%-16s %s\n", "lane:", ctl_dash(job->lane));
    printf("%-16s %s (asked for %s)\n", "device:", ctl_dash(job->device),
           ctl_dash(job->requested_device));
    if (*job->exec_mode)
        printf("%-16s %s%s\n", "execution:", job->exec_mode,
               job->plan_reused ? " (plan reused)" : "");
    printf("%-16s %s\n", "labels:", fmt_labels(job, l, sizeof l));
    printf("%-16s %s\n", "idempotency key:", ctl_dash(job->idempotency_key));
    printf("%-16s %s\n", "restart policy:", rtx_client_restart_policy_name(job->restart_policy));
    printf("%-16s %s\n", "created:", ctl_fmt_time(job->created_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "started:", ctl_fmt_time(job->started_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "finished:", ctl_fmt_time(job->finished_unix_ms, true, t1, sizeof t1));
    printf("%-16s %s\n", "deadline:", ctl_fmt_time(job->deadline_unix_ms, true, t2, sizeof t2));
    printf("%-16s %d\n", "attempts:", job->attempts);
    if (job->attempts > 0) {
        printf("%-16s %.3f ms\n", "run time:", job->run_ms);
        printf("%-16s %s\n", "peak memory:", ctl_fmt_bytes(job->peak_bytes, b, sizeof b));
    }
    if (job->n_outputs == 0) return;
    printf("outputs%s:\n", job->outputs_available ? "" : " (data deleted by retention)");
    static const char *const headers[] = {"NAME", "SHAPE", "BYTES", "SHA256"};
    struct ctl_table t = {.ncols = 4, .headers = headers};
    for (int i = 0; i < job->n_outputs; i++) {
        const struct rtx_client_output_info *o = &job->outputs[i];
        char shape[256];
        ctl_table_add(&t, "%s", o->name);
        ctl_table_add(&t, "%s", ctl_fmt_shape(o->dtype, o->ndim, o->dims, shape, sizeof shape));
        ctl_table_add(&t, "%" PRId64, o->bytes);
        ctl_table_add(&t, "%s", ctl_dash(o->sha256));
    }
    ctl_table_print(&t, 2);
    ctl_table_free(&t);
}

/* The exit code that reflects a job's final state. */
int ctl_state_exit(enum rtx_client_job_state s) {
    switch (s) {
    case RTX_CLIENT_JOB_SUCCEEDED: return EXIT_OK;
    case RTX_CLIENT_JOB_FAILED: return EXIT_FAILED;
    case RTX_CLIENT_JOB_CANCELLED: return EXIT_CANCELLED;
    case RTX_CLIENT_JOB_EXPIRED: return EXIT_EXPIRED;
    default: return EXIT_ERROR;
    }
}

/* What the Wait callback remembers and prints. */
struct watch {
    bool quiet; /* --json: print nothing while waiting */
    enum rtx_client_job_state last;
    bool seen;
};

static void watch_cb(void *ctx, const struct rtx_client_job *job) {
    struct watch *w = ctx;
    if (!w->quiet && (!w->seen || job->state != w->last)) {
        char t[64];
        printf("%s  %s  %s", ctl_fmt_time(ctl_now_unix_ms(), true, t, sizeof t), job->id,
               rtx_client_job_state_name(job->state));
        if (job->state == RTX_CLIENT_JOB_SUCCEEDED)
            printf(" (run %.3f ms, %d output%s)", job->run_ms, job->n_outputs,
                   job->n_outputs == 1 ? "" : "s");
        if (*job->reason) printf(": %s", job->reason);
        putchar('\n');
        fflush(stdout);
    }
    w->last = job->state;
    w->seen = true;
}

/* Waits for job_id (timeout_ms < 0: forever); *out receives the final job. Returns EXIT_OK
 * when the wait ended (whatever the state) or an exit code (message printed). */
int ctl_wait_job(struct ctl *ctl, const char *job_id, int64_t timeout_ms,
                 struct rtx_client_job **out) {
    struct watch w = {.quiet = ctl->json};
    struct rtx_client_err err;
    int rc = rtx_client_wait_job(ctl->client, job_id,
                                 timeout_ms < 0 ? RTX_CLIENT_WAIT_FOREVER : timeout_ms, watch_cb,
                                 &w, out, &err);
    if (rc == RTX_CLIENT_ETIMEDOUT && timeout_ms >= 0) {
        ctl_msg("job %s has not finished after %.3f s (state %s)", job_id,
                (double)timeout_ms / 1000.0,
                w.seen ? rtx_client_job_state_name(w.last) : "unknown");
        return EXIT_TIMEOUT;
    }
    if (rc < 0) {
        char what[160];
        snprintf(what, sizeof what, "wait for job %s", job_id);
        return ctl_call_failed(ctl, what, &err);
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Commands: jobs
 * ---------------------------------------------------------------------------------------- */

/* Parses "JOB" and nothing else (or the options a caller handles: returns 0 for those). */
static int job_arg(const char *cmd, int argc, char **argv, const char **job_id) {
    for (int i = 0; i < argc; i++) {
        int p = ctl_positional(cmd, argv[i], job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!*job_id) return ctl_usage_error(cmd, "no job id given");
    return EXIT_OK;
}

int ctl_cmd_jobs_show(struct ctl *ctl, int argc, char **argv) {
    const char *job_id = NULL;
    int rc = job_arg("jobs show ", argc, argv, &job_id);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_job(ctl->client, job_id, &job, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "job %s", job_id);
        return ctl_call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        ctl_json_print(ctl_job_json(job));
    } else {
        print_job(job);
    }
    rtx_client_job_free(job);
    return EXIT_OK;
}

int ctl_cmd_jobs_cancel(struct ctl *ctl, int argc, char **argv) {
    const char *job_id = NULL;
    int rc = job_arg("jobs cancel ", argc, argv, &job_id);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    if (rtx_client_cancel_job(ctl->client, job_id, &job, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "cancel job %s", job_id);
        return ctl_call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        ctl_json_print(ctl_job_json(job));
    } else if (job->state == RTX_CLIENT_JOB_CANCELLED) {
        printf("%s cancelled\n", job->id);
    } else if (rtx_client_job_state_is_terminal(job->state)) {
        printf("%s had already ended (%s): nothing to cancel\n", job->id,
               rtx_client_job_state_name(job->state));
    } else {
        printf("%s is %s: cancel requested, it stops at its next op (rtxctl jobs wait %s)\n",
               job->id, rtx_client_job_state_name(job->state), job->id);
    }
    rtx_client_job_free(job);
    return EXIT_OK;
}

int ctl_cmd_jobs_wait(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "jobs wait ", *job_id = NULL;
    int64_t timeout_s = -1;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = ctl_opt_value(cmd, "--timeout-s", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m > 0) {
            if (!ctl_parse_i64(v, 1, 86400 * 365, &timeout_s))
                return ctl_usage_error(cmd, "--timeout-s wants seconds (1 or more), got '%s'", v);
            continue;
        }
        int p = ctl_positional(cmd, argv[i], &job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!job_id) return ctl_usage_error(cmd, "no job id given");
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_job *job = NULL;
    rc = ctl_wait_job(ctl, job_id, timeout_s < 0 ? -1 : timeout_s * 1000, &job);
    if (rc != EXIT_OK) return rc;
    if (ctl->json) {
        ctl_json_print(ctl_job_json(job));
    }
    rc = ctl_state_exit(job->state);
    rtx_client_job_free(job);
    return rc;
}

int ctl_cmd_jobs_list(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "jobs list ";
    enum rtx_client_job_state states[64];
    int n_states = 0;
    struct ctl_labels labels = {0};
    int64_t since_ms = -1, after_ms = -1, limit = 0;
    const char *token = NULL;
    bool all = false;
    int rc = EXIT_OK;
    for (int i = 0; i < argc && rc == EXIT_OK; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (strcmp(a, "--all") == 0) {
            all = true;
        } else if ((m = ctl_opt_value(cmd, "--state", argc, argv, &i, &v)) != 0) {
            if (m < 0) {
                rc = EXIT_USAGE;
                break;
            }
            char *list = ctl_strdup(v), *save = NULL;
            for (char *s = strtok_r(list, ",", &save); s && rc == EXIT_OK;
                 s = strtok_r(NULL, ",", &save)) {
                enum rtx_client_job_state st;
                if (rtx_client_job_state_from_name(s, &st) < 0 || st == RTX_CLIENT_JOB_UNSPECIFIED)
                    rc = ctl_usage_error(cmd,
                                         "unknown state '%s' (queued, running, succeeded, "
                                         "failed, cancelled, expired)",
                                         s);
                else if (n_states == (int)(sizeof states / sizeof states[0]))
                    rc = ctl_usage_error(cmd, "too many --state values");
                else
                    states[n_states++] = st;
            }
            free(list);
        } else if ((m = ctl_opt_value(cmd, "--label", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!ctl_labels_add(&labels, v))
                rc = ctl_usage_error(cmd, "--label wants KEY=VALUE, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--since", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!ctl_parse_duration_ms(v, &since_ms))
                rc = ctl_usage_error(
                    cmd, "--since wants a duration like 90s, 15m, 2h, 7d, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--after", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!ctl_parse_i64(v, 0, INT64_MAX, &after_ms))
                rc = ctl_usage_error(cmd, "--after wants unix milliseconds, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--limit", argc, argv, &i, &v)) != 0) {
            if (m < 0)
                rc = EXIT_USAGE;
            else if (!ctl_parse_i64(v, 1, INT32_MAX, &limit))
                rc = ctl_usage_error(cmd, "--limit wants a positive number, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--page-token", argc, argv, &i, &v)) != 0) {
            if (m < 0) rc = EXIT_USAGE;
            token = v;
        } else {
            rc = ctl_usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (rc == EXIT_OK && since_ms >= 0 && after_ms >= 0)
        rc = ctl_usage_error(cmd, "--since and --after exclude each other");
    if (rc == EXIT_OK) rc = ctl_connect(ctl);
    if (rc != EXIT_OK) {
        ctl_labels_free(&labels);
        return rc;
    }
    struct rtx_client_list_filter f = {
        .states = states,
        .n_states = n_states,
        .labels = labels.v,
        .n_labels = labels.n,
        .created_after_unix_ms = since_ms >= 0 ? ctl_now_unix_ms() - since_ms : after_ms,
    };
    if (f.created_after_unix_ms < 0) f.created_after_unix_ms = 0;
    struct rtx_client_job_list **pages = NULL;
    int n_pages = 0;
    int64_t got = 0;
    const char *next = token ? token : "";
    for (;;) {
        int64_t want = limit ? limit - got : 0;
        f.page_size = want > 1000 ? 1000 : want > 0 ? (int)want : all ? 1000 : 0;
        struct rtx_client_job_list *page = NULL;
        struct rtx_client_err err;
        if (rtx_client_list_jobs(ctl->client, &f, next, &page, &err) < 0) {
            rc = ctl_call_failed(ctl, "list jobs", &err);
            break;
        }
        pages = ctl_realloc(pages, sizeof *pages * (size_t)(n_pages + 1));
        pages[n_pages++] = page;
        got += page->n_jobs;
        next = page->next_page_token;
        if (!*next || (limit && got >= limit) || (!all && !limit) || page->n_jobs == 0) break;
    }
    if (rc == EXIT_OK && ctl->json) {
        json_t *doc = ctl_json_object();
        json_t *jobs = ctl_json_array();
        ctl_json_set(doc, "jobs", jobs);
        for (int p = 0; p < n_pages; p++)
            for (int i = 0; i < pages[p]->n_jobs; i++)
                ctl_json_append(jobs, ctl_job_json(&pages[p]->jobs[i]));
        ctl_json_set_str(doc, "next_page_token", next);
        ctl_json_print(doc);
    } else if (rc == EXIT_OK) {
        static const char *const headers[] = {"ID",     "STATE", "LANE", "GRAPH", "CREATED (UTC)",
                                              "RUN MS", "LABELS"};
        struct ctl_table t = {.ncols = 7, .headers = headers};
        for (int p = 0; p < n_pages; p++) {
            for (int i = 0; i < pages[p]->n_jobs; i++) {
                const struct rtx_client_job *job = &pages[p]->jobs[i];
                char tm[64], l[1024];
                ctl_table_add(&t, "%s", job->id);
                ctl_table_add(&t, "%s", rtx_client_job_state_name(job->state));
                ctl_table_add(&t, "%s", ctl_dash(job->lane));
                ctl_table_add(&t, "%s", ctl_dash(job->graph_name));
                ctl_table_add(&t, "%s", ctl_fmt_time(job->created_unix_ms, false, tm, sizeof tm));
                if (job->state == RTX_CLIENT_JOB_SUCCEEDED)
                    ctl_table_add(&t, "%.3f", job->run_ms);
                else
                    ctl_table_add(&t, "-");
                ctl_table_add(&t, "%s", fmt_labels(job, l, sizeof l));
            }
        }
        if (got == 0)
            printf("no jobs\n");
        else
            ctl_table_print(&t, 0);
        ctl_table_free(&t);
        if (*next) fprintf(stderr, "more jobs: rtxctl jobs list ... --page-token %s\n", next);
    }
    for (int p = 0; p < n_pages; p++)
        rtx_client_job_list_free(pages[p]);
    free(pages);
    ctl_labels_free(&labels);
    return rc;
}
