"""Check, then time, every registered kernel beside torch SDPA's backends, in one GPU visit.

    PYTHONPATH=. python bench/bench_kernels.py [--out DIR] [--kernels fa2,fa2_tc] [--quick]
                                                [--budget-s 240] [--max-call-s 1.0]

1. Check: each entry of bench.harness's table (every kernel's BENCH_OPTIONS, SDPA's backends) by the
   harness's rule (float64 reference, poisoned outputs, odd shapes, Nq != Nk, rows that see no key);
   an entry that fails is not timed, and each timed shape is checked again on its own inputs.
2. Time: fp16, N = Nq = Nk in 512 ... 16384, d in (64, 128), causal and not; batch·N = 16384 and
   hidden = 2048 (H = 2048 / d), the FlashAttention papers' convention; bench.harness.time_fn
   (triton's do_bench where present, median, inputs rotated over sets larger than the L2).
   torch SDPA's math, efficient, flash and cuDNN backends run on the same inputs; a backend that
   errors is recorded with its error. Slow kernels are capped: before each call, its time is
   predicted from the last two sizes measured (t ~ N^p); a predicted call over --max-call-s, or a
   run past --budget-s, is skipped and recorded with the reason.
3. Write bench_kernels.json (every record), bench_kernels.md (tables, formulas, what was skipped)
   and bench_kernels.png (TFLOP/s and effective GB/s against N) to DIR (default $OUT, else
   results/).

TFLOP/s = bench.harness.flops / time (the formula is recorded in the JSON). Effective GB/s = counting.headline.min_hbm_bytes / time:
each of q, k, v, o moved once, plus the float32 lse: (2·Nq·d + 2·Nk·d)·2 + 4·Nq bytes per (b, h).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

TOKENS = 16384  # batch · N
HIDDEN = 2048  # heads · d
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_SEQS = (1024, 4096, 16384)
MATH_MAX_BYTES = 48 * 2**30  # the math backend materialises B·H·N² scores (several copies)


def run(args) -> dict:
    import torch

    names = {n for n in args.kernels.split(",") if n}
    all_entries = harness.entries(names)
    env = harness.environment()
    out = dict(env, device=torch.cuda.get_device_name(), started=time.strftime("%Y-%m-%d %H:%M:%S"),
               convention=f"fp16; batch*N = {TOKENS}; hidden = {HIDDEN} (H = {HIDDEN}/d)",
               bytes_formula="min_hbm_bytes = B*H*((2*Nq*d + 2*Nk*d)*itemsize + 4*Nq)",
               checks={}, records=[], args=vars(args))
    t_start = time.time()
    ok = {}
    for e in all_entries:  # 1. check (bench.harness's rule)
        t0 = time.time()
        chk = harness.check_entry(e)
        out["checks"][e.label] = chk
        ok[e.label] = chk["ok"]
        print(f"check {e.label:<24} ok={chk['ok']} "
              f"{[round(p.get('rel_err', float('nan')), 5) for p in chk['problems']]} "
              f"({time.time() - t0:.1f} s)", flush=True)

    ns = QUICK_SEQS if args.quick else SEQS
    for d in (64, 128):  # 2. time
        for causal in (False, True):
            history = {e.label: [] for e in all_entries}
            for n in ns:
                b, h = TOKENS // n, HIDDEN // d
                sets = harness.input_sets(b, h, n, n, d, torch.float16, max_sets=4)
                for e in all_entries:
                    est = harness.predict(history[e.label], n)
                    skip = None
                    if not ok[e.label]:
                        skip = "failed the correctness check"
                    elif e.backend == "math" and b * h * n * n * 12 > MATH_MAX_BYTES:
                        skip = f"math backend would materialise {b * h * n * n * 12 / 2**30:.0f} GiB"
                    elif est is not None and est > args.max_call_s:
                        skip = f"predicted {est:.2f} s per call > cap {args.max_call_s} s"
                    elif time.time() - t_start > args.budget_s:
                        skip = f"time budget of {args.budget_s} s spent"
                    if skip:
                        rec = dict(label=e.label, kernel=e.label, tier=e.tier, n=n, d=d, causal=causal, batch=b,
                                   heads=h, dtype="float16", skipped=skip, run_id=env["run_id"])
                    else:
                        rec = harness.measure(e, sets, causal, rep_ms=args.target_s * 1e3)
                    if "median_ms" in rec:
                        history[e.label].append((n, rec["median_ms"] / 1e3))
                    out["records"].append(rec)
                    if "skipped" in rec:
                        print(f"d={d} causal={causal:d} N={n:>5} {e.label:<24} skipped: "
                              f"{rec['skipped']}", flush=True)
                    else:
                        print(f"d={d} causal={causal:d} N={n:>5} {e.label:<24} "
                              f"{rec['median_ms']:9.3f} ms {rec['tflops']:7.2f} TFLOP/s "
                              f"{rec['gbps']:8.1f} GB/s", flush=True)
                del sets
                torch.cuda.empty_cache()
    out["seconds"] = round(time.time() - t_start, 1)
    return out


def markdown(res) -> str:
    recs = res["records"]
    labels = list(dict.fromkeys(r["label"] for r in recs))
    lines = [f"# Kernel benchmark: {res['device']}", "",
             f"torch {res['torch']}, cupy {res.get('cupy')}, NVRTC {res.get('nvrtc')}; "
             f"started {res['started']}, {res.get('seconds')} s; run id {res.get('run_id')}.", "",
             f"Convention: {res['convention']}. Times: {res.get('timer')}, over rotated input "
             "sets (bench/harness.py).", "",
             f"- TFLOP/s = {res['flops_formula']} / time.",
             f"- effective GB/s = {res['bytes_formula']} / time (each input and output moved once).",
             "", "## Correctness checks (bench.harness: relative error of o against float64, fp16 then bf16)", "",
             "| kernel | ok | errors |", "|---|---|---|"]
    for label, chk in res["checks"].items():
        errs = ", ".join(f"{p['rel_err']:.1e}" if "rel_err" in p else p.get("error", p.get("skipped", "-"))[:60]
                         for p in chk["problems"])
        lines.append(f"| {label} | {'yes' if chk['ok'] else '**NO**'} | {errs} |")
    for metric, unit in (("tflops", "TFLOP/s"), ("gbps", "effective GB/s"), ("median_ms", "ms")):
        lines += ["", f"## {unit}", ""]
        for d in (64, 128):
            for causal in (False, True):
                sub = [r for r in recs if r["d"] == d and r["causal"] == causal]
                if not sub:
                    continue
                ns = sorted({r["n"] for r in sub})
                lines += [f"d = {d}, {'causal' if causal else 'non-causal'}", "",
                          "| kernel | " + " | ".join(f"N={n}" for n in ns) + " |",
                          "|---|" + "---|" * len(ns)]
                for label in labels:
                    cells = []
                    for n in ns:
                        r = next((x for x in sub if x["label"] == label and x["n"] == n), None)
                        cells.append("-" if r is None or metric not in r else
                                     (f"{r[metric]:.3f}" if metric == "median_ms" else f"{r[metric]:.1f}"))
                    lines.append(f"| {label} | " + " | ".join(cells) + " |")
                lines.append("")
    lines += ["## Teaching fa2 vs teaching naive (time ratio naive / fa2)", ""]
    for r in recs:
        if r["label"] == "fa2" and "median_ms" in r and r["n"] >= 4096:
            nv = next((x for x in recs if x["label"] == "naive" and x["n"] == r["n"] and x["d"] == r["d"]
                       and x["causal"] == r["causal"] and "median_ms" in x), None)
            if nv:
                lines.append(f"- N={r['n']}, d={r['d']}, {'causal' if r['causal'] else 'non-causal'}: "
                             f"naive {nv['median_ms']:.2f} ms, fa2 {r['median_ms']:.2f} ms, "
                             f"ratio {nv['median_ms'] / r['median_ms']:.2f}")
    skipped = [r for r in recs if "skipped" in r]
    if skipped:
        lines += ["", "## Skipped", "", "| kernel | d | causal | N | why |", "|---|---|---|---|---|"]
        for r in skipped:
            lines.append(f"| {r['label']} | {r['d']} | {r['causal']} | {r['n']} | {r['skipped']} |")
    return "\n".join(lines) + "\n"


def plot(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in res["records"] if "median_ms" in r]
    labels = list(dict.fromkeys(r["label"] for r in res["records"]))
    combos = [(d, c) for d in (64, 128) for c in (False, True)]
    fig, axes = plt.subplots(2, len(combos), figsize=(5 * len(combos), 8), squeeze=False)
    styles = {"teaching": "-o", "tensor-core": "-s", "torch": "--^"}
    for col, (d, causal) in enumerate(combos):
        for row, (metric, unit) in enumerate((("tflops", "TFLOP/s (paper FLOPs)"),
                                              ("gbps", "effective GB/s (min HBM bytes)"))):
            ax = axes[row][col]
            for label in labels:
                pts = sorted((r["n"], r[metric]) for r in recs
                             if r["label"] == label and r["d"] == d and r["causal"] == causal)
                if pts:
                    tier = next(r["tier"] for r in recs if r["label"] == label)
                    ax.plot(*zip(*pts), styles.get(tier, "-"), label=label, ms=4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("N = Nq = Nk")
            ax.set_ylabel(unit)
            ax.set_title(f"d={d}, {'causal' if causal else 'non-causal'}, fp16")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{res['device']}: batch*N = {TOKENS}, hidden = {HIDDEN}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    ap.add_argument("--kernels", default="", help="registry names and/or sdpa, sdpa_flash, ...")
    ap.add_argument("--quick", action="store_true", help="N in (1024, 4096, 16384) only")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--max-call-s", type=float, default=1.0)
    ap.add_argument("--target-s", type=float, default=0.3, help="timed seconds per entry")
    args = ap.parse_args(argv)
    if args.kernels.strip():  # a name entries() does not know selected nothing, silently (empty: every entry)
        harness.name_list(ap, "--kernels", args.kernels, harness.entry_names(), "kernel")
    for flag in ("budget_s", "max_call_s", "target_s"):
        harness.positive(ap, "--" + flag.replace("_", "-"), getattr(args, flag))
    if harness.no_gpu("bench_kernels"):
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        res = run(args)
    except Exception:
        traceback.print_exc()
        return 1
    (out / "bench_kernels.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "bench_kernels.md").write_text(markdown(res))
    try:
        plot(res, out / "bench_kernels.png")
    except Exception:
        traceback.print_exc()
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
