"""K/V re-reads that miss the L2, wave by wave (non-causal FA2-style grids), from the reuse distance of
each key block. Used by gpumodel/levels.py; results/ncu_l2_capacity.csv is what it was built for.

The CTAs of a grid with Q blocks fastest run in waves of `slots` = SMs x CTAs/SM; a wave's CTAs sweep the
key blocks j in near lockstep (FA2 Alg. 1 line 6), so re-reads within a wave are L2 hits. A head whose
Q blocks straddle waves w and w+1 is read again by wave w+1 a whole pass later. Between wave w's read of
K_j, V_j of that head and wave w+1's, the L2 sees (forward sweep; a backward sweep gives the same set of
distances, mirrored in j):
    the head's own K/V, all of it (wave w reads blocks j+1.., wave w+1 blocks ..j-1)     kv
    each other head of wave w, its blocks after j                             a x kv x (Tc-1-j)/Tc
    each other head of wave w+1, its blocks before j                          b x kv x j/Tc
    wave w's O tiles (written at its end) and wave w+1's Q tiles (read at its start)   2 x resident x Br x d
The re-read of block j misses when that distance D(j) exceeds the effective capacity (LRU on a stream:
all or nothing); D is linear in j, so the missing blocks are a prefix or a suffix of the sweep, found by bisection.

Checked on the ncu rows (d = 128; effective capacity 36 MiB, fitted on the rows before N = 24k / 48k were
profiled: gpumodel/l2_capacity.py): fa2_wgmma and SDPA flash at N = 16k-64k within 6% (24k and 48k held out);
fa2_tc 1.14-1.18x at N = 16k-32k and 0.71-0.84x at 48k-64k on the same tiling, CTAs/SM and sweep as SDPA flash
(results/gpu_model_known_gaps.json). The ramp the levels used before (misses growing from 0 at the
capacity to all at twice it, on one wave's working set) gave 0.46-0.80x at N = 32k and 64k.

Alignment and the capacity edge (issue 46): the rule is discrete twice over, so the DRAM bytes need not grow with N.
Where Tr divides the slots every wave holds whole heads and nothing is separated; and a straddled head's re-read is
all hits or all misses at the capacity. fa2_wgmma at d = 256, B·H = 128 (one build, Br = 128, 132 CTAs): N = 4096
(Tr = 32) cuts a head at 28 of its 31 wave boundaries, each re-read ~36.5 MiB after its first read, just over the
36 MiB: 1.19 GB; N = 4097 (Tr = 33, 132 = 4 x 33) separates nothing: 1.08 GB, the compulsory bytes. The alignment is
the kernels' (Q blocks fastest, equal CTAs in lockstep: a persistent CTA c takes tiles c, c + 132, ...); the size of
the step is not measured: the one ncu row at that shape (B·H = 32, results/ncu_levels_d256.csv and ncu_flash256.csv)
read 1.014x the compulsory bytes where the model has 1.094x (rows with no miss read 0.95-0.97x: O still dirty in the
L2 at the end), and lab/l2_sim.py's LRU walk loses every such miss once the CTAs' pace spreads by ±5%. So at the edge
the strict rule overstates the misses, about twice here; a softer edge would need the pace or a capacity spread
measured (an ncu pair at N = 4096 / 4097, B·H = 128, d = 256 would size it), not a constant refitted on these rows.
tests/test_gpu_model_levels.py holds the mechanism.
"""
from __future__ import annotations

import math

import numpy as np


def missed_blocks(c0: float, slope: float, t_c: int, cap: float) -> int:
    """#{j in [0, Tc): c0 + slope * j > cap}: D is monotone in j, so the misses are a suffix (slope >= 0) or a
    prefix (slope < 0); found by bisection on the same test, so it agrees with counting j by j."""
    def miss(j):
        return c0 + slope * j > cap

    lo, hi = 0, t_c  # the first j where miss(j) changes from the value it has at j = 0
    first = miss(0)
    while lo < hi:
        mid = (lo + hi) // 2
        if miss(mid) != first:
            hi = mid
        else:
            lo = mid + 1
    return lo if first else t_c - lo


