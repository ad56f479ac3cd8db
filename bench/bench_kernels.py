"""Check, then time, every registered kernel beside torch SDPA's backends, in one GPU visit.

    PYTHONPATH=. python bench/bench_kernels.py [--out DIR] [--kernels fa2,fa2_tc] [--quick]
                                                [--budget-s 240] [--max-call-s 1.0]

1. Check: each kernel (each of its BENCH_OPTIONS) against the float64 reference on two fp16
   problems, one causal with Nq != Nk tails; a kernel that fails is not timed.
2. Time: fp16, N = Nq = Nk in 512 ... 16384, d in (64, 128), causal and not; batch·N = 16384 and
   hidden = 2048 (H = 2048 / d), the FlashAttention papers' convention. CUDA events, warm-up,
   median of several calls, inputs rotated over sets larger than the L2 (bench/timing.py).
   torch SDPA's math, efficient, flash and cuDNN backends run on the same inputs; a backend that
   errors is recorded with its error. Slow kernels are capped: before each call, its time is
   predicted from the last two sizes measured (t ~ N^p); a predicted call over --max-call-s, or a
   run past --budget-s, is skipped and recorded with the reason.
3. Write bench_kernels.json (every record), bench_kernels.md (tables, formulas, what was skipped)
   and bench_kernels.png (TFLOP/s and effective GB/s against N) to DIR (default $OUT, else
   bench/results/).

TFLOP/s = analysis.headline.attention_flops / time: 4·d·B·H per visible (query, key) pair (N² without a
mask, N(N+1)/2 causal; not the FLOPs a kernel executes on whole tiles). Effective GB/s = analysis.headline.min_hbm_bytes / time:
each of q, k, v, o moved once, plus the float32 lse: (2·Nq·d + 2·Nk·d)·2 + 4·Nq bytes per (b, h).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.headline import attention_flops, min_hbm_bytes  # noqa: E402
from bench.timing import make_input_sets, time_cuda  # noqa: E402

TOKENS = 16384  # batch · N
HIDDEN = 2048  # heads · d
SDPA_BACKENDS = ("math", "efficient", "flash", "cudnn")
MATH_MAX_BYTES = 48 * 2**30  # the math backend materialises B·H·N² scores (several copies)


def entries(names):
    """(label, tier, forward-callable builder) for every kernel option set, then SDPA backends."""
    from kernels import KERNELS

    out = []
    for spec in KERNELS.values():
        if (names and spec.name not in names) or not spec.available():
            continue
        for options in spec.bench_options:
            out.append(dict(label=spec.label(**options), tier=spec.tier, kind="kernel",
                            spec=spec, options=options))
    for backend in SDPA_BACKENDS:
        if names and f"sdpa_{backend}" not in names and "sdpa" not in names:
            continue
        out.append(dict(label=f"sdpa_{backend}", tier="torch", kind="sdpa", backend=backend))
    return out


def sdpa_fn(backend: str, causal: bool):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run(q, k, v):
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def kernel_fn(entry, causal: bool):
    spec, options = entry["spec"], entry["options"]
    return lambda q, k, v: spec.forward(q, k, v, causal=causal, **options)


def check_entry(entry) -> dict:
    """Max error against the float64 reference on two problems (fp16); NaN-poisoned outputs."""
    import torch

    from variants import attention_reference

    problems = [(2, 4, 1000, 1000, 64, True), (1, 2, 333, 1100, 128, False),
                (1, 2, 700, 300, 128, True)]
    result = {"problems": [], "ok": True}
    for b, h, n_q, n_k, d, causal in problems:
        gen = torch.Generator(device="cuda").manual_seed(n_q)
        q = torch.randn(b, h, n_q, d, device="cuda", generator=gen).half()
        k = torch.randn(b, h, n_k, d, device="cuda", generator=gen).half()
        v = torch.randn(b, h, n_k, d, device="cuda", generator=gen).half()
        rec = dict(shape=[b, h, n_q, n_k, d], causal=causal)
        if entry["kind"] == "sdpa" and n_q != n_k and causal:
            rec["skipped"] = "SDPA's is_causal is top-left aligned when Nq != Nk"
            result["problems"].append(rec)
            continue
        try:
            fn = sdpa_fn(entry["backend"], causal) if entry["kind"] == "sdpa" else kernel_fn(entry, causal)
            out = fn(q, k, v)
            o = out[0] if isinstance(out, tuple) else out
            torch.cuda.synchronize()
            ref, _ = attention_reference(q, k, v, causal=causal)
            rec["max_err"] = (o.double() - ref).abs().max().item() / max(1.0, v.abs().max().item())
            rec["ok"] = bool(math.isfinite(rec["max_err"]) and rec["max_err"] < 1e-2)
        except Exception as exc:
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        result["ok"] &= rec.get("ok", True)
        result["problems"].append(rec)
    return result


def predict(history, n):
    """Predicted seconds per call at n from the last two measured sizes (t ~ n^p, 1 <= p <= 3)."""
    if not history:
        return None
    if len(history) == 1:
        (n1, t1), = history
        return t1 * (n / n1) ** 2  # pessimistic until a second point gives the exponent
    (n1, t1), (n2, t2) = history[-2:]
    p = min(3.0, max(1.0, math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1)))
    return t2 * (n / n2) ** p


def time_entry(fn, sets, *, target_s):
    """One probe call to size the repetitions, then time_cuda (events, warm-up, median)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(*sets[0])
    end.record()
    end.synchronize()
    probe_s = start.elapsed_time(end) / 1e3
    reps = int(min(20, max(3, target_s / max(probe_s, 1e-6))))
    warmup = 1 if probe_s > 0.05 else 3
    return time_cuda(fn, sets, warmup=warmup, reps=reps)


