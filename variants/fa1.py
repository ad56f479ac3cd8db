"""FlashAttention-1 forward (Dao et al. 2022, Algorithm 1 as printed), against the memory model.

The loop order is FA1's: the outer loop streams K_j, V_j (FA1 Alg. 1 line 5); the inner loop runs over
every query block Q_i (FA1 Alg. 1 line 7). The running output O and the statistics ℓ, m live in HBM and
make a round trip at every visited (j, i): read at FA1 Alg. 1 line 8, written back at
FA1 Alg. 1 lines 12-13. The running O is stored in the output dtype, as printed, so fp16/bf16 inputs
round it Tc times.

HBM traffic per (batch, head), non-causal:
    FA1 Alg. 1 line 2 writes O: Nq·d, ℓ: Nq, m: Nq (initialisation)
    reads  K, V: Nk·d each;  Q, O: Tc·Nq·d each;  ℓ, m: Tc·Nq each
    writes O: Tc·Nq·d;  ℓ, m: Tc·Nq each
    epilogue (not in Algorithm 1; the one signature returns lse): reads ℓ, m once, writes lse: Nq.
Causal: only the visited (j, i) move anything; hidden tiles are skipped.

Caveats: Algorithm 1 normalises O_i at every step (FA1 Alg. 1 line 12) - the extra divide per tile that FA2
removes. The block sizes default to 64 x 64 here; the paper's rule Bc = ⌈M/4d⌉, Br = min(Bc, d)
is applied by the report when it derives blocks from an SRAM size.
"""
from __future__ import annotations

import torch

from counting import sram as _sram
from counting.memory import resolve
from variants._common import (NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores,
                              reference, safe_div)


# the working set lives in counting.sram (torch-free: the report path imports it)
sram_bytes = _sram.fa1_sram_bytes


@reference
def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None, saved=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling  # FA1 Alg. 1 line 1: Br, Bc given (closed_forms.fa1_blocks: from M)
    mem.require_sram(f"fa1 working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    stats = (p.batch, p.heads, p.n_q)
    o = torch.empty_like(q)  # running O in HBM, output dtype
    l_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    m_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    lse = torch.empty(stats, dtype=torch.float32, device=q.device)

    # FA1 Alg. 1 line 2: initialise O = 0, ℓ = 0, m = -inf in HBM
    mem.store("O", o, torch.zeros_like(o))
    mem.store("l", l_hbm, torch.zeros_like(l_hbm))
    mem.store("m", m_hbm, torch.full_like(m_hbm, NEG_INF))

    for j in range(t.t_c):  # FA1 Alg. 1 line 5: for 1 <= j <= Tc
        c0, c1 = t.cols(j)
        Kj = mem.load("K", k[..., c0:c1, :])  # FA1 Alg. 1 line 6: (B, H, c, d)
        Vj = mem.load("V", v[..., c0:c1, :])
        for i in t.q_blocks(j):  # FA1 Alg. 1 line 7: for 1 <= i <= Tr (blocks the mask hides are skipped)
            r0, r1 = t.rows(i)
            # FA1 Alg. 1 line 8: load Q_i, O_i, ℓ_i, m_i from HBM
            Qi = mem.load("Q", q[..., r0:r1, :])  # (B, H, r, d)
            Oi = mem.load("O", o[..., r0:r1, :])
            li = mem.load("l", l_hbm[..., r0:r1]).unsqueeze(-1)  # (B, H, r, 1)
            mi = mem.load("m", m_hbm[..., r0:r1]).unsqueeze(-1)
            # FA1 Alg. 1 line 9: S_ij = Q_i K_j^T (scaled), (B, H, r, c)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # FA1 Alg. 1 line 10: m~_ij = rowmax(S_ij), P~_ij = exp(S_ij - m~_ij), ℓ~_ij = rowsum(P~_ij)
            m_tilde = mem.rowmax(Sij)
            P_tilde = mem.exp(mem.ew(Sij - finite_or_zero(m_tilde)))
            l_tilde = mem.rowsum(P_tilde)
            # FA1 Alg. 1 line 11: m_i^new = max(m_i, m~_ij), ℓ_i^new = e^{m_i - m_i^new} ℓ_i + e^{m~_ij - m_i^new} ℓ~_ij
            mi_new = mem.ew(torch.maximum(mi, m_tilde))
            m_safe = finite_or_zero(mi_new)
            alpha = mem.exp(mem.ew(mi - m_safe))  # e^{m_i - m_i^new}
            beta = mem.exp(mem.ew(m_tilde - m_safe))  # e^{m~_ij - m_i^new}
            li_new = mem.ew(mem.ew(alpha * li) + mem.ew(beta * l_tilde))
            # FA1 Alg. 1 line 12:
            #   O_i <- diag(ℓ_i^new)^-1 (diag(ℓ_i) e^{m_i - m_i^new} O_i + e^{m~_ij - m_i^new} P~_ij V_j)
            carried = mem.ew(mem.ew(li * alpha) * Oi)
            fresh = mem.ew(beta * mem.matmul(P_tilde, Vj))
            Oi = mem.ew(safe_div(mem.ew(carried + fresh), li_new))
            mem.store("O", o[..., r0:r1, :], Oi)
            # FA1 Alg. 1 line 13: write ℓ_i <- ℓ_i^new, m_i <- m_i^new to HBM
            mem.store("l", l_hbm[..., r0:r1], li_new.squeeze(-1))
            mem.store("m", m_hbm[..., r0:r1], mi_new.squeeze(-1))

    # epilogue (beyond FA1 Alg. 1 line 16): lse = m + log ℓ, one more pass over the statistics, block by block
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        li = mem.load("l", l_hbm[..., r0:r1])
        mi = mem.load("m", m_hbm[..., r0:r1])
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li))
    if saved is not None:  # what Algorithm 4 reads: the statistics ℓ, m stay in HBM
        saved["l"], saved["m"] = l_hbm, m_hbm
    return o, lse  # FA1 Alg. 1 line 16


