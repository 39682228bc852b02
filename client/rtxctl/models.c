/*
 * models.c - rtxctl's model commands (inference.GRPCInferenceService and its repository
 * extension): models list, show, load and unload.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

int ctl_cmd_models_list(struct ctl *ctl, int argc, char **argv) {
    bool ready = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--ready") == 0)
            ready = true;
        else
            return ctl_usage_error("models list ", "unknown argument '%s'", argv[i]);
    }
    int rc = ctl_connect(ctl);
    if (rc != EXIT_OK) return rc;
    struct rtx_client_model_list *l = NULL;
    struct rtx_client_err err;
    if (rtx_client_list_models(ctl->client, ready, &l, &err) < 0)
        return ctl_call_failed(ctl, "models list", &err);
    if (ctl->json) {
        json_t *doc = ctl_json_array();
        for (int i = 0; i < l->n_models; i++) {
            const struct rtx_client_model *m = &l->models[i];
            json_t *item = ctl_json_object();
            ctl_json_append(doc, item);
            ctl_json_set_str(item, "name", m->name);
            ctl_json_set_int(item, "version", m->version);
            ctl_json_set_str(item, "state", m->state);
            ctl_json_set_str(item, "reason", m->reason);
        }
        ctl_json_print(doc);
    } else {
        static const char *const headers[] = {"MODEL", "VERSION", "STATE", "REASON"};
        struct ctl_table t = {.ncols = 4, .headers = headers};
        for (int i = 0; i < l->n_models; i++) {
            const struct rtx_client_model *m = &l->models[i];
            ctl_table_add(&t, "%s", m->name);
            if (m->version > 0)
                ctl_table_add(&t, "%" PRId64, m->version);
            else
                ctl_table_add(&t, "-");
            ctl_table_add(&t, "%s", m->state);
            ctl_table_add(&t, "%s", ctl_dash(m->reason));
        }
        ctl_table_print(&t, 0);
        ctl_table_free(&t);
    }
    rtx_client_model_list_free(l);
    return EXIT_OK;
}

/* The MODEL argument of models show/load/unload, with the options the command takes. */
struct model_args {
    const char *name;
    int64_t version;    /* show --version */
    const char *config; /* load --config FILE */
};

