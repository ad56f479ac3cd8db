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
