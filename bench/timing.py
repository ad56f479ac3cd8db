"""Compatibility names for bench.harness's timing (notebooks and older scripts import these).

    make_input_sets(shape_q, shape_kv, dtype, ...)  -> rotating (q, k, v) sets over min_total_bytes
    time_cuda(fn, input_sets, warmup=3, reps=20)    -> median/min/max ms, per-call CUDA events

New code calls bench.harness (input_sets, time_fn, measure), which documents the one timing method.
"""
from __future__ import annotations


def make_input_sets(shape_q, shape_kv, dtype, *, min_total_bytes=512 * 2**20, max_sets=16,
                    scale=1.0, seed=0, device="cuda"):
    """Enough independent random (q, k, v) sets to exceed min_total_bytes (at least 2)."""
    import torch

    from bench.harness import random_qkv

    (b, h, n_q, d), n_k = shape_q, shape_kv[2]
    one = (2 * b * h * n_q * d + 2 * b * h * n_k * d) * torch.empty((), dtype=dtype).element_size()
    n = max(2, min(max_sets, -(-min_total_bytes // max(one, 1))))
    return [random_qkv(b, h, n_q, n_k, d, dtype, seed=seed + i, scale=scale, device=device) for i in range(n)]


def time_cuda(fn, input_sets, *, warmup=3, reps=20):
    """Median/min/max milliseconds of fn(*input_sets[r % len]) over reps CUDA-event-timed calls."""
    from bench.harness import time_events

    return time_events(fn, input_sets, warmup=warmup, reps=reps)
