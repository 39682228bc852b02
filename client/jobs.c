/*
 * jobs.c - librtx calls of the rtx.v1.Jobs service: Submit, Get, Wait, Cancel, List and
 * GetOutputs, and the conversion of rtx.v1.Job messages into struct rtx_client_job.
 *
 * DESIGN
 * Requests are built on the stack and borrow the caller's strings, tensors and the graph's
 * message, so the only copy of a submitted tensor is the one gRPC sends. Results sit in boxes
 * (client-impl.h) that keep the decoded response alive; the public structs point into it.
 * Output tensors take their name and data from the decoded response instead (the pointers
 * are moved out of the message before it is freed), so each tensor owns what it holds.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client-impl.h"

static const char *const state_names[RTX_CLIENT_JOB_STATE_COUNT] = {
#define RTX_CLIENT_JOB_STATE_NAME(name, str) [RTX_CLIENT_JOB_##name] = str,
    RTX_CLIENT_JOB_STATE_MAP(RTX_CLIENT_JOB_STATE_NAME)
#undef RTX_CLIENT_JOB_STATE_NAME
};

#define RTX_CLIENT_JOB_STATE_SAME(name, str)                                                    \
    static_assert((int)RTX_CLIENT_JOB_##name == (int)RTX__V1__JOB_STATE__JOB_STATE_##name,      \
                  "job state " str " matches rtx.v1.JobState");
RTX_CLIENT_JOB_STATE_MAP(RTX_CLIENT_JOB_STATE_SAME)
#undef RTX_CLIENT_JOB_STATE_SAME

static const char *const policy_names[RTX_CLIENT_RESTART_COUNT] = {
    [RTX_CLIENT_RESTART_DEFAULT] = "default",
    [RTX_CLIENT_RESTART_RERUN] = "rerun",
    [RTX_CLIENT_RESTART_FAIL] = "fail",
};
static_assert((int)RTX_CLIENT_RESTART_DEFAULT ==
                      (int)RTX__V1__RESTART_POLICY__RESTART_POLICY_UNSPECIFIED &&
                  (int)RTX_CLIENT_RESTART_RERUN ==
                      (int)RTX__V1__RESTART_POLICY__RESTART_POLICY_RERUN &&
                  (int)RTX_CLIENT_RESTART_FAIL ==
                      (int)RTX__V1__RESTART_POLICY__RESTART_POLICY_FAIL,
              "restart policies match rtx.v1.RestartPolicy");

const char *rtx_client_job_state_name(enum rtx_client_job_state s) {
    return (int)s >= 0 && s < RTX_CLIENT_JOB_STATE_COUNT ? state_names[s] : "?";
}

int rtx_client_job_state_from_name(const char *name, enum rtx_client_job_state *out) {
    for (int s = 0; name && s < RTX_CLIENT_JOB_STATE_COUNT; s++) {
        if (strcmp(name, state_names[s]) == 0) {
            *out = (enum rtx_client_job_state)s;
            return 0;
        }
    }
    return RTX_CLIENT_EINVAL;
}

bool rtx_client_job_state_is_terminal(enum rtx_client_job_state s) {
    return s == RTX_CLIENT_JOB_SUCCEEDED || s == RTX_CLIENT_JOB_FAILED ||
           s == RTX_CLIENT_JOB_CANCELLED || s == RTX_CLIENT_JOB_EXPIRED;
}

const char *rtx_client_restart_policy_name(enum rtx_client_restart_policy p) {
    return (int)p >= 0 && p < RTX_CLIENT_RESTART_COUNT ? policy_names[p] : "?";
}

int rtx_client_restart_policy_from_name(const char *name, enum rtx_client_restart_policy *out) {
    for (int p = 0; name && p < RTX_CLIENT_RESTART_COUNT; p++) {
        if (strcmp(name, policy_names[p]) == 0) {
            *out = (enum rtx_client_restart_policy)p;
            return 0;
        }
    }
    return RTX_CLIENT_EINVAL;
}

/* ------------------------------------------------------------------------------------------
 * Job conversion and boxes
 * ---------------------------------------------------------------------------------------- */

