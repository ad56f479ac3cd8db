"""Input checks and helpers shared by the four references (one signature everywhere)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from analysis.tiling import Tiling

# float64 is for torch.autograd.gradcheck: it computes in float64 (analysis.memory.Memory.load)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
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
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16, float64")
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


def check_backward_inputs(q, k, v, o, lse, do, *, causal, scale, block_q, block_k,
                          need_o=True, need_lse=True) -> Problem:
    """check_inputs, then o and do (B, H, Nq, d) in q's dtype and lse (B, H, Nq) float32.

    need_o / need_lse False: that tensor may be None (naive reads P instead of O and lse; fa1 may be
    handed ℓ and m instead of lse); when given it is still checked."""
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    want = (p.batch, p.heads, p.n_q, p.d)
    for name, t, shape, dtype, needed in (("o", o, want, q.dtype, need_o),
                                          ("do", do, want, q.dtype, True),
                                          ("lse", lse, want[:3], torch.float32, need_lse)):
        if t is None and not needed:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} to match q {tuple(q.shape)} and "
                             f"k {tuple(k.shape)}, got {tuple(t.shape)}")
        if t.dtype != dtype:
            raise TypeError(f"{name} must have dtype {dtype} (q is {q.dtype}), got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
    return p


def check_saved(name: str, t, shape, dtype, device) -> None:
    """A tensor the forward saved (naive's P, fa1's ℓ and m): shape and dtype, one clear line."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype or t.device != device:
        raise ValueError(f"{name} must be a {dtype} tensor of shape {tuple(shape)} on {device}, "
                         f"got {t.dtype} {tuple(t.shape)} on {t.device}")
