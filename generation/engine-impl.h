/*
 * engine-impl.h - the generation engine's state (generation/engine*.c), private to
 * generation/: requests, sequences, the lanes, plans and the step's buffers.
 *
 * DESIGN
 * Threads. Submit, cancel and stats run on any thread and touch only the inbox, the cancel
 * flags and the stats under the engine's mutex; everything else (sequences, blocks, plans,
 * the backend) belongs to the engine's one thread. The thread sleeps on a condition variable
 * when nothing is waiting or running.
 * Sequences. A request of n choices makes n sequences. A sequence's tokens are its prompt
 * followed by what it generated; `computed` of them have their keys and values in the KV
 * pool, in its blocks (block i holds positions i*BS .. i*BS+BS-1). A step computes a chunk
 * of its tokens [computed, computed + k); when that reaches its last token, the step's logits
 * for it are sampled and the new token appended. Preemption frees every block and sets
 * computed to 0: the sequence recomputes prompt and output later (prefix caching may give
 * most of it back). Choices 2..n wait until choice 1 has computed its prompt, then share its
 * full prompt blocks (references) and compute only the rest.
 */
#ifndef RTX_GENERATION_ENGINE_IMPL_H
#define RTX_GENERATION_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "formats/formats.h"
#include "generation/arch-impl.h"
#include "generation/generation.h"
#include "generation/kv-blocks-impl.h"
#include "generation/sampler-impl.h"
#include "generation/step-cost-impl.h"
#include "scheduler/sched.h"

struct rtx_backend;
struct rtx_device;
struct rtx_device_consumer;
struct rtx_plan;

enum seq_state {
    SEQ_WAITING,   /* no blocks: queued in its lane (new, or preempted) */
    SEQ_FORK_WAIT, /* choice > 0 waiting for choice 0's prompt */
    SEQ_RUNNING,   /* holds blocks; computes its next chunk when the budget allows */
    SEQ_DONE,      /* finished, canceled or failed: blocks freed */
};

struct gen_req;

struct gen_seq {
    struct gen_req *req;
    int choice;
    enum seq_state state;
    int32_t *tokens;             /* prompt + output */
    int n_tokens, cap_tokens;
    int computed;                /* tokens with keys and values in the pool */
    int32_t *blocks;             /* block ids */
    int n_blocks, cap_blocks;
    uint8_t (*hashes)[RTX_KV_HASH_BYTES]; /* chain hashes of the full blocks registered */
    int n_hashed;
    int n_out;                   /* tokens generated */
    struct rtx_sampler_seq *sampler;
    struct rtx_tokenizer_stream *detok;
    char *held;                  /* decoded text not yet sent (stop-string hold-back) */
    size_t n_held, cap_held;
    enum rtx_gen_finish finish;
    int64_t last_token_ns;
    uint64_t preemptions;
    /* this step */
    int step_tokens;             /* tokens scheduled this step (0: not in the step) */
    int step_row;                /* its logits row */
    /* the step's event, gathered before callbacks */
    int ev_n;
    int32_t ev_tokens[4];
    float ev_logprobs[4];
    struct rtx_gen_logprob *ev_top; /* RTX_GEN_MAX_LOGPROBS per token, allocated on demand */
    struct gen_seq *next;        /* in its lane's waiting list */
};

struct gen_req {
    atomic_int refs;             /* the engine's and the caller's handle */
    atomic_int canceled;
    struct rtx_gen_engine *engine;
    int lane;
    int64_t arrival_ns, deadline_ns, first_token_ns, first_step_ns;
    struct rtx_gen_params params;
    char *stop_buf;              /* the stop strings, copied */
    int32_t *stop_ids;
    int max_stop_len;
    int32_t *prompt;
    int n_prompt;
    int n_seqs, n_live;
    struct gen_seq *seqs;
    struct rtx_gen_usage usage;
    rtx_gen_event_fn on_event;
    rtx_gen_done_fn on_done;
    void *ctx;
    bool done_called;
    int status;                  /* the first failure of one of its sequences */
    struct rtx_err err;
    struct gen_req *inbox_next;
};

/* struct rtx_gen_handle is struct gen_req (the caller's reference). */

struct gen_lane {
    char name[RTX_SCHED_LANE_NAME_MAX + 1];
    int64_t target_ns;
    int weight;
    int64_t max_queued;
    enum rtx_sched_timeout on_timeout;
    double pass;                 /* virtual time: tokens served / weight */
    struct gen_seq *waiting;     /* FIFO by arrival, preempted ones at the head */
    struct gen_seq *waiting_tail;
    int n_waiting, n_running;
    int64_t queued_tokens;       /* tokens waiting sequences still have to compute */
    int64_t last_busy_ns;        /* when it last had a running or waiting sequence */
    uint64_t preempted_total, refused_total;
};

#define GEN_MAX_PLANS 32
#define GEN_MAX_BOUND_PLANS 8    /* of them with the pool and weights bound (engine-step.c) */

struct gen_plan {
    int t, s, b;                 /* bucketed tokens, sequences, blocks per table */
    struct rtx_plan *plan;
    uint64_t used;               /* step number of the last use (LRU) */
    bool bound;                  /* replays: holds its arena and outputs between steps */
};