# -- backward --------------------------------------------------------------------------------------
# FlashAttention-1 backward (Dao et al. 2022, Algorithm 4 as printed; no dropout), against the model.
#
# Recomputation, as FA2's: P_ij = diag(ℓ_i)^-1 exp(S_ij - m_i) is rebuilt from Q_i, K_j and the
# statistics ℓ, m the forward left in HBM (FA1 Alg. 4 line 13). The loop order is K/V outer (FA1 Alg. 4 line 6), like the
# forward's, and everything indexed by i makes a round trip per visited (j, i): FA1 Alg. 4 line 10 reads Q_i, O_i,
# dO_i, dQ_i, ℓ_i, m_i; FA1 Alg. 4 line 19 recomputes D_i = rowsum(dO_i ∘ O_i) every time (FA2 moves it out of
# the loop: FA2 Alg. 2 line 4); FA1 Alg. 4 line 21 writes dQ_i back. dQ lives in HBM in the input dtype, as
# FA1's forward keeps its running O, so fp16/bf16 round it Tc times (FA2 accumulates in float32).
#
# HBM traffic per (batch, head), non-causal (causal skips the hidden tiles):
#     FA1 Alg. 4 line 5   writes dQ: Nq·d, dK, dV: Nk·d each (zeros)
#     FA1 Alg. 4 line 7   reads K, V: Nk·d each
#     FA1 Alg. 4 line 10   reads Q, O, dO, dQ: Tc·Nq·d each;  ℓ, m: Tc·Nq each
#     FA1 Alg. 4 line 21  writes dQ: Tc·Nq·d
#     FA1 Alg. 4 line 24  writes dK, dV: Nk·d each
#
# ℓ, m: the statistics the forward stored (`forward(..., saved=d)` puts them in d["l"], d["m"]).
# With the uniform signature (lse only) ℓ = 1 and m = L stand in: exp(S - L) / 1 is the same P.
from counting.backward_forms import fa1_backward_sram_bytes as backward_sram_bytes  # noqa: E402
from variants._common import check_backward_inputs, check_saved  # noqa: E402


