/*
 * test-util.h - helpers shared by the unit-test suites: tensor construction from literals,
 * running a one-node graph through the real planner/executor on the CPU backend, and
 * element-wise comparison.
 */
#ifndef RTX_TEST_UTIL_H
#define RTX_TEST_UTIL_H

#include <check.h>

#include "runtime/runtime.h"

/* A new contiguous tensor holding `values` (numel of them, converted to dt); values may be
 * NULL for zeros. Fails the test on error. */
struct rtx_tensor *tu_tensor(enum rtx_dtype dt, int ndim, const int64_t *dims,
                             const double *values);
/* Same, with values drawn uniformly from [lo, hi) by a deterministic generator. */
struct rtx_tensor *tu_tensor_random(enum rtx_dtype dt, int ndim, const int64_t *dims, double lo,
                                    double hi, unsigned seed);

/* Sets attributes on node `node` of g from `attrs`, written as for tu_run_op (Check fails on
 * a bad spec or a rejected attribute). */
void tu_set_attrs(struct rtx_graph *g, int node, const char *attrs);

/* Runs one node `op` with attributes from `attrs` on the CPU backend through rtx_plan_new and
 * rtx_plan_execute. attrs is "" or a ';'-separated list of NAME=T:VALUE where T is
 * i (int), f (float), s (string), I (ints, comma-separated), F (floats, comma-separated),
 * e.g. "axis=i:-1;perm=I:0,2,1;approximate=s:tanh". A NULL entry in `in` is an omitted
 * optional input. Returns 0 or the negative code of the first failure (graph building,
 * validation, planning or execution) with err filled; out[] then holds NULLs. */
int tu_run_op(const char *op, const char *attrs, struct rtx_tensor *const *in, int n_in,
              struct rtx_tensor **out, int n_out, struct rtx_err *err);

/* Asserts (Check) that t has dtype dt and this shape. */
void tu_assert_shape(const struct rtx_tensor *t, enum rtx_dtype dt, int ndim,
                     const int64_t *dims);
/* Asserts |got[i] - want[i]| <= atol + rtol * |want[i]| for every element (NaN equals NaN). */
void tu_assert_close(const struct rtx_tensor *got, const double *want, double rtol,
                     double atol);

#endif /* RTX_TEST_UTIL_H */
