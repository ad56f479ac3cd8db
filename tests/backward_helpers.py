"""The float64 autograd oracle for gradients, and the per-dtype tolerances of the backward tests."""
from __future__ import annotations

import math

import torch

from variants.reference import causal_mask

# max |g - g_ref| / max(1, max |g_ref|) per gradient, per input dtype, scores of order 1. Half types
# round dO, O and the outputs (all), P, dP, dS (naive) and fa1's dQ at every visited tile.
GRAD_TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2,
                  torch.float64: 1e-9}
# scores ~1e4: float32 S carries ~|S|·eps32 ≈ 1e-3 absolute error, which P = exp(S - L) passes on
LARGE_SCORE_GRAD_TOLERANCE = 3e-2


def reference_grads(q, k, v, do, *, causal=False, scale=None):
    """(dq, dk, dv) of softmax attention in float64 by torch.autograd (rows that see no key: o = 0)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = scale * (q64 @ k64.transpose(-1, -2))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    seen = torch.isfinite(lse)
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse, torch.zeros_like(lse))),
                    torch.zeros_like(s))
    (p @ v64).backward(do.double())
    return q64.grad, k64.grad, v64.grad


def grad_error(g, ref) -> float:
    return (g.double() - ref).abs().max().item() / max(1.0, ref.abs().max().item())
