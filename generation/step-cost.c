/*
 * step-cost.c - the engine's step-time model (generation/step-cost-impl.h): least squares over
 * a window of measured steps with a ridge toward the previous fit.
 */
#include "generation/step-cost-impl.h"

#include <math.h>
#include <string.h>

/* Features are scaled to about one so that the ridge weighs the terms alike; times in ms. */
#define TOKEN_UNIT 1024.0
#define KEY_UNIT 65536.0
#define RIDGE 1.0

static void features(const struct rtx__step_shape *s, double *x) {
    x[0] = 1.0;
    x[1] = s->eager ? 1.0 : 0.0;
    x[2] = (double)s->tokens / TOKEN_UNIT;
    x[3] = (double)s->keys / KEY_UNIT;
}

/* The costs in the scaled units (ms per unit) and back. */
static const double unit_ns[STEP_COST_TERMS] = {1e6, 1e6, 1e6 / TOKEN_UNIT, 1e6 / KEY_UNIT};

void rtx__step_cost_init(struct rtx__step_cost *m) { memset(m, 0, sizeof *m); }

bool rtx__step_cost_ready(const struct rtx__step_cost *m) {
    return m->n >= STEP_COST_MIN_SAMPLES;
}

/* Solves a x = b (n x n, partial pivoting) in place; false when singular. */
static bool solve(double a[STEP_COST_TERMS][STEP_COST_TERMS], double *b, int n) {
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        if (fabs(a[p][c]) < 1e-12) return false;
        if (p != c) {
            for (int k = 0; k < n; k++) {
                double t = a[c][k];
                a[c][k] = a[p][k];
                a[p][k] = t;
            }
            double t = b[c];
            b[c] = b[p];
            b[p] = t;
        }
        for (int r = c + 1; r < n; r++) {
            double f = a[r][c] / a[c][c];
            for (int k = c; k < n; k++) a[r][k] -= f * a[c][k];
            b[r] -= f * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        for (int k = c + 1; k < n; k++) b[c] -= a[c][k] * b[k];
        b[c] /= a[c][c];
    }
    return true;
}

static void refit(struct rtx__step_cost *m) {
    double a[STEP_COST_TERMS][STEP_COST_TERMS] = {{0}}, b[STEP_COST_TERMS];
    for (int j = 0; j < STEP_COST_TERMS; j++) {
        a[j][j] = RIDGE;
        b[j] = RIDGE * m->cost[j] / unit_ns[j];
    }
    for (int i = 0; i < m->n; i++)
        for (int j = 0; j < STEP_COST_TERMS; j++) {
            b[j] += m->x[i][j] * m->y[i];
            for (int k = 0; k < STEP_COST_TERMS; k++) a[j][k] += m->x[i][j] * m->x[i][k];
        }
    if (!solve(a, b, STEP_COST_TERMS)) return;
    for (int j = 0; j < STEP_COST_TERMS; j++) m->cost[j] = b[j] > 0 ? b[j] * unit_ns[j] : 0.0;
}

void rtx__step_cost_add(struct rtx__step_cost *m, const struct rtx__step_shape *s, double ns) {
    if (!(ns > 0) || !isfinite(ns)) return;
    features(s, m->x[m->next]);
    m->y[m->next] = ns / 1e6;
    m->next = (m->next + 1) % STEP_COST_WINDOW;
    if (m->n < STEP_COST_WINDOW) m->n++;
    refit(m);
}

double rtx__step_cost_estimate(const struct rtx__step_cost *m, const struct rtx__step_shape *s) {
    if (!rtx__step_cost_ready(m)) return 0.0;
    double x[STEP_COST_TERMS], t = 0;
    features(s, x);
    for (int j = 0; j < STEP_COST_TERMS; j++) t += x[j] * m->cost[j] / unit_ns[j];
    return t * 1e6;
}
