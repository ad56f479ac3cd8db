"""Standard attention (FlashAttention paper, Algorithm 0), written against the memory model.

Three passes, each a separate kernel in a real implementation, with S and P materialised in HBM:
    FA1 Alg. 0 line 1: S = scale·Q Kᵀ, tiled Br x Bc; every tile of S is written (a causal mask still
            materialises all Nq·Nk entries: hidden tiles are written as -inf, without computing them)
    FA1 Alg. 0 line 2: P = softmax(S), row by row: S read in full, P written in full, lse written
    FA1 Alg. 0 line 3: O = P V, tiled: for each Q block, the visited P tiles and their V blocks are read

HBM traffic per (batch, head), non-causal, Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉:
    pass 1 reads Q: Tc·Nq·d, K: Tr·Nk·d; writes S: Nq·Nk
    pass 2 reads S: Nq·Nk;  writes P: Nq·Nk, lse: Nq (float32)
    pass 3 reads P: Nq·Nk, V: Tr·Nk·d; writes O: Nq·d
so the traffic grows as Nq·Nk whatever the SRAM: FA1 Theorem 2's Θ(Nd + N²).

Low precision (fp16, bf16): S and P live in HBM in the input dtype, as in any unfused attention, so
scores beyond the dtype's range overflow to ±inf there (fp16: |S| > 65504; o and lse become NaN, or a
row whose scores all lie below -65504 reads as seeing no key: o = 0, lse = -inf), and large scores are
rounded coarsely (bf16 at |S| ~ 1e4: ulp 64, probabilities off by factors of e^32). FA1, FA2 and
v_once keep S in float32 on chip and are right on the same inputs. This behaviour is kept (it is what
unfused attention does) and reported by a ScoreRangeWarning, under this rule: naive answers for
|o - o_ref| <= OUTPUT_TOLERANCE[dtype]·max(1, max|v|) (fp16 2e-2, bf16 8e-2: the fuzz's tolerance), and
warns whenever S overflows the dtype or its rounding can move o by more than that. Rounding every
score by up to δ (half an ulp of max|S|) moves the softmax weights by at most 2·tanh(δ/2) in L1, so o
by at most 2·tanh(δ/2)·max|v|; the warning fires from the power of two where that bound first passes
the tolerance, score_limit(dtype): fp16 |S| >= 64 (δ = 1/32), bf16 |S| >= 32 (δ = 1/8). Below it the
bound (fp16 1/64, bf16 1/16) leaves the rest of the tolerance to the rounding of P itself. It is a
warning, not an error, so the NaN can be shown (notebook 01); escalate it with
warnings.simplefilter("error", ScoreRangeWarning). Meta tensors (counting only) are not checked.

Caveats: pass 2 is modelled as one row per step (rows are independent; a softmax kernel holds one
row on chip), so its working set is one float32 row of Nk; this code batches Br rows per step only
to run faster in PyTorch, which moves the same bytes. Pass 3 skips P tiles the mask hides (zeros).
"""
from __future__ import annotations

import math
import warnings

import torch

from counting import sram as _sram
from counting.memory import compute_dtype, resolve
from variants._common import (NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores, reference,
                              safe_div)


class ScoreRangeWarning(RuntimeWarning):
    """naive's S, held in HBM in a half type, overflowed or was rounded by 1 or more."""


# |o - o_ref| / max(1, max|v|) naive answers for in a half type without a ScoreRangeWarning
OUTPUT_TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 8e-2}


def rounding_bound(dtype: torch.dtype, max_abs: float) -> float:
    """How far rounding S to `dtype` can move o, in units of max|v|: 2·tanh(δ/2), δ = half an ulp of max_abs
    (every weight p_j moves by a factor e^{±δ} before renormalising: the L1 move is at most 2·tanh(δ/2))."""
    half_ulp = math.ldexp(torch.finfo(dtype).eps / 2, math.frexp(max_abs)[1] - 1) if max_abs > 0 else 0.0
    return 2 * math.tanh(half_ulp / 2)


