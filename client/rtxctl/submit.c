/*
 * submit.c - rtxctl's commands that move tensors between local files and the daemon: submit (a
 * graph file with .npy or random inputs, optionally waiting and writing the outputs) and outputs
 * (a succeeded job's outputs as .npy files).
 *
 * DESIGN
 * These are the only commands that need rtxd's runtime library (runtime/runtime.h): for .npy files
 * and for random inputs of every dtype. Runtime tensors and librtx tensors convert without copying
 * (both are dense row-major buffers). Inputs are read and bound before the daemon is contacted, so
 * a bad file never costs a call.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"
#include "onnx/onnx.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------------------------------
 * Outputs to .npy files
 * ---------------------------------------------------------------------------------------- */

/* The runtime dtype of a librtx dtype (the names are the same). */
static bool runtime_dtype(enum rtx_client_dtype dt, enum rtx_dtype *out) {
    return rtx_dtype_from_name(rtx_client_dtype_name(dt), out) == 0;
}

/* Writes every tensor to DIR/NAME.npy; files[i] receives each path (free them). Returns
 * EXIT_OK or EXIT_LOCAL (message printed). */
static int write_outputs(const char *dir, const struct rtx_client_tensor *ts, int n,
                         char **files) {
    int rc = rtx_make_dirs(dir);
    if (rc < 0) {
        ctl_msg("output directory %s: %s", dir, strerror(-rc));
        return EXIT_LOCAL;
    }
    for (int i = 0; i < n; i++) {
        const struct rtx_client_tensor *ct = &ts[i];
        files[i] = rtx_npy_output_path(dir, ct->name ? ct->name : "", files, i);
        if (!files[i]) {
            ctl_msg("output %s: out of memory", ct->name);
            return EXIT_LOCAL;
        }
        enum rtx_dtype dt;
        if (!runtime_dtype(ct->dtype, &dt)) {
            ctl_msg("output %s: dtype %d cannot be saved", ct->name, (int)ct->dtype);
            return EXIT_LOCAL;
        }
        static char empty_data[1];
        struct rtx_tensor *t = NULL;
        struct rtx_err err = {0};
        if (rtx_tensor_wrap(dt, ct->ndim, ct->dims, ct->data ? ct->data : empty_data, ct->bytes,
                            NULL, NULL, &t, &err) < 0 ||
            rtx_npy_save(files[i], t, &err) < 0) {
            rtx_tensor_unref(t);
            ctl_msg("output %s: %s", ct->name, err.msg);
            return EXIT_LOCAL;
        }
        rtx_tensor_unref(t);
    }
    return EXIT_OK;
}

/* Fetches the outputs of job_id and writes them to dir. What was written goes to *files_json
 * as a JSON array when files_json is not NULL, else it is printed as a table. */
