/*
 * arch-impl.h - decoder architectures (generation/arch-*.c), private to generation/: reading a
 * Hugging Face checkpoint's config.json and weights, and building the step graph that runs one
 * iteration of the model over a ragged batch of sequences with a paged KV cache.
 *
 * DESIGN
 * One step graph serves every step: its inputs are the step's token data (dimensions bound at
 * run time: T tokens, S sequences, B blocks per block table), the KV pool (a K and a V tensor
 * per layer, [n_blocks, block_size, n_kv_heads, head_dim]; the graph's paged_attention nodes
 * write the step's keys and values into them) and the weights (inputs too, not initializers:
 * the engine uploads them once per device and every plan of the graph - one per bucket of
 * shapes - reads the same tensors). Its one output is the logits of each sequence's last
 * token of the step, f32 [S, vocab], and their argmax, i64 [S] (the greedy token: a step
 * whose sequences all sample greedily downloads only these). Only the rotary inverse frequencies (Llama 3 scaling
 * applied) are initializers. Input order:
 *   0 ids           i32 [T]      token ids
 *   1 positions     i32 [T]      position of each token in its sequence
 *   2 slot_mapping  i32 [T]      KV slot (block * block_size + offset) each token writes; -1
 *                                for a padding token
 *   3 block_tables  i32 [S, B]   each sequence's blocks (unused entries -1)
 *   4 query_start   i32 [S + 1]  tokens of sequence s are rows query_start[s]..[s+1]-1
 *   5 context_lens  i32 [S]      keys of sequence s once this step's tokens are written
 *   6 last_index    i32 [S]      the row of sequence s's last token (its logits row)
 *   7 + 2l, 8 + 2l  the K and V pool of layer l
 *   7 + 2L + i      weight i, in the order rtx__gen_weights_load returns them
 * Padding sequences (S rounded up to a bucket) have query_start[s] == query_start[s+1],
 * context_lens 0 and last_index 0; their logits rows are not read.
 */
#ifndef RTX_GENERATION_ARCH_IMPL_H
#define RTX_GENERATION_ARCH_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"

enum rtx_gen_arch_kind { RTX_GEN_ARCH_GPT2, RTX_GEN_ARCH_LLAMA, RTX_GEN_ARCH_QWEN2 };

#define RTX_GEN_MAX_EOS 8

struct rtx_gen_arch {
    enum rtx_gen_arch_kind kind;
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    int max_positions;             /* max_position_embeddings / n_positions */
    double norm_eps;               /* rms_norm_eps / layer_norm_epsilon */
    double rope_theta;             /* Llama, Qwen2 */
    /* rope_scaling: none, or Llama 3's ("llama3": factor, low/high_freq_factor,
     * original_max_position_embeddings) or linear (factor) */
    char rope_type[16];            /* "", "default", "llama3", "linear" */
    double rope_factor, rope_low_freq, rope_high_freq;
    int rope_original_max;
    bool tie_embeddings;
    bool qkv_bias;                 /* Qwen2 (and Llama's attention_bias) */
    bool mlp_bias;                 /* Llama's mlp_bias */
    char hidden_act[16];           /* "silu", "gelu_new", "gelu", ... */
    enum rtx_dtype dtype;          /* config.json's torch_dtype (RTX_DTYPE_COUNT when it does
                                    * not say); a loaded model's: its weight files' dtype */
    int32_t bos_id;                /* -1 when none */
    int n_eos;
    int32_t eos_ids[RTX_GEN_MAX_EOS];
};

/* Parses config.json (json, len bytes; `what` names the file): model_type / architectures
 * pick the kind; missing required fields, unknown architectures or hidden_act values, a
 * head count that does not divide hidden size, rope_scaling types other than those above:
 * RTX_EFORMAT / RTX_EUNSUPPORTED naming the field. */
int rtx__gen_arch_parse(const char *json, size_t len, const char *what,
                        struct rtx_gen_arch *a, struct rtx_err *err);
/* The rotary inverse frequencies, head_dim / 2 of them, with the rope scaling applied (as
 * transformers' ROPE_INIT_FUNCTIONS compute them, in double then rounded to f32). */
void rtx__gen_arch_inv_freq(const struct rtx_gen_arch *a, float *out);

/* The weights as the step graph reads them, in its input order. */
struct rtx_gen_weights {
    int n;
    char **names;                  /* the graph's input names ("layers.0.wq", ...) */
    struct rtx_tensor **t;         /* host tensors in the compute dtype, contiguous */
    int64_t bytes;                 /* sum of their sizes */
};

/* Loads the weights of dir (dtype RTX_DTYPE_COUNT: in the dtype of the checkpoint's first
 * tensor, the embedding) (model.safetensors, or model.safetensors.index.json and its
 * shards) for arch a, converted to dtype (f32 on the CPU; bf16 or f16 on a GPU; tensors
 * already in dtype stay mapped, not copied): every tensor the architecture needs must exist
 * with its shape (a missing or mis-shaped one fails naming the file and the tensor, RTX_EFORMAT),
 * tensors it does not use are ignored (rotary caches, attention bias buffers). Layouts are
 * those of the graph: GPT-2's fused c_attn is split into q, k, v. */
int rtx__gen_weights_load(const char *dir, const struct rtx_gen_arch *a, enum rtx_dtype dtype,
                          struct rtx_gen_weights *w, struct rtx_err *err);
void rtx__gen_weights_clear(struct rtx_gen_weights *w);
/* The weights of src in dtype: references to the tensors already in it, conversions of the
 * others (names copied). RTX_ENOMEM. */
int rtx__gen_weights_convert(const struct rtx_gen_weights *src, enum rtx_dtype dtype,
                             struct rtx_gen_weights *w, struct rtx_err *err);

/* Builds the step graph (inputs as in DESIGN) for arch a computing in dtype, over a pool of
 * n_blocks blocks of block_size tokens. RTX_ENOMEM or a graph error. */
int rtx__gen_graph_build(const struct rtx_gen_arch *a, const struct rtx_gen_weights *w,
                         enum rtx_dtype dtype, int n_blocks, int block_size,
                         struct rtx_graph **out, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * What the engine reads from a loaded model (generation/model.c)
 * ---------------------------------------------------------------------------------------- */

struct rtx_gen_model;

/* The architecture, with the EOS set merged from config.json, tokenizer_config.json's
 * eos_token and generation_config.json's eos_token_id, bos_id likewise, and dtype the weights'
 * own. */
const struct rtx_gen_arch *rtx__gen_model_arch(const struct rtx_gen_model *m);
/* The checkpoint directory the model was loaded from. */
const char *rtx__gen_model_dir(const struct rtx_gen_model *m);
/* The dtype an engine computes in: f32 on the CPU; on a GPU f16 for an f16 checkpoint, else
 * bf16. rtx_gen_model_weight_bytes counts the weights in it. */
enum rtx_dtype rtx__gen_model_compute_dtype(const struct rtx_gen_model *m, bool on_gpu);
/* The weights in dtype, in the step graph's input order: references to the model's mapped
 * tensors where the checkpoint holds them in dtype, conversions otherwise. Release with
 * rtx__gen_weights_clear. RTX_ENOMEM. */
int rtx__gen_model_weights(const struct rtx_gen_model *m, enum rtx_dtype dtype,
                           struct rtx_gen_weights *w, struct rtx_err *err);

#endif /* RTX_GENERATION_ARCH_IMPL_H */
