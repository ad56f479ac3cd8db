"""Input checks and helpers shared by the four references (one signature everywhere)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from analysis.tiling import Tiling

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
F32 = 4  # bytes of a float32 on chip (S tiles, accumulators, l, m)
NEG_INF = float("-inf")


@dataclass(frozen=True)
class Problem:
    """Validated shapes of one call: q (B, H, Nq, d); k, v (B, H, Nk, d)."""

    batch: int
    heads: int
    n_q: int
    n_k: int
    d: int
    scale: float
    dtype: torch.dtype
    tiling: Tiling

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_inputs(q, k, v, *, causal, scale, block_q, block_k) -> Problem:
    """Raise a clear error naming the problem, or return the problem's shapes."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    (b, h, n_q, d), (bk, hk, n_k, dk), (bv, hv, n_v, dv) = q.shape, k.shape, v.shape
    if not (b == bk == bv):
        raise ValueError(f"batch mismatch: q has {b}, k has {bk}, v has {bv}")
    if not (h == hk == hv):
        raise ValueError(f"heads mismatch: q has {h}, k has {hk}, v has {hv}")
    if not (d == dk == dv):
        raise ValueError(f"head dim d mismatch: q has {d}, k has {dk}, v has {dv}")
    if n_k != n_v:
        raise ValueError(f"k and v must have the same sequence length, got {n_k} and {n_v}")
    if min(b, h, n_q, n_k, d) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    _positive_int("block_q", block_q)
    _positive_int("block_k", block_k)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    return Problem(b, h, n_q, n_k, d, float(scale), q.dtype,
                   Tiling(n_q, n_k, block_q, block_k, causal))


def causal_tile_mask(tiling: Tiling, i: int, j: int, device) -> torch.Tensor:
    """(r, c) bool, True where tile (i, j)'s query row may see its key column."""
    r0, r1 = tiling.rows(i)
    c0, c1 = tiling.cols(j)
    rows = torch.arange(r0, r1, device=device).unsqueeze(-1)
    cols = torch.arange(c0, c1, device=device).unsqueeze(0)
    return cols <= rows + tiling.offset


def mask_scores(tiling: Tiling, i: int, j: int, s: torch.Tensor) -> torch.Tensor:
    """Hide the entries of a partially masked tile with -inf (a select: no FLOPs)."""
    if not tiling.needs_mask(i, j):
        return s
    return s.masked_fill(~causal_tile_mask(tiling, i, j, s.device), NEG_INF)


def finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    """Guard for rows whose max is -inf (they see no key yet): use 0 so exp(-inf - 0) = 0, not NaN."""
    return torch.where(m == NEG_INF, torch.zeros_like(m), m)


def safe_div(x: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """x / l, with rows of l == 0 (no visible key) giving 0 instead of NaN."""
    return x / torch.where(l == 0, torch.ones_like(l), l)


def log_sum_exp(mem, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """lse = m + log(l) (FA2 Alg. 1 line 13); -inf for rows that saw no key."""
    return mem.ew(m + mem.log(l))