static int fetch_outputs(struct ctl *ctl, const char *job_id, const char *dir,
                         json_t **files_json) {
    struct rtx_client_tensor *ts = NULL;
    int n = 0;
    struct rtx_client_err err;
    if (rtx_client_get_outputs(ctl->client, job_id, &ts, &n, &err) < 0) {
        char what[160];
        snprintf(what, sizeof what, "outputs of job %s", job_id);
        return ctl_call_failed(ctl, what, &err);
    }
    char **files = ctl_calloc((size_t)n, sizeof *files);
    int rc = write_outputs(dir, ts, n, files);
    if (rc == EXIT_OK && files_json) {
        json_t *list = ctl_json_array();
        for (int i = 0; i < n; i++) {
            json_t *item = ctl_json_object();
            ctl_json_append(list, item);
            ctl_json_set_str(item, "name", ts[i].name);
            ctl_json_set_str(item, "dtype", rtx_client_dtype_name(ts[i].dtype));
            ctl_json_set(item, "shape", ctl_json_shape(ts[i].ndim, ts[i].dims));
            ctl_json_set_int(item, "bytes", (int64_t)ts[i].bytes);
            ctl_json_set_str(item, "file", files[i]);
        }
        *files_json = list;
    } else if (rc == EXIT_OK) {
        static const char *const headers[] = {"OUTPUT", "SHAPE", "BYTES", "FILE"};
        struct ctl_table t = {.ncols = 4, .headers = headers};
        for (int i = 0; i < n; i++) {
            char shape[256];
            ctl_table_add(&t, "%s", ts[i].name);
            ctl_table_add(&t, "%s",
                          ctl_fmt_shape(ts[i].dtype, ts[i].ndim, ts[i].dims, shape, sizeof shape));
            ctl_table_add(&t, "%zu", ts[i].bytes);
            ctl_table_add(&t, "%s", files[i]);
        }
        if (n == 0)
            printf("job %s has no outputs\n", job_id);
        else
            ctl_table_print(&t, 0);
        ctl_table_free(&t);
    }
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    rtx_client_tensors_free(ts, n);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Commands: submit
 * ---------------------------------------------------------------------------------------- */

struct input_arg {
    const char *name; /* points into the argument; name_len bytes */
    size_t name_len;
    const char *path;
};

struct submit_args {
    const char *graph_path;
    struct input_arg *inputs;
    int n_inputs;
    bool random_inputs;
    uint64_t seed;
    const char *lane;
    struct ctl_labels labels;
    int64_t deadline_ms; /* relative; 0: none */
    const char *idempotency_key;
    enum rtx_client_restart_policy policy;
    const char *device;
    bool wait;
    const char *output_dir;
};

static int parse_submit(int argc, char **argv, struct submit_args *a) {
    const char *cmd = "submit ";
    a->inputs = ctl_calloc((size_t)argc, sizeof *a->inputs);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int m;
        if (strcmp(arg, "--random-inputs") == 0) {
            a->random_inputs = true;
        } else if (strcmp(arg, "--wait") == 0) {
            a->wait = true;
        } else if ((m = ctl_opt_value(cmd, "--input", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1])
                return ctl_usage_error(cmd, "--input wants NAME=FILE.npy, got '%s'", v);
            size_t n = (size_t)(eq - v);
            for (int k = 0; k < a->n_inputs; k++)
                if (a->inputs[k].name_len == n && strncmp(a->inputs[k].name, v, n) == 0)
                    return ctl_usage_error(cmd, "--input %.*s given twice", (int)n, v);
            a->inputs[a->n_inputs++] = (struct input_arg){v, n, eq + 1};
        } else if ((m = ctl_opt_value(cmd, "--seed", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_u64(v, &a->seed))
                return ctl_usage_error(cmd, "--seed wants a non-negative integer, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--lane", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(cmd, "--lane needs a lane name");
            a->lane = v;
        } else if ((m = ctl_opt_value(cmd, "--label", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_labels_add(&a->labels, v))
                return ctl_usage_error(cmd, "--label wants KEY=VALUE, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--deadline-ms", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, (int64_t)1 << 40, &a->deadline_ms))
                return ctl_usage_error(cmd,
                                       "--deadline-ms wants milliseconds from now (1 or "
                                       "more), got '%s'",
                                       v);
        } else if ((m = ctl_opt_value(cmd, "--idempotency-key", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(cmd, "--idempotency-key needs a key");
            a->idempotency_key = v;
        } else if ((m = ctl_opt_value(cmd, "--restart-policy", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (strcmp(v, "rerun") == 0)
                a->policy = RTX_CLIENT_RESTART_RERUN;
            else if (strcmp(v, "fail") == 0)
                a->policy = RTX_CLIENT_RESTART_FAIL;
            else
                return ctl_usage_error(cmd, "--restart-policy wants rerun or fail, got '%s'", v);
        } else if ((m = ctl_opt_value(cmd, "--device", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(cmd, "--device needs auto, cpu, cuda or cuda:N");
            a->device = v;
        } else if ((m = ctl_opt_value(cmd, "--output-dir", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(cmd, "--output-dir needs a directory");
            a->output_dir = v;
            a->wait = true;
        } else {
            int p = ctl_positional(cmd, arg, &a->graph_path, "graph file");
            if (p < 0) return EXIT_USAGE;
            if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", arg);
        }
    }
    if (!a->graph_path) return ctl_usage_error(cmd, "no graph file given");
    return EXIT_OK;
}

/* Inputs prepared for Submit: runtime tensors (from .npy files or random) and librtx views
 * of them. */
struct bound_inputs {
    int n;
    struct rtx_tensor **tensors;
    struct rtx_client_tensor *views;
    char **names;
};

static void bound_inputs_free(struct bound_inputs *b) {
    for (int i = 0; i < b->n; i++) {
        rtx_tensor_unref(b->tensors[i]);
        free(b->names[i]);
    }
    free(b->tensors);
    free(b->views);
    free(b->names);
}

/* Views runtime tensor t (contiguous) as the librtx tensor named `name`. */
static bool view_tensor(const char *name, const struct rtx_tensor *t,
                        struct rtx_client_tensor *out) {
    memset(out, 0, sizeof *out);
    if (rtx_client_dtype_from_name(rtx_dtype_name(t->dtype), &out->dtype) < 0 ||
        t->ndim > RTX_CLIENT_MAX_DIMS || !rtx_tensor_is_contiguous(t))
        return false;
    out->name = name;
    out->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        out->dims[i] = t->dims[i];
    out->data = rtx_tensor_data(t);
    out->bytes = rtx_tensor_nbytes(t);
    return true;
}

/* Fills a new random tensor for a declared input (dims of -1 become 1). */
static int random_input(const struct rtx_client_value_info *vi, struct rtx_rng *r,
                        struct rtx_tensor **out) {
    if (vi->ndim < 0)
        return ctl_usage_error("submit ",
                               "input %s declares no shape: give it with --input %s=FILE",
                               vi->name, vi->name);
    enum rtx_dtype dt;
    if (!runtime_dtype(vi->dtype, &dt)) {
        ctl_msg("input %s: dtype %s cannot be generated", vi->name,
                rtx_client_dtype_name(vi->dtype));
        return EXIT_LOCAL;
    }
    struct rtx_err err = {0};
    if (rtx_tensor_random(r, dt, vi->ndim, vi->dims, out, &err) < 0) {
        ctl_msg("input %s: %s", vi->name, err.msg);
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

/* What is submitted: a graph file, or an ONNX model's bytes with its declared inputs. */
struct submitted {
    struct rtx_client_graph *g;
    struct rtx_onnx_model *onnx;
    void *onnx_bytes;
    size_t onnx_len;
    int n_inputs;
    struct rtx_client_value_info *decl; /* the declared inputs (names owned by g or onnx) */
};

static void submitted_free(struct submitted *s) {
    rtx_client_graph_free(s->g);
    rtx_onnx_free(s->onnx);
    free(s->onnx_bytes);
    free(s->decl);
}

static bool is_onnx_path(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".onnx");
}

/* Loads the graph file or the ONNX model (read whole: it travels in the request) and its
 * input declarations. */
static int load_submitted(const char *path, struct submitted *s) {
    if (!is_onnx_path(path)) {
        struct rtx_client_err err;
        if (rtx_client_graph_load(path, &s->g, &err) < 0) {
            ctl_msg("%s", err.msg);
            return EXIT_LOCAL;
        }
        s->n_inputs = rtx_client_graph_n_inputs(s->g);
        s->decl = ctl_calloc((size_t)s->n_inputs + 1, sizeof *s->decl);
        for (int i = 0; i < s->n_inputs; i++)
            if (rtx_client_graph_input(s->g, i, &s->decl[i], &err) < 0) {
                ctl_msg("%s: %s", path, err.msg);
                return EXIT_LOCAL;
            }
        return EXIT_OK;
    }
    struct rtx_err err = {0};
    if (rtx_onnx_load_file(path, NULL, &s->onnx, &err) < 0) {
        ctl_msg("%s", err.msg);
        return EXIT_LOCAL;
    }
    FILE *f = fopen(path, "rb");
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (f && len > 0 && fseek(f, 0, SEEK_SET) == 0) {
        s->onnx_bytes = ctl_calloc((size_t)len, 1);
        s->onnx_len = fread(s->onnx_bytes, 1, (size_t)len, f);
    }
    if (f) fclose(f);
    if (len <= 0 || s->onnx_len != (size_t)len) {
        ctl_msg("%s: cannot read the file", path);
        return EXIT_LOCAL;
    }
    s->n_inputs = rtx_onnx_n_inputs(s->onnx);
    s->decl = ctl_calloc((size_t)s->n_inputs + 1, sizeof *s->decl);
    for (int i = 0; i < s->n_inputs; i++) {
        const struct rtx_onnx_io *io = rtx_onnx_input(s->onnx, i);
        s->decl[i].name = io->name;
        s->decl[i].ndim = io->ndim;
        memcpy(s->decl[i].dims, io->dims, sizeof io->dims[0] * (size_t)io->ndim);
        if (rtx_client_dtype_from_name(rtx_dtype_name(io->dtype), &s->decl[i].dtype) < 0) {
            ctl_msg("%s: input %s has dtype %s, which librtx cannot send", path, io->name,
                    rtx_dtype_name(io->dtype));
            return EXIT_LOCAL;
        }
    }
    return EXIT_OK;
}

/* Binds every declared input from --input files or random data. */
static int bind_inputs(const struct submit_args *a, const struct submitted *s,
                       struct bound_inputs *b) {
    const char *cmd = "submit ";
    int n = s->n_inputs;
    b->tensors = ctl_calloc((size_t)n, sizeof *b->tensors);
    b->views = ctl_calloc((size_t)n, sizeof *b->views);
    b->names = ctl_calloc((size_t)n, sizeof *b->names);
    b->n = n;
    const struct rtx_client_value_info *decl = s->decl;
    int rc = EXIT_OK;
    for (int k = 0; k < a->n_inputs && rc == EXIT_OK; k++) {
        const struct input_arg *in = &a->inputs[k];
        int slot = -1;
        for (int i = 0; i < n; i++)
            if (strlen(decl[i].name) == in->name_len &&
                strncmp(decl[i].name, in->name, in->name_len) == 0)
                slot = i;
        if (slot < 0) {
            char list[512] = "";
            size_t pos = 0;
            for (int i = 0; i < n && pos < sizeof list; i++)
                pos += (size_t)snprintf(list + pos, sizeof list - pos, "%s%s", i ? ", " : "",
                                        decl[i].name);
            rc = ctl_usage_error(cmd,
                                 "--input %.*s: the graph has no input of that name (inputs: %s)",
                                 (int)in->name_len, in->name, n ? list : "none");
            break;
        }
        struct rtx_err err = {0};
        if (rtx_npy_load(in->path, &b->tensors[slot], &err) < 0) {
            ctl_msg("input %.*s: %s", (int)in->name_len, in->name, err.msg);
            rc = EXIT_LOCAL;
        }
    }
    struct rtx_rng rng;
    rtx_rng_seed(&rng, a->seed);
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        if (b->tensors[i]) continue;
        if (!a->random_inputs) {
            rc = ctl_usage_error(cmd,
                                 "input %s not given (use --input %s=FILE.npy or "
                                 "--random-inputs)",
                                 decl[i].name, decl[i].name);
            break;
        }
        rc = random_input(&decl[i], &rng, &b->tensors[i]);
    }
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        b->names[i] = ctl_strdup(decl[i].name);
        if (!view_tensor(b->names[i], b->tensors[i], &b->views[i])) {
            ctl_msg("input %s: the tensor cannot be sent", decl[i].name);
            rc = EXIT_LOCAL;
        }
    }
    return rc;
}

int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv) {
    struct submit_args a = {0};
    struct submitted sub = {0};
    struct bound_inputs b = {0};
    struct rtx_client_job *job = NULL;
    struct rtx_client_err err;
    int rc = parse_submit(argc, argv, &a);
    if (rc == EXIT_OK) rc = load_submitted(a.graph_path, &sub);
    if (rc == EXIT_OK) rc = bind_inputs(&a, &sub, &b);
    if (rc == EXIT_OK) rc = ctl_connect(ctl);
    char job_id[RTX_CLIENT_JOB_ID_MAX] = "";
    bool dedup = false;
    if (rc == EXIT_OK) {
        struct rtx_client_submit_options opt = {
            .lane = a.lane,
            .deadline_unix_ms = a.deadline_ms ? ctl_now_unix_ms() + a.deadline_ms : 0,
            .labels = a.labels.v,
            .n_labels = a.labels.n,
            .idempotency_key = a.idempotency_key,
            .restart_policy = a.policy,
            .device = a.device,
        };
        int src = sub.g ? rtx_client_submit(ctl->client, sub.g, b.views, b.n, &opt, job_id,
                                            &dedup, &err)
                        : rtx_client_submit_onnx(ctl->client, sub.onnx_bytes, sub.onnx_len,
                                                 b.views, b.n, &opt, job_id, &dedup, &err);
        if (src < 0) {
            char what[512];
            snprintf(what, sizeof what, "submit %s", a.graph_path);
            rc = ctl_call_failed(ctl, what, &err);
        }
    }
    if (rc == EXIT_OK && !ctl->json) {
        if (dedup)
            printf("%s (an existing job: idempotency key %s)\n", job_id, a.idempotency_key);
        else
            printf("submitted %s\n", job_id);
        fflush(stdout);
    }
    /* Once the job exists its id is printed whatever happens next (with --json: the object
     * has null for a wait or outputs that failed; the exit status says why). */
    if (rc == EXIT_OK && a.wait) {
        rc = ctl_wait_job(ctl, job_id, -1, &job);
        if (rc == EXIT_OK) rc = ctl_state_exit(job->state);
    }
    bool outputs = job && job->state == RTX_CLIENT_JOB_SUCCEEDED && a.output_dir;
    if (*job_id && ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "job_id", job_id);
        ctl_json_set_bool(doc, "deduplicated", dedup);
        if (a.wait) ctl_json_set(doc, "job", job ? ctl_job_json(job) : json_null());
        if (a.output_dir) {
            json_t *files = NULL;
            int orc = outputs ? fetch_outputs(ctl, job_id, a.output_dir, &files) : EXIT_OK;
            if (orc != EXIT_OK) rc = orc;
            ctl_json_set(doc, "outputs", files ? files : json_null());
        }
        ctl_json_print(doc);
    } else if (outputs) {
        rc = fetch_outputs(ctl, job_id, a.output_dir, NULL);
    }
    rtx_client_job_free(job);
    bound_inputs_free(&b);
    submitted_free(&sub);
    ctl_labels_free(&a.labels);
    free(a.inputs);
    return rc;
}

int ctl_cmd_outputs(struct ctl *ctl, int argc, char **argv) {
    const char *cmd = "outputs ", *job_id = NULL, *dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m = ctl_opt_value(cmd, "--dir", argc, argv, &i, &v);
        if (m < 0) return EXIT_USAGE;
        if (m > 0) {
            if (!*v) return ctl_usage_error(cmd, "--dir needs a directory");
            dir = v;
            continue;
        }
        int p = ctl_positional(cmd, argv[i], &job_id, "job id");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!job_id) return ctl_usage_error(cmd, "no job id given");
    if (!dir) return ctl_usage_error(cmd, "no output directory given (--dir DIR)");
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    if (!ctl->json) return fetch_outputs(ctl, job_id, dir, NULL);
    json_t *files = NULL;
    rc = fetch_outputs(ctl, job_id, dir, &files);
    if (files) ctl_json_print(files);
    return rc;
}
