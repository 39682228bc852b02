/*
 * generation.h - text generation: Hugging Face decoder checkpoints (GPT-2, Llama 2/3, Qwen2)
 * run as rtx graphs over a paged KV cache, with an iteration-level scheduler (continuous
 * batching) inside the SLA lanes, sampling and streaming. docs/generation.md is the user's
 * view; the serving core (serving/) loads generative models of the repository through this
 * header and the front ends (OpenAI HTTP, Triton generate, KServe streams, rtxctl) submit
 * requests to their engine.
 *
 * DESIGN
 * A model (rtx_gen_model) is what the checkpoint directory holds, loaded once on the host:
 * the architecture from config.json, the weights mapped from safetensors, the tokenizer, the
 * chat template and the generation defaults. An engine (rtx_gen_engine) serves one model on
 * one device: it is a consumer of that device's memory budget (device/device.h), uploads the
 * weights there once, carves its KV cache pool out of its share, and runs one thread that
 * loops over steps. Each step it takes the running sequences' next tokens (one per decoding
 * sequence), fills the rest of a token budget with prompt chunks of waiting sequences (chunked
 * prefill), runs the model's step graph once for all of them (ragged: the graph's paged
 * attention reads each sequence's blocks through its block table) and samples one token per
 * sequence that reached the end of its prompt. A sequence joins the step after it arrives and
 * leaves the step it finishes. Lanes order who gets tokens and blocks; a sequence of a higher
 * lane may preempt lower-lane ones (their blocks are freed; they are recomputed later). Full
 * blocks are shared through a hash chain over their tokens (prefix caching).
 * Callbacks run on the engine's thread: they must not block.
 */
#ifndef RTX_GENERATION_H
#define RTX_GENERATION_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"

struct rtx_devices;      /* device/device.h */
struct rtx_sched_config; /* scheduler/sched.h */
struct rtx_tokenizer;    /* formats/formats.h */

/* ------------------------------------------------------------------------------------------
 * Models (a checkpoint directory, loaded on the host)
 * ---------------------------------------------------------------------------------------- */

struct rtx_gen_model;

/* Loads a checkpoint directory: config.json (architectures GPT2LMHeadModel,
 * LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM), model.safetensors or the shards of
 * model.safetensors.index.json, tokenizer.json, tokenizer_config.json (chat template, special
 * tokens) and generation_config.json when present. chat_template, when not NULL, replaces the
 * tokenizer_config.json template (Jinja source). A missing or mis-shaped tensor, an
 * unreadable file or a template the interpreter cannot handle fails the load with a message
 * naming the file and the tensor or field: RTX_EFORMAT, RTX_EUNSUPPORTED, RTX_EIO, RTX_ENOMEM. */
int rtx_gen_model_load(const char *dir, const char *chat_template, struct rtx_gen_model **out,
                       struct rtx_err *err);
struct rtx_gen_model *rtx_gen_model_ref(struct rtx_gen_model *m);
void rtx_gen_model_unref(struct rtx_gen_model *m); /* NULL: no-op */

const struct rtx_tokenizer *rtx_gen_model_tokenizer(const struct rtx_gen_model *m);
/* "gpt2", "llama", "qwen2". */
const char *rtx_gen_model_arch_name(const struct rtx_gen_model *m);
/* Tokens a sequence may hold: prompt plus output (max_position_embeddings). */
int rtx_gen_model_context_length(const struct rtx_gen_model *m);
/* Bytes of the weights on the device (in the engine's compute dtype). */
int64_t rtx_gen_model_weight_bytes(const struct rtx_gen_model *m, bool on_gpu);
bool rtx_gen_model_has_chat_template(const struct rtx_gen_model *m);

/* One chat message; content is UTF-8. */
struct rtx_gen_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
};
/* Renders the chat template over messages (as transformers' apply_chat_template with
 * tokenize=False) into *text (rtx_malloc'ed). RTX_EUNSUPPORTED when the model has no
 * template, RTX_EINVAL when the template raises an error (its message). */
