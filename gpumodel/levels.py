"""Three levels of memory traffic for one kernel build on one problem.

    requests  the papers' count (FA1 Theorem 2, FA2 section 3): every byte a thread block asks global
              memory for, as if there were no cache. `counting.closed_forms` at the kernel's own Br, Bc.
    l2        L2 request bytes: what the SMs send to the L2 (the SM-side crossbar counters). A FlashAttention
              kernel has no L1 reuse across its CTAs (cp.async.cg and TMA bypass L1) and S/P/O stay in
              registers or smem, so this equals `requests` at the real tiling (TMA or cp.async move the
              same bytes; what differs is who issues them), plus the local-memory level: the register
              spills of 255-register builds, stored through L1 to the L2 (gpumodel/local_memory.py).
    dram      DRAM bytes, from an L2 residency model: every input byte is read once (compulsory) and
              every output written once; a re-read (K/V by the next Q block, a spilled f / S / P / O
              row read back) is an L2 hit when the data touched between the two uses fits the
              effective L2 capacity, else it goes to DRAM again (miss_fraction: a ramp from 0 at the
              capacity to all at twice it). Between two reads of K_j by Q blocks of one head, the resident CTAs touch the
              K/V of the heads in flight, ⌈resident CTAs / Tr⌉ of them (Q blocks are launched
              fastest), and the Q tiles they stream; a spilled row is read back after every resident CTA has written its own.

A cluster kernel (grid "clusters", v_once placement "cluster") is one Q block per cluster of CS CTAs: its
slots are the clusters resident at once (gpumodel/cluster_model.py), each CTA streams its own Q tile.

Only re-reads separated by a wave boundary can miss: co-resident Q blocks of one head read K_j together.
Non-causal q_blocks / persistent grids: gpumodel/residency.py counts, per head straddling two waves, the
key blocks whose reuse distance exceeds the capacity (strict LRU); causal grids and FA1's keep the ramp
on one wave's working set times separated_share. Effective L2 capacity: a fitted share of the L2 the GPU
reports (gpumodel/l2_capacity.py: 0.60 of the H200's 60 MB, between half, every line held in both partitions
(H100 whitepaper: each partition caches data for the SMs of its GPCs), and all of it). DRAM writes: the ncu
counters (results/tc_ncu*.csv) see 0.85-0.9 of O written within the kernel (the rest is still dirty in L2 at its end); the model counts every output byte.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from counting import closed_forms as cf
from counting.cluster import SMEM_PER_CTA
from counting.tiling import Tiling, cdiv, tile_sums
from gpumodel.cluster_model import active_clusters
from gpumodel.local_memory import local_bytes
from gpumodel.residency import separated_missing_bytes

# The effective L2 capacity's fitted share (gpumodel/l2_capacity.py fits it and writes this file; the levels read the
# file, they do not import the fit)
L2_FIT_FILE = Path(__file__).resolve().parent.parent / "results" / "l2_capacity_fit.json"
DEFAULT_L2_SHARE = 0.5  # without a fit: every line held in both partitions


@lru_cache(maxsize=1)
def fitted_l2_share() -> float:
    """The fitted share of the reported L2 (results/l2_capacity_fit.json), else DEFAULT_L2_SHARE."""
    try:
        return float(json.loads(L2_FIT_FILE.read_text())["share_of_l2"])
    except (OSError, KeyError, ValueError):
        return DEFAULT_L2_SHARE


l2_share_override: list[float] = []  # the fit (gpumodel/l2_capacity.py) scans shares through this


def l2_share() -> float:
    return l2_share_override[-1] if l2_share_override else fitted_l2_share()


@dataclass(frozen=True)
class Levels:
    requests_bytes: int  # the papers' count at the kernel's Br, Bc (global-memory requests, no cache)
    l2_bytes: int  # SM -> L2 requests
    dram_bytes: int
    dram_read_bytes: int
    dram_write_bytes: int
    compulsory_bytes: int  # Q, K, V read once, O and lse written once
    l2_capacity_bytes: int
    kv_working_set_bytes: int
    spill_working_set_bytes: int
    resident_ctas: int
    heads_in_flight: int
    local_bytes: int = 0  # spill stores, L1 -> L2 (part of l2_bytes; none of it counted in DRAM)
    dsmem_bytes: int = 0  # across a cluster's distributed shared memory (placement "cluster"): no L2/DRAM byte

    def as_dict(self) -> dict:
        return asdict(self)


def miss_fraction(working_set: float, capacity: float) -> float:
    """Share of re-reads that go to DRAM: 0 while the reuse distance fits, all of it at twice the
    capacity (LRU on a streaming pattern misses everything once over; the ramp stands for the spread
    of reuse distances between CTAs that do not march in lockstep)."""
    return min(1.0, max(0.0, working_set / capacity - 1.0))


# key blocks a Q block visits, at most, for the eager spilled f row's reuse model (_eager_miss: arrays of that length)
MAX_EAGER_K_BLOCKS = 1 << 22


def _eager_miss_loop(t: Tiling, per_block_ws: int, kv_ws: int, cap: int) -> float:
    """The share of the eager rescale's re-reads of a spilled f row that miss: at key block n a Q block re-touches its
    n earlier blocks, whose reuse distance is the resident CTAs' f prefixes (n blocks each: n x per_block_ws) and the
    K/V working set; weighted by the blocks so rescaled. Block by block: the definition _eager_miss computes with arrays
    (tests/test_gpu_model_fast.py holds the two equal)."""
    visits = [len(t.k_blocks(i)) for i in range(t.t_r)]
    reach = [0] * (max(visits, default=0) + 1)  # reach[n]: Q blocks that visit more than n blocks
    for v in visits:
        reach[v - 1 if v else 0] += 1 if v else 0
    for n in range(len(reach) - 2, -1, -1):
        reach[n] += reach[n + 1]
    num = den = 0.0
    for n in range(1, len(reach)):  # block n rescales n earlier blocks, in every Q block that reaches it
        w = n * reach[n]
        num += w * miss_fraction(per_block_ws * n + kv_ws, cap)
        den += w
    return num / den if den else 0.0


def _eager_miss(t: Tiling, per_block_ws: int, kv_ws: int, cap: int) -> float:
    """_eager_miss_loop's share from NumPy arrays over the key blocks: the same floats from the same operations, the
    two sums accumulated in order (np.cumsum adds one element after the other). A Q block of Nk = 256M keys took
    seconds there, 16G minutes and gigabytes; past MAX_EAGER_K_BLOCKS a ValueError (no GPU model for the row)."""
    counts = t.block_counts()
    top = int(counts[0].max()) if counts is not None else cdiv(t.n_k, t.block_k)
    if top > MAX_EAGER_K_BLOCKS:
        raise ValueError(f"the eager spilled f row's reuse model sums over each of the {top:,} key blocks a Q block "
                         f"visits; over its limit of {MAX_EAGER_K_BLOCKS:,}")
    if counts is None or per_block_ws * top + kv_ws >= 1 << 53:  # past exact int64 -> float64: Python's integers
        return _eager_miss_loop(t, per_block_ws, kv_ws, cap)
    reach = np.cumsum(np.bincount(counts[0], minlength=top + 1)[::-1])[::-1]  # reach[n - 1]: Q blocks visiting >= n
    n = np.arange(1, top + 1, dtype=np.int64)
    w = n * np.append(reach[2:], 0)  # n x (Q blocks visiting more than n)
    miss = np.minimum(1.0, np.maximum(0.0, (per_block_ws * n + kv_ws) / cap - 1.0))  # miss_fraction, elementwise
    num, den = np.cumsum(w * miss), np.cumsum(w.astype(np.float64))
    return float(num[-1] / den[-1]) if top and den[-1] else 0.0


def effective_l2(gpu) -> int:
    """The capacity the strict-LRU per-block rule (gpumodel/residency.py) tests reuse distances against: a fitted
    share of the reported L2 (gpumodel/l2_capacity.py)."""
    return int(gpu.value("l2_bytes", "measured") * l2_share())


def ramp_l2(gpu) -> int:
    """The capacity of `miss_fraction`'s ramp (causal grids, FA1's, spilled rows): half the L2, as it was checked.
    The ramp's spread already stands for the lines a non-LRU, partitioned L2 keeps past that capacity, so the
    strict rule's fitted capacity is not carried over to it (doing so moved v_once_tc eager causal at N = 4096,
    d = 128 from in band to 0.84x of its measured time, with no ncu row to fit it on)."""
    return int(gpu.value("l2_bytes", "measured") * DEFAULT_L2_SHARE)


def separated_share(desc, bh: int, t_r: int, slots: int) -> float:
    """Share of the K/V re-reads whose reuse distance is a whole pass over the heads in flight.

    The Q blocks of one head are launched together (Q blocks fastest) and march through j in near
    lockstep, so a re-read by a CTA resident at the same time as the first reader is an L2 hit however
    large the working set (ncu_levels.csv: srcunit_tex sees up to 0.58x the SM-side bytes on non-causal
    rows, the requests of co-resident CTAs merged before the L2 slice, so they arrive together). Only a
    head whose Q blocks straddle a wave boundary re-reads its K/V a whole pass later: per wave, one
    separated re-read of each head it shares with an earlier wave. The FA1 grid (one CTA per head)
    keeps the old rule: its re-reads are of its own running O, l, m.
    """
    if desc.grid == "heads" or t_r <= 1:
        return 1.0
    return min(1.0, max(0, _wave_head_pairs(bh, t_r, slots) - bh) / (bh * (t_r - 1)))


def _wave_head_pairs_loop(bh: int, t_r: int, slots: int) -> int:
    """(wave, head) pairs: the distinct heads each wave of `slots` CTAs touches, wave by wave (the definition)."""
    ctas = bh * t_r
    groups = 0
    for start in range(0, ctas, slots):
        end = min(ctas, start + slots)
        groups += (end - 1) // t_r - start // t_r + 1
    return groups


def _wave_head_pairs(bh: int, t_r: int, slots: int) -> int:
    """_wave_head_pairs_loop closed: Σ over the W = ⌈B·H·Tr / slots⌉ waves of ((end - 1) // Tr - start // Tr + 1)
    telescopes (each wave starts where the last ended) to W + B·H - #{waves ending on a head's end}; the last wave does,
    and wave w < W - 1 does where (w + 1)·slots is a multiple of Tr: every P = Tr / gcd(slots, Tr) waves."""
    slots = int(slots)
    waves = -(-(bh * t_r) // slots)
    return waves + bh - 1 - (waves - 1) // (t_r // math.gcd(slots, t_r))


def grid_ctas(desc, batch: int, heads: int, n_q: int) -> int:
    if desc.grid == "heads":
        return batch * heads
    return cdiv(n_q, desc.block_q) * batch * heads * getattr(desc, "cluster_size", 1)


def q_block_slots(desc, gpu) -> int:
    """Q blocks (CTAs, or clusters of CS CTAs) resident at once on the whole GPU."""
    if desc.grid == "clusters":  # co-scheduled within a GPC (gpumodel/cluster_model.py)
        return max(1, active_clusters(desc.cluster_size, desc.ctas_per_sm))
    return int(gpu.value("sms", "measured") * desc.ctas_per_sm)


def counts(desc, batch, heads, n_q, n_k, d, dtype, causal) -> cf.Traffic:
    """The closed-form counts at the kernel's own tiling (v_once: its resolved f placement)."""
    opts = {}
    if desc.variant == "v_once":
        opts = dict(placement=desc.f or "hbm", rescale=desc.rescale or "lazy")
    if desc.f == "cluster":  # the cluster the kernel runs: chosen against one CTA's opt-in smem
        opts["sram_bytes"] = SMEM_PER_CTA
    return cf.counts(desc.variant, batch, heads, n_q, n_k, d, causal=causal, dtype=dtype,
                     block_q=desc.block_q, block_k=desc.block_k, **opts)


def levels(desc, gpu, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, traffic=None) -> Levels:
    tr = traffic or counts(desc, batch, heads, n_q, n_k, d, dtype, causal)
    item = cf.DTYPES[cf.dtype_name(dtype)]
    bh = batch * heads
    cap, ramp_cap = effective_l2(gpu), ramp_l2(gpu)
    q_bytes, kv_bytes = n_q * d * item, 2 * n_k * d * item  # per (batch, head)
    out_bytes = n_q * d * item + 4 * n_q
    # Q rows the kernel reads at all: every row where Q_i is read once per Q block (fa2, v_once: FA2 Alg. 1 line 4), only
    # the rows of Q blocks that visit a key block where it is read per visited tile (naive, fa1: closed_forms): under a
    # causal mask with Nk < Nq the first Q blocks see no key and their Q never leaves DRAM, so it is no compulsory read
    # (counted, DRAM came out over the L2 requests: fa1 causal Nq = 4k, Nk = 1)
    q_read = q_bytes
    if desc.variant in ("naive", "fa1") and causal:
        s = tile_sums(Tiling(n_q, n_k, desc.block_q, desc.block_k, causal))
        q_read = s.r_c0 // min(desc.block_k, n_k) * d * item  # Σ r_i over the Q blocks with a visited tile
    compulsory = bh * (q_read + kv_bytes + out_bytes)

    slots = q_block_slots(desc, gpu)  # Q blocks at once (a cluster of CS CTAs is one Q block)
    per_q_block = getattr(desc, "cluster_size", 1) if desc.grid == "clusters" else 1
    ctas = grid_ctas(desc, batch, heads, n_q)
    resident = int(min(ctas, slots * per_q_block))
    t_r = 1 if desc.grid == "heads" else cdiv(n_q, desc.block_q)
    in_flight = max(1, min(bh, cdiv(resident // per_q_block, t_r)))
    # between two reads of K_j: the K/V of the heads in flight, and the Q tiles the resident CTAs stream
    kv_ws = in_flight * kv_bytes + resident * min(desc.block_q, n_q) * d * item

    # spilled rows written then read back: f (v_once hbm), S and P (naive), O, l, m (fa1)
    rb, wb = tr.read_bytes, tr.write_bytes
    if desc.variant == "naive":
        spill_ws = bh * n_q * n_k * item  # the softmax pass reads S after the scores pass wrote all of it
        spill_names = ("S", "P")
    elif desc.variant == "fa1":
        spill_ws = resident * (q_bytes + 8 * n_q)  # each head's running O, l, m
        spill_names = ("O", "l", "m")
    elif desc.variant == "v_once" and "f" in rb:
        t = Tiling(n_q, n_k, desc.block_q, desc.block_k, causal)
        spill_ws = resident * desc.block_q * min(n_k, t.t_c * desc.block_k) * item  # one f row per CTA
        spill_names = ("f",)
    else:
        spill_ws, spill_names = 0, ()

    kv_miss = miss_fraction(kv_ws, ramp_cap)
    spill_miss = miss_fraction(spill_ws + kv_ws, ramp_cap) if spill_ws else 0.0
    # eager, spilled: at block n the rescale re-touches the n earlier blocks of the CTA's own f row, so
    # its reuse distance is the resident CTAs' f prefixes (n blocks each), not the whole row
    eager_once, eager_miss = {}, spill_miss
    if desc.variant == "v_once" and "f" in rb and desc.rescale == "eager":
        lazy = counts(desc.__class__(**dict(desc.as_dict(), rescale="lazy")), batch, heads, n_q, n_k, d, dtype,
                      causal)
        eager_once = {"r": lazy.read_bytes.get("f", 0), "w": lazy.write_bytes.get("f", 0)}
        t = Tiling(n_q, n_k, desc.block_q, desc.block_k, causal)
        eager_miss = _eager_miss(t, resident * desc.block_q * desc.block_k * item, kv_ws, ramp_cap)
    inputs_req = sum(rb.get(n, 0) for n in ("Q", "K", "V"))
    inputs_unique = bh * (q_read + kv_bytes)
    if causal or desc.grid == "heads":  # one wave's working set against the ramp (causal tails break the waves)
        kv_missing = max(0, inputs_req - inputs_unique) * kv_miss * separated_share(desc, bh, t_r, slots)
    else:  # every straddled head's re-read, block by block, against its reuse distance (gpumodel/residency.py)
        qo = 2 * resident * min(desc.block_q, n_q) * d * item
        kv_missing = separated_missing_bytes(bh, t_r, cdiv(n_k, desc.block_k), int(slots), kv_bytes, qo, cap)
    reads = inputs_unique + round(kv_missing)
    writes = bh * out_bytes
    for name in spill_names:
        r, w = rb.get(name, 0), wb.get(name, 0)
        if name == "f" and eager_once:  # the row written and read once, then the rescale re-touches
            reads += round(eager_once["r"] * spill_miss + (r - eager_once["r"]) * eager_miss)
            writes += round(eager_once["w"] + (w - eager_once["w"]) * eager_miss)
            continue
        if name == "O":  # fa1 reads and writes the running O; its final write is the output already counted
            w = max(0, w - bh * n_q * d * item)
        reads += round(r * spill_miss)
        # a spilled byte is written back once when it stays resident, every time when it does not
        unique = min(w, bh * n_q * n_k * item) if name in ("f", "S", "P") else w
        writes += round(unique + (w - unique) * spill_miss)
    local = local_bytes(desc, batch, heads, n_q, n_k, causal)
    # tile rows loaded wider than d (whole TMA panels): the L2 serves the padding, DRAM still reads each byte once
    pad = (desc.load_cols / d - 1) * inputs_req if getattr(desc, "load_cols", 0) > d else 0
    return Levels(requests_bytes=tr.hbm_bytes, l2_bytes=tr.hbm_bytes + round(pad) + local, dram_bytes=reads + writes,
                  dram_read_bytes=reads, dram_write_bytes=writes, compulsory_bytes=compulsory,
                  l2_capacity_bytes=cap, kv_working_set_bytes=kv_ws, spill_working_set_bytes=spill_ws,
                  resident_ctas=resident, heads_in_flight=in_flight, local_bytes=local,
                  dsmem_bytes=tr.dsmem_total_bytes)