struct rtx_gen_engine {
    struct rtx_gen_model *model;
    const struct rtx_gen_arch *arch;
    struct rtx_gen_engine_options opt;
    char consumer_name[96];
    struct rtx_device *dev;
    struct rtx_device_consumer *consumer;
    enum rtx_dtype dtype;
    int block_size, n_blocks, max_batch_tokens, max_seqs, context;
    int graph_max_tokens;               /* plans of at most this many tokens bind their pool
                                         * and weights, so that they replay (engine-step.c) */
    int64_t kv_bytes, weight_bytes;

    /* engine thread only */
    struct rtx_backend *be;
    struct rtx_gen_weights weights;     /* host, in dtype */
    struct rtx_tensor **dev_weights;    /* on the device */
    struct rtx_tensor **kv;             /* 2 * n_layers views of the pool */
    struct rtx_buffer *kv_buf;
    struct rtx_graph *graph;
    struct gen_plan plans[GEN_MAX_PLANS];
    int n_plans;
    struct rtx_kv_blocks *blocks;
    struct rtx_sampler_scratch *scratch;
    struct gen_lane lanes[RTX_SCHED_MAX_LANES];
    int n_lanes, default_lane;
    struct gen_seq **run;               /* running sequences, in admission order */
    int n_run, cap_run;
    struct gen_req **reqs;              /* live requests */
    int n_reqs, cap_reqs;
    struct gen_seq **step_seqs;         /* the step's sequences, by logits row */
    int n_step;
    uint64_t steps;
    struct rtx__step_cost cost;         /* the step-time model (step-cost-impl.h) */
    bool replays;                       /* the backend replays graphs of small plans */
    /* what admission takes from the model: per step (an eager one) and per token */
    double per_token_ns, base_ns;

    /* shared (mutex) */
    pthread_mutex_t mu;
    pthread_cond_t cv, started_cv;
    struct gen_req *inbox, *inbox_tail;
    int64_t inbox_tokens[RTX_SCHED_MAX_LANES]; /* prompt tokens per lane in the inbox */
    int inbox_count[RTX_SCHED_MAX_LANES];
    bool stopping, started;
    int start_rc;
    struct rtx_err start_err;
    atomic_int kick;                    /* a cancel happened: the thread looks at the flags */
    struct rtx_gen_stats stats;         /* counters and histograms; gauges filled on read */
    int64_t lane_queued_tokens[RTX_SCHED_MAX_LANES]; /* mirror for admission (mutex) */
    int lane_waiting[RTX_SCHED_MAX_LANES], lane_running[RTX_SCHED_MAX_LANES];
    struct rtx_kv_blocks_stats kv_stats;
    double admit_per_token_ns, admit_base_ns; /* mirrors of the step-time model */
    pthread_t thread;
};

/* engine.c */
void rtx__gen_req_unref(struct gen_req *r);
void rtx__gen_log(struct rtx_gen_engine *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rtx__gen_hist_add(struct rtx_gen_hist *h, double seconds);

/* engine-sched.c: the step's schedule and the sequences' life */
/* Moves new requests from the inbox into the lanes (engine thread; takes the mutex). */
void rtx__gen_take_inbox(struct rtx_gen_engine *e);
/* Frees the sequences of canceled requests and of those past their deadline (calling
 * on_done), and returns whether any work is left. */
bool rtx__gen_sweep(struct rtx_gen_engine *e, int64_t now);
/* Chooses the step's sequences and chunks, allocating blocks (preempting when short);
 * fills e->step_seqs. Returns the number of tokens scheduled. */
int rtx__gen_schedule(struct rtx_gen_engine *e, int64_t now);
/* Ends a sequence: frees its blocks, counts it; the request's on_done runs when its last
 * sequence ended (status 0 unless a failure is passed). */
void rtx__gen_seq_end(struct rtx_gen_engine *e, struct gen_seq *s, int status,
                      const struct rtx_err *err);
/* Fails every live request with status (engine stopping, device failure). */
void rtx__gen_fail_all(struct rtx_gen_engine *e, int status, const struct rtx_err *err);
/* Registers the sequence's newly full blocks for prefix caching. */
void rtx__gen_register_blocks(struct rtx_gen_engine *e, struct gen_seq *s);
/* Choice 0 computed its prompt: choices 1..n-1 start, sharing its full prompt blocks. */
void rtx__gen_forks(struct rtx_gen_engine *e, struct gen_seq *parent);
/* Publishes gauges (lanes, blocks) to the shared stats (takes the mutex). */
void rtx__gen_publish(struct rtx_gen_engine *e);

/* engine-step.c: running a step and turning logits into tokens and text */
/* The bucket a step's tokens, sequences or table width are rounded up to (a power of two). */
int rtx__gen_bucket(int n);
int rtx__gen_step_run(struct rtx_gen_engine *e, int n_tokens, struct rtx_err *err);
void rtx__gen_plans_free(struct rtx_gen_engine *e);
/* Appends a sampled token to the sequence and emits its text; ends it when finished. */
void rtx__gen_seq_emit(struct rtx_gen_engine *e, struct gen_seq *s, int64_t now);
int rtx__gen_seq_prepare(struct rtx_gen_engine *e, struct gen_seq *s, struct rtx_err *err);

#endif /* RTX_GENERATION_ENGINE_IMPL_H */
