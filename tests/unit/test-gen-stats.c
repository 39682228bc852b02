/*
 * test-gen-stats.c - quantiles estimated from the engine's latency histograms
 * (rtx_gen_hist_quantile, generation/generation.h): worked examples of Prometheus'
 * histogram_quantile rule (linear within the bucket the rank falls in, the largest finite
 * bound for the +Inf bucket), the edges (empty, one bucket, q outside [0, 1]), and on random
 * samples the estimate always lies in the bucket that holds the exact quantile of the
 * sorted samples, growing with q.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "generation/generation.h"

#define LAST (RTX_GEN_HIST_BUCKETS - 1) /* the +Inf bucket */

/* The bucket of a sample, as the engine files it: the first bound >= seconds. */
static int bucket_of(double seconds) {
    int b = 0;
    while (b < LAST && seconds > rtx_gen_hist_bounds[b])
        b++;
    return b;
}

static void hist_add(struct rtx_gen_hist *h, double seconds) {
    h->counts[bucket_of(seconds)]++;
    h->sum_s += seconds;
    h->n++;
}

static double lower(int b) {
    return b == 0 ? 0.0 : rtx_gen_hist_bounds[b - 1];
}

static double upper(int b) {
    return b == LAST ? INFINITY : rtx_gen_hist_bounds[b];
}

START_TEST(gen_stats_bounds_ascend) {
    /* the rule below needs ascending bounds; the first and last are the documented ones */
    for (int b = 1; b < LAST; b++)
        ck_assert_double_gt(rtx_gen_hist_bounds[b], rtx_gen_hist_bounds[b - 1]);
    ck_assert_double_eq(rtx_gen_hist_bounds[0], 0.001);
    ck_assert_double_eq(rtx_gen_hist_bounds[LAST - 1], 30.0);
}
END_TEST

START_TEST(gen_stats_quantile_empty_is_zero) {
    struct rtx_gen_hist h = {0};
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 0.0), 0.0);
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 0.5), 0.0);
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 0.99), 0.0);
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 1.0), 0.0);
}
END_TEST

/* Ten samples in (1 ms, 2.5 ms] and ten in (2.5 ms, 5 ms]. */
static struct rtx_gen_hist two_buckets(void) {
    struct rtx_gen_hist h = {.counts[1] = 10, .counts[2] = 10, .n = 20};
    return h;
}

/* two_buckets worked by hand with histogram_quantile's rule: rank = q * 20, then lower +
 * (upper - lower) * (rank - below) / count in the bucket where the cumulative count first
 * reaches the rank. */
START_TEST(gen_stats_quantile_interpolates_in_bucket) {
    struct rtx_gen_hist h = two_buckets();
    /* rank 5: bucket 1 (cumulative 10), 1 ms + 1.5 ms * 5/10 */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.25), 0.00175, 1e-12);
    /* rank 10: bucket 1 ends exactly there: its upper bound */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.5), 0.0025, 1e-12);
    /* rank 19.8: bucket 2, 2.5 ms + 2.5 ms * 9.8/10 */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.99), 0.00495, 1e-12);
    /* rank 20: the upper bound of the last bucket holding samples */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 1.0), 0.005, 1e-12);
}
END_TEST

START_TEST(gen_stats_quantile_first_bucket_starts_at_zero) {
    struct rtx_gen_hist h = {0};
    h.counts[0] = 4;
    h.n = 4;
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.5), 0.0005, 1e-12);
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.99), 0.00099, 1e-12);
}
END_TEST

START_TEST(gen_stats_quantile_inf_bucket_gives_largest_bound) {
    struct rtx_gen_hist h = {0};
    h.counts[0] = 99;
    h.counts[LAST] = 1;
    h.n = 100;
    /* rank 99 is the last sample of bucket 0 */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.99), 0.001, 1e-12);
    /* rank 99.5 falls in +Inf: the largest finite bound, 30 s */
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 0.995), 30.0);
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 1.0), 30.0);
    struct rtx_gen_hist only_inf = {0};
    only_inf.counts[LAST] = 3;
    only_inf.n = 3;
    ck_assert_double_eq(rtx_gen_hist_quantile(&only_inf, 0.5), 30.0);
}
END_TEST

