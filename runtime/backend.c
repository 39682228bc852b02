/*
 * backend.c - the public backend wrappers: argument checks, then one call through the
 * backend's vtable (runtime/backend-impl.h). Optional slots left NULL get their documented
 * default here, so callers never test the vtable themselves.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/backend-impl.h"
#include "runtime/runtime-impl.h"

const char *rtx_backend_name(struct rtx_backend *be) {
    return be ? be->iface->name(be) : "?";
}

void rtx_backend_free(struct rtx_backend *be) {
    if (be == NULL) return;
    rtx__const_cache_close(be);
    be->iface->free(be);
}

bool rtx_backend_supports_node(struct rtx_backend *be, const struct rtx_graph *g,
                               const struct rtx_node *node) {
    if (be == NULL || node == NULL) return false;
    return be->iface->supports_node(be, g, node);
}

int rtx_backend_buffer_new(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                           struct rtx_err *err) {
    if (out == NULL) return rtx_err_set(err, RTX_EINVAL, "backend buffer: out is NULL");
    *out = NULL;
    if (be == NULL) return rtx_err_set(err, RTX_EINVAL, "backend buffer: no backend");
    return be->iface->buffer_new(be, bytes, out, err);
}

int rtx_backend_run_node(struct rtx_backend *be, const struct rtx_node_args *args,
                         struct rtx_err *err) {
    if (be == NULL || args == NULL || args->node == NULL)
        return rtx_err_set(err, RTX_EINVAL, "backend run: no backend or node");
    return be->iface->run_node(be, args, err);
}

int rtx_backend_synchronize(struct rtx_backend *be, struct rtx_err *err) {
    if (be == NULL) return rtx_err_set(err, RTX_EINVAL, "backend synchronize: no backend");
    if (be->iface->synchronize == NULL) return 0; /* optional: synchronous backends */
    return be->iface->synchronize(be, err);
}

bool rtx_backend_is_host(struct rtx_backend *be) {
    return be != NULL && be->iface->upload == NULL;
}

int rtx_backend_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx_tensor **dev, struct rtx_err *err) {
    if (dev == NULL) return rtx_err_set(err, RTX_EINVAL, "backend upload: dev is NULL");
    *dev = NULL;
    if (be == NULL || host == NULL)
        return rtx_err_set(err, RTX_EINVAL, "backend upload: no backend or tensor");
    if (be->iface->upload == NULL) { /* optional: host memory is the device's */
        *dev = rtx_tensor_ref((struct rtx_tensor *)host);
        return 0;
    }
    return be->iface->upload(be, host, dev, err);
}

int rtx_backend_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                         struct rtx_tensor **host, struct rtx_err *err) {
    if (host == NULL) return rtx_err_set(err, RTX_EINVAL, "backend download: host is NULL");
    *host = NULL;
    if (be == NULL || dev == NULL)
        return rtx_err_set(err, RTX_EINVAL, "backend download: no backend or tensor");
    if (be->iface->download == NULL) {
        *host = rtx_tensor_ref((struct rtx_tensor *)dev);
        return 0;
    }
    return be->iface->download(be, dev, host, err);
}

int rtx_backend_copy_into(struct rtx_backend *be, const struct rtx_tensor *src,
                          struct rtx_tensor *dst, struct rtx_err *err) {
    if (be == NULL || src == NULL || dst == NULL)
        return rtx_err_set(err, RTX_EINVAL, "backend copy: no backend or tensor");
    size_t bytes = rtx_tensor_nbytes(src);
    if (bytes != rtx_tensor_nbytes(dst) || !rtx_tensor_is_contiguous(src) ||
        !rtx_tensor_is_contiguous(dst))
        return rtx_err_set(err, RTX_EINVAL,
                           "backend copy: %zu into %zu bytes, both must be contiguous and equal",
                           bytes, rtx_tensor_nbytes(dst));
    if (be->iface->copy_into == NULL) { /* optional: host memory */
        if (bytes > 0 && rtx_tensor_data(dst) != rtx_tensor_data(src))
            memmove(rtx_tensor_data(dst), rtx_tensor_data(src), bytes);
        return 0;
    }
    return be->iface->copy_into(be, src, dst, err);
}

bool rtx_backend_can_capture(struct rtx_backend *be) {
    return be != NULL && be->iface->capture_begin != NULL;
}

int rtx_backend_capture_begin(struct rtx_backend *be, struct rtx_err *err) {
    if (be == NULL) return rtx_err_set(err, RTX_EINVAL, "backend capture: no backend");
    if (be->iface->capture_begin == NULL)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "backend %s cannot capture graphs",
                           rtx_backend_name(be));
    return be->iface->capture_begin(be, err);
}

int rtx_backend_capture_end(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                            struct rtx_err *err) {
    if (graph == NULL) return rtx_err_set(err, RTX_EINVAL, "backend capture: graph is NULL");
    *graph = NULL;
    if (be == NULL || be->iface->capture_end == NULL)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "backend %s cannot capture graphs",
                           rtx_backend_name(be));
    return be->iface->capture_end(be, keep, graph, err);
}

int rtx_backend_graph_launch(struct rtx_backend *be, struct rtx_backend_graph *graph,
                             struct rtx_err *err) {
    if (be == NULL || graph == NULL || be->iface->graph_launch == NULL)
        return rtx_err_set(err, RTX_EINVAL, "backend graph launch: no backend or graph");
    return be->iface->graph_launch(be, graph, err);
}

void rtx_backend_graph_free(struct rtx_backend *be, struct rtx_backend_graph *graph) {
    if (be == NULL || graph == NULL || be->iface->graph_free == NULL) return;
    be->iface->graph_free(be, graph);
}

int rtx_backend_fused_span(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                           int n, const int *uses) {
    if (be == NULL || be->iface->fused_span == NULL || n < 2) return 1;
    int span = be->iface->fused_span(be, g, order, n, uses);
    if (span > n) span = n;
    if (span > RTX_BACKEND_FUSE_MAX) span = RTX_BACKEND_FUSE_MAX;
    return span < 1 ? 1 : span;
}

int rtx_backend_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                          struct rtx_err *err) {
    if (be == NULL || args == NULL || n < 1)
        return rtx_err_set(err, RTX_EINVAL, "backend fused run: no backend or nodes");
    if (n == 1 || be->iface->run_fused == NULL) {
        for (int i = 0; i < n; i++) {
            int rc = rtx_backend_run_node(be, &args[i], err);
            if (rc) return rc;
        }
        return 0;
    }
    return be->iface->run_fused(be, args, n, err);
}

int rtx__backend_node_err(struct rtx_err *err, const struct rtx_node_args *a, int code,
                          const char *fmt, ...) {
    if (err == NULL) return code;
    char detail[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    const struct rtx_node *node = a->node;
    int idx = a->graph ? (int)(node - a->graph->nodes) : -1;
    if (node->name && node->name[0])
        return rtx_err_set(err, code, "node %d '%s' (%s): %s", idx, node->name,
                           rtx_op_name(node->op), detail);
    return rtx_err_set(err, code, "node %d (%s): %s", idx, rtx_op_name(node->op), detail);
}
