/*
 * rtxrun.c - runs one rtx.v1 graph file on the CPU backend or a CUDA device (--device) from
 * the command line: binds inputs from .npy files (or random data), plans, executes (with
 * warm-up and repeats for timing), prints or saves the outputs and reports time and memory,
 * as text or one JSON object. --batch-dir runs every case directory of a folder (a graph, its
 * inputs, its outputs written beside them) in one process, on one backend.
 *
 * Exit codes: 0 success, 1 execution (or output writing) error, 2 usage error, 3 graph load,
 * validation or planning error, 4 input file or binding error. Errors go to stderr as
 * "rtxrun: <message>" ("rtxrun: case NAME: <message>" in a batch).
 *
 * DESIGN: one struct run holds what one graph needs (graph, tensors, plan) and is freed after
 * it; the backend lives outside it, in main, opened when the first graph reaches execution
 * (so a graph error is reported as such on a host without the device) and kept for every
 * later graph: a batch of hundreds of small graphs initialises CUDA once. A case of a batch
 * that fails is reported (with the message fail() also keeps) and the batch goes on; only a
 * backend that cannot be opened ends it.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "onnx/onnx.h"
#include "runtime/backend.h"
#include "runtime/runtime.h"

enum {
    EXIT_OK = 0,
    EXIT_EXEC = 1,
    EXIT_USAGE = 2,
    EXIT_GRAPH = 3,
    EXIT_INPUT = 4,
};

#define SHOW_VALUES 8 /* values printed per output */

static const char usage_text[] =
    "usage: rtxrun GRAPH.rtxg|MODEL.onnx [options]\n"
    "Runs a graph, or an ONNX model instantiated for its inputs' shapes, on the CPU\n"
    "backend or a CUDA device.\n"
    "\n"
    "  --input NAME=FILE.npy  bind graph input NAME to an .npy file (repeatable)\n"
    "  --random-inputs        fill inputs not given with --input with random data\n"
    "                         (floats in [-1,1), integers in [0,10), random bools;\n"
    "                         dimensions of -1 become 1)\n"
    "  --seed N               seed of --random-inputs (default 0)\n"
    "  --output-dir DIR       write each output to DIR/<name>.npy ('/' and ':' in names\n"
    "                         become '_'); DIR is created if missing\n"
    "  --device DEV           cpu (default), cuda (device 0) or cuda:N\n"
    "  --threads N            CPU worker threads (default 0: one per CPU)\n"
    "  --warmup N             untimed runs first (default 0)\n"
    "  --repeat N             timed runs (default 1); outputs come from the last\n"
    "  --json                 print one JSON object instead of text\n"
    "  --batch-dir DIR        run every case directory DIR/CASE (CASE/graph.rtxg or\n"
    "                         CASE/model.onnx, inputs\n"
    "                         CASE/inputs/NAME.npy, outputs to CASE/out/) in one process;\n"
    "                         no GRAPH, --input or --output-dir (see docs/rtxrun.md)\n"
    "  --quiet                do not list the outputs (timing and memory still print)\n"
    "  --help                 show this help\n"
    "\n"
    "Exit status: 0 ok, 1 execution error, 2 usage error, 3 graph error, 4 input error;\n"
    "with --batch-dir: 0 when every case ran, 1 when one failed, 4 when DIR is unreadable.\n";

struct input_arg {
    const char *name;
    const char *path;
};

struct options {
    const char *graph_path;
    struct input_arg *inputs;
    int n_inputs;
    const char *output_dir;
    const char *batch_dir; /* --batch-dir, or NULL */
    bool random_inputs;
    uint64_t seed;
    int threads;
    int device;   /* -1: the CPU backend, else the CUDA device index */
    int repeat;
    int warmup;
    bool json;
    bool quiet;
    bool help;
};

/* Everything main owns, freed in one place. */
struct run {
    struct options opt;
    struct rtx_graph *g;
    struct rtx_tensor **inputs;  /* g->n_inputs */
    struct rtx_tensor **outputs; /* g->n_outputs */
    char **files;                /* g->n_outputs output paths, or NULL entries */
    struct rtx_plan *plan;
    struct rtx_backend **be; /* main's backend slot: opened on first use, freed by main */
    bool be_failed;          /* the backend could not be opened */
    const char *case_name;   /* the batch case being run, or NULL */
    double *times_ms;        /* opt.repeat */
    size_t peak_bytes;       /* bytes */
};

