/*
 * test-sched-util.c - the helpers that the scheduler's test files share (declared, with what
 * each does, in test-sched-util.h).
 */
#include "tests/unit/test-sched-util.h"

#include <check.h>
#include <string.h>

struct rtx_sched *make(const struct rtx_sched_config *cfg) {
    struct rtx_sched *s = NULL;
    struct rtx_err err = {0};
    int rc = rtx_sched_new(cfg, T0, &s, &err);
    ck_assert_msg(rc == 0, "rtx_sched_new: %s", err.msg);
    return s;
}

struct rtx_sched_config defaults(void) {
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    return cfg;
}

uint64_t enq(struct rtx_sched *s, int lane, int64_t deadline, int64_t cost, intptr_t tag,
             int64_t now) {
    struct rtx_sched_request r = {
        .data = (void *)tag, .lane = lane, .deadline_ns = deadline, .cost_ns = cost};
    uint64_t h = 0;
    struct rtx_sched_reject rej = {0};
    int rc = rtx_sched_enqueue(s, &r, now, &h, &rej);
    ck_assert_msg(rc == 0, "enqueue refused: %s", rej.msg);
    ck_assert_uint_ne(h, 0);
    return h;
}

/* Dispatches one item that must be RUN; returns its tag. */
intptr_t run_one(struct rtx_sched *s, int64_t now, struct rtx_sched_item *out) {
    struct rtx_sched_item it;
    ck_assert_int_eq(rtx_sched_dispatch(s, now, &it), RTX_SCHED_RUN);
    if (out) *out = it;
    return (intptr_t)it.data;
}

/* Ticks s every 10 ms, at now + from_ms, now + from_ms + 10 ms, ... up to now + to_ms. */
void tick_span(struct rtx_sched *s, int64_t now, int from_ms, int to_ms) {
    for (int t = from_ms; t <= to_ms; t += 10)
        rtx_sched_tick(s, now + t * MS);
}

void dispatch_backlogged(struct rtx_sched *s, uint32_t lanes, int n, int64_t cost,
                         int64_t counts[RTX_SCHED_MAX_LANES]) {
    int64_t now = T0;
    memset(counts, 0, sizeof(int64_t) * RTX_SCHED_MAX_LANES);
    for (int l = 0; l < RTX_SCHED_MAX_LANES; l++)
        if (lanes & (1u << l))
            for (int k = 0; k < 4; k++)
                enq(s, l, 0, cost, l, now);
    for (int i = 0; i < n; i++) {
        struct rtx_sched_item it;
        int lane = (int)run_one(s, now, &it);
        counts[lane]++;
        ck_assert_int_eq(rtx_sched_finish(s, it.handle, RTX_SCHED_OK, cost, now), 0);
        enq(s, lane, 0, cost, lane, now);
    }
}
