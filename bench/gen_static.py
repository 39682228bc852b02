"""gen_static.py - the reference of bench/bench_generate.py: transformers' `generate` with static
batching, on the same checkpoint and GPU, in bf16.

A static batch is b requests padded on the left to its longest prompt, run by one
generate(max_new_tokens = the longest output asked in the batch, min_new_tokens the same, so
EOS ends nothing: ignore_eos as on rtxd's side, do_sample False: greedy as on rtxd's side).
Each batch size is run once to warm up, then `repeats` times; the median run is kept. Two
times are measured per run, CUDA-synchronized: until the first token (a logits processor
stamps its first call, which comes right after the prefill forward pass) and until the end.

What is derived (bench_generate.py prints these definitions with the figures):
  output tokens/s    the tokens the requests asked for (each its own max_tokens; what a
                     static batch computes past a request's own length is waste, not output)
                     over the batch's time
  ttft_batch_ms      the first token of a full batch whose requests all waited at its start:
                     the prefill time, no queueing - the lower bound of static batching's TTFT
  ttft_p99_ms        p99 TTFT of static batching running back to back at this batch size,
                     its saturation throughput: a request arriving at a uniformly random
                     moment waits for the running batch to end (uniform over the batch's
                     time, p99 = 0.99 of it), then for its own batch's prefill. Still a lower
                     bound: the wait for a batch to fill and queues longer than one batch are
                     left out.
"""
import statistics
import time


def _stamp_class(torch):
    from transformers import LogitsProcessor

    class FirstToken(LogitsProcessor):
        """Records when generate first asks for the next token's scores (after prefill)."""

        def __init__(self):
            self.t = None

        def __call__(self, input_ids, scores):
            if self.t is None:
                if scores.is_cuda:
                    torch.cuda.synchronize()
                self.t = time.perf_counter()
            return scores
    return FirstToken


class Static:
    """transformers' model of a checkpoint on one device, run in static batches."""

    def __init__(self, ckpt, device="cuda:0", dtype="bf16"):
        import torch
        from transformers import AutoModelForCausalLM
        self.torch, self.device = torch, device
        dt = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
        # loaded in dt, not converted with .to(dt), which would also round the rotary
        # embedding's f32 inv_freq buffer (tests/gpu/test_generate_torch.py load_model)
        try:
            m = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dt)
        except TypeError:  # transformers before 4.56
            m = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=dt)
        self.model = m.to(device).eval()
        cfg = self.model.config
        eos = cfg.eos_token_id
        self.pad = (eos[0] if isinstance(eos, (list, tuple)) else eos)
        if self.pad is None:
            self.pad = 0
        self.FirstToken = _stamp_class(torch)

    def _sync(self):
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def run(self, prompts, max_tokens):
        """One static batch: (seconds to the first token, seconds in all)."""
        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        new = max(max_tokens)
        stamp = self.FirstToken()
        from transformers import LogitsProcessorList
        self._sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                      min_new_tokens=new, do_sample=False,
                                      pad_token_id=self.pad,
                                      logits_processor=LogitsProcessorList([stamp]))
        self._sync()
        t1 = time.perf_counter()
        if out.shape[1] != width + new:
            raise RuntimeError(f"generate made {out.shape[1] - width} tokens, not {new}")
        return stamp.t - t0, t1 - t0

    def measure(self, batches, repeats=2):
        """batches: [(prompts, max_tokens)] of one batch size, run in turn (the first one is
        also run once to warm up); the figures of static batching at that size (see the
        module's comment)."""
        self.run(*batches[0])
        runs = []
        for _ in range(repeats):
            for prompts, max_tokens in batches:
                first, total = self.run(prompts, max_tokens)
                runs.append((first, total, sum(max_tokens)))
        return derive(runs, len(batches[0][0]))

    def close(self):
        self.model = None
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()


def derive(runs, batch):
    """The figures of static batching from runs [(s to first token, s in all, output tokens
    asked)] of one batch size."""
    first = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    tokens = sum(r[2] for r in runs) / sum(r[1] for r in runs)
    return {"batch": batch, "runs": len(runs), "prefill_ms": first * 1e3,
            "batch_ms": total * 1e3, "output_tokens_per_s": tokens,
            "ttft_batch_ms": first * 1e3, "ttft_p99_ms": (0.99 * total + first) * 1e3}


def best(points):
    """The point of highest output tokens/s."""
    return max(points, key=lambda p: p["output_tokens_per_s"]) if points else None
