"""The GPU model against held-out runs of a GPU it covers without a fit of its own (issue 43: the H100).

    PYTHONPATH=. python -m gpumodel.heldout --gpu h100 --runs results/h100_heldout           # writes the record
    PYTHONPATH=. python -m gpumodel.heldout --gpu h100 --runs results/h100_heldout --check   # exit 1: stale or off band

The runs folder holds what the two benchmarks write on that GPU: tc_bench.json (bench/bench_tc.py bench: the forward of
fa2_wgmma, fa2_tc, SDPA flash and cuDNN, fp16/bf16, d = 64/128, N = 512-16k, causal and not) and bwd_bench.json
(bench/bench_bwd.py: the backward of fa2_wgmma, the teaching fa2, SDPA flash and cuDNN; the committed H100 runs'
fa2_wgmma is v3, read as fa2_wgmma_v3: backward_model.kernel_of). Every timed cell is priced by
the model at the cell's B, H, N, d, dtype and mask on that GPU (gpumodel/coverage.py: its datasheet physics, the H200
fit's constants; nothing here fits anything) and compared with the measured median:

    forward   model / measured within ±15% (tensor-core kernels; validate.TC_BAND), N >= 2k, d = 64 and 128
    backward  within ±15% for fa2_wgmma (v4, v3), SDPA flash and cuDNN, ±25% for the teaching fa2 (backward_model.BAND),
              N >= 2k

A cell outside its band fails the check unless results/gpu_model_known_gaps.json names it (its `source` is the runs
file, e.g. "h100_heldout/bwd_bench.json") with the reason: a miss is recorded, never a band widened. The record
(results/gpu_model_<gpu>_heldout.json) keeps every cell, prediction beside measurement, and one track line per kernel
and pass; `fa-traffic validate` prints those lines apart from the fitted GPU's, and tests/test_heldout.py recomputes
the record from the committed runs.
Torch-free.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from counting.gpus import GPUS, get_gpu
from gpumodel import backward_model as bm
from gpumodel import coverage
from gpumodel import gpu_model as gm
from gpumodel.descriptors import describe
from gpumodel.measured import DTYPE, _kernel_of
from gpumodel.validate import BANDED_D, MIN_N, TC_BAND, TEACHING, TEACHING_BAND, gap_reason, known_gaps

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
FORWARD_FILE, BACKWARD_FILE = "tc_bench.json", "bwd_bench.json"
DEVICE_WORD = {"h100": "H100", "h200": "H200"}  # what the runs' meta device must contain for --gpu


# the held-out runs of each GPU the model carries its fit over to (gpumodel/coverage.py): validate and the tests read them
RUNS = {"h100": RESULTS / "h100_heldout"}


def record_file(gpu: str) -> Path:
    return RESULTS / f"gpu_model_{gpu}_heldout.json"


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(RESULTS))
    except ValueError:
        return str(path)


def _check_device(meta: dict, gpu: str, path: Path) -> None:
    word = DEVICE_WORD.get(gpu, gpu.upper())
    if word not in str(meta.get("device", "")):
        raise ValueError(f"{path} was run on {meta.get('device')!r}, not an {word}: not a held-out run of --gpu {gpu}")


def _forward_options(kernel: str, d: int, meta: dict) -> dict:
    """The build a bench_tc.py row ran: its meta records fa2_tc/fa2_wgmma configs per d (the launcher's CONFIGS[d], or
    --configs-from's pick). CONFIGS[d] means forward() was given no config, so it ran its own rule build for the
    shape (fa2_wgmma SIZE_RULES): describe() with no config picks the same one."""
    import importlib

    cfg = meta.get(f"{kernel}_configs", {}).get(str(d))
    if cfg is None or kernel not in ("fa2_tc", "fa2_wgmma"):
        return {}
    mod = importlib.import_module(f"kernels.{kernel}")
    return {} if cfg == mod.CONFIGS.get(d) else {"config": cfg}


def forward_cells(path: Path, gpu: str) -> list[dict]:
    data = json.loads(Path(path).read_text())
    meta = data.get("meta", {})
    _check_device(meta, gpu, path)
    out = []
    for r in data.get("rows", []):
        if not r.get("ok", True) or not r.get("median_ms") or r.get("dtype") not in DTYPE:
            continue
        kernel, opts = _kernel_of(r["kernel"])
        if kernel in ("fa2_tc", "fa2_wgmma"):
            opts = dict(opts, **_forward_options(kernel, r["d"], meta))
        out.append(dict(source=_rel(path), run_id=meta.get("run_id"), pass_name="forward", kernel=kernel,
                        label=r["kernel"], options=opts, batch=r["b"], heads=r["h"], n=r["n"], d=r["d"],
                        dtype=DTYPE[r["dtype"]], causal=bool(r["causal"]), measured_s=r["median_ms"] * 1e-3,
                        timer=r.get("timer") or meta.get("timer"), clock_mhz=r.get("clock_mhz")))
    return out


def backward_cells(path: Path, gpu: str) -> list[dict]:
    data = json.loads(Path(path).read_text())
    meta = data.get("meta", {})
    _check_device(meta, gpu, path)
    out = []
    for r in data.get("rows", []):
        # the build the row's label timed: the committed H100 runs preceded issue 42, their fa2_wgmma is v3
        # (backward_model.BUILD_OF: fa2_wgmma_v3, priced by v3's constants, never re-scored as v4)
        kernel = bm.kernel_of(r.get("kernel"), path, meta, r.get("d"))
        if kernel not in bm.KERNELS or not r.get("ok") or not r.get("bwd_ms") or r.get("dtype") not in bm.DTYPE:
            continue
        out.append(dict(source=_rel(path), run_id=meta.get("run_id"), pass_name="backward", kernel=kernel,
                        label=r["kernel"], options={}, batch=r["b"], heads=r["h"], n=r["n"], d=r["d"],
                        dtype=bm.DTYPE[r["dtype"]], causal=bool(r["causal"]), measured_s=r["bwd_ms"] * 1e-3,
                        timer=meta.get("timing"), clock_mhz=r.get("clock_mhz")))
    return out


def band_of(cell: dict) -> float | None:
    """The cell's band, or None where the targets do not band it (N < 2k; the forward's d other than 64, 128)."""
    if cell["n"] < MIN_N:
        return None
    if cell["pass_name"] == "backward":
        return bm.BAND.get(cell["kernel"]) if cell["d"] in (64, 128) else None
    if cell["d"] not in BANDED_D:
        return None
    return TEACHING_BAND if cell["kernel"] in TEACHING else TC_BAND


def price(cell: dict, gpu: str) -> tuple[float, str]:
    """(model seconds as the run's timer measures them, bound) of one cell on `gpu`."""
    if cell["pass_name"] == "backward":
        p = bm.predict(cell["kernel"], cell["batch"], cell["heads"], cell["n"], cell["n"], cell["d"], cell["dtype"],
                       cell["causal"], gpu=gpu)
        return p.time_s, p.bound
    desc = describe(cell["kernel"], cell["d"], cell["dtype"], cell["causal"], n_q=cell["n"], n_k=cell["n"],
                    **cell["options"])
    p = gm.predict_work(gm.prepare(desc, cell["batch"], cell["heads"], cell["n"], cell["n"], cell["d"], cell["dtype"],
                                   cell["causal"], gpu=gpu), gpu=gpu)
    return gm.as_timed(p, cell["timer"]), gm.as_benchmarked(p, cell["timer"])["bound"]


def compare(cells: list[dict], gpu: str, gaps: dict | None = None) -> list[dict]:
    gaps = known_gaps() if gaps is None else gaps
    out = []
    for c in cells:
        try:
            model, bound = price(c, gpu)
        except ValueError as e:  # a shape the model refuses: recorded, never silently dropped
            out.append(dict(_public(c), model_s=None, ratio=None, band=band_of(c), in_band=None, bound=None,
                            known_miss=None, refused=str(e).splitlines()[0]))
            continue
        ratio = model / c["measured_s"]
        band = band_of(c)
        row = dict(_public(c), model_s=model, ratio=ratio, band=band, bound=bound,
                   in_band=None if band is None else abs(ratio - 1) <= band)
        # the kernel named exactly: validate's prefix match would let the teaching fa2's entry excuse fa2_wgmma
        exact = {"cells": [g for g in gaps.get("cells", []) if g["kernel"] == c["kernel"]]}
        row["known_miss"] = gap_reason(dict(row, quantity=_quantity(c), n=c["n"]), exact) if row["in_band"] is False \
            else None
        out.append(row)
    return out


def _quantity(c: dict) -> str:
    return "time" if c["pass_name"] == "forward" else "backward time"


def _public(c: dict) -> dict:
    keep = ("source", "run_id", "pass_name", "kernel", "label", "options", "batch", "heads", "n", "d", "dtype",
            "causal", "measured_s", "timer", "clock_mhz")
    return {k: c[k] for k in keep}


def track(rows: list[dict]) -> list[dict]:
    """One line per kernel and pass over the banded cells: in band, known misses, median and worst |model/measured - 1|."""
    groups: dict = {}
    for r in rows:
        if r["band"] is not None and r["ratio"] is not None:
            groups.setdefault((r["pass_name"], r["kernel"]), []).append(r)
    out = []
    for (pass_name, kernel), sel in sorted(groups.items(), key=lambda kv: (kv[0][0] != "forward", kv[0][1])):
        errs = sorted(abs(r["ratio"] - 1) for r in sel)
        worst = max(sel, key=lambda r: abs(r["ratio"] - 1))
        out.append(dict(pass_name=pass_name, kernel=kernel, cells=len(sel), band=sel[0]["band"],
                        in_band=sum(bool(r["in_band"]) for r in sel),
                        known_misses=sum(bool(r["known_miss"]) for r in sel),
                        median_abs_err=round(errs[len(errs) // 2], 4), worst_ratio=round(worst["ratio"], 4),
                        median_ratio=round(statistics.median(r["ratio"] for r in sel), 4)))
    return out


def groups(rows: list[dict]) -> dict:
    """`predict`'s track record on this GPU, as gpumodel/accuracy.py's for the fitted one: {"pass/kernel/d/causal":
    {cells, median, p10, p90, in_band, band}} over the banded cells."""
    from gpumodel.accuracy import _pct

    out: dict = {}
    for r in rows:
        if r["band"] is None or r["ratio"] is None:
            continue
        key = f"{r['pass_name']}/{r['kernel']}/{r['d']}/{'causal' if r['causal'] else 'non-causal'}"
        out.setdefault(key, []).append(r)
    return {k: dict(cells=len(g), median=round(_pct([r["ratio"] for r in g], 0.5), 4),
                    p10=round(_pct([r["ratio"] for r in g], 0.1), 4), p90=round(_pct([r["ratio"] for r in g], 0.9), 4),
                    in_band=round(sum(bool(r["in_band"]) for r in g) / len(g), 4), band=g[0]["band"])
            for k, g in sorted(out.items())}


def record(gpu: str, pass_name: str, kernel: str, d: int, causal: bool) -> dict | None:
    """The committed held-out track record of one kernel, pass, d and mask on `gpu` (None: none committed)."""
    doc = load(gpu)
    return None if doc is None else doc.get("groups", {}).get(
        f"{pass_name}/{kernel}/{d}/{'causal' if causal else 'non-causal'}")


def unexplained(rows: list[dict]) -> list[dict]:
    """Banded cells out of band with no known-gap entry: what fails the check."""
    return [r for r in rows if r["in_band"] is False and not r["known_miss"]]


def run_files(runs: Path) -> dict:
    runs = Path(runs)
    return {p: f for p, f in (("forward", runs / FORWARD_FILE), ("backward", runs / BACKWARD_FILE)) if f.exists()}


def build(gpu: str, runs: Path) -> dict:
    """The record: every cell of the runs folder priced on `gpu`, and the track lines."""
    key = get_gpu(gpu).key
    if not coverage.covers(key):
        raise ValueError(f"the GPU model covers the {coverage.names()} only, not {key}")
    files = run_files(runs)
    if not files:
        raise ValueError(f"{runs} holds neither {FORWARD_FILE} nor {BACKWARD_FILE}")
    cells = []
    if "forward" in files:
        cells += forward_cells(files["forward"], key)
    if "backward" in files:
        cells += backward_cells(files["backward"], key)
    rows = compare(cells, key)
    clocks = [c["clock_mhz"] for c in cells if c.get("clock_mhz")]
    return dict(
        about=__doc__.split("\n\n")[0], gpu=key, gpu_name=GPUS[key].name, footing=coverage.footing(key),
        model=coverage.describe_footing(key), runs={p: _rel(f) for p, f in files.items()},
        hbm_rate_bytes_per_s=coverage.hbm_rate(key),
        median_clock_mhz=statistics.median(clocks) if clocks else None,
        rule=(f"ratio = model / measured median; banded at N >= {MIN_N}: forward ±{TC_BAND:.0%} (d = 64, 128), "
              f"backward ±15% (fa2_wgmma, fa2_wgmma_v3, sdpa_flash, sdpa_cudnn), ±25% (the teaching fa2); a miss stays "
              "a miss unless "
              "results/gpu_model_known_gaps.json names it with its reason"),
        command=f"python -m gpumodel.heldout --gpu {key} --runs {_rel(Path(runs))}",
        track=track(rows), groups=groups(rows), unexplained=len(unexplained(rows)), cells=rows)


def load(gpu: str) -> dict | None:
    try:
        return json.loads(record_file(gpu).read_text())
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpumodel.heldout", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="h100", help="a GPU the model covers (gpumodel/coverage.py)")
    ap.add_argument("--runs", required=True, help="folder with tc_bench.json and/or bwd_bench.json from that GPU")
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed record is stale or a cell is "
                                                         "out of band with no known-gap reason")
    ap.add_argument("--out", help="where to write the record (default results/gpu_model_<gpu>_heldout.json)")
    args = ap.parse_args(argv)
    try:
        doc = build(args.gpu, Path(args.runs))
    except (ValueError, OSError) as e:
        ap.error(str(e))
    path = Path(args.out) if args.out else record_file(doc["gpu"])
    for t in doc["track"]:
        print(line(t, doc["gpu"]))
    bad = unexplained(doc["cells"])
    for r in bad:
        print(f"  OUT OF BAND: {r['pass_name']} {r['kernel']} N={r['n']} d={r['d']} {r['dtype']}"
              f"{' causal' if r['causal'] else ''}: model/measured {r['ratio']:.3f} (band ±{r['band']:.0%})",
              file=sys.stderr)
    if args.check:
        committed = json.loads(path.read_text()) if path.exists() else None
        if committed != json.loads(json.dumps(doc)):
            print(f"{path} is stale: run {doc['command']}", file=sys.stderr)
            return 1
        return 1 if bad else 0
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path} ({len(doc['cells'])} cells)")
    return 1 if bad else 0


def line(t: dict, gpu: str) -> str:
    """A track line as validate prints it."""
    miss = f", {t['known_misses']} known misses" if t["known_misses"] else ""
    return (f"  {t['kernel']:<15} {t['pass_name']:<8} {gpu} held-out {t['in_band']}/{t['cells']} within "
            f"±{t['band']:.0%}{miss}, median {t['median_abs_err']:.1%}, worst ratio {t['worst_ratio']:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
