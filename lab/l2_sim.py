"""The L2 residency rules checked by walking the accesses themselves: an event-level LRU simulation of one grid.

    PYTHONPATH=. python -m lab.l2_sim --kernel sdpa_flash --batch 4 --heads 16 --seq-len 4096 --head-dim 128 --causal

gpumodel/levels.py sends a K/V re-read to DRAM by rules about reuse distance: gpumodel/residency.py's closed rule
for non-causal grids (waves in lockstep, a head straddling two waves re-read a pass later) and a ramp on one wave's
working set for causal ones. This walks what those rules summarise, so either can be held to it:
  - the CTAs (one Q block i of one head each, FA2 Alg. 1 line 4) are list-scheduled in launch order (Q blocks
    fastest, the descriptor's causal_order) onto SMs x CTAs/SM slots; a CTA takes its key steps plus `overhead`
    steps (prologue and epilogue);
  - it reads Q_i at its start, K_j and V_j at an even pace over its steps (FA2 Alg. 1 lines 6-8), in the kernel's
    order (BACKWARD_SWEEP: j descending for fa2_tc, fa2_wgmma and SDPA flash), and writes O_i at its end
    (FA2 Alg. 1 line 12);
  - the L2 is one LRU of the effective capacity (gpumodel/l2_capacity.py) over those tiles, byte-weighted.
A re-read of K_j, V_j that is not resident is a miss: DRAM bytes over the compulsory ones.

What it showed (stop 29; tests/test_l2_sim.py holds them):
  - non-causal: it agrees with residency.py's closed rule to a few per cent (fa2_tc's tiling at N = 8k-16k), an
    independent check of that rule;
  - causal, N = 4096 (SDPA flash, the rows ncu has at 0.83x / 0.89x of the model at d = 128 / 256, +56 / +34 MB over
    compulsory; fa2_tc, heaviest first, +9 MB): swept backward, the Q blocks of a head read their shared first key
    blocks at the ends of sweeps of different lengths, up to ~20.5 MiB apart in SDPA flash's light-first order
    (fa2_tc's heaviest-first order: under 17 MiB). LRU at the model's 36 MiB misses nothing, as the model has it;
    no single capacity gives both SDPA flash rows (at 19 MiB d = 128 misses 1 MB, d = 256 287 MB), so a capacity
    refit cannot close them, but the distances are within 2x of the capacity, where an L2 of two partitions that is
    not LRU on whole tiles may lose lines. Swept forward (the teaching kernels) no re-read is 4 MiB away.
Persistent and cluster grids are not walked (their tile order is the scheduler's): ValueError.
"""
from __future__ import annotations

import argparse
import heapq
import math
import os
import random
import sys
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from counting.tiling import Tiling

MAX_EVENTS = 12_000_000  # every tile access of fa2_tc's N = 64k grid (8.4 M) fits; about 40 s of walking
Q, KV, O = 0, 1, 2  # access kinds, in the order accesses at one instant are walked


@dataclass(frozen=True)
class SimResult:
    compulsory_bytes: int  # Q, K, V read once, O written once
    reread_bytes: int  # K/V requests after a head's first read of each block
    missed_bytes: int  # of those, the ones not resident in the LRU: DRAM over compulsory
    capacity_bytes: int


class Events:
    """Tile accesses as columns: time, kind (Q, KV, O), tile (head, block), bytes; appended CTA by CTA."""

    def __init__(self):
        self.parts: list[tuple] = []

    def cta(self, h: int, i: int, t_start: float, t_end: float, q_bytes: int, kv_times, kv_blocks, kv_bytes) -> None:
        n = len(kv_times)
        self.parts.append((np.concatenate(([t_start], np.asarray(kv_times, dtype=np.float64), [t_end])),
                           np.concatenate(([Q], np.full(n, KV), [O])).astype(np.int8),
                           np.full(n + 2, h, dtype=np.int64),
                           np.concatenate(([i], np.asarray(kv_blocks, dtype=np.int64), [i])),
                           np.concatenate(([q_bytes], np.asarray(kv_bytes, dtype=np.int64), [q_bytes]))))

    def sorted(self) -> tuple:
        """(kind, tile key, bytes) lists in time order (ties: Q, then K/V, then O)."""
        t, kind, head, block, nbytes = (np.concatenate(c) for c in zip(*self.parts))
        order = np.lexsort((kind, t))
        key = (kind.astype(np.int64) << 58) | (head << 29) | block  # one int per tile: kind, head, block
        return kind[order].tolist(), key[order].tolist(), nbytes[order].tolist()