static int oom(struct rtx_client_err *err) {
    return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
}

int rtx__client_job_fill(struct rtx_client_job *dst, const Rtx__V1__Job *src,
                         struct rtx_client_label *labels, struct rtx_client_output_info *outputs,
                         struct rtx_client_err *err) {
    memset(dst, 0, sizeof *dst);
    dst->id = rtx__client_str(src->id);
    dst->state = (enum rtx_client_job_state)src->state;
    dst->reason = rtx__client_str(src->reason);
    dst->lane = rtx__client_str(src->lane);
    dst->graph_name = rtx__client_str(src->graph_name);
    dst->idempotency_key = rtx__client_str(src->idempotency_key);
    dst->restart_policy = (enum rtx_client_restart_policy)src->restart_policy;
    dst->created_unix_ms = src->created_unix_ms;
    dst->started_unix_ms = src->started_unix_ms;
    dst->finished_unix_ms = src->finished_unix_ms;
    dst->deadline_unix_ms = src->deadline_unix_ms;
    dst->attempts = src->attempts;
    dst->run_ms = src->run_ms;
    dst->peak_bytes = src->peak_bytes;
    dst->outputs_available = src->outputs_available;
    dst->device = rtx__client_str(src->device);
    dst->requested_device = rtx__client_str(src->requested_device);
    dst->exec_mode = rtx__client_str(src->exec_mode);
    dst->plan_reused = src->plan_reused;
    dst->failure_code = rtx__client_str(src->failure_code);
    for (size_t i = 0; i < src->n_labels; i++) {
        labels[i].key = rtx__client_str(src->labels[i]->key);
        labels[i].value = rtx__client_str(src->labels[i]->value);
    }
    for (size_t i = 0; i < src->n_outputs; i++) {
        const Rtx__V1__OutputInfo *o = src->outputs[i];
        if (o->n_dims > RTX_CLIENT_MAX_DIMS)
            return rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                                   "job %s: output %s has %zu dimensions (at most %d)", dst->id,
                                   rtx__client_str(o->name), o->n_dims, RTX_CLIENT_MAX_DIMS);
        struct rtx_client_output_info *oi = &outputs[i];
        memset(oi, 0, sizeof *oi);
        oi->name = rtx__client_str(o->name);
        oi->dtype = (enum rtx_client_dtype)o->dtype;
        oi->ndim = (int)o->n_dims;
        for (size_t d = 0; d < o->n_dims; d++)
            oi->dims[d] = o->dims[d];
        oi->bytes = o->bytes;
        oi->sha256 = rtx__client_str(o->sha256);
    }
    dst->n_labels = (int)src->n_labels;
    dst->labels = src->n_labels ? labels : NULL;
    dst->n_outputs = (int)src->n_outputs;
    dst->outputs = src->n_outputs ? outputs : NULL;
    return 0;
}

/* A single job handed to the caller: the message its strings point into and its arrays. */
struct job_box {
    Rtx__V1__Job *pb;
    struct rtx_client_label *labels;
    struct rtx_client_output_info *outputs;
    struct rtx_client_job job;
};

static struct job_box *job_box_of(struct rtx_client_job *job) {
    return (struct job_box *)(void *)((char *)job - offsetof(struct job_box, job));
}

static void job_box_free(struct job_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__job__free_unpacked(b->pb, NULL);
    free(b->labels);
    free(b->outputs);
    free(b);
}

void rtx_client_job_free(struct rtx_client_job *job) {
    if (job) job_box_free(job_box_of(job));
}

/* Boxes a decoded job (taking ownership of pb, which is freed on failure). */
static int job_box_new(Rtx__V1__Job *pb, struct rtx_client_job **out,
                       struct rtx_client_err *err) {
    struct job_box *b = calloc(1, sizeof *b);
    if (!b) {
        rtx__v1__job__free_unpacked(pb, NULL);
        return oom(err);
    }
    b->pb = pb;
    b->labels = calloc(pb->n_labels ? pb->n_labels : 1, sizeof *b->labels);
    b->outputs = calloc(pb->n_outputs ? pb->n_outputs : 1, sizeof *b->outputs);
    if (!b->labels || !b->outputs) {
        job_box_free(b);
        return oom(err);
    }
    int rc = rtx__client_job_fill(&b->job, pb, b->labels, b->outputs, err);
    if (rc < 0) {
        job_box_free(b);
        return rc;
    }
    *out = &b->job;
    return 0;
}

