/*
 * model-onnx.c - a version of an ONNX model (platform "onnxruntime_onnx", Triton's ONNX
 * Runtime backend): its model file found in the version directory (default_model_filename,
 * else model.onnx, a file or a directory holding model.onnx and its external data), loaded by
 * onnx/, the config completed from the model as Triton's onnxruntime backend completes it,
 * checked against the model, and the content digest its plans are kept under.
 *
 * DESIGN
 * An ONNX version has no single rtx graph: each batch's input shapes get their own, made by
 * rtx_onnx_instantiate and planned in model-exec.c, and the device's plan cache keeps the
 * pair (the plan's release frees its graph). Graph inputs are the model's inputs in the
 * model's order, so config input i maps to model input graph_in[i]; every model input must be
 * in the config (the model cannot run without it), outputs may be a subset.
 * Auto-complete (Triton's onnxruntime backend, AutoCompleteMaxBatch / AutoCompleteIO): when
 * every input and output of the model has a variable first dimension the model can batch;
 * with no input, output or max_batch_size in the config, max_batch_size becomes 4 (Triton's
 * default-max-batch-size) and dynamic batching turns on. Inputs and outputs the config does
 * not list come from the model: dims without the batch dimension when batching, symbolic
 * dimensions as -1, and a tensor left with no dimension becomes dims [1] reshaped to [].
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "serving/model-impl.h"

#define AUTO_MAX_BATCH 4 /* Triton's default-max-batch-size */

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int rtx__sha256_files(const char *const *paths, int n, uint8_t out[RTX_DEVICE_PLAN_KEY_LEN],
                      struct rtx_err *err) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t *buf = rtx_malloc(1 << 20);
    int rc = 0;
    bool ok = c && buf && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1;
    if (!c || !buf) rc = rtx_err_set(err, RTX_ENOMEM, "out of memory hashing %s", paths[0]);
    for (int i = 0; i < n && rc == 0; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            rc = rtx_err_set(err, RTX_EIO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        struct stat sb;
        uint64_t len = fstat(fileno(f), &sb) == 0 ? (uint64_t)sb.st_size : 0;
        ok = ok && EVP_DigestUpdate(c, &len, sizeof len) == 1;
        size_t got;
        while (ok && (got = fread(buf, 1, 1 << 20, f)) > 0)
            ok = EVP_DigestUpdate(c, buf, got) == 1;
        if (ferror(f)) rc = rtx_err_set(err, RTX_EIO, "%s: read error", paths[i]);
        fclose(f);
    }
    unsigned int len = 0;
    if (rc == 0 &&
        !(ok && EVP_DigestFinal_ex(c, out, &len) == 1 && len == RTX_DEVICE_PLAN_KEY_LEN))
        rc = rtx_err_set(err, RTX_EINTERNAL, "%s: SHA-256 failed (OpenSSL)", paths[0]);
    rtx_free(buf);
    EVP_MD_CTX_free(c);
    return rc;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The digest of an ONNX version: the model file, then every other regular file of its
 * directory (its external data) in name order. */
static int onnx_digest(struct rtx_model *m, const char *path, const char *dir,
                       struct rtx_err *err) {
    enum { MAX_FILES = 256 };
    char *names[MAX_FILES];
    const char *paths[MAX_FILES + 1] = {path};
    int n = 0, rc = 0;
    DIR *d = opendir(dir);
    if (!d) return rtx_err_set(err, RTX_EIO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char p[4800];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    while ((e = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (strcmp(e->d_name, base) == 0 || stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (n == MAX_FILES) {
            rc = rtx_err_set(err, RTX_ELIMIT, "%s: more than %d files", dir, MAX_FILES);
            break;
        }
        if (!(names[n] = rtx_malloc(strlen(p) + 1))) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory hashing %s", dir);
            break;
        }
        memcpy(names[n++], p, strlen(p) + 1);
    }
    closedir(d);
    if (rc == 0) {
        qsort(names, (size_t)n, sizeof names[0], cmp_name);
        for (int i = 0; i < n; i++)
            paths[i + 1] = names[i];
        rc = rtx__sha256_files(paths, n + 1, m->digest, err);
    }
    for (int i = 0; i < n; i++)
        rtx_free(names[i]);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Auto-complete and checks
 * ---------------------------------------------------------------------------------------- */

/* Whether every input and output has a variable first dimension. */
static bool model_batches(const struct rtx_onnx_model *om) {
    for (int i = 0; i < rtx_onnx_n_inputs(om); i++)
        if (rtx_onnx_input(om, i)->ndim < 1 || rtx_onnx_input(om, i)->dims[0] != -1) return false;
    for (int i = 0; i < rtx_onnx_n_outputs(om); i++)
        if (rtx_onnx_output(om, i)->ndim < 1 || rtx_onnx_output(om, i)->dims[0] != -1)
            return false;
    return true;
}

/* A config tensor from a model tensor. */
static int complete_io(const struct rtx_onnx_io *x, int off, const char *fname, const char *kind,
                       struct rtx_model_io *io, struct rtx__reshape *rs, struct rtx_err *err) {
    memset(io, 0, sizeof *io);
    memset(rs, 0, sizeof *rs);
    if (x->ndim < 0)
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: %s '%s' has no shape in the model: list it "
                           "in config.pbtxt",
                           fname, kind, x->name);
    if (strlen(x->name) >= sizeof io->name)
        return rtx_err_set(err, RTX_ELIMIT, "%s: %s name '%.64s...' is longer than %zu bytes",
                           fname, kind, x->name, sizeof io->name - 1);
    snprintf(io->name, sizeof io->name, "%s", x->name);
    io->dtype = x->dtype;
    io->ndim = x->ndim - off;
    for (int d = 0; d < io->ndim; d++)
        io->dims[d] = x->dims[d + off] < 0 ? -1 : x->dims[d + off];
    if (io->ndim == 0) { /* a scalar (per batch row): dims [1], the model's shape [] */
        io->ndim = 1;
        io->dims[0] = 1;
        rs->set = true;
    }
    return 0;
}

static int autocomplete(struct rtx_model *m, const char *fname, struct rtx_err *err) {
    struct rtx__model_config *c = &m->cfg;
    struct rtx_model_info *info = &c->info;
    const struct rtx_onnx_model *om = m->onnx;
    int rc;
    if (c->batch_autofill && model_batches(om)) {
        info->max_batch_size = AUTO_MAX_BATCH;
        info->dynamic_batching = true; /* Triton turns it on for max_batch_size > 1 */
        rtx__serving_log(m->log, RTX_SERVING_LOG_INFO,
                         "max_batch_size auto-completed to 4 (the model batches)", "model",
                         info->name, NULL);
    } else if (info->dynamic_batching && info->max_batch_size == 0) {
        return rtx_err_set(err, RTX_EFORMAT,
                           "dynamic_batching needs max_batch_size > 0, and "
                           "%s has inputs or outputs without a variable first "
                           "dimension (it cannot batch)",
                           fname);
    }
    for (int j = 0; j < info->n_preferred; j++)
        if (info->preferred_batch_sizes[j] > info->max_batch_size)
            return rtx_err_set(err, RTX_EFORMAT,
                               "dynamic_batching.preferred_batch_size %d is "
                               "more than max_batch_size %d",
                               info->preferred_batch_sizes[j], info->max_batch_size);
    int off = info->max_batch_size > 0 ? 1 : 0;
    int n_in = rtx_onnx_n_inputs(om), n_out = rtx_onnx_n_outputs(om);
    if ((c->auto_inputs && n_in > RTX_MODEL_MAX_IO) ||
        (c->auto_outputs && n_out > RTX_MODEL_MAX_IO))
        return rtx_err_set(err, RTX_ELIMIT, "%s: more than %d inputs or outputs", fname,
                           RTX_MODEL_MAX_IO);
    for (int i = 0; c->auto_inputs && i < n_in; i++)
        if ((rc = complete_io(rtx_onnx_input(om, i), off, fname, "input", &info->inputs[i],
                              &c->in_reshape[i], err)))
            return rc;
    for (int i = 0; c->auto_outputs && i < n_out; i++)
        if ((rc = complete_io(rtx_onnx_output(om, i), off, fname, "output", &info->outputs[i],
                              &c->out_reshape[i], err)))
            return rc;
    if (c->auto_inputs) info->n_inputs = n_in;
    if (c->auto_outputs) info->n_outputs = n_out;
    return 0;
}

/* Checks a config tensor against the model's: dtype, the batch dimension, each size (the
 * config's shape, or its reshape, against the model's; -1 in the model takes any). */
static int check_io(const struct rtx_model_io *io, const struct rtx__reshape *rs,
                    const struct rtx_onnx_io *x, int off, const char *fname, const char *kind,
                    struct rtx_err *err) {
    char want[96];
    if (io->dtype != x->dtype)
        return rtx_err_set(err, RTX_EGRAPH, "%s '%s': the config says %s, %s has %s", kind,
                           io->name, rtx__config_dtype_name(io->dtype), fname,
                           rtx__config_dtype_name(x->dtype));
    if (x->ndim < 0) return 0; /* an output whose shape the model does not give */
    if (off && (x->ndim < 1 || x->dims[0] != -1))
        return rtx_err_set(err, RTX_EGRAPH,
                           "%s '%s': %s gives it %s, without a variable first "
                           "dimension: the model cannot batch (set "
                           "max_batch_size: 0)",
                           kind, io->name, fname,
                           rtx_shape_str(x->dtype, x->ndim, x->dims, want, sizeof want));
    int nd = rs->set ? rs->ndim : io->ndim;
    const int64_t *dims = rs->set ? rs->dims : io->dims;
    bool ok = x->ndim - off == nd;
    for (int d = 0; ok && d < nd; d++)
        ok = x->dims[d + off] == -1 || x->dims[d + off] == dims[d];
    if (!ok) {
        char got[96];
        int64_t full[RTX_MAX_DIMS] = {-1};
        memcpy(full + off, dims, sizeof dims[0] * (size_t)nd);
        return rtx_err_set(err, RTX_EGRAPH, "%s '%s': the config's %s%s is %s, %s has %s", kind,
                           io->name, rs->set ? "reshape" : "dims",
                           off ? " with the batch dimension" : "",
                           rtx_shape_str(io->dtype, nd + off, full, got, sizeof got), fname,
                           rtx_shape_str(x->dtype, x->ndim, x->dims, want, sizeof want));
    }
    return 0;
}

/* The index of the model's input (or output) of this name, or -1. */
static int find_io(const struct rtx_onnx_model *om, bool input, const char *name) {
    int n = input ? rtx_onnx_n_inputs(om) : rtx_onnx_n_outputs(om);
    for (int k = 0; k < n; k++)
        if (strcmp((input ? rtx_onnx_input(om, k) : rtx_onnx_output(om, k))->name, name) == 0)
            return k;
    return -1;
}

static int map_tensors(struct rtx_model *m, const char *fname, struct rtx_err *err) {
    const struct rtx__model_config *c = &m->cfg;
    const struct rtx_model_info *info = &c->info;
    const struct rtx_onnx_model *om = m->onnx;
    int off = info->max_batch_size > 0 ? 1 : 0, rc;
    int n_in = rtx_onnx_n_inputs(om), n_out = rtx_onnx_n_outputs(om);
    bool listed[RTX_MODEL_MAX_IO] = {false};
    for (int i = 0; i < info->n_inputs; i++) {
        int k = find_io(om, true, info->inputs[i].name);
        if (k < 0)
            return rtx_err_set(err, RTX_EGRAPH, "config input '%s' is not an input of %s",
                               info->inputs[i].name, fname);
        if ((rc = check_io(&info->inputs[i], &c->in_reshape[i], rtx_onnx_input(om, k), off, fname,
                           "input", err)))
            return rc;
        m->graph_in[i] = k;
        if (k < RTX_MODEL_MAX_IO) listed[k] = true;
    }
    for (int k = 0; k < n_in; k++)
        if (k >= RTX_MODEL_MAX_IO || !listed[k])
            return rtx_err_set(err, RTX_EGRAPH,
                               "%s input '%s' is not in the config (an ONNX "
                               "model runs with all its inputs)",
                               fname, rtx_onnx_input(om, k)->name);
    for (int j = 0; j < info->n_outputs; j++) {
        int k = find_io(om, false, info->outputs[j].name);
        if (k < 0)
            return rtx_err_set(err, RTX_EGRAPH, "config output '%s' is not an output of %s",
                               info->outputs[j].name, fname);
        if ((rc = check_io(&info->outputs[j], &c->out_reshape[j], rtx_onnx_output(om, k), off,
                           fname, "output", err)))
            return rc;
        m->graph_out[j] = k;
        m->out_names[j] = info->outputs[j].name;
    }
    m->n_graph_in = n_in;
    m->n_graph_out = n_out;
    return 0;
}

int rtx__onnx_version_load(struct rtx_model *m, const char *dir, struct rtx_err *err) {
    const char *fn = m->cfg.model_filename[0] ? m->cfg.model_filename : "model.onnx";
    char path[4600], mdir[4400];
    snprintf(path, sizeof path, "%s/%s", dir, fn);
    snprintf(mdir, sizeof mdir, "%s", dir);
    if (is_dir(path)) { /* Triton's layout of a model with external data: model.onnx/ */
        snprintf(mdir, sizeof mdir, "%s/%s", dir, fn);
        snprintf(path, sizeof path, "%s/model.onnx", mdir);
    }
    struct stat sb;
    if (stat(path, &sb) != 0) return rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
    int rc = rtx_onnx_load_file(path, &m->limits, &m->onnx, err);
    if (rc) return rc;
    if ((rc = autocomplete(m, path, err)) || (rc = map_tensors(m, path, err)) ||
        (rc = onnx_digest(m, path, mdir, err)))
        return rc;
    m->const_bytes = rtx_onnx_weight_bytes(m->onnx);
    m->host_bytes = m->const_bytes;
    return 0;
}
