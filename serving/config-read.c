/*
 * config-read.c - which config a model directory has: config.pbtxt (Triton's protobuf text,
 * serving/config-pbtxt.c), config.json (Triton's JSON form, serving/model-config.c), or none,
 * when its versions hold model.onnx and the ONNX model gives inputs, outputs and batch size
 * (Triton's auto-complete, completed per version at load by serving/model-onnx.c).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "serving/serving-impl.h"

#define CONFIG_MAX_BYTES ((size_t)16 << 20) /* bytes: largest config file */

static int read_text(const char *path, char **out, size_t *len, struct rtx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n + 4096 > cap) {
            if (cap >= CONFIG_MAX_BYTES) {
                rc = rtx_err_set(err, RTX_EFORMAT, "%s: larger than 16 MiB", path);
                break;
            }
            size_t nc = cap ? cap * 2 : 8192;
            char *b = rtx_realloc(buf, nc);
            if (!b) {
                rc = rtx_err_set(err, RTX_ENOMEM, "out of memory reading %s", path);
                break;
            }
            buf = b;
            cap = nc;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) rc = rtx_err_set(err, RTX_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc) {
        rtx_free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

bool rtx__model_config_onnx(const struct rtx__model_config *c) {
    return strcmp(c->info.platform, "onnxruntime_onnx") == 0;
}

void rtx__model_config_auto(const char *dir_name, struct rtx__model_config *out) {
    memset(out, 0, sizeof *out);
    out->memory_reserve_bytes = -1;
    snprintf(out->info.name, sizeof out->info.name, "%s", dir_name);
    snprintf(out->info.platform, sizeof out->info.platform, "onnxruntime_onnx");
    snprintf(out->backend, sizeof out->backend, "onnxruntime");
    out->auto_inputs = out->auto_outputs = out->batch_autofill = true;
    out->policy = RTX__POLICY_LATEST;
    out->latest_n = 1;
    out->n_groups = 1;
    out->groups[0] = (struct rtx__instance_group){.count = 1, .kind = RTX__KIND_AUTO};
    out->info.instances = 1;
    snprintf(out->info.instance_kind, sizeof out->info.instance_kind, "KIND_CPU");
}

/* Whether a version directory of mdir (a positive number without a leading zero) holds
 * model.onnx. */
static bool has_onnx_version(const char *mdir) {
    DIR *d = opendir(mdir);
    if (!d) return false;
    bool found = false;
    struct dirent *e;
    char path[4600];
    while (!found && (e = readdir(d))) {
        const char *n = e->d_name;
        bool digits = n[0] >= '1' && n[0] <= '9';
        for (const char *p = n; digits && *p; p++)
            digits = *p >= '0' && *p <= '9';
        if (!digits) continue;
        snprintf(path, sizeof path, "%s/%s/model.onnx", mdir, n);
        found = exists(path);
    }
    closedir(d);
    return found;
}

int rtx__model_config_read(const char *mdir, const char *name, const char *config_json,
                           rtx_serving_log_fn log, struct rtx__model_config *out,
                           struct rtx_err *err) {
    if (config_json)
        return rtx__model_config_parse(config_json, strlen(config_json), name,
                                       "the load request's config", out, err);
    char pbtxt[4600], json[4600];
    snprintf(pbtxt, sizeof pbtxt, "%s/config.pbtxt", mdir);
    snprintf(json, sizeof json, "%s/config.json", mdir);
    bool has_pbtxt = exists(pbtxt), has_json = exists(json);
    if (has_pbtxt && has_json)
        return rtx_err_set(err, RTX_EFORMAT, "%s: both config.pbtxt and config.json: remove one",
                           mdir);
    if (!has_pbtxt && !has_json) {
        if (!has_onnx_version(mdir))
            return rtx_err_set(err, RTX_EIO,
                               "%s: no config.pbtxt or config.json, and no "
                               "version directory with model.onnx to take the "
                               "config from",
                               mdir);
        rtx__model_config_auto(name, out);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    const char *path = has_pbtxt ? pbtxt : json;
    int rc = read_text(path, &text, &len, err);
    if (rc == 0)
        rc = has_pbtxt ? rtx__model_config_pbtxt(text, len, name, path, log, out, err)
                       : rtx__model_config_parse(text, len, name, path, out, err);
    rtx_free(text);
    return rc;
}