def run(args) -> dict:
    import torch

    names = {n for n in args.kernels.split(",") if n}
    all_entries = entries(names)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "python": platform.python_version(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
           "convention": f"fp16; batch*N = {TOKENS}; hidden = {HIDDEN} (H = {HIDDEN}/d)",
           "flops_formula": "attention_flops = 4*d*B*H*visible (query, key) pairs",
           "bytes_formula": "min_hbm_bytes = B*H*((2*Nq*d + 2*Nk*d)*itemsize + 4*Nq)",
           "checks": {}, "records": [], "args": vars(args)}
    try:
        import cupy

        from kernels import loader
        out["cupy"] = cupy.__version__
        out["nvrtc"] = ".".join(map(str, loader.nvrtc_version()))
    except Exception as exc:
        out["cupy"] = f"unavailable: {exc}"
    t_start = time.time()

    for e in all_entries:  # 1. check
        t0 = time.time()
        e["check"] = check_entry(e)
        out["checks"][e["label"]] = e["check"]
        print(f"check {e['label']:<24} ok={e['check']['ok']} "
              f"{[round(p.get('max_err', float('nan')), 5) for p in e['check']['problems']]} "
              f"({time.time() - t0:.1f} s)", flush=True)

    ns = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    for d in (64, 128):  # 2. time
        for causal in (False, True):
            history = {e["label"]: [] for e in all_entries}
            for n in ns:
                b, h = TOKENS // n, HIDDEN // d
                sets = make_input_sets((b, h, n, d), (b, h, n, d), torch.float16,
                                       min_total_bytes=256 * 2**20, max_sets=4)
                flops = attention_flops(b, h, n, n, d, causal)
                nbytes = min_hbm_bytes(b, h, n, n, d, 2)
                for e in all_entries:
                    rec = dict(label=e["label"], tier=e["tier"], n=n, d=d, causal=causal, batch=b,
                               heads=h, dtype="float16", attention_flops=flops, min_hbm_bytes=nbytes)
                    est = predict(history[e["label"]], n)
                    if not e["check"]["ok"]:
                        rec["skipped"] = "failed the correctness check"
                    elif e["kind"] == "kernel" and not e["spec"].supports_head_dim(d):
                        rec["skipped"] = f"d={d} unsupported by this kernel"
                    elif e["kind"] == "sdpa" and e["backend"] == "math" and b * h * n * n * 12 > MATH_MAX_BYTES:
                        rec["skipped"] = f"math backend would materialise {b * h * n * n * 12 / 2**30:.0f} GiB"
                    elif est is not None and est > args.max_call_s:
                        rec["skipped"] = f"predicted {est:.2f} s per call > cap {args.max_call_s} s"
                    elif time.time() - t_start > args.budget_s:
                        rec["skipped"] = f"time budget of {args.budget_s} s spent"
                    if "skipped" not in rec:
                        fn = sdpa_fn(e["backend"], causal) if e["kind"] == "sdpa" else kernel_fn(e, causal)
                        try:
                            timing = time_entry(fn, sets, target_s=args.target_s)
                            ms = timing["median_ms"]
                            rec.update(timing, tflops=flops / ms / 1e9, gbps=nbytes / ms / 1e6)
                            history[e["label"]].append((n, ms / 1e3))
                        except Exception as exc:
                            rec["skipped"] = f"error: {type(exc).__name__}: {exc}"[:300]
                            torch.cuda.synchronize()
                    out["records"].append(rec)
                    if "skipped" in rec:
                        print(f"d={d} causal={causal:d} N={n:>5} {e['label']:<24} skipped: "
                              f"{rec['skipped']}", flush=True)
                    else:
                        print(f"d={d} causal={causal:d} N={n:>5} {e['label']:<24} "
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
             f"started {res['started']}, {res.get('seconds')} s.", "",
             f"Convention: {res['convention']}. Times: CUDA events, median over rotated input "
             "sets (bench/timing.py).", "",
             f"- TFLOP/s = {res['flops_formula']} / time (the papers' figure).",
             f"- effective GB/s = {res['bytes_formula']} / time (each input and output moved once).",
             "", "## Correctness checks (fp16, max |o - o_ref| / max(1, max|v|) against float64)", "",
             "| kernel | ok | errors |", "|---|---|---|"]
    for label, chk in res["checks"].items():
        errs = ", ".join(f"{p['max_err']:.1e}" if "max_err" in p else p.get("error", p.get("skipped", "-"))[:60]
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
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    ap.add_argument("--kernels", default="", help="registry names and/or sdpa, sdpa_flash, ...")
    ap.add_argument("--quick", action="store_true", help="N in (1024, 4096, 16384) only")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--max-call-s", type=float, default=1.0)
    ap.add_argument("--target-s", type=float, default=0.3, help="timed seconds per entry")
    args = ap.parse_args(argv)
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
