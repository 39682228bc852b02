/*
 * test-sched-util.h - what the scheduler's test files (tests/unit/test-sched*.c) share: the
 * simulated clock's units and start, and schedulers made, fed and dispatched with the test
 * failing on any error. Private to those files.
 *
 * DESIGN: the helpers keep the short names they had as statics of one test-sched.c, so the
 * tests moved into their files unchanged; only these files include this header.
 */
#ifndef RTX_TEST_SCHED_UTIL_H
#define RTX_TEST_SCHED_UTIL_H

#include <stdint.h>

#include "scheduler/sched.h"

#define US 1000LL
#define MS (1000 * US)
#define SEC (1000 * MS)
#define T0 (100 * SEC) /* the simulated clock's start */

/* A scheduler with the default lanes and the given executors; fails the test on error. */
struct rtx_sched *make(const struct rtx_sched_config *cfg);
/* rtx_sched_config_init's configuration. */
struct rtx_sched_config defaults(void);
/* Enqueues an item of `tag` (its data) on `lane`; fails the test if it is refused. Returns
 * its handle. */
uint64_t enq(struct rtx_sched *s, int lane, int64_t deadline, int64_t cost, intptr_t tag,
             int64_t now);
/* Dispatches one item that must be RUN; returns its tag. */
intptr_t run_one(struct rtx_sched *s, int64_t now, struct rtx_sched_item *out);
/* Ticks s every 10 ms, at now + from_ms, now + from_ms + 10 ms, ... up to now + to_ms. */
void tick_span(struct rtx_sched *s, int64_t now, int from_ms, int to_ms);
/* Keeps every lane in `lanes` backlogged, dispatches n items of equal cost and counts them. */
void dispatch_backlogged(struct rtx_sched *s, uint32_t lanes, int n, int64_t cost,
                         int64_t counts[RTX_SCHED_MAX_LANES]);

#endif /* RTX_TEST_SCHED_UTIL_H */
