"""Committed GPU results (results/) for the notebooks: explicit files, one run label per record.

A notebook names the file(s) it reads (`load_records("tc_bench.json")`), never "the newest file", so a
new result file changes no notebook's numbers until the notebook asks for it. Every record carries
`run`: the `run_id` the bench harness stamps, or — for files written before it did — the file name.
Ratios are taken within one run only (`measured_ratio` refuses to mix).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
FP16 = ("float16", "fp16")


def _rows(data):
    # the bench scripts write {"records": [...]}, {"rows": [...]} or a plain list
    rows = (data.get("records") or data.get("rows") or []) if isinstance(data, dict) else data
    return rows if isinstance(rows, list) else []


def load_records(*names: str, results_dir: Path | str = RESULTS_DIR) -> list[dict]:
    """Every timed record of the named files, in one shape: kernel, n, d, causal, dtype, tflops, file, run.

    Records marked failed (`ok: false`) or skipped are left out. A missing file raises FileNotFoundError:
    a notebook that names a file must not silently show nothing."""
    out = []
    for name in names:
        path = Path(results_dir) / name
        data = json.loads(path.read_text())
        meta_run = data.get("run_id") or (data.get("meta") or {}).get("run_id") if isinstance(data, dict) else None
        for r in _rows(data):
            if not isinstance(r, dict) or not isinstance(r.get("tflops"), (int, float)):
                continue
            if r.get("ok") is False or r.get("skipped"):
                continue
            out.append(dict(r, kernel=str(r.get("label") or r.get("kernel")), n=r.get("n", r.get("n_q")),
                            dtype=str(r.get("dtype", "")).replace("torch.", ""), file=path.name,
                            run=str(r.get("run_id") or meta_run or path.name)))
    return out


def run_label(records: list[dict]) -> str:
    """'run <id>' or 'file <name> (no run id: written before the harness stamped runs)', one per run."""
    labels = []
    for r in records:
        lab = (f"file {r['file']} (no run id: written before the harness stamped runs)" if r["run"] == r["file"]
               else f"run {r['run']} ({r['file']})")
        if lab not in labels:
            labels.append(lab)
    return "; ".join(labels) or "no records"


def one_per_shape(records: list[dict]) -> list[dict]:
    """One record per (kernel, N, d, causal, dtype): a later record (a later file in the order the notebook
    named them) replaces an earlier one, so the notebook's order of files decides, not their names."""
    out = {}
    for r in records:
        out[(r["kernel"], r["n"], r["d"], r["causal"], r["dtype"])] = r
    return list(out.values())


def latest_run_cells(paths, cell, keep=lambda r: True) -> dict:
    """{(*cell(row), label): row} over the named result files in order, a later file replacing every row of each
    cell it has (not row by row), so all rows of one cell, and the ratios between them, come from one run.
    keep(row) filters rows; each row gains `file` (its file's name); a missing file raises FileNotFoundError."""
    out: dict = {}
    for path in map(Path, paths):
        run = {(*cell(r), r["label"]): dict(r, file=path.name) for r in _rows(json.loads(path.read_text())) if keep(r)}
        cells = {k[:-1] for k in run}
        out = {k: r for k, r in out.items() if k[:-1] not in cells} | run
    return out


def measured_ratio(records, n, d=64, causal=False, ref=("fa2_tc", "fa2")):
    """(best v_once TFLOP/s / best reference TFLOP/s, v_once kernel, reference, run) at one fp16 shape.

    The tensor-core tier first; v_once only against the reference of its own tier. Both sides come from
    one run: a shape measured in several runs raises ValueError rather than mixing them."""
    for tier_ref in ref:
        def at_shape(pred):
            return [r for r in records if pred(r["kernel"]) and r["n"] == n and r["d"] == d
                    and bool(r["causal"]) == causal and r["dtype"] in FP16]
        base = at_shape(lambda k: k == tier_ref)
        mine = at_shape(lambda k: k.startswith("v_once") and ("_tc" in k) == tier_ref.endswith("_tc"))
        if base and mine:
            runs = {r["run"] for r in base + mine}
            if len(runs) > 1:
                raise ValueError(f"N={n}, d={d}: records from several runs {sorted(runs)}; pass one run's records")
            best = max(mine, key=lambda r: r["tflops"])
            return best["tflops"] / max(r["tflops"] for r in base), best["kernel"], tier_ref, best["run"]
    return None


def find_counter_records(obj):
    """Dicts anywhere in a result file that carry a DRAM byte counter."""
    if isinstance(obj, dict):
        if any("dram" in str(k).lower() for k in obj):
            yield obj
        for v in obj.values():
            yield from find_counter_records(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from find_counter_records(v)


def load_ncu(path: Path | str) -> list[dict]:
    """`ncu --csv` output, one dict per launch (metric name -> value); with the shapes of the
    "target launched <kernel> n=.. d=.. b=.. h=.." lines attached when there is one launch per line."""
    lines = Path(path).read_text().splitlines()
    targets = []
    for line in lines:
        if line.startswith("target launched"):
            words = line.split()
            targets.append(dict([w.split("=", 1) for w in words[3:] if "=" in w], kernel=words[2]))
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    launches: dict[int, dict] = {}
    for r in csv.DictReader(lines[start:]) if start is not None else []:
        try:
            value = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError, AttributeError):
            continue
        launches.setdefault(int(r["ID"]), {"kernel_name": r.get("Kernel Name", "")})[r["Metric Name"]] = value
    out = [launches[i] for i in sorted(launches)]
    if len(out) == len(targets):
        out = [dict(t, **m) for t, m in zip(targets, out)]
    return out
