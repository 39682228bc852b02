/*
 * block-graph.h - the bf16 pre-LayerNorm transformer block (examples/README.md's structure:
 * LayerNorm, q/k/v projections split into heads, causal attention, output projection and
 * residual, LayerNorm, tanh-GELU MLP and residual) built with the graph API, with random
 * weights from a seed. One builder for the benchmark (bench/bench-gpu.c, the block against
 * PyTorch) and the GPU tests (tests/gpu/gpu-exec.c, the block against the CPU backend).
 */
#ifndef RTX_TESTS_GPU_BLOCK_GRAPH_H
#define RTX_TESTS_GPU_BLOCK_GRAPH_H

#include <stdint.h>

#include "runtime/runtime.h"

/* Builds the block for x [batch, seq, width] (bf16, input "x", output "y") with `heads`
 * heads (width divisible by heads) into *out; weights uniform in +-1/sqrt(fan-in), layer norm
 * scales around 1, drawn from `seed`. 0 or a negative code with err filled. */
int block_graph_new(int64_t batch, int64_t seq, int64_t width, int64_t heads, uint64_t seed,
                    struct rtx_graph **out, struct rtx_err *err);

#endif /* RTX_TESTS_GPU_BLOCK_GRAPH_H */
