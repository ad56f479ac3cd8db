"""Headline figures that benchmarks and reports quote beside the exact counts.

visible_pairs: the (query, key) pairs the mask lets through, per (batch, head): Nq·Nk, or with the
bottom-right causal mask (query i sees key j iff j <= i + Nk - Nq) Σ_i clamp(i + Nk - Nq + 1, 0, Nk).
attention_flops: 4·d per visible pair (two products, QKᵀ and PV, of 2·d FLOPs per pair), times B·H:
the work every TFLOP/s in this project divides by. It never exceeds the matmul FLOPs any variant
executes (those are whole visited tiles), so a rate built on it cannot beat the matmul roof.

paper_flops: the papers' convention, 4·Nq·Nk·d per (batch, head), halved when causal, as
FlashAttention's benchmarks report TFLOP/s. It equals attention_flops without a mask; with one it is
only an approximation (N²/2 for N(N+1)/2 pairs at Nq = Nk) and is wrong when Nq != Nk (Nq = 16k,
Nk = 1k: 8M pairs claimed, 1M visible). Kept for comparison with published figures, labelled as such.

min_hbm_bytes: each input read once and each output written once: (Nq'·d + 2·Nk·d + Nq·d)·itemsize +
4·Nq bytes of lse, per (batch, head), where Nq' = seen_rows: the query rows that see a key. Under the causal mask
with Nk < Nq the first Nq - Nk rows see none: their O is 0 and their lse -inf whatever Q holds, so no kernel
needs to read their Q (naive and FA1, which read Q_i per visited tile, do not), while every O and lse row is
written. Counting all of Q there put the "minimum" above what naive and FA1 move (× min 0.54-0.59 at Nk = 1).
"""
from __future__ import annotations


def visible_pairs(n_q: int, n_k: int, causal: bool = False) -> int:
    """(query, key) pairs attention computes with, per (batch, head), exactly (O(1))."""
    if not causal:
        return n_q * n_k
    off = n_k - n_q
    # row i sees min(Nk, max(0, i + off + 1)) keys: 0 up to row -off - 1, then 1, 2, ... up to Nk
    first = max(0, -off)  # first row that sees a key
    if first >= n_q:
        return 0
    # rows first..n_q-1 see i + off + 1 keys, never above Nk (the last row sees exactly Nk)
    lo, hi = first + off + 1, n_q - 1 + off + 1  # keys seen by the first and last such row
    return (lo + hi) * (hi - lo + 1) // 2


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> int:
    """4·d FLOPs per visible (query, key) pair (QKᵀ: FA2 Alg. 1 line 8; PV: FA2 Alg. 1 line 10), times B·H."""
    return 4 * d * batch * heads * visible_pairs(n_q, n_k, causal)


def paper_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> float:
    """The papers' convention 4·Nq·Nk·d·B·H (/2 causal); see the module docstring for where it is exact."""
    flops = 4.0 * batch * heads * n_q * n_k * d
    return flops / 2 if causal else flops


def seen_rows(n_q: int, n_k: int, causal: bool = False) -> int:
    """Query rows that see at least one key: all of them, or under the bottom-right causal mask the last
    min(Nq, Nk) (row i sees key 0 iff i + Nk - Nq >= 0)."""
    return min(n_q, n_k) if causal else n_q


def min_hbm_bytes(batch: int, heads: int, n_q: int, n_k: int, d: int, itemsize: int, causal: bool = False) -> int:
    """Q read once for the rows that see a key (seen_rows), K and V read once, O and lse written once."""
    per_head = ((seen_rows(n_q, n_k, causal) + n_q) * d + 2 * n_k * d) * itemsize + 4 * n_q
    return batch * heads * per_head
