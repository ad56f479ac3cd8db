"""The GPU model's prediction of each A/B's effect, against what the A/B measured.

`fa-traffic validate` prices the builds forward() runs and SDPA; an A/B also times variants of forward()'s build
(`fa2_wgmma[default+KNOB=V...]`, lab/ab_wgmma_speed.py) and named candidates. Their effect is a ratio in one cell:
variant time / forward()'s time, both timed in the same run. This module asks the model for the same ratio from the
two builds' descriptors, so a change can be priced before it is built, and checked after:

    PYTHONPATH=. python -m lab.knob_ab [--source fwd_wgmma_two_q_tiles/] [--format table|csv|json|markdown]

Each row: the run, the variant, the cell, the model's ratio, the measured ratio and, where the run timed forward()'s
build twice (`default-again`), the control's ratio (how far the same build moved in that cell). A variant's config is
the one its row recorded (lab/ab_wgmma_speed.py default_with_config, runs from stop 24 on); for earlier rows,
forward()'s (the default row's recorded config and knobs) with the variant's knobs, and TURN_CARRY where the knobs
turn O_TILE on in a ping-pong build, as the A/B then built it. Knobs the model does not state (MAX_TREE, ...) give
a ratio of 1: the model says they change nothing. Knobs removed with their experiments in issue 40 (at commit 0bb604a)
are still priced as before (kernels/fa2_wgmma.py DESCRIBED_ONLY); a row whose build the descriptors refuse is listed
after the table.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from statistics import geometric_mean

from gpumodel.measured import AB_FILE, DTYPE, RESULTS
from lab.predict_ab import variant_knobs

DEFAULT = "fa2_wgmma[default]"
CONTROL = "fa2_wgmma[default-again]"


def _knobs_of(variant: str) -> dict | None:
    """'fa2_wgmma[default+A=1+B=2]' -> {'A': 1, 'B': 2}; None for any other label."""
    m = re.match(r"^fa2_wgmma\[(default\+.+)\]$", variant)
    return variant_knobs(m.group(1)) if m else None


def variant_config(default_row: dict, knobs: dict) -> dict:
    """The build an A/B's `default+KNOBS` entry ran: forward()'s build of that cell (its recorded config and knobs)
    with the named knobs, and TURN_CARRY where they make it a ping-pong build with O_TILE (the A/B adds forward()'s
    knobs for the build it makes)."""
    cfg = {**default_row["config"], **default_row.get("knobs", {}), **knobs}
    if cfg.get("O_TILE") and cfg.get("NWG", 2) == 2 and cfg.get("PINGPONG", 1) and not cfg.get("QK_AHEAD"):
        cfg.setdefault("TURN_CARRY", 1)
    return cfg


def rows(pattern: str = "**/" + AB_FILE, source: str | tuple = "", refused: dict | None = None) -> list[dict]:
    """Every `default+KNOBS` row of the committed A/B runs whose cell has forward()'s row with its config (`source`:
    only runs under this folder of results, or under any of a tuple of them); refused (if given) collects
    {(run, variant): why} of the rows whose build the descriptors refuse."""
    from gpumodel import gpu_model as gm

    out = []
    for path in sorted(RESULTS.glob(pattern)):
        src = str(path.relative_to(RESULTS))
        if source and not src.startswith(source):
            continue
        data = json.loads(path.read_text())
        timer = data.get("env", {}).get("timer")
        cells: dict = {}
        for r in data.get("rows", []):
            if r.get("ok", True) and r.get("median_ms"):
                cells.setdefault((r["d"], r["n"], r["dtype"], bool(r["causal"]), r["b"], r["h"]), {})[r["variant"]] = r
        for (d, n, dtype, causal, b, h), entries in cells.items():
            base = entries.get(DEFAULT)
            if not base or "config" not in base:
                continue
            base_cfg = dict(base["config"], **base.get("knobs", {}))

            def model(cfg):
                p = gm.predict("fa2_wgmma", b, h, n, n, d, DTYPE[dtype], causal, config=cfg)
                return gm.as_timed(p, timer)
            try:
                t0 = model(base_cfg)
            except (ValueError, KeyError):
                continue
            control = entries.get(CONTROL)
            for variant, r in entries.items():
                knobs = _knobs_of(variant)
                if knobs is None:
                    continue
                try:  # the build the row recorded (runs from stop 24 on), else rebuilt as the A/B built it
                    t1 = model(r.get("config") or variant_config(base, knobs))
                except (ValueError, KeyError) as exc:  # a build the descriptors refuse
                    if refused is not None:
                        refused[(src.rsplit("/", 1)[0], variant[len("fa2_wgmma["):-1])] = str(exc).splitlines()[0]
                    continue
                out.append(dict(source=src, variant=variant[len("fa2_wgmma["):-1], d=d, n=n, dtype=DTYPE[dtype],
                                causal=causal, model=t1 / t0, measured=r["median_ms"] / base["median_ms"],
                                control=control["median_ms"] / base["median_ms"] if control else None))
    return out


def summary(rs: list[dict], moved: float = 0.02) -> list[dict]:
    """Per run directory and variant: cells, the geomean of the model's and the measured ratios, and of the cells the
    model moves by more than `moved`, the share the measurement moves the same way (against the control's ratio
    where the run timed one, else 1)."""
    groups: dict = {}
    for r in rs:
        run = r["source"].rsplit("/", 1)[0]
        groups.setdefault((run, r["variant"]), []).append(r)
    out = []
    for (run, variant), g in sorted(groups.items()):
        acted = [r for r in g if abs(r["model"] - 1) > moved]
        same = [r for r in acted if (r["model"] - 1) * (r["measured"] - (r["control"] or 1.0)) > 0]
        out.append(dict(run=run, variant=variant, cells=len(g), model=geometric_mean(r["model"] for r in g),
                        measured=geometric_mean(r["measured"] for r in g),
                        control=geometric_mean(r["control"] for r in g if r["control"]) if any(r["control"] for r in g)
                        else None,
                        moved=len(acted), same_way=len(same)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.knob_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="", help="only runs under this folder of results (e.g. fwd_wgmma_two_q_tiles/)")
    ap.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    ap.add_argument("--cells", action="store_true", help="every cell, not the summary per run and variant")
    args = ap.parse_args(argv)
    refused: dict = {}
    rs = rows(source=args.source, refused=refused)
    if not rs:
        print(f"no A/B variant rows under results/{args.source}", file=sys.stderr)
        return 2
    table = rs if args.cells else summary(rs)
    from analysis.cli import render_csv, render_markdown, render_table

    if args.format == "json":
        print(json.dumps(table, indent=1))
    elif args.format == "csv":
        render_csv(table)
    else:
        header = list(table[0])
        cells = [["-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()]
                 for r in table]
        (render_markdown if args.format == "markdown" else render_table)(header, cells)
    for (run, variant), why in sorted(refused.items()):
        print(f"not priced: {run} {variant}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
