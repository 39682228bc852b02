"""
opgen - input generators of the op test cases shared by tests/interop/test_ops.py (rtxrun on
the CPU against the NumPy reference of rtxgraph.py) and tests/gpu/test_ops_torch.py (rtxrun
on the GPU against PyTorch).

DESIGN
A generator is made from a case's dtype and shapes and called with a seeded
numpy.random.Generator; it returns the list of the op's input arrays (None for an absent
optional input), drawing from the generator in a fixed order, so a case's inputs depend only
on its seed. This module needs nothing but NumPy: test_ops_torch.py runs on the GPU machine,
which has python3, NumPy and PyTorch only (rtxgraph.py needs the generated graph_pb2, so the
generators cannot live there). Floats are made as float32 (f16/bf16 inputs are rounded by the
callers), integers in the dtype's NumPy type, bool as numpy.bool_.
"""

import numpy as np

FLOATS = ("f32", "f16", "bf16")
INTS = ("i8", "i32", "i64", "u8")
# NumPy type that holds a value of each dtype (bf16 lives in float32).
NP_DT = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i8": np.int8,
         "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_}
INT_RANGE = {"i8": (-128, 127), "i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1),
             "u8": (0, 255)}


def uni(rng, shape, lo=-3.0, hi=3.0):
    """float32, uniform in [lo, hi)."""
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def nrm(rng, shape, s=1.0, m=0.0):
    """float32, normal with mean m and standard deviation s."""
    return (rng.standard_normal(shape) * s + m).astype(np.float32)


def ints(rng, shape, dt, lo, hi):
    """Integers of dtype dt, uniform in [lo, hi] (both ends included)."""
    return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True)).astype(NP_DT[dt])


def data(dt, shape, lo=-3.0, hi=3.0):
    """Generator of one input: floats uniform in [lo, hi), integers over their range."""
    def gen(rng):
        if dt in FLOATS:
            return [uni(rng, shape, lo, hi)]
        if dt == "bool":
            return [np.asarray(rng.random(shape) < 0.5)]
        return [ints(rng, shape, dt, *INT_RANGE[dt])]
    return gen


def where_gen(dt, sc, sx, sy):
    """where: a random condition of shape sc, then x and y as data() makes them."""
    def gen(rng):
        return [np.asarray(rng.random(sc) < 0.5)] + [data(dt, s)(rng)[0] for s in (sx, sy)]
    return gen


def cmp_gen(dt, sa, sb, nan=False):
    """Comparisons: few distinct values, so that equality happens; nan: every third element
    of a (floats) is NaN."""
    def gen(rng):
        if dt in FLOATS:
            a = (rng.integers(-3, 4, size=sa) / 2).astype(np.float32)
            b = (rng.integers(-3, 4, size=sb) / 2).astype(np.float32)
            if nan and a.size:
                a.reshape(-1)[::3] = np.nan
            return [a, b]
        if dt == "bool":
            return [np.asarray(rng.random(sa) < .5), np.asarray(rng.random(sb) < .5)]
        vals = rng.integers(*INT_RANGE[dt], size=5, endpoint=True).astype(NP_DT[dt])
        return [np.asarray(rng.choice(vals, size=sa)), np.asarray(rng.choice(vals, size=sb))]
    return gen


def concat_gen(dt, shapes):
    """concat: one data() input per shape."""
    def gen(rng):
        return [data(dt, s)(rng)[0] for s in shapes]
    return gen


def argmax_gen(dt, shape, nan=False):
    """argmax/argmin: few distinct values, so that ties happen; nan: three float NaNs (the
    shape must have at least 7 elements)."""
    def gen(rng):
        if dt in FLOATS:
            x = (rng.integers(-4, 5, size=shape) / 2).astype(np.float32)
            if nan:
                x.reshape(-1)[[1, 5, 6]] = np.nan
            return [x]
        vals = rng.integers(*INT_RANGE[dt], size=4, endpoint=True)
        return [rng.choice(vals, size=shape).astype(NP_DT[dt])]
    return gen


def ln_gen(xs, ps, scale=True, bias=True, offset=0.5):
    """layer_norm/rms_norm: x of shape xs (mean offset), then scale and bias of shape ps
    (None when the case goes without)."""
    def gen(rng):
        x = nrm(rng, xs, 2.0, offset)
        return [x, nrm(rng, ps, 0.5, 1.0) if scale else None, nrm(rng, ps) if bias else None]
    return gen


def attn_gen(lead, lq, lk, d, dv, mask=None):
    """attention: q, k, v with leading dims lead; mask: None, ('bool', shape),
    ('bool-row', shape): query row 1 fully masked, ('float', shape): additive, -inf
    entries, key 0 always kept."""
    def gen(rng):
        q = nrm(rng, lead + [lq, d])
        k = nrm(rng, lead + [lk, d])
        v = nrm(rng, lead + [lk, dv])
        out = [q, k, v]
        if mask is not None:
            kind, ms = mask
            if kind.startswith("bool"):
                m = rng.random(ms) < 0.7
                if kind == "bool-row":
                    m[..., 1, :] = False
                out.append(np.asarray(m))
            else:
                m = nrm(rng, ms, 2.0)
                m[rng.random(ms) < 0.2] = -np.inf
                m[..., 0] = 0.0  # every row keeps key 0
                out.append(m)
        return out
    return gen


def rope_gen(T, H, D, half, pos_dt="i32", max_pos=4096, theta=10000.0):
    """rope: x [T, H, D] normal, positions of pos_dt in [0, max_pos], inv_freq float32
    theta^(-2i/R) for the R = 2 * half rotated dims (it stays f32 whatever x's dtype)."""
    def gen(rng):
        x = nrm(rng, [T, H, D])
        pos = ints(rng, [T], pos_dt, 0, max_pos)
        inv = (theta ** (-2.0 * np.arange(half) / max(2 * half, 1))).astype(np.float32)
        return [x, pos, inv]
    return gen


def paged_gen(seqs, H, Hkv, D, BS, pad_front=0, pad_back=0, spare=3):
    """paged_attention: seqs lists (context length, new tokens) per sequence, the new tokens
    being its last positions; their rows follow pad_front padding rows, pad_back more close.
    Blocks come from a shuffled pool (spare blocks unused), block-table entries past a
    sequence's blocks are -1, padding rows have slot -1, every cache slot holds random
    (stale) data. Returns q, k, v, k_cache, v_cache, slot_mapping, block_tables, query_start,
    context_lens (floats as float32, the metadata int32)."""
    def gen(rng):
        nbs = [(ctx + BS - 1) // BS for ctx, _ in seqs]
        B = max([1] + nbs)
        NB = sum(nbs) + spare
        pool = list(rng.permutation(NB))
        T = pad_front + pad_back + sum(n for _, n in seqs)
        tables = np.full([len(seqs), B], -1, np.int32)
        slots = np.full([T], -1, np.int32)
        qs = [pad_front]
        for s, (ctx, n) in enumerate(seqs):
            for b in range(nbs[s]):
                tables[s, b] = pool.pop()
            for r, pos in enumerate(range(ctx - n, ctx)):
                slots[qs[-1] + r] = tables[s, pos // BS] * BS + pos % BS
            qs.append(qs[-1] + n)
        return [nrm(rng, [T, H, D]), nrm(rng, [T, Hkv, D]), nrm(rng, [T, Hkv, D]),
                nrm(rng, [NB, BS, Hkv, D]), nrm(rng, [NB, BS, Hkv, D]), slots, tables,
                np.asarray(qs, np.int32), np.asarray([c for c, _ in seqs], np.int32)]
    return gen
