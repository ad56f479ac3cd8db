"""Closed forms of the backward pass: exact HBM traffic, FLOPs and SRAM of every variant's backward.

Each function restates, count for count, what the backward reference in `variants/` records through
`counting.memory.Memory` (tests/test_backward_counts.py holds the two exactly equal). Like the
forward's (`counting.closed_forms`), every count is a polynomial in `counting.tiling.TileSums`: the
backward visits the same tiles as the forward (hidden key blocks skipped); its K/V-outer loop only
reorders the transfers, so Σ over visited tiles of r is s.r, of c is s.c and of r·c is s.rc.

Per (batch, head), then times B·H; W = min(k_blocks·Bc, Nk) the columns of the K/V blocks that some
Q block visits (all of them with the bottom-right mask: the last query row sees every key).

    fa2 (Alg. 2; v_once's backward is fa2's)
        reads  O: Nq d;  dO: Nq d + s.r d;  K, V: W d each;  Q: s.r d;  lse, D: s.r each;
               dQ: s.r d + Nq d (float32)
        writes D: Nq;  dQ: Nq d + s.r d (float32) + Nq d (input dtype);  dK, dV: Nk d each
        matmul 10 d s.rc;  exp s.rc;  other 4 s.rc + 2 d s.c + d s.r + 3 Nq d + Nk d
    fa1 (Alg. 4)
        reads  K, V: W d each;  Q, O, dO, dQ: s.r d each;  ℓ, m: s.r each (float32)
        writes dQ: Nq d + s.r d;  dK, dV: Nk d + W d each
        matmul 10 d s.rc;  exp s.rc;  other 5 s.rc + 3 d s.c + 4 d s.r
    naive (Alg. 3)
        reads  P: s.rc + Nq Nk;  dP: Nq Nk;  dS: 2 s.rc;  dO: 2 s.r d;  V, K: s.c d each;  Q: s.r d
        writes dP, dS: Nq Nk each;  dQ: Nq d;  dK, dV: Nk d each
        matmul 8 d s.rc;  exp 0;  other 2 d s.c + d s.r + 4 Nq Nk + Nq d + Nk d

Recomputation (fa1, fa2, v_once) is the S = τ Q Kᵀ product (2 d s.rc), its scaling and the
exponentials of P (s.rc each) and the subtraction of L or m (s.rc; fa1 also divides by ℓ: s.rc).
Memory saved for the backward: the bytes the forward keeps beyond q, k, v and o: naive's P
(Nq·Nk in the input dtype), fa1's ℓ and m (2·Nq float32), fa2's and v_once's lse (Nq float32).

This module imports no torch: `fa-traffic report` uses it, and the references import their SRAM
working sets from here (one source of truth).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from counting import closed_forms as cf
from counting.headline import seen_rows
from counting.tiling import TileSums, Tiling, tile_sums

F32 = 4
PASSES = ("forward", "backward", "train")
# the papers count the backward as 2.5 forwards (5 products per tile against 2), whatever the variant: paper_flops
PAPER_FLOP_FACTOR = {"forward": 1.0, "backward": 2.5, "train": 3.5}


# -- SRAM working sets (the references call these in require_sram) --------------------------------
def fa2_backward_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """K_j, V_j, Q_i, dO_i tiles; dK_j, dV_j, dQ_i accumulators, L_i, D_i, S/P and dP/dS in float32."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    return (2 * bc * d + 2 * br * d) * itemsize + (2 * bc * d + br * d + 2 * br + 2 * br * bc) * F32


