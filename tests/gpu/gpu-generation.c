/*
 * gpu-generation.c - rope and paged_attention on the CUDA backend against the CPU reference
 * (kernels/cuda/generation.cu against kernels/cpu/ops-generation.c).
 *
 * rope: every float dtype, both pairings, rotated dims equal to and fewer than the head size, i32
 * and i64 positions up to 100000. paged_attention: ragged batches (padding rows, a padding
 * sequence, a decoding sequence, a chunk that starts mid-context, a prefill; shuffled block tables;
 * stale data in every cache slot) in every float dtype; a prefill of 300 tokens; a decode batch of
 * 64 sequences with 1000 to 1100 tokens of context in bf16, a prefill of 16 prompts of 512 and 64
 * chunks of 128 after 384 keys (timed: a note, unless RTX_GPU_LIGHT=1); prompt chunks beside decode
 * rows with 7 and 1 query heads per KV head (kernels/cuda/paged-prefill.cu's tiles of 9 and 64
 * tokens); two long contexts in a small batch, which splits the keys into partitions; a head size
 * whose rows do not move in 16-byte units; head geometries whose shared memory needs a smaller key
 * tile or the device's opt-in limit. The caches a run leaves must be the CPU's, bit for bit. Every
 * case runs under each RTX_PAGED_ROUTE (rows, chunks, all: which rows
 * kernels/cuda/paged-prefill.cu's tensor-core kernel takes). Bad metadata fails on the GPU with the
 * CPU's message, leaving the device caches unchanged. A plan of rope + paged_attention runs twice
 * through rtx_plan_execute_device on device caches: never captured, the caches updated in place
 * between the steps.
 *
 * DESIGN
 * Part of rtx-gpu-tests (called per healthy device). gpu_generation_run takes the two
 * backends, so the cases themselves can be checked with the CPU backend in both roles.
 * Inputs are uniform in [-1, 1) from a fixed seed. Outputs are compared per element,
 * |gpu - cpu| <= tol * max(1, |cpu|), tol 1e-5 / 2e-3 / 8e-3 for f32 / f16 / bf16: both sides
 * compute in f32 (sums in another order, sincosf against glibc's sinf and cosf) and round
 * once, so they differ by at most an ulp of the output; the prompt chunks' kernel also rounds
 * the probabilities to the input dtype for its P V product (as FlashAttention does), within
 * the same bound for outputs below 1 (a weighted mean of values in [-1, 1)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "tests/gpu/gpu-tests.h"

static struct rtx_backend *ref_be, *dev_be;
static struct rtx_rng rng;

enum { Q, K, V, KC, VC, SLOTS, TABLES, QSTART, CTX, N_PA };

static double tol_of(enum rtx_dtype dt) {
    return dt == RTX_F32 ? 1e-5 : dt == RTX_F16 ? 2e-3 : 8e-3;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A host copy of t (NULL when out of memory). */
static struct rtx_tensor *clone(const struct rtx_tensor *t) {
    struct rtx_tensor *c = NULL;
    if (rtx_tensor_new(t->dtype, t->ndim, t->dims, &c, NULL) == 0)
        memcpy(rtx_tensor_data(c), rtx_tensor_data(t), rtx_tensor_nbytes(t));
    return c;
}

static struct rtx_tensor *i32_tensor(int ndim, const int64_t *dims, const int32_t *v) {
    struct rtx_tensor *t = NULL;
    if (rtx_tensor_new(RTX_I32, ndim, dims, &t, NULL) == 0)
        memcpy(rtx_tensor_data(t), v, rtx_tensor_nbytes(t));
    return t;
}

static void unref_all(struct rtx_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        rtx_tensor_unref(t[i]);
        t[i] = NULL;
    }
}

/* A graph of one paged_attention node over inputs in[0..8] (docs/ops.md's order); with rope, q and
 * k pass through rope first (inputs "pos" and "inv_freq" follow the nine). */
