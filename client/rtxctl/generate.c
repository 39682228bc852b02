/*
 * generate.c - rtxctl generate: text from a generative model, streamed to the terminal as the
 * daemon produces it (librtx's rtx_client_generate over ModelStreamInfer); Ctrl-C cancels the
 * stream, and the daemon frees the sequence.
 *
 * DESIGN
 * SIGINT only raises a flag that librtx looks at every 50 ms while it waits for the stream;
 * the call then cancels the stream and returns, and the command exits 4 (cancelled) after
 * printing what came. Text goes to stdout unbuffered by chunk (fflush after each), so a pipe
 * sees it as it comes. With --json each chunk is one JSON line {"text": ...} and a last line
 * sums up: {"done", "finish_reason", "usage", "chunks", "request_id"}.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

#define MAX_STOP 8

static volatile sig_atomic_t interrupted; /* librtx reads it as an int */
_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "sig_atomic_t is an int");

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static const char cmd_name[] = "generate ";

/* A finite number within [lo, hi]. */
static bool parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

struct gen_args {
    const char *model, *prompt;
    struct rtx_client_generate_options opt;
    const char *stop[MAX_STOP];
};

static int parse_args(int argc, char **argv, struct gen_args *a) {
    a->opt.temperature = -1; /* the model's default unless --temperature */
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m;
        int64_t n;
        if ((m = ctl_opt_value(cmd_name, "--max-tokens", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, INT32_MAX, &n))
                return ctl_usage_error(cmd_name, "--max-tokens wants a positive integer, got '%s'",
                                       v);
            a->opt.max_tokens = (int)n;
        } else if ((m = ctl_opt_value(cmd_name, "--temperature", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!parse_double(v, 0, 100, &a->opt.temperature))
                return ctl_usage_error(cmd_name,
                                       "--temperature wants a number in [0, 100], "
                                       "got '%s'",
                                       v);
        } else if ((m = ctl_opt_value(cmd_name, "--top-p", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!parse_double(v, 0, 1, &a->opt.top_p) || a->opt.top_p == 0)
                return ctl_usage_error(cmd_name, "--top-p wants a number in (0, 1], got '%s'", v);
        } else if ((m = ctl_opt_value(cmd_name, "--top-k", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, INT32_MAX, &n))
                return ctl_usage_error(cmd_name, "--top-k wants a positive integer, got '%s'", v);
            a->opt.top_k = (int)n;
        } else if ((m = ctl_opt_value(cmd_name, "--seed", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 0, INT64_MAX, &n))
                return ctl_usage_error(cmd_name, "--seed wants a non-negative integer, got '%s'",
                                       v);
            a->opt.has_seed = true;
            a->opt.seed = (uint64_t)n;
        } else if ((m = ctl_opt_value(cmd_name, "--stop", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(cmd_name, "--stop wants a non-empty string");
            if (a->opt.n_stop == MAX_STOP)
                return ctl_usage_error(cmd_name, "at most %d --stop strings", MAX_STOP);
            a->stop[a->opt.n_stop++] = v;
        } else if ((m = ctl_opt_value(cmd_name, "--lane", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            a->opt.lane = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return ctl_usage_error(cmd_name, "unknown option '%s'", argv[i]);
        } else if (!a->model) {
            a->model = argv[i];
        } else if (!a->prompt) {
            a->prompt = argv[i];
        } else {
            return ctl_usage_error(cmd_name, "unexpected argument '%s' (quote the prompt)",
                                   argv[i]);
        }
    }
    if (!a->model || !a->prompt) return ctl_usage_error(cmd_name, "MODEL and PROMPT are required");
    a->opt.stop = a->stop;
    return EXIT_OK;
}

struct out_state {
    bool json;
    bool ended_newline; /* the text written so far ends with a newline (or is empty) */
};

static int on_text(void *ctx, const char *text, size_t len) {
    struct out_state *o = ctx;
    if (o->json) {
        json_t *doc = ctl_json_object();
        json_t *s = json_stringn(text, len);
        if (!s) { /* not UTF-8: ctl_json_str replaces the bad bytes */
            char *copy = ctl_calloc(len + 1, 1);
            memcpy(copy, text, len);
            s = ctl_json_str(copy);
            free(copy);
        }
        ctl_json_set(doc, "text", s);
        ctl_json_print(doc);
    } else {
        fwrite(text, 1, len, stdout);
        o->ended_newline = len > 0 && text[len - 1] == '\n';
    }
    fflush(stdout);
    return 0;
}

int ctl_cmd_generate(struct ctl *ctl, int argc, char **argv) {
    struct gen_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != EXIT_OK) return rc;
    rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    a.opt.timeout_ms = ctl->timeout_ms; /* --timeout given: the whole stream's deadline */
    a.opt.cancel = (const volatile int *)&interrupted;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);

    struct out_state o = {.json = ctl->json, .ended_newline = true};
    struct rtx_client_generate_result res;
    struct rtx_client_err err;
    int grc = rtx_client_generate(ctl->client, a.model, a.prompt, &a.opt, on_text, &o, &res, &err);
    sigaction(SIGINT, &old, NULL);
    if (!ctl->json && !o.ended_newline) fputc('\n', stdout);
    if (grc == 0 && ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_bool(doc, "done", true);
        ctl_json_set_str(doc, "finish_reason", res.finish_reason);
        json_t *usage = ctl_json_object();
        ctl_json_set(doc, "usage", usage);
        ctl_json_set_int(usage, "prompt_tokens", res.prompt_tokens);
        ctl_json_set_int(usage, "completion_tokens", res.completion_tokens);
        ctl_json_set_int(usage, "cached_tokens", res.cached_tokens);
        ctl_json_set_int(doc, "chunks", res.chunks);
        ctl_json_set_str(doc, "request_id", res.request_id);
        ctl_json_print(doc);
    }
    fflush(stdout);
    rtx_client_generate_result_clear(&res);
    if (grc == RTX_CLIENT_ECANCELLED && interrupted) {
        ctl_msg("generate: cancelled");
        return EXIT_CANCELLED;
    }
    if (grc < 0) return ctl_call_failed(ctl, "generate", &err);
    return EXIT_OK;
}