def fa1_backward_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """K_j, V_j, Q_i, O_i, dO_i, dQ_i tiles; d̃K_j, d̃V_j, ℓ_i, m_i, D_i, S/P and dP/dS in float32."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    return (2 * bc * d + 4 * br * d) * itemsize + (2 * bc * d + 3 * br + 2 * br * bc) * F32


def naive_backward_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal=False) -> int:
    """The largest of the five passes' working sets (FA1 Alg. 3 line 3 holds one float32 row of P and of dP)."""
    br, bc = min(block_q, n_q), min(block_k, n_k)
    return max((br * bc + br * d) * itemsize + bc * d * F32,  # FA1 Alg. 3 line 1 (FA1 Alg. 3 line 5 alike): P/dS tile, dO/Q, acc
               (br * d + bc * d) * itemsize + br * bc * F32,  # FA1 Alg. 3 line 2: dO_i, V_j; dP tile
               2 * n_k * F32,  # FA1 Alg. 3 line 3: a row of P and of dP
               (br * bc + bc * d) * itemsize + br * d * F32)  # FA1 Alg. 3 line 4: dS tile, K_j; dQ_i acc


_BACKWARD_SRAM = {"naive": naive_backward_sram_bytes, "fa1": fa1_backward_sram_bytes,
                  "fa2": fa2_backward_sram_bytes, "v_once": fa2_backward_sram_bytes,
                  "split_kv": fa2_backward_sram_bytes}  # split_kv's backward is FA2's (variants/split_kv.py)


# -- the counts ------------------------------------------------------------------------------------
def _kv_cols(s: TileSums, t: Tiling) -> int:
    """Columns of the K/V blocks at least one Q block visits (a prefix)."""
    return min(s.k_blocks * t.block_k, t.n_k)


def _fa2(s: TileSums, t: Tiling, d: int, item: int):
    nq, nk, w = t.n_q, t.n_k, _kv_cols(s, t)
    # tensor -> [(elements, bytes per element)]; dQ mixes the float32 accumulator and the output
    reads = {"O": [(nq * d, item)], "dO": [(nq * d + s.r * d, item)], "K": [(w * d, item)],
             "V": [(w * d, item)], "Q": [(s.r * d, item)], "lse": [(s.r, F32)], "D": [(s.r, F32)],
             "dQ": [(s.r * d + nq * d, F32)]}
    writes = {"D": [(nq, F32)], "dQ": [(nq * d + s.r * d, F32), (nq * d, item)],
              "dK": [(nk * d, item)], "dV": [(nk * d, item)]}
    flops = {"matmul": 10 * d * s.rc, "exp": s.rc,
             "other": 4 * s.rc + 2 * d * s.c + d * s.r + 3 * nq * d + nk * d}
    recompute = {"matmul": 2 * d * s.rc, "exp": s.rc, "other": 2 * s.rc}
    return reads, writes, flops, recompute


def _fa1(s: TileSums, t: Tiling, d: int, item: int):
    nq, nk, w = t.n_q, t.n_k, _kv_cols(s, t)
    reads = {"K": [(w * d, item)], "V": [(w * d, item)], "Q": [(s.r * d, item)],
             "O": [(s.r * d, item)], "dO": [(s.r * d, item)], "dQ": [(s.r * d, item)],
             "l": [(s.r, F32)], "m": [(s.r, F32)]}
    writes = {"dQ": [(nq * d + s.r * d, item)], "dK": [(nk * d + w * d, item)],
              "dV": [(nk * d + w * d, item)]}
    flops = {"matmul": 10 * d * s.rc, "exp": s.rc, "other": 5 * s.rc + 3 * d * s.c + 4 * d * s.r}
    recompute = {"matmul": 2 * d * s.rc, "exp": s.rc, "other": 3 * s.rc}
    return reads, writes, flops, recompute


def _naive(s: TileSums, t: Tiling, d: int, item: int):
    nq, nk = t.n_q, t.n_k
    reads = {"P": [(s.rc + nq * nk, item)], "dO": [(2 * s.r * d, item)], "V": [(s.c * d, item)],
             "dP": [(nq * nk, item)], "dS": [(2 * s.rc, item)], "K": [(s.c * d, item)],
             "Q": [(s.r * d, item)]}
    writes = {"dV": [(nk * d, item)], "dP": [(nq * nk, item)], "dS": [(nq * nk, item)],
              "dQ": [(nq * d, item)], "dK": [(nk * d, item)]}
    flops = {"matmul": 8 * d * s.rc, "exp": 0,
             "other": 2 * d * s.c + d * s.r + 4 * nq * nk + nq * d + nk * d}
    recompute = {"matmul": 0, "exp": 0, "other": 0}
    return reads, writes, flops, recompute


