"""The float64 oracle every variant and kernel is checked against.

Plain softmax attention computed in float64 on whatever device the inputs live on, with the
bottom-right causal mask of docs/design.md. Rows that see no key give o = 0 and lse = -inf.
"""
from __future__ import annotations

import math

import torch


def causal_mask(n_q: int, n_k: int, device=None) -> torch.Tensor:
    """(Nq, Nk) bool, True where query i may see key j: j <= i + Nk - Nq."""
    i = torch.arange(n_q, device=device).unsqueeze(-1)
    j = torch.arange(n_k, device=device).unsqueeze(0)
    return j <= i + (n_k - n_q)


def attention_reference(q, k, v, *, causal: bool = False, scale: float | None = None):
    """Return (o, lse) in float64: o (B, H, Nq, d), lse (B, H, Nq)."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q64, k64, v64 = q.double(), k.double(), v.double()
    s = scale * (q64 @ k64.transpose(-1, -2))  # (B, H, Nq, Nk)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H, Nq); -inf for rows that see nothing
    empty = torch.isneginf(lse).unsqueeze(-1)  # only these rows are o = 0: a NaN or inf input stays NaN
    # weights relative to the row max, normalised by their sum (not exp(s - lse): past |lse| ~ 1e16 float64
    # cannot hold lse's log(l) part, and every weight of a row of equal scores would read as 1)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    p = torch.where(empty, torch.zeros_like(p), p)
    l = p.sum(dim=-1, keepdim=True)  # noqa: E741  (>= 1 where the row sees a key)
    return (p @ v64) / torch.where(empty, torch.ones_like(l), l), lse


def backward_reference(q, k, v, do, *, causal: bool = False, scale: float | None = None, round_to=None):
    """float64 (dq, dk, dv) of softmax attention by FA2 Alg. 2's formulas: q, do (B, H, Nq, d), k, v (B, H_kv, Nk, d)
    with H_kv dividing H (K/V repeat_interleave'd to H heads, dK and dV summed back over each group); rows that see no
    key get o = 0 and zero gradients. round_to=dtype rounds O (for D), P and dS to that dtype, as any 16-bit kernel
    must: the rounding floor a kernel's error is compared with (tests/test_reference_backward.py holds it equal to
    autograd without rounding)."""
    rep = q.shape[1] // k.shape[1]
    q64, do64 = q.double(), do.double()
    k64, v64 = (t.double().repeat_interleave(rep, 1) for t in (k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q64 @ k64.transpose(-1, -2))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.where(torch.isfinite(lse), torch.exp(s - lse.nan_to_num(neginf=0.0)), torch.zeros_like(s))

    def r(t):
        return t if round_to is None else t.to(round_to).double()

    o = p @ v64
    dv = r(p).transpose(-1, -2) @ do64                     # FA2 Alg. 2 line 12
    dp = do64 @ v64.transpose(-1, -2)                      # FA2 Alg. 2 line 13
    dd = (do64 * r(o)).sum(-1, keepdim=True)               # FA2 Alg. 2 line 4
    ds = r(p * (dp - dd))                                  # FA2 Alg. 2 line 14
    dq, dk = scale * ds @ k64, scale * ds.transpose(-1, -2) @ q64   # FA2 Alg. 2 lines 15-16
    return dq, dk.unflatten(1, (k.shape[1], rep)).sum(2), dv.unflatten(1, (k.shape[1], rep)).sum(2)


FP32_DS = 2.0 ** -22  # relative rounding of dP - D in fp32: 4 units of fp32 roundoff (u = 2^-24) of the terms' magnitude


def fp32_ds_floor(q, k, v, do, *, causal, scale=None):
    """(dq, dk) error norms that fp32 rounding of dP - D alone can leave in a backward kernel (FA2 Alg. 2 lines
    13-14): FP32_DS x P |dO| |V|^T per dS element, root-sum-square through dq = scale dS K and dk = scale dS^T Q
    (dk summed over each query-head group; k, v may have H_kv heads dividing q's H). A float64 reference computes
    dP - D exactly, so where the exact dq, dk are 0 (one visible key: D = dP) this is the error a correct kernel
    still leaves; elsewhere it is orders below a 16-bit tolerance."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    rep = q.shape[1] // k.shape[1]
    q64, do64 = q.double(), do.double()
    k64, v64 = (t.double().repeat_interleave(rep, 1) for t in (k, v))
    s = scale * (q64 @ k64.transpose(-1, -2))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # rows that see no key: 0
    e2 = (FP32_DS * p * (do64.abs() @ v64.abs().transpose(-1, -2))) ** 2
    dq = scale * float((e2 @ k64 ** 2).sqrt().norm())
    dk = scale * float((e2.transpose(-1, -2) @ q64 ** 2).unflatten(1, (k.shape[1], rep)).sum(2).sqrt().norm())
    return dq, dk


def gather_cache(k, b: int, length: int, block_table=None):
    """Sequence b's first `length` cache positions, (H_kv, length, d): k[b, :, :length] of a contiguous cache, or
    k[block_table[b, t // page_size], :, t % page_size] for t < length of a paged one (counting/decode.py)."""
    if block_table is None:
        return k[b, :, :length]
    t = torch.arange(length, device=k.device)
    page_size = k.shape[2]
    return k[block_table[b, t // page_size].long(), :, t % page_size].transpose(0, 1)


def decode_reference(q, k, v, *, causal: bool = False, scale: float | None = None, cache_seqlens=None,
                     block_table=None):
    """The float64 oracle of split_kv over a KV cache: per sequence b, plain softmax over its gathered positions
    (L_b of them), each query head h reading kv head h // (H / H_kv); bottom-right causal per sequence. (o, lse)."""
    b_, h, n_q, d = q.shape
    h_kv = k.shape[1]
    lengths = [k.shape[2]] * b_ if cache_seqlens is None else [int(x) for x in cache_seqlens.tolist()]
    o = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.empty(b_, h, n_q, dtype=torch.float64, device=q.device)
    for b, length in enumerate(lengths):
        kb = gather_cache(k, b, length, block_table).repeat_interleave(h // h_kv, dim=0)
        vb = gather_cache(v, b, length, block_table).repeat_interleave(h // h_kv, dim=0)
        if length == 0:  # no position: every row sees nothing
            o[b], lse[b] = 0.0, float("-inf")
            continue
        o[b], lse[b] = attention_reference(q[b:b + 1], kb[None], vb[None], causal=causal, scale=scale)
    return o, lse
