"""Where the f row of "multiply V once" fits on chip across a thread-block cluster (issue 18), torch-free.

The cluster kernel (kernels/cuda/v_once_cluster.cu) gives one Q block of Br rows to a cluster of
`cluster_size` CTAs; CTA r takes the key blocks r·Tc_cta .. (r+1)·Tc_cta - 1 and keeps its slice of f
(Br x keys_per_cta, input dtype) in its own shared memory beside its Q tile and a ring of K/V stages.
The row maxima and sums, then the partial O's, are reduced across the cluster through distributed
shared memory. This module is the one statement of that budget: the launcher picks the build from it,
the closed forms and the GPU model price it, the report says where it applies.

The constants are the kernel's; change them together with kernels/cuda/v_once_cluster.cu.
"""
from __future__ import annotations

from dataclasses import dataclass

from counting import sm90

# cudaDevAttrMaxSharedMemoryPerBlockOptin on the H100/H200 (sm_90): 227 KB of the SM's 228 KB (counting/sm90.py)
SMEM_PER_CTA = sm90.SMEM_PER_BLOCK
CLUSTER_SIZES = (1, 2, 4, 8, 16)  # 8 is the portable maximum; 16 needs the non-portable opt-in
PORTABLE_MAX = 8
RESERVE = 2688  # v_once_cluster.cu: 1024 B alignment slack of the dynamic base + 128 B mbarriers + the
                # cluster's m / ℓ exchange (2 warpgroups) and the final M / ℓ (6 x 64 float32 = 1536 B)
F32 = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ClusterPlan:
    cluster_size: int
    block_q: int  # Br
    block_k: int  # Bc
    keys_per_cta: int  # a multiple of Bc
    smem_bytes: int  # per CTA
    f_bytes: int  # per CTA: its slice of the f row

    @property
    def key_blocks_per_cta(self) -> int:
        return self.keys_per_cta // self.block_k

    @property
    def portable(self) -> bool:
        return self.cluster_size <= PORTABLE_MAX


def smem_bytes(keys_per_cta: int, d: int, *, block_q: int = 64, block_k: int = 64, stages: int = 2,
               itemsize: int = 2) -> int:
    """Shared memory of one CTA: Q_i, `stages` K/V tiles, the f slice (input dtype), the block maxima
    m_ij (float32, one per row and key block) and the reserve. The partial O (Br x d float32) reuses the
    f slice once the P V products are done, so it is not added (it must fit inside it or the ring)."""
    f = block_q * keys_per_cta * itemsize
    block_maxima = block_q * _cdiv(keys_per_cta, block_k) * F32
    return (block_q * d + stages * block_k * d) * itemsize + f + block_maxima + RESERVE


def plan(n_k: int, d: int, *, block_q: int = 64, block_k: int = 64, stages: int = 2, itemsize: int = 2,
         max_cluster: int = 16, capacity: int = SMEM_PER_CTA) -> ClusterPlan | None:
    """The smallest cluster whose CTAs hold the whole f row of one Q block (None: no cluster does)."""
    if n_k < 1 or d < 1:
        raise ValueError(f"n_k and d must be positive, got n_k={n_k}, d={d}")
    for cs in CLUSTER_SIZES:
        if cs > max_cluster:
            break
        p = at_size(cs, n_k, d, block_q=block_q, block_k=block_k, stages=stages, itemsize=itemsize)
        if p.smem_bytes <= capacity:
            return p
    return None


def max_keys(d: int, cluster_size: int, *, block_q: int = 64, block_k: int = 64, stages: int = 2,
             itemsize: int = 2, capacity: int = SMEM_PER_CTA) -> int:
    """The largest Nk a cluster of `cluster_size` CTAs holds on chip (0 if not even one key block): the most
    key blocks one CTA's shared memory takes, times the CTAs."""
    keys = 0
    while smem_bytes(keys + block_k, d, block_q=block_q, block_k=block_k, stages=stages,
                     itemsize=itemsize) <= capacity:
        keys += block_k
    return keys * cluster_size


# -- the cluster as the reference, the closed forms and the GPU model count it (issue 18 item 2) ---------
UNLIMITED = 1 << 62  # a capacity no working set reaches: "None = an unlimited chip" (one CTA holds the row)


