""""Multiply V once" (Dao-AILab/flash-attention issue #941), generalised, against the memory model.

For each query block Q_i the issue first builds the whole row of un-normalised probabilities
f_i = [f_i1 | f_i2 | ...] (Br x Nk) with an online max and sum, and only then multiplies by V once:
O_i = (f_i / ℓ_i) V. FA2 instead folds every P~ V_j product into a running O_i. Both do the same
matmul FLOPs (4·Nq·Nk·d non-causal); what differs is where f lives and how often it is rescaled.

Knobs (docs/design.md):
- placement: "sram" keeps the f row on chip (SramOverflow if Br·Nk·itemsize does not fit with the
  rest); "hbm" spills every f block to a scratch buffer in HBM and reads it back for the product;
  "auto" keeps it on chip when it fits, else spills.
- "cluster" (issue 18, variants/v_once_cluster.py): the f row split over the shared memories of a
  thread-block cluster of CS CTAs (the smallest that holds it, counting.cluster), m, ℓ and the partial
  O's reduced through distributed shared memory; lazy only (rescale="eager" is a ValueError).
- rescale: "eager" is the issue's code: when block j raises the running max, every earlier block
  f_ik (k < j) is multiplied by e^{m_old - m_new} (spilled blocks are read and written back each
  time); "lazy" keeps each block's own max m_ij and rescales each f block once, at the end,
  fused into the product: f_ij · e^{m_ij - m_i} / ℓ_i.

Step numbers ("#941 step n") refer to the issue's code:
    step 1  QKij = Qi·scale @ Kj^T (masked on the diagonal block)
    step 2  m_local = rowmax(QKij); QKij_local = exp(QKij - m_local); li_local = rowsum(...)
    step 3  first block: f_i0 = QKij_local, m_i = m_local, ℓ_i = li_local
    step 4  later blocks: m_new = max(m_local, m_i); ℓ_new = e^{m_i-m_new} ℓ_i + e^{m_local-m_new} li_local;
            f_ik *= e^{m_i - m_new} for k < j; f_ij = QKij_local · e^{m_local - m_new}
    step 5  O_i = (f_i / ℓ_i) @ V

HBM traffic per (batch, head), non-causal: reads as FA2 (Q: Nq·d, K and V: Tr·Nk·d each); with f
spilled add writes f: Nq·Nk and reads f: Nq·Nk; eager rescaling of spilled blocks adds, for a row
block of Tc blocks, (Tc-1)·Tc/2 block reads and writes.

Caveats: the issue adds EPSILON to each block sum; this does not (rows that see no key are guarded
instead). f is held in the input dtype wherever it lives, as the tensor-core kernel holds it.
"""
from __future__ import annotations

import torch

from counting import sram as _sram
from counting.memory import compute_dtype, resolve
from variants import fa2 as _fa2  # the backward below is FA2's
from variants import v_once_cluster
from variants._common import (NEG_INF, check_inputs, finite_or_zero, log_sum_exp, mask_scores,
                              reference, safe_div)

PLACEMENTS = _sram.V_ONCE_PLACEMENTS  # auto, sram, hbm, cluster (variants/v_once_cluster.py)
RESCALES = _sram.V_ONCE_RESCALES
valid = _sram.v_once_valid  # placement "cluster" is lazy only


# the working set lives in counting.sram (torch-free: the report path imports it)
sram_bytes = _sram.v_once_sram_bytes


resolve_placement = _sram.v_once_resolve_placement


