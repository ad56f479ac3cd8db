"""The cluster v_once kernel (issue 18) through the time model: the refit of its one constant and the model's side
of the verdict against fa2_wgmma. Above gpumodel/gpu_model.py, which reads the fitted constant from its file
(gpumodel/cluster_model.py exposed_cycles_per_tile) and never imports this module.

    python -m gpumodel.cluster_verdict            # v_once_cluster / fa2_wgmma time per cell of the issue's grid
    python -m gpumodel.cluster_verdict --fit      # refit the exposed latency, write results/cluster_model_fit.json
"""
from __future__ import annotations

import argparse
import json
import sys

from gpumodel import cluster_model as cm
from gpumodel import gpu_model as gm
from gpumodel.fit_gpu_model import work_of
from gpumodel.measured import bench_cells


def fit_exposed(cells: list[dict]) -> dict:
    """The median over the training cells of the per-tile cycles that make the model's time the measured one
    (bisection per cell: the model's time grows monotonically with the constant)."""
    implied = []
    for c in cells:
        work = work_of(c)
        lo, hi = 0.0, 20000.0
        for _ in range(40):
            mid = (lo + hi) / 2
            t = gm.as_timed(gm.predict_work(work, dict(gm.load_params(), cluster_exposed_cycles=mid)), c.get("timer"))
            lo, hi = (mid, hi) if t < c["time_s"] else (lo, mid)
        implied.append(((lo + hi) / 2, c))
    values = sorted(v for v, _ in implied)
    med = values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:len(values) // 2 + 1]) / 2
    return {"exposed_cycles_per_tile": round(med, 1),
            "implied_per_training_cell": [dict(n=c["n_q"], batch=c["batch"], heads=c["heads"], d=c["d"],
                                               cycles=round(v, 1)) for v, c in implied],
            "method": "median over the training cells of the per-tile cycles at which the model's time equals the "
                      "measured median (gpumodel/cluster_verdict.py fit_exposed, gpumodel/cluster_model.py is_train)",
            "source": "results/cluster_bench.json"}


# -- the model's side of the verdict (issue 18 item 4): v_once_cluster against fa2_wgmma on the grid -----
GRID_N = (512, 1024, 2048, 4096, 8192, 16384)
SMALL_BH = ((1, 1), (1, 4), (2, 8))  # B·H <= 16: where splitting the keys adds CTAs FA2 lacks


def verdict_rows(dtypes=("fp16", "bf16"), dims=cm.HEAD_DIMS, causal=(False, True)) -> list[dict]:
    """Predicted time of v_once_cluster over fa2_wgmma per cell (the bench's B = 16k/N, H = 2048/d, and small
    B·H), with the cluster size, both bounds and the cluster's own terms: what the measurement will be read against."""
    rows = []
    for dtype in dtypes:
        for d in dims:
            for c in causal:
                for n in GRID_N:
                    for b, h in ((max(1, 16384 // n), max(1, 2048 // d)),) + SMALL_BH:
                        try:
                            vc = gm.predict(cm.KERNEL, b, h, n, None, d, dtype, c)
                        except ValueError:
                            continue
                        fa2 = gm.predict("fa2_wgmma", b, h, n, None, d, dtype, c)
                        # as the bench times them (do_bench: each call's launch work under the one before)
                        tc, tf = gm.as_timed(vc, gm.DO_BENCH), gm.as_timed(fa2, gm.DO_BENCH)
                        rows.append(dict(dtype=dtype, d=d, causal=c, n=n, batch=b, heads=h,
                                         cluster_size=cm.describe(d, dtype, c, n_q=n)["cluster_size"],
                                         ratio=tc / tf, cluster_ms=tc * 1e3,
                                         fa2_ms=tf * 1e3, cluster_bound=vc.bound, fa2_bound=fa2.bound,
                                         dsmem_share=vc.terms["dsmem"] / vc.time_s, sync_share=vc.terms["sync"] / vc.time_s))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpumodel.cluster_verdict",
                                 description="the GPU model's v_once_cluster / fa2_wgmma on the issue's grid")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--fit", action="store_true", help="refit the exposed per-tile latency on the training split "
                    "and write results/cluster_model_fit.json")
    args = ap.parse_args(argv)
    if args.fit:
        train = [c for c in bench_cells() if cm.is_train(c)]
        if not train:
            print("no training cells (results/cluster_bench.json)", file=sys.stderr)
            return 2
        fit = fit_exposed(train)
        cm.FIT_FILE.write_text(json.dumps(fit, indent=1) + "\n")
        print(f"{len(train)} training cells: {fit['exposed_cycles_per_tile']} cycles per tile -> {cm.FIT_FILE}")
        return 0
    rows = verdict_rows()
    if args.format == "json":
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    k = cm.load_constants()
    print(f"model: v_once_cluster time / fa2_wgmma time (> 1: FA2 faster); cluster constants: {k['source']}")
    print(f"{'dtype':5} {'d':>3} {'causal':6} {'N':>6} {'B':>3} {'H':>3} {'CS':>3} {'ratio':>6} {'cluster ms':>10} "
          f"{'fa2 ms':>8} {'bound':>7} {'fa2 bound':>9} {'dsmem':>6} {'sync':>6}")
    for r in rows:
        print(f"{r['dtype']:5} {r['d']:>3} {'y' if r['causal'] else '':6} {r['n']:>6} {r['batch']:>3} {r['heads']:>3} "
              f"{r['cluster_size']:>3} {r['ratio']:>6.2f} {r['cluster_ms']:>10.4f} {r['fa2_ms']:>8.4f} "
              f"{r['cluster_bound']:>7} {r['fa2_bound']:>9} {r['dsmem_share']:>6.1%} {r['sync_share']:>6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
