/*
 * rtxgen.c - a Hugging Face decoder checkpoint from the command line (generation/), for tests
 * and users: what the checkpoint is, how a prompt encodes, and the logits of the step graph run
 * on the CPU backend over a KV pool of its own.
 *
 *   rtxgen DIR info                 the model as loaded, one JSON object
 *   rtxgen DIR encode TEXT          the prompt's ids for generation (BOS as the model adds it)
 *   rtxgen DIR logits SEQUENCES [OPTIONS] --out FILE.npy
 *     SEQUENCES: --ids 1,2,3 [--decode 4,5]   one sequence: its prompt, then tokens fed one
 *                                             per decode step (teacher forcing)
 *            or  --batch "1,2,3|4,5;6,7"      several, each PROMPT[|DECODE], run together
 *                                             (--batch @FILE: the same text read from FILE):
 *                                             every step holds each unfinished sequence's
 *                                             next prompt chunk or decode token (ragged)
 *     --dtype f32|bf16|f16   compute dtype (default f32)
 *     --chunk N              prefill at most N prompt tokens of a sequence per step
 *     --block-size N         tokens per KV block (default 16)
 *     --pad N                N padding tokens and N padding sequences in every step
 *     --every-chunk          also a row for each prompt chunk before the last
 *     --timing               each step's plan and run times (upload, execute, download) and
 *                            how the plan ran (runtime.h's rtx_exec_mode) to stderr
 *     --graphs               keep each step shape's plan and bind the pool and the weights to
 *                            it (rtx_plan_bind_device_inputs), as the engine does for small
 *                            steps: on a GPU a shape's third and later steps replay a CUDA
 *                            graph
 *     --seed S               the shuffle of the block ids (default 1)
 *     --threads N            CPU backend threads (default: one per CPU)
 *     --device cpu|cuda:N    the backend (default cpu); on a GPU the pool and the weights are
 *                            uploaded once and each step's inputs only
 *   FILE.npy gets f32 [rows, vocab]: per sequence in order, the logits of its last prompt
 *   token, then of each decode token.
 * Exit status 1 with the error on stderr when the model does not load or a step fails; 2 for
 * bad arguments.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "generation/arch-impl.h"
#include "generation/generation.h"
#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"

#define STEP_INPUTS 7

static void usage(void) {
    fprintf(stderr,
            "usage: rtxgen DIR info\n"
            "       rtxgen DIR encode TEXT\n"
            "       rtxgen DIR logits (--ids A,B,.. [--decode C,..] | --batch \"A,B|C;D,E\")\n"
            "              [--dtype f32|bf16|f16] [--chunk N] [--block-size N] [--pad N]\n"
            "              [--every-chunk] [--timing] [--graphs] [--seed S] [--threads N]\n"
            "              [--device cpu|cuda:N]\n"
            "              --out FILE.npy\n");
}

/* ------------------------------------------------------------------------------------------
 * info, encode
 * ---------------------------------------------------------------------------------------- */

static int info(struct rtx_gen_model *m) {
    const struct rtx_gen_arch *a = rtx__gen_model_arch(m);
    struct rtx_gen_params p;
    rtx_gen_model_default_params(m, &p);
    json_t *eos = json_array(), *inv = json_array();
    for (int i = 0; i < a->n_eos; i++)
        json_array_append_new(eos, json_integer(a->eos_ids[i]));
    float *freq = a->kind != RTX_GEN_ARCH_GPT2 ? malloc((size_t)a->head_dim * sizeof *freq) : NULL;
    if (freq) {
        rtx__gen_arch_inv_freq(a, freq);
        for (int i = 0; i < a->head_dim / 2; i++)
            json_array_append_new(inv, json_real(freq[i]));
        free(freq);
    }
    json_t *o = json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:b, s:b, s:s, s:s, s:f, s:o,"
        " s:I, s:I, s:i, s:o, s:I, s:b,"
        " s:{s:f, s:f, s:i, s:f, s:f}}",
        "arch", rtx_gen_model_arch_name(m), "layers", a->n_layers, "hidden", a->hidden, "heads",
        a->n_heads, "kv_heads", a->n_kv_heads, "head_dim", a->head_dim, "intermediate",
        a->intermediate, "vocab", a->vocab, "context", rtx_gen_model_context_length(m), "dtype",
        rtx_dtype_name(a->dtype), "norm_eps", a->norm_eps, "tied", a->tie_embeddings, "qkv_bias",
        a->qkv_bias, "hidden_act", a->hidden_act, "rope_type", a->rope_type, "rope_theta",
        a->rope_theta, "inv_freq", inv, "weight_bytes_cpu",
        (json_int_t)rtx_gen_model_weight_bytes(m, false), "weight_bytes_gpu",
        (json_int_t)rtx_gen_model_weight_bytes(m, true), "bos_id", a->bos_id, "eos_ids", eos,
        "tokenizer_vocab", (json_int_t)rtx_tokenizer_vocab_size(rtx_gen_model_tokenizer(m)),
        "chat_template", rtx_gen_model_has_chat_template(m), "defaults", "temperature",
        p.temperature, "top_p", p.top_p, "top_k", p.top_k, "min_p", p.min_p, "repetition_penalty",
        p.repetition_penalty);
    char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (!s) {
        fprintf(stderr, "rtxgen: out of memory\n");
        json_decref(o);
        return 1;
    }
    printf("%s\n", s);
    free(s);
    json_decref(o);
    return 0;
}