_BACKWARD = {"naive": _naive, "fa1": _fa1, "fa2": _fa2, "v_once": _fa2, "split_kv": _fa2}


def has_backward(variant: str) -> bool:
    """Whether the backward's closed form knows `variant` (a variant registered at run time may not)."""
    return variant in _BACKWARD


def saved_bytes(variant: str, batch: int, heads: int, n_q: int, n_k: int, dtype="fp16") -> int:
    """Bytes the forward keeps for the backward beyond q, k, v and o (see the module docstring)."""
    if variant not in cf.VARIANT_NAMES:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(cf.VARIANT_NAMES)}")
    bh = batch * heads
    if variant == "naive":
        return bh * n_q * n_k * cf.DTYPES[cf.dtype_name(dtype)]
    return bh * n_q * F32 * (2 if variant == "fa1" else 1)


def min_backward_hbm_bytes(batch, heads, n_q, n_k, d, itemsize, causal=False) -> int:
    """Q, K, V, O, dO and lse read once; dQ, dK, dV written once. Q, O, dO and lse only for the rows that see a key
    (counting.headline.seen_rows: a causal row before Nq - Nk has no P, so its dQ is 0 and nothing of it is read)."""
    seen = seen_rows(n_q, n_k, causal)
    return batch * heads * (((3 * seen + n_q) * d + 4 * n_k * d) * itemsize + F32 * seen)


@dataclass
class PassTraffic(cf.Traffic):
    """A Traffic of the backward (or forward + backward: "train"), with what recomputation costs
    and what the forward saved for it."""

    pass_name: str = "backward"
    recompute_flops: dict = field(default_factory=dict)  # kind -> FLOPs spent rebuilding S and P
    saved_bytes: int = 0  # what the forward keeps for the backward (beyond q, k, v, o)
    work_flops: int = 0  # attention_flops: the products this variant's pass executes, per visible pair

    @property
    def paper_flops(self) -> float:
        """The papers' convention: the forward's paper_flops times 2.5 (backward) or 3.5 (train), any variant."""
        return PAPER_FLOP_FACTOR[self.pass_name] * super().paper_flops

    @property
    def attention_flops(self) -> int:
        """The work TFLOP/s divides by (analysis.roofline): 2·d per visible (query, key) pair for each product the
        variant's pass executes per score, read off its counted matmul FLOPs (pass_work_flops): the backward of
        fa1, fa2 and v_once 10·d (five products: S again, dP, dV, dQ, dK: 2.5 forwards), naive's 8·d (four: it
        reads P, recomputes nothing: 2 forwards); train adds the forward's 4·d. Never above the executed matmul
        FLOPs, so a rate built on it cannot beat the matmul roof."""
        return self.work_flops


def pass_work_flops(matmul_flops: int, visited_scores: int, t: Tiling) -> int:
    """Per (batch, head): 2·d per visible pair per product a pass executes: its matmul FLOPs (c·d·s.rc: c·d per
    score of every visited tile) over the visited scores s.rc, times the visible pairs (counting.headline)."""
    from counting.headline import visible_pairs

    per_score, rest = divmod(matmul_flops, visited_scores)
    if rest:  # every variant's products are whole tiles (the closed forms): c·d per visited score
        raise AssertionError(f"matmul FLOPs {matmul_flops} are not a whole number per visited score ({visited_scores})")
    return per_score * visible_pairs(t.n_q, t.n_k, t.causal)


