/*
 * test-util.c - shared helpers of the unit tests (see test-util.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "tests/unit/test-util.h"

struct rtx_tensor *tu_tensor(enum rtx_dtype dt, int ndim, const int64_t *dims,
                             const double *values) {
    struct rtx_tensor *t;
    struct rtx_err err = {0};
    int rc = rtx_tensor_new(dt, ndim, dims, &t, &err);
    ck_assert_msg(rc == 0, "rtx_tensor_new: %s", err.msg);
    if (values) {
        int64_t n = rtx_tensor_numel(t);
        for (int64_t i = 0; i < n; i++) rtx_tensor_set(t, i, values[i]);
    }
    return t;
}

struct rtx_tensor *tu_tensor_random(enum rtx_dtype dt, int ndim, const int64_t *dims, double lo,
                                    double hi, unsigned seed) {
    struct rtx_tensor *t = tu_tensor(dt, ndim, dims, NULL);
    uint64_t s = seed * 2654435761u + 88172645463325252ull;
    int64_t n = rtx_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / (double)(1ull << 53);
        double v = lo + (hi - lo) * u;
        if (!rtx_dtype_is_float(dt)) v = floor(v);
        rtx_tensor_set(t, i, v);
    }
    return t;
}

/* Parses "a,b,c" into ints or floats; returns the count. */
static int parse_list(const char *s, int64_t *ints, double *floats, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        if (ints) ints[n] = strtoll(s, &end, 10);
        else floats[n] = strtod(s, &end);
        ck_assert_msg(end != s, "bad list element in '%s'", s);
        n++;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

void tu_set_attrs(struct rtx_graph *g, int node, const char *attrs) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", attrs);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(tok, '=');
        ck_assert_msg(eq && eq[1] && eq[2] == ':', "bad attr spec '%s'", tok);
        *eq = '\0';
        char type = eq[1];
        const char *val = eq + 3;
        struct rtx_err err = {0};
        int rc;
        int64_t ints[64];
        double floats[64];
        switch (type) {
        case 'i': rc = rtx_graph_set_attr_int(g, node, tok, strtoll(val, NULL, 10), &err); break;
        case 'f': rc = rtx_graph_set_attr_float(g, node, tok, strtod(val, NULL), &err); break;
        case 's': rc = rtx_graph_set_attr_string(g, node, tok, val, &err); break;
        case 'I':
            rc = rtx_graph_set_attr_ints(g, node, tok, ints, parse_list(val, ints, NULL, 64),
                                         &err);
            break;
        case 'F':
            rc = rtx_graph_set_attr_floats(g, node, tok, floats,
                                           parse_list(val, NULL, floats, 64), &err);
            break;
        default: ck_abort_msg("bad attr type '%c'", type); return;
        }
        ck_assert_msg(rc == 0, "set attr %s: %s", tok, err.msg);
    }
}

int tu_run_op(const char *op, const char *attrs, struct rtx_tensor *const *in, int n_in,
              struct rtx_tensor **out, int n_out, struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    struct rtx_plan *plan = NULL;
    struct rtx_backend *be = NULL;
    char names[16][16];
    const char *in_names[16], *out_names[16];
    struct rtx_tensor *bound[16];
    int n_bound = 0, rc;
    ck_assert(n_in <= 16 && n_out <= 16);
    for (int i = 0; i < n_out; i++) out[i] = NULL;
    if ((rc = rtx_graph_new("test", &g, err))) return rc;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            in_names[i] = "";
            continue;
        }
        snprintf(names[i], sizeof names[i], "in%d", i);
        in_names[i] = names[i];
        rc = rtx_graph_add_input(g, names[i], in[i]->dtype, in[i]->ndim, in[i]->dims, err);
        if (rc < 0) goto done;
        bound[n_bound++] = in[i];
    }
    char onames[16][16];
    for (int i = 0; i < n_out; i++) {
        snprintf(onames[i], sizeof onames[i], "out%d", i);
        out_names[i] = onames[i];
    }
    rc = rtx_graph_add_node(g, op, "n", in_names, n_in, out_names, n_out, err);
    if (rc < 0) goto done;
    tu_set_attrs(g, rc, attrs ? attrs : "");
    for (int i = 0; i < n_out; i++)
        if ((rc = rtx_graph_add_output(g, out_names[i], err))) goto done;
    if ((rc = rtx_plan_new(g, (const struct rtx_tensor *const *)bound, n_bound, NULL, &plan,
                           err)))
        goto done;
    if ((rc = rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 2}, &be, err)))
        goto done;
    rc = rtx_plan_execute(plan, be, bound, n_bound, out, n_out, NULL, NULL, err);
done:
    rtx_backend_free(be);
    rtx_plan_free(plan);
    rtx_graph_free(g);
    return rc < 0 ? rc : 0;
}

void tu_assert_shape(const struct rtx_tensor *t, enum rtx_dtype dt, int ndim,
                     const int64_t *dims) {
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(t->dtype == dt, "dtype %s, want %s", rtx_dtype_name(t->dtype),
                  rtx_dtype_name(dt));
    ck_assert_int_eq(t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_msg(t->dims[i] == dims[i], "dim %d is %lld, want %lld", i,
                      (long long)t->dims[i], (long long)dims[i]);
}

void tu_assert_close(const struct rtx_tensor *got, const double *want, double rtol,
                     double atol) {
    ck_assert_ptr_nonnull(got);
    int64_t n = rtx_tensor_numel(got);
    for (int64_t i = 0; i < n; i++) {
        double g = rtx_tensor_get(got, i), w = want[i];
        if (isnan(w) && isnan(g)) continue;
        if (isinf(w) && g == w) continue;
        ck_assert_msg(fabs(g - w) <= atol + rtol * fabs(w), "element %lld: got %.9g, want %.9g",
                      (long long)i, g, w);
    }
}