def score_limit(dtype: torch.dtype) -> float | None:
    """|S| from which rounding S to `dtype` can move o by more than OUTPUT_TOLERANCE[dtype] (a power of two:
    fp16 64, bf16 32); None for float32 and float64 (the fused variants compute S in float32 too)."""
    if dtype in (torch.float32, torch.float64):
        return None
    limit = 1.0
    while rounding_bound(dtype, limit) <= OUTPUT_TOLERANCE[dtype]:
        limit *= 2
    return limit


def _score_warning(dtype: torch.dtype, max_abs: float, overflowed: bool) -> str | None:
    """The message naive warns with, or None when its HBM S holds the scores faithfully."""
    limit = score_limit(dtype)
    if limit is None or (not overflowed and max_abs < limit):
        return None
    name = str(dtype).replace("torch.", "")
    fused = "FA1, FA2 and v_once keep S in float32 on chip and are unaffected"
    if overflowed:
        return (f"naive: scores reach |S| = {max_abs:.3g}, beyond {name}'s largest finite "
                f"{torch.finfo(dtype).max:g}: S overflows to ±inf in HBM, so o and lse are NaN or a row "
                f"reads as seeing no key (o = 0, lse = -inf). {fused}; use float32 inputs or a smaller "
                "scale for naive")
    half_ulp = math.ldexp(torch.finfo(dtype).eps / 2, math.frexp(max_abs)[1] - 1)
    return (f"naive: scores reach |S| = {max_abs:.3g}; S rounded to {name} in HBM errs by up to "
            f"{half_ulp:g} there, so probabilities can be off by a factor of e^{2 * half_ulp:g} and o by up to "
            f"{rounding_bound(dtype, max_abs):.3g}·max|v| (from |S| = {limit:g} on that passes naive's {name} "
            f"tolerance {OUTPUT_TOLERANCE[dtype]:g}). {fused}")


# the working set lives in counting.sram (torch-free: the report path imports it)
sram_bytes = _sram.naive_sram_bytes


@reference
def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None, saved=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                     scores_in_hbm=True)  # S and P (B, H, Nq, Nk) must be indexable
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"naive working set (Br={t.block_q}, Bc={t.block_k}, d={p.d}, Nk={p.n_k})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    scores = (p.batch, p.heads, p.n_q, p.n_k)
    S = torch.empty(scores, dtype=q.dtype, device=q.device)  # in HBM, input dtype
    P = torch.empty(scores, dtype=q.dtype, device=q.device)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)

    # FA1 Alg. 0 line 1: load Q, K by blocks, compute S = scale·Q Kᵀ, write S to HBM
    watch = q.device.type != "meta" and score_limit(q.dtype) is not None
    max_abs = overflow = torch.zeros((), device=q.device)  # |S| reached, and S lost to ±inf in HBM
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        visited = t.k_blocks(i)
        for j in range(t.t_c):
            c0, c1 = t.cols(j)
            if j in visited:
                Qi = mem.load("Q", q[..., r0:r1, :])  # re-read for every tile: Tc·Nq·d in all
                Kj = mem.load("K", k[..., c0:c1, :])  # Tr·Nk·d in all
                Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            else:  # hidden by the causal mask: written, not computed
                Sij = torch.full((p.batch, p.heads, r1 - r0, c1 - c0), NEG_INF, device=q.device)
            mem.store("S", S[..., r0:r1, c0:c1], Sij)
            if watch and j in visited:  # bookkeeping, not counted: the overflow is not a kernel step
                s_ij = Sij.detach()
                finite = torch.isfinite(s_ij)
                max_abs = torch.maximum(max_abs, torch.where(finite, s_ij.abs(), 0).amax())
                overflow = overflow + (finite & torch.isinf(S[..., r0:r1, c0:c1])).sum()
    if watch:
        message = _score_warning(q.dtype, max_abs.item(), overflow.item() > 0)
        if message:
            warnings.warn(ScoreRangeWarning(message), stacklevel=2)

    # FA1 Alg. 0 line 2: read S, compute P = softmax(S) row by row, write P (and lse) to HBM
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Si = mem.load("S", S[..., r0:r1, :])  # (B, H, r, Nk)
        mi = mem.rowmax(Si)
        Pi = mem.exp(mem.ew(Si - finite_or_zero(mi)))
        li = mem.rowsum(Pi)
        mem.store("P", P[..., r0:r1, :], mem.ew(safe_div(Pi, li)))
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li).squeeze(-1))

    # FA1 Alg. 0 line 3: load P and V by blocks, compute O = P V, write O to HBM
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Oi = torch.zeros(p.batch, p.heads, r1 - r0, p.d, device=q.device)
        for j in t.k_blocks(i):
            c0, c1 = t.cols(j)
            Pij = mem.load("P", P[..., r0:r1, c0:c1])
            Vj = mem.load("V", v[..., c0:c1, :])
            Oi = mem.ew(Oi + mem.matmul(Pij, Vj))
        mem.store("O", o[..., r0:r1, :], Oi)
    if saved is not None:  # what the backward reads (Algorithm 3): P stays in HBM
        saved["P"] = P
    return o, lse  # FA1 Alg. 0 line 4


