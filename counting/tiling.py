"""Block geometry shared by every tier: block counts, tails, and which tiles the causal mask hides.

Causal attention here is aligned bottom-right (FlashAttention >= 2.1): query row i sees key column j
iff j <= i + (Nk - Nq). With Nq == Nk this is the usual lower triangle. A row i < Nq - Nk sees no key.

Everything is plain integer arithmetic so the references, the closed forms and the kernel launchers
agree on the same tiles.
"""
from __future__ import annotations

from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def warpgroup_steps(m0: int, steps: int, n_q: int, n_k: int, block_k: int, nwg: int) -> list[int | None]:
    """The key blocks each 64-row consumer warpgroup of a causal Q block (rows m0.., `steps` key blocks) runs when a
    warpgroup walks the blocks wholly past its own last row (fa2_wgmma WG_CAUSAL_SKIP, v11): max(1, its own key blocks)
    where the block has more than one (the tile's last warpgroup runs them all); None for a warpgroup with no row
    below Nq. kernels.fa2_wgmma.causal_walk_steps and the GPU model's causal_walk both count with it."""
    out = []
    for cg in range(nwg):
        if m0 + 64 * cg >= n_q:
            out.append(None)
            continue
        vis = max(0, min(n_k, min(m0 + 64 * cg + 64, n_q) + n_k - n_q))
        out.append(max(1, cdiv(vis, block_k)) if steps > 1 and nwg > 1 else steps)
    return out


