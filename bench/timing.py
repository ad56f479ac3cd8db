"""CUDA-event timing shared by every benchmark script (GPU only; imported lazily).

Method (../.library METHOD.md): warm up, then time each call with CUDA events and take the median;
rotate among several input sets whose total size is several times the L2 (60 MB on an H200) so
repeated calls do not measure the cache.
"""
from __future__ import annotations

import statistics


def make_input_sets(shape_q, shape_kv, dtype, *, min_total_bytes=512 * 2**20, max_sets=16,
                    scale=1.0, seed=0, device="cuda"):
    """Enough independent random (q, k, v) sets to exceed min_total_bytes (at least 2)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    one = (2 * _numel(shape_q) + 2 * _numel(shape_kv)) * torch.empty((), dtype=dtype).element_size()
    n = max(2, min(max_sets, -(-min_total_bytes // max(one, 1))))
    sets = []
    for _ in range(n):
        q = (torch.randn(shape_q, generator=gen, device=device) * scale).to(dtype)
        k = (torch.randn(shape_kv, generator=gen, device=device) * scale).to(dtype)
        v = torch.randn(shape_kv, generator=gen, device=device).to(dtype)
        sets.append((q, k, v))
    return sets


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def time_cuda(fn, input_sets, *, warmup=3, reps=20):
    """Median/min/max milliseconds of fn(*input_sets[r % len]) over reps CUDA-event-timed calls."""
    import torch

    for r in range(warmup):
        fn(*input_sets[r % len(input_sets)])
    torch.cuda.synchronize()
    times = []
    for r in range(reps):
        args = input_sets[r % len(input_sets)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "reps": reps}