# -- backward --------------------------------------------------------------------------------------
# Standard attention's backward (FlashAttention paper, Algorithm 3), against the memory model.
#
# Unfused: five passes, each a kernel, with P (kept by the forward), dP and dS all Nq x Nk in HBM:
#     FA1 Alg. 3 line 1: dV = Pᵀ dO    P tiles and dO blocks read; dV written         (K/V block outer)
#     FA1 Alg. 3 line 2: dP = dO Vᵀ    dO, V read by blocks; every tile of dP written (hidden tiles as zeros)
#     FA1 Alg. 3 line 3: dS = P ∘ (dP - rowsum(P ∘ dP)), row by row: P, dP read in full, dS written in full
#     FA1 Alg. 3 line 4: dQ = τ dS K   visited dS tiles and K blocks read; dQ written  (Q block outer)
#     FA1 Alg. 3 line 5: dK = τ dSᵀ Q  visited dS tiles and Q blocks read; dK written  (K/V block outer)
# Nothing is recomputed - no exponentials at all - but P, dP and dS cost Θ(Nq·Nk) bytes each way.
#
# P: the probabilities the forward stored (`forward(..., saved=d)` puts them in d["P"]). Called with
# the uniform signature and no P, they are rebuilt outside the memory model, standing in for the
# forward's tensor; the counts are the same. o and lse are not read (they may be None).
from counting.backward_forms import naive_backward_sram_bytes as backward_sram_bytes  # noqa: E402
from variants._common import check_backward_inputs, check_saved  # noqa: E402


def _rebuild_p(q, k, p):
    """P = softmax(S) in the input dtype, as FA1 Alg. 0 line 2 left it in HBM (uncounted).

    Normalised by its own row sum, like the forward's, not exp(S - L): L is rounded to float32, and
    at scores ~1e4 exp(S - L) misses 1 by ~1e-3, which rowsum(P ∘ dP) (FA1 Alg. 3 line 3) would turn into a
    wrong dS; FA2's D = rowsum(dO ∘ O) does not care (notebook 07)."""
    acc = compute_dtype(q.dtype)  # rebuilt outside the memory model, in the type a load gives
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * p.scale
    if p.tiling.causal:
        rows = torch.arange(p.n_q, device=q.device).unsqueeze(-1)
        s = s.masked_fill(torch.arange(p.n_k, device=q.device) > rows + p.tiling.offset, NEG_INF)
    e = torch.exp(s - finite_or_zero(s.amax(dim=-1, keepdim=True)))
    return safe_div(e, e.sum(dim=-1, keepdim=True)).to(q.dtype)


