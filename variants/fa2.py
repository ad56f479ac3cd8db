"""FlashAttention-2 forward (Dao 2023, Algorithm 1), written against the counting memory model.

The loop order is FA2's: the outer loop runs over query blocks Q_i (in a kernel, one thread block
each, in parallel); the inner loop streams K_j, V_j. O_i, ℓ_i and m_i never leave the chip, the
normalisation by ℓ is deferred to the end (line 12), and the log-sum-exp L_i = m_i + log ℓ_i is the
only statistic written (line 13), for the backward pass.

HBM traffic per (batch, head), Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉ (non-causal):
    reads  Q: Nq·d        K: Tr·Nk·d        V: Tr·Nk·d
    writes O: Nq·d        lse: Nq (float32)
Causal: K_j, V_j are read only for the visited (i, j); hidden tiles are skipped, not masked.

Caveats: the kernel tier keeps S and P in registers; here they are float32 tensors of the tile. The
scale is applied to S (Br·Bc multiplies a tile) rather than folded into Q.
"""
from __future__ import annotations

import torch

from analysis import sram as _sram
from analysis.memory import resolve
from variants._common import (F32, NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores,
                              safe_div)


# the working set lives in analysis.sram (torch-free: the report path imports it)
sram_bytes = _sram.fa2_sram_bytes


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"fa2 working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    o = torch.empty_like(q)  # (B, H, Nq, d) in HBM
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)  # L in HBM

    for i in range(t.t_r):  # line 3: for 1 <= i <= Tr (parallel over thread blocks)
        r0, r1 = t.rows(i)
        Qi = mem.load("Q", q[..., r0:r1, :])  # line 4: (B, H, r, d)
        # line 5: on chip, O_i = 0 (r x d), ℓ_i = 0, m_i = -inf (r)
        Oi = Qi.new_zeros(*Qi.shape)
        li = Qi.new_zeros(*Qi.shape[:-1], 1)  # (B, H, r, 1)
        mi = Qi.new_full((*Qi.shape[:-1], 1), NEG_INF)
        for j in t.k_blocks(i):  # line 6: for 1 <= j <= Tc (hidden blocks skipped)
            c0, c1 = t.cols(j)
            Kj = mem.load("K", k[..., c0:c1, :])  # line 7: (B, H, c, d)
            Vj = mem.load("V", v[..., c0:c1, :])
            # line 8: S_i^(j) = Q_i K_j^T (scaled), (B, H, r, c)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # line 9: m_i^(j) = max(m_i^(j-1), rowmax(S)); P~ = exp(S - m_i^(j));
            #         ℓ_i^(j) = e^{m_i^(j-1) - m_i^(j)} ℓ_i^(j-1) + rowsum(P~)
            mi_new = mem.ew(torch.maximum(mi, mem.rowmax(Sij)))
            m_safe = finite_or_zero(mi_new)
            Pij = mem.exp(mem.ew(Sij - m_safe))
            alpha = mem.exp(mem.ew(mi - m_safe))  # e^{m_i^(j-1) - m_i^(j)}, (B, H, r, 1)
            li = mem.ew(mem.ew(alpha * li) + mem.rowsum(Pij))
            # line 10: O_i^(j) = diag(e^{m_i^(j-1) - m_i^(j)}) O_i^(j-1) + P~ V_j
            Oi = mem.ew(mem.ew(alpha * Oi) + mem.matmul(Pij, Vj))
            mi = mi_new
        Oi = mem.ew(safe_div(Oi, li))  # line 12: O_i = diag(ℓ_i)^-1 O_i (deferred normalisation)
        Li = log_sum_exp(mem, mi, li)  # line 13: L_i = m_i + log(ℓ_i)
        mem.store("O", o[..., r0:r1, :], Oi)  # line 14
        mem.store("lse", lse[..., r0:r1], Li.squeeze(-1))  # line 15
    return o, lse  # line 17
