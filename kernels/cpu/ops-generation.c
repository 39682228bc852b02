/*
 * ops-generation.c - CPU kernels of rope and paged_attention (docs/ops.md), the reference the
 * CUDA kernels are checked against.
 *
 * DESIGN
 * rope splits the tokens over the pool; a token's angles (positions[t] * inv_freq[i] in f32,
 * then cosf and sinf) are computed once and rotate every head; the dims past the rotated ones
 * are copied as bytes.
 * paged_attention first checks the metadata (kernels/gen-geometry.h), so nothing is written
 * when an entry is bad, then copies the new rows' k and v into their cache slots in row order
 * (when two rows name one slot, the later one wins), then attends. The attention is split into
 * tasks of one sequence, one KV head and up to `rows` consecutive query rows of it. A task's
 * queries of the G heads sharing the KV head form one f32 matrix (row r * G + g, scaled by
 * `scale`); the keys and values are gathered from the cache through the block table into f32
 * chunks, and an online softmax (a running maximum and sum per query row, as FlashAttention)
 * folds each chunk's scores and p . v products (OpenBLAS sgemm calls of at most
 * RTX__CPU_SMALL_GEMM_MACS multiply-adds, as in ops-linalg.c) into an f32 accumulator. A row
 * attends to the keys up to its own position, so in the last chunks the keys past it are
 * masked. Rows outside every sequence are zeroed.
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/gen-geometry.h"

#define ROPE_GRAIN 8    /* tokens per chunk, at least */
#define PA_MAX_ROWS 16  /* query rows per attention task, at most */
#define PA_MIN_KEYS 16  /* keys per chunk, at least */
#define PA_MAX_KEYS 512 /* keys per chunk, at most */

/* ------------------------------------------------------------------------------------------
 * rope
 * ---------------------------------------------------------------------------------------- */

struct rope_job {
    struct rtx__rope_geom g;
    enum rtx_dtype dt;
    const void *x, *pos;
    const float *inv_freq;
    void *y;
    atomic_int failed; /* a chunk could not allocate its angle table */
};