def backward_counts(variant: str, batch: int, heads: int, n_q: int, n_k: int, d: int, *,
                    causal=False, dtype="fp16", block_q=64, block_k=64, placement="auto",
                    rescale="eager", sram_bytes: int | None = None) -> PassTraffic:
    """Exact whole-problem counts of `variant`'s backward reference, without running it.

    Arguments as `closed_forms.counts` (which also validates them); v_once's options only label the
    row: its backward is fa2's. A working set over `sram_bytes` is reported (fits), not raised.
    """
    fwd = cf.counts(variant, batch, heads, n_q, n_k, d, causal=causal, dtype=dtype, block_q=block_q,
                    block_k=block_k, placement=placement, rescale=rescale, sram_bytes=sram_bytes)
    item = cf.DTYPES[fwd.dtype]
    t = Tiling(n_q, n_k, block_q, block_k, bool(causal))
    sums = tile_sums(t)
    reads, writes, flops, recompute = _BACKWARD[variant](sums, t, d, item)
    bh = batch * heads

    def elements(parts):
        return {k: sum(n for n, _ in v) * bh for k, v in parts.items() if sum(n for n, _ in v)}

    def nbytes(parts):
        return {k: sum(n * b for n, b in v) * bh for k, v in parts.items() if sum(n for n, _ in v)}

    return PassTraffic(
        variant=variant, batch=batch, heads=heads, n_q=n_q, n_k=n_k, d=d, causal=bool(causal),
        dtype=fwd.dtype, block_q=block_q, block_k=block_k,
        reads=elements(reads), writes=elements(writes), read_bytes=nbytes(reads),
        write_bytes=nbytes(writes), flops={k: flops[k] * bh for k in cf.FLOP_KINDS},
        sram_peak_bytes=_BACKWARD_SRAM[variant](n_q, n_k, d, block_q, block_k, item),
        sram_capacity=sram_bytes, placement=fwd.placement,
        placement_resolved=fwd.placement_resolved, rescale=fwd.rescale,
        pass_name="backward", recompute_flops={k: recompute[k] * bh for k in cf.FLOP_KINDS},
        saved_bytes=saved_bytes(variant, batch, heads, n_q, n_k, fwd.dtype),
        work_flops=pass_work_flops(flops["matmul"], sums.rc, t) * bh,
    )


def pass_counts(pass_name: str, variant: str, *args, **kwargs) -> cf.Traffic:
    """forward: closed_forms.counts; backward: backward_counts; train: the two summed (per tensor
    and FLOP kind; the SRAM peak is the larger of the two working sets)."""
    if pass_name not in PASSES:
        raise ValueError(f"unknown pass {pass_name!r}; choose one of {', '.join(PASSES)}")
    if pass_name == "forward":
        return cf.counts(variant, *args, **kwargs)
    bwd = backward_counts(variant, *args, **kwargs)
    if pass_name == "backward":
        return bwd
    fwd = cf.counts(variant, *args, **kwargs)

    def add(a, b):
        return dict(Counter(a) + Counter(b))

    return PassTraffic(
        variant=variant, batch=bwd.batch, heads=bwd.heads, n_q=bwd.n_q, n_k=bwd.n_k, d=bwd.d,
        causal=bwd.causal, dtype=bwd.dtype, block_q=bwd.block_q, block_k=bwd.block_k,
        reads=add(fwd.reads, bwd.reads), writes=add(fwd.writes, bwd.writes),
        read_bytes=add(fwd.read_bytes, bwd.read_bytes), write_bytes=add(fwd.write_bytes, bwd.write_bytes),
        flops={k: fwd.flops[k] + bwd.flops[k] for k in cf.FLOP_KINDS},
        sram_peak_bytes=max(fwd.sram_peak_bytes, bwd.sram_peak_bytes),
        sram_capacity=bwd.sram_capacity, placement=bwd.placement,
        placement_resolved=bwd.placement_resolved, rescale=bwd.rescale, pass_name="train",
        recompute_flops=bwd.recompute_flops, saved_bytes=bwd.saved_bytes,
        dsmem_bytes=add(fwd.dsmem_bytes, bwd.dsmem_bytes), cluster_size=fwd.cluster_size,
        work_flops=fwd.attention_flops + bwd.attention_flops,
    )
