"""FlashAttention-1 forward (Dao et al. 2022, Algorithm 1 as printed), against the memory model.

The loop order is FA1's: the outer loop streams K_j, V_j (line 5); the inner loop runs over every
query block Q_i (line 7). The running output O and the statistics ℓ, m live in HBM and make a round
trip at every visited (j, i): read at line 8, written back at lines 12-13. The running O is stored in
the output dtype, as printed, so fp16/bf16 inputs round it Tc times.

HBM traffic per (batch, head), non-causal:
    line 2 writes O: Nq·d, ℓ: Nq, m: Nq (initialisation)
    reads  K, V: Nk·d each;  Q, O: Tc·Nq·d each;  ℓ, m: Tc·Nq each
    writes O: Tc·Nq·d;  ℓ, m: Tc·Nq each
    epilogue (not in Algorithm 1; the one signature returns lse): reads ℓ, m once, writes lse: Nq.
Causal: only the visited (j, i) move anything; hidden tiles are skipped.

Caveats: Algorithm 1 normalises O_i at every step (line 12) - the extra divide per tile that FA2
removes. The block sizes default to 64 x 64 here; the paper's rule Bc = ⌈M/4d⌉, Br = min(Bc, d)
is applied by the report when it derives blocks from an SRAM size.
"""
from __future__ import annotations

import torch

from analysis import sram as _sram
from analysis.memory import resolve
from variants._common import (F32, NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores,
                              safe_div)


# the working set lives in analysis.sram (torch-free: the report path imports it)
sram_bytes = _sram.fa1_sram_bytes


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"fa1 working set (Br={t.block_q}, Bc={t.block_k}, d={p.d})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    stats = (p.batch, p.heads, p.n_q)
    o = torch.empty_like(q)  # running O in HBM, output dtype
    l_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    m_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    lse = torch.empty(stats, dtype=torch.float32, device=q.device)

    # line 2: initialise O = 0, ℓ = 0, m = -inf in HBM
    mem.store("O", o, torch.zeros_like(o))
    mem.store("l", l_hbm, torch.zeros_like(l_hbm))
    mem.store("m", m_hbm, torch.full_like(m_hbm, NEG_INF))

    for j in range(t.t_c):  # line 5: for 1 <= j <= Tc
        c0, c1 = t.cols(j)
        Kj = mem.load("K", k[..., c0:c1, :])  # line 6: (B, H, c, d)
        Vj = mem.load("V", v[..., c0:c1, :])
        for i in t.q_blocks(j):  # line 7: for 1 <= i <= Tr (blocks the mask hides are skipped)
            r0, r1 = t.rows(i)
            # line 8: load Q_i, O_i, ℓ_i, m_i from HBM
            Qi = mem.load("Q", q[..., r0:r1, :])  # (B, H, r, d)
            Oi = mem.load("O", o[..., r0:r1, :])
            li = mem.load("l", l_hbm[..., r0:r1]).unsqueeze(-1)  # (B, H, r, 1)
            mi = mem.load("m", m_hbm[..., r0:r1]).unsqueeze(-1)
            # line 9: S_ij = Q_i K_j^T (scaled), (B, H, r, c)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # line 10: m~_ij = rowmax(S_ij), P~_ij = exp(S_ij - m~_ij), ℓ~_ij = rowsum(P~_ij)
            m_tilde = mem.rowmax(Sij)
            P_tilde = mem.exp(mem.ew(Sij - finite_or_zero(m_tilde)))
            l_tilde = mem.rowsum(P_tilde)
            # line 11: m_i^new = max(m_i, m~_ij), ℓ_i^new = e^{m_i - m_i^new} ℓ_i + e^{m~_ij - m_i^new} ℓ~_ij
            mi_new = mem.ew(torch.maximum(mi, m_tilde))
            m_safe = finite_or_zero(mi_new)
            alpha = mem.exp(mem.ew(mi - m_safe))  # e^{m_i - m_i^new}
            beta = mem.exp(mem.ew(m_tilde - m_safe))  # e^{m~_ij - m_i^new}
            li_new = mem.ew(mem.ew(alpha * li) + mem.ew(beta * l_tilde))
            # line 12: O_i <- diag(ℓ_i^new)^-1 (diag(ℓ_i) e^{m_i - m_i^new} O_i + e^{m~_ij - m_i^new} P~_ij V_j)
            carried = mem.ew(mem.ew(li * alpha) * Oi)
            fresh = mem.ew(beta * mem.matmul(P_tilde, Vj))
            Oi = mem.ew(safe_div(mem.ew(carried + fresh), li_new))
            mem.store("O", o[..., r0:r1, :], Oi)
            # line 13: write ℓ_i <- ℓ_i^new, m_i <- m_i^new to HBM
            mem.store("l", l_hbm[..., r0:r1], li_new.squeeze(-1))
            mem.store("m", m_hbm[..., r0:r1], mi_new.squeeze(-1))

    # epilogue (beyond line 16): lse = m + log ℓ, one more pass over the statistics, block by block
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        li = mem.load("l", l_hbm[..., r0:r1])
        mi = mem.load("m", m_hbm[..., r0:r1])
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li))
    return o, lse  # line 16
