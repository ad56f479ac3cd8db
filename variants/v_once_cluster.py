""""Multiply V once" with the f row across a thread-block cluster (issue 18): v_once placement="cluster".

The reference of kernels/cuda/v_once_cluster.cu's algorithm, against the memory model. One Q block of Br
rows goes to a cluster of CS CTAs (counting.cluster.plan: the smallest cluster whose CTAs hold the row
within the SRAM capacity; an unlimited capacity gives CS = 1). CTA rank c owns the key blocks
[c·Tc_cta, (c+1)·Tc_cta) of the visited prefix. Per Q block:

    phase 1   every CTA loads Q_i (#941 step 1's Q_i, once per CTA: CS reads of Q per Q block), streams
              its K_j, builds f_ij = exp(S_ij - m_ij) (#941 step 2) in its own shared memory and merges
              its blocks' (m_ij, ℓ_ij) into its (m_c, ℓ_c) (#941 step 4's merge, f left relative to m_ij:
              rescale="lazy")
    reduce 1  every CTA reads the other CS - 1 ranks' m_c and ℓ_c through distributed shared memory
              (mem.dsmem) and merges them into the row's (m_i, ℓ_i), the same step-4 merge: the n - 1
              merges of a row visiting n blocks are those of placement="sram", only associated by CTA
    phase 2   every CTA streams its V_j once: O_c += (f_ij · e^{m_ij - m_i} / ℓ_i) V_j (#941 step 5, the
              one rescale of lazy mode fused with the division)
    reduce 2  CTA c reads the c-th share of the rows of every other rank's partial O_c through DSMEM and
              sums the CS partials: (CS - 1)·r·d adds and DSMEM floats per Q block; it writes O_i and L_i

So global memory sees placement="sram"'s traffic plus CS - 1 extra reads of Q_i per Q block, and no f
byte; the two reductions are the DSMEM term. Every Q block runs the whole protocol, also one that sees no
key (causal, Nq > Nk) and ranks that own no visited block (their m = -inf, ℓ = 0, O_c = 0 still cross):
the kernel's barriers are cluster-wide. Numerically the same as placement="sram", rescale="lazy" up to
float32 association (the cluster split is a partition of the keys).
"""
from __future__ import annotations

import torch

from counting.cluster import rank_blocks, reference_plan
from counting.memory import compute_dtype
from variants._common import NEG_INF, finite_or_zero, log_sum_exp, mask_scores, safe_div


def merge(mem, mi, li, m_new, l_new):
    """#941 step 4: (m_i, ℓ_i) ⊕ (m, ℓ) -> (max, e^{m_i - max} ℓ_i + e^{m - max} ℓ); 2 exp, 6 other per row."""
    mi_new = mem.ew(torch.maximum(m_new, mi))
    m_safe = finite_or_zero(mi_new)
    alpha = mem.exp(mem.ew(mi - m_safe))
    beta = mem.exp(mem.ew(m_new - m_safe))
    return mi_new, mem.ew(mem.ew(alpha * li) + mem.ew(beta * l_new))


def row_shares(rows: int, cs: int) -> list[tuple[int, int]]:
    """[a, b) rows of each rank's share of the partial O's (the first rows % cs shares one row longer)."""
    out, a = [], 0
    for c in range(cs):
        b = a + rows // cs + (1 if c < rows % cs else 0)
        out.append((a, b))
        a = b
    return out


def cluster_of(p, mem):
    """The cluster this problem runs on: plan() against the Memory's capacity (None: unlimited)."""
    return reference_plan(p.n_q, p.n_k, p.d, block_q=p.tiling.block_q, block_k=p.tiling.block_k,
                          itemsize=p.itemsize, capacity=mem.sram_bytes)


def forward(q, k, v, p, mem, cl):
    """O, lse of the cluster algorithm (p: variants._common.Problem, cl: counting.cluster.ClusterPlan)."""
    t, cs = p.tiling, cl.cluster_size
    cdt = compute_dtype(q.dtype)  # mem.load's
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    for i in range(t.t_r):  # one cluster per Q block
        r0, r1 = t.rows(i)
        visited = t.k_blocks(i)
        f_tiles, block_max, stats, owned = {}, {}, [], []
        for c in range(cs):  # phase 1, CTA by CTA
            Qi = mem.load("Q", q[..., r0:r1, :])
            mine = [visited[n] for n in rank_blocks(c, cl, visited)]
            mc = lc = None
            for j in mine:
                c0, c1 = t.cols(j)
                Kj = mem.load("K", k[..., c0:c1, :])
                Sij = mask_scores(t, i, j, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
                m_local = mem.rowmax(Sij)
                f_ij = mem.exp(mem.ew(Sij - finite_or_zero(m_local)))
                l_local = mem.rowsum(f_ij)
                mc, lc = (m_local, l_local) if mc is None else merge(mem, mc, lc, m_local, l_local)
                f_tiles[j], block_max[j] = f_ij.to(q.dtype), m_local
            owned.append(mine)
            stats.append((mc, lc))
        shape = (*q.shape[:-2], r1 - r0, 1)
        # reduction 1: every CTA reads every other rank's m and ℓ (an idle rank's are -inf and 0)
        for c in range(cs):
            for other, (mc, lc) in enumerate(stats):
                if other != c:
                    mem.dsmem("m", mc if mc is not None else q.new_full(shape, NEG_INF, dtype=cdt))
                    mem.dsmem("l", lc if lc is not None else q.new_zeros(shape, dtype=cdt))
        mi = li = None
        for mc, lc in stats:  # the merges each CTA does, counted once: n - 1 per row, as placement "sram"
            if mc is not None:
                mi, li = (mc, lc) if mi is None else merge(mem, mi, li, mc, lc)
        if mi is None:  # the mask hides every key from this block
            mi = q.new_full(shape, NEG_INF, dtype=cdt)
            li = q.new_zeros(shape, dtype=cdt)
        m_safe = finite_or_zero(mi)
        partials = []
        for c in range(cs):  # phase 2: V_j once per CTA, f_ij scaled once by the cluster's final max
            Oc = q.new_zeros(*shape[:-1], p.d, dtype=cdt)
            for j in owned[c]:
                c0, c1 = t.cols(j)
                Vj = mem.load("V", v[..., c0:c1, :])
                factor = mem.ew(safe_div(mem.exp(mem.ew(block_max[j] - m_safe)), li))
                Oc = mem.ew(Oc + mem.matmul(mem.ew(f_tiles[j].to(Oc.dtype) * factor), Vj))
            partials.append(Oc)
        # reduction 2: CTA c owns the c-th share of the rows and reads it from every other rank
        for c, (a, b) in enumerate(row_shares(r1 - r0, cs)):
            for other in range(cs):
                if other != c:
                    mem.dsmem("O", partials[other][..., a:b, :])
        Oi = partials[0]
        for Oc in partials[1:]:
            Oi = mem.ew(Oi + Oc)
        mem.store("O", o[..., r0:r1, :], Oi)
        mem.store("lse", lse[..., r0:r1], log_sum_exp(mem, mi, li).squeeze(-1))
    return o, lse