def half_first_steps(m0: int, steps: int, n_q: int, n_k: int, block_k: int, nwg: int, causal: bool,
                     walk: bool) -> list[tuple[bool, int] | None]:
    """Per 64-row consumer warpgroup of a Q block (rows m0.., `steps` key blocks): (half, its steps), half when its
    first key block (the last it sees; the kernels run j = T-1 down to 0) is visible to its rows in its first half at
    most, so fa2_wgmma's HALF_DIAG (v14) runs that block's S and softmax at half width, and its P V too unless it is
    the warpgroup's only step (then P V runs whole over P's zeroed half); None for a warpgroup with no row below Nq.
    walk: WG_CAUSAL_SKIP (the warpgroup's first block is then its own last visible one). fa2_wgmma_tma.cu computes the
    same condition (tests/test_gpu_model.py checks it against the mask, row by row)."""
    out = []
    for cg in range(nwg):
        if m0 + 64 * cg >= n_q:
            out.append(None)
            continue
        vis = min(n_k, min(m0 + 64 * cg + 64, n_q) + n_k - n_q) if causal else n_k
        tw = max(1, cdiv(max(0, vis), block_k)) if walk and causal and steps > 1 and nwg > 1 else steps
        out.append((steps > 0 and vis - (tw - 1) * block_k <= block_k // 2, tw))
    return out


@dataclass(frozen=True)
class Tiling:
    """Tr x Tc grid of Br x Bc tiles over an Nq x Nk score matrix (FA1/FA2 notation)."""

    n_q: int
    n_k: int
    block_q: int  # Br
    block_k: int  # Bc
    causal: bool = False

    @property
    def offset(self) -> int:
        """Diagonal offset Nk - Nq of the bottom-right causal mask."""
        return self.n_k - self.n_q

    @property
    def t_r(self) -> int:  # Tr = ceil(Nq / Br)
        return cdiv(self.n_q, self.block_q)

    @property
    def t_c(self) -> int:  # Tc = ceil(Nk / Bc)
        return cdiv(self.n_k, self.block_k)

    def rows(self, i: int) -> tuple[int, int]:
        """Row range [r0, r1) of Q block i (the tail block is shorter)."""
        r0 = i * self.block_q
        return r0, min(r0 + self.block_q, self.n_q)

    def cols(self, j: int) -> tuple[int, int]:
        """Column range [c0, c1) of K/V block j."""
        c0 = j * self.block_k
        return c0, min(c0 + self.block_k, self.n_k)

    def visible_cols(self, i: int) -> int:
        """Number of leading key columns that some row of Q block i sees (its last row sees most)."""
        if not self.causal:
            return self.n_k
        _, r1 = self.rows(i)
        return max(0, min(self.n_k, r1 + self.offset))

    def k_blocks(self, i: int) -> range:
        """K/V blocks j that Q block i visits; fully hidden blocks are skipped (always a prefix)."""
        return range(cdiv(self.visible_cols(i), self.block_k))

    def q_blocks(self, j: int) -> range:
        """Q blocks i that visit K/V block j (FA1's inner loop); always a suffix."""
        if not self.causal:
            return range(self.t_r)
        c0, _ = self.cols(j)
        # block i is visited iff r1 + offset > c0 (its last row sees column c0); r1 = (i + 1) Br
        # except for the tail block, whose r1 = Nq always sees every column (Nq + offset = Nk > c0).
        first = min(max(0, (c0 - self.offset) // self.block_q), self.t_r - 1)
        return range(first, self.t_r)

    def needs_mask(self, i: int, j: int) -> bool:
        """True when tile (i, j) is visited but some of its entries are hidden."""
        if not self.causal:
            return False
        r0, _ = self.rows(i)
        _, c1 = self.cols(j)
        return c1 - 1 > r0 + self.offset

    def masked_steps(self, i: int, every_if_ragged: bool = False) -> int:
        """Visited tiles of Q block i whose key block a kernel masks: it holds the Nk tail or a column past some row's
        causal limit (fa2_wgmma's need_mask, FA2's masking steps; the rows tested from the block's first, as
        needs_mask). every_if_ragged: a kernel that masks every step when Nk is not a multiple of Bc (cuDNN, from its
        timings: gpumodel/builds.py _sdpa_cudnn)."""
        n = len(self.k_blocks(i))
        ragged = self.n_k % self.block_k != 0
        if every_if_ragged and ragged:
            return n
        # block j is free of the causal mask iff its last column c1 - 1 <= r0 + offset, i.e. (j + 1) Bc <= r0 + offset + 1
        # (a ragged last block, c1 = Nk < (j + 1) Bc, is masked for its tail anyway)
        plain = min(n, max(0, (self.rows(i)[0] + self.offset + 1) // self.block_k)) if self.causal else n
        if ragged and n == self.t_c and plain == n:
            plain -= 1
        return n - plain

    def visited(self):
        """All visited tiles (i, j) in row-major order."""
        for i in range(self.t_r):
            for j in self.k_blocks(i):
                yield i, j

    def block_counts(self, every_if_ragged: bool = False):
        """(len(k_blocks(i)), masked_steps(i, every_if_ragged)) for every Q block i at once, as two int64 NumPy arrays:
        the same integers as those methods (tests/test_gpu_model.py holds them equal), in O(Tr) array operations
        rather than Tr Python calls (the GPU model's prepare walks up to 65,536 Q blocks). None where Nq or Nk is too
        close to 2**63 for int64 (the caller loops over the methods then)."""
        import numpy as np

        if max(self.n_q, self.n_k) + self.block_q + self.block_k >= 1 << 62:
            return None
        bq, bc, n_k, off = self.block_q, self.block_k, self.n_k, self.offset
        r0 = np.arange(self.t_r, dtype=np.int64) * bq
        vis = np.maximum(0, np.minimum(n_k, np.minimum(r0 + bq, self.n_q) + off)) if self.causal else \
            np.full(self.t_r, n_k, dtype=np.int64)
        n = -(-vis // bc)
        ragged = n_k % bc != 0
        if every_if_ragged and ragged:
            return n, n.copy()
        plain = np.minimum(n, np.maximum(0, (r0 + off + 1) // bc)) if self.causal else n.copy()
        if ragged:
            plain = np.where((n == self.t_c) & (plain == n), plain - 1, plain)
        return n, n - plain


@dataclass(frozen=True)
class TileSums:
    """Sums over the visited tiles (i, j) of a Tiling: every closed form is a polynomial in these.

    Per Q block i: r_i rows, n_i visited K blocks (a prefix), W_i = min(n_i·Bc, Nk) visited columns,
    c0_i the width of its first visited block (0 when n_i = 0). Σ over visited tiles of c is Σ_i W_i
    because the visited blocks of a row are a prefix; likewise Σ over tiles of r·c is Σ_i r_i W_i.
    """

    tiles: int  # Σ_i n_i            visited tiles
    r: int  # Σ_i n_i r_i            Σ_tiles r   (row visits: each visited tile reads its Q rows)
    c: int  # Σ_i W_i                Σ_tiles c   (column visits)
    rc: int  # Σ_i r_i W_i           Σ_tiles r·c (score entries computed, masked ones included)
    r_later: int  # Σ_i r_i·max(n_i - 1, 0)   rows × blocks after the first (rescale steps)
    r_tri: int  # Σ_i r_i·n_i(n_i - 1)/2      rows × pairs of blocks (eager rescale of earlier f)
    r_c0: int  # Σ_i r_i·c0_i                 rows × the first block's width
    k_blocks: int  # K/V blocks that at least one Q block visits


def _tile_sums_loop(t: Tiling) -> TileSums:
    """TileSums of `t` by one pass over the Q blocks: O(Tr), the test oracle of `tile_sums`."""
    bc, n_k = t.block_k, t.n_k
    c_first = min(bc, n_k)
    tiles = r_ = c = rc = later = tri = rc0 = n_max = 0
    for i in range(t.t_r):
        r0, r1 = t.rows(i)
        r = r1 - r0
        n = cdiv(t.visible_cols(i), bc)
        w = min(n * bc, n_k)
        tiles += n
        r_ += n * r
        c += w
        rc += r * w
        later += r * max(n - 1, 0)
        tri += r * n * (n - 1) // 2
        rc0 += r * (c_first if n else 0)
        n_max = max(n_max, n)
    return TileSums(tiles, r_, c, rc, later, tri, rc0, n_max)


def floor_sums(a: int, b: int, c: int, n: int) -> tuple[int, int, int]:
    """(Σ f, Σ x·f, Σ f²) over x = 0..n of f = ⌊(a·x + b)/c⌋, for a, b >= 0, c > 0, n >= 0.

    The "Euclid-like" recursion (a, c) -> (c mod a, a): O(log(max(a, c))) steps, exact integers.
    """
    if n < 0:
        return 0, 0, 0
    s1 = n * (n + 1) // 2  # Σ x
    s2 = n * (n + 1) * (2 * n + 1) // 6  # Σ x²
    if a == 0:
        q = b // c
        return (n + 1) * q, q * s1, (n + 1) * q * q
    if a >= c or b >= c:
        qa, qb = a // c, b // c
        f, g, h = floor_sums(a % c, b % c, c, n)
        return (f + qa * s1 + qb * (n + 1),
                g + qa * s2 + qb * s1,
                h + 2 * qb * f + 2 * qa * g + qa * qa * s2 + qb * qb * (n + 1) + 2 * qa * qb * s1)
    m = (a * n + b) // c  # the largest f; every f is in 0..m
    if m == 0:
        return 0, 0, 0
    f2, g2, h2 = floor_sums(c, c - b - 1, a, m - 1)
    f = n * m - f2
    g = (m * n * (n + 1) - h2 - f2) // 2
    h = n * m * (m + 1) - 2 * g2 - 2 * f2 - f
    return f, g, h


def tile_sums(t: Tiling) -> TileSums:
    """TileSums of `t` in time independent of Nq, Nk (O(log) integer steps; `_tile_sums_loop` is
    the per-block definition it is held equal to).

    Non-causal, every Q block visits all Tc blocks. Causal (bottom-right), the last Q block always
    sees every key (its last row is Nq - 1 and Nq - 1 + Nk - Nq = Nk - 1), so it is added on its own;
    each earlier (full, Br-row) block i sees x_i = (i + 1)·Br + Nk - Nq columns and visits
    n_i = ⌈x_i / Bc⌉ blocks, 0 while x_i <= 0 (blocks whose rows all see no key). Over the full blocks
    with x_i > 0, n_i = ⌊(Br·j + b) / Bc⌋ for j = 0, 1, ...: Σ n_i and Σ n_i² come from
    `floor_sums`; W_i = n_i·Bc except the blocks that reach K's tail block (n_i = Tc), clipped to Nk.
    """
    br, bc, n_q, n_k = t.block_q, t.block_k, t.n_q, t.n_k
    t_r, t_c = t.t_r, t.t_c
    c_first = min(bc, n_k)
    if not t.causal:
        return TileSums(tiles=t_r * t_c, r=t_c * n_q, c=t_r * n_k, rc=n_q * n_k,
                        r_later=n_q * (t_c - 1), r_tri=n_q * t_c * (t_c - 1) // 2,
                        r_c0=n_q * c_first, k_blocks=t_c)
    off = t.offset
    # the last Q block: r_last rows, all Tc blocks, W = Nk
    r_last = n_q - (t_r - 1) * br
    tiles, r_, c, rc = t_c, t_c * r_last, n_k, r_last * n_k
    later, tri, rc0 = r_last * (t_c - 1), r_last * t_c * (t_c - 1) // 2, r_last * c_first
    # full blocks i in [i_min, Tr - 1) see x_i > 0 columns; earlier ones see none (n_i = 0)
    i_min = max(0, (-off) // br) if off < 0 else 0
    count = t_r - 1 - i_min
    if count > 0:
        b = (i_min + 1) * br + off + bc - 1  # n_i = ⌊(x_i + Bc - 1)/Bc⌋, x_i = (i + 1)·Br + Nk - Nq
        sum_n, _, sum_n2 = floor_sums(br, b, bc, count - 1)
        # blocks with n_i = Tc (x_i > (Tc - 1)·Bc) get W = Nk rather than Tc·Bc
        i_clip = max(i_min, ((t_c - 1) * bc - off) // br)
        clipped = max(0, t_r - 1 - i_clip)
        sum_w = bc * sum_n - (t_c * bc - n_k) * clipped
        tiles += sum_n
        r_ += br * sum_n
        c += sum_w
        rc += br * sum_w
        later += br * (sum_n - count)  # every one of these blocks has n_i >= 1
        tri += br * (sum_n2 - sum_n) // 2
        rc0 += br * c_first * count
    return TileSums(tiles, r_, c, rc, later, tri, rc0, t_c)
