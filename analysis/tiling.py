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

    def visited(self):
        """All visited tiles (i, j) in row-major order."""
        for i in range(self.t_r):
            for j in self.k_blocks(i):
                yield i, j


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


def tile_sums(t: Tiling) -> TileSums:
    """TileSums of `t` (one pass over the Q blocks)."""
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
