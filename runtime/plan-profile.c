/*
 * plan-profile.c - where a plan's run time goes, node group by node group: set
 * RTX_PLAN_PROFILE=1 in the environment and every plan synchronizes its backend after each
 * group it runs (so a device's kernels are timed, not their launches), adds the time to the
 * group's key, and prints the table to stderr when it is freed. For finding what bounds a
 * model, not for production: the per-group synchronize costs what it measures on small
 * kernels, and a profiling plan never captures a graph (runtime/plan.c).
 *
 * A group's key is its ops ("matmul", "rms_norm+matmul" for a fused group) and, for a node
 * that reads a graph input named like a weight, that input's name with its digits replaced
 * by '#' ("matmul layers.#.mlp.down_proj.weight"), so the layers of a model add up.
 * RTX_PLAN_PROFILE=nodes keys each group by its first node's index as well ("node 12:
 * conv2d+relu"), a row per group: for telling apart layers that the names would merge (an
 * imported CNN's folded convolutions have no weight names).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime-impl.h"

#define KEY_LEN 128

struct prof_row {
    char key[KEY_LEN];
    int64_t ns;
    int64_t calls;
};

struct rtx__plan_profile {
    bool per_node; /* RTX_PLAN_PROFILE=nodes: a row per group, keyed by its first node too */
    struct prof_row *rows;
    int n, cap;
    int64_t runs;
};

struct rtx__plan_profile *rtx__plan_profile_new(void) {
    const char *e = getenv("RTX_PLAN_PROFILE");
    if (!e || !e[0] || strcmp(e, "0") == 0) return NULL;
    struct rtx__plan_profile *pp = rtx_calloc(1, sizeof(struct rtx__plan_profile));
    if (pp) pp->per_node = strcmp(e, "nodes") == 0;
    return pp;
}

/* The name of the first graph input or initializer of node n that looks like a weight (has a '.'),
 * digits as '#', appended to key. */
static void append_weight(const struct rtx_graph *g, const struct rtx_node *n, char *key,
                          size_t len) {
    for (int i = 0; i < n->n_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0 || g->values[v].producer >= 0) continue;
        const char *name = g->values[v].name;
        if (!name || !strchr(name, '.')) continue;
        size_t at = strlen(key);
        if (at + 2 >= len) return;
        key[at++] = ' ';
        for (const char *c = name; *c && at + 1 < len; c++) {
            bool digit = *c >= '0' && *c <= '9';
            if (digit && key[at - 1] == '#') continue; /* a run of digits is one '#' */
            key[at++] = digit ? '#' : *c;
        }
        key[at] = 0;
        return;
    }
}

void rtx__plan_profile_add(struct rtx__plan_profile *pp, const struct rtx_graph *g,
                           const int *nodes, int span, int64_t ns) {
    char key[KEY_LEN] = "";
    if (pp->per_node) snprintf(key, sizeof key, "node %d: ", nodes[0]);
    for (int j = 0; j < span; j++) {
        size_t at = strlen(key);
        snprintf(key + at, sizeof key - at, "%s%s", j ? "+" : "",
                 rtx_op_name(g->nodes[nodes[j]].op));
    }
    for (int j = 0; j < span; j++) append_weight(g, &g->nodes[nodes[j]], key, sizeof key);
    for (int i = 0; i < pp->n; i++)
        if (strcmp(pp->rows[i].key, key) == 0) {
            pp->rows[i].ns += ns;
            pp->rows[i].calls++;
            return;
        }
    if (pp->n == pp->cap) {
        int cap = pp->cap ? 2 * pp->cap : 32;
        struct prof_row *r = rtx_realloc(pp->rows, (size_t)cap * sizeof *r);
        if (!r) return; /* a profile that misses a row is still a profile */
        pp->rows = r;
        pp->cap = cap;
    }
    struct prof_row *r = &pp->rows[pp->n++];
    snprintf(r->key, sizeof r->key, "%s", key);
    r->ns = ns;
    r->calls = 1;
}

void rtx__plan_profile_run(struct rtx__plan_profile *pp) { pp->runs++; }

static int by_time(const void *a, const void *b) {
    const struct prof_row *x = a, *y = b;
    return (x->ns < y->ns) - (x->ns > y->ns);
}

void rtx__plan_profile_free(struct rtx__plan_profile *pp, const struct rtx_graph *g) {
    if (!pp) return;
    if (pp->runs > 0 && pp->n > 0) {
        int64_t total = 0;
        for (int i = 0; i < pp->n; i++) total += pp->rows[i].ns;
        qsort(pp->rows, (size_t)pp->n, sizeof *pp->rows, by_time);
        fprintf(stderr, "plan profile of '%s': %lld runs, %.3f ms per run in node groups\n",
                g->name ? g->name : "", (long long)pp->runs,
                (double)total / 1e6 / (double)pp->runs);
        for (int i = 0; i < pp->n; i++)
            fprintf(stderr, "  %9.3f ms %5.1f%% %6lld calls  %s\n",
                    (double)pp->rows[i].ns / 1e6 / (double)pp->runs,
                    total ? 100.0 * (double)pp->rows[i].ns / (double)total : 0.0,
                    (long long)pp->rows[i].calls, pp->rows[i].key);
    }
    rtx_free(pp->rows);
    rtx_free(pp);
}