def _kv_tile_bytes(t: Tiling, d: int, item: int) -> np.ndarray:
    """Bytes of K_j and V_j for every key block j of `t`, the tail block at its real width."""
    return np.array([2 * (c1 - c0) * d * item for c0, c1 in map(t.cols, range(t.t_c))], dtype=np.int64)


def _check_size(n: int) -> None:
    if n > MAX_EVENTS:
        raise ValueError(f"the simulation walks every tile access; this grid has {n:,}, over {MAX_EVENTS:,}")


# The kernels whose key loop runs from the last visible block down (the masked ones first); every other kernel here
# walks j ascending (the teaching tier, v_once_tc). Non-causal, the direction only mirrors the reuse distances;
# causal, it sets them: Q blocks of one head then read their shared first blocks at the ends of sweeps of different
# lengths.
BACKWARD_SWEEP = {
    "fa2_tc": "kernels/cuda/fa2_tc.cu: j = Tc_vis - 1 - it",
    "fa2_wgmma": "kernels/cuda/fa2_wgmma_tma.cu: j = T - 1 - t",
    "sdpa_flash": "FA2's flash_fwd_kernel.h (torch's copy): n_block from n_block_max - 1 down to 0",
}
SWEEPS = ("forward", "backward")


def sweep_of(kernel: str) -> str:
    return "backward" if kernel in BACKWARD_SWEEP else "forward"


def accesses(bh: int, n_q: int, n_k: int, block_q: int, block_k: int, d: int, item: int, slots: int,
             causal: bool = False, heaviest_first: bool = False, overhead: float = 1.0,
             pace_spread: float = 0.0, seed: int = 0, sweep: str = "forward") -> tuple:
    """Every tile access of the grid in time order (Events.sorted). CTAs list-scheduled in launch order (Q blocks
    fastest, heaviest first if asked for causal grids) onto `slots`; each takes its key steps plus `overhead`, at a
    pace drawn uniformly from 1 +- pace_spread / 2 (0: every step one unit); its visible K/V blocks j ascending
    (sweep "forward") or descending ("backward")."""
    if sweep not in SWEEPS:
        raise ValueError(f"sweep {sweep!r}: one of {SWEEPS}")
    t = Tiling(n_q, n_k, block_q, block_k, causal)
    steps_of = [len(t.k_blocks(i)) for i in range(t.t_r)]
    _check_size(bh * (sum(steps_of) + 2 * t.t_r))
    kv_bytes = _kv_tile_bytes(t, d, item)
    rnd = random.Random(seed)
    free = [(0.0, s) for s in range(max(1, slots))]
    ev = Events()
    for h in range(bh):
        for x in range(t.t_r):
            i = t.t_r - 1 - x if (causal and heaviest_first) else x
            steps = steps_of[i]
            r0, r1 = t.rows(i)
            pace = 1.0 + pace_spread * (rnd.random() - 0.5)
            t0, slot = heapq.heappop(free)
            end = t0 + (steps + overhead) * pace
            its = np.arange(steps)
            js = its[::-1] if sweep == "backward" else its
            ev.cta(h, i, t0, end, (r1 - r0) * d * item, t0 + (overhead / 2 + its + 0.5) * pace, js, kv_bytes[js])
            heapq.heappush(free, (end, slot))
    return ev.sorted()


TRACE_KEYS = {"kernel": str, "n": int, "d": int, "batch": int, "heads": int, "block_q": int, "block_k": int,
              "grid": list, "ctas": list, "dtype": str}


def check_record(rec) -> None:
    """ValueError naming what a lab/cta_trace.py record lacks or gets wrong (a field, its type, the sweep)."""
    if not isinstance(rec, dict):
        raise ValueError(f"a record is a JSON object, got {type(rec).__name__}")
    for key, typ in TRACE_KEYS.items():
        v = rec.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise ValueError(f"record field {key!r}: {typ.__name__} expected, got {v!r:.40}")
        if typ is int and v < 1:
            raise ValueError(f"record field {key!r}: must be >= 1, got {v}")
    if rec.get("causal"):
        raise ValueError("trace walks take non-causal records (the causal grid maps blockIdx.x to Tr - 1 - i)")
    if rec.get("sweep", "forward") not in SWEEPS:
        raise ValueError(f"record field 'sweep': one of {SWEEPS}, got {rec.get('sweep')!r:.40}")
    if len(rec["grid"]) != 2 or not all(isinstance(x, int) and x >= 1 for x in rec["grid"]):
        raise ValueError(f"record field 'grid': [Tr, B*H] expected, got {rec['grid']!r:.40}")