static int encode(struct rtx_gen_model *m, const char *text) {
    struct rtx_err err = {0};
    int32_t *ids;
    int n;
    if (rtx_gen_model_encode_prompt(m, text, strlen(text), &ids, &n, &err)) {
        fprintf(stderr, "rtxgen: %s\n", err.msg);
        return 1;
    }
    printf("[");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
    rtx_free(ids);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * logits: sequences and their blocks
 * ---------------------------------------------------------------------------------------- */

struct seq {
    int32_t *prompt, *decode;
    int n_prompt, n_decode;
    int done; /* tokens in the cache */
    int n_blocks;
    int32_t *blocks; /* its block ids, enough for all of its tokens */
    int n_rows;
    float *rows; /* [n_rows, vocab] */
    int take;    /* tokens of the current step */
    int row;     /* its row of the step's logits, -1 when not in the step */
};

struct opts {
    enum rtx_dtype dtype;
    int chunk, block_size, pad, threads;
    int cuda; /* -1: the CPU backend; else the CUDA device */
    bool every_chunk;
    bool timing; /* --timing: each step's times to stderr */
    bool graphs; /* --graphs: plans kept per shape, pool and weights bound */
    uint64_t seed;
};

/* "1,2,3" (len bytes) into a new array; -1 on a malformed list. */
static int parse_ids(const char *s, size_t len, int32_t **out) {
    int n = 0, cap = 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    const char *end = s + len;
    while (ids && s < end) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || v < 0 || v > INT32_MAX || (e < end && *e != ',')) break;
        if (n == cap && !(ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids))) break;
        ids[n++] = (int32_t)v;
        s = e < end ? e + 1 : e;
    }
    if (!ids || s < end) {
        free(ids);
        return -1;
    }
    *out = ids;
    return n;
}

/* One sequence "PROMPT[|DECODE]" of --batch (len bytes). */
static int parse_seq(const char *s, size_t len, struct seq *q) {
    const char *bar = memchr(s, '|', len);
    size_t plen = bar ? (size_t)(bar - s) : len;
    q->n_prompt = parse_ids(s, plen, &q->prompt);
    if (q->n_prompt < 1) return -1;
    q->n_decode = bar ? parse_ids(bar + 1, len - plen - 1, &q->decode) : 0;
    return q->n_decode < 0 ? -1 : 0;
}

static void seqs_free(struct seq *seqs, int n) {
    for (int i = 0; i < n; i++) {
        free(seqs[i].prompt);
        free(seqs[i].decode);
        free(seqs[i].blocks);
        free(seqs[i].rows);
    }
    free(seqs);
}

/* Gives each sequence its blocks from a seeded shuffle of the pool's ids (so tables are not
 * contiguous); returns the pool's size (two blocks more than needed, never touched). */
