/*
 * kserve-gen.c - KServe requests to generative models (daemon/kserve.h): the sampling fields
 * of a request's parameters and of its sampling_parameters input, the prompt, the submission
 * to the model's engine, and the engine's events turned into text_output answers.
 *
 * DESIGN
 * The fields are those of Triton's vLLM backend (vLLM's SamplingParams names), read from one
 * table. A request's parameters are applied first and sampling_parameters over them (the
 * input wins), both over the model's generation defaults. Triton's vLLM clients send numbers
 * as strings ("0.7"), so a decimal string is taken where a number is expected.
 * Streaming, each engine event with new text is one answer at once; the event that finishes
 * the last choice is held until the engine's on_done (which follows it on the same thread)
 * so that the final answer carries the usage. Not streaming, the text is collected per
 * choice and answered once, after on_done. exclude_input_in_output follows Triton's vLLM
 * backend: absent, the prompt is prepended to a non-streamed answer and not to a stream;
 * false together with streaming is refused.
 * A request holds two references: the caller's and the engine's (dropped after on_done); the
 * model reference it took is released with the last one.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/kserve.h"

/* ------------------------------------------------------------------------------------------
 * Sampling fields
 * ---------------------------------------------------------------------------------------- */

enum field_kind { F_INT, F_DOUBLE, F_BOOL, F_SEED, F_STOP };

static const struct field {
    const char *name;
    enum field_kind kind;
    size_t off; /* in struct rtx_gen_params */
} fields[] = {
    {"max_tokens", F_INT, offsetof(struct rtx_gen_params, max_tokens)},
    {"min_tokens", F_INT, offsetof(struct rtx_gen_params, min_tokens)},
    {"temperature", F_DOUBLE, offsetof(struct rtx_gen_params, temperature)},
    {"top_p", F_DOUBLE, offsetof(struct rtx_gen_params, top_p)},
    {"top_k", F_INT, offsetof(struct rtx_gen_params, top_k)},
    {"min_p", F_DOUBLE, offsetof(struct rtx_gen_params, min_p)},
    {"repetition_penalty", F_DOUBLE, offsetof(struct rtx_gen_params, repetition_penalty)},
    {"presence_penalty", F_DOUBLE, offsetof(struct rtx_gen_params, presence_penalty)},
    {"frequency_penalty", F_DOUBLE, offsetof(struct rtx_gen_params, frequency_penalty)},
    {"seed", F_SEED, offsetof(struct rtx_gen_params, seed)},
    {"n", F_INT, offsetof(struct rtx_gen_params, n)},
    {"stop", F_STOP, offsetof(struct rtx_gen_params, stop)},
    {"ignore_eos", F_BOOL, offsetof(struct rtx_gen_params, ignore_eos)},
    {"logprobs", F_INT, offsetof(struct rtx_gen_params, logprobs)},
    {"skip_special_tokens", F_BOOL, offsetof(struct rtx_gen_params, skip_special)},
};

static const struct field *field_find(const char *key) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i].name, key) == 0) return &fields[i];
    return NULL;
}

/* A number, or a string holding one in full. */
static bool get_double(json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    if (!json_is_string(v) || json_string_length(v) == 0) return false;
    const char *s = json_string_value(v);
    char *end = NULL;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}

/* An integer (a JSON integer, an integral real, or a decimal string) within [lo, hi]. */
static bool get_int(json_t *v, long long lo, long long hi, long long *out) {
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || d < -9.0e18 || d > 9.0e18) return false;
        x = (long long)d;
    } else if (json_is_string(v) && json_string_length(v) > 0) {
        char *end = NULL;
        errno = 0;
        x = strtoll(json_string_value(v), &end, 10);
        if (errno || *end) return false;
    } else {
        return false;
    }
    if (x < lo || x > hi) return false;
    *out = x;
    return true;
}

static bool get_bool(json_t *v, bool *out) {
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return true;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "true") == 0) return *out = true;
    if (json_is_string(v) && strcmp(json_string_value(v), "false") == 0) return !(*out = false);
    return false;
}