static int model_args_parse(const char *cmd, int argc, char **argv, bool show,
                            struct model_args *a) {
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (show && (m = ctl_opt_value(cmd, "--version", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, INT64_MAX, &a->version))
                return ctl_usage_error(cmd, "--version wants a positive integer, got '%s'", v);
            continue;
        }
        if (!show && strcmp(cmd, "models load ") == 0 &&
            (m = ctl_opt_value(cmd, "--config", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            a->config = v;
            continue;
        }
        int p = ctl_positional(cmd, argv[i], &a->name, "model name");
        if (p < 0) return EXIT_USAGE;
        if (p == 0) return ctl_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (!a->name) return ctl_usage_error(cmd, "no model name given");
    return EXIT_OK;
}

static json_t *model_tensors_json(const struct rtx_client_model_tensor *ts, int n) {
    json_t *list = ctl_json_array();
    for (int i = 0; i < n; i++) {
        json_t *item = ctl_json_object();
        ctl_json_append(list, item);
        ctl_json_set_str(item, "name", ts[i].name);
        ctl_json_set_str(item, "datatype", ts[i].datatype);
        ctl_json_set(item, "shape", ctl_json_shape(ts[i].ndim, ts[i].dims));
    }
    return list;
}

static void print_model_tensors(const char *kind, const struct rtx_client_model_tensor *ts,
                                int n) {
    for (int i = 0; i < n; i++) {
        char shape[160] = "[";
        size_t k = 1;
        for (int d = 0; d < ts[i].ndim && k < sizeof shape - 24; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, d ? "," : "",
                                  ts[i].dims[d]);
        snprintf(shape + k, sizeof shape - k, "]");
        printf("  %-7s %s %s%s\n", kind, ts[i].name, ts[i].datatype, shape);
    }
}

int ctl_cmd_models_show(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models show ", argc, argv, true, &a);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_model_info *m = NULL;
    struct rtx_client_err err;
    if (rtx_client_get_model(ctl->client, a.name, a.version, &m, &err) < 0) {
        char what[200];
        snprintf(what, sizeof what, "model %s", a.name);
        return ctl_call_failed(ctl, what, &err);
    }
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "name", m->name);
        ctl_json_set_int(doc, "version", m->version);
        ctl_json_set_str(doc, "platform", m->platform);
        ctl_json_set_bool(doc, "ready", m->ready);
        ctl_json_set_int(doc, "max_batch_size", m->max_batch_size);
        ctl_json_set(doc, "inputs", model_tensors_json(m->inputs, m->n_inputs));
        ctl_json_set(doc, "outputs", model_tensors_json(m->outputs, m->n_outputs));
        ctl_json_set_bool(doc, "dynamic_batching", m->dynamic_batching);
        json_t *preferred = ctl_json_array();
        ctl_json_set(doc, "preferred_batch_sizes", preferred);
        for (int i = 0; i < m->n_preferred_batch_sizes; i++)
            ctl_json_append(preferred, ctl_json_int(m->preferred_batch_sizes[i]));
        ctl_json_set_int(doc, "max_queue_delay_us", m->max_queue_delay_us);
        ctl_json_set_int(doc, "instances", m->instances);
        ctl_json_set_str(doc, "instance_kind", m->instance_kind);
        ctl_json_set_int(doc, "last_inference_unix_ms", m->last_inference_ms);
        ctl_json_set_int(doc, "inference_count", m->inference_count);
        ctl_json_set_int(doc, "execution_count", m->execution_count);
        ctl_json_set_int(doc, "success_count", m->success_count);
        ctl_json_set_int(doc, "fail_count", m->fail_count);
        ctl_json_set_int(doc, "success_ns", m->success_ns);
        ctl_json_set_int(doc, "queue_ns", m->queue_ns);
        ctl_json_set_int(doc, "compute_infer_ns", m->compute_infer_ns);
        ctl_json_print(doc);
    } else {
        char t[64];
        printf("model     %s (version %" PRId64 ", %s)\n", m->name, m->version,
               m->ready ? "ready" : "not ready");
        printf("platform  %s\n", m->platform);
        printf("instances %d %s\n", m->instances, m->instance_kind);
        if (m->max_batch_size > 0)
            printf("batching  max batch size %d, dynamic batching %s", m->max_batch_size,
                   m->dynamic_batching ? "on" : "off");
        else
            printf("batching  none (no batch dimension)");
        if (m->dynamic_batching) {
            printf(" (preferred");
            for (int i = 0; i < m->n_preferred_batch_sizes; i++)
                printf(" %d", m->preferred_batch_sizes[i]);
            printf("%s, max queue delay %" PRId64 " us)", m->n_preferred_batch_sizes ? "" : " -",
                   m->max_queue_delay_us);
        }
        printf("\n");
        print_model_tensors("input", m->inputs, m->n_inputs);
        print_model_tensors("output", m->outputs, m->n_outputs);
        printf("requests  %" PRId64 " succeeded, %" PRId64 " failed, %" PRId64
               " inferences in %" PRId64 " executions\n",
               m->success_count, m->fail_count, m->inference_count, m->execution_count);
        if (m->success_count > 0)
            printf("latency   %.1f us mean (queue %.1f us, compute %.1f us)\n",
                   (double)m->success_ns / 1e3 / (double)m->success_count,
                   (double)m->queue_ns / 1e3 / (double)m->success_count,
                   (double)m->compute_infer_ns / 1e3 / (double)m->success_count);
        printf("last      %s\n",
               m->last_inference_ms ? ctl_fmt_time(m->last_inference_ms, true, t, sizeof t) : "-");
    }
    rtx_client_model_info_free(m);
    return EXIT_OK;
}

/* Reads a whole text file (for load --config); NULL with a message on failure. */
static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ctl_msg("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = ctl_calloc(cap, 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            buf = ctl_realloc(buf, cap * 2);
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        ctl_msg("cannot read %s", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* What load and unload print: {"model", "state"} with --json, else "NAME VERB". */
static int print_model_state(const struct ctl *ctl, const char *name, const char *state,
                             const char *verb) {
    if (ctl->json) {
        json_t *doc = ctl_json_object();
        ctl_json_set_str(doc, "model", name);
        ctl_json_set_str(doc, "state", state);
        ctl_json_print(doc);
    } else {
        printf("%s %s\n", name, verb);
    }
    return EXIT_OK;
}

int ctl_cmd_models_load(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models load ", argc, argv, false, &a);
    if (rc != EXIT_OK) return rc;
    char *config = NULL;
    if (a.config && !(config = read_text_file(a.config))) return EXIT_LOCAL;
    if ((rc = ctl_connect(ctl)) != EXIT_OK) {
        free(config);
        return rc;
    }
    struct rtx_client_err err;
    char what[200];
    snprintf(what, sizeof what, "load %s", a.name);
    if (rtx_client_load_model(ctl->client, a.name, config, &err) < 0) {
        free(config);
        return ctl_call_failed(ctl, what, &err);
    }
    free(config);
    return print_model_state(ctl, a.name, "READY", "loaded");
}

int ctl_cmd_models_unload(struct ctl *ctl, int argc, char **argv) {
    struct model_args a = {0};
    int rc = model_args_parse("models unload ", argc, argv, false, &a);
    if (rc != EXIT_OK || (rc = ctl_connect(ctl)) != EXIT_OK) return rc;
    struct rtx_client_err err;
    char what[200];
    snprintf(what, sizeof what, "unload %s", a.name);
    if (rtx_client_unload_model(ctl->client, a.name, &err) < 0)
        return ctl_call_failed(ctl, what, &err);
    return print_model_state(ctl, a.name, "UNAVAILABLE", "unloaded");
}
