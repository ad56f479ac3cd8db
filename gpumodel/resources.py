"""What is measured per kernel build, read from results/ (torch-free, no model code): its registers per thread
(results/tc_resources.json, NVRTC's count: bench/bench_tc.py resources), the CTAs per SM they allow, and its launch
overhead (results/launch_overhead.json, CUDA-event time of a tiny launch). gpumodel/builds.py prices a build's data
with them; the cluster kernel's descriptor (gpumodel/cluster_model.py) and the external kernels' take their launch
overhead from here.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from counting.sm90 import occupancy_for

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "results" / "tc_resources.json"


# -- measured per-build resources (registers from NVRTC: bench/bench_tc.py resources) ------------------
@lru_cache(maxsize=1)
def _resources() -> list:
    try:
        return json.loads(RESOURCES.read_text())
    except OSError:
        return []


# fa2_wgmma knobs that forward()'s own builds carry (kernels.fa2_wgmma.DEFAULT_KNOBS) and that change no register count:
# v9's descriptor stepping, v10's idle warpgroups, v11's causal walk, v12's carried ping-pong turn, v13's direct O store,
# stop 22's tree row max and half-width diagonal step (d = 128), stop 24's ragged causal section first
REGISTER_NEUTRAL = ("DESC_STEP", "WG_SKIP", "WG_CAUSAL_SKIP", "TURN_CARRY", "O_DIRECT", "MAX_TREE", "HALF_DIAG",
                    "SECTION_RAGGED_FIRST")


def registers_of(kernel: str, defines: dict) -> int | None:
    """Registers per thread of a build, from results/tc_resources.json (None: not measured). REGISTER_NEUTRAL
    knobs are left out of the match: they change no build's register count (ptxas -v, every SIZE_RULES build and
    CONFIGS; tests/test_kernels_wgmma_speed.py checks it)."""
    defines = {k: v for k, v in defines.items() if k not in REGISTER_NEUTRAL}
    for row in _resources():
        if row["kernel"] == kernel and row["defines"] == defines:
            return int(row["registers"])
    # the bf16 build has the fp16 build's registers to within a few (same code, other converts)
    other = dict(defines, IS_BF16=1 - int(defines.get("IS_BF16", 0)))
    for row in _resources():
        if row["kernel"] == kernel and row["defines"] == other:
            return int(row["registers"])
    return None


def ctas_per_sm(warps: int, smem: int, registers: int | None, fallback: int) -> int:
    """CTAs per SM from registers, shared memory and warp slots (kernels.fa2_tc.occupancy_for);
    `fallback` (the build's MIN_BLOCKS) when its registers were never measured."""
    if registers is None:
        return fallback
    return max(1, occupancy_for(warps, smem, registers)["ctas_per_sm"])


# -- launch overhead: results/launch_overhead.json (CUDA-event time of a tiny launch) -----------
LAUNCH_OVERHEAD_FILE = ROOT / "results" / "launch_overhead.json"


@lru_cache(maxsize=1)
def launch_overheads() -> dict:
    """kernel -> event-timed seconds of one tiny launch (host work inside a timed call counts)."""
    out = {}
    try:
        rows = json.loads(LAUNCH_OVERHEAD_FILE.read_text())["rows"]
    except (OSError, KeyError, ValueError):
        return out
    for r in rows:
        if "event_ms" in r and r.get("path") in ("driver", "torch"):
            out[r["kernel"]] = r["event_ms"] * 1e-3
    return out


def overhead(kernel_like: str) -> tuple[float, str]:
    t = launch_overheads().get(kernel_like)
    if t is None:
        return 0.0, "not measured"
    return t, f"results/launch_overhead.json ({kernel_like}, event time of a 1x2x128x64 call)"

