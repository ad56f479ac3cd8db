"""Decoding (issue 44): split-KV attention over a KV cache (FlashDecoding), its input checks, its split rule and
its closed form, shared by the reference (variants/split_kv.py), the CUDA launchers (kernels/split_kv*.py) and the
report. Torch is imported only inside `check_decode_tensors`.

The contract (docs/decoding.md):
    q (B, H, Nq, d). Contiguous cache: k, v (B, H_kv, Nk, d). Paged cache: k, v (num_pages, H_kv, page_size, d)
    and block_table (B, max_pages) int32/int64 page indices: cache position t of sequence b is
    k[block_table[b, t // page_size], :, t % page_size]; the entries past row b's first ⌈L_b / page_size⌉ are
    padding (any value, e.g. -1), never read nor checked. H_kv divides H; query head h reads kv head h // g,
    g = H / H_kv. cache_seqlens (B,) integers 0 <= L_b <= capacity (Nk, or max_pages·page_size); default all Nk
    (contiguous only: a paged cache needs them). Causal is bottom-right per sequence: query i sees position t iff
    t <= i + L_b - Nq; a row that sees nothing gives o = 0, lse = -inf.

GQA packing: the g query heads of one kv head, times Nq queries, are one problem of g·Nq rows (row p = h·Nq + i,
head-major: h the head within the group, i the query), tiled in Q blocks of Br rows, so each K/V byte a tile
needs is read once for all g heads.

The split (counting/split_rule.py, the rule the kernels launch with): S = num_splits, chunk = ⌈L_max/S⌉ rounded up
to a multiple of Bc (and of page_size when paged: a chunk is whole K/V blocks and whole pages), L_max the longest
sequence; the launch runs S = ⌈L_max/chunk⌉ splits (trailing empty ones dropped). Split s of Q block i runs FA2's
inner loop (FA2 Alg. 1 lines 6-10) over the K/V blocks of [s·chunk, (s+1)·chunk) ∩ [0, L_b) the block can see, then
FA2 Alg. 1 lines 12-13 give a partial (o_s, lse_s). With S > 1 every split writes its partial (float32; an empty split,
one that sees no block, writes o_s = 0, lse_s = -inf and reads nothing) and the merge reads all S of them:
lse = log Σ_s exp(lse_s), o = Σ_s exp(lse_s - lse) o_s. With S = 1 the one split writes o and lse itself
(FA2 Alg. 1 lines 14-15), no partial, no merge.

Traffic per sequence b and kv head (R = g·Nq rows, Q blocks i of r_i rows, W_i = the columns of the K/V blocks
Q block i sees, s_i = its nonempty splits), exactly what the reference counts:
    reads   Q: Σ_i s_i r_i d         K, V: Σ_i W_i d each
    S = 1   writes O: R d,  lse: R
    S > 1   writes O_split: S R d, lse_split: S R (float32);  reads O_split: S R d, lse_split: S R;
            writes O: R d, lse: R
Non-causal, W_i = L_b for every Q block: K and V are read once per Q block, and at decode (R <= Br) once.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from counting import checks, split_rule
from counting.sram import split_kv_sram_bytes  # noqa: F401  (re-exported: the working set lives in counting.sram)
from counting.headline import seen_rows, visible_pairs
from counting.tiling import Tiling, cdiv, tile_sums

NUM_SMS = split_rule.SMS  # the default split rule fills an H100/H200 (132 SMs); kernels pass their device's count
PARTIALS = ("O_split", "lse_split")  # float32 scratch in HBM


def split_chunk(max_len: int, num_splits: int, block_k: int, page_size: int | None = None) -> int:
    """Positions per split (counting/split_rule.py, the kernels' rule): ⌈L_max/S⌉ rounded up to a multiple of Bc, and
    of page_size when paged (lcm(Bc, page_size): a chunk is whole K/V blocks and whole pages), at least one unit. One
    chunk for every sequence of the launch, from the longest: split s covers [s·chunk, (s+1)·chunk) ∩ [0, L_b)."""
    return split_rule.chunk_len(max_len, num_splits, block_k, page_size)


def default_num_splits(batch: int, kv_heads: int, rows: int, max_len: int, block_q: int, block_k: int,
                       num_sms: int = NUM_SMS) -> int:
    """FlashDecoding's rule, as the kernels run it (counting/split_rule.py num_splits): enough CTAs to fill the SMs
    (twice over: two CTAs resident per SM hide each other's DRAM latency), no more. Unsplit, the grid is
    B·H_kv·⌈rows/Br⌉ CTAs (rows = g·Nq, the packed tile); at decode (B·H_kv = 8..64 against 132 SMs) most SMs idle
    while each CTA streams its whole cache. S = ⌈2·SMs / CTAs⌉ fills them; more would only add partials to write
    and merge. Capped at Tc = ⌈L_max/Bc⌉ (a split of less than one K/V block has no work); 1 when the grid already
    fills the GPU (training shapes)."""
    return split_rule.num_splits(batch, kv_heads, cdiv(rows, block_q), max_len, block_k, num_sms)


def used_splits(max_len: int, num_splits: int, block_k: int, page_size: int | None = None) -> int:
    """The splits a launch runs: those that hold a position of the longest sequence (counting/split_rule.py: trailing
    empty ones are not launched), so S = ⌈L_max / chunk⌉ <= the S asked for."""
    return split_rule.used_splits(max_len, split_chunk(max_len, num_splits, block_k, page_size))


@dataclass(frozen=True)
class Decode:
    """A checked decode problem. lengths: L_b per sequence; page_size None: contiguous cache of Nk positions."""

    batch: int
    heads: int
    kv_heads: int
    n_q: int
    capacity: int  # Nk (contiguous) or max_pages·page_size (paged)
    d: int
    causal: bool
    scale: float
    block_q: int
    block_k: int
    lengths: tuple
    num_splits: int
    page_size: int | None = None
    num_pages: int | None = None

    @property
    def group(self) -> int:  # g = H / H_kv
        return self.heads // self.kv_heads

    @property
    def rows(self) -> int:  # the packed tile: g·Nq rows per kv head
        return self.group * self.n_q

    @property
    def t_r(self) -> int:
        return cdiv(self.rows, self.block_q)

    @property
    def chunk(self) -> int:
        """Positions per split, the same for every sequence (from the longest)."""
        return split_chunk(max(self.lengths), self.num_splits, self.block_k, self.page_size)

    def tile_rows(self, i: int) -> tuple[int, int]:
        r0 = i * self.block_q
        return r0, min(r0 + self.block_q, self.rows)

    def visible(self, length: int, i: int) -> int:
        """Leading cache positions some row of packed Q block i sees (bottom-right causal: its largest query i)."""
        if not self.causal:
            return length
        r0, r1 = self.tile_rows(i)
        last_q = self.n_q - 1 if r0 // self.n_q != (r1 - 1) // self.n_q else (r1 - 1) % self.n_q
        return max(0, min(length, last_q + 1 + length - self.n_q))

    def blocks(self, length: int, i: int, s: int, chunk: int) -> range:
        """K/V blocks j (Bc positions each, a global grid) that split s of Q block i visits."""
        vis = self.visible(length, i)
        first = s * chunk // self.block_k
        return range(first, max(first, cdiv(min(vis, (s + 1) * chunk), self.block_k)))


def _int(name: str, value, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_lengths(lengths, batch: int, capacity: int, what: str = "cache capacity") -> tuple:
    """cache_seqlens as a tuple of B integers in [0, capacity]."""
    lengths = tuple(lengths)
    if len(lengths) != batch:
        raise ValueError(f"cache_seqlens must have B = {batch} entries (one per sequence), got {len(lengths)}")
    for b, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"cache_seqlens[{b}] must be an integer, got {n!r}")
        if n < 0:
            raise ValueError(f"cache_seqlens[{b}] = {n} is negative; a sequence holds 0 or more positions")
        if n > capacity:
            raise ValueError(f"cache_seqlens[{b}] = {n} is over the {what} of {capacity} positions")
    return tuple(int(n) for n in lengths)


def check_block_table(first_invalid, num_pages: int, page_size: int, lengths, entry) -> None:
    """Every block-table entry a sequence reads (the first ⌈L_b / page_size⌉ of row b) is a page index in
    [0, num_pages); entries past a sequence's pages are never read (padding, e.g. -1) and not checked.
    first_invalid[b]: the column of row b's first entry outside [0, num_pages) (max_pages if none); entry(b, p): the
    value of block_table[b, p], for the message."""
    for b, n in enumerate(lengths):
        used = cdiv(n, page_size)
        if used > first_invalid[b]:
            p = first_invalid[b]
            raise ValueError(f"block_table[{b}, {p}] = {entry(b, p)} is not a page index: the cache has pages "
                             f"0..{num_pages - 1} (sequence {b} reads its first {used} entries)")


def check_decode(q_shape, k_shape, v_shape, *, causal=False, scale=None, block_q=64, block_k=64, lengths=None,
                 num_splits=None, paged=False, table_shape=None, num_sms=NUM_SMS) -> Decode:
    """Sizes of a decode call (tensors' shapes as tuples), checked before anything runs; block-table entries are
    checked by check_block_table."""
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 4:
            raise ValueError(f"{name} must have rank 4, got shape {tuple(shape)}")
    b, h, n_q, d = (int(x) for x in q_shape)
    if tuple(k_shape) != tuple(v_shape):
        what = "the same sequence length" if k_shape[2] != v_shape[2] else "one shape"
        raise ValueError(f"k and v must have {what}, got {tuple(k_shape)} and {tuple(v_shape)}")
    kb, h_kv, n_k, dk = (int(x) for x in k_shape)
    if min(b, h, n_q, d) < 1:
        raise ValueError(f"every dimension of q must be >= 1, got {tuple(q_shape)}")
    if dk != d:
        raise ValueError(f"head dim d mismatch: q has {d}, k and v have {dk}")
    if h_kv < 1 or h % h_kv:
        raise ValueError(f"heads mismatch: q has H = {h} heads, k and v have H_kv = {h_kv}; H_kv must divide H "
                         "(grouped-query attention)")
    if n_k < 1:
        raise ValueError(f"k and v must hold at least one position (Nk or page_size >= 1), got {tuple(k_shape)}")
    if paged:
        if table_shape is None or len(table_shape) != 2 or table_shape[0] != b:
            raise ValueError(f"block_table must have shape (B, max_pages) = ({b}, max_pages), got "
                             f"{None if table_shape is None else tuple(table_shape)}")
        if lengths is None:
            raise ValueError("a paged cache (block_table given) needs cache_seqlens: the pages say where the "
                             "positions are, not how many there are")
        page_size, num_pages, capacity = n_k, kb, int(table_shape[1]) * n_k
        lengths = check_lengths(lengths, b, capacity, f"block table's capacity (max_pages·page_size = "
                                                      f"{table_shape[1]}·{n_k})")
    else:
        if kb != b:
            raise ValueError(f"batch mismatch: q has {b}, k and v have {kb} (a paged cache needs block_table)")
        page_size, num_pages, capacity = None, None, n_k
        lengths = (n_k,) * b if lengths is None else check_lengths(lengths, b, n_k, "cache's Nk")
    pr = checks.check_problem(b, h, n_q, max(1, capacity), d, causal=causal, scale=scale, block_q=block_q,
                              block_k=block_k)
    g = h // h_kv
    if num_splits is None:
        num_splits = default_num_splits(b, h_kv, g * n_q, max(lengths), pr["block_q"], pr["block_k"], num_sms)
    num_splits = used_splits(max(lengths), _int("num_splits", num_splits), pr["block_k"], page_size)
    checks.elements("the partial outputs (num_splits·B·H·Nq·d)", num_splits * b * h * n_q * d)
    return Decode(b, h, h_kv, n_q, capacity, d, pr["causal"], pr["scale"], pr["block_q"], pr["block_k"], lengths,
                  num_splits, page_size, num_pages)


def check_decode_tensors(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, cache_seqlens=None,
                         block_table=None, num_splits=None, dtypes=None, num_sms=NUM_SMS) -> Decode:
    """check_decode on tensors: types, dtypes (q, k, v one of `dtypes`, shared), one device,
    cache_seqlens and block_table int32/int64 tensors with their values checked (read to the host once per version
    where that is a sync: _memo). The CUDA launchers call this too (kernels/_decode.py) and check CUDA last, after
    their own limits."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if dtypes is not None and t.dtype not in dtypes:
            raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; supported: "
                            f"{', '.join(str(x).replace('torch.', '') for x in dtypes)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    lengths = None
    for name, t in (("cache_seqlens", cache_seqlens), ("block_table", block_table)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be an int32 or int64 torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be an int32 or int64 tensor, got {str(t.dtype).replace('torch.', '')}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
    if cache_seqlens is not None:
        if cache_seqlens.dim() != 1:
            raise ValueError(f"cache_seqlens must have shape (B,), got {tuple(cache_seqlens.shape)}")
        lengths = _memo(cache_seqlens, None, lambda t: t.tolist())
    paged = block_table is not None
    p = check_decode(tuple(q.shape), tuple(k.shape), tuple(v.shape), causal=causal, scale=scale, block_q=block_q,
                     block_k=block_k, lengths=lengths, num_splits=num_splits, paged=paged,
                     table_shape=tuple(block_table.shape) if paged else None, num_sms=num_sms)
    if paged:
        check_block_table(_memo(block_table, p.num_pages, lambda t: _first_invalid(t, p.num_pages)), p.num_pages,
                          p.page_size, p.lengths, lambda b, c: int(block_table[b, c]))
    return p


MEMO_DEVICES = ("cuda",)  # where reading an index tensor is a device-to-host sync


def _memo(t, key, compute):
    """compute(t) (a host copy of an index tensor), remembered on t with its version counter where reading t is a
    device-to-host sync. Why: a decode loop passes the same block_table (and, re-reading a step, the same
    cache_seqlens) every step; without the memo each launch would wait for the GPU to drain before it could queue.
    An in-place write bumps t._version and is read again; a write the counter does not see (through .data, DLPack,
    a kernel of one's own) is not: pass a new tensor then. Inference tensors keep no version counter: read each call."""
    if t.device.type not in MEMO_DEVICES or t.is_inference():
        return compute(t)
    memo = getattr(t, "_fa_decode_memo", None)
    if memo is None or memo[0] != (t._version, key):
        memo = t._fa_decode_memo = ((t._version, key), compute(t))
    return memo[1]


def _first_invalid(table, num_pages: int) -> list:
    """Per row, the column of its first entry outside [0, num_pages) (max_pages if none): one host read of B ints."""
    import torch

    if table.shape[1] == 0:
        return [0] * table.shape[0]
    bad = (table < 0) | (table >= num_pages)
    return torch.where(bad.any(1), bad.int().argmax(1), table.shape[1]).tolist()  # argmax: the first bad column


# -- the closed form ------------------------------------------------------------------------------
def terms(p: Decode) -> tuple[dict, dict, dict]:
    """(reads, writes, flops) of the whole problem, in elements and FLOPs: what variants/split_kv.py counts.

    Per nonempty (sequence, Q block, split), summed over kv heads (×H_kv): FA2's tile work (FA2 Alg. 1 lines 8-10
    per K/V block of c columns: matmul 4·d·r·c, exp r·c + r, other 4·r·c + 4·r + 2·d·r) and its epilogue
    (FA2 Alg. 1 lines 12-13: r·d + 2·r). The splits partition each Q block's K/V blocks (a chunk is whole blocks), so over its
    splits Q block i visits n_i = ⌈vis_i/Bc⌉ blocks covering W_i = min(n_i·Bc, L_b) columns, as in FA2, and reads
    Q_i once per nonempty split, s_i = ⌈vis_i/chunk⌉ of them. The merge, per row and S > 1: max over S (S), S
    subtractions and exponentials, a sum (S), log and add (2), S divides, then S·d multiplies and (S-1)·d adds."""
    d, hk, big_s = p.d, p.kv_heads, p.num_splits
    q_rows = k_cols = rw = rn = 0
    for length, count in _length_counts(p.lengths):
        a, b, c, e = block_sums(p, length)  # Σ r W, Σ r n, Σ W, Σ r s
        rw, rn, k_cols, q_rows = rw + count * a, rn + count * b, k_cols + count * c, q_rows + count * e
    rows = p.batch * p.rows
    reads = {"Q": hk * q_rows * d, "K": hk * k_cols * d, "V": hk * k_cols * d}
    writes = {"O": hk * rows * d, "lse": hk * rows}
    mm = hk * 4 * d * rw
    ex = hk * (rw + rn)
    other = hk * (4 * rw + 4 * rn + 2 * d * rn + q_rows * (d + 2))
    if big_s > 1:
        n = hk * rows * big_s
        reads.update({"O_split": n * d, "lse_split": n})
        writes.update({"O_split": n * d, "lse_split": n})
        ex += n
        other += hk * rows * (4 * big_s + 2 + (2 * big_s - 1) * d)
    return reads, writes, {"matmul": mm, "exp": ex, "other": other}


def block_sums(p: Decode, length: int) -> tuple[int, int, int, int]:
    """(Σ_i r_i W_i, Σ_i r_i n_i, Σ_i W_i, Σ_i r_i s_i) over the packed Q blocks i of one sequence of `length`.
    Non-causal every block sees all L; causal with g = 1 the packed rows are the queries and the sums are FA2's
    (counting.tiling.tile_sums, O(log) steps; the splits' are its Σ r n at Bc = chunk); causal with g > 1 (a block
    may hold the end of one head's queries and the start of the next's) sums the blocks, a million at a time."""
    if length == 0:
        return 0, 0, 0, 0
    rows, chunk, bc = p.rows, p.chunk, p.block_k
    if not p.causal:
        n, s = cdiv(length, bc), cdiv(length, chunk)
        return rows * length, rows * n, p.t_r * length, rows * s
    if p.group == 1:
        ts = tile_sums(Tiling(p.n_q, length, p.block_q, bc, True))
        return ts.rc, ts.r, ts.c, tile_sums(Tiling(p.n_q, length, p.block_q, chunk, True)).r
    import numpy as np

    out = [0, 0, 0, 0]
    for first in range(0, p.t_r, 1 << 20):
        r0 = np.arange(first, min(p.t_r, first + (1 << 20)), dtype=np.int64) * p.block_q
        r1 = np.minimum(r0 + p.block_q, rows)
        last_q = np.where(r0 // p.n_q != (r1 - 1) // p.n_q, p.n_q - 1, (r1 - 1) % p.n_q)
        vis = np.clip(last_q + 1 + length - p.n_q, 0, length)
        r, n, s = r1 - r0, -(-vis // bc), -(-vis // chunk)
        w = np.minimum(n * bc, length)
        for k, x in enumerate((r * w, r * n, w, r * s)):
            out[k] += int(x.sum())
    return tuple(out)


def _length_counts(lengths) -> list[tuple[int, int]]:
    """(L, how many sequences have it): one pass per distinct length (B sequences often share one)."""
    out: dict[int, int] = {}
    for n in lengths:
        out[n] = out.get(n, 0) + 1
    return sorted(out.items())


def attention_flops(p: Decode) -> int:
    """4·d per visible (query head, query, position) triple: the work TFLOP/s figures divide by (per-sequence
    lengths and the causal mask of each sequence)."""
    return 4 * p.d * p.heads * sum(count * visible_pairs(p.n_q, n, p.causal) if n else 0
                                   for n, count in _length_counts(p.lengths))


def min_hbm_bytes(p: Decode, itemsize: int) -> int:
    """What any decode kernel must move: each sequence's K and V once per kv head (L_b positions), Q read for the rows
    that see a position, O and lse written once."""
    kv = 2 * p.kv_heads * sum(p.lengths) * p.d * itemsize
    q_rows = sum(count * (seen_rows(p.n_q, n, p.causal) if n else 0) for n, count in _length_counts(p.lengths))
    return kv + p.heads * (q_rows * p.d * itemsize + p.batch * p.n_q * (p.d * itemsize + 4))
