"""The issue #941 verdict's numbers, read from a tc_bench.json (so the write-up never holds hand-copied cells).

    python bench/verdict_table.py [results/tc_bench.json] [--dtype float16]
    python bench/verdict_table.py --cluster [results/cluster_bench.json ...] [--dtype float16]

Prints the markdown table of docs/issue-941-verdict.md (fa2_tc and every v_once_tc mode, TFLOP/s, and
the best v_once over fa2_tc taken in the same run), then the ranges the text quotes. With --cluster: the
cluster v_once (issue 18) against fa2_wgmma, the spilled v_once_tc and cuDNN, from bench/cluster_speed.py's
JSON, and the model's predicted ratio beside each measured one (gpumodel.gpu_model). Several files: a later
file's cells replace an earlier one's (each cell's ratios stay within one run); default CLUSTER_RUNS. Where the
default build holds no row (N = 16k), the cluster of 16 (config MAX_CLUSTER=16) stands in.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/verdict_table.py --cluster` reads analysis/

MODES = ["v_once_tc_sram_lazy", "v_once_tc_sram_eager", "v_once_tc_hbm_lazy", "v_once_tc_hbm_eager"]  # KernelSpec.label
OLD_NAMES = {f"v_once_tc[{m.split('_')[3]},{m.split('_')[4]}]": m for m in MODES}  # files before bench.harness
CELLS = [(64, 0, n) for n in (512, 1024, 2048, 16384)] + [(64, 1, n) for n in (512, 16384)] + \
        [(128, 0, n) for n in (512, 1024, 2048, 4096, 16384)] + [(128, 1, n) for n in (512, 2048, 16384)]


def load(path) -> dict:
    rows = json.loads(Path(path).read_text())["rows"]
    return {(r["dtype"], r["d"], bool(r["causal"]), r["n"], OLD_NAMES.get(r["kernel"], r["kernel"])): r for r in rows
            if r.get("ok", True) and r.get("tflops")}


def best_ratio(t, dtype, d, causal, n):
    fa2 = t.get((dtype, d, causal, n, "fa2_tc"))
    modes = [(t[(dtype, d, causal, n, m)]["tflops"], m) for m in MODES if (dtype, d, causal, n, m) in t]
    if fa2 is None or not modes:
        return None, None
    best, mode = max(modes)
    return best / fa2["tflops"], mode


RESULTS = Path(__file__).resolve().parent.parent / "results"
CLUSTER_RUNS = (RESULTS / "cluster_bench.json", RESULTS / "cluster_bench_16k.json")
CLUSTER_BUILDS = ("v_once_cluster_cluster", 'v_once_cluster{"MAX_CLUSTER":16}')  # the default, then CS = 16


def cluster_table(paths, dtype: str) -> bool:
    """Prints the table; False (nothing printed) where no cell has both the cluster build and fa2_wgmma."""
    from gpumodel import gpu_model as gm
    from gpumodel.measured import run_options  # the build fa2_wgmma ran in that file
    from analysis.results import latest_run_cells

    t = latest_run_cells(paths, lambda r: (r["d"], bool(r["causal"]), r["b"], r["h"], r["n"]),
                         keep=lambda r: r.get("median_ms") and r.get("dtype") == dtype)
    dt = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    lines = ["| d | causal | B·H | N | CS | cluster TFLOP/s | fa2_wgmma | cluster / fa2_wgmma time | model's | "
             "/ v_once_tc (spilled) | cuDNN |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios, preds = [], []
    for key in sorted({k[:5] for k in t}):
        c = next((t[key + (b,)] for b in CLUSTER_BUILDS if key + (b,) in t), None)
        f = t.get(key + ("fa2_wgmma",))
        v, cu = t.get(key + ("v_once_tc_hbm_lazy",)), t.get(key + ("sdpa_cudnn",))
        if not c or not f:
            continue
        d, causal, b, h, n = key
        # as each file's timer measured them (gpu_model.as_timed: do_bench hides the launch work, per-call events not)
        pc = gm.as_timed(gm.predict("v_once_cluster", b, h, n, None, d, dt, causal), c.get("timer"))
        pf = gm.as_timed(gm.predict("fa2_wgmma", b, h, n, None, d, dt, causal,
                                    **run_options("fa2_wgmma", f["file"], d)), f.get("timer"))
        ratio, pred = c["median_ms"] / f["median_ms"], pc / pf
        ratios.append(ratio)
        preds.append(pred)
        spilled = f"{c['median_ms'] / v['median_ms']:.2f}" if v else "—"
        cudnn = f"{cu['tflops']:.0f}" if cu else "—"
        lines.append(f"| {d} | {'yes' if causal else 'no'} | {b * h} | {n} | {c.get('cluster_size')} | "
                     f"{c['tflops']:.0f} | {f['tflops']:.0f} | {ratio:.2f} | {pred:.2f} | {spilled} | {cudnn} |")
    if not ratios:
        return False
    print("\n".join(lines))
    print(f"\n{dtype}: cluster v_once / fa2_wgmma time {min(ratios):.2f}-{max(ratios):.2f} "
          f"(model {min(preds):.2f}-{max(preds):.2f}); cells where it is faster: {sum(r < 1 for r in ratios)}")
    return True


def _check_file(ap, path, cluster: bool) -> None:
    """A results file the table reads (tc_bench.json: {"rows": [...]}; --cluster: rows, records or a list, as
    analysis.results reads them); else ap.error, one line."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:  # missing, unreadable or not JSON
        ap.error(f"cannot read {path}: {exc}")
    if cluster and not isinstance(data, dict):
        data = {"rows": data}
    if not (isinstance(data, dict) and isinstance(data.get("rows", data.get("records") if cluster else None), list)):
        ap.error(f"{path} is not a benchmark's JSON (no list of rows)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="*", default=None)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--cluster", action="store_true", help="the cluster v_once table (issue 18)")
    args = ap.parse_args(argv)
    if len(args.path or ()) > 1 and not args.cluster:  # the others were ignored
        ap.error(f"the verdict table reads one tc_bench.json, got {len(args.path)} files (several: --cluster)")
    for path in args.path or (CLUSTER_RUNS if args.cluster else [RESULTS / "tc_bench.json"]):
        _check_file(ap, path, args.cluster)
    if args.cluster:
        if not cluster_table(args.path or CLUSTER_RUNS, args.dtype):
            ap.error(f"no {args.dtype} cell with both v_once_cluster and fa2_wgmma timed in "
                     f"{', '.join(map(str, args.path or CLUSTER_RUNS))}")
        return 0
    args.path = args.path[0] if args.path else str(RESULTS / "tc_bench.json")
    t = load(args.path)
    dt = args.dtype
    if not any(k[0] == dt and k[4] == "fa2_tc" and best_ratio(t, *k[:4])[0] for k in t):
        ap.error(f"no {dt} cell with both fa2_tc and a v_once_tc mode timed in {args.path}")
    print("| d | causal | N | fa2_tc | v_once sram lazy | sram eager | hbm lazy | hbm eager | best v_once / fa2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d, causal, n in CELLS:
        fa2 = t.get((dt, d, bool(causal), n, "fa2_tc"))
        if fa2 is None:
            continue
        cells = [f"{t[(dt, d, bool(causal), n, m)]['tflops']:.0f}" if (dt, d, bool(causal), n, m) in t else "—"
                 for m in MODES]
        ratio, mode = best_ratio(t, dt, d, bool(causal), n)
        where = " (hbm)" if mode and "hbm" in mode and n <= 1024 else ""
        print(f"| {d} | {'yes' if causal else 'no'} | {n} | {fa2['tflops']:.0f} | " + " | ".join(cells)
              + f" | {ratio:.2f}{where} |")
    all_cells = sorted({k[1:4] for k in t if k[0] == dt})
    ratios = {c: best_ratio(t, dt, *c)[0] for c in all_cells}
    small = [r for (d, c, n), r in ratios.items() if r is not None and n == 512]
    large = [r for (d, c, n), r in ratios.items() if r is not None and n >= 2048]
    worst = min(t[k]["tflops"] / t[k[:4] + ("fa2_tc",)]["tflops"] for k in t
                if k[0] == dt and k[4] in MODES and k[:4] + ("fa2_tc",) in t)
    span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}" if xs else "no cell"  # noqa: E731
    print(f"\n{dt}: best v_once / fa2_tc at N = 512: {span(small)}; "
          f"N >= 2048: {span(large)}; worst mode anywhere: {worst:.2f}; "
          f"cells where v_once is faster: {sum(r > 1 for r in ratios.values() if r is not None)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
