"""FlashAttention-2 forward (Dao 2023, Algorithm 1), written against the counting memory model.

The loop order is FA2's: the outer loop runs over query blocks Q_i (in a kernel, one thread block
each, in parallel); the inner loop streams K_j, V_j. O_i, ℓ_i and m_i never leave the chip, the
normalisation by ℓ is deferred to the end (FA2 Alg. 1 line 12), and the log-sum-exp L_i = m_i + log ℓ_i is the
only statistic written (FA2 Alg. 1 line 13), for the backward pass.

HBM traffic per (batch, head), Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉ (non-causal):
    reads  Q: Nq·d        K: Tr·Nk·d        V: Tr·Nk·d
    writes O: Nq·d        lse: Nq (float32)
Causal: K_j, V_j are read only for the visited (i, j); hidden tiles are skipped, not masked.

Caveats: the kernel tier keeps S and P in registers; here they are float32 tensors of the tile. The
scale is applied to S (Br·Bc multiplies a tile) rather than folded into Q.
"""
from __future__ import annotations

import torch

from counting import sram as _sram
from counting.memory import resolve
from variants._common import (NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores,
                              reference, safe_div)


# the working set lives in counting.sram (torch-free: the report path imports it)
sram_bytes = _sram.fa2_sram_bytes


@reference
def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling  # FA2 Alg. 1 line 1: Tr blocks of Br rows, Tc of Bc
    mem.require_sram(f"fa2 working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    o = torch.empty_like(q)  # (B, H, Nq, d) in HBM
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)  # L in HBM

    for i in range(t.t_r):  # FA2 Alg. 1 line 3: for 1 <= i <= Tr (parallel over thread blocks)
        r0, r1 = t.rows(i)
        Qi = mem.load("Q", q[..., r0:r1, :])  # FA2 Alg. 1 line 4: (B, H, r, d)
        # FA2 Alg. 1 line 5: on chip, O_i = 0 (r x d), ℓ_i = 0, m_i = -inf (r)
        Oi = Qi.new_zeros(*Qi.shape)
        li = Qi.new_zeros(*Qi.shape[:-1], 1)  # (B, H, r, 1)
        mi = Qi.new_full((*Qi.shape[:-1], 1), NEG_INF)
        for j in t.k_blocks(i):  # FA2 Alg. 1 line 6: for 1 <= j <= Tc (hidden blocks skipped)
            c0, c1 = t.cols(j)
            Kj = mem.load("K", k[..., c0:c1, :])  # FA2 Alg. 1 line 7: (B, H, c, d)
            Vj = mem.load("V", v[..., c0:c1, :])
            # FA2 Alg. 1 line 8: S_i^(j) = Q_i K_j^T (scaled), (B, H, r, c)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # FA2 Alg. 1 line 9: m_i^(j) = max(m_i^(j-1), rowmax(S)); P~ = exp(S - m_i^(j));
            #         ℓ_i^(j) = e^{m_i^(j-1) - m_i^(j)} ℓ_i^(j-1) + rowsum(P~)
            mi_new = mem.ew(torch.maximum(mi, mem.rowmax(Sij)))
            m_safe = finite_or_zero(mi_new)
            Pij = mem.exp(mem.ew(Sij - m_safe))
            alpha = mem.exp(mem.ew(mi - m_safe))  # e^{m_i^(j-1) - m_i^(j)}, (B, H, r, 1)
            li = mem.ew(mem.ew(alpha * li) + mem.rowsum(Pij))
            # FA2 Alg. 1 line 10: O_i^(j) = diag(e^{m_i^(j-1) - m_i^(j)}) O_i^(j-1) + P~ V_j
            Oi = mem.ew(mem.ew(alpha * Oi) + mem.matmul(Pij, Vj))
            mi = mi_new
        Oi = mem.ew(safe_div(Oi, li))  # FA2 Alg. 1 line 12: O_i = diag(ℓ_i)^-1 O_i (deferred normalisation)
        Li = log_sum_exp(mem, mi, li)  # FA2 Alg. 1 line 13: L_i = m_i + log(ℓ_i)
        mem.store("O", o[..., r0:r1, :], Oi)  # FA2 Alg. 1 line 14
        mem.store("lse", lse[..., r0:r1], Li.squeeze(-1))  # FA2 Alg. 1 line 15
    return o, lse  # FA2 Alg. 1 line 17