@reference
def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=64, block_k=64, mem=None,
             l=None, m=None):  # noqa: E741
    have_stats = l is not None or m is not None
    p = check_backward_inputs(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k, need_lse=not have_stats)
    stats = (p.batch, p.heads, p.n_q)
    if have_stats:
        check_saved("l", l, stats, torch.float32, q.device)
        check_saved("m", m, stats, torch.float32, q.device)
    else:
        l, m = torch.ones_like(lse), lse
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"fa1 backward working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     backward_sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    # FA1 Alg. 4 line 5: initialise dQ, dK, dV = 0 in HBM
    for name, t_hbm in (("dQ", dq), ("dK", dk), ("dV", dv)):
        mem.store(name, t_hbm, torch.zeros_like(t_hbm))

    for j in range(t.t_c):  # FA1 Alg. 4 line 6: for 1 <= j <= Tc
        c0, c1 = t.cols(j)
        visitors = t.q_blocks(j)  # never empty with the bottom-right mask (the last row sees all)
        if not len(visitors):
            continue  # dK_j = dV_j = 0 from FA1 Alg. 4 line 5
        Kj = mem.load("K", k[..., c0:c1, :])  # FA1 Alg. 4 line 7
        Vj = mem.load("V", v[..., c0:c1, :])
        dKj = torch.zeros(p.batch, p.heads, c1 - c0, p.d, device=q.device)  # FA1 Alg. 4 line 8: on chip
        dVj = torch.zeros_like(dKj)
        for i in visitors:  # FA1 Alg. 4 line 9: for 1 <= i <= Tr (blocks the mask hides are skipped)
            r0, r1 = t.rows(i)
            # FA1 Alg. 4 line 10: load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i
            Qi = mem.load("Q", q[..., r0:r1, :])
            Oi = mem.load("O", o[..., r0:r1, :])
            dOi = mem.load("dO", do[..., r0:r1, :])
            dQi = mem.load("dQ", dq[..., r0:r1, :])
            li = mem.load("l", l[..., r0:r1]).unsqueeze(-1)
            mi = mem.load("m", m[..., r0:r1]).unsqueeze(-1)
            # FA1 Alg. 4 lines 11-12: S_ij = τ Q_i K_jᵀ, masked (recomputed)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # FA1 Alg. 4 line 13: P_ij = diag(ℓ_i)^-1 exp(S_ij - m_i) (rows that see no key: m = -inf, ℓ = 0, P = 0)
            Pij = mem.ew(safe_div(mem.exp(mem.ew(Sij - finite_or_zero(mi))), li))
            # FA1 Alg. 4 line 16: dV_j <- dV_j + P_ijᵀ dO_i
            dVj = mem.ew(dVj + mem.matmul(Pij.transpose(-1, -2), dOi))
            # FA1 Alg. 4 line 17: dP_ij = dO_i V_jᵀ
            dPij = mem.matmul(dOi, Vj.transpose(-1, -2))
            # FA1 Alg. 4 line 19: D_i = rowsum(dO_i ∘ O_i), recomputed at every (j, i)
            Di = mem.rowsum(mem.ew(dOi * Oi))
            # FA1 Alg. 4 line 20: dS_ij = P_ij ∘ (dP_ij - D_i)
            dSij = mem.ew(Pij * mem.ew(dPij - Di))
            # FA1 Alg. 4 line 21: write dQ_i <- dQ_i + τ dS_ij K_j to HBM
            mem.store("dQ", dq[..., r0:r1, :], mem.ew(dQi + mem.ew(mem.matmul(dSij, Kj) * p.scale)))
            # FA1 Alg. 4 line 22: dK_j <- dK_j + τ dS_ijᵀ Q_i
            dKj = mem.ew(dKj + mem.ew(mem.matmul(dSij.transpose(-1, -2), Qi) * p.scale))
        # FA1 Alg. 4 line 24: write dK_j, dV_j to HBM
        mem.store("dK", dk[..., c0:c1, :], dKj)
        mem.store("dV", dv[..., c0:c1, :], dVj)
    return dq, dk, dv  # FA1 Alg. 4 line 26
