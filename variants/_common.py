"""Input checks and helpers shared by the four references (one signature everywhere)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from counting import checks
from counting.memory import compute_dtype
from counting.tiling import Tiling

# float64 is for torch.autograd.gradcheck: it computes in float64 (counting.memory.Memory.load)
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


def check_inputs(q, k, v, *, causal, scale, block_q, block_k, scores_in_hbm=False) -> Problem:
    """Raise a clear error naming the problem, or return the problem's shapes (counting.checks: the
    same rules and messages as the closed forms and the CUDA launchers)."""
    b, h, n_q, n_k, d = checks.check_tensors(q, k, v, dtypes=SUPPORTED_DTYPES)
    pr = checks.check_problem(b, h, n_q, n_k, d, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k, scores_in_hbm=scores_in_hbm)
    check_score_range(q, k, pr["scale"], pr["causal"])
    return Problem(b, h, n_q, n_k, d, pr["scale"], q.dtype,
                   Tiling(n_q, n_k, pr["block_q"], pr["block_k"], pr["causal"]))


def _times(a: float, b: float) -> str:
    """a·b printed with 3 digits, even past float64's range (1e308 × 2)."""
    x = a * b
    if math.isfinite(x) or a == 0 or b == 0:
        return f"{x:.3g}"
    e = math.log10(a) + math.log10(b)
    return f"{10 ** (e - math.floor(e)):.3g}e+{math.floor(e)}"


def check_score_range(q, k, scale: float, causal: bool = False) -> None:
    """Refuse finite inputs whose scores are not finite where the variants compute them: every variant
    (and kernel) computes S = (Q Kᵀ)·scale in float32 (float64 for float64 inputs, counting.memory), so
    a visible product q·k or score scale·q·k beyond that type's largest finite is ±inf there and the row's
    o and lse NaN; and lse is float32 whatever the inputs, so a row's largest visible score must fit float32
    too (a float64 row at -1e300 would read as seeing no key). Half inputs cannot get there (65504² · d is
    far below float32's max); bf16/fp32 inputs of magnitude ~1e19, or a scale near the float limits (1e308
    with unit q and k), can. Scores the causal mask hides do not count (a tile computes and then hides them).
    Cheap first: |q_r·k_c| <= |q_r| |k_c|; only when that bound is out of range are the products
    themselves computed (float64, a block of rows at a time). NaN or inf inputs are the caller's.
    A scale itself beyond the compute type's range is refused outright, whatever q and k: the variants
    multiply S by it in that type, where it is inf (and a zero product times inf is NaN)."""
    acc = compute_dtype(q.dtype)
    limit, lse_limit = torch.finfo(acc).max, torch.finfo(torch.float32).max
    name = str(acc).replace("torch.", "")
    if abs(scale) > limit:  # S·scale multiplies by the scale in the compute type: inf there, so 0·inf = NaN
        raise ValueError(f"scale {scale:.3g} is beyond {name}'s largest finite {limit:.3g}: every variant and kernel "
                         f"applies it in {name}, where it is inf (a zero score would be NaN); use a smaller scale")
    if q.device.type == "meta" or q.numel() == 0 or k.numel() == 0:
        return
    qn = torch.linalg.vector_norm(q.double(), dim=-1).amax().item()
    kn = torch.linalg.vector_norm(k.double(), dim=-1).amax().item()
    bound = qn * kn  # inf when it overflows float64 itself
    if not (bound > limit or abs(scale) * bound > lse_limit):  # also False for NaN inputs
        return
    if not (torch.isfinite(q).all() and torch.isfinite(k).all()):
        return
    n_q, n_k = q.shape[-2], k.shape[-2]
    k64, top, row_top = k.double().transpose(-1, -2), 0.0, 0.0
    for r0 in range(0, n_q, 256):
        qk = q[..., r0:r0 + 256, :].double() @ k64  # ±inf: past float64
        if causal:
            rows = torch.arange(r0, r0 + qk.shape[-2]).unsqueeze(-1) + (n_k - n_q)
            qk = qk.masked_fill(torch.arange(n_k) > rows, float("nan"))
        top = max(top, torch.nan_to_num(qk.abs(), nan=0.0).amax().item())
        if math.isfinite(abs(scale) * top):  # each row's largest visible score (where lse sits)
            m = torch.nan_to_num(qk * scale, nan=-math.inf).amax(dim=-1)
            row_top = max(row_top, m[torch.isfinite(m)].abs().amax().item() if torch.isfinite(m).any() else 0.0)
    where = "every variant and kernel" if acc == torch.float32 else "every variant (float64 inputs)"
    if top > limit:
        raise ValueError(f"products q·k reach {top:.3g}, beyond {name}'s largest finite {limit:.3g}: {where} "
                         f"computes S = (Q Kᵀ)·scale in {name}, so o would be NaN; scale q or k down")
    if abs(scale) * top > limit:
        raise ValueError(f"scores reach |scale·q·k| = {_times(abs(scale), top)}, beyond {name}'s largest finite "
                         f"{limit:.3g}: S is {name} in {where}, so o would be NaN; use a smaller scale or "
                         "scale q or k down")
    if row_top > lse_limit:
        raise ValueError(f"a row's largest score has magnitude {row_top:.3g}, beyond float32's largest finite "
                         f"{lse_limit:.3g}: lse is float32 in every variant, so it would be ±inf; use a smaller "
                         "scale or scale q or k down")


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
                          need_o=True, need_lse=True, scores_in_hbm=False) -> Problem:
    """check_inputs, then o and do (B, H, Nq, d) in q's dtype and lse (B, H, Nq) float32.

    need_o / need_lse False: that tensor may be None (naive reads P instead of O and lse; fa1 may be
    handed ℓ and m instead of lse); when given it is still checked."""
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                     scores_in_hbm=scores_in_hbm)
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


def reference(fn):
    """A reference's forward or backward: its outputs carry no autograd graph. The references are
    differentiated by their own backward through variants.attention, never by autograd through their
    loops (fa1 updates O in place, so such a graph could not even be walked back)."""
    return torch.no_grad()(fn)