int rtx_gen_model_render_chat(const struct rtx_gen_model *m,
                              const struct rtx_gen_chat_message *msgs, int n_msgs,
                              bool add_generation_prompt, char **text, struct rtx_err *err);
/* Encodes a prompt as the model's own tokenizer does for generation: a BOS token first when
 * the tokenizer config asks for one (add_bos_token, or the Llama post-processor) and the text
 * does not already start with it. *ids from rtx_malloc. */
int rtx_gen_model_encode_prompt(const struct rtx_gen_model *m, const char *text, size_t len,
                                int32_t **ids, int *n_ids, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

#define RTX_GEN_MAX_STOP 8        /* stop strings per request */
#define RTX_GEN_MAX_LOGPROBS 20   /* top alternatives per token */
#define RTX_GEN_MAX_N 16          /* choices per request */

/* Sampling and stopping, as OpenAI's and vLLM's parameters mean them. */
struct rtx_gen_params {
    int max_tokens;             /* 1.. tokens to generate per choice; 0: up to the context */
    int min_tokens;             /* EOS and stop ids are ignored before this many */
    double temperature;         /* 0: greedy; else 0 < t <= 100 */
    double top_p;               /* (0, 1]; 1: off */
    int top_k;                  /* 0 or -1: off; else 1..vocab */
    double min_p;               /* [0, 1]; 0: off */
    double repetition_penalty;  /* (0, 10]; 1: off; prompt and output tokens (HF / vLLM) */
    double presence_penalty;    /* [-2, 2]; output tokens (OpenAI) */
    double frequency_penalty;   /* [-2, 2]; output tokens (OpenAI) */
    bool has_seed;
    uint64_t seed;              /* choice i samples from seed + i */
    int n;                      /* choices, 1..RTX_GEN_MAX_N; they share the prompt's blocks */
    int n_stop;
    const char *stop[RTX_GEN_MAX_STOP]; /* stop strings (not included in the output) */
    int n_stop_ids;
    const int32_t *stop_ids;    /* extra stop token ids (included in the output) */
    bool ignore_eos;
    int logprobs;               /* -1: none; 0..RTX_GEN_MAX_LOGPROBS: the sampled token's
                                 * logprob and this many top alternatives */
    bool skip_special;          /* leave special tokens out of the text (default true) */
};
/* The defaults: max_tokens 16, temperature 1, top_p 1, top_k off, penalties off, n 1,
 * logprobs -1, skip_special true; the model's generation_config.json overrides the sampling
 * ones where it sets them (rtx_gen_model_default_params). */
void rtx_gen_params_init(struct rtx_gen_params *p);
void rtx_gen_model_default_params(const struct rtx_gen_model *m, struct rtx_gen_params *p);

enum rtx_gen_finish {
    RTX_GEN_FINISH_NONE,   /* still running */
    RTX_GEN_FINISH_STOP,   /* EOS, a stop id or a stop string */
    RTX_GEN_FINISH_LENGTH, /* max_tokens or the context */
    RTX_GEN_FINISH_COUNT
};
/* "", "stop", "length". */
const char *rtx_gen_finish_name(enum rtx_gen_finish f);

struct rtx_gen_logprob {
    int32_t token;
    float logprob;
};

/* New output of one choice: tokens sampled since the last event of that choice and the text
 * they completed (complete UTF-8 characters only; a stop string is held back until it can no
 * longer match and is never sent). */
struct rtx_gen_event {
    int index;                       /* choice, 0..n-1 */
    int n_tokens;
    const int32_t *tokens;
    const float *logprobs;           /* per token, or NULL when logprobs < 0 */
    int n_top;                       /* alternatives per token (params.logprobs) */
    const struct rtx_gen_logprob *top; /* n_tokens * n_top, or NULL */
    const char *text;
    size_t text_len;
    enum rtx_gen_finish finish;      /* NONE until the choice's last event */
};

struct rtx_gen_usage {
    int prompt_tokens;
    int completion_tokens;           /* over all choices */
    int cached_tokens;               /* prompt tokens served from the prefix cache */
    int64_t queue_ns;                /* arrival to first scheduled step */
    int64_t ttft_ns;                 /* arrival to first token */
};

/* Called on the engine thread. on_event for each choice's new output; on_done exactly once
 * at the end: status 0 (every choice finished), RTX_ECANCELED (rtx_gen_cancel), RTX_EEXPIRED
 * (the deadline passed), RTX_EUNAVAILABLE (engine stopping or its device failed), RTX_EGPU,
 * RTX_ENOMEM; err names the cause when status is not 0. */
typedef void (*rtx_gen_event_fn)(void *ctx, const struct rtx_gen_event *ev);
typedef void (*rtx_gen_done_fn)(void *ctx, int status, const struct rtx_err *err,
                                const struct rtx_gen_usage *usage);

struct rtx_gen_request {
    const int32_t *prompt;           /* copied at submit */
    int n_prompt;
    struct rtx_gen_params params;    /* stop strings copied at submit */
    const char *lane;                /* NULL or "": the engine's default lane */
    int64_t deadline_ns;             /* CLOCK_MONOTONIC; 0: the lane's target for the first
                                      * token */
    rtx_gen_event_fn on_event;
    rtx_gen_done_fn on_done;
    void *ctx;
};

/* ------------------------------------------------------------------------------------------
 * Engines (one model on one device)
 * ---------------------------------------------------------------------------------------- */

typedef void (*rtx_gen_log_fn)(void *ctx, int level /* 0 debug .. 3 error */, const char *msg);

struct rtx_gen_engine_options {
    struct rtx_devices *devices;     /* required; must outlive the engine */
    int device;                      /* slot in the set (0 the CPU, 1+N CUDA device N) */
    const char *consumer;            /* the device-layer consumer's name ("model NAME:VERSION") */
    int64_t memory_reserve_bytes;    /* the consumer's reservation; 0: weights + the KV pool */
    int64_t kv_cache_bytes;          /* KV pool; 0: from generation.kv_cache_fraction of what
                                      * the device can give after the weights */
    double kv_cache_fraction;        /* 0 < f <= 1 (0.9 on a GPU by default) */
    int block_size;                  /* tokens per KV block; 0: 16 */
    int max_batch_tokens;            /* token budget of one step; 0: 2048 (512 on the CPU) */
    int max_seqs;                    /* running sequences at most; 0: 256 (32 on the CPU) */
    int graph_max_tokens;            /* steps of at most this many tokens (rounded up to a
                                      * power of two) replay as captured graphs on a backend
                                      * that captures them (CUDA graphs); 0: 512; < 0: never */
    bool prefix_caching;             /* default true */
    int cpu_threads;                 /* CPU backend threads; 0: the device set's */
    const struct rtx_sched_config *lanes; /* NULL: rtx_sched_config_init's */
    const char *default_lane;        /* NULL or "": the last lane */
    rtx_gen_log_fn log;              /* NULL: events are not reported */
    void *log_ctx;
};
/* Fills the defaults above (prefix_caching true, the rest 0/NULL). */
void rtx_gen_engine_options_init(struct rtx_gen_engine_options *o);

struct rtx_gen_engine;
struct rtx_gen_handle;

/* Starts an engine for m (it takes a reference): registers the consumer, uploads the weights,
 * allocates the KV pool, builds the step graph and starts the thread. RTX_ENOMEM naming the
 * device when the weights or the smallest useful pool (one context's worth of blocks) do not
 * fit. */
int rtx_gen_engine_start(struct rtx_gen_model *m, const struct rtx_gen_engine_options *opt,
                         struct rtx_gen_engine **out, struct rtx_err *err);
/* Fails queued and running requests with RTX_EUNAVAILABLE ("engine stopping"), stops the
 * thread, frees the pool and the weights, unregisters the consumer. NULL: no-op. Every
 * on_done has run when it returns. */
void rtx_gen_engine_stop(struct rtx_gen_engine *e);
/* The first half of stop: fails every request, stops the thread, frees the device memory
 * and the consumer; the engine object stays (submit answers RTX_EUNAVAILABLE) until
 * rtx_gen_engine_stop, so callers that still hold it are safe. Idempotent. */
void rtx_gen_engine_halt(struct rtx_gen_engine *e);
struct rtx_gen_model *rtx_gen_engine_model(struct rtx_gen_engine *e);

/* Submits a request. Checked before it is queued: RTX_EINVAL naming the parameter (out of
 * range, unknown token ids, an empty prompt, prompt plus max_tokens past the context when
 * max_tokens was given, prompt alone past it otherwise), RTX_ENOTFOUND for an unknown lane,
 * RTX_EOVERLOAD with a retry hint when admission control refuses it (its lane cannot give a
 * first token within target), RTX_EUNAVAILABLE when stopping. On success *h (may be NULL
 * when the caller never cancels) holds one reference for the caller: release it with
 * rtx_gen_handle_unref, at any time. The callbacks are called only after a successful
 * return. */
int rtx_gen_submit(struct rtx_gen_engine *e, const struct rtx_gen_request *r,
                   struct rtx_gen_handle **h, struct rtx_err *err);
/* Cancels: the sequence and its blocks are freed by the next step, then on_done runs with
 * RTX_ECANCELED (unless it already ran). Safe from any thread, any number of times. */
void rtx_gen_cancel(struct rtx_gen_handle *h);
void rtx_gen_handle_unref(struct rtx_gen_handle *h); /* NULL: no-op */

/* ------------------------------------------------------------------------------------------
 * Statistics (the /metrics families and rtxctl's view)
 * ---------------------------------------------------------------------------------------- */

#define RTX_GEN_HIST_BUCKETS 16
/* Histogram bucket bounds in seconds (upper, inclusive); the last bucket is +Inf. */
extern const double rtx_gen_hist_bounds[RTX_GEN_HIST_BUCKETS - 1];

struct rtx_gen_hist {
    uint64_t counts[RTX_GEN_HIST_BUCKETS]; /* not cumulative */
    double sum_s;
    uint64_t n;
};

struct rtx_gen_lane_stats {
    char name[40];
    int running, waiting;
    uint64_t preempted_total;        /* sequences preempted */
    uint64_t refused_total;          /* refused by admission control */
};

struct rtx_gen_stats {
    int n_lanes;
    struct rtx_gen_lane_stats lanes[16];
    int64_t kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: free but reusable */
    uint64_t prefix_queries_blocks, prefix_hit_blocks, kv_evictions;
    uint64_t prompt_tokens_total, generation_tokens_total;
    uint64_t requests_finished, requests_canceled, requests_failed;
    uint64_t steps_total;
    struct rtx_gen_hist ttft, itl, tpot, e2e; /* seconds */
    int block_size;
    int64_t weight_bytes, kv_cache_bytes;
};
void rtx_gen_engine_stats(struct rtx_gen_engine *e, struct rtx_gen_stats *st);
/* The q-quantile (0 <= q <= 1; outside: clamped) of h in seconds, estimated from its buckets
 * as Prometheus' histogram_quantile does: the rank q * n falls in a bucket, the estimate
 * interpolates linearly between that bucket's bounds (the first bucket's lower bound is 0),
 * and a rank in the last (+Inf) bucket gives the largest finite bound. Empty buckets are
 * passed over, so q = 0 gives the lower bound of the first bucket holding a sample. 0 for an
 * empty histogram. */
double rtx_gen_hist_quantile(const struct rtx_gen_hist *h, double q);

#endif /* RTX_GENERATION_H */