def separated_missing_bytes_loop(bh: int, t_r: int, t_c: int, slots: int, kv_bytes: float, qo_bytes: float,
                                 cap: float) -> float:
    """separated_missing_bytes wave by wave: the definition (tests/test_gpu_model_fast.py holds the two equal). A grid
    of B·H = 65,535 heads over 65,536 Q blocks is 32M waves of 132 CTAs: minutes here."""
    ctas = bh * t_r
    if t_r <= 1 or ctas <= slots or t_c <= 0:
        return 0.0
    per_block = kv_bytes / t_c
    missing = 0.0
    start = 0
    prev = None  # (first head, last head) of the previous wave
    while start < ctas:
        end = min(ctas, start + slots)
        cur = (start // t_r, (end - 1) // t_r)
        if prev is not None and prev[1] == cur[0]:  # that head straddles the two waves
            a, b = prev[1] - prev[0], cur[1] - cur[0]  # other heads in wave w, in wave w+1
            missing += _straddle_misses(a, b, t_c, kv_bytes, qo_bytes, cap) * per_block
        prev = cur
        start = end
    return missing


def _straddle_misses(a: int, b: int, t_c: int, kv_bytes: float, qo_bytes: float, cap: float) -> int:
    """Key blocks of a head straddling waves w and w+1 whose re-read misses, with a other heads in wave w and b in w+1
    (the module docstring's reuse distance D(j) = c0 + slope * j)."""
    c0 = kv_bytes + qo_bytes + a * kv_bytes * (t_c - 1) / t_c
    slope = (b - a) * kv_bytes / t_c
    return missed_blocks(c0, slope, t_c, cap)


def separated_missing_bytes(bh: int, t_r: int, t_c: int, slots: int, kv_bytes: float, qo_bytes: float,
                            cap: float) -> float:
    """Bytes of K/V re-reads that miss the L2 over the whole grid (bh x Tr CTAs, Q blocks fastest).

    kv_bytes: one head's K and V; qo_bytes: a wave's Q tiles read plus O tiles written.
    Closed over the waves (separated_missing_bytes_loop walks them): wave w (full, w >= 1) starts at CTA w·slots, at
    r = w·slots mod Tr into a head; it straddles a head when r != 0, with a = ⌈(slots - r) / Tr⌉ other heads in wave
    w - 1 and b = ⌊(r + slots - 1) / Tr⌋ in wave w. r runs through a period of P = Tr / gcd(slots, Tr) waves, so the
    misses are Σ over one period's distinct (a, b) of (waves with them) x _straddle_misses(a, b), the last wave (part
    full) on its own: O(P) integer work and a few bisections, the same count as the walk (each block's miss decided by
    the same floats), times the bytes of a block once."""
    ctas = bh * t_r
    if t_r <= 1 or ctas <= slots or t_c <= 0:
        return 0.0
    s = int(slots)
    waves = -(-ctas // s)
    last_full = waves - 1 if ctas % s == 0 else waves - 2  # the full waves w = 1 .. last_full (wave 0 has no previous)
    period = t_r // math.gcd(s, t_r)
    if period > MAX_PERIOD:
        return separated_missing_bytes_loop(bh, t_r, t_c, slots, kv_bytes, qo_bytes, cap)
    count = 0
    w = np.arange(1, min(period, last_full) + 1, dtype=np.int64)  # one period of residues (empty: no full wave)
    r = w * s % t_r
    weight = last_full // period + (w <= last_full % period)  # waves of each residue among 1 .. last_full
    keep = r != 0  # r = 0: the wave starts a head, nothing straddles
    if keep.any():
        a, b = -((r[keep] - s) // t_r), (r[keep] + s - 1) // t_r
        pairs, inverse = np.unique(np.stack((a, b)), axis=1, return_inverse=True)
        weights = np.zeros(pairs.shape[1], dtype=np.int64)
        np.add.at(weights, inverse.reshape(-1), weight[keep])
        for (pa, pb), n in zip(pairs.T.tolist(), weights.tolist()):  # a few pairs: a, b take two values each at most
            count += n * _straddle_misses(pa, pb, t_c, kv_bytes, qo_bytes, cap)
    if last_full == waves - 2 and waves >= 2:  # the last wave, part full
        start = (waves - 1) * s
        if start % t_r:
            a = (start - 1) // t_r - (start - s) // t_r
            b = (ctas - 1) // t_r - start // t_r
            count += _straddle_misses(a, b, t_c, kv_bytes, qo_bytes, cap)
    return count * (kv_bytes / t_c)


# waves in one period of the residues (Tr / gcd(slots, Tr)) past which separated_missing_bytes walks the waves instead:
# the report's rows stop at 65,536 Q blocks (analysis/report_gpu.py MAX_MODEL_Q_BLOCKS)
MAX_PERIOD = 1 << 24