static int apply_stop(json_t *v, const char *what, struct rtx_gen_params *p, struct rtx_err *err) {
    if (json_is_string(v)) {
        p->n_stop = json_string_length(v) > 0;
        p->stop[0] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return rtx_err_set(err, RTX_EINVAL, "%s: stop must be a string or a list of strings",
                           what);
    if (json_array_size(v) > RTX_GEN_MAX_STOP)
        return rtx_err_set(err, RTX_EINVAL, "%s: stop has %zu strings; at most %d", what,
                           json_array_size(v), RTX_GEN_MAX_STOP);
    size_t i;
    json_t *e;
    p->n_stop = 0;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || json_string_length(e) == 0)
            return rtx_err_set(err, RTX_EINVAL, "%s: stop[%zu] must be a non-empty string", what,
                               i);
        p->stop[p->n_stop++] = json_string_value(e);
    }
    return 0;
}

static int apply_field(const struct field *f, json_t *v, const char *what,
                       struct rtx_gen_params *p, struct rtx_err *err) {
    char *base = (char *)p;
    long long x;
    switch (f->kind) {
    case F_INT:
        if (!get_int(v, INT_MIN, INT_MAX, &x))
            return rtx_err_set(err, RTX_EINVAL, "%s: %s must be an integer", what, f->name);
        *(int *)(base + f->off) = (int)x;
        return 0;
    case F_DOUBLE:
        if (!get_double(v, (double *)(base + f->off)))
            return rtx_err_set(err, RTX_EINVAL, "%s: %s must be a number", what, f->name);
        return 0;
    case F_BOOL:
        if (!get_bool(v, (bool *)(base + f->off)))
            return rtx_err_set(err, RTX_EINVAL, "%s: %s must be true or false", what, f->name);
        return 0;
    case F_SEED:
        if (json_is_null(v)) {
            p->has_seed = false;
            return 0;
        }
        if (!get_int(v, 0, LLONG_MAX, &x))
            return rtx_err_set(err, RTX_EINVAL, "%s: seed must be a non-negative integer", what);
        p->has_seed = true;
        p->seed = (uint64_t)x;
        return 0;
    case F_STOP: return apply_stop(v, what, p, err);
    }
    return rtx_err_set(err, RTX_EINTERNAL, "unknown sampling field kind");
}