def at_size(cluster_size: int, n_k: int, d: int, *, block_q: int = 64, block_k: int = 64, stages: int = 2,
            itemsize: int = 2) -> ClusterPlan:
    """The split over exactly `cluster_size` CTAs, whether or not it fits (its smem_bytes say)."""
    keys = _cdiv(_cdiv(n_k, cluster_size), block_k) * block_k
    nbytes = smem_bytes(keys, d, block_q=block_q, block_k=block_k, stages=stages, itemsize=itemsize)
    return ClusterPlan(cluster_size, block_q, block_k, keys, nbytes, block_q * keys * itemsize)


def plan_or_largest(n_k: int, d: int, *, block_q: int = 64, block_k: int = 64, itemsize: int = 2,
                    capacity: int | None = None, max_cluster: int = CLUSTER_SIZES[-1]) -> ClusterPlan:
    """plan() against `capacity` (None: unlimited, so one CTA); where no cluster holds the row, the largest
    cluster, whose smem_bytes are then over `capacity` (the caller reports or raises the overflow)."""
    cap = UNLIMITED if capacity is None else capacity
    p = plan(n_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize, max_cluster=max_cluster, capacity=cap)
    if p is not None:
        return p
    largest = max(cs for cs in CLUSTER_SIZES if cs <= max_cluster)
    return at_size(largest, n_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize)


def reference_plan(n_q: int, n_k: int, d: int, *, block_q: int, block_k: int, itemsize: int,
                   capacity: int | None) -> ClusterPlan:
    """plan_or_largest() for the references, the closed forms and the SRAM check: their blocks clipped to
    the problem (Br <= Nq, Bc <= Nk), as every other placement counts a block's actual rows. The kernel's
    own plan (kernels/v_once_cluster.py) keeps its fixed tiles: it allocates them whatever N is."""
    return plan_or_largest(n_k, d, block_q=min(block_q, n_q), block_k=min(block_k, n_k), itemsize=itemsize,
                           capacity=capacity)


def rank_blocks(rank: int, p: ClusterPlan, visited: range) -> range:
    """The key blocks CTA `rank` owns among the visited prefix, as the kernel splits them
    (kernels/cuda/v_once_cluster.cu): evenly, per = ceil(Tc_vis / CS), CTA r taking [r·per, (r+1)·per) ∩ visited,
    so a causal Q block near the top keeps every rank busy. per never exceeds the plan's slots per CTA."""
    per = _cdiv(len(visited), p.cluster_size)
    lo = rank * per
    return range(min(lo, len(visited)), min(lo + per, len(visited)))


def dsmem_bytes(cluster_size: int, rows: int, d: int) -> dict:
    """Bytes one Q block of `rows` rows moves across distributed shared memory, by what they are.

    Reduction 1: every CTA reads the other CS - 1 ranks' m and ℓ (float32, one per row each).
    Reduction 2: CTA r reads the r-th 1/CS share of every other rank's partial O (float32), so the cluster
    moves (CS - 1)·rows·d floats in all, whatever the split. A CTA's own values never cross DSMEM."""
    cs = cluster_size
    return {"m": cs * (cs - 1) * rows * F32, "l": cs * (cs - 1) * rows * F32, "O": (cs - 1) * rows * d * F32}


def most_keys(d: int, cluster_size: int = CLUSTER_SIZES[-1], *, block_q: int = 64, block_k: int = 64,
              itemsize: int = 2, capacity: int = SMEM_PER_CTA) -> int:
    """counting.max_keys by bisection (max_keys steps one key block at a time: slow at Bc = 1)."""
    lo, hi = 0, capacity // max(1, block_q * itemsize) // block_k + 1  # key blocks per CTA: fits(lo), not hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        fits = smem_bytes(mid * block_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize) <= capacity
        lo, hi = (mid, hi) if fits else (lo, mid)
    return lo * block_k * cluster_size


def check_cluster_holds(n_k: int, d: int, block_q: int, block_k: int, itemsize: int, capacity: int) -> None:
    """ValueError (one line) when no cluster of up to 16 CTAs holds the f row at these blocks."""
    if plan(n_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize, capacity=capacity) is None:
        most = most_keys(d, block_q=block_q, block_k=block_k, itemsize=itemsize, capacity=capacity)
        raise ValueError(f"placement cluster at Nk={n_k}, d={d}: no cluster of up to {CLUSTER_SIZES[-1]} "
                         f"CTAs holds the f row of a {block_q}-row Q block in {capacity:,} B per CTA (at most "
                         f"{most:,} keys); use placement auto or hbm")
