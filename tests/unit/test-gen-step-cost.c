/*
 * test-gen-step-cost.c - the engine's step-time model (generation/step-cost-impl.h): it recovers
 * known costs from noisy steps of varied shapes, is not ready before STEP_COST_MIN_SAMPLES
 * steps, predicts a shape it saw alone (the other costs undetermined) without going negative,
 * ignores bad times, and follows a machine that got slower within one window.
 */
#include <check.h>
#include <math.h>

#include "generation/step-cost-impl.h"

static uint64_t rng = 12345;

static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* ns: 1 ms per step, 0.8 ms more when eager, 4 us per token, 20 ns per key; times scale. */
static double true_ns(const struct rtx__step_shape *s, double scale) {
    return scale * (1e6 + (s->eager ? 8e5 : 0) + 4e3 * (double)s->tokens + 20.0 * (double)s->keys);
}

static struct rtx__step_shape random_shape(void) {
    struct rtx__step_shape s = {.tokens = (int64_t)1 << (int)(urand() * 12)};
    s.keys = (int64_t)(urand() * 300000);
    s.eager = s.tokens > 512;
    return s;
}

static void feed(struct rtx__step_cost *m, int n, double scale, double noise) {
    for (int i = 0; i < n; i++) {
        struct rtx__step_shape s = random_shape();
        rtx__step_cost_add(m, &s, true_ns(&s, scale) * (1 + noise * (2 * urand() - 1)));
    }
}

START_TEST(recovers_known_costs) {
    struct rtx__step_cost m;
    rtx__step_cost_init(&m);
    feed(&m, STEP_COST_MIN_SAMPLES - 1, 1, 0.02);
    ck_assert(!rtx__step_cost_ready(&m));
    struct rtx__step_shape flood = {.tokens = 2048, .keys = 256 * 600, .eager = true};
    ck_assert(rtx__step_cost_estimate(&m, &flood) == 0.0);
    feed(&m, STEP_COST_WINDOW, 1, 0.02);
    ck_assert(rtx__step_cost_ready(&m));
    static const double want[STEP_COST_TERMS] = {1e6, 8e5, 4e3, 20.0};
    for (int j = 0; j < STEP_COST_TERMS; j++)
        ck_assert_msg(fabs(m.cost[j] - want[j]) <= 0.15 * want[j], "cost %d: %g, want %g", j,
                      m.cost[j], want[j]);
    struct rtx__step_shape shapes[] = {flood, {.tokens = 1, .keys = 1064},
                                       {.tokens = 256, .keys = 256 * 600}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        double e = rtx__step_cost_estimate(&m, &shapes[i]), t = true_ns(&shapes[i], 1);
        ck_assert_msg(fabs(e - t) <= 0.05 * t, "shape %zu: %g ns, true %g", i, e, t);
    }
}
END_TEST

START_TEST(one_shape_alone_is_predicted) {
    struct rtx__step_cost m;
    rtx__step_cost_init(&m);
    struct rtx__step_shape s = {.tokens = 256, .keys = 150000, .eager = false};
    for (int i = 0; i < 30; i++) rtx__step_cost_add(&m, &s, 7.5e6);
    double e = rtx__step_cost_estimate(&m, &s);
    ck_assert_msg(fabs(e - 7.5e6) < 0.02 * 7.5e6, "%g", e);
    for (int j = 0; j < STEP_COST_TERMS; j++)
        ck_assert(m.cost[j] >= 0 && isfinite(m.cost[j]));
    rtx__step_cost_add(&m, &s, NAN); /* ignored */
    rtx__step_cost_add(&m, &s, -1);
    rtx__step_cost_add(&m, &s, 0);
    ck_assert_int_eq(m.n, 30);
}
END_TEST

START_TEST(follows_a_slower_machine) {
    struct rtx__step_cost m;
    rtx__step_cost_init(&m);
    feed(&m, STEP_COST_WINDOW, 1, 0.02);
    feed(&m, STEP_COST_WINDOW, 2, 0.02);
    struct rtx__step_shape s = {.tokens = 1024, .keys = 100000, .eager = true};
    double e = rtx__step_cost_estimate(&m, &s), t = true_ns(&s, 2);
    ck_assert_msg(fabs(e - t) <= 0.05 * t, "%g ns, true %g", e, t);
}
END_TEST

Suite *rtx_gen_step_cost_suite(void) {
    Suite *s = suite_create("gen_step_cost");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, recovers_known_costs);
    tcase_add_test(tc, one_shape_alone_is_predicted);
    tcase_add_test(tc, follows_a_slower_machine);
    suite_add_tcase(s, tc);
    return s;
}
