/*
 * metrics.h - rtxd's Prometheus exposition (text format 0.0.4), served by the HTTP server at
 * GET /metrics: the inference figures under Triton's metric names (so dashboards built for
 * Triton work unchanged) and rtxd's own figures (jobs, models, memory) under rtxd_ names.
 *
 * DESIGN
 * Nothing is counted here: every figure is read at scrape time from the module that owns it
 * (rtx_serving_stats, rtx_serving_memory, rtx_serving_index, rtx_jobs_get_stats,
 * rtx_jobs_get_pools, the CUDA device list and the shared-memory registry), so /metrics can
 * never disagree with the statistics endpoints. Durations that the core keeps in nanoseconds
 * are exported as Triton does, as cumulative microsecond counters. A small growable text
 * buffer with label escaping (backslash, double quote, newline) builds the answer.
 */
#ifndef RTX_DAEMON_METRICS_H
#define RTX_DAEMON_METRICS_H

#include <stddef.h>

#include "runtime/runtime.h"

struct rtx_daemon; /* daemon/daemon.h */

/* The whole exposition as an rtx_malloc'ed NUL-terminated string (*len bytes, without the
 * NUL). Every metric family has its # HELP and # TYPE lines, families appear once, and every
 * sample line is `name{labels} value`. d->serving, d->jobs and d->shm may be NULL (their
 * families are then left out). Fails only with RTX_ENOMEM. */
int rtx_metrics_render(struct rtx_daemon *d, char **out, size_t *len, struct rtx_err *err);

/* Appends s to a label value with Prometheus' escaping (\\, \", \n) into buf (cap bytes,
 * always NUL-terminated, truncated when too long); returns buf. */
const char *rtx_metrics_escape(const char *s, char *buf, size_t cap);

#endif /* RTX_DAEMON_METRICS_H */
