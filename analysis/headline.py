"""Headline figures that benchmarks and reports quote beside the exact counts.

paper_flops: the papers' 4·Nq·Nk·d per (batch, head) (two products of 2·Nq·Nk·d), halved when causal,
as FlashAttention's benchmarks report TFLOP/s. min_hbm_bytes: each input read once and each output
written once: (Nq·d + 2·Nk·d + Nq·d)·itemsize + 4·Nq bytes of lse, per (batch, head).
"""
from __future__ import annotations


def paper_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> float:
    flops = 4.0 * batch * heads * n_q * n_k * d
    return flops / 2 if causal else flops


def min_hbm_bytes(batch: int, heads: int, n_q: int, n_k: int, d: int, itemsize: int) -> int:
    per_head = (2 * n_q * d + 2 * n_k * d) * itemsize + 4 * n_q
    return batch * heads * per_head
