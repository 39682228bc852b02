/*
 * step-cost-impl.h - the generation engine's model of a step's time (generation/step-cost.c),
 * private to generation/: what the scheduler uses to keep steps short while a lane with a
 * tight target has work, and admission to estimate a first token.
 *
 * DESIGN
 * A step's time is modelled as
 *     t = c_step + c_eager * eager + c_token * tokens + c_key * keys
 * where tokens are the step's rows as the plan runs them (rounded up to its bucket), keys the
 * keys its attention reads (each sequence's context after the step), and eager is 1 when the
 * step runs node by node (no graph replay: a launch cost per kernel) and 0 when it replays.
 * A decode token is one row but reads its whole context, so decode-heavy steps cost more than
 * tokens alone say: a flooded step decoding 256 sequences of ~600 keys took twice what the
 * token-only model predicted. The four costs are fitted by least squares over the last
 * STEP_COST_WINDOW steps, each refit pulled toward the previous costs (ridge), so that costs
 * the recent steps cannot tell apart (every step alike under a steady load) stay where they
 * were instead of wandering; a negative cost is set to zero. Until STEP_COST_MIN_SAMPLES steps
 * are in, the model is not ready and callers do not cap anything by it. Steps that planned,
 * captured or ran a new plan's first time are not samples (their time is mostly setup).
 */
#ifndef RTX_GENERATION_STEP_COST_IMPL_H
#define RTX_GENERATION_STEP_COST_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#define STEP_COST_WINDOW 64
#define STEP_COST_MIN_SAMPLES 8
#define STEP_COST_TERMS 4

/* What a step computes, as the model sees it. */
struct rtx__step_shape {
    int64_t tokens;              /* rows, as run (the plan's bucket) */
    int64_t keys;                /* sum over its sequences of their context after the step */
    bool eager;                  /* node by node (no replayed graph) */
};

struct rtx__step_cost {
    double cost[STEP_COST_TERMS]; /* ns: per step, per eager step, per token, per key */
    double x[STEP_COST_WINDOW][STEP_COST_TERMS], y[STEP_COST_WINDOW];
    int n, next;                 /* samples held, ring position */
};

void rtx__step_cost_init(struct rtx__step_cost *m);
/* Adds a step's measured time and refits. */
void rtx__step_cost_add(struct rtx__step_cost *m, const struct rtx__step_shape *s, double ns);
bool rtx__step_cost_ready(const struct rtx__step_cost *m);
/* The model's time for a step, ns (0 until ready). */
double rtx__step_cost_estimate(const struct rtx__step_cost *m, const struct rtx__step_shape *s);

#endif /* RTX_GENERATION_STEP_COST_IMPL_H */
