"""Split-KV attention (FlashDecoding, issue 44) over a contiguous or paged KV cache, written against the counting
memory model. The contract, the split rule and the closed form: counting/decode.py; the derivation: docs/decoding.md.

At decode (Nq = 1..a few queries) FA2's grid of Tr·B·H CTAs is B·H CTAs against 132 SMs: each streams its whole
cache while most SMs idle. Split-KV cuts each sequence's positions into S chunks and gives each (Q block, chunk)
its own CTA. Each runs FA2's inner loop (FA2 Alg. 1 lines 6-10) over its chunk and writes a partial (o_s, lse_s)
(FA2 Alg. 1 lines 12-13, normalised); the merge combines them by the log-sum-exp identity

    lse = log Σ_s exp(lse_s),   o = Σ_s exp(lse_s - lse) · o_s

the online softmax's induction (the rescale by e^{m_old - m_new} of FA2 Alg. 1 lines 9-10) taken one chunk at a time.
GQA packing: the g = H/H_kv query heads of a kv head are one tile of g·Nq rows (row h·Nq + i), so each K/V byte
a tile needs is read once. S = 1 is FA2 over the cache: one split writes o and lse itself, no partials.

Caveats: the loops run per sequence (per-sequence lengths and block tables); the kv heads of one sequence are the
leading dimension of every tile, as (B, H) is in the other references.
"""
from __future__ import annotations

import torch

from counting import decode
from counting.memory import compute_dtype, resolve
from variants import fa2
from variants._common import (NEG_INF, SUPPORTED_DTYPES, check_score_range, finite_or_zero, log_sum_exp, reference,
                              safe_div)

sram_bytes = decode.split_kv_sram_bytes


def check(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, cache_seqlens=None, block_table=None,
          num_splits=None) -> decode.Decode:
    """The launchers' check too (counting.decode.check_decode_tensors), plus the score range of the references."""
    p = decode.check_decode_tensors(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                                    cache_seqlens=cache_seqlens, block_table=block_table, num_splits=num_splits,
                                    dtypes=SUPPORTED_DTYPES)
    if block_table is None:  # the score range check takes (B, H, N, d) caches (a conservative bound: all Nk)
        check_score_range(q, k if p.group == 1 else k.repeat_interleave(p.group, dim=1), p.scale)
    return p


# The backward of attention depends only on (q, k, v, o, lse, dO), and split-KV's (o, lse) are FA2's: on training
# shapes (H_kv = H, the whole cache) its backward is FA2's (FA2 Alg. 2), as v_once's is. Decoding has no backward.
backward = fa2.backward