static int check_id(const char *job_id, struct rtx_client_err *err) {
    if (!job_id || !*job_id) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "empty job id");
    return 0;
}

/* A unary call on one job id whose response is an rtx.v1.Job (Get, Cancel). */
static int job_call(struct rtx_client *c, enum rtx__client_method m, const char *job_id,
                    struct rtx_client_job **out, struct rtx_client_err *err) {
    if (out) *out = NULL;
    int rc = check_id(job_id, err);
    if (rc < 0) return rc;
    ProtobufCMessage *resp = NULL;
    if (m == RTX__CLIENT_M_GET_JOB) {
        Rtx__V1__GetJobRequest req = RTX__V1__GET_JOB_REQUEST__INIT;
        req.job_id = (char *)job_id;
        rc = rtx__client_unary(c, m, &req.base, &resp, err);
    } else {
        Rtx__V1__CancelJobRequest req = RTX__V1__CANCEL_JOB_REQUEST__INIT;
        req.job_id = (char *)job_id;
        rc = rtx__client_unary(c, m, &req.base, &resp, err);
    }
    if (rc < 0) return rc;
    if (!out) {
        protobuf_c_message_free_unpacked(resp, NULL);
        return 0;
    }
    return job_box_new((Rtx__V1__Job *)resp, out, err);
}

/* ------------------------------------------------------------------------------------------
 * Calls
 * ---------------------------------------------------------------------------------------- */

/* Submits a graph (g) or an ONNX model (onnx, onnx_len bytes). */
static int submit(struct rtx_client *c, const struct rtx_client_graph *g, const void *onnx,
                  size_t onnx_len, const struct rtx_client_tensor *inputs, int n_inputs,
                  const struct rtx_client_submit_options *opt,
                  char job_id[RTX_CLIENT_JOB_ID_MAX], bool *deduplicated,
                  struct rtx_client_err *err) {
    if (job_id) job_id[0] = '\0';
    if (deduplicated) *deduplicated = false;
    if (!c || (!g && (!onnx || !onnx_len)) || !job_id)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                               "no client, graph (or ONNX model) or job id buffer");
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "bad input list");
    static const struct rtx_client_submit_options no_options;
    if (!opt) opt = &no_options;
    if (opt->n_labels < 0 || (opt->n_labels > 0 && !opt->labels))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "bad label list");
    if ((int)opt->restart_policy < 0 || opt->restart_policy >= RTX_CLIENT_RESTART_COUNT)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "invalid restart policy %d",
                               (int)opt->restart_policy);
    for (int i = 0; i < n_inputs; i++) {
        char what[160];
        snprintf(what, sizeof what, "input %d (%s)", i, rtx__client_str(inputs[i].name));
        if (!inputs[i].name || !*inputs[i].name)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: no name", what);
        int rc = rtx__client_tensor_check(&inputs[i], what, err);
        if (rc < 0) return rc;
    }
    for (int i = 0; i < opt->n_labels; i++)
        if (!opt->labels[i].key || !*opt->labels[i].key || !opt->labels[i].value)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "label %d: empty key or no value",
                                   i);

    size_t ni = (size_t)n_inputs, nl = (size_t)opt->n_labels;
    Rtx__V1__Tensor *tensors = calloc(ni ? ni : 1, sizeof *tensors);
    Rtx__V1__Tensor **tensor_ptrs = calloc(ni ? ni : 1, sizeof *tensor_ptrs);
    Rtx__V1__Label *labels = calloc(nl ? nl : 1, sizeof *labels);
    Rtx__V1__Label **label_ptrs = calloc(nl ? nl : 1, sizeof *label_ptrs);
    int rc = 0;
    if (!tensors || !tensor_ptrs || !labels || !label_ptrs) {
        rc = oom(err);
        goto out;
    }
    for (size_t i = 0; i < ni; i++) {
        rtx__client_tensor_borrow(&inputs[i], &tensors[i]);
        tensor_ptrs[i] = &tensors[i];
    }
    for (size_t i = 0; i < nl; i++) {
        rtx__v1__label__init(&labels[i]);
        labels[i].key = (char *)opt->labels[i].key;
        labels[i].value = (char *)opt->labels[i].value;
        label_ptrs[i] = &labels[i];
    }
    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    if (g) {
        req.graph = (Rtx__V1__Graph *)rtx__client_graph_pb(g);
    } else {
        req.onnx_model.data = (uint8_t *)onnx;
        req.onnx_model.len = onnx_len;
    }
    req.n_inputs = ni;
    req.inputs = tensor_ptrs;
    req.lane = (char *)(opt->lane ? opt->lane : "");
    req.deadline_unix_ms = opt->deadline_unix_ms;
    req.n_labels = nl;
    req.labels = label_ptrs;
    req.idempotency_key = (char *)(opt->idempotency_key ? opt->idempotency_key : "");
    req.restart_policy = (Rtx__V1__RestartPolicy)opt->restart_policy;
    req.device = (char *)(opt->device ? opt->device : "");
    ProtobufCMessage *msg = NULL;
    rc = rtx__client_unary(c, RTX__CLIENT_M_SUBMIT, &req.base, &msg, err);
    if (rc < 0) goto out;
    const Rtx__V1__SubmitResponse *resp = (const Rtx__V1__SubmitResponse *)msg;
    size_t len = strlen(rtx__client_str(resp->job_id));
    if (len == 0 || len >= RTX_CLIENT_JOB_ID_MAX) {
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                             "Submit answered with a job id of %zu characters", len);
    } else {
        memcpy(job_id, resp->job_id, len + 1);
        if (deduplicated) *deduplicated = resp->deduplicated;
    }
    protobuf_c_message_free_unpacked(msg, NULL);
