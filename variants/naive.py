"""Standard attention (FlashAttention paper, Algorithm 0), written against the memory model.

Three passes, each a separate kernel in a real implementation, with S and P materialised in HBM:
    line 1: S = scale·Q Kᵀ, tiled Br x Bc; every tile of S is written (a causal mask still
            materialises all Nq·Nk entries: hidden tiles are written as -inf, without computing them)
    line 2: P = softmax(S), row by row: S read in full, P written in full, lse written
    line 3: O = P V, tiled: for each Q block, the visited P tiles and their V blocks are read

HBM traffic per (batch, head), non-causal, Tr = ⌈Nq/Br⌉, Tc = ⌈Nk/Bc⌉:
    pass 1 reads Q: Tc·Nq·d, K: Tr·Nk·d; writes S: Nq·Nk
    pass 2 reads S: Nq·Nk;  writes P: Nq·Nk, lse: Nq (float32)
    pass 3 reads P: Nq·Nk, V: Tr·Nk·d; writes O: Nq·d
so the traffic grows as Nq·Nk whatever the SRAM: FA1 Theorem 2's Θ(Nd + N²).

Caveats: pass 2 is modelled as one row per step (rows are independent; a softmax kernel holds one
row on chip), so its working set is one float32 row of Nk; this code batches Br rows per step only
to run faster in PyTorch, which moves the same bytes. Pass 3 skips P tiles the mask hides (zeros).
"""
from __future__ import annotations

import torch

from analysis import sram as _sram
from analysis.memory import resolve
from variants._common import F32, NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores, safe_div


# the working set lives in analysis.sram (torch-free: the report path imports it)
sram_bytes = _sram.naive_sram_bytes


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling
    mem.require_sram(f"naive working set (Br={t.block_q}, Bc={t.block_k}, d={p.d}, Nk={p.n_k})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize))
    scores = (p.batch, p.heads, p.n_q, p.n_k)
    S = torch.empty(scores, dtype=q.dtype, device=q.device)  # in HBM, input dtype
    P = torch.empty(scores, dtype=q.dtype, device=q.device)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)

    # line 1: load Q, K by blocks, compute S = scale·Q Kᵀ, write S to HBM
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

    # line 2: read S, compute P = softmax(S) row by row, write P (and lse) to HBM
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Si = mem.load("S", S[..., r0:r1, :])  # (B, H, r, Nk)
        mi = mem.rowmax(Si)
        Pi = mem.exp(mem.ew(Si - finite_or_zero(mi)))
        li = mem.rowsum(Pi)
        mem.store("P", P[..., r0:r1, :], mem.ew(safe_div(Pi, li)))
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li).squeeze(-1))

    # line 3: load P and V by blocks, compute O = P V, write O to HBM
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        Oi = torch.zeros(p.batch, p.heads, r1 - r0, p.d, device=q.device)
        for j in t.k_blocks(i):
            c0, c1 = t.cols(j)
            Pij = mem.load("P", P[..., r0:r1, c0:c1])
            Vj = mem.load("V", v[..., c0:c1, :])
            Oi = mem.ew(Oi + mem.matmul(Pij, Vj))
        mem.store("O", o[..., r0:r1, :], Oi)
    return o, lse  # line 4