def _positions(p, b, block_table, c0, c1, device):
    """(pages, offsets) of cache positions c0..c1 of sequence b in a paged cache."""
    t = torch.arange(c0, c1, device=device)
    return block_table[b, t // p.page_size].long(), t % p.page_size


def _load(mem, name, cache, p, b, block_table, c0, c1):
    """K_j or V_j of sequence b, positions c0..c1, all kv heads: (H_kv, c, d) (FA2 Alg. 1 line 7)."""
    if block_table is None:
        return mem.load(name, cache[b, :, c0:c1, :])
    pages, offs = _positions(p, b, block_table, c0, c1, cache.device)
    return mem.load(name, cache[pages, :, offs, :].transpose(0, 1))  # the gathered positions, counted as read


def _mask(p, length, r0, r1, c0, c1, s):
    """Hide the positions a packed row may not see (bottom-right causal per sequence), a select: no FLOPs."""
    if not p.causal:
        return s
    rows = torch.arange(r0, r1, device=s.device) % p.n_q  # packed row h·Nq + i -> query i
    cols = torch.arange(c0, c1, device=s.device)
    return s.masked_fill(cols[None, :] > rows[:, None] + (length - p.n_q), NEG_INF)


@reference
def forward(q, k, v, *, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None,
            block_q=64, block_k=64, mem=None):
    p = check(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k, cache_seqlens=cache_seqlens,
              block_table=block_table, num_splits=num_splits)
    mem = resolve(mem)
    mem.require_sram(f"split_kv working set (Br={p.block_q}, Bc={p.block_k}, d={p.d})",
                     sram_bytes(p.rows, max(p.lengths), p.d, p.block_q, p.block_k, q.element_size()))
    big_s, hk, rows = p.num_splits, p.kv_heads, p.rows
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous: its packed view below is a view
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    # the packed views: (H_kv, g·Nq, d), row h·Nq + i (a reshape of contiguous (H, Nq, d): a view)
    qp = q.reshape(p.batch, hk, rows, p.d)
    op, lsep = o.view(p.batch, hk, rows, p.d), lse.view(p.batch, hk, rows)
    if big_s > 1:  # the partials: float32 scratch in HBM, one (o_s, lse_s) per split (float64 for gradcheck's
        acc = compute_dtype(q.dtype)  # float64 inputs, whose gradients a float32 lse_s would round off)
        o_part = torch.empty(big_s, p.batch, hk, rows, p.d, dtype=acc, device=q.device)
        lse_part = torch.empty(big_s, p.batch, hk, rows, dtype=acc, device=q.device)

    for b in range(p.batch):
        length, chunk = p.lengths[b], p.chunk
        for i in range(p.t_r):  # FA2 Alg. 1 line 3, and each split of the cache a CTA of its own
            r0, r1 = p.tile_rows(i)
            for s in range(big_s):
                blocks = p.blocks(length, i, s, chunk)
                out_o = op[b, :, r0:r1] if big_s == 1 else o_part[s, b, :, r0:r1]
                out_l = lsep[b, :, r0:r1] if big_s == 1 else lse_part[s, b, :, r0:r1]
                if not len(blocks):  # nothing of this chunk is visible: o_s = 0, lse_s = -inf, nothing read
                    mem.store("O" if big_s == 1 else "O_split", out_o, torch.zeros_like(out_o))
                    mem.store("lse" if big_s == 1 else "lse_split", out_l, torch.full_like(out_l, NEG_INF))
                    continue
                Oi, Li = _split(mem, p, qp, k, v, block_table, b, length, chunk, s, r0, r1, blocks)
                mem.store("O" if big_s == 1 else "O_split", out_o, Oi)  # FA2 Alg. 1 line 14 (a partial: S > 1)
                mem.store("lse" if big_s == 1 else "lse_split", out_l, Li.squeeze(-1))  # FA2 Alg. 1 line 15
            if big_s > 1:
                _merge(mem, p, o_part, lse_part, op, lsep, b, r0, r1)
    return o, lse


def _split(mem, p, qp, k, v, block_table, b, length, chunk, s, r0, r1, blocks):
    """One split of one Q block: FA2 Alg. 1 lines 4-10 over the K/V blocks of chunk s, then FA2 Alg. 1 lines 12-13: (O_s, L_s) on chip."""
    Qi = mem.load("Q", qp[b, :, r0:r1])  # FA2 Alg. 1 line 4: (H_kv, r, d), g heads packed
    Oi = Qi.new_zeros(*Qi.shape)  # FA2 Alg. 1 line 5: O_i = 0, ℓ_i = 0, m_i = -inf
    li = Qi.new_zeros(*Qi.shape[:-1], 1)
    mi = Qi.new_full((*Qi.shape[:-1], 1), NEG_INF)
    for j in blocks:  # FA2 Alg. 1 line 6, over this split's chunk [s·chunk, (s+1)·chunk) only
        c0, c1 = j * p.block_k, min((j + 1) * p.block_k, length)
        Kj = _load(mem, "K", k, p, b, block_table, c0, c1)  # FA2 Alg. 1 line 7: once for the g heads
        Vj = _load(mem, "V", v, p, b, block_table, c0, c1)
        # FA2 Alg. 1 line 8: S_i^(j) = Q_i K_j^T (scaled), masked where causal hides a position
        Sij = _mask(p, length, r0, r1, c0, c1, mem.ew(mem.matmul(Qi, Kj.transpose(-1, -2)) * p.scale))
        # FA2 Alg. 1 line 9: m_i^(j) = max(m_i^(j-1), rowmax(S)); P~ = exp(S - m_i^(j)); ℓ_i^(j)
        mi_new = mem.ew(torch.maximum(mi, mem.rowmax(Sij)))
        m_safe = finite_or_zero(mi_new)
        Pij = mem.exp(mem.ew(Sij - m_safe))
        alpha = mem.exp(mem.ew(mi - m_safe))
        li = mem.ew(mem.ew(alpha * li) + mem.rowsum(Pij))
        # FA2 Alg. 1 line 10: O_i^(j) = diag(e^{m_i^(j-1) - m_i^(j)}) O_i^(j-1) + P~ V_j
        Oi = mem.ew(mem.ew(alpha * Oi) + mem.matmul(Pij, Vj))
        mi = mi_new
    Oi = mem.ew(safe_div(Oi, li))  # FA2 Alg. 1 line 12: the split's o_s, normalised by its own ℓ
    return Oi, log_sum_exp(mem, mi, li)  # FA2 Alg. 1 line 13: lse_s = m_s + log ℓ_s (-inf: saw no key)


def _merge(mem, p, o_part, lse_part, op, lsep, b, r0, r1):
    """The merge of rows r0..r1 of sequence b: lse = log Σ_s exp(lse_s), o = Σ_s exp(lse_s - lse) o_s, computed
    about the largest lse_s as the online softmax is about its running max (a row whose every split is empty:
    o = 0, lse = -inf)."""
    Ls = mem.load("lse_split", lse_part[:, b, :, r0:r1]).permute(1, 2, 0)  # (H_kv, r, S)
    m = mem.rowmax(Ls)  # the largest partial lse of each row (FA2 Alg. 1 line 9's m, over splits)
    w = mem.exp(mem.ew(Ls - finite_or_zero(m)))  # e^{lse_s - m}: each split's ℓ_s e^{m_s - m}
    total = mem.rowsum(w)  # ℓ = Σ_s ℓ_s e^{m_s - m}, as FA2 Alg. 1 line 9's ℓ update
    L = log_sum_exp(mem, m, total)  # lse = m + log ℓ (FA2 Alg. 1 line 13)
    coef = mem.ew(safe_div(w, total))  # e^{lse_s - lse}: the weights sum to 1 (0 for an all-empty row)
    o = None
    for s in range(p.num_splits):
        term = mem.ew(coef[..., s:s + 1] * mem.load("O_split", o_part[s, b, :, r0:r1]))
        o = term if o is None else mem.ew(o + term)
    mem.store("O", op[b, :, r0:r1], o)
    mem.store("lse", lsep[b, :, r0:r1], L.squeeze(-1))