out:
    free(tensors);
    free(tensor_ptrs);
    free(labels);
    free(label_ptrs);
    return rc;
}

int rtx_client_submit(struct rtx_client *c, const struct rtx_client_graph *g,
                      const struct rtx_client_tensor *inputs, int n_inputs,
                      const struct rtx_client_submit_options *opt,
                      char job_id[RTX_CLIENT_JOB_ID_MAX], bool *deduplicated,
                      struct rtx_client_err *err) {
    if (!g) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no graph");
    return submit(c, g, NULL, 0, inputs, n_inputs, opt, job_id, deduplicated, err);
}

int rtx_client_submit_onnx(struct rtx_client *c, const void *model, size_t len,
                           const struct rtx_client_tensor *inputs, int n_inputs,
                           const struct rtx_client_submit_options *opt,
                           char job_id[RTX_CLIENT_JOB_ID_MAX], bool *deduplicated,
                           struct rtx_client_err *err) {
    if (!model || !len) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no ONNX model");
    return submit(c, NULL, model, len, inputs, n_inputs, opt, job_id, deduplicated, err);
}

int rtx_client_get_job(struct rtx_client *c, const char *job_id, struct rtx_client_job **out,
                       struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    return job_call(c, RTX__CLIENT_M_GET_JOB, job_id, out, err);
}

int rtx_client_cancel_job(struct rtx_client *c, const char *job_id, struct rtx_client_job **out,
                          struct rtx_client_err *err) {
    return job_call(c, RTX__CLIENT_M_CANCEL_JOB, job_id, out, err);
}

struct wait_state {
    rtx_client_wait_cb cb;
    void *ctx;
    struct rtx_client_job *last;        /* the latest job streamed */
};

static int wait_message(void *ctx, ProtobufCMessage *msg, struct rtx_client_err *err) {
    struct wait_state *w = ctx;
    struct rtx_client_job *job = NULL;
    int rc = job_box_new((Rtx__V1__Job *)msg, &job, err);
    if (rc < 0) return rc;
    if (w->cb) w->cb(w->ctx, job);
    rtx_client_job_free(w->last);
    w->last = job;
    return 0;
}