static int assign_blocks(struct seq *seqs, int n, int bs, uint64_t seed) {
    int total = 0;
    for (int i = 0; i < n; i++)
        total += (seqs[i].n_prompt + seqs[i].n_decode + bs - 1) / bs;
    int pool = total + 2;
    int32_t *perm = malloc((size_t)pool * sizeof *perm);
    if (!perm) return -1;
    for (int i = 0; i < pool; i++)
        perm[i] = i;
    struct rtx_rng rng;
    rtx_rng_seed(&rng, seed);
    for (int i = pool - 1; i > 0; i--) {
        int j = (int)(rtx_rng_next(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int next = 0;
    for (int i = 0; i < n; i++) {
        struct seq *q = &seqs[i];
        q->n_blocks = (q->n_prompt + q->n_decode + bs - 1) / bs;
        if (!(q->blocks = malloc((size_t)q->n_blocks * sizeof *q->blocks))) {
            free(perm);
            return -1;
        }
        for (int b = 0; b < q->n_blocks; b++)
            q->blocks[b] = perm[next++];
    }
    free(perm);
    return pool;
}

/* ------------------------------------------------------------------------------------------
 * logits: steps
 * ---------------------------------------------------------------------------------------- */

#define MAX_KEPT_PLANS 64

struct runner {
    struct rtx_graph *g;
    struct kept_plan {
        int t, s, b;
        struct rtx_plan *plan;
    } kept[MAX_KEPT_PLANS];     /* --graphs */
    int n_kept;
    struct rtx_backend *be;
    bool device;            /* a CUDA backend: pool and weights live there */
    const struct rtx_gen_arch *a;
    int n_in;
    struct rtx_tensor **in; /* step inputs (replaced each step), pool, weights */
};

static int new_i32(int ndim, int64_t d0, int64_t d1, struct rtx_tensor **t, struct rtx_err *err) {
    int64_t dims[2] = {d0, d1};
    return rtx_tensor_new(RTX_I32, ndim, dims, t, err);
}

/* The step's plan: a new one, or with --graphs the one kept for its shape (made, bound and
 * kept on first use; past MAX_KEPT_PLANS shapes a new one each step). */
static int plan_for(struct runner *r, int t, int s, int b, const struct opts *o,
                    struct rtx_plan **plan, struct rtx_err *err) {
    for (int i = 0; o->graphs && i < r->n_kept; i++)
        if (r->kept[i].t == t && r->kept[i].s == s && r->kept[i].b == b) {
            struct kept_plan k = r->kept[i]; /* to the end: step() frees plans not last */
            memmove(&r->kept[i], &r->kept[i + 1], sizeof k * (size_t)(r->n_kept - i - 1));
            r->kept[r->n_kept - 1] = k;
            *plan = k.plan;
            return 0;
        }
    int rc = rtx_plan_new(r->g, (const struct rtx_tensor *const *)r->in, r->n_in, NULL, plan, err);
    if (rc || !o->graphs || r->n_kept == MAX_KEPT_PLANS) return rc;
    if ((rc = rtx_plan_bind_device_inputs(*plan, STEP_INPUTS, r->n_in - STEP_INPUTS, err))) {
        rtx_plan_free(*plan);
        *plan = NULL;
        return rc;
    }
    r->kept[r->n_kept++] = (struct kept_plan){.t = t, .s = s, .b = b, .plan = *plan};
    return 0;
}

/* Runs one step over the sequences that still have tokens; false in *any when none had. */
static int step(struct runner *r, struct seq *seqs, int n, const struct opts *o, bool *any,
                struct rtx_err *err) {
    int bs = o->block_size, S = 0, T = 0, B = 1;
    for (int i = 0; i < n; i++) {
        struct seq *q = &seqs[i];
        int total = q->n_prompt + q->n_decode;
        q->take = 0, q->row = -1;
        if (q->done >= total) continue;
        if (q->done < q->n_prompt) {
            q->take = q->n_prompt - q->done;
            if (o->chunk > 0 && q->take > o->chunk) q->take = o->chunk;
        } else {
            q->take = 1;
        }
        S++, T += q->take;
        int nb = (q->done + q->take + bs - 1) / bs;
        if (nb > B) B = nb;
    }
    *any = S > 0;
    if (!S) return 0;
    int S_all = S + o->pad, T_all = T + o->pad;
    for (int i = 0; i < STEP_INPUTS; i++)
        rtx_tensor_unref(r->in[i]), r->in[i] = NULL;
    int rc;
    if ((rc = new_i32(1, T_all, 0, &r->in[0], err)) ||
        (rc = new_i32(1, T_all, 0, &r->in[1], err)) ||
        (rc = new_i32(1, T_all, 0, &r->in[2], err)) ||
        (rc = new_i32(2, S_all, B, &r->in[3], err)) ||
        (rc = new_i32(1, S_all + 1, 0, &r->in[4], err)) ||
        (rc = new_i32(1, S_all, 0, &r->in[5], err)) || (rc = new_i32(1, S_all, 0, &r->in[6], err)))
        return rc;
    int32_t *ids = rtx_tensor_data(r->in[0]), *pos = rtx_tensor_data(r->in[1]);
    int32_t *slot = rtx_tensor_data(r->in[2]), *table = rtx_tensor_data(r->in[3]);
    int32_t *qs = rtx_tensor_data(r->in[4]), *ctx = rtx_tensor_data(r->in[5]);
    int32_t *last = rtx_tensor_data(r->in[6]);
    for (int i = 0; i < S_all * B; i++)
        table[i] = -1;
    for (int i = T; i < T_all; i++) /* padding tokens */
        ids[i] = 0, pos[i] = 0, slot[i] = -1;
    int s = 0, t = 0;
    for (int i = 0; i < n; i++) {
        struct seq *q = &seqs[i];
        if (!q->take) continue;
        qs[s] = t;
        for (int j = 0; j < q->take; j++, t++) {
            int p = q->done + j;
            ids[t] = p < q->n_prompt ? q->prompt[p] : q->decode[p - q->n_prompt];
            pos[t] = p;
            slot[t] = q->blocks[p / bs] * bs + p % bs;
        }
        ctx[s] = q->done + q->take;
        for (int b = 0; b < (ctx[s] + bs - 1) / bs; b++)
            table[s * B + b] = q->blocks[b];
        last[s] = t - 1;
        q->row = s++;
    }
    for (; s < S_all; s++) /* padding sequences */
        qs[s] = T, ctx[s] = 0, last[s] = 0;
    qs[S_all] = T;

    struct rtx_plan *plan = NULL;
    struct rtx_tensor *logits = NULL;
    struct rtx_exec_stats st = {0};
    int64_t t_plan = rtx_mono_ns();
    if ((rc = plan_for(r, T_all, S_all, B, o, &plan, err))) goto out;
    int64_t t_run = rtx_mono_ns();
    if (!r->device) {
        struct rtx_tensor *outs[2] = {0};
        rc = rtx_plan_execute(plan, r->be, r->in, r->n_in, outs, 2, NULL, &st, err);
        logits = outs[0];
        rtx_tensor_unref(outs[1]);
    } else { /* step tensors up, pool and weights already there, logits down */
        struct rtx_tensor *host[STEP_INPUTS], *dev_out[2] = {0};
        memcpy(host, r->in, sizeof host);
        for (int i = 0; i < STEP_INPUTS; i++) r->in[i] = NULL;
        for (int i = 0; i < STEP_INPUTS && !rc; i++)
            rc = rtx_backend_upload(r->be, host[i], &r->in[i], err);
        for (int i = 0; i < STEP_INPUTS; i++) rtx_tensor_unref(host[i]);
        if (!rc)
            rc = rtx_plan_execute_device(plan, r->be, r->in, r->n_in, dev_out, 2, NULL, &st, err);
        if (!rc) rc = rtx_backend_download(r->be, dev_out[0], &logits, err);
        rtx_tensor_unref(dev_out[0]);
        rtx_tensor_unref(dev_out[1]);
    }
    if (rc) goto out;
    if (o->timing)
        fprintf(stderr,
                "step: %d tokens, %d sequences, %d blocks: plan %.3f ms, run %.3f ms (%s)\n",
                T_all, S_all, B, (double)(t_run - t_plan) / 1e6,
                (double)(rtx_mono_ns() - t_run) / 1e6, rtx_exec_mode_name(st.mode));
    int vocab = r->a->vocab;
    const float *lg = rtx_tensor_data(logits);
    for (int i = 0; i < n; i++) {
        struct seq *q = &seqs[i];
        if (q->row < 0) continue;
        q->done += q->take;
        if (q->done < q->n_prompt && !o->every_chunk) continue;
        float *rows = realloc(q->rows, (size_t)(q->n_rows + 1) * (size_t)vocab * sizeof *rows);
        if (!rows) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory");
            goto out;
        }
        q->rows = rows;
        memcpy(rows + (size_t)q->n_rows++ * (size_t)vocab, lg + (size_t)q->row * vocab,
               (size_t)vocab * sizeof *rows);
    }
out:
    rtx_tensor_unref(logits);
    if (!o->graphs || r->n_kept == 0 || r->kept[r->n_kept - 1].plan != plan) rtx_plan_free(plan);
    return rc;
}

static int write_rows(const char *path, struct seq *seqs, int n, int vocab, struct rtx_err *err) {
    int64_t rows = 0;
    for (int i = 0; i < n; i++)
        rows += seqs[i].n_rows;
    struct rtx_tensor *t;
    int rc = rtx_tensor_new(RTX_F32, 2, (const int64_t[]){rows, vocab}, &t, err);
    if (rc) return rc;
    float *d = rtx_tensor_data(t);
    for (int i = 0; i < n; i++) {
        memcpy(d, seqs[i].rows, (size_t)seqs[i].n_rows * (size_t)vocab * sizeof *d);
        d += (size_t)seqs[i].n_rows * (size_t)vocab;
    }
    rc = rtx_npy_save(path, t, err);
    rtx_tensor_unref(t);
    return rc;
}

static int run_logits(struct rtx_gen_model *m, struct seq *seqs, int n, const struct opts *o,
                      const char *out, struct rtx_err *err) {
    const struct rtx_gen_arch *a = rtx__gen_model_arch(m);
    struct rtx_gen_weights w = {0};
    struct runner r = {.a = a};
    int pool = assign_blocks(seqs, n, o->block_size, o->seed), rc;
    if (pool < 0) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    if ((rc = rtx__gen_model_weights(m, o->dtype, &w, err)) ||
        (rc = rtx__gen_graph_build(a, &w, o->dtype, pool, o->block_size, &r.g, err)) ||
        (rc = o->cuda >= 0
                  ? rtx_backend_cuda_new(&(struct rtx_cuda_options){.device = o->cuda}, &r.be, err)
                  : rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = o->threads}, &r.be,
                                        err)))
        goto out;
    r.device = !rtx_backend_is_host(r.be);
    r.n_in = STEP_INPUTS + 2 * a->n_layers + w.n;
    if (!(r.in = calloc((size_t)r.n_in, sizeof *r.in))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory");
        goto out;
    }
    int64_t dims[4] = {pool, o->block_size, a->n_kv_heads, a->head_dim};
    for (int i = 0; i < 2 * a->n_layers; i++)
        if ((rc = rtx_tensor_new(o->dtype, 4, dims, &r.in[STEP_INPUTS + i], err))) goto out;
    for (int i = 0; i < w.n; i++)
        r.in[STEP_INPUTS + 2 * a->n_layers + i] = rtx_tensor_ref(w.t[i]);
    for (int i = STEP_INPUTS; r.device && i < r.n_in && !rc; i++) { /* uploaded once */
        struct rtx_tensor *d;
        if ((rc = rtx_backend_upload(r.be, r.in[i], &d, err))) break;
        rtx_tensor_unref(r.in[i]);
        r.in[i] = d;
    }
    if (rc) goto out;
    bool any = true;
    while (any && !rc)
        rc = step(&r, seqs, n, o, &any, err);
    if (!rc) rc = write_rows(out, seqs, n, a->vocab, err);
out:
    for (int i = 0; i < r.n_kept; i++)
        rtx_plan_free(r.kept[i].plan);
    for (int i = 0; r.in && i < r.n_in; i++)
        rtx_tensor_unref(r.in[i]);
    free(r.in);
    rtx_backend_free(r.be);
    rtx_graph_free(r.g);
    rtx__gen_weights_clear(&w);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------------------------- */

/* The text of file path, trailing white space dropped; NULL (reported) when unreadable. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    if (!f) {
        perror(path);
        return NULL;
    }
    do {
        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!nb) break;
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    bool bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return NULL;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        len--;
    buf[len] = 0;
    return buf;
}

static int logits_main(struct rtx_gen_model *m, int argc, char **argv) {
    struct opts o = {.dtype = RTX_F32, .block_size = 16, .seed = 1, .cuda = -1};
    const char *ids = NULL, *decode = NULL, *batch = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool flag = !strcmp(f, "--every-chunk") || !strcmp(f, "--timing") ||
                    !strcmp(f, "--graphs");
        if (!flag && !v) goto bad;
        if (flag)
            *(f[2] == 'e' ? &o.every_chunk : f[2] == 't' ? &o.timing : &o.graphs) = true;
        else if (!strcmp(f, "--ids"))
            ids = v;
        else if (!strcmp(f, "--decode"))
            decode = v;
        else if (!strcmp(f, "--batch"))
            batch = v;
        else if (!strcmp(f, "--out"))
            out = v;
        else if (!strcmp(f, "--dtype") && !rtx_dtype_from_name(v, &o.dtype) &&
                 rtx_dtype_is_float(o.dtype))
            ;
        else if (!strcmp(f, "--chunk") && (o.chunk = atoi(v)) > 0)
            ;
        else if (!strcmp(f, "--block-size") && (o.block_size = atoi(v)) > 0)
            ;
        else if (!strcmp(f, "--pad") && (o.pad = atoi(v)) >= 0)
            ;
        else if (!strcmp(f, "--threads") && (o.threads = atoi(v)) >= 0)
            ;
        else if (!strcmp(f, "--device") && !strcmp(v, "cpu"))
            o.cuda = -1;
        else if (!strcmp(f, "--device") && !strncmp(v, "cuda:", 5) && (o.cuda = atoi(v + 5)) >= 0)
            ;
        else if (!strcmp(f, "--seed"))
            o.seed = strtoull(v, NULL, 10);
        else
            goto bad;
        i += !flag;
    }
    if (!out || !!ids == !!batch || (decode && !ids)) goto bad;
    char *batch_text = NULL;
    if (batch && batch[0] == '@' && !(batch = batch_text = read_text(batch + 1))) return 2;
    int n = 1;
    if (batch)
        for (const char *p = batch; *p; p++)
            n += *p == ';';
    struct seq *seqs = calloc((size_t)n, sizeof *seqs);
    if (!seqs) {
        free(batch_text);
        return 1;
    }
    bool ok = true;
    if (ids) {
        ok = (seqs[0].n_prompt = parse_ids(ids, strlen(ids), &seqs[0].prompt)) > 0 &&
             (seqs[0].n_decode =
                  decode ? parse_ids(decode, strlen(decode), &seqs[0].decode) : 0) >= 0;
    } else {
        const char *p = batch;
        for (int i = 0; i < n && ok; i++) {
            const char *e = strchr(p, ';');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            ok = parse_seq(p, len, &seqs[i]) == 0;
            p += len + 1;
        }
    }
    free(batch_text);
    if (!ok) {
        seqs_free(seqs, n);
        goto bad;
    }
    struct rtx_err err = {0};
    int rc = run_logits(m, seqs, n, &o, out, &err);
    seqs_free(seqs, n);
    if (rc) fprintf(stderr, "rtxgen: %s\n", err.msg);
    return rc ? 1 : 0;
bad:
    usage();
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        usage();
        return 2;
    }
    const char *cmd = argv[2];
    if (strcmp(cmd, "info") && strcmp(cmd, "encode") && strcmp(cmd, "logits")) {
        usage();
        return 2;
    }
    if ((!strcmp(cmd, "info") && argc != 3) || (!strcmp(cmd, "encode") && argc != 4)) {
        usage();
        return 2;
    }
    struct rtx_err err = {0};
    struct rtx_gen_model *m;
    if (rtx_gen_model_load(argv[1], NULL, &m, &err)) {
        fprintf(stderr, "rtxgen: %s\n", err.msg);
        return 1;
    }
    int status = !strcmp(cmd, "info")     ? info(m)
                 : !strcmp(cmd, "encode") ? encode(m, argv[3])
                                          : logits_main(m, argc - 3, argv + 3);
    rtx_gen_model_unref(m);
    return status;
}