static void rope_chunk(void *ctx, int64_t begin, int64_t end) {
    struct rope_job *j = ctx;
    const struct rtx__rope_geom *g = &j->g;
    int64_t half = g->half, pass = g->D - 2 * half;
    size_t es = rtx_dtype_size(j->dt);
    float *cs = rtx_malloc(2 * (size_t)(half > 0 ? half : 1) * sizeof *cs);
    if (cs == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *sn = cs + half;
    for (int64_t t = begin; t < end; t++) {
        float p =
            g->pos64 ? (float)((const int64_t *)j->pos)[t] : (float)((const int32_t *)j->pos)[t];
        for (int64_t i = 0; i < half; i++) {
            float th = p * j->inv_freq[i];
            cs[i] = cosf(th);
            sn[i] = sinf(th);
        }
        for (int64_t h = 0; h < g->H; h++) {
            int64_t base = (t * g->H + h) * g->D;
            for (int64_t i = 0; i < half; i++) {
                int64_t ia = base + (g->interleaved ? 2 * i : i);
                int64_t ib = base + (g->interleaved ? 2 * i + 1 : i + half);
                float a = rtx__load_f32(j->x, j->dt, ia), b = rtx__load_f32(j->x, j->dt, ib);
                rtx__store_f32(j->y, j->dt, ia, a * cs[i] - b * sn[i]);
                rtx__store_f32(j->y, j->dt, ib, b * cs[i] + a * sn[i]);
            }
            if (pass > 0)
                memcpy((char *)j->y + (size_t)(base + 2 * half) * es,
                       (const char *)j->x + (size_t)(base + 2 * half) * es, (size_t)pass * es);
        }
    }
    rtx_free(cs);
}

static int run_rope(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    struct rope_job j = {.x = rtx_tensor_data(a->in[0]),
                         .pos = rtx_tensor_data(a->in[1]),
                         .inv_freq = rtx_tensor_data(a->in[2]),
                         .y = rtx_tensor_data(a->out[0]),
                         .dt = a->in[0]->dtype};
    char why[160];
    int rc = rtx__rope_geometry(a->node, a->in[0], a->in[1], a->in[2], a->out[0], &j.g, why,
                                sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    atomic_init(&j.failed, 0);
    rtx__cpu_parallel_for(cpu, j.g.T, ROPE_GRAIN, rope_chunk, &j);
    if (atomic_load(&j.failed)) return rtx__backend_node_err(err, a, RTX_ENOMEM, "angle scratch");
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * paged_attention
 * ---------------------------------------------------------------------------------------- */

enum { PA_Q, PA_K, PA_V, PA_KC, PA_VC, PA_SLOTS, PA_TABLES, PA_QSTART, PA_CTX };

/* Rows r0 .. r0 + m - 1 (counted in the sequence's new tokens) of sequence s, KV head hk. */
struct pa_task {
    int64_t s, hk, r0, m;
};

struct pa_job {
    struct rtx__paged_geom g;
    enum rtx_dtype dt;
    const void *q, *kc, *vc;
    void *y;
    const int32_t *tables, *qs, *ctx;
    const struct pa_task *tasks;
    int64_t rows, keys; /* query rows per task, keys per chunk, at most */
    atomic_int failed;  /* a chunk could not allocate its scratch */
};

/* The f32 scratch of one pool chunk; sizes from the job's rows and keys. */
struct pa_scratch {
    float *qm;       /* [rows * G, D]: the task's scaled queries */
    float *kf, *vf;  /* [keys, D]: a chunk of keys and values */
    float *sc;       /* [rows * G, keys]: scores, then probabilities */
    float *acc;      /* [rows * G, D]: sum of p . v */
    float *mx, *sum; /* [rows * G]: running maximum and sum */
    bool *nan;       /* [rows * G]: the row met a NaN or +inf score */
};

/* dst[0 .. n) = elements off .. off + n - 1 of src (a float dtype) as f32; the dtype is
 * switched on once per row, so the loops vectorize. */
static void widen_row(float *dst, const void *src, enum rtx_dtype dt, int64_t off, int64_t n) {
    const uint16_t *h = (const uint16_t *)src + off;
    switch (dt) {
    case RTX_F32: memcpy(dst, (const float *)src + off, (size_t)n * sizeof *dst); break;
    case RTX_BF16: RTX__VLOOP(float, dst, n, rtx_bf16_to_f32(h[i])); break;
    case RTX_F16: RTX__VLOOP(float, dst, n, rtx_f16_to_f32(h[i])); break;
    default: break;
    }
}

/* Keys c0 .. c0 + nk - 1 of the task's sequence and KV head, widened into kf and vf. */
static void pa_gather(const struct pa_job *j, const struct pa_task *tk, int64_t c0, int64_t nk,
                      struct pa_scratch *w) {
    const struct rtx__paged_geom *g = &j->g;
    const int32_t *table = j->tables + tk->s * g->B;
    for (int64_t i = 0; i < nk; i++) {
        int64_t p = c0 + i;
        int64_t src = ((table[p / g->BS] * g->BS + p % g->BS) * g->Hkv + tk->hk) * g->D;
        widen_row(w->kf + i * g->D, j->kc, j->dt, src, g->D);
        widen_row(w->vf + i * g->D, j->vc, j->dt, src, g->D);
    }
}

/* The online softmax step of one query row over a chunk's scores s[0 .. nk): keys from
 * `allowed` on are past the row's position. Leaves probabilities (relative to the new
 * maximum) in s and rescales the row's accumulator. */
static void pa_softmax_row(struct pa_scratch *w, int64_t ri, float *s, int64_t nk, int64_t allowed,
                           int64_t D) {
    int64_t nv = allowed < nk ? (allowed > 0 ? allowed : 0) : nk;
    float mx = -INFINITY;
    bool bad = w->nan[ri];
    for (int64_t c = 0; c < nv; c++) {
        bad |= s[c] != s[c] || s[c] == INFINITY;
        if (s[c] > mx) mx = s[c];
    }
    if (bad || mx == -INFINITY) { /* nothing to add: past the row's position, or a NaN */
        w->nan[ri] = bad;
        memset(s, 0, (size_t)nk * sizeof *s);
        return;
    }
    float m_new = mx > w->mx[ri] ? mx : w->mx[ri];
    float corr = rtx__exp_nonpos(w->mx[ri] - m_new);
    float sum = rtx__exp_sum(s, nv, m_new);
    memset(s + nv, 0, (size_t)(nk - nv) * sizeof *s);
    w->sum[ri] = w->sum[ri] * corr + sum;
    w->mx[ri] = m_new;
    if (corr != 1.0f)
        for (int64_t d = 0; d < D; d++)
            w->acc[ri * D + d] *= corr;
}

static void pa_task_run(const struct pa_job *j, const struct pa_task *tk, struct pa_scratch *w) {
    const struct rtx__paged_geom *g = &j->g;
    int64_t G = g->G, D = g->D, rows = tk->m * G;
    int64_t first = j->qs[tk->s] + tk->r0; /* the task's first row */
    int64_t pos0 = j->ctx[tk->s] - (j->qs[tk->s + 1] - j->qs[tk->s]) + tk->r0; /* its position */
    for (int64_t r = 0; r < tk->m; r++)
        for (int64_t h = 0; h < G; h++) {
            int64_t src = ((first + r) * g->H + tk->hk * G + h) * D, ri = r * G + h;
            widen_row(w->qm + ri * D, j->q, j->dt, src, D);
            for (int64_t d = 0; d < D; d++)
                w->qm[ri * D + d] *= g->scale;
            w->mx[ri] = -INFINITY;
            w->sum[ri] = 0.0f;
            w->nan[ri] = false;
        }
    memset(w->acc, 0, (size_t)(rows * D) * sizeof *w->acc);
    int64_t n_keys = pos0 + tk->m; /* the last row sees keys 0 .. pos0 + m - 1 */
    for (int64_t c0 = 0; c0 < n_keys; c0 += j->keys) {
        int64_t nk = n_keys - c0 < j->keys ? n_keys - c0 : j->keys;
        pa_gather(j, tk, c0, nk, w);
        if (D > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)nk, (int)D, 1.0f,
                        w->qm, (int)D, w->kf, (int)D, 0.0f, w->sc, (int)nk);
        else
            memset(w->sc, 0, (size_t)(rows * nk) * sizeof *w->sc);
        for (int64_t ri = 0; ri < rows; ri++)
            pa_softmax_row(w, ri, w->sc + ri * nk, nk, pos0 + ri / G + 1 - c0, D);
        if (D > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)nk,
                        1.0f, w->sc, (int)nk, w->vf, (int)D, 1.0f, w->acc, (int)D);
    }
    for (int64_t r = 0; r < tk->m; r++)
        for (int64_t h = 0; h < G; h++) {
            int64_t dst = ((first + r) * g->H + tk->hk * G + h) * D, ri = r * G + h;
            float inv = w->nan[ri] ? NAN : w->sum[ri] > 0.0f ? 1.0f / w->sum[ri] : 0.0f;
            for (int64_t d = 0; d < D; d++)
                rtx__store_f32(j->y, j->dt, dst + d, w->acc[ri * D + d] * inv);
        }
}

static void pa_chunk(void *ctx, int64_t begin, int64_t end) {
    struct pa_job *j = ctx;
    int64_t rg = j->rows * j->g.G, D = j->g.D > 0 ? j->g.D : 1;
    size_t floats = (size_t)(2 * rg * D + 2 * j->keys * D + rg * j->keys + 2 * rg);
    struct pa_scratch w;
    w.qm = rtx_malloc(floats * sizeof(float));
    w.nan = rtx_malloc((size_t)rg * sizeof *w.nan);
    if (w.qm == NULL || w.nan == NULL) {
        rtx_free(w.qm);
        rtx_free(w.nan);
        atomic_store(&j->failed, 1);
        return;
    }
    w.acc = w.qm + rg * D;
    w.kf = w.acc + rg * D;
    w.vf = w.kf + j->keys * D;
    w.sc = w.vf + j->keys * D;
    w.mx = w.sc + rg * j->keys;
    w.sum = w.mx + rg;
    for (int64_t t = begin; t < end; t++)
        pa_task_run(j, &j->tasks[t], &w);
    rtx_free(w.qm);
    rtx_free(w.nan);
}

/* k and v of every row with a slot into the caches (the metadata is checked). */
static void pa_write_cache(const struct rtx_node_args *a, const struct rtx__paged_geom *g) {
    size_t row = (size_t)(g->Hkv * g->D) * rtx_dtype_size(a->in[PA_K]->dtype);
    const int32_t *slots = rtx_tensor_data(a->in[PA_SLOTS]);
    const char *k = rtx_tensor_data(a->in[PA_K]), *v = rtx_tensor_data(a->in[PA_V]);
    char *kc = rtx_tensor_data(a->in[PA_KC]), *vc = rtx_tensor_data(a->in[PA_VC]);
    for (int64_t t = 0; t < g->T; t++) {
        if (slots[t] < 0) continue;
        memcpy(kc + (size_t)slots[t] * row, k + (size_t)t * row, row);
        memcpy(vc + (size_t)slots[t] * row, v + (size_t)t * row, row);
    }
}

/* The task list: per sequence with new tokens, blocks of j->rows rows, each for every KV
 * head. *out is rtx_malloc'ed (NULL with 0 tasks). Returns the count, or -1 out of memory. */
static int64_t pa_tasks(const struct pa_job *j, struct pa_task **out) {
    const struct rtx__paged_geom *g = &j->g;
    int64_t n = 0;
    *out = NULL;
    for (int64_t s = 0; s < g->S; s++)
        n += (j->qs[s + 1] - j->qs[s] + j->rows - 1) / j->rows * g->Hkv;
    if (n == 0) return 0;
    struct pa_task *t = rtx_malloc((size_t)n * sizeof *t);
    if (t == NULL) return -1;
    int64_t k = 0;
    for (int64_t s = 0; s < g->S; s++) {
        int64_t rows = j->qs[s + 1] - j->qs[s];
        for (int64_t r0 = 0; r0 < rows; r0 += j->rows)
            for (int64_t hk = 0; hk < g->Hkv; hk++)
                t[k++] = (struct pa_task){
                    .s = s, .hk = hk, .r0 = r0, .m = rows - r0 < j->rows ? rows - r0 : j->rows};
    }
    *out = t;
    return n;
}

static int run_paged_attention(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                               struct rtx_err *err) {
    struct pa_job j = {.dt = a->in[PA_Q]->dtype};
    char why[256];
    if (a->n_in != 9) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "needs 9 inputs");
    int rc = rtx__paged_attention_geometry(a->node, (const struct rtx_tensor *const *)a->in,
                                           a->out[0], &j.g, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    j.tables = rtx_tensor_data(a->in[PA_TABLES]);
    j.qs = rtx_tensor_data(a->in[PA_QSTART]);
    j.ctx = rtx_tensor_data(a->in[PA_CTX]);
    uint64_t fault =
        rtx__paged_check(&j.g, rtx_tensor_data(a->in[PA_SLOTS]), j.tables, j.qs, j.ctx);
    if (fault != RTX__PAGED_NO_FAULT) {
        rtx__paged_fault_why(&j.g, fault, why, sizeof why);
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s", why);
    }
    const struct rtx__paged_geom *g = &j.g;
    int64_t per_row = g->G * (g->D > 0 ? g->D : 1);
    j.rows = RTX__CPU_SMALL_GEMM_MACS / (PA_MIN_KEYS * per_row);
    j.rows = j.rows < 1 ? 1 : j.rows > PA_MAX_ROWS ? PA_MAX_ROWS : j.rows;
    j.keys = RTX__CPU_SMALL_GEMM_MACS / (j.rows * per_row);
    j.keys = j.keys < PA_MIN_KEYS ? PA_MIN_KEYS : j.keys > PA_MAX_KEYS ? PA_MAX_KEYS : j.keys;
    j.q = rtx_tensor_data(a->in[PA_Q]);
    j.kc = rtx_tensor_data(a->in[PA_KC]);
    j.vc = rtx_tensor_data(a->in[PA_VC]);
    j.y = rtx_tensor_data(a->out[0]);
    struct pa_task *tasks;
    int64_t n = pa_tasks(&j, &tasks); /* before the writes: a failure here writes nothing */
    if (n < 0) return rtx__backend_node_err(err, a, RTX_ENOMEM, "task list");
    pa_write_cache(a, g);
    size_t row = (size_t)(g->H * g->D) * rtx_dtype_size(j.dt);
    int64_t lo = j.qs[0], hi = j.qs[g->S];
    memset(j.y, 0, (size_t)lo * row); /* rows outside every sequence */
    memset((char *)j.y + (size_t)hi * row, 0, (size_t)(g->T - hi) * row);
    j.tasks = tasks;
    atomic_init(&j.failed, 0);
    rtx__cpu_parallel_for(cpu, n, 1, pa_chunk, &j);
    rtx_free(tasks);
    if (atomic_load(&j.failed))
        return rtx__backend_node_err(err, a, RTX_ENOMEM, "attention scratch");
    return 0;
}

int rtx__cpu_generation(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_ROPE:
        if (a->n_in != 3) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "needs 3 inputs");
        return run_rope(cpu, a, err);
    case RTX_OP_PAGED_ATTENTION: return run_paged_attention(cpu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a generation op");
}