int rtx_client_wait_job(struct rtx_client *c, const char *job_id, int64_t timeout_ms,
                        rtx_client_wait_cb cb, void *ctx, struct rtx_client_job **out,
                        struct rtx_client_err *err) {
    if (out) *out = NULL;
    int rc = check_id(job_id, err);
    if (rc < 0) return rc;
    if (!c) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no client");
    if (timeout_ms == 0) timeout_ms = c->timeout_ms;
    if (timeout_ms < 0) timeout_ms = -1;
    Rtx__V1__WaitJobRequest req = RTX__V1__WAIT_JOB_REQUEST__INIT;
    req.job_id = (char *)job_id;
    struct wait_state w = {.cb = cb, .ctx = ctx, .last = NULL};
    rc = rtx__client_stream(c, RTX__CLIENT_M_WAIT_JOB, &req.base, timeout_ms, wait_message, &w,
                            NULL, err);
    if (rc == 0 && (!w.last || !rtx_client_job_state_is_terminal(w.last->state)))
        rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                             "the Wait stream of job %s ended in state %s, not a final state",
                             job_id, w.last ? rtx_client_job_state_name(w.last->state) : "(none)");
    if (rc < 0 || !out)
        rtx_client_job_free(w.last);
    else
        *out = w.last;
    return rc;
}

/* A job list handed to the caller: the response its strings point into and its arrays. */
struct list_box {
    Rtx__V1__ListJobsResponse *pb;
    struct rtx_client_label *labels;
    struct rtx_client_output_info *outputs;
    struct rtx_client_job_list list;
};

static void list_box_free(struct list_box *b) {
    if (!b) return;
    if (b->pb) rtx__v1__list_jobs_response__free_unpacked(b->pb, NULL);
    free(b->labels);
    free(b->outputs);
    free(b->list.jobs);
    free(b);
}

void rtx_client_job_list_free(struct rtx_client_job_list *list) {
    if (list)
        list_box_free((struct list_box *)(void *)((char *)list - offsetof(struct list_box, list)));
}

int rtx_client_list_jobs(struct rtx_client *c, const struct rtx_client_list_filter *filter,
                         const char *page_token, struct rtx_client_job_list **out,
                         struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    static const struct rtx_client_list_filter no_filter;
    if (!filter) filter = &no_filter;
    if (filter->n_states < 0 || (filter->n_states > 0 && !filter->states) ||
        filter->n_labels < 0 || (filter->n_labels > 0 && !filter->labels))
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "bad state or label list");
    if (filter->page_size < 0)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "negative page size");
    for (int i = 0; i < filter->n_labels; i++)
        if (!filter->labels[i].key || !*filter->labels[i].key || !filter->labels[i].value)
            return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "label %d: empty key or no value",
                                   i);
    size_t ns = (size_t)filter->n_states, nl = (size_t)filter->n_labels;
    Rtx__V1__JobState *states = calloc(ns ? ns : 1, sizeof *states);
    Rtx__V1__Label *labels = calloc(nl ? nl : 1, sizeof *labels);
    Rtx__V1__Label **label_ptrs = calloc(nl ? nl : 1, sizeof *label_ptrs);
    struct list_box *b = calloc(1, sizeof *b);
    int rc = 0;
    if (!states || !labels || !label_ptrs || !b) {
        rc = oom(err);
        goto out;
    }
    for (size_t i = 0; i < ns; i++)
        states[i] = (Rtx__V1__JobState)filter->states[i];
    for (size_t i = 0; i < nl; i++) {
        rtx__v1__label__init(&labels[i]);
        labels[i].key = (char *)filter->labels[i].key;
        labels[i].value = (char *)filter->labels[i].value;
        label_ptrs[i] = &labels[i];
    }
    Rtx__V1__ListJobsRequest req = RTX__V1__LIST_JOBS_REQUEST__INIT;
    req.n_states = ns;
    req.states = states;
    req.n_labels = nl;
    req.labels = label_ptrs;
    req.created_after_unix_ms = filter->created_after_unix_ms;
    req.created_before_unix_ms = filter->created_before_unix_ms;
    req.page_size = filter->page_size;
    req.page_token = (char *)(page_token ? page_token : "");
    ProtobufCMessage *msg = NULL;
    rc = rtx__client_unary(c, RTX__CLIENT_M_LIST_JOBS, &req.base, &msg, err);
    if (rc < 0) goto out;
    b->pb = (Rtx__V1__ListJobsResponse *)msg;
    size_t total_labels = 0, total_outputs = 0, n = b->pb->n_jobs;
    for (size_t i = 0; i < n; i++) {
        total_labels += b->pb->jobs[i]->n_labels;
        total_outputs += b->pb->jobs[i]->n_outputs;
    }
    b->list.jobs = calloc(n ? n : 1, sizeof *b->list.jobs);
    b->labels = calloc(total_labels ? total_labels : 1, sizeof *b->labels);
    b->outputs = calloc(total_outputs ? total_outputs : 1, sizeof *b->outputs);
    if (!b->list.jobs || !b->labels || !b->outputs) {
        rc = oom(err);
        goto out;
    }
    size_t li = 0, oi = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const Rtx__V1__Job *j = b->pb->jobs[i];
        rc = rtx__client_job_fill(&b->list.jobs[i], j, b->labels + li, b->outputs + oi, err);
        li += j->n_labels;
        oi += j->n_outputs;
    }
    if (rc < 0) goto out;
    b->list.n_jobs = (int)n;
    b->list.next_page_token = rtx__client_str(b->pb->next_page_token);
    *out = &b->list;
    b = NULL;
