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
    """(dq, dk, dv) of softmax attention in float64 by torch.autograd: the tests' one autograd oracle (rows that see no
    key: o = 0; K/V of H_kv heads dividing H repeat_interleave'd inside the graph, so dK, dV come back summed over each
    group). variants.reference.backward_reference, the formula oracle of the kernels' GPU checks, is held equal to it
    (tests/test_reference_backward.py)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    rep = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = scale * (q64 @ k64.repeat_interleave(rep, 1).transpose(-1, -2))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    seen = torch.isfinite(lse)
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse, torch.zeros_like(lse))),
                    torch.zeros_like(s))
    (p @ v64.repeat_interleave(rep, 1)).backward(do.double())
    return q64.grad, k64.grad, v64.grad


def grad_error(g, ref) -> float:
    return (g.double() - ref).abs().max().item() / max(1.0, ref.abs().max().item())


def _round(x, dtype):
    return x.to(dtype).double()


def rounding_floor(name, q, k, v, do, o, *, causal=False, scale=None, block_k=None) -> dict:
    """The error of each gradient that the variant's own roundings make unavoidable, in grad_error units.

    The backward of every variant subtracts two close numbers, dS = P ∘ (dP - D), so a rounding of
    what it reads comes out of dq and dk amplified by the cancellation (most where P is peaked):
      fa2, v_once, fa1: D = rowsum(dO ∘ O) from the forward's O, rounded to the input dtype;
      naive: S (its forward's, FA1 Alg. 0 line 1), P, dP and dS stored in HBM in the input dtype
             (FA1 Alg. 3 lines 1-3);
      fa1 also accumulates dQ in the input dtype, rounded once per visited key block (FA1 Alg. 4 line 21).
    Computed in float64 with exactly those roundings and nothing else; the test then allows a multiple of it.
    """
    dt = q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    ref = reference_grads(q, k, v, do, causal=causal, scale=scale)
    if dt in (torch.float32, torch.float64):
        return {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    q64, k64, v64, do64 = (t.double() for t in (q, k, v, do))
    s = scale * (q64 @ k64.transpose(-1, -2))
    if name == "naive":
        s = _round(s, dt)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    seen = torch.isfinite(lse)
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse, torch.zeros_like(lse))), torch.zeros_like(s))
    dp = do64 @ v64.transpose(-1, -2)
    if name == "naive":
        p, dp = _round(p, dt), _round(dp, dt)
        ds = _round(p * (dp - (p * dp).sum(-1, keepdim=True)), dt)
    else:
        d_row = (do64 * _round(o, dt)).sum(-1, keepdim=True)
        ds = p * (dp - d_row)
    got = (scale * ds @ k64, scale * ds.transpose(-1, -2) @ q64, p.transpose(-1, -2) @ do64)
    floor = {w: grad_error(g, r) for w, g, r in zip(("dq", "dk", "dv"), got, ref)}
    if name == "fa1" and block_k:  # dQ rounded to the input dtype after each of the Tc visited key blocks
        u = 2.0 ** -11 if dt == torch.float16 else 2.0 ** -8
        floor["dq"] += math.ceil(k.shape[-2] / block_k) * u
    return floor


class LaunchRecorder:
    """Stands in for loader.get_function: records each launch (source, kernel name, defines, grid, args)."""

    def __init__(self):
        self.launches = []

    def __call__(self, source, name, *, defines, arch, device):
        rec = self

        class K:
            def launch(self, grid, block, args, shared_mem=0):
                rec.launches.append(dict(source=str(source), name=name, defines=defines, grid=grid, block=block,
                                         args=args, shared_mem=shared_mem))
        return K()
