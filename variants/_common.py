"""Input checks and helpers shared by the four references (one signature everywhere)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis import checks
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


def check_inputs(q, k, v, *, causal, scale, block_q, block_k) -> Problem:
    """Raise a clear error naming the problem, or return the problem's shapes (analysis.checks: the
    same rules and messages as the closed forms and the CUDA launchers)."""
    b, h, n_q, n_k, d = checks.check_tensors(q, k, v, dtypes=SUPPORTED_DTYPES)
    pr = checks.check_problem(b, h, n_q, n_k, d, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k)
    return Problem(b, h, n_q, n_k, d, pr["scale"], q.dtype,
                   Tiling(n_q, n_k, pr["block_q"], pr["block_k"], pr["causal"]))


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