int rtx__kserve_gen_params_apply(json_t *obj, bool strict, const char *what,
                                 struct rtx_gen_params *p, struct rtx_err *err) {
    if (!obj) return 0;
    if (!json_is_object(obj))
        return rtx_err_set(err, RTX_EINVAL, "%s must be a JSON object", what);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const struct field *f = field_find(key);
        if (!f) {
            if (strict)
                return rtx_err_set(err, RTX_EINVAL, "%s: unknown field '%.64s'", what, key);
            continue;
        }
        int rc = apply_field(f, v, what, p, err);
        if (rc) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

struct text_buf {
    char *p;
    size_t len, cap; /* bytes */
};

struct rtx_kserve_gen {
    atomic_int refs; /* the caller's; the engine's until on_done ran */
    struct rtx_model *model;
    struct rtx_gen_handle *h;
    rtx_kserve_gen_output_fn on_output;
    rtx_kserve_gen_end_fn on_end;
    void *ctx;
    bool stream, prepend;
    bool oom; /* text could not be collected: the end reports RTX_ENOMEM */
    int n;    /* choices */
    int n_finished;
    enum rtx_gen_finish finish[RTX_GEN_MAX_N];
    char *prompt; /* prepend: the prompt text */
    size_t prompt_len;
    struct text_buf text[RTX_GEN_MAX_N]; /* not streaming: each choice's text; streaming:
                                            text[0] holds the held final event's text */
    int held;                            /* streaming: the choice of the held event, or -1 */
};

static void gen_free(struct rtx_kserve_gen *g) {
    for (int i = 0; i < RTX_GEN_MAX_N; i++)
        rtx_free(g->text[i].p);
    rtx_free(g->prompt);
    rtx_gen_handle_unref(g->h);
    rtx_model_unref(g->model);
    rtx_free(g);
}

void rtx__kserve_gen_unref(struct rtx_kserve_gen *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

void rtx__kserve_gen_cancel(struct rtx_kserve_gen *g) {
    if (g) rtx_gen_cancel(g->h);
}

static bool buf_append(struct text_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = rtx_realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

/* Gives an answer of n choices where only choice `index` (or none: -1) has text. */
static void output_one(struct rtx_kserve_gen *g, int index, const char *text, size_t len,
                       bool final, const char *finish, const struct rtx_gen_usage *usage) {
    struct rtx_kserve_str s[RTX_GEN_MAX_N];
    for (int i = 0; i < g->n; i++)
        s[i] = (struct rtx_kserve_str){"", 0};
    if (index >= 0) s[index] = (struct rtx_kserve_str){text, len};
    struct rtx_kserve_gen_output o = {
        .n = g->n, .text = s, .final = final, .finish_reason = finish, .usage = usage};
    g->on_output(g->ctx, &o);
}

static void on_event(void *ctx, const struct rtx_gen_event *ev) {
    struct rtx_kserve_gen *g = ctx;
    if (ev->index < 0 || ev->index >= g->n) return;
    if (ev->finish != RTX_GEN_FINISH_NONE && g->finish[ev->index] == RTX_GEN_FINISH_NONE) {
        g->finish[ev->index] = ev->finish;
        g->n_finished++;
    }
    if (!g->stream) {
        if (!g->oom && !buf_append(&g->text[ev->index], ev->text, ev->text_len)) g->oom = true;
        return;
    }
    if (ev->finish != RTX_GEN_FINISH_NONE && g->n_finished == g->n) {
        /* the last event: held for on_done, which brings the usage */
        g->held = ev->index;
        g->text[0].len = 0;
        if (!buf_append(&g->text[0], ev->text, ev->text_len)) g->oom = true;
        return;
    }
    if (ev->text_len > 0) output_one(g, ev->index, ev->text, ev->text_len, false, NULL, NULL);
}

static void on_done(void *ctx, int status, const struct rtx_err *err,
                    const struct rtx_gen_usage *usage) {
    struct rtx_kserve_gen *g = ctx;
    struct rtx_err e = {0};
    if (status == 0 && g->oom)
        status = rtx_err_set(&e, RTX_ENOMEM,
                             "out of memory collecting "
                             "the generated text");
    else if (status != 0)
        e = err ? *err : (struct rtx_err){.code = status};
    char finish[RTX_GEN_MAX_N * 8] = "";
    for (int i = 0, k = 0; i < g->n && k < (int)sizeof finish; i++)
        k += snprintf(finish + k, sizeof finish - (size_t)k, "%s%s", i ? "," : "",
                      rtx_gen_finish_name(g->finish[i]));
    if (g->stream) {
        bool held = g->held >= 0 && !g->oom;
        if (status == 0)
            output_one(g, held ? g->held : -1, held ? g->text[0].p : NULL,
                       held ? g->text[0].len : 0, true, finish, usage);
        else if (held && g->text[0].len > 0)
            output_one(g, g->held, g->text[0].p, g->text[0].len, false, NULL, NULL);
    } else if (status == 0) {
        struct rtx_kserve_str s[RTX_GEN_MAX_N];
        struct text_buf joined[RTX_GEN_MAX_N] = {{0}};
        for (int i = 0; i < g->n && status == 0; i++) {
            struct text_buf *t = &g->text[i];
            if (g->prepend) {
                if (!buf_append(&joined[i], g->prompt, g->prompt_len) ||
                    !buf_append(&joined[i], t->p ? t->p : "", t->len))
                    status = rtx_err_set(&e, RTX_ENOMEM, "out of memory joining the text");
                t = &joined[i];
            }
            s[i] = (struct rtx_kserve_str){t->p ? t->p : "", t->len};
        }
        if (status == 0) {
            struct rtx_kserve_gen_output o = {
                .n = g->n, .text = s, .final = true, .finish_reason = finish, .usage = usage};
            g->on_output(g->ctx, &o);
        }
        for (int i = 0; i < g->n; i++)
            rtx_free(joined[i].p);
    }
    g->on_end(g->ctx, status, status ? &e : NULL);
    rtx__kserve_gen_unref(g); /* the engine's */
}

/* The request's sampling fields over the model's defaults. */
static int gen_params(const struct rtx_kserve_gen_args *a, struct rtx_gen_model *gm,
                      struct rtx_gen_params *p, json_t **sampling, struct rtx_err *err) {
    rtx_gen_model_default_params(gm, p);
    *sampling = NULL;
    int rc = rtx__kserve_gen_params_apply(a->params, false, "request parameters", p, err);
    if (rc || !a->sampling) return rc;
    json_error_t jerr;
    *sampling = json_loadb(a->sampling, a->sampling_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*sampling)
        return rtx_err_set(err, RTX_EINVAL,
                           "input 'sampling_parameters': malformed JSON: %s (column %d)",
                           jerr.text, jerr.column);
    return rtx__kserve_gen_params_apply(*sampling, true, "input 'sampling_parameters'", p, err);
}

int rtx__kserve_gen_start(const struct rtx_kserve_gen_args *a, struct rtx_kserve_gen **out,
                          struct rtx_err *err) {
    *out = NULL;
    struct rtx_gen_engine *e = rtx_model_generator(a->model);
    if (!e)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "model '%s' is not a generative model",
                           rtx_model_info(a->model)->name);
    if (!a->text)
        return rtx_err_set(err, RTX_EINVAL, "missing input 'text_input' (BYTES [1], the prompt)");
    if (a->unary && a->stream == 1)
        return rtx_err_set(err, RTX_EINVAL,
                           "input 'stream' is true, but this call answers once: stream over "
                           "ModelStreamInfer (gRPC) or generate_stream (HTTP)");
    bool stream = a->stream == 1;
    if (stream && a->exclude_input == 0)
        return rtx_err_set(err, RTX_EINVAL,
                           "input 'exclude_input_in_output' is false, which streaming does not "
                           "allow (the prompt is never streamed back)");
    bool prepend = !stream && a->exclude_input != 1;

    struct rtx_gen_model *gm = rtx_gen_engine_model(e);
    struct rtx_gen_params p;
    json_t *sampling = NULL;
    int rc = gen_params(a, gm, &p, &sampling, err);
    if (rc) {
        json_decref(sampling);
        return rc;
    }
    if (p.logprobs >= 0) {
        json_decref(sampling);
        return rtx_err_set(err, RTX_EINVAL,
                           "logprobs: text_output carries no log probabilities; ask "
                           "/v1/completions or generate_stream for them");
    }
    if (p.n < 1 || p.n > RTX_GEN_MAX_N) {
        json_decref(sampling);
        return rtx_err_set(err, RTX_EINVAL, "n = %d is out of range (1..%d)", p.n, RTX_GEN_MAX_N);
    }
    struct rtx_kserve_gen *g = rtx_calloc(1, sizeof *g);
    int32_t *ids = NULL;
    int n_ids = 0;
    if (!g) {
        json_decref(sampling);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory for a generation request");
    }
    atomic_init(&g->refs, 2);
    g->on_output = a->on_output;
    g->on_end = a->on_end;
    g->ctx = a->ctx;
    g->stream = stream;
    g->prepend = prepend;
    g->n = p.n;
    g->held = -1;
    if (prepend && !(g->prompt = rtx_malloc(a->text_len + 1))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory for a generation request");
        goto fail;
    }
    if (prepend) {
        memcpy(g->prompt, a->text, a->text_len);
        g->prompt[a->text_len] = '\0';
        g->prompt_len = a->text_len;
    }
    rc = rtx_gen_model_encode_prompt(gm, a->text, a->text_len, &ids, &n_ids, err);
    if (rc) {
        rtx_err_prefix(err, "input 'text_input'");
        goto fail;
    }
    struct rtx_gen_request r = {
        .prompt = ids,
        .n_prompt = n_ids,
        .params = p,
        .lane = a->lane,
        .deadline_ns = a->deadline_ns,
        .on_event = on_event,
        .on_done = on_done,
        .ctx = g,
    };
    struct rtx_gen_handle *h = NULL;
    rc = rtx_gen_submit(e, &r, &h, err);
    if (rc) goto fail;
    g->h = h;
    g->model = a->model; /* the caller's reference, taken over */
    rtx_free(ids);
    json_decref(sampling);
    *out = g;
    return 0;
fail:
    rtx_free(ids);
    json_decref(sampling);
    rtx_free(g->prompt);
    rtx_free(g);
    return rc;
}
