/*
 * sampler-impl.h - turning one row of logits into one token (generation/sampler.c), private to
 * generation/: penalties, temperature, top-k, top-p, min-p, a seeded draw, and the logprobs a
 * request asked for.
 *
 * DESIGN
 * The order is vLLM's: repetition penalty (HF's rule over prompt and output tokens: a positive
 * logit is divided by it, a negative one multiplied), presence and frequency penalties
 * (OpenAI's rule over output tokens: logit -= presence * [count > 0] + frequency * count),
 * then temperature 0 means greedy (argmax, the first on ties) and skips the rest; else divide
 * by the temperature, keep the top-k, keep the smallest set whose probability reaches top-p
 * (the most likely token always kept), drop tokens below min-p times the largest probability,
 * and draw from what is left with the sequence's own generator. Logprobs are the model's own
 * (log-softmax of the raw logits, before any of the above), as vLLM and OpenAI report them.
 * Each sequence keeps its counts of prompt and output tokens, so a step costs O(vocab) per
 * sequence plus O(k log k) for the top-k, never a sort of the whole vocabulary.
 */
#ifndef RTX_GENERATION_SAMPLER_IMPL_H
#define RTX_GENERATION_SAMPLER_IMPL_H

#include "generation/generation.h"

/* Per-sequence state: its generator and its token counts. */
struct rtx_sampler_seq;

/* A sequence's state for params (copied: the penalties and sampling fields) with its prompt
 * (counted for the repetition penalty). seed: the draw's seed (the engine passes
 * params.seed + choice, or a random one when the request has none). NULL when out of memory. */
struct rtx_sampler_seq *rtx__sampler_seq_new(const struct rtx_gen_params *params, int vocab,
                                             uint64_t seed, const int32_t *prompt,
                                             int n_prompt);
/* A copy for a forked choice with another seed (same counts). NULL when out of memory. */
struct rtx_sampler_seq *rtx__sampler_seq_fork(const struct rtx_sampler_seq *s, uint64_t seed);
void rtx__sampler_seq_free(struct rtx_sampler_seq *s); /* NULL: no-op */
/* Counts a token as output (the engine calls it for every sampled token). */
void rtx__sampler_seq_accept(struct rtx_sampler_seq *s, int32_t token);

/* Scratch memory for one thread's draws over a vocabulary (reused across calls). */
struct rtx_sampler_scratch;
struct rtx_sampler_scratch *rtx__sampler_scratch_new(int vocab);
void rtx__sampler_scratch_free(struct rtx_sampler_scratch *sc);

/* Draws one token from logits[0..vocab) (not changed). suppress, when not NULL, lists n_sup
 * ids that may not be drawn (EOS and stop ids before min_tokens). *logprob gets the token's
 * logprob; top (n_top entries, n_top <= RTX_GEN_MAX_LOGPROBS) gets the most likely tokens
 * with theirs, most likely first. Returns the token. */
int32_t rtx__sampler_draw(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc,
                          const float *logits, const int32_t *suppress, int n_sup,
                          float *logprob, struct rtx_gen_logprob *top, int n_top);

/* Whether params draw the most likely token with nothing else to compute: temperature 0, no
 * penalties, no logprobs (then the step's argmax is the draw). */
bool rtx__sampler_is_greedy(const struct rtx_gen_params *params);

/* Checks the sampling fields of params against their ranges for a vocabulary; RTX_EINVAL
 * naming the field ("temperature must be in [0, 100], got 200") otherwise. */
int rtx__sampler_check(const struct rtx_gen_params *params, int vocab, struct rtx_err *err);

#endif /* RTX_GENERATION_SAMPLER_IMPL_H */
