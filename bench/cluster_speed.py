"""The cluster "multiply V once" kernel timed beside fa2_wgmma, the spilled v_once and SDPA (issue 18; GPU).

    PYTHONPATH=. python bench/cluster_speed.py [--out DIR] [--n 1024,4096,8192,16384] [--d 64,128] [--small]

Grid (fp16): batch·N = 16k tokens, H = 2048 // d heads, N in --n, causal and not; with --small also cells of
B·H <= 16 (B = 1, H = 4 and 16, N = 8k), where splitting the keys of a Q block over a cluster gives a
parallelism FA2 lacks. Entries: v_once_cluster (placement="cluster"; a cell whose row no cluster holds is
recorded as skipped with the launcher's message), fa2_wgmma, v_once_tc (placement="hbm", rescale="lazy": the
spill the cluster avoids), SDPA flash and cuDNN. Each entry is checked on its timed inputs against the float64
reference (bench.harness.measure) before bench.harness.time_fn times it. Writes cluster_speed.json (one record
per entry and cell, the run id, the cluster plan of each cell) and prints a table of ms and the ratio to
fa2_wgmma in the same run. CANDIDATES: other v_once_cluster builds (config=) timed beside the default.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

TOKENS = 16384
HIDDEN = 2048
LABELS = ("v_once_cluster_cluster", "fa2_wgmma", "v_once_tc_hbm_lazy", "sdpa_flash", "sdpa_cudnn")
# v_once_cluster builds timed beside the default (--set candidates; MAX_CLUSTER=16 only where it picks 16)
# STAGES=2: the first visit's fixed 2-slot ring (the default now deepens it into the shared memory f leaves)
CANDIDATES = ({"NWG": 2}, {"BLOCK_N": 128}, {"STAGES": 2}, {"MAX_CLUSTER": 16})


def cells(ns, ds, small: bool) -> list[tuple[int, int, int, int]]:
    """(B, H, N, d): the issue's grid, then the small batch·heads cells."""
    out = [(max(1, TOKENS // n), HIDDEN // d, n, d) for d in ds for n in ns]
    if small:
        out += [(1, h, 8192, d) for d in ds for h in (4, 16)]
    return out


def main(argv=None) -> int:
    import torch

    from kernels import v_once_cluster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    ap.add_argument("--n", default="1024,4096,8192,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtypes", default="float16", help="float16,bfloat16")
    ap.add_argument("--small", action="store_true", help="add the B*H <= 16 cells")
    ap.add_argument("--max-sets", type=int, default=3)
    ap.add_argument("--set", choices=("main", "candidates", "all"), default="all",
                    help="main: the default build, fa2_wgmma, v_once_tc, SDPA; candidates: CANDIDATES only "
                         "(separate processes, so a build that hangs cannot take the other's time)")
    args = ap.parse_args(argv)
    harness.int_list(ap, "--n", args.n)
    harness.int_list(ap, "--d", args.d, choices=v_once_cluster.HEAD_DIMS, why="v_once_cluster's head dims")
    harness.flag_list(ap, "--causal", args.causal)
    harness.name_list(ap, "--dtypes", args.dtypes, ("float16", "bfloat16"), "dtype")
    harness.positive_int(ap, "--max-sets", args.max_sets)
    if harness.no_gpu("cluster_speed"):
        return 2
    table = harness.entries(list(LABELS), sdpa=("flash", "cudnn"), all_options=True)
    ent = {e.label: e for e in table if e.label in LABELS}
    missing = [x for x in LABELS if x not in ent]
    if missing:
        print(f"entries not available here: {missing}", file=sys.stderr)
    if "v_once_cluster_cluster" in ent and args.set != "main":
        base = ent["v_once_cluster_cluster"]
        for cfg in CANDIDATES:
            label = "v_once_cluster" + json.dumps(cfg, sort_keys=True).replace(" ", "")
            ent[label] = harness.Entry(label, base.tier, base.spec, dict(base.options), dict(cfg))
    if args.set == "candidates":
        ent = {k: e for k, e in ent.items() if e.config}
    name = "cluster_speed.json" if args.set == "all" else f"cluster_speed_{args.set}.json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    grid = [(dt, *c) for dt in args.dtypes.split(",")
            for c in cells([int(x) for x in args.n.split(",")], [int(x) for x in args.d.split(",")], args.small)]
    for dtype, b, h, n, d in grid:
        sets = harness.input_sets(b, h, n, n, d, getattr(torch, dtype), max_sets=args.max_sets)
        for causal in [bool(int(x)) for x in args.causal.split(",")]:
            for label in ent:
                ours = label.startswith("v_once_cluster")
                cfg = ent[label].config
                plan = v_once_cluster.cluster_plan(n, d, config=cfg) if ours else None
                if cfg and cfg.get("MAX_CLUSTER") == 16 and (plan is None or plan.cluster_size < 16):
                    continue  # the same build as the default's wherever a portable cluster holds the row
                if ours and plan is None:  # no cluster holds the row: not run
                    rec = dict(label=label, kernel=label, b=b, h=h, n=n, n_q=n, n_k=n, d=d, causal=causal,
                               dtype=dtype, run_id=harness.run_info()["run_id"],
                               skipped=f"Nk={n} over the {v_once_cluster.max_keys(d, config=cfg)} keys a cluster "
                                       f"holds at d={d}")
                else:
                    rec = harness.measure(ent[label], sets, causal)
                rec["cluster_size"] = plan.cluster_size if plan else None
                rows.append(rec)
                print(f"{label:24s} {dtype} B={b} H={h} N={n} d={d} causal={causal} "
                      f"{rec.get('median_ms', rec.get('skipped'))}", file=sys.stderr, flush=True)
        del sets
        torch.cuda.empty_cache()
        # after every cell: a run cut short by its time limit still leaves what it measured
        harness.write_rows(out, name, rows)
    print_table(rows)
    return 0 if all(r.get("ok", True) for r in rows) else 1


def _fmt(x, spec: str, width: int) -> str:
    return format(x, spec) if isinstance(x, (int, float)) and x is not None else "-".rjust(width)


def print_table(rows) -> None:
    """Every record with its time ratio to fa2_wgmma in the same run, then per cell the fastest v_once_cluster
    build against fa2_wgmma and cuDNN (the proposal at its strongest)."""
    key = lambda r: (r["b"], r["h"], r["n"], r["d"], r["causal"], r.get("dtype", "float16"))  # noqa: E731
    fa2 = {key(r): r.get("median_ms") for r in rows if r["label"] == "fa2_wgmma"}
    cudnn = {key(r): r.get("median_ms") for r in rows if r["label"] == "sdpa_cudnn"}
    print(f"{'kernel':34s} {'B':>3s} {'H':>3s} {'N':>6s} {'d':>4s} {'causal':>6s} {'CS':>3s} {'ms':>9s} {'TFLOP/s':>8s} "
          f"{'t/fa2':>7s}  ok")
    for r in rows:
        ms, base = r.get("median_ms"), fa2.get(key(r))
        ratio = ms / base if ms and base else None
        print(f"{r['label']:34s} {r['b']:3d} {r['h']:3d} {r['n']:6d} {r['d']:4d} {str(r['causal']):>6s} "
              f"{_fmt(r.get('cluster_size'), '3d', 3)} {_fmt(ms, '9.4f', 9)} {_fmt(r.get('tflops'), '8.1f', 8)} "
              f"{_fmt(ratio, '7.3f', 7)}  {r.get('ok', '-')} {str(r.get('skipped', ''))[:60]}")
    best: dict = {}
    for r in rows:
        if r["label"].startswith("v_once_cluster") and r.get("median_ms"):
            if key(r) not in best or r["median_ms"] < best[key(r)]["median_ms"]:
                best[key(r)] = r
    print(f"\nfastest v_once_cluster build per cell: {'B':>3s} {'H':>3s} {'N':>6s} {'d':>4s} {'causal':>6s} {'CS':>3s} "
          f"{'ms':>9s} {'t/fa2':>7s} {'t/cuDNN':>7s}  dtype, build")
    for k, r in sorted(best.items()):
        ms = r["median_ms"]
        f, c = fa2.get(k), cudnn.get(k)
        print(f"{'':38s} {k[0]:3d} {k[1]:3d} {k[2]:6d} {k[3]:4d} {str(k[4]):>6s} {_fmt(r.get('cluster_size'), '3d', 3)} "
              f"{ms:9.4f} {_fmt(ms / f if f else None, '7.3f', 7)} {_fmt(ms / c if c else None, '7.3f', 7)}  "
              f"{k[5]}, {r['label']}")

if __name__ == "__main__":
    sys.exit(main())