START_TEST(gen_stats_quantile_passes_over_empty_buckets) {
    struct rtx_gen_hist h = {0};
    h.counts[3] = 2;  /* (5 ms, 10 ms] */
    h.counts[10] = 2; /* (500 ms, 1 s] */
    h.n = 4;
    /* q = 0: the lower bound of the first bucket holding a sample, not of bucket 0 */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.0), 0.005, 1e-12);
    /* rank 2 ends bucket 3; rank 2.4 is in bucket 10, past the empty 4..9 */
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.5), 0.010, 1e-12);
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.6), 0.5 + 0.5 * 0.4 / 2, 1e-12);
}
END_TEST

START_TEST(gen_stats_quantile_clamps_q) {
    struct rtx_gen_hist h = two_buckets();
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, -1.0), rtx_gen_hist_quantile(&h, 0.0));
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, NAN), rtx_gen_hist_quantile(&h, 0.0));
    ck_assert_double_eq(rtx_gen_hist_quantile(&h, 7.0), rtx_gen_hist_quantile(&h, 1.0));
    ck_assert_double_eq_tol(rtx_gen_hist_quantile(&h, 0.0), 0.001, 1e-12);
}
END_TEST

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Random latencies, log-uniform over 0.1 ms .. 100 s (every bucket, +Inf too): for each q
 * the estimate lies within the bounds of the bucket holding the exact q-quantile of the
 * sorted samples (the sample of rank ceil(q n)), or is the largest finite bound when that
 * sample is past it; estimates never decrease as q grows. */
START_TEST(gen_stats_quantile_brackets_exact_quantile) {
    enum { N = 997 };
    static double samples[N];
    uint64_t seed = 12345;
    for (int round = 0; round < 20; round++) {
        struct rtx_gen_hist h = {0};
        int n = 1 + (int)(next_rand(&seed) % N);
        double lo_exp = -4.0 + (double)(next_rand(&seed) % 4), span = 1.0 + (double)round / 3;
        for (int i = 0; i < n; i++) {
            double u = (double)(next_rand(&seed) >> 11) / 9007199254740992.0;
            samples[i] = pow(10.0, lo_exp + span * u);
            hist_add(&h, samples[i]);
        }
        qsort(samples, (size_t)n, sizeof *samples, cmp_double);
        double last = 0.0;
        for (int k = 0; k <= 100; k++) {
            double q = k / 100.0;
            double est = rtx_gen_hist_quantile(&h, q);
            int rank = (int)ceil(q * n);
            double exact = samples[rank > 0 ? rank - 1 : 0];
            int b = bucket_of(exact);
            if (b == LAST) {
                ck_assert_double_eq(est, rtx_gen_hist_bounds[LAST - 1]);
            } else {
                ck_assert_msg(est >= lower(b) - 1e-12 && est <= upper(b) + 1e-12,
                              "round %d n %d q %.2f: estimate %g outside the bucket (%g, %g] "
                              "of the exact quantile %g",
                              round, n, q, est, lower(b), upper(b), exact);
            }
            ck_assert_msg(est >= last - 1e-12, "q %.2f: %g after %g", q, est, last);
            last = est;
        }
    }
}
END_TEST

Suite *rtx_gen_stats_suite(void) {
    Suite *s = suite_create("gen_stats");
    TCase *tc = tcase_create("quantile");
    tcase_add_test(tc, gen_stats_bounds_ascend);
    tcase_add_test(tc, gen_stats_quantile_empty_is_zero);
    tcase_add_test(tc, gen_stats_quantile_interpolates_in_bucket);
    tcase_add_test(tc, gen_stats_quantile_first_bucket_starts_at_zero);
    tcase_add_test(tc, gen_stats_quantile_inf_bucket_gives_largest_bound);
    tcase_add_test(tc, gen_stats_quantile_passes_over_empty_buckets);
    tcase_add_test(tc, gen_stats_quantile_clamps_q);
    tcase_add_test(tc, gen_stats_quantile_brackets_exact_quantile);
    suite_add_tcase(s, tc);
    return s;
}
