"""How many splits a split-KV decode launch uses (Flash-Decoding; issue 44): torch-free, imported by the kernels'
launchers and the bench. Counting imports nothing above it."""
from __future__ import annotations

import math

SMS = 132  # H100 / H200 SXM


def num_splits(b: int, h_kv: int, row_tiles: int, n_k: int, block_k: int, sms: int = SMS) -> int:
    """Enough CTAs to fill the SMs twice over, no more: S = clamp(ceil(2 sms / (B H_kv row_tiles)), 1, Tc) where
    Tc = ceil(n_k / block_k) is the number of Bc-chunks of the longest sequence (a split shorter than one key tile
    only adds merge work)."""
    for name, x in (("b", b), ("h_kv", h_kv), ("row_tiles", row_tiles), ("block_k", block_k), ("sms", sms)):
        if not isinstance(x, int) or x < 1:
            raise ValueError(f"{name} must be a positive int, got {x!r}")
    if not isinstance(n_k, int) or n_k < 0:
        raise ValueError(f"n_k must be a non-negative int, got {n_k!r}")
    ctas = b * h_kv * row_tiles
    return max(1, min(-(-2 * sms // ctas), -(-n_k // block_k)))


def chunk_len(n_k: int, splits: int, block_k: int, page_size: int | None = None) -> int:
    """Positions per split: ceil(n_k / S) rounded up to a multiple of Bc (and of page_size for a paged cache, so a
    split starts on a page: the unit is lcm(Bc, page_size)); at least one unit."""
    unit = block_k if page_size is None else math.lcm(block_k, page_size)
    per = -(-n_k // splits) if n_k else 1
    return max(unit, -(-per // unit) * unit)


def used_splits(n_k: int, chunk: int) -> int:
    """Splits that hold a position of the longest sequence (trailing empty ones are not launched)."""
    return max(1, -(-n_k // chunk))
