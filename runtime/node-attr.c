/*
 * node-attr.c - a node's attributes by name: rtx_node_attr and its typed readers, for shape
 * inference (ops.c), validation, the graph builder (graph.c: an attribute set twice) and the
 * kernels. A leaf of the runtime: it reads struct rtx_node and calls no other runtime file, so
 * graph.c and ops.c both depend on it and not on each other's attribute code.
 */
#include <string.h>

#include "runtime/runtime.h"

const struct rtx_attr *rtx_node_attr(const struct rtx_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t rtx_node_attr_int(const struct rtx_node *n, const char *name, int64_t dflt) {
    const struct rtx_attr *a = rtx_node_attr(n, name);
    return a && a->type == RTX_ATTR_INT ? a->i : dflt;
}

double rtx_node_attr_float(const struct rtx_node *n, const char *name, double dflt) {
    const struct rtx_attr *a = rtx_node_attr(n, name);
    return a && a->type == RTX_ATTR_FLOAT ? a->f : dflt;
}

const char *rtx_node_attr_string(const struct rtx_node *n, const char *name, const char *dflt) {
    const struct rtx_attr *a = rtx_node_attr(n, name);
    return a && a->type == RTX_ATTR_STRING ? a->s : dflt;
}

int rtx_node_attr_ints(const struct rtx_node *n, const char *name, const int64_t **v) {
    const struct rtx_attr *a = rtx_node_attr(n, name);
    if (!a || a->type != RTX_ATTR_INTS) return -1;
    *v = a->ints;
    return a->n;
}

int rtx_node_attr_floats(const struct rtx_node *n, const char *name, const double **v) {
    const struct rtx_attr *a = rtx_node_attr(n, name);
    if (!a || a->type != RTX_ATTR_FLOATS) return -1;
    *v = a->floats;
    return a->n;
}