@reference
def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=64, block_k=64, mem=None,
             P=None):
    p = check_backward_inputs(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k, need_o=False, need_lse=False, scores_in_hbm=True)
    mem, t = resolve(mem), p.tiling
    scores = (p.batch, p.heads, p.n_q, p.n_k)
    if P is None:
        P = _rebuild_p(q, k, p)
    check_saved("P", P, scores, q.dtype, q.device)
    mem.require_sram(f"naive backward working set (Br={t.block_q}, Bc={t.block_k}, d={p.d}, Nk={p.n_k})",
                     backward_sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    dP = torch.empty(scores, dtype=q.dtype, device=q.device)  # in HBM, input dtype
    dS = torch.empty(scores, dtype=q.dtype, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    # FA1 Alg. 3 line 1: load P and dO by blocks, dV = Pᵀ dO, write dV (hidden P tiles are zeros: skipped)
    for j in range(t.t_c):
        c0, c1 = t.cols(j)
        dVj = torch.zeros(p.batch, p.heads, c1 - c0, p.d, device=q.device)
        for i in t.q_blocks(j):
            r0, r1 = t.rows(i)
            Pij = mem.load("P", P[..., r0:r1, c0:c1])
            dOi = mem.load("dO", do[..., r0:r1, :])
            dVj = mem.ew(dVj + mem.matmul(Pij.transpose(-1, -2), dOi))
        mem.store("dV", dv[..., c0:c1, :], dVj)

    # FA1 Alg. 3 line 2: load dO and V by blocks, dP = dO Vᵀ, write dP (hidden tiles written as 0, not computed)
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        visited = t.k_blocks(i)
        for j in range(t.t_c):
            c0, c1 = t.cols(j)
            if j in visited:
                dOi = mem.load("dO", do[..., r0:r1, :])
                Vj = mem.load("V", v[..., c0:c1, :])
                dPij = mem.matmul(dOi, Vj.transpose(-1, -2))
            else:
                dPij = torch.zeros(p.batch, p.heads, r1 - r0, c1 - c0, device=q.device)
            mem.store("dP", dP[..., r0:r1, c0:c1], dPij)

    # FA1 Alg. 3 line 3: read P and dP row by row, dS = P ∘ (dP - rowsum(P ∘ dP)), write dS
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Pi = mem.load("P", P[..., r0:r1, :])  # (B, H, r, Nk)
        dPi = mem.load("dP", dP[..., r0:r1, :])
        Di = mem.rowsum(mem.ew(Pi * dPi))  # = rowsum(dO ∘ O), computed the long way
        mem.store("dS", dS[..., r0:r1, :], mem.ew(Pi * mem.ew(dPi - Di)))

    # FA1 Alg. 3 line 4: load dS and K by blocks, dQ = τ dS K, write dQ
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        dQi = torch.zeros(p.batch, p.heads, r1 - r0, p.d, device=q.device)
        for j in t.k_blocks(i):
            c0, c1 = t.cols(j)
            dSij = mem.load("dS", dS[..., r0:r1, c0:c1])
            Kj = mem.load("K", k[..., c0:c1, :])
            dQi = mem.ew(dQi + mem.matmul(dSij, Kj))
        mem.store("dQ", dq[..., r0:r1, :], mem.ew(dQi * p.scale))

    # FA1 Alg. 3 line 5: load dS and Q by blocks, dK = τ dSᵀ Q, write dK
    for j in range(t.t_c):
        c0, c1 = t.cols(j)
        dKj = torch.zeros(p.batch, p.heads, c1 - c0, p.d, device=q.device)
        for i in t.q_blocks(j):
            r0, r1 = t.rows(i)
            dSij = mem.load("dS", dS[..., r0:r1, c0:c1])
            Qi = mem.load("Q", q[..., r0:r1, :])
            dKj = mem.ew(dKj + mem.matmul(dSij.transpose(-1, -2), Qi))
        mem.store("dK", dk[..., c0:c1, :], mem.ew(dKj * p.scale))
    return dq, dk, dv  # FA1 Alg. 3 line 6
