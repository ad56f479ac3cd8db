"""The GPU model's track record per kernel: how its time compared with every committed timing of that kernel.

`fa-traffic predict` prints a time; this says how far to trust it. For each kernel (every build of it), head dim and
causal flag, over the held-out benchmark timings `fa-traffic validate` reads (gpumodel/validate.py rows, quantity
"time", N >= 2048): the number of timings, the median of model / measured and its 10th and 90th percentiles, and the
share within validate's band (±15% tensor-core, ±30% teaching; d = 64 and 128 only). Computed once from the committed results (it takes validate's seconds) into
results/gpu_model_accuracy.json, which `predict` reads:

    PYTHONPATH=. python -m gpumodel.accuracy            # rewrite the JSON from results
    PYTHONPATH=. python -m gpumodel.accuracy --check    # exit 1 when the JSON is not what the results give

tests/test_gpu_model.py runs --check, so a commit that adds results or changes the model keeps it current.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from gpumodel import validate

ACCURACY_FILE = Path(__file__).resolve().parent.parent / "results" / "gpu_model_accuracy.json"
MIN_N = 2048  # validate's banded range: shorter rows have their own, larger share of launch and tail effects


def family(label: str) -> str:
    """validate's kernel label -> the kernel: 'fa2_wgmma{BLOCK_N=128,...}' -> 'fa2_wgmma', 'v_once_tc[hbm,lazy]' ->
    'v_once_tc'."""
    return re.split(r"[{\[]", label, maxsplit=1)[0]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def build(rs: list[dict] | None = None) -> dict:
    """{"kernel/d/causal": {cells, median, p10, p90, in_band}} over validate's held-out time rows at N >= MIN_N."""
    if rs is None:
        rs = validate.rows()
    groups: dict = {}
    for r in rs:
        if r["quantity"] != "time" or r["train"] or r["n"] < MIN_N or not r["ratio"] > 0:
            continue
        groups.setdefault(f"{family(r['kernel'])}/{r['d']}/{'causal' if r['causal'] else 'non-causal'}", []).append(r)
    out = {}
    for key in sorted(groups):
        g = groups[key]
        ratios = [r["ratio"] for r in g]
        banded = [r for r in g if r["in_band"] is not None]
        out[key] = dict(cells=len(g), median=round(_pct(ratios, 0.5), 4), p10=round(_pct(ratios, 0.1), 4),
                        p90=round(_pct(ratios, 0.9), 4),
                        in_band=round(sum(bool(r["in_band"]) for r in banded) / len(banded), 4) if banded else None,
                        band=max(r["band"] for r in banded) if banded else None)
    return out


def load() -> dict:
    try:
        return json.loads(ACCURACY_FILE.read_text())["groups"]
    except (OSError, ValueError, KeyError):
        return {}


def record(kernel: str, d: int, causal: bool, table: dict | None = None) -> dict | None:
    """The track record `predict` prints beside its time; None where no timing of that kernel, d and flag exists."""
    table = load() if table is None else table
    return table.get(f"{kernel}/{d}/{'causal' if causal else 'non-causal'}")


def _document(groups: dict) -> dict:
    return dict(about=__doc__.split("\n\n")[0], rule=f"validate.rows(): quantity time, held out, N >= {MIN_N}; "
                "ratio = model / measured (below 1: the model is fast)", groups=groups)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpumodel.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is stale")
    args = ap.parse_args(argv)
    doc = _document(build())
    if args.check:
        if load() != doc["groups"]:
            print(f"{ACCURACY_FILE.name} is stale: run python -m gpumodel.accuracy", file=sys.stderr)
            return 1
        return 0
    ACCURACY_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {ACCURACY_FILE} ({len(doc['groups'])} groups)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
