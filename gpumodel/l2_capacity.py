"""The effective L2 capacity the residency model (gpumodel/residency.py) tests reuse distances against, as a
share of the L2 the GPU reports, fitted on the DRAM bytes of the committed ncu rows.

    PYTHONPATH=. python -m gpumodel.l2_capacity     # writes results/l2_capacity_fit.json

Why a fitted share: the H200's 60 MB L2 is two partitions, each caching lines for the SMs of its GPCs, so a
line every SM reads may be held twice; with every line held twice the capacity is half (30 MB), with none
the whole. ncu decides between them: the DRAM bytes of the kernels that re-read K/V across waves at
N = 16k-64k (d = 128) are the most sensitive to it. The model's miss rule stays strict LRU on each key
block's reuse distance; only the capacity is fitted.

Training split: the DRAM rows of TRAIN_SOURCES (every ncu CSV committed when the share was fitted); every
other ncu CSV is held out (first: results/ncu_gaps_capacity.csv, N = 24k and 48k, profiled to test
the capacity between the training rows at 16k, 32k and 64k). Objective: mean |log(model / measured)| over
the tensor-core rows, scanned in 0.5 MiB steps (the loss is piecewise constant in the capacity: a key
block's re-read flips from hit to miss at one capacity), the middle of the best plateau.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from counting.gpus import GPUS
from gpumodel.fit_gpu_model import work_of
from gpumodel.levels import DEFAULT_L2_SHARE as DEFAULT_SHARE  # noqa: F401  (re-exported)
from gpumodel.levels import L2_FIT_FILE as FIT_FILE
from gpumodel.levels import fitted_l2_share as fitted_share
from gpumodel.levels import l2_share as share  # noqa: F401  (re-exported)
from gpumodel.levels import l2_share_override as _override
from gpumodel.measured import ncu_cells

ROOT = Path(__file__).resolve().parent.parent
TRAIN_SOURCES = ("ncu_l2_capacity.csv", "ncu_levels.csv", "tc_ncu.csv", "tc_ncu_wgmma_d128.csv",
                 "tc_ncu_wgmma_d64.csv", "tc_ncu_wgmma_tma_d128.csv", "tc_ncu_wgmma_tma_d64.csv")
MIB = 2 ** 20
# The share itself is read from FIT_FILE by gpumodel/levels.py (fitted_l2_share, l2_share): the model reads the fit's
# result, it does not import this module. The scan below sets shares through levels' override list (_override).


def is_train(cell: dict) -> bool:
    """A DRAM row the capacity was fitted on."""
    return cell.get("source") in TRAIN_SOURCES and "dram_bytes" in cell


def _rows(train: bool) -> list[dict]:
    return [c for c in ncu_cells() if "dram_bytes" in c and c["dram_bytes"] and is_train(c) == train]


def _ratios(rows, s: float) -> list[float]:
    """model / measured DRAM bytes at share s (the levels are computed with the work, so inside the override)."""
    _override.append(s)
    try:
        return [work_of(c).levels.dram_bytes / c["dram_bytes"] for c in rows]
    finally:
        _override.pop()


def fit(verbose: bool = True) -> dict:
    l2 = GPUS["h200"].value("l2_bytes", "measured")
    train, held = _rows(True), _rows(False)
    scan = []
    for half_mib in range(2 * 25, 2 * 50 + 1):  # 25 .. 50 MiB
        cap = half_mib / 2 * MIB
        r = _ratios(train, cap / l2)
        scan.append((cap, sum(abs(math.log(x)) for x in r) / len(r), sum(abs(x - 1) <= 0.10 for x in r)))
    best = min(loss for _, loss, _ in scan)
    first = next(i for i, (_, loss, _) in enumerate(scan) if loss <= best * (1 + 1e-9))
    last = first
    while last + 1 < len(scan) and scan[last + 1][1] <= best * (1 + 1e-9):
        last += 1
    plateau = [scan[first][0], scan[last][0]]  # the first run of capacities at the best loss
    cap = scan[(first + last) // 2][0]
    s = cap / l2
    held_ratios = _ratios(held, s)
    out = dict(
        share_of_l2=round(s, 4), capacity_bytes=int(cap), capacity_mib=cap / MIB, l2_bytes=int(l2),
        train_sources=list(TRAIN_SOURCES), train_rows=len(train),
        train_mean_abs_log=round(best, 5), train_in_band_10pct=next(n for c, _, n in scan if c == cap),
        plateau_mib=[plateau[0] / MIB, plateau[1] / MIB],
        held_out=[dict(source=c["source"], kernel=c["kernel"], label=c["label"], n=c["n_q"], d=c["d"], causal=c["causal"],
                       ratio=round(x, 4)) for c, x in zip(held, held_ratios)],
        scan=[dict(mib=c / MIB, mean_abs_log=round(loss, 5), in_band=n) for c, loss, n in scan],
        script="gpumodel/l2_capacity.py",
        rule="mean |log(model / ncu DRAM bytes)| over the training rows, middle of the best plateau",
    )
    if verbose:
        print(f"effective L2: {cap / MIB:.1f} MiB = {s:.3f} x {l2 / MIB:.0f} MiB (plateau {out['plateau_mib']}), "
              f"train {len(train)} rows, mean |log| {best:.4f}")
        for h in out["held_out"]:
            print(f"  held out {h['source']} {h['label']} N={h['n']} d={h['d']}: model/measured {h['ratio']:.3f}")
    return out


def main(argv=None) -> int:
    argparse.ArgumentParser(  # no options: --help (or a typo) says what would be overwritten instead of refitting
        prog="python -m gpumodel.l2_capacity",
        description=f"Refit the effective L2 capacity on the DRAM bytes of the committed ncu rows and write "
                    f"{FIT_FILE.relative_to(ROOT)}. Takes no arguments.").parse_args(argv)

    out = fit()  # under `python -m` this file is __main__: the override and the cache it clears are levels'
    FIT_FILE.write_text(json.dumps(out, indent=1) + "\n")
    fitted_share.cache_clear()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