# -- backward --------------------------------------------------------------------------------------
# FlashAttention-2 backward (Dao 2023, Algorithm 2), written against the counting memory model.
#
# Recomputation: the forward kept only O and the log-sum-exp L (Nq floats), not the Nq x Nk matrix P.
# Here each visited tile rebuilds P_i^(j) = exp(S_i^(j) - L_i) from Q_i, K_j and L_i (FA2 Alg. 2 line 11) - the
# same S = Q Kᵀ product and exponentials the forward did, paid again to avoid storing P.
#
# The loop order is K/V outer (FA2 Alg. 2 line 5): K_j, V_j are read once and dK_j, dV_j stay on chip until
# FA2 Alg. 2 line 18. The price is dQ: every visited (i, j) adds a partial dS K_j into dQ_i, so dQ_i makes a round
# trip to HBM per tile (FA2 Alg. 2 line 15); it is a float32 accumulator there, since Tc rounded partial sums in
# fp16/bf16 would lose the small ones.
#
# HBM traffic per (batch, head), Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉ (non-causal; causal skips hidden tiles):
#     FA2 Alg. 2 line 3   writes dQ: Nq·d (float32 zeros)
#     FA2 Alg. 2 line 4   reads O, dO: Nq·d each;  writes D: Nq (float32)
#     loop     reads K, V: Nk·d each;  Q, dO: Tc·Nq·d each;  L, D: Tc·Nq each;  dQ: Tc·Nq·d (float32)
#              writes dQ: Tc·Nq·d (float32);  dK, dV: Nk·d each (FA2 Alg. 2 line 18)
#     epilogue reads dQ: Nq·d (float32); writes dQ: Nq·d in the input dtype (scaled by τ and cast)
# Five products per visited tile: S = Q_i K_jᵀ, dV_j += Pᵀ dO_i, dP = dO_i V_jᵀ, dQ_i += dS K_j,
# dK_j += dSᵀ Q_i: 10·Br·Bc·d FLOPs, against the forward's 4·Br·Bc·d.
#
# Caveats: FA2 Alg. 2 line 9 as printed also loads O_i and dQ_i; O_i is not used once D is
# precomputed (FA2 Alg. 2 line 4), and dQ_i is counted once, where FA2 Alg. 2 line 15 reads it. The
# softmax scale τ is left out of S's gradient and applied once at the end, as FA2's kernels do: to
# dK_j at FA2 Alg. 2 line 18 and to dQ in the epilogue (the
# conversion of the float32 accumulator to the input dtype, a separate pass in FA2's code).
from counting.backward_forms import fa2_backward_sram_bytes as backward_sram_bytes  # noqa: E402
from variants._common import check_backward_inputs  # noqa: E402


@reference
def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = check_backward_inputs(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k)
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"fa2 backward working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     backward_sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)  # float32 accumulator in HBM
    D = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    # FA2 Alg. 2 line 3: initialise dQ = 0 in HBM
    mem.store("dQ", dq_acc, torch.zeros_like(dq_acc))
    # FA2 Alg. 2 line 4: D = rowsum(dO ∘ O), one pass over O and dO, written to HBM (float32)
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Oi = mem.load("O", o[..., r0:r1, :])
        dOi = mem.load("dO", do[..., r0:r1, :])
        mem.store("D", D[..., r0:r1], mem.rowsum(mem.ew(dOi * Oi)).squeeze(-1))

    for j in range(t.t_c):  # FA2 Alg. 2 line 5: for 1 <= j <= Tc
        c0, c1 = t.cols(j)
        visitors = t.q_blocks(j)  # never empty with the bottom-right mask (the last row sees all)
        dKj = torch.zeros(p.batch, p.heads, c1 - c0, p.d, device=q.device)  # FA2 Alg. 2 line 7: on chip
        dVj = torch.zeros_like(dKj)
        if len(visitors):
            Kj = mem.load("K", k[..., c0:c1, :])  # FA2 Alg. 2 line 6
            Vj = mem.load("V", v[..., c0:c1, :])
        for i in visitors:  # FA2 Alg. 2 line 8: for 1 <= i <= Tr (blocks the mask hides are skipped)
            r0, r1 = t.rows(i)
            # FA2 Alg. 2 line 9: load Q_i, dO_i, L_i, D_i
            Qi = mem.load("Q", q[..., r0:r1, :])
            dOi = mem.load("dO", do[..., r0:r1, :])
            Li = mem.load("lse", lse[..., r0:r1]).unsqueeze(-1)
            Di = mem.load("D", D[..., r0:r1]).unsqueeze(-1)
            # FA2 Alg. 2 line 10: S_i^(j) = τ Q_i K_jᵀ (recomputed)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # FA2 Alg. 2 line 11: P_i^(j) = exp(S_i^(j) - L_i) (recomputed; rows with L = -inf see no key: P = 0)
            Pij = mem.exp(mem.ew(Sij - finite_or_zero(Li)))
            # FA2 Alg. 2 line 12: dV_j <- dV_j + P_i^(j)ᵀ dO_i
            dVj = mem.ew(dVj + mem.matmul(Pij.transpose(-1, -2), dOi))
            # FA2 Alg. 2 line 13: dP_i^(j) = dO_i V_jᵀ
            dPij = mem.matmul(dOi, Vj.transpose(-1, -2))
            # FA2 Alg. 2 line 14: dS_i^(j) = P_i^(j) ∘ (dP_i^(j) - D_i)
            dSij = mem.ew(Pij * mem.ew(dPij - Di))
            # FA2 Alg. 2 line 15: load dQ_i, dQ_i <- dQ_i + dS_i^(j) K_j, write back (float32 accumulator)
            dQi = mem.load("dQ", dq_acc[..., r0:r1, :])
            mem.store("dQ", dq_acc[..., r0:r1, :], mem.ew(dQi + mem.matmul(dSij, Kj)))
            # FA2 Alg. 2 line 16: dK_j <- dK_j + dS_i^(j)ᵀ Q_i
            dKj = mem.ew(dKj + mem.matmul(dSij.transpose(-1, -2), Qi))
        # FA2 Alg. 2 line 18: write dK_j (times τ, the scale of S) and dV_j to HBM
        mem.store("dK", dk[..., c0:c1, :], mem.ew(dKj * p.scale))
        mem.store("dV", dv[..., c0:c1, :], dVj)

    # epilogue (FA2 Alg. 2 line 20 returns the float32 dQ): dQ = τ dQ, cast to the input dtype, block by block
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        dQi = mem.load("dQ", dq_acc[..., r0:r1, :])
        mem.store("dQ", dq[..., r0:r1, :], mem.ew(dQi * p.scale))
    return dq, dk, dv  # FA2 Alg. 2 line 20