static const char *current_case; /* prefixes messages during a batch case */
static char last_error[512];     /* the last message fail() printed */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "rtxrun: [case NAME: ]<message>" to stderr and keeps the message in last_error. */
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (current_case)
        fprintf(stderr, "rtxrun: case %s: %s\n", current_case, last_error);
    else
        fprintf(stderr, "rtxrun: %s\n", last_error);
}

/* ------------------------------------------------------------------------------------------
 * Arguments
 * ---------------------------------------------------------------------------------------- */

/* Parses a decimal integer in [lo, hi]; false on garbage or out of range. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = v;
    return true;
}

/* Returns the option's value: the text after '=' in "--opt=VALUE" or the next argument. */
static const char *option_value(int argc, char **argv, int *i, const char *eq) {
    if (eq) return eq + 1;
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* Fills opt from argv; returns EXIT_OK, EXIT_USAGE or EXIT_EXEC (message printed). */
static int parse_args(int argc, char **argv, struct options *opt) {
    opt->repeat = 1;
    opt->device = -1;
    opt->inputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *opt->inputs);
    if (!opt->inputs) {
        fail("out of memory");
        return EXIT_EXEC;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0) {
            opt->help = true;
            continue;
        }
        if (arg[0] != '-' || arg[1] == '\0' || strcmp(arg, "--") == 0) {
            if (strcmp(arg, "--") == 0) {
                if (i + 1 >= argc) break;
                arg = argv[++i];
            }
            if (opt->graph_path) {
                fail("unexpected argument '%s' (one graph file only)", arg);
                return EXIT_USAGE;
            }
            opt->graph_path = arg;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
#define IS(opt_name) (len == strlen(opt_name) && strncmp(arg, opt_name, len) == 0)
        bool takes_value = IS("--input") || IS("--output-dir") || IS("--seed") ||
                           IS("--threads") || IS("--repeat") || IS("--warmup") ||
                           IS("--device") || IS("--batch-dir");
        const char *val = NULL;
        if (takes_value) {
            val = option_value(argc, argv, &i, eq);
            if (!val) {
                fail("option %.*s needs a value", (int)len, arg);
                return EXIT_USAGE;
            }
        } else if (eq) {
            fail("option %.*s takes no value", (int)len, arg);
            return EXIT_USAGE;
        }
        long long v = 0;
        if (IS("--help")) {
            opt->help = true;
        } else if (IS("--json")) {
            opt->json = true;
        } else if (IS("--quiet")) {
            opt->quiet = true;
        } else if (IS("--random-inputs")) {
            opt->random_inputs = true;
        } else if (IS("--input")) {
            const char *sep = strchr(val, '=');
            if (!sep || sep == val || !sep[1]) {
                fail("--input wants NAME=FILE.npy, got '%s'", val);
                return EXIT_USAGE;
            }
            struct input_arg *in = &opt->inputs[opt->n_inputs];
            size_t nlen = (size_t)(sep - val);
            for (int k = 0; k < opt->n_inputs; k++) {
                if (strlen(opt->inputs[k].name) == nlen &&
                    strncmp(opt->inputs[k].name, val, nlen) == 0) {
                    fail("--input %.*s given twice", (int)nlen, val);
                    return EXIT_USAGE;
                }
            }
            char *name = malloc(nlen + 1);
            if (!name) {
                fail("out of memory");
                return EXIT_EXEC;
            }
            memcpy(name, val, nlen);
            name[nlen] = '\0';
            in->name = name;
            in->path = sep + 1;
            opt->n_inputs++;
        } else if (IS("--output-dir")) {
            if (!*val) {
                fail("--output-dir needs a directory");
                return EXIT_USAGE;
            }
            opt->output_dir = val;
        } else if (IS("--batch-dir")) {
            if (!*val) {
                fail("--batch-dir needs a directory");
                return EXIT_USAGE;
            }
            opt->batch_dir = val;
        } else if (IS("--seed")) {
            if (!parse_u64(val, &opt->seed)) {
                fail("--seed wants a non-negative integer, got '%s'", val);
                return EXIT_USAGE;
            }
        } else if (IS("--device")) {
            if (strcmp(val, "cpu") == 0) {
                opt->device = -1;
            } else if (strcmp(val, "cuda") == 0) {
                opt->device = 0;
            } else if (strncmp(val, "cuda:", 5) == 0 && parse_int(val + 5, 0, 1023, &v)) {
                opt->device = (int)v;
            } else {
                fail("--device wants cpu, cuda or cuda:N, got '%s'", val);
                return EXIT_USAGE;
            }
        } else if (IS("--threads")) {
            if (!parse_int(val, 0, 4096, &v)) {
                fail("--threads wants an integer in 0..4096, got '%s'", val);
                return EXIT_USAGE;
            }
            opt->threads = (int)v;
        } else if (IS("--repeat")) {
            if (!parse_int(val, 1, 1000000, &v)) {
                fail("--repeat wants an integer in 1..1000000, got '%s'", val);
                return EXIT_USAGE;
            }
            opt->repeat = (int)v;
        } else if (IS("--warmup")) {
            if (!parse_int(val, 0, 1000000, &v)) {
                fail("--warmup wants an integer in 0..1000000, got '%s'", val);
                return EXIT_USAGE;
            }
            opt->warmup = (int)v;
        } else {
            fail("unknown option '%s' (see --help)", arg);
            return EXIT_USAGE;
        }
#undef IS
    }
    if (opt->help) return EXIT_OK;
    if (opt->batch_dir) {
        const char *clash = opt->graph_path     ? opt->graph_path
                            : opt->n_inputs > 0 ? "--input"
                            : opt->output_dir   ? "--output-dir"
                                                : NULL;
        if (clash) {
            fail("--batch-dir runs the graphs and inputs of its case directories: '%s' cannot "
                 "go with it",
                 clash);
            return EXIT_USAGE;
        }
    } else if (!opt->graph_path) {
        fail("no graph file given (see --help)");
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Inputs
 * ---------------------------------------------------------------------------------------- */

/* Whether tensor t fits the declaration of input value v (-1 dims match anything). */
static bool input_matches(const struct rtx_value *v, const struct rtx_tensor *t) {
    if (t->dtype != v->dtype || t->ndim != v->ndim) return false;
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i] >= 0 && v->dims[i] != t->dims[i]) return false;
    return true;
}

