/*
 * backend.c - the public backend wrappers: argument checks, then one call through the
 * backend's vtable (kernels/backend-impl.h). Optional slots left NULL get their documented
 * default here, so callers never test the vtable themselves.
 */
#include "kernels/backend-impl.h"

const char *rtx_backend_name(struct rtx_backend *be) {
    return be ? be->iface->name(be) : "?";
}

void rtx_backend_free(struct rtx_backend *be) {
    if (be == NULL) return;
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
