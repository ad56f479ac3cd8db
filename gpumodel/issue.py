"""Per-build issue cost measured by Nsight Compute: warp instructions per Br x Bc tile beyond the MMAs.

Why: fa2_tc and SDPA flash have the same tiling (Br = 128, Bc = 128 at d = 64, 4 warps, 2 CTAs/SM, 255
registers), so a model that prices only the counted FLOPs and exponentials gives them the same time,
while SDPA flash issues 1.31x the instructions at d = 64 (results/ncu_levels.csv,
smsp__inst_executed: 6770 vs 5179 per tile) and runs 6-18% slower. Instructions per tile are a property
of a build's code, not of the shape: they are read once from the non-causal rows of ncu_levels.csv
(averaged over the shapes profiled; fp16 builds, used for bf16 too: the same code with other converts)
and enter the model as the softmax's issue cycles (gpumodel/gpu_model.py tile_terms). Builds never
profiled keep the closed-form estimate. The MMAs are taken out by count (4·Br·Bc·d FLOPs per tile,
4096 per m16n8k16), so the term is what competes with the products for the warps' issue slots.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from counting.tiling import Tiling
from gpumodel.builds import build_data
from gpumodel.measured import read_ncu_csv

SOURCE = Path(__file__).resolve().parent.parent / "results" / "ncu_levels.csv"
MMA_FLOPS = 2 * 16 * 8 * 16  # one mma.sync m16n8k16 (PTX ISA)


@lru_cache(maxsize=1)
def _table() -> dict:
    if not SOURCE.exists():
        return {}
    acc = {}
    for c in read_ncu_csv(SOURCE):
        if c["causal"] or not c.get("instructions"):
            continue
        try:
            data = build_data(c["kernel"], c["d"], c["dtype"], False, n_q=c["n_q"], n_k=c["n_k"], **c["options"])
        except (ValueError, TypeError, KeyError):
            continue
        if data["structure"] != "fa2" or data["path"] != "mma_sync":
            continue
        br, bc = data["block_q"], data["block_k"]
        t = Tiling(c["n_q"], c["n_k"], br, bc, False)
        tiles = c["batch"] * c["heads"] * t.t_r * t.t_c
        per_tile = c["instructions"] / tiles - 4 * br * bc * c["d"] / MMA_FLOPS
        key = _key(data["kernel"], c["d"], data["build"], data.get("options", {}))
        acc.setdefault(key, []).append((per_tile, c["n_q"]))
    return acc


def _key(kernel, d, build, options) -> tuple:
    return kernel, d, build, tuple(sorted((k, v) for k, v in options.items() if k != "MIN_BLOCKS"))


def measured_issue(kernel: str, d: int, build: str, options: dict) -> tuple[float, str]:
    """(non-MMA warp instructions per tile, source) of a profiled build; (0.0, '') when never profiled."""
    rows = _table().get(_key(kernel, d, build, options))
    if not rows:
        return 0.0, ""
    ns = ",".join(str(n) for n in sorted({n for _, n in rows}))
    return (sum(v for v, _ in rows) / len(rows),
            f"results/ncu_levels.csv smsp__inst_executed, non-causal N={ns}, d={d}")