def accesses_from_trace(rec: dict, item: int = 2) -> tuple:
    """accesses() on a recorded schedule (lab/cta_trace.py: fa2_tc's CTA_TRACE build): CTA c = blockIdx.x +
    Tr * blockIdx.y is Q block blockIdx.x (non-causal) of head blockIdx.y; its key steps run at the recorded pace,
    piecewise linear through its start (step 0), the starts of steps Tc/4, Tc/2, 3 Tc/4 (integer division, as the
    kernel; a mark that falls on step 0 is the loop's start, after the prologue, and is left out) and its end, in the
    recorded sweep order (fa2_tc: j = Tc - 1 .. 0)."""
    check_record(rec)
    t = Tiling(rec["n"], rec["n"], rec["block_q"], rec["block_k"], False)
    t_r, heads = rec["grid"]
    if t_r != t.t_r or len(rec["ctas"]) != t_r * heads or heads != rec["batch"] * rec["heads"]:
        raise ValueError(f"trace of {len(rec['ctas'])} CTAs does not match the grid {rec['grid']} of N = {rec['n']}, "
                         f"B*H = {rec['batch'] * rec['heads']}")
    _check_size(len(rec["ctas"]) * (t.t_c + 2))
    d = rec["d"]
    kv_bytes = _kv_tile_bytes(t, d, item)
    its = np.arange(t.t_c) + 0.5
    js = np.arange(t.t_c)[::-1] if rec.get("sweep") == "backward" else np.arange(t.t_c)
    ev = Events()
    for c, cta in enumerate(rec["ctas"]):
        if not (isinstance(cta, list) and len(cta) == 7 and all(isinstance(x, int) for x in cta)):
            raise ValueError(f"CTA {c}: record {cta!r:.60} is not 7 integers (t_start, 3 marks, t_end, SM, steps)")
        t0, t1, t2, t3, t4, _sm, steps = cta
        if steps != t.t_c or not t0 <= t1 <= t2 <= t3 <= t4:
            raise ValueError(f"CTA {c}: record {cta} is not a whole sweep of {t.t_c} steps in time order")
        h, i = divmod(c, t_r)
        marks = {0: t0, steps: t4}
        for x, tx in ((steps // 4, t1), (steps // 2, t2), (3 * steps // 4, t3)):
            if 0 < x < steps:
                marks[x] = tx
        xs = sorted(marks)
        r0, r1 = t.rows(i)
        ev.cta(h, i, t0, t4, (r1 - r0) * d * item, np.interp(its, xs, [marks[x] for x in xs]), js, kv_bytes[js])
    return ev.sorted()


def simulate(events: tuple, capacity: int) -> SimResult:
    """Walk `events` (accesses' or accesses_from_trace's) through an LRU of `capacity` bytes."""
    lru: OrderedDict = OrderedDict()
    size = compulsory = reread = missed = 0
    seen = set()
    for kind, key, nbytes in zip(*events):
        first = key not in seen
        if kind == KV and not first:
            reread += nbytes
        if key in lru:
            lru.move_to_end(key)
            continue
        if first:
            compulsory += nbytes
            seen.add(key)
        elif kind == KV:
            missed += nbytes
        lru[key] = nbytes
        size += nbytes
        while size > capacity:
            size -= lru.popitem(last=False)[1]
    return SimResult(compulsory, reread, missed, capacity)


def simulate_kernel(kernel: str, batch: int, heads: int, n_q: int, n_k: int, d: int, dtype: str = "fp16",
                    causal: bool = False, capacity: int | None = None, gpu: str = "h200", **kw) -> SimResult:
    """simulate() on a registered kernel's own tiling, CTAs/SM, causal launch order (gpumodel/descriptors.py) and key
    sweep (BACKWARD_SWEEP)."""
    from counting import closed_forms as cf
    from gpumodel.descriptors import describe
    from counting.gpus import get_gpu
    from gpumodel.levels import effective_l2

    desc = describe(kernel, d=d, dtype=dtype)
    if desc.grid != "q_blocks":
        raise ValueError(f"{kernel}: the simulation walks grids of one Q block per CTA, not {desc.grid!r} grids")
    g = get_gpu(gpu)
    slots = int(g.value("sms", "measured") * desc.ctas_per_sm)
    events = accesses(batch * heads, n_q, n_k, desc.block_q, desc.block_k, d, cf.DTYPES[cf.dtype_name(dtype)],
                      slots, causal, desc.causal_order == "heaviest_first", sweep=sweep_of(kernel), **kw)
    return simulate(events, effective_l2(g) if capacity is None else capacity)


def ncu_dram(kernel: str, config: dict | None, batch: int, heads: int, n: int, d: int, dtype: str,
             causal: bool) -> list[float]:
    """The committed ncu DRAM bytes of this build (kernel and config) at this shape (gpumodel/measured.py), every row."""
    from gpumodel.measured import ncu_cells

    return [c["dram_bytes"] for c in ncu_cells()
            if c["kernel"] == kernel and c.get("dram_bytes") and (c.get("options") or {}).get("config") == config
            and (c["batch"], c["heads"], c["n_q"], c["n_k"], c["d"], c["dtype"], bool(c["causal"]))
            == (batch, heads, n, n, d, dtype, causal)]


def gpu_of(name) -> str:
    """The counting.gpus key of a device name torch reported ("NVIDIA H200" -> "h200"); ValueError for others."""
    for key in ("h200", "h100"):
        if isinstance(name, str) and key in name.lower():
            return key
    raise ValueError(f"the trace's GPU {name!r:.40} is not one the walk knows (H100, H200): pass gpu=")


def trace_report(path: str, capacity: int | None = None, ncu_csv: str | None = None, gpu: str | None = None) -> list:
    """Each record of a lab/cta_trace.py file walked as recorded and in lockstep, beside the model and (on the H200)
    the committed ncu rows; with ncu_csv (the same file's launches profiled: lab/cta_trace.py --ncu under ncu),
    each record's own DRAM bytes, paired in launch order. The GPU (its L2, SMs) is the file's, else `gpu`. A record
    that cannot be walked (a CTA that wrote no record, say) gives a row with its `error`, not an exception."""
    import json

    from gpumodel.descriptors import describe
    from counting.gpus import get_gpu
    from gpumodel.levels import effective_l2, levels

    try:
        data = json.loads(open(path).read())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a lab/cta_trace.py file ({e})") from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise ValueError(f"{path}: not a lab/cta_trace.py file (no list of records)")
    key = gpu or gpu_of((data.get("env") or {}).get("gpu"))
    same_launch = [None] * len(records)
    if ncu_csv:
        from gpumodel.measured import read_ncu_csv

        try:
            cells = read_ncu_csv(ncu_csv)
        except OSError as e:
            raise ValueError(f"{ncu_csv}: {e.strerror}") from None
        ns = [r.get("n") if isinstance(r, dict) else None for r in records]
        if [c["n_q"] for c in cells] != ns:
            raise ValueError(f"{ncu_csv}: its launches (N = {[c['n_q'] for c in cells]}) are not the trace's ({ns})")
        same_launch = [c["dram_bytes"] for c in cells]
    g = get_gpu(key)
    cap = effective_l2(g) if capacity is None else capacity
    rows = []
    for k, (rec, own) in enumerate(zip(records, same_launch)):
        row = dict(record=k, n=rec.get("n") if isinstance(rec, dict) else None,
                   rep=rec.get("rep") if isinstance(rec, dict) else None, gpu=key, same_launch=own)
        try:
            check_record(rec)
            dtype = {"float16": "fp16", "bfloat16": "bf16"}.get(rec["dtype"], rec["dtype"])
            item = 2
            shipped = {k: v for k, v in (rec.get("config") or {}).items() if k != "CTA_TRACE"}  # what ncu profiled
            desc = describe(rec["kernel"], d=rec["d"], dtype=dtype, config=shipped or None)
            walked = simulate(accesses_from_trace(rec, item), cap)
            slots = int(g.value("sms", "measured") * desc.ctas_per_sm)
            lockstep = simulate(accesses(rec["batch"] * rec["heads"], rec["n"], rec["n"], rec["block_q"],
                                         rec["block_k"], rec["d"], item, slots, sweep=rec.get("sweep", "forward")),
                                cap)
            lv = levels(desc, g, rec["batch"], rec["heads"], rec["n"], rec["n"], rec["d"], dtype, False)
            row.update(compulsory=walked.compulsory_bytes, traced=walked.compulsory_bytes + walked.missed_bytes,
                       lockstep=lockstep.compulsory_bytes + lockstep.missed_bytes, model=lv.dram_bytes,
                       ncu=(ncu_dram(rec["kernel"], shipped, rec["batch"], rec["heads"], rec["n"], rec["d"], dtype,
                                     False) if key == "h200" else []),  # the committed rows are the H200's
                       pace=rec.get("summary"))
        except (ValueError, KeyError, TypeError) as e:
            row["error"] = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
        rows.append(row)
    return rows


PACE_SPREADS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)


def pace_figure(path, kernel: str = "fa2_tc", heads: int = 16, d: int = 128, seqs=(16384, 32768, 65536),
                spreads=PACE_SPREADS) -> list[dict]:
    """DRAM bytes / compulsory of the walk against the per-CTA pace spread, one line per N, with the model (lockstep
    rule) and every committed ncu row of the kernel's default build at that shape: what CTAs that drift apart do to the
    L2's K/V re-reads (docs/gpu-model.md). Returns the points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpumodel.descriptors import describe
    from counting.gpus import get_gpu
    from gpumodel.levels import levels

    desc = describe(kernel, d=d, dtype="fp16")
    pts = []
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for n, color in zip(seqs, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
        lv = levels(desc, get_gpu("h200"), 1, heads, n, n, d, "fp16", False)
        ys = []
        for sp in spreads:
            r = simulate_kernel(kernel, 1, heads, n, n, d, "fp16", False, pace_spread=sp)
            ys.append((r.compulsory_bytes + r.missed_bytes) / r.compulsory_bytes)
            pts.append(dict(n=n, pace_spread=sp, dram_over_compulsory=ys[-1]))
        ax.plot(spreads, ys, "-o", color=color, label=f"N = {n // 1024}k: the walk")
        ax.axhline(lv.dram_bytes / lv.compulsory_bytes, color=color, linestyle=":", linewidth=1)
        for m in ncu_dram(kernel, desc.options, 1, heads, n, d, "fp16", False):
            ax.plot([0.0], [m / lv.compulsory_bytes], marker="*", markersize=13, color=color, linestyle="none")
        for m in ncu_dram("sdpa_flash", None, 1, heads, n, d, "fp16", False):  # the same tiling, CTAs/SM and sweep
            ax.plot([0.0], [m / lv.compulsory_bytes], marker="x", markersize=10, color=color, linestyle="none")
    ax.plot([], [], ":", color="gray", label="the model (lockstep waves)")
    ax.plot([], [], "*", color="gray", markersize=11, linestyle="none", label=f"{kernel}, ncu (pace unmeasured: at 0)")
    if kernel == "fa2_tc":
        ax.plot([], [], "x", color="gray", markersize=9, linestyle="none", label="SDPA flash, ncu (same tiling)")
    ax.set_xlabel("per-CTA pace spread s (each CTA's step time uniform in 1 ± s/2)")
    ax.set_ylabel("DRAM bytes / compulsory (Q, K, V, O once)")
    ax.set_title(f"{kernel}, B = 1, H = {heads}, d = {d}, non-causal: K/V re-reads the L2 misses\n"
                 "(lab/l2_sim.py, LRU at the effective 36 MiB)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return pts


IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.l2_sim", description=__doc__.splitlines()[0])
    p.add_argument("--kernel")
    p.add_argument("--batch", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--seq-len-k", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    p.add_argument("--causal", action="store_true")
    p.add_argument("--capacity-mib", type=float, action="append",
                   help="LRU capacity (repeatable); default: the model's effective L2")
    p.add_argument("--pace-spread", type=float, default=0.0)
    p.add_argument("--trace", help="a lab/cta_trace.py JSON: walk the recorded schedules instead")
    p.add_argument("--ncu-csv", help="with --trace: ncu's CSV of the same launches (lab/cta_trace.py --ncu)")
    p.add_argument("--gpu", choices=("h100", "h200"), help="with --trace: the GPU, where the file does not name it")
    p.add_argument("--pace-plot", metavar="FILE.png",
                   help="fa2_tc at the ncu rows' shapes: DRAM against the pace spread (about a minute)")
    a = p.parse_args(argv)
    try:
        if a.capacity_mib and not all(math.isfinite(c) and 0 < c < 2 ** 20 for c in a.capacity_mib):
            raise ValueError(f"--capacity-mib must be a finite number of MiB > 0, got {a.capacity_mib}")
        caps = [int(c * 2 ** 20) for c in a.capacity_mib] if a.capacity_mib else [None]
        if not (math.isfinite(a.pace_spread) and 0 <= a.pace_spread < 2):
            raise ValueError(f"--pace-spread must be in [0, 2), got {a.pace_spread}")
        if (a.ncu_csv or a.gpu) and not a.trace:
            raise ValueError("--ncu-csv and --gpu go with --trace")
        if a.pace_plot:
            from pathlib import Path

            out = Path(a.pace_plot)
            if out.suffix.lower() not in IMAGE_SUFFIXES or out.is_dir():
                raise ValueError(f"--pace-plot {a.pace_plot}: an image file ({', '.join(IMAGE_SUFFIXES)}) expected")
            if not out.resolve().parent.is_dir():
                raise ValueError(f"--pace-plot {a.pace_plot}: no folder {out.parent}")
            if not os.access(out.resolve().parent, os.W_OK):
                raise ValueError(f"--pace-plot {a.pace_plot}: the folder {out.parent} is not writable")
            for pt in pace_figure(a.pace_plot):
                print(f"N = {pt['n']:6d}  spread {pt['pace_spread']:.2f}  DRAM / compulsory {pt['dram_over_compulsory']:.3f}")
            print(f"wrote {a.pace_plot}")
            return 0
        if a.trace:
            print(f"{'N':>6s} {'rep':>3s} {'compulsory':>10s} {'lockstep':>9s} {'traced':>9s} {'model':>9s} "
                  f"{'this launch':>11s} {'ncu rows':>17s}  (DRAM MB; lockstep and traced: the LRU walk)")
            bad = 0
            for cap in caps:
                for r in trace_report(a.trace, cap, a.ncu_csv, a.gpu):
                    if "error" in r:
                        bad += 1
                        print(f"{r['n']!s:>6s} {r['rep']!s:>3s}  not walked: {r['error']}")
                        continue
                    ncu = ", ".join(f"{x / 1e6:.0f}" for x in r["ncu"]) or "-"
                    own = "-" if r["same_launch"] is None else f"{r['same_launch'] / 1e6:.0f}"
                    print(f"{r['n']:6d} {r['rep']!s:>3s} {r['compulsory'] / 1e6:10.0f} {r['lockstep'] / 1e6:9.0f} "
                          f"{r['traced'] / 1e6:9.0f} {r['model'] / 1e6:9.0f} {own:>11s} {ncu:>17s}")
            return 1 if bad else 0
        from gpumodel.descriptors import describe
        from counting.gpus import get_gpu
        from gpumodel.levels import levels

        need = dict(kernel=a.kernel, batch=a.batch, heads=a.heads, seq_len=a.seq_len, head_dim=a.head_dim)
        missing = [f"--{k.replace('_', '-')}" for k, v in need.items() if v is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} needed (or --trace FILE, or --pace-plot FILE)")
        n_k = a.seq_len if a.seq_len_k is None else a.seq_len_k
        for v in (a.batch, a.heads, a.seq_len, n_k, a.head_dim):
            if v < 1:
                raise ValueError("batch, heads, lengths and head dim must be >= 1")
        lv = levels(describe(a.kernel, d=a.head_dim, dtype=a.dtype), get_gpu("h200"), a.batch, a.heads, a.seq_len,
                    n_k, a.head_dim, a.dtype, a.causal)
        print(f"model (gpumodel/levels.py): DRAM {lv.dram_bytes / 1e6:.1f} MB, compulsory {lv.compulsory_bytes / 1e6:.1f} MB")
        print(f"{a.kernel}: key blocks swept {sweep_of(a.kernel)}")
        for cap in caps:
            r = simulate_kernel(a.kernel, a.batch, a.heads, a.seq_len, n_k, a.head_dim, a.dtype, a.causal, cap,
                                pace_spread=a.pace_spread)
            print(f"LRU {r.capacity_bytes / 2 ** 20:6.1f} MiB: K/V re-read {r.reread_bytes / 1e6:9.1f} MB, "
                  f"missed {r.missed_bytes / 1e6:8.1f} MB (DRAM over compulsory)")
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