static int paged_graph(const struct rtx_tensor *const *in, bool rope, struct rtx_graph **out,
                       struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new("paged", &g, err);
    const char *names[N_PA + 2] = {"q",       "k",      "v",           "k_cache",      "v_cache",
                                   "slots",   "tables", "query_start", "context_lens", "pos",
                                   "inv_freq"};
    for (int i = 0; i < N_PA + (rope ? 2 : 0) && rc >= 0; i++)
        rc = rtx_graph_add_input(g, names[i], in[i]->dtype, in[i]->ndim, in[i]->dims, err);
    const char *rq[] = {"q", "pos", "inv_freq"}, *rk[] = {"k", "pos", "inv_freq"};
    const char *oq[] = {"qr"}, *ok[] = {"kr"}, *oy[] = {"y"};
    if (rope && rc >= 0) rc = rtx_graph_add_node(g, "rope", "rope_q", rq, 3, oq, 1, err);
    if (rope && rc >= 0) rc = rtx_graph_add_node(g, "rope", "rope_k", rk, 3, ok, 1, err);
    if (rope) {
        names[0] = "qr";
        names[1] = "kr";
    }
    if (rc >= 0) rc = rtx_graph_add_node(g, "paged_attention", "attn", names, N_PA, oy, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    if (rc < 0) {
        rtx_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Plans g and runs it once with rtx_plan_execute (written inputs copied back into in). */
static int run_graph(struct rtx_backend *be, const struct rtx_graph *g, struct rtx_tensor **in,
                     struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_plan *plan = NULL;
    int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, g->n_inputs, NULL, &plan, err);
    if (rc == 0) rc = rtx_plan_execute(plan, be, in, g->n_inputs, out, 1, NULL, NULL, err);
    rtx_plan_free(plan);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Batches
 * ---------------------------------------------------------------------------------------- */

#define MAX_SEQS 64

struct seq {
    int64_t ctx, n; /* keys after the step, new tokens (the last n positions) */
};

struct pcase {
    char what[96];
    enum rtx_dtype dt;
    int64_t H, Hkv, D, BS;
    int S;
    struct seq seqs[MAX_SEQS];
    int64_t pad_front, pad_back; /* padding rows before and after the sequences' rows */
};

/* The nine inputs of c: blocks handed out from a shuffled pool (3 spare), unused table
 * entries -1, every cache slot random. 0 or -1 (out of memory). */
static int make_batch(const struct pcase *c, struct rtx_tensor **in) {
    int64_t T = c->pad_front + c->pad_back, B = 1, need = 0;
    for (int s = 0; s < c->S; s++) {
        int64_t nb = (c->seqs[s].ctx + c->BS - 1) / c->BS;
        T += c->seqs[s].n;
        need += nb;
        B = nb > B ? nb : B;
    }
    int64_t NB = need + 3, S = c->S;
    int32_t *perm = malloc(sizeof *perm * (size_t)NB),
            *tables = malloc(sizeof *tables * (size_t)(S * B));
    int32_t *slots = malloc(sizeof *slots * (size_t)(T + 1)), qs[MAX_SEQS + 1], ctx[MAX_SEQS];
    int rc = perm && tables && slots ? 0 : -1;
    for (int64_t i = 0; i < NB && rc == 0; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0 && rc == 0; i--) {
        int64_t j = (int64_t)(rtx_rng_next(&rng) % (uint64_t)(i + 1));
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    int64_t next = 0, t = c->pad_front;
    for (int64_t r = 0; r < T && rc == 0; r++)
        slots[r] = -1;
    qs[0] = (int32_t)c->pad_front;
    for (int s = 0; s < S && rc == 0; s++) {
        const struct seq *q = &c->seqs[s];
        for (int64_t b = 0; b < B; b++)
            tables[s * B + b] = b * c->BS < q->ctx ? perm[next++] : -1;
        for (int64_t pos = q->ctx - q->n; pos < q->ctx; pos++)
            slots[t++] = tables[s * B + pos / c->BS] * (int32_t)c->BS + (int32_t)(pos % c->BS);
        qs[s + 1] = (int32_t)(qs[s] + q->n);
        ctx[s] = (int32_t)q->ctx;
    }
    const int64_t qd[3] = {T, c->H, c->D}, kd[3] = {T, c->Hkv, c->D},
                  cd[4] = {NB, c->BS, c->Hkv, c->D}, td[2] = {S, B}, s1 = S + 1;
    if (rc == 0) {
        rc |= rtx_tensor_random(&rng, c->dt, 3, qd, &in[Q], NULL);
        rc |= rtx_tensor_random(&rng, c->dt, 3, kd, &in[K], NULL);
        rc |= rtx_tensor_random(&rng, c->dt, 3, kd, &in[V], NULL);
        rc |= rtx_tensor_random(&rng, c->dt, 4, cd, &in[KC], NULL);
        rc |= rtx_tensor_random(&rng, c->dt, 4, cd, &in[VC], NULL);
        in[SLOTS] = i32_tensor(1, &T, slots);
        in[TABLES] = i32_tensor(2, td, tables);
        in[QSTART] = i32_tensor(1, &s1, qs);
        in[CTX] = i32_tensor(1, &S, ctx);
        for (int i = 0; i < N_PA; i++)
            rc |= in[i] ? 0 : -1;
    }
    free(perm);
    free(tables);
    free(slots);
    return rc ? -1 : 0;
}

/* Runs c on both backends from the same inputs (each with its own copy of the caches); the
 * outputs must agree and the caches be the same bits. With time_it, notes the GPU's time per
 * run of the node on device-resident inputs. */
static void paged_case(const struct pcase *c, bool time_it) {
    struct rtx_tensor *in[N_PA] = {NULL}, *a[N_PA], *b[N_PA], *ya = NULL, *yb = NULL;
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    char why[256];
    if (!gpu_check(make_batch(c, in) == 0 &&
                       paged_graph((const struct rtx_tensor *const *)in, false, &g, &err) == 0,
                   "paged_attention %s: inputs and graph%s%s", c->what, err.msg[0] ? ": " : "",
                   err.msg)) {
        unref_all(in, N_PA);
        return;
    }
    memcpy(a, in, sizeof a);
    memcpy(b, in, sizeof b);
    a[KC] = clone(in[KC]);
    a[VC] = clone(in[VC]);
    b[KC] = clone(in[KC]);
    b[VC] = clone(in[VC]);
    int rc = run_graph(ref_be, g, a, &ya, &err);
    if (gpu_check(rc == 0, "paged_attention %s: cpu%s%s", c->what, rc ? ": " : "", err.msg)) {
        rc = run_graph(dev_be, g, b, &yb, &err);
        if (gpu_check(rc == 0, "paged_attention %s: cuda%s%s", c->what, rc ? ": " : "", err.msg)) {
            gpu_check(gpu_close_to(ya, yb, tol_of(c->dt), why, sizeof why),
                      "paged_attention %s: output%s%s", c->what, why[0] ? ": " : "", why);
            gpu_check(gpu_same_bits(a[KC], b[KC]) && gpu_same_bits(a[VC], b[VC]),
                      "paged_attention %s: the caches hold the same bits", c->what);
        }
    }
    if (time_it && rc == 0) {
        struct rtx_tensor *dev[N_PA] = {NULL}, *y = NULL;
        struct rtx_plan *plan = NULL;
        int runs = 20;
        for (int i = 0; i < N_PA && rc == 0; i++)
            rc = rtx_backend_upload(dev_be, b[i], &dev[i], &err);
        if (rc == 0)
            rc = rtx_plan_new(g, (const struct rtx_tensor *const *)dev, N_PA, NULL, &plan, &err);
        double t0 = 0;
        for (int r = -2; r < runs && rc == 0; r++) { /* two warm-up runs */
            if (r == 0) t0 = now_s();
            rc = rtx_plan_execute_device(plan, dev_be, dev, N_PA, &y, 1, NULL, NULL, &err);
            rtx_tensor_unref(y);
        }
        double ms = (now_s() - t0) * 1e3 / runs;
        int64_t keys = 0;
        double pairs = 0; /* (query row, visible key) pairs: 4 D H flops each */
        for (int s = 0; s < c->S; s++) {
            keys += c->seqs[s].ctx;
            for (int64_t i = 0; i < c->seqs[s].n; i++)
                pairs += (double)(c->seqs[s].ctx - c->seqs[s].n + i + 1);
        }
        double gb =
            (double)keys * (double)(c->Hkv * c->D * 2) * (double)rtx_dtype_size(c->dt) / 1e9;
        if (gpu_check(rc == 0, "paged_attention %s: timed runs%s%s", c->what, rc ? ": " : "",
                      err.msg))
            gpu_note("paged_attention %s: %.3f ms per node (check, write, attention), "
                     "%.1f GB/s of keys and values, %.1f TFLOP/s",
                     c->what, ms, gb / (ms * 1e-3),
                     pairs * 4.0 * (double)(c->D * c->H) / (ms * 1e-3) / 1e12);
        rtx_plan_free(plan);
        unref_all(dev, N_PA);
    }
    rtx_tensor_unref(ya);
    rtx_tensor_unref(yb);
    struct rtx_tensor *caches[4] = {a[KC], a[VC], b[KC], b[VC]};
    unref_all(caches, 4);
    unref_all(in, N_PA);
    rtx_graph_free(g);
}

/* A batch of the head geometry and block size given, in what (printf) with the geometry;
 * its sequences, S, and padding rows are the caller's to set. */
static struct pcase geometry(enum rtx_dtype dt, int64_t H, int64_t Hkv, int64_t D, int64_t BS,
                             const char *what) {
    struct pcase c = {.dt = dt, .H = H, .Hkv = Hkv, .D = D, .BS = BS};
    snprintf(c.what, sizeof c.what, "%s %s H %lld Hkv %lld D %lld BS %lld", what,
             rtx_dtype_name(dt), (long long)H, (long long)Hkv, (long long)D, (long long)BS);
    return c;
}

/* The ragged batch of the file comment. */
static struct pcase ragged(enum rtx_dtype dt, int64_t H, int64_t Hkv, int64_t D, int64_t BS) {
    struct pcase c = geometry(dt, H, Hkv, D, BS, "ragged");
    const struct seq seqs[4] = {{40, 1}, {33, 17}, {20, 20}, {0, 0}};
    c.S = 4;
    memcpy(c.seqs, seqs, sizeof seqs);
    c.pad_front = 1;
    c.pad_back = 2;
    return c;
}

/* c under each RTX_PAGED_ROUTE (kernels/cuda/generation.c): every row per row, the chunks
 * on the tensor cores, every sequence on the tensor cores. */
static void paged_routes(const struct pcase *c0, bool time_it) {
    static const char *const routes[3] = {"rows", "chunks", "all"};
    for (int r = 0; r < 3; r++) {
        struct pcase c = *c0;
        snprintf(c.what, sizeof c.what, "%.80s [%s]", c0->what, routes[r]);
        setenv("RTX_PAGED_ROUTE", routes[r], 1);
        paged_case(&c, time_it);
    }
    unsetenv("RTX_PAGED_ROUTE");
}

static void paged_tests(void) {
    static const enum rtx_dtype dts[3] = {RTX_F32, RTX_F16, RTX_BF16};
    for (int k = 0; k < 3; k++) {
        struct pcase c = ragged(dts[k], 8, 2, 64, 16);
        paged_routes(&c, false);
    }
    struct pcase c = ragged(RTX_BF16, 4, 4, 36, 8); /* rows of 72 bytes: no 16-byte units */
    paged_routes(&c, false);
    c = ragged(RTX_F32, 8, 1, 256, 16); /* G 8 x D 256 in f32: a smaller key tile */
    paged_routes(&c, false);
    c = ragged(RTX_F32, 16, 1, 512, 16); /* shared memory past 48 KiB: the opt-in limit */
    paged_routes(&c, false);
    c = geometry(RTX_BF16, 8, 2, 128, 16, "prefill of 300");
    c.S = 1;
    c.seqs[0] = (struct seq){300, 300};
    paged_routes(&c, false);
    c = geometry(RTX_F16, 16, 4, 128, 32, "long contexts, few rows (key partitions)");
    c.S = 3;
    c.seqs[0] = (struct seq){3000, 1};
    c.seqs[1] = (struct seq){4100, 3};
    c.seqs[2] = (struct seq){7, 1};
    paged_routes(&c, false);
    /* prompt chunks beside decode rows (paged-prefill.cu takes the chunks): 7 query heads
     * per KV head (tiles of 9 tokens), then multi-head attention (64 tokens a tile) */
    c = geometry(RTX_BF16, 14, 2, 64, 16, "chunks and decode rows, G 7,");
    c.S = 5;
    c.seqs[0] = (struct seq){100, 37};
    c.seqs[1] = (struct seq){64, 1};
    c.seqs[2] = (struct seq){200, 200};
    c.seqs[3] = (struct seq){17, 16};
    c.seqs[4] = (struct seq){2, 2};
    c.pad_back = 3;
    paged_routes(&c, false);
    c = geometry(RTX_F16, 12, 12, 64, 16, "chunks and decode rows, G 1,");
    c.S = 3;
    c.seqs[0] = (struct seq){90, 90};
    c.seqs[1] = (struct seq){130, 2};
    c.seqs[2] = (struct seq){5, 1};
    c.pad_front = 2;
    paged_routes(&c, false);
    const char *light = getenv("RTX_GPU_LIGHT"); /* as gpu-exec.c: no timing under sanitizers */
    const bool timed = !(light && strcmp(light, "1") == 0);
    c = geometry(RTX_BF16, 32, 8, 64, 16, "prefill of 16 prompts of 512,");
    c.S = 16;
    for (int s = 0; s < c.S; s++)
        c.seqs[s] = (struct seq){512, 512};
    paged_routes(&c, timed);
    c = geometry(RTX_BF16, 32, 8, 64, 16, "64 chunks of 128 after 384 keys,");
    c.S = 64;
    for (int s = 0; s < c.S; s++)
        c.seqs[s] = (struct seq){512, 128};
    paged_routes(&c, timed);
    /* a prompt's suffix after a cached prefix: few tiles over long key ranges, which
     * paged-prefill.cu splits into key partitions */
    c = geometry(RTX_BF16, 32, 8, 64, 16, "a suffix of 64 after 1,000 cached keys,");
    c.S = 1;
    c.seqs[0] = (struct seq){1064, 64};
    paged_routes(&c, timed);
    c = geometry(RTX_BF16, 32, 8, 128, 16, "decode of 64 sequences, 1000-1100 keys,");
    c.S = MAX_SEQS;
    for (int s = 0; s < MAX_SEQS; s++)
        c.seqs[s] = (struct seq){1000 + (int64_t)(rtx_rng_next(&rng) % 101), 1};
    paged_routes(&c, timed);
}

/* ------------------------------------------------------------------------------------------
 * Bad metadata, and device-resident steps
 * ---------------------------------------------------------------------------------------- */

/* One metadata entry of the ragged batch made bad: both backends fail with the same message
 * and the device caches keep their bytes. */
static void bad_case(int input, int64_t index, int32_t value, const char *what) {
    struct pcase c = ragged(RTX_BF16, 8, 2, 64, 16);
    struct rtx_tensor *in[N_PA] = {NULL}, *dev[N_PA] = {NULL}, *y = NULL, *kc = NULL;
    struct rtx_graph *g = NULL;
    struct rtx_plan *plan = NULL;
    struct rtx_err ec = {0}, eg = {0};
    int rc = make_batch(&c, in);
    if (rc == 0) rc = paged_graph((const struct rtx_tensor *const *)in, false, &g, &eg);
    if (!gpu_check(rc == 0, "bad %s: inputs", what)) goto out;
    ((int32_t *)rtx_tensor_data(in[input]))[index] = value;
    struct rtx_tensor *a[N_PA];
    memcpy(a, in, sizeof a);
    a[KC] = clone(in[KC]);
    a[VC] = clone(in[VC]);
    int rc_cpu = run_graph(ref_be, g, a, &y, &ec);
    rtx_tensor_unref(a[KC]);
    rtx_tensor_unref(a[VC]);
    for (int i = 0; i < N_PA && rc == 0; i++)
        rc = rtx_backend_upload(dev_be, in[i], &dev[i], &eg);
    if (rc == 0)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)dev, N_PA, NULL, &plan, &eg);
    if (!gpu_check(rc == 0, "bad %s: upload and plan%s%s", what, rc ? ": " : "", eg.msg)) goto out;
    rc = rtx_plan_execute_device(plan, dev_be, dev, N_PA, &y, 1, NULL, NULL, &eg);
    gpu_check(rc_cpu == RTX_EINVAL && rc == RTX_EINVAL && strcmp(ec.msg, eg.msg) == 0 &&
                  strstr(eg.msg, "node 0 'attn' (paged_attention)"),
              "bad %s fails alike: cpu '%s', cuda '%s'", what, ec.msg, eg.msg);
    rc = rtx_backend_download(dev_be, dev[KC], &kc, &eg);
    gpu_check(rc == 0 && gpu_same_bits(kc, in[KC]), "bad %s: the device's k_cache is untouched",
              what);
out:
    rtx_tensor_unref(kc);
    rtx_plan_free(plan);
    rtx_graph_free(g);
    unref_all(dev, N_PA);
    unref_all(in, N_PA);
}

/* Step `step` (0 or 1) of four decoding sequences: each writes position ctx0 + step. The
 * q, k, v rows, positions and metadata into in[] (the caches and inv_freq are left). */
static int decode_step(int step, const int64_t *ctx0, int64_t B, int64_t BS, const int32_t *tables,
                       enum rtx_dtype dt, int64_t H, int64_t Hkv, int64_t D,
                       struct rtx_tensor **in) {
    const int64_t S = 4, qd[3] = {S, H, D}, kd[3] = {S, Hkv, D}, td[2] = {S, B}, s1 = S + 1;
    int32_t slots[4], qs[5] = {0, 1, 2, 3, 4}, ctx[4], pos[4];
    for (int s = 0; s < S; s++) {
        int64_t p = ctx0[s] + step;
        pos[s] = (int32_t)p;
        ctx[s] = (int32_t)(p + 1);
        slots[s] = tables[s * B + p / BS] * (int32_t)BS + (int32_t)(p % BS);
    }
    int rc = rtx_tensor_random(&rng, dt, 3, qd, &in[Q], NULL) |
             rtx_tensor_random(&rng, dt, 3, kd, &in[K], NULL) |
             rtx_tensor_random(&rng, dt, 3, kd, &in[V], NULL);
    in[SLOTS] = i32_tensor(1, &S, slots);
    in[TABLES] = i32_tensor(2, td, tables);
    in[QSTART] = i32_tensor(1, &s1, qs);
    in[CTX] = i32_tensor(1, &S, ctx);
    in[N_PA] = i32_tensor(1, &S, pos);
    return rc || !in[SLOTS] || !in[TABLES] || !in[QSTART] || !in[CTX] || !in[N_PA] ? -1 : 0;
}

/* rope + paged_attention, two decode steps through rtx_plan_execute_device on caches that stay
 * on the device; the CPU runs the same steps on host caches. */
static void device_steps(void) {
    const enum rtx_dtype dt = RTX_BF16;
    const int64_t H = 8, Hkv = 2, D = 64, BS = 16, B = 5, NB = 24, half = D / 2;
    const int64_t ctx0[4] = {50, 17, 64, 5}, cd[4] = {NB, BS, Hkv, D};
    int32_t tables[4 * 5];
    for (int i = 0; i < 20; i++)
        tables[i] = (int32_t)((i * 7 + 3) % NB); /* distinct blocks */
    struct rtx_tensor *hkc = NULL, *hvc = NULL, *dkc = NULL, *dvc = NULL, *inv = NULL, *k0;
    struct rtx_tensor *in[N_PA + 2] = {NULL}, *dev[N_PA + 2] = {NULL}, *ya = NULL, *yb = NULL;
    struct rtx_graph *g = NULL;
    struct rtx_plan *pc = NULL, *pg = NULL;
    struct rtx_exec_stats st = {0};
    struct rtx_err err = {0};
    char why[256];
    int rc = rtx_tensor_random(&rng, dt, 4, cd, &hkc, &err) |
             rtx_tensor_random(&rng, dt, 4, cd, &hvc, &err) |
             rtx_tensor_new(RTX_F32, 1, &half, &inv, &err);
    for (int64_t i = 0; rc == 0 && i < half; i++)
        ((float *)rtx_tensor_data(inv))[i] = (float)pow(10000.0, -2.0 * (double)i / (double)D);
    k0 = rc == 0 ? clone(hkc) : NULL; /* the keys before the steps */
    if (rc == 0) rc = rtx_backend_upload(dev_be, hkc, &dkc, &err);
    if (rc == 0) rc = rtx_backend_upload(dev_be, hvc, &dvc, &err);
    for (int step = 0; step < 2 && rc == 0; step++) {
        rc = decode_step(step, ctx0, B, BS, tables, dt, H, Hkv, D, in);
        in[KC] = rtx_tensor_ref(hkc);
        in[VC] = rtx_tensor_ref(hvc);
        in[N_PA + 1] = rtx_tensor_ref(inv);
        if (rc == 0 && !g) rc = paged_graph((const struct rtx_tensor *const *)in, true, &g, &err);
        for (int i = 0; i < N_PA + 2 && rc == 0; i++)
            rc = i == KC || i == VC ? 0 : rtx_backend_upload(dev_be, in[i], &dev[i], &err);
        dev[KC] = rtx_tensor_ref(dkc);
        dev[VC] = rtx_tensor_ref(dvc);
        if (rc == 0 && !pc)
            rc = rtx_plan_new(g, (const struct rtx_tensor *const *)in, N_PA + 2, NULL, &pc, &err);
        if (rc == 0 && !pg)
            rc = rtx_plan_new(g, (const struct rtx_tensor *const *)dev, N_PA + 2, NULL, &pg, &err);
        if (rc == 0) rc = rtx_plan_execute(pc, ref_be, in, N_PA + 2, &ya, 1, NULL, NULL, &err);
        if (rc == 0)
            rc = rtx_plan_execute_device(pg, dev_be, dev, N_PA + 2, &yb, 1, NULL, &st, &err);
        struct rtx_tensor *hy = NULL;
        if (rc == 0) rc = rtx_backend_download(dev_be, yb, &hy, &err);
        if (gpu_check(rc == 0, "device steps: step %d runs%s%s", step, rc ? ": " : "", err.msg)) {
            gpu_check(st.mode == RTX_EXEC_PLAIN && rtx_plan_capture_note(pg)[0] == '\0',
                      "device steps: step %d ran node by node, never captured (mode %s)", step,
                      rtx_exec_mode_name(st.mode));
            gpu_check(gpu_close_to(ya, hy, tol_of(dt), why, sizeof why),
                      "device steps: step %d output%s%s", step, why[0] ? ": " : "", why);
        }
        rtx_tensor_unref(hy);
        rtx_tensor_unref(ya);
        rtx_tensor_unref(yb);
        ya = yb = NULL;
        unref_all(in, N_PA + 2);
        unref_all(dev, N_PA + 2);
    }
    /* both steps' keys (rotated: an ulp apart at most) and values are in the device caches */
    struct rtx_tensor *gk = NULL, *gv = NULL;
    if (rc == 0) rc = rtx_backend_download(dev_be, dkc, &gk, &err);
    if (rc == 0) rc = rtx_backend_download(dev_be, dvc, &gv, &err);
    if (gpu_check(rc == 0, "device steps: caches downloaded%s%s", rc ? ": " : "", err.msg))
        gpu_check(gpu_close_to(hkc, gk, tol_of(dt), why, sizeof why) && gpu_same_bits(hvc, gv) &&
                      !gpu_same_bits(k0, gk),
                  "device steps: the device caches were updated in place like the host's%s%s",
                  why[0] ? ": " : "", why);
    struct rtx_tensor *t[8] = {hkc, hvc, dkc, dvc, inv, gk, gv, k0};
    unref_all(t, 8);
    rtx_plan_free(pc);
    rtx_plan_free(pg);
    rtx_graph_free(g);
}

/* ------------------------------------------------------------------------------------------
 * rope
 * ---------------------------------------------------------------------------------------- */

static void rope_case(enum rtx_dtype dt, enum rtx_dtype pdt, int64_t T, int64_t H, int64_t D,
                      int64_t half, int interleaved, int64_t max_pos) {
    const int64_t xd[3] = {T, H, D};
    struct rtx_tensor *in[3] = {NULL}, *ya = NULL, *yb = NULL;
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    char what[96], why[256];
    snprintf(what, sizeof what, "rope %s pos %s T %lld H %lld D %lld R %lld interleaved %d",
             rtx_dtype_name(dt), rtx_dtype_name(pdt), (long long)T, (long long)H, (long long)D,
             (long long)(2 * half), interleaved);
    int rc = rtx_tensor_random(&rng, dt, 3, xd, &in[0], &err) |
             rtx_tensor_new(pdt, 1, &T, &in[1], &err) |
             rtx_tensor_new(RTX_F32, 1, &half, &in[2], &err);
    for (int64_t t = 0; rc == 0 && t < T; t++)
        rtx_tensor_set(in[1], t, (double)(rtx_rng_next(&rng) % (uint64_t)(max_pos + 1)));
    for (int64_t i = 0; rc == 0 && i < half; i++)
        rtx_tensor_set(in[2], i, pow(500000.0, -2.0 * (double)i / (double)(2 * half)));
    const char *names[3] = {"x", "positions", "inv_freq"}, *outs[1] = {"y"};
    if (rc == 0) rc = rtx_graph_new("rope", &g, &err);
    for (int i = 0; i < 3 && rc >= 0; i++)
        rc = rtx_graph_add_input(g, names[i], in[i]->dtype, in[i]->ndim, in[i]->dims, &err);
    int node = rc >= 0 ? rtx_graph_add_node(g, "rope", "rope", names, 3, outs, 1, &err) : rc;
    rc = node < 0 ? node : rtx_graph_set_attr_int(g, node, "interleaved", interleaved, &err);
    if (rc == 0) rc = rtx_graph_add_output(g, "y", &err);
    if (rc == 0) rc = run_graph(ref_be, g, in, &ya, &err);
    if (rc == 0) rc = run_graph(dev_be, g, in, &yb, &err);
    if (gpu_check(rc == 0, "%s: runs%s%s", what, rc ? ": " : "", err.msg))
        gpu_check(gpu_close_to(ya, yb, tol_of(dt), why, sizeof why), "%s%s%s", what,
                  why[0] ? ": " : "", why);
    rtx_tensor_unref(ya);
    rtx_tensor_unref(yb);
    unref_all(in, 3);
    rtx_graph_free(g);
}

static void rope_tests(void) {
    static const enum rtx_dtype dts[3] = {RTX_F32, RTX_F16, RTX_BF16};
    for (int k = 0; k < 3; k++)
        for (int il = 0; il <= 1; il++) {
            rope_case(dts[k], RTX_I32, 37, 5, 64, 32, il, 4096);
            rope_case(dts[k], RTX_I64, 19, 3, 80, 16, il, 100000);
        }
    rope_case(RTX_BF16, RTX_I32, 2048, 14, 64, 32, 0, 2047); /* a prefill's worth */
    rope_case(RTX_F32, RTX_I64, 3, 2, 1040, 520, 1, 1000);   /* pairs past one chunk */
}

void gpu_generation_run(struct rtx_backend *ref, struct rtx_backend *dev) {
    ref_be = ref;
    dev_be = dev;
    rtx_rng_seed(&rng, 20260613);
    rope_tests();
    paged_tests();
    bad_case(SLOTS, 3, 100000, "slot");
    bad_case(TABLES, 4, 9999, "block id");
    bad_case(CTX, 0, 100000, "context length");
    bad_case(QSTART, 2, 0, "query_start");
    device_steps();
}

void gpu_generation_tests(int index) {
    struct rtx_err err = {0};
    struct rtx_backend *cpu = NULL, *gpu = NULL;
    struct rtx_cpu_options co = {.n_threads = 0};
    struct rtx_cuda_options go = {.device = index};
    int rc = rtx_backend_cpu_new(&co, &cpu, &err);
    if (rc == 0) rc = rtx_backend_cuda_new(&go, &gpu, &err);
    if (gpu_check(rc == 0, "backends for the generation ops on device %d%s%s", index,
                  rc ? ": " : "", err.msg))
        gpu_generation_run(cpu, gpu);
    rtx_backend_free(gpu);
    rtx_backend_free(cpu);
}
