/*
 * stats.c - summaries of the engine's statistics (generation/generation.h): quantiles
 * estimated from the latency histograms, for the views that show a few figures instead of
 * the buckets (Admin.Generation, rtxctl generation). /metrics exports the buckets themselves.
 */
#include "generation/generation.h"

double rtx_gen_hist_quantile(const struct rtx_gen_hist *h, double q) {
    uint64_t total = 0;
    for (int b = 0; b < RTX_GEN_HIST_BUCKETS; b++)
        total += h->counts[b];
    if (total == 0) return 0.0;
    if (!(q > 0.0)) q = 0.0; /* NaN too */
    if (q > 1.0) q = 1.0;
    double rank = q * (double)total;
    uint64_t below = 0; /* samples in the buckets before b */
    for (int b = 0; b < RTX_GEN_HIST_BUCKETS; b++) {
        uint64_t c = h->counts[b];
        if (c == 0) continue;
        if ((double)(below + c) < rank && below + c < total) {
            below += c;
            continue;
        }
        if (b == RTX_GEN_HIST_BUCKETS - 1) return rtx_gen_hist_bounds[RTX_GEN_HIST_BUCKETS - 2];
        double lo = b == 0 ? 0.0 : rtx_gen_hist_bounds[b - 1], hi = rtx_gen_hist_bounds[b];
        double f = (rank - (double)below) / (double)c;
        return lo + (hi - lo) * (f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f);
    }
    return 0.0; /* not reached: the last bucket holding a sample answers */
}
