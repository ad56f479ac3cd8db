"""The L2 residency rules checked by walking the accesses themselves: an event-level LRU simulation of one grid.

    PYTHONPATH=. python -m analysis.l2_sim --kernel sdpa_flash --batch 4 --heads 16 --seq-len 4096 --head-dim 128 --causal

analysis/levels.py sends a K/V re-read to DRAM by rules about reuse distance: analysis/residency.py's closed rule
for non-causal grids (waves in lockstep, a head straddling two waves re-read a pass later) and a ramp on one wave's
working set for causal ones. This walks what those rules summarise, so either can be held to it:
  - the CTAs (one Q block i of one head each, FA2 Alg. 1 line 4) are list-scheduled in launch order (Q blocks
    fastest, the descriptor's causal_order) onto SMs x CTAs/SM slots; a CTA takes its key steps plus `overhead`
    steps (prologue and epilogue);
  - it reads Q_i at its start, K_j and V_j at an even pace over its steps (FA2 Alg. 1 lines 6-8; j ascending), and
    writes O_i at its end (line 12);
  - the L2 is one LRU of the effective capacity (analysis/l2_capacity.py) over those tiles, byte-weighted.
A re-read of K_j, V_j that is not resident is a miss: DRAM bytes over the compulsory ones.

What it showed (stop 29; tests/test_l2_sim.py holds the first two):
  - non-causal: it agrees with residency.py's closed rule to a few per cent (fa2_tc's tiling at N = 16k-32k), an
    independent check of that rule;
  - causal, N = 4096 (SDPA flash, the rows ncu has at 0.83x / 0.89x of the model at d = 128 / 256): no re-read is
    more than ~4 MiB from its last use in either launch order, so no capacity rule gives SDPA flash's excess
    (+56 MB at d = 128, +34 MB at d = 256; fa2_tc, heaviest first, +9 MB). The model's compulsory figure is what
    LRU on this schedule gives; the excess needs CTAs that run at very different paces (here a per-CTA pace
    spread of +-50% or more at 36 MiB, `pace_spread`) or an L2 that is not LRU on whole tiles.
Persistent and cluster grids are not walked (their tile order is the scheduler's): ValueError.
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import OrderedDict
from dataclasses import dataclass

from analysis.tiling import Tiling

MAX_EVENTS = 5_000_000  # about 10 s of walking


@dataclass(frozen=True)
class SimResult:
    compulsory_bytes: int  # Q, K, V read once, O written once
    reread_bytes: int  # K/V requests after a head's first read of each block
    missed_bytes: int  # of those, the ones not resident in the LRU: DRAM over compulsory
    capacity_bytes: int


def accesses(bh: int, n_q: int, n_k: int, block_q: int, block_k: int, d: int, item: int, slots: int,
             causal: bool = False, heaviest_first: bool = False, overhead: float = 1.0,
             pace_spread: float = 0.0, seed: int = 0) -> list:
    """(time, order, key, bytes) of every tile access of the grid, sorted by time. pace_spread: each CTA runs at a
    pace drawn uniformly from 1 +- spread / 2 (0: every step takes one unit)."""
    t = Tiling(n_q, n_k, block_q, block_k, causal)
    if bh * sum(len(t.k_blocks(i)) + 2 for i in range(t.t_r)) > MAX_EVENTS:
        raise ValueError(f"the simulation walks every tile access; this grid has over {MAX_EVENTS:,}")
    kv = 2 * block_k * d * item
    rnd = random.Random(seed)
    free = [(0.0, s) for s in range(max(1, slots))]
    events = []
    for h in range(bh):
        for x in range(t.t_r):
            i = t.t_r - 1 - x if (causal and heaviest_first) else x
            steps = len(t.k_blocks(i))
            r0, r1 = t.rows(i)
            q_tile = (r1 - r0) * d * item
            pace = 1.0 + pace_spread * (rnd.random() - 0.5)
            t0, slot = heapq.heappop(free)
            events.append((t0, 0, ("Q", h, i), q_tile))
            for j in range(steps):
                c0, c1 = t.cols(j)
                events.append((t0 + (overhead / 2 + j + 0.5) * pace, 1, ("KV", h, j), kv * (c1 - c0) // block_k))
            end = t0 + (steps + overhead) * pace
            events.append((end, 2, ("O", h, i), q_tile))
            heapq.heappush(free, (end, slot))
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def simulate(events: list, capacity: int) -> SimResult:
    """Walk `events` through an LRU of `capacity` bytes."""
    lru: OrderedDict = OrderedDict()
    size = compulsory = reread = missed = 0
    seen = set()
    for _, kind, key, nbytes in events:
        first = key not in seen
        if kind == 1 and not first:
            reread += nbytes
        if key in lru:
            lru.move_to_end(key)
            continue
        if first:
            compulsory += nbytes
            seen.add(key)
        elif kind == 1:
            missed += nbytes
        lru[key] = nbytes
        size += nbytes
        while size > capacity:
            size -= lru.popitem(last=False)[1]
    return SimResult(compulsory, reread, missed, capacity)


def simulate_kernel(kernel: str, batch: int, heads: int, n_q: int, n_k: int, d: int, dtype: str = "fp16",
                    causal: bool = False, capacity: int | None = None, gpu: str = "h200", **kw) -> SimResult:
    """simulate() on a registered kernel's own tiling, CTAs/SM and causal launch order (analysis/descriptors.py)."""
    from analysis import closed_forms as cf
    from analysis.descriptors import describe
    from analysis.gpus import get_gpu
    from analysis.levels import effective_l2

    desc = describe(kernel, d=d, dtype=dtype)
    if desc.grid != "q_blocks":
        raise ValueError(f"{kernel}: the simulation walks grids of one Q block per CTA, not {desc.grid!r} grids")
    g = get_gpu(gpu)
    slots = int(g.value("sms", "measured") * desc.ctas_per_sm)
    events = accesses(batch * heads, n_q, n_k, desc.block_q, desc.block_k, d, cf.DTYPES[cf.dtype_name(dtype)],
                      slots, causal, desc.causal_order == "heaviest_first", **kw)
    return simulate(events, effective_l2(g) if capacity is None else capacity)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.l2_sim", description=__doc__.splitlines()[0])
    p.add_argument("--kernel", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--seq-len-k", type=int)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    p.add_argument("--causal", action="store_true")
    p.add_argument("--capacity-mib", type=float, action="append",
                   help="LRU capacity (repeatable); default: the model's effective L2")
    p.add_argument("--pace-spread", type=float, default=0.0)
    a = p.parse_args(argv)
    try:
        from analysis.levels import levels
        from analysis.descriptors import describe
        from analysis.gpus import get_gpu

        n_k = a.seq_len_k or a.seq_len
        for v in (a.batch, a.heads, a.seq_len, n_k, a.head_dim):
            if v < 1:
                raise ValueError("batch, heads, lengths and head dim must be >= 1")
        if a.pace_spread < 0 or a.pace_spread >= 2:
            raise ValueError("--pace-spread must be in [0, 2)")
        caps = [int(c * 2 ** 20) for c in a.capacity_mib] if a.capacity_mib else [None]
        if any(c is not None and c <= 0 for c in caps):
            raise ValueError("--capacity-mib must be > 0")
        lv = levels(describe(a.kernel, d=a.head_dim, dtype=a.dtype), get_gpu("h200"), a.batch, a.heads, a.seq_len,
                    n_k, a.head_dim, a.dtype, a.causal)
        print(f"model (analysis/levels.py): DRAM {lv.dram_bytes / 1e6:.1f} MB, compulsory {lv.compulsory_bytes / 1e6:.1f} MB")
        for cap in caps:
            r = simulate_kernel(a.kernel, a.batch, a.heads, a.seq_len, n_k, a.head_dim, a.dtype, a.causal, cap,
                                pace_spread=a.pace_spread)
            print(f"LRU {r.capacity_bytes / 2 ** 20:6.1f} MiB: K/V re-read {r.reread_bytes / 1e6:9.1f} MB, "
                  f"missed {r.missed_bytes / 1e6:8.1f} MB (DRAM over compulsory)")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
