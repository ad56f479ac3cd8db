"""Which positions each rank holds: `shard` cuts a whole sequence into a rank's piece, `unshard` puts the pieces back.

    q_r = shard(q, rank, world, "zigzag")           # (B, H, n_r, d): chunks rank and 2P-1-rank of 2P
    o = unshard([o_0, o_1, ..., o_{P-1}], "zigzag")  # (B, H, N, d) in the original order

The layouts (counting/ring.py, where the sizes are computed):
  contiguous  rank r holds [⌊rN/P⌋, ⌊(r+1)N/P⌋): one piece; a view of x.
  zigzag      N cut into 2P chunks the same way; rank r holds chunk r and chunk 2P-1-r, concatenated, so under the
              causal mask each rank has one early chunk (little to see) and one late chunk (much to see).
Lengths that P (or 2P) does not divide give chunks that differ by one position (ragged chunks, no padding): the ring
passes blocks of their own sizes, which every rank knows from N and the layout.
"""
from __future__ import annotations

import torch

from counting import ring as counts


def shard(x: torch.Tensor, rank: int, world: int, layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Rank `rank`'s piece of x along `dim` (the sequence dimension, default -2 of (B, H, N, d))."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"shard takes a torch.Tensor, got {type(x).__name__}")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank must be in 0..{world - 1}, got {rank!r}")
    pieces = [x.narrow(dim, a, b - a) for a, b in counts.positions(x.shape[dim], world, layout, rank)]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim)


def unshard(chunks: list[torch.Tensor], layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The whole sequence from every rank's piece (in rank order), the inverse of `shard`."""
    world = len(chunks)
    if world == 0:
        raise ValueError("unshard needs the pieces of at least one rank")
    n = sum(c.shape[dim] for c in chunks)
    held = counts.chunks(n, world, layout)
    for r, (c, want) in enumerate(zip(chunks, held)):
        if c.shape[dim] != sum(want):
            raise ValueError(f"unshard: rank {r}'s piece holds {c.shape[dim]} positions, but layout {layout!r} "
                             f"of N={n} over {world} ranks gives it {sum(want)}")
    if layout == "contiguous":
        return torch.cat(chunks, dim)
    early = [c.narrow(dim, 0, h[0]) for c, h in zip(chunks, held)]
    late = [c.narrow(dim, h[0], h[1]) for c, h in zip(chunks, held)]
    return torch.cat(early + late[::-1], dim)