@reference
def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, placement="auto",
            rescale="eager", mem=None):
    _sram.check_v_once_pair(placement, rescale)
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    mem, t = resolve(mem), p.tiling
    if placement == "cluster":  # the f row over a thread-block cluster (issue 18)
        cl = v_once_cluster.cluster_of(p, mem)
        mem.require_sram(f"v_once working set per CTA (placement=cluster, {cl.cluster_size} CTAs, Br={t.block_q}, "
                         f"Bc={t.block_k}, d={p.d}, f slice of {cl.keys_per_cta} of Nk={p.n_k} keys)",
                         sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize, causal,
                                    placement=placement, rescale=rescale, capacity=mem.sram_bytes))
        return v_once_cluster.forward(q, k, v, p, mem, cl)
    if placement == "auto":
        placement = resolve_placement(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize, causal,
                                      rescale=rescale, capacity=mem.sram_bytes)
    spill, eager = placement == "hbm", rescale == "eager"
    mem.require_sram(f"v_once working set (placement={placement}, rescale={rescale}, Br={t.block_q}, "
                     f"Bc={t.block_k}, d={p.d}, f row of Nk={p.n_k})",
                     sram_bytes(p.n_q, p.n_k, p.d, block_q, block_k, p.itemsize, causal,
                                placement=placement, rescale=rescale))
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)

    for i in range(t.t_r):  # one thread block per Q block, as FA2
        r0, r1 = t.rows(i)
        blocks = t.k_blocks(i)
        Qi = mem.load("Q", q[..., r0:r1, :])  # (B, H, r, d)
        # the f row: on chip (a list of tiles in the input dtype) or a scratch row in HBM
        f_hbm = torch.empty(p.batch, p.heads, r1 - r0, p.n_k, dtype=q.dtype, device=q.device)
        f_tiles, block_max = [], []
        mi = li = None

        def put_f(n, value):
            if spill:
                c0, c1 = t.cols(blocks[n])
                mem.store("f", f_hbm[..., c0:c1], value)
            elif n < len(f_tiles):
                f_tiles[n] = value.to(q.dtype)
            else:
                f_tiles.append(value.to(q.dtype))

        def get_f(n):
            if spill:
                c0, c1 = t.cols(blocks[n])
                return mem.load("f", f_hbm[..., c0:c1])
            return f_tiles[n].to(compute_dtype(q.dtype))  # held on chip in the input dtype, not loaded

        for n, j in enumerate(blocks):
            c0, c1 = t.cols(j)
            Kj = mem.load("K", k[..., c0:c1, :])
            # step 1: QK_ij = scale·Q_i K_j^T, (B, H, r, c)
            Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
            # step 2: block-local max, exponentials and sum
            m_local = mem.rowmax(Sij)
            f_ij = mem.exp(mem.ew(Sij - finite_or_zero(m_local)))
            l_local = mem.rowsum(f_ij)
            if n == 0:  # step 3: the first block initialises m_i, ℓ_i
                mi, li = m_local, l_local
            else:  # step 4: merge block j into the running max and sum
                mi_new = mem.ew(torch.maximum(m_local, mi))
                m_safe = finite_or_zero(mi_new)
                alpha = mem.exp(mem.ew(mi - m_safe))  # e^{m_i - m_new}
                beta = mem.exp(mem.ew(m_local - m_safe))  # e^{m_local - m_new}
                li = mem.ew(mem.ew(alpha * li) + mem.ew(beta * l_local))
                if eager:  # rescale every earlier f block now, and this one to the new max
                    for kk in range(n):
                        put_f(kk, mem.ew(get_f(kk) * alpha))
                    f_ij = mem.ew(f_ij * beta)
                mi = mi_new
            if not eager:
                block_max.append(m_local)  # lazy: f_ij stays relative to its own max m_ij
            put_f(n, f_ij)

        if mi is None:  # the mask hides every key from this block
            mi = Qi.new_full((*Qi.shape[:-1], 1), NEG_INF)
            li = Qi.new_zeros(*Qi.shape[:-1], 1)

        # step 5: O_i = (f_i / ℓ_i) V, with V streamed block by block
        m_safe = finite_or_zero(mi)
        Oi = Qi.new_zeros(*Qi.shape)
        for n, j in enumerate(blocks):
            c0, c1 = t.cols(j)
            Vj = mem.load("V", v[..., c0:c1, :])
            if eager:
                f_norm = mem.ew(safe_div(get_f(n), li))
            else:  # the one rescale of lazy mode, fused with the division: e^{m_ij - m_i} / ℓ_i
                factor = mem.ew(safe_div(mem.exp(mem.ew(block_max[n] - m_safe)), li))
                f_norm = mem.ew(get_f(n) * factor)
            Oi = mem.ew(Oi + mem.matmul(f_norm, Vj))
        mem.store("O", o[..., r0:r1, :], Oi)
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li).squeeze(-1))
    return o, lse


# -- backward --------------------------------------------------------------------------------------
# Issue #941 changes only the forward: it returns the same O and L = m + log ℓ as FA2, so the
# backward is FA2's Algorithm 2 unchanged (it never sees f or the rescale mode). The options are
# accepted, and checked, so one call signature serves every variant.
backward_sram_bytes = _fa2.backward_sram_bytes


@reference
def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=64, block_k=64,
             placement="auto", rescale="eager", mem=None):
    _sram.check_v_once_pair(placement, rescale)  # the pairs the forward takes, no more
    return _fa2.backward(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q,
                         block_k=block_k, mem=mem)