out:
    list_box_free(b);
    free(states);
    free(labels);
    free(label_ptrs);
    return rc;
}

int rtx_client_get_outputs(struct rtx_client *c, const char *job_id,
                           struct rtx_client_tensor **out, int *n, struct rtx_client_err *err) {
    if (!out || !n) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    *n = 0;
    int rc = check_id(job_id, err);
    if (rc < 0) return rc;
    Rtx__V1__GetOutputsRequest req = RTX__V1__GET_OUTPUTS_REQUEST__INIT;
    req.job_id = (char *)job_id;
    ProtobufCMessage *msg = NULL;
    rc = rtx__client_unary(c, RTX__CLIENT_M_GET_OUTPUTS, &req.base, &msg, err);
    if (rc < 0) return rc;
    Rtx__V1__GetOutputsResponse *resp = (Rtx__V1__GetOutputsResponse *)msg;
    size_t count = resp->n_outputs;
    struct rtx_client_tensor *ts = calloc(count ? count : 1, sizeof *ts);
    if (!ts) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return oom(err);
    }
    for (size_t i = 0; i < count && rc == 0; i++) {
        Rtx__V1__Tensor *pb = resp->outputs[i];
        struct rtx_client_tensor *t = &ts[i];
        const char *name = rtx__client_str(pb->name);
        if (pb->n_dims > RTX_CLIENT_MAX_DIMS) {
            rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1,
                                 "output %s has %zu dimensions (at most %d)", name, pb->n_dims,
                                 RTX_CLIENT_MAX_DIMS);
            break;
        }
        t->dtype = (enum rtx_client_dtype)pb->dtype;
        t->ndim = (int)pb->n_dims;
        for (size_t d = 0; d < pb->n_dims; d++)
            t->dims[d] = pb->dims[d];
        t->bytes = pb->data.len;
        char what[160];
        snprintf(what, sizeof what, "output %s", name);
        t->data = pb->data.data;
        struct rtx_client_err check;
        if (rtx__client_tensor_check(t, what, &check) < 0) {
            t->data = NULL;
            rc = rtx__client_err(err, RTX_CLIENT_EPROTO, -1, "%s", check.msg);
            break;
        }
        /* move name and data out of the message (an unset name is protobuf-c's static "") */
        bool own_name = pb->name && pb->name != protobuf_c_empty_string;
        t->owned = true;
        t->name = own_name ? pb->name : strdup("");
        if (own_name) pb->name = NULL;
        pb->data.data = NULL;
        pb->data.len = 0;
        if (!t->name) rc = oom(err);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc < 0) {
        rtx_client_tensors_free(ts, (int)count);
        return rc;
    }
    *out = ts;
    *n = (int)count;
    rtx__client_err_clear(err);
    return 0;
}