/* Binds every graph input; returns EXIT_OK or EXIT_INPUT (message printed). */
static int bind_inputs(struct run *r) {
    const struct rtx_graph *g = r->g;
    struct rtx_err err = {0};
    for (int k = 0; k < r->opt.n_inputs; k++) {
        const char *name = r->opt.inputs[k].name;
        int v = rtx_graph_find_value(g, name);
        int slot = -1;
        for (int i = 0; i < g->n_inputs && v >= 0; i++)
            if (g->inputs[i] == v) slot = i;
        if (slot < 0) {
            char list[512] = "";
            size_t pos = 0;
            for (int i = 0; i < g->n_inputs && pos < sizeof list; i++) {
                int w = snprintf(list + pos, sizeof list - pos, "%s%s", i ? ", " : "",
                                 g->values[g->inputs[i]].name);
                if (w > 0) pos += (size_t)w;
            }
            fail("--input %s: the graph has no input of that name (inputs: %s)", name,
                 g->n_inputs ? list : "none");
            return EXIT_INPUT;
        }
        struct rtx_tensor *t = NULL;
        if (rtx_npy_load(r->opt.inputs[k].path, &t, &err) < 0) {
            fail("input %s: %s", name, err.msg);
            return EXIT_INPUT;
        }
        r->inputs[slot] = t;
        const struct rtx_value *val = &g->values[v];
        if (!input_matches(val, t)) {
            char want[128], got[128];
            rtx_shape_str(val->dtype, val->ndim, val->dims, want, sizeof want);
            rtx_shape_str(t->dtype, t->ndim, t->dims, got, sizeof got);
            fail("input %s: declared %s, given %s (%s)", name, want, got, r->opt.inputs[k].path);
            return EXIT_INPUT;
        }
    }
    struct rtx_rng rng;
    rtx_rng_seed(&rng, r->opt.seed);
    for (int i = 0; i < g->n_inputs; i++) {
        if (r->inputs[i]) continue;
        const struct rtx_value *val = &g->values[g->inputs[i]];
        if (!r->opt.random_inputs) {
            fail("input %s not given (use --input %s=FILE.npy or --random-inputs)", val->name,
                 val->name);
            return EXIT_INPUT;
        }
        /* the declared shape may be anything: the limits before the allocation */
        struct rtx_limits lim = rtx_limits_default();
        int64_t n = 1;
        for (int d = 0; d < val->ndim; d++) {
            int64_t k = val->dims[d] < 0 ? 1 : val->dims[d];
            n = k && n > INT64_MAX / k ? INT64_MAX : n * k;
        }
        if (n > lim.max_elements || n > lim.max_tensor_bytes / (int64_t)rtx_dtype_size(val->dtype)) {
            fail("input %s: %" PRId64 " elements exceed the limit (%" PRId64 " elements, %" PRId64
                 " bytes per tensor)", val->name, n, lim.max_elements, lim.max_tensor_bytes);
            return EXIT_INPUT;
        }
        if (rtx_tensor_random(&rng, val->dtype, val->ndim, val->dims, &r->inputs[i], &err) <
            0) {
            fail("input %s: %s", val->name, err.msg);
            return EXIT_INPUT;
        }
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * Outputs
 * ---------------------------------------------------------------------------------------- */

static int save_outputs(struct run *r) {
    const struct rtx_graph *g = r->g;
    int rc = rtx_make_dirs(r->opt.output_dir);
    if (rc < 0) {
        fail("--output-dir %s: %s", r->opt.output_dir, strerror(-rc));
        return EXIT_EXEC;
    }
    struct rtx_err err = {0};
    for (int i = 0; i < g->n_outputs; i++) {
        r->files[i] = rtx_npy_output_path(r->opt.output_dir, g->values[g->outputs[i]].name,
                                          r->files, i);
        if (!r->files[i]) {
            fail("out of memory");
            return EXIT_EXEC;
        }
        if (rtx_npy_save(r->files[i], r->outputs[i], &err) < 0) {
            fail("output %s: %s", g->values[g->outputs[i]].name, err.msg);
            return EXIT_EXEC;
        }
    }
    return EXIT_OK;
}

static void print_values(const struct rtx_tensor *t) {
    int64_t n = rtx_tensor_numel(t);
    int64_t show = n < SHOW_VALUES ? n : SHOW_VALUES;
    fputs(" [", stdout);
    for (int64_t i = 0; i < show; i++) {
        double x = rtx_tensor_get(t, i);
        if (i) fputs(", ", stdout);
        if (rtx_dtype_is_float(t->dtype))
            printf("%.6g", x);
        else
            printf("%lld", (long long)x);
    }
    if (show < n) printf(", ... (%" PRId64 " values)", n);
    fputs("]\n", stdout);
}

/* ------------------------------------------------------------------------------------------
 * Reporting
 * ---------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct timing {
    double median, min, max; /* milliseconds */
};

static struct timing summarize(const double *times, int n) {
    struct timing t = {0, 0, 0};
    double *s = malloc(sizeof *s * (size_t)n);
    if (!s || n == 0) {
        free(s);
        return t;
    }
    memcpy(s, times, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    t.min = s[0];
    t.max = s[n - 1];
    t.median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
    free(s);
    return t;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_len(const unsigned char *s) {
    static const struct {
        unsigned char lo, hi;
        int n;
        unsigned min;
    } leads[] = {
        {0xc2, 0xdf, 2, 0x80},
        {0xe0, 0xef, 3, 0x800},
        {0xf0, 0xf4, 4, 0x10000},
    };
    if (s[0] < 0x80) return 1;
    for (size_t k = 0; k < sizeof leads / sizeof leads[0]; k++) {
        if (s[0] < leads[k].lo || s[0] > leads[k].hi) continue;
        int n = leads[k].n;
        unsigned cp = s[0] & (0x3fu >> (n - 1));
        for (int i = 1; i < n; i++) {
            if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
            cp = cp << 6 | (s[i] & 0x3fu);
        }
        if (cp < leads[k].min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        return n;
    }
    return 0;
}

/* A JSON string literal (invalid UTF-8 bytes become U+FFFD). */
static void json_string(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        unsigned c = *s;
        int n = 1;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c == '\t') {
            fputs("\\t", stdout);
        } else if (c == '\r') {
            fputs("\\r", stdout);
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\u%04x", c);
        } else if ((n = utf8_len(s)) == 0) {
            fputs("\\ufffd", stdout);
            n = 1;
        } else {
            fwrite(s, 1, (size_t)n, stdout);
        }
        s += n;
    }
    putchar('"');
}

static void report_json(const struct run *r, struct timing tm) {
    const struct rtx_graph *g = r->g;
    if (r->case_name) {
        fputs("{\"case\": ", stdout);
        json_string(r->case_name);
        fputs(", \"exit\": 0, \"graph\": ", stdout);
    } else {
        fputs("{\"graph\": ", stdout);
    }
    json_string(g->name);
    fputs(", \"outputs\": [", stdout);
    for (int i = 0; i < g->n_outputs; i++) {
        const struct rtx_tensor *t = r->outputs[i];
        fputs(i ? ", {\"name\": " : "{\"name\": ", stdout);
        json_string(g->values[g->outputs[i]].name);
        fputs(", \"dtype\": ", stdout);
        json_string(rtx_dtype_name(t->dtype));
        fputs(", \"shape\": [", stdout);
        for (int d = 0; d < t->ndim; d++)
            printf(d ? ", %" PRId64 : "%" PRId64, t->dims[d]);
        fputs("], \"file\": ", stdout);
        if (r->files[i])
            json_string(r->files[i]);
        else
            fputs("null", stdout);
        putchar('}');
    }
    printf("], \"time_ms\": {\"median\": %.6f, \"min\": %.6f, \"max\": %.6f, \"runs\": %d}",
           tm.median, tm.min, tm.max, r->opt.repeat);
    fputs(", \"ops\": {", stdout); /* node count per op: what the graph runs */
    int n_ops = 0;
    for (int op = 0; op < RTX_OP_COUNT; op++) {
        int k = 0;
        for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == (enum rtx_op)op;
        if (k) printf("%s\"%s\": %d", n_ops++ ? ", " : "", rtx_op_name((enum rtx_op)op), k);
    }
    putchar('}');
    printf(", \"peak_bytes\": %zu, \"arena_bytes\": %zu, \"unplanned_bytes\": %zu}\n",
           r->peak_bytes, rtx_plan_arena_bytes(r->plan), rtx_plan_unplanned_bytes(r->plan));
}

static void report_text(const struct run *r, struct timing tm) {
    const struct rtx_graph *g = r->g;
    if (r->case_name) printf("case %s: ok\n", r->case_name);
    if (!r->opt.quiet) {
        printf("graph %s: %d inputs, %d outputs, %d nodes\n", g->name, g->n_inputs, g->n_outputs,
               g->n_nodes);
        for (int i = 0; i < g->n_outputs; i++) {
            const struct rtx_tensor *t = r->outputs[i];
            char shape[128];
            rtx_shape_str(t->dtype, t->ndim, t->dims, shape, sizeof shape);
            printf("output %s: %s", g->values[g->outputs[i]].name, shape);
            print_values(t);
            if (r->files[i]) printf("  saved to %s\n", r->files[i]);
        }
    }
    printf("time: median %.3f ms, min %.3f ms, max %.3f ms over %d run%s\n", tm.median, tm.min,
           tm.max, r->opt.repeat, r->opt.repeat == 1 ? "" : "s");
    printf("memory: peak %zu bytes, arena %zu bytes, unplanned %zu bytes\n", r->peak_bytes,
           rtx_plan_arena_bytes(r->plan), rtx_plan_unplanned_bytes(r->plan));
}

/* ------------------------------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------------------------- */

static double now_ms(void) { return (double)rtx_mono_ns() / 1e6; }

static void unref_all(struct rtx_tensor **ts, int n) {
    for (int i = 0; ts && i < n; i++) {
        rtx_tensor_unref(ts[i]);
        ts[i] = NULL;
    }
}

/* Warm-up and timed runs; the outputs of the last run stay in r->outputs. */
static int execute(struct run *r) {
    const struct rtx_graph *g = r->g;
    struct rtx_err err = {0};
    int total = r->opt.warmup + r->opt.repeat;
    for (int k = 0; k < total; k++) {
        unref_all(r->outputs, g->n_outputs);
        struct rtx_exec_stats stats = {0};
        double t0 = now_ms();
        int rc = rtx_plan_execute(r->plan, *r->be, r->inputs, g->n_inputs, r->outputs,
                                  g->n_outputs, NULL, &stats, &err);
        double t1 = now_ms();
        if (rc < 0) {
            fail("execution failed: %s", err.msg);
            return EXIT_EXEC;
        }
        if (stats.peak_bytes > r->peak_bytes) r->peak_bytes = stats.peak_bytes;
        if (k >= r->opt.warmup) r->times_ms[k - r->opt.warmup] = t1 - t0;
    }
    return EXIT_OK;
}

static bool is_onnx_path(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".onnx");
}

/* An ONNX model: its inputs bound through a graph that only declares them (symbolic
 * dimensions -1), then the model instantiated for those inputs' shapes. */
static int load_onnx(struct run *r, const struct rtx_limits *lim) {
    struct rtx_err err = {0};
    struct rtx_onnx_model *m = NULL;
    if (rtx_onnx_load_file(r->opt.graph_path, lim, &m, &err) < 0) {
        fail("%s", err.msg);
        return EXIT_GRAPH;
    }
    int rc = EXIT_OK;
    if (rtx_graph_new(rtx_onnx_graph_name(m), &r->g, &err) < 0) rc = EXIT_EXEC;
    for (int i = 0; rc == EXIT_OK && i < rtx_onnx_n_inputs(m); i++) {
        const struct rtx_onnx_io *io = rtx_onnx_input(m, i);
        if (rtx_graph_add_input(r->g, io->name, io->dtype, io->ndim, io->dims, &err) < 0)
            rc = EXIT_GRAPH;
    }
    if (rc == EXIT_OK && !(r->inputs = calloc((size_t)r->g->n_inputs + 1, sizeof *r->inputs)))
        rc = EXIT_EXEC;
    if (rc == EXIT_OK) rc = bind_inputs(r);
    struct rtx_graph *g = NULL;
    if (rc == EXIT_OK &&
        rtx_onnx_instantiate(m, (const struct rtx_tensor *const *)r->inputs, r->g->n_inputs, lim,
                             &g, &err) < 0) {
        fail("%s", err.msg);
        rc = EXIT_GRAPH;
    }
    if (rc == EXIT_EXEC) fail("%s: %s", r->opt.graph_path, err.msg[0] ? err.msg : "out of memory");
    if (g) {
        rtx_graph_free(r->g);
        r->g = g;
    }
    rtx_onnx_free(m);
    return rc;
}

static int run_graph(struct run *r) {
    struct rtx_err err = {0};
    struct rtx_limits lim = rtx_limits_default();
    int rc;
    if (is_onnx_path(r->opt.graph_path)) {
        if ((rc = load_onnx(r, &lim)) != EXIT_OK) return rc;
    } else {
        if (rtx_graph_load_file(r->opt.graph_path, &lim, &r->g, &err) < 0) {
            fail("%s", err.msg);
            return EXIT_GRAPH;
        }
        if (rtx_graph_validate(r->g, &lim, &err) < 0) {
            fail("%s: %s", r->opt.graph_path, err.msg);
            return EXIT_GRAPH;
        }
        r->inputs = calloc((size_t)r->g->n_inputs + 1, sizeof *r->inputs);
    }
    const struct rtx_graph *g = r->g;
    r->outputs = calloc((size_t)g->n_outputs + 1, sizeof *r->outputs);
    r->files = calloc((size_t)g->n_outputs + 1, sizeof *r->files);
    r->times_ms = calloc((size_t)r->opt.repeat, sizeof *r->times_ms);
    if (!r->inputs || !r->outputs || !r->files || !r->times_ms) {
        fail("out of memory");
        return EXIT_EXEC;
    }
    if (!is_onnx_path(r->opt.graph_path) && (rc = bind_inputs(r)) != EXIT_OK) return rc;
    if (rtx_plan_new(g, (const struct rtx_tensor *const *)r->inputs, g->n_inputs, &lim, &r->plan,
                     &err) < 0) {
        fail("%s: %s", r->opt.graph_path, err.msg);
        return EXIT_GRAPH;
    }
    if (!*r->be && r->opt.device < 0) {
        struct rtx_cpu_options cpu = {.n_threads = r->opt.threads};
        if (rtx_backend_cpu_new(&cpu, r->be, &err) < 0) {
            r->be_failed = true;
            fail("CPU backend: %s", err.msg);
            return EXIT_EXEC;
        }
    } else if (!*r->be) {
        struct rtx_cuda_options cuda = {.device = r->opt.device};
        if (rtx_backend_cuda_new(&cuda, r->be, &err) < 0) {
            r->be_failed = true;
            fail("CUDA backend: %s", err.msg);
            return EXIT_EXEC;
        }
    }
    if ((rc = execute(r)) != EXIT_OK) return rc;
    if (r->opt.output_dir && (rc = save_outputs(r)) != EXIT_OK) return rc;
    struct timing tm = summarize(r->times_ms, r->opt.repeat);
    if (r->opt.json)
        report_json(r, tm);
    else
        report_text(r, tm);
    if (fflush(stdout) != 0) {
        fail("writing to stdout: %s", strerror(errno));
        return EXIT_EXEC;
    }
    return EXIT_OK;
}

static void run_free(struct run *r) {
    if (r->g) {
        unref_all(r->inputs, r->g->n_inputs);
        unref_all(r->outputs, r->g->n_outputs);
        for (int i = 0; r->files && i < r->g->n_outputs; i++)
            free(r->files[i]);
    }
    free(r->inputs);
    free(r->outputs);
    free(r->files);
    free(r->times_ms);
    rtx_plan_free(r->plan);
    rtx_graph_free(r->g);
    for (int i = 0; i < r->opt.n_inputs; i++)
        free((char *)r->opt.inputs[i].name);
    free(r->opt.inputs);
}

/* ------------------------------------------------------------------------------------------
 * Batch mode
 * ---------------------------------------------------------------------------------------- */

/* A growable list of heap strings. */
struct names {
    char **v;
    int n, cap;
};

static void names_free(struct names *l) {
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (struct names){0};
}

/* Appends a copy of the first len bytes of s; false when out of memory. */
static bool names_add(struct names *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return false;
    memcpy(c, s, len);
    c[len] = '\0';
    l->v[l->n++] = c;
    return true;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "a/b" in a new heap string, or NULL when out of memory. */
static char *path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lists dir's entries not starting with '.' into out, sorted; dirs_only keeps directories.
 * Returns 0, or -errno (opendir/readdir) or -ENOMEM; out is emptied on failure. */
static int list_dir(const char *dir, bool dirs_only, struct names *out) {
    DIR *d = opendir(dir);
    if (!d) return -errno;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            rc = -errno;
            break;
        }
        if (e->d_name[0] == '.') continue;
        if (dirs_only) {
            char *p = path_join(dir, e->d_name);
            bool keep = p && is_dir(p);
            free(p);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            if (!keep) continue;
        }
        if (!names_add(out, e->d_name, strlen(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
    }
    closedir(d);
    if (rc < 0) {
        names_free(out);
        return rc;
    }
    if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str);
    return 0;
}

/* Fills r->opt.inputs from case_dir/inputs/NAME.npy (no such folder: no inputs). Returns
 * EXIT_OK, EXIT_INPUT or EXIT_EXEC (message printed); the paths are kept in paths. */
static int batch_inputs(struct run *r, const char *case_dir, struct names *paths) {
    char *in_dir = path_join(case_dir, "inputs");
    if (!in_dir) {
        fail("out of memory");
        return EXIT_EXEC;
    }
    struct names files = {0};
    int rc = is_dir(in_dir) ? list_dir(in_dir, false, &files) : 0;
    if (rc < 0) {
        fail("%s: %s", in_dir, strerror(-rc));
        free(in_dir);
        return rc == -ENOMEM ? EXIT_EXEC : EXIT_INPUT;
    }
    int out = EXIT_OK;
    r->opt.inputs = calloc((size_t)files.n + 1, sizeof *r->opt.inputs);
    if (!r->opt.inputs) out = EXIT_EXEC;
    for (int i = 0; out == EXIT_OK && i < files.n; i++) {
        const char *f = files.v[i];
        size_t len = strlen(f);
        if (len <= 4 || strcmp(f + len - 4, ".npy") != 0) {
            fail("%s/%s: not an input file (inputs/ holds NAME.npy per graph input)", in_dir, f);
            out = EXIT_INPUT;
            break;
        }
        struct names name = {0};
        char *path = path_join(in_dir, f);
        if (!path || !names_add(&name, f, len - 4) || !names_add(paths, path, strlen(path))) {
            free(path);
            names_free(&name);
            out = EXIT_EXEC;
            break;
        }
        free(path);
        r->opt.inputs[r->opt.n_inputs].name = name.v[0]; /* run_free frees it */
        r->opt.inputs[r->opt.n_inputs].path = paths->v[paths->n - 1];
        r->opt.n_inputs++;
        free(name.v);
    }
    if (out == EXIT_EXEC) fail("out of memory");
    names_free(&files);
    free(in_dir);
    return out;
}

/* Runs one case directory; returns its exit status (message printed). */
static int batch_case(const struct options *opt, const char *name, struct rtx_backend **be,
                      bool *be_failed) {
    int rc = EXIT_EXEC;
    struct run r = {.opt = *opt, .be = be, .case_name = name};
    r.opt.inputs = NULL;
    r.opt.n_inputs = 0;
    r.opt.batch_dir = NULL;
    struct names paths = {0};
    char *case_dir = path_join(opt->batch_dir, name);
    /* the case's graph: graph.rtxg, or an ONNX model as model.onnx */
    char *graph = case_dir ? path_join(case_dir, "model.onnx") : NULL;
    struct stat st;
    if (graph && stat(graph, &st) != 0) {
        free(graph);
        graph = path_join(case_dir, "graph.rtxg");
    }
    char *out_dir = case_dir ? path_join(case_dir, "out") : NULL;
    if (!case_dir || !graph || !out_dir) {
        fail("out of memory");
    } else if ((rc = batch_inputs(&r, case_dir, &paths)) == EXIT_OK) {
        r.opt.graph_path = graph;
        r.opt.output_dir = out_dir;
        rc = run_graph(&r);
    }
    *be_failed = r.be_failed;
    run_free(&r);
    names_free(&paths);
    free(out_dir);
    free(graph);
    free(case_dir);
    return rc;
}

/* --batch-dir: every case directory in name order; returns the batch's exit status. */
static int run_batch(const struct options *opt, struct rtx_backend **be) {
    struct names cases = {0};
    int rc = list_dir(opt->batch_dir, true, &cases);
    if (rc < 0) {
        fail("--batch-dir %s: %s", opt->batch_dir, strerror(-rc));
        return rc == -ENOMEM ? EXIT_EXEC : EXIT_INPUT;
    }
    int n_ok = 0, n_failed = 0;
    for (int i = 0; i < cases.n; i++) {
        current_case = cases.v[i];
        last_error[0] = '\0';
        bool be_failed = false;
        int crc = batch_case(opt, cases.v[i], be, &be_failed);
        current_case = NULL;
        if (crc == EXIT_OK) {
            n_ok++;
        } else {
            n_failed++;
            if (opt->json) {
                fputs("{\"case\": ", stdout);
                json_string(cases.v[i]);
                printf(", \"exit\": %d, \"error\": ", crc);
                json_string(last_error);
                fputs("}\n", stdout);
            } else {
                printf("case %s: failed (exit %d): %s\n", cases.v[i], crc, last_error);
            }
        }
        fflush(stdout);
        if (be_failed) {
            fail("--batch-dir %s: stopped after case %s: the backend could not be opened",
                 opt->batch_dir, cases.v[i]);
            break;
        }
    }
    if (opt->json) {
        fputs("{\"batch\": ", stdout);
        json_string(opt->batch_dir);
        printf(", \"cases\": %d, \"ok\": %d, \"failed\": %d}\n", cases.n, n_ok, n_failed);
    } else {
        printf("batch %s: %d cases, %d ok, %d failed\n", opt->batch_dir, cases.n, n_ok,
               n_failed);
    }
    bool all_ran = n_ok == cases.n;
    names_free(&cases);
    if (fflush(stdout) != 0) {
        fail("writing to stdout: %s", strerror(errno));
        return EXIT_EXEC;
    }
    return all_ran ? EXIT_OK : EXIT_EXEC;
}

int main(int argc, char **argv) {
    rtx_host_memory_keep_freed();
    struct rtx_backend *be = NULL;
    struct run r = {.be = &be};
    int rc = parse_args(argc, argv, &r.opt);
    if (rc == EXIT_OK && r.opt.help)
        fputs(usage_text, stdout);
    else if (rc == EXIT_OK && r.opt.batch_dir)
        rc = run_batch(&r.opt, &be);
    else if (rc == EXIT_OK)
        rc = run_graph(&r);
    run_free(&r);
    rtx_backend_free(be);
    return rc;
}
