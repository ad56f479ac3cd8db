"""Backward and forward+backward TFLOP/s of the workbench's backward kernels against torch SDPA (GPU).

    PYTHONPATH=. python bench/bench_bwd.py [--quick] [--kernels fa2_wgmma,fa2] [--out DIR]

Grid (issue 13 item 4): fp16 and bf16, d = 64 and 128, N = 512 ... 16k with batch·N = 16k and hidden 2048
(H = 2048/d), causal and not. Contenders, each through autograd on the same inputs: our kernels via
kernels.attention (fa2_wgmma by default when it has a backward; the teaching fa2 up to --teaching-max-n),
the teaching naive (FA1 Alg. 3: the forward's P kept, dP and dS in HBM, the same float32 micro-tiles
as fa2; up to --naive-max-n), SDPA flash (FlashAttention-2), SDPA cuDNN, and SDPA math (the unfused backward: S, P, dP, dS in HBM; up
to --math-max-n) in the input dtype (tensor-core GEMMs) and on float32 copies (sdpa_math_fp32: FFMA GEMMs,
CUDA cores like the teaching kernel) -- the unfused baselines of "faster than a naive backward at N >= 4k".

FLOPs (the papers' convention; FA2 paper section 4, FA3's benchmarks): backward = 2.5 x forward (five
products, one of them recomputing S), forward+backward = 3.5 x forward, where forward is bench/harness.py's
one formula, harness.flops (4·d per visible (query, key) pair: 4·Nq·Nk·d per (batch, head), about half
of it when causal). TFLOP/s = those FLOPs / median time.

Before a cell is timed, the contender's gradients on fresh random inputs (poisoned outputs: every tensor
our launchers allocate starts as NaN) are checked against SDPA's float32 math backward on the first
(batch, 2 heads) slice; a cell that fails is reported, not timed. Timing: bench/harness.py's time_fn, the
one method (triton's do_bench median with the L2 flushed, else CUDA events), through time_ms().

Writes bwd_bench.json, bwd_bench.md and bwd_bench.png to --out (default $OUT, else a temp dir) and prints
a summary table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HIDDEN = 16384, 2048
BWD_FACTOR, FWDBWD_FACTOR = 2.5, 3.5
# relative Frobenius error of each gradient against float32 math (inputs are 16-bit; dS is rounded)
TOL = {"float16": 1e-2, "bfloat16": 5e-2}
SDPA = ("sdpa_flash", "sdpa_cudnn", "sdpa_math", "sdpa_math_fp32")


def log(*a):
    print(*a, flush=True)


def time_ms(fn) -> float:
    """Median milliseconds of fn() on the GPU, by the one timing method (bench/harness.py time_fn)."""
    return float(harness.time_fn(lambda: fn(), [()])["median_ms"])




def contenders(names: list[str]):
    """name -> attention(q, k, v, causal) -> o, differentiable."""
    import kernels

    def ours(kernel):
        return lambda q, k, v, c: kernels.attention(q, k, v, causal=c, kernel=kernel)

    fns = {n: ours(n) for n in names}
    if "naive" in fns:  # the teaching unfused backward keeps the forward's P, as SDPA math does
        fns["naive"] = lambda q, k, v, c: kernels.KERNELS["naive"].module.trainable(q, k, v, causal=c)
    for backend in ("flash", "cudnn", "math"):
        fns[f"sdpa_{backend}"] = lambda q, k, v, c, b=backend: harness.sdpa(b, q, k, v, c)
    # unfused on CUDA cores, like the teaching kernel (float32 GEMMs; TF32 is off by default in torch)
    fns["sdpa_math_fp32"] = lambda q, k, v, c: harness.sdpa("math", q.float(), k.float(), v.float(), c).to(q.dtype)
    return fns


def make_inputs(b, h, n, d, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(b, h, n, d, generator=g, device="cuda").to(dtype) for _ in range(4))
    return [t.requires_grad_() for t in (q, k, v)], do


def check(fn, b, h, n, d, dtype, causal):
    """Relative errors of dq, dk, dv on fresh inputs against SDPA float32 math, first (batch, 2 heads)."""
    import torch

    (q, k, v), do = make_inputs(b, h, n, d, dtype, seed=12345 + n + d)
    with harness.Poisoned():
        o = fn(q, k, v, causal)
        grads = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    finite = all(bool(torch.isfinite(g).all()) for g in (o, *grads))
    hs = min(2, h)
    ref_in = [t.detach()[:1, :hs].float().requires_grad_() for t in (q, k, v)]
    ref_o = harness.sdpa("math", *ref_in, causal)
    ref = torch.autograd.grad(ref_o, ref_in, do[:1, :hs].float())
    errs = [float((g[:1, :hs].float() - r).norm() / r.norm().clamp_min(1e-30)) for g, r in zip(grads, ref)]
    del o, grads, ref, ref_o
    return finite, errs


def bench_cell(name, fn, b, h, n, d, dtype, dname, causal):
    import torch

    flops = harness.flops(b, h, n, n, d, causal)
    row = dict(kernel=name, b=b, h=h, n=n, d=d, causal=causal, dtype=dname, fwd_flops=flops,
               bwd_flops=BWD_FACTOR * flops, fwdbwd_flops=FWDBWD_FACTOR * flops)
    try:
        finite, errs = check(fn, b, h, n, d, dtype, causal)
        ok = finite and max(errs) <= TOL[dname]
        row.update(finite=finite, rel_err=dict(zip(("dq", "dk", "dv"), errs)), ok=ok)
        if not ok:
            return row
        (q, k, v), do = make_inputs(b, h, n, d, dtype, seed=n + d)
        o = fn(q, k, v, causal)
        bwd = time_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
        fwdbwd = time_ms(lambda: torch.autograd.grad(fn(q, k, v, causal), (q, k, v), do))
        row.update(bwd_ms=bwd, fwdbwd_ms=fwdbwd, bwd_tflops=row["bwd_flops"] / (bwd * 1e-3) / 1e12,
                   fwdbwd_tflops=row["fwdbwd_flops"] / (fwdbwd * 1e-3) / 1e12)
    except Exception as exc:  # report, keep going
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    finally:
        torch.cuda.empty_cache()
    return row


def runs(name, n, args) -> bool:
    if name == "fa2":
        return n <= args.teaching_max_n
    if name == "naive":
        return n <= args.naive_max_n
    if name == "sdpa_math_fp32":
        return n <= min(args.math_max_n, args.math_fp32_max_n)
    if name == "sdpa_math":
        return n <= args.math_max_n
    return True


def our_kernels(requested: str | None) -> list[str]:
    from kernels import KERNELS

    names = (requested.split(",") if requested else
             [n for n in ("fa2_wgmma", "fa2", "naive") if n in KERNELS and KERNELS[n].backward is not None])
    out = []
    for n in names:
        spec = KERNELS.get(n)
        if spec is None or spec.backward is None:
            log(f"bench_bwd: {n} has no backward here; skipped")
        elif not spec.available():
            log(f"bench_bwd: {n} does not run on this GPU; skipped")
        else:
            out.append(n)
    return out


def check_args(ap, args) -> None:
    """Every argument, before any GPU work (ap.error: one line, exit 2). A --kernels name that is not registered or
    has no backward used to be skipped with a log line (all of them: a run of SDPA alone); a head dim or dtype one of
    our kernels cannot take failed every one of its cells; both are refused here with kernels.attention's own check."""
    import torch

    from kernels import KERNELS
    from kernels.autograd import check_inputs, trainable_kernels

    seqs = harness.int_list(ap, "--seqs", args.seqs, at_most=TOKENS, why=f"batch*N = {TOKENS} tokens")
    dims = harness.int_list(ap, "--dims", args.dims, at_most=HIDDEN, why=f"H = {HIDDEN} / d heads")
    dtypes = harness.name_list(ap, "--dtypes", args.dtypes, tuple(TOL), "dtype")
    harness.flag_list(ap, "--causal", args.causal)
    names = ([n.strip() for n in args.kernels.split(",") if n.strip()] if args.kernels else
             [n for n in ("fa2_wgmma", "fa2", "naive") if n in KERNELS and KERNELS[n].backward is not None])
    for name in names:
        if name not in trainable_kernels():
            ap.error(f"--kernels: {name!r} is not a registered kernel with a backward; those with one: "
                     f"{', '.join(trainable_kernels())}")
        for d in dims:  # the shapes this kernel's cells would run (meta tensors: nothing is allocated)
            if not runs(name, min(seqs), args):
                continue
            for dname in dtypes:
                q = torch.empty(1, 1, 1, d, dtype=getattr(torch, dname), device="meta")
                try:
                    check_inputs(q, q, q, causal=False, scale=None, kernel=name)
                except (TypeError, ValueError) as exc:
                    ap.error(f"--kernels {name} with --dims {d}, --dtypes {dname}: {exc}")
    harness.positive(ap, "--budget-s", args.budget_s)


def write_markdown(rows, path, meta):
    ours = [k for k in meta["kernels"] if k not in SDPA]
    lines = [f"# Backward kernels vs torch SDPA ({meta['device']}, torch {meta['torch']})", "",
             f"{meta['formula']}. batch·N = {TOKENS}, hidden = {HIDDEN} (H = {HIDDEN}/d). Medians "
             f"({meta['timing']}); every cell's gradients checked first against float32 math "
             f"(rel. Frobenius error <= {TOL}).", ""]
    keys = sorted({(r["dtype"], r["d"], r["causal"]) for r in rows})
    bases = [b for b in SDPA if b in meta["kernels"]]  # sdpa_math: the unfused backward
    for what in ("bwd", "fwdbwd"):
        title = "backward" if what == "bwd" else "forward + backward"
        for dt, d, c in keys:
            sel = [r for r in rows if (r["dtype"], r["d"], r["causal"]) == (dt, d, c)]
            ratios = [f"{k} / {b}" for k in ours for b in bases]
            lines += [f"## {title}, {dt}, d = {d}, {'causal' if c else 'non-causal'} (TFLOP/s)", "",
                      "| N | " + " | ".join(meta["kernels"] + ratios) + " |",
                      "|---" * (1 + len(meta["kernels"]) + len(ratios)) + "|"]
            for n in sorted({r["n"] for r in sel}):
                cell = {r["kernel"]: r for r in sel if r["n"] == n}
                vals = []
                for kname in meta["kernels"]:
                    r = cell.get(kname)
                    vals.append("—" if r is None else f"{r[what + '_tflops']:.1f}" if f"{what}_tflops" in r
                                else "FAILED CHECK" if "rel_err" in r else "error")
                for kname in ours:
                    for base in bases:
                        a, bb = cell.get(kname, {}), cell.get(base, {})
                        key = f"{what}_tflops"
                        vals.append(f"{a[key] / bb[key]:.2f}" if key in a and key in bb else "—")
                lines.append(f"| {n} | " + " | ".join(vals) + " |")
            lines.append("")
    failed = [r for r in rows if not r.get("ok")]
    if failed:
        lines += ["## Cells that failed their check or raised", ""]
        lines += [f"- {r['kernel']} {r['dtype']} d={r['d']} N={r['n']} causal={r['causal']}: "
                  f"{r.get('error') or r.get('rel_err')}" for r in failed]
    path.write_text("\n".join(lines) + "\n")


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["dtype"], r["d"], r["causal"]) for r in rows})
    cols = max(1, len(keys))
    fig, axes = plt.subplots(2, cols, figsize=(4.2 * cols, 7.5), squeeze=False)
    for col, (dt, d, c) in enumerate(keys):
        for row_i, what in enumerate(("bwd", "fwdbwd")):
            ax = axes[row_i][col]
            sel = [r for r in rows if (r["dtype"], r["d"], r["causal"]) == (dt, d, c) and f"{what}_tflops" in r]
            for kname in dict.fromkeys(r["kernel"] for r in sel):
                pts = sorted((r["n"], r[f"{what}_tflops"]) for r in sel if r["kernel"] == kname)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kname,
                        linestyle="--" if kname.startswith("sdpa") else "-")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{'bwd' if what == 'bwd' else 'fwd+bwd'} {dt} d={d} {'causal' if c else 'non-causal'}",
                         fontsize=9)
            ax.set_xlabel("N (batch·N = 16k)")
            ax.set_ylabel(f"TFLOP/s ({BWD_FACTOR if what == 'bwd' else FWDBWD_FACTOR} × 4·N²·d·B·H [/2])",
                          fontsize=8)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summary(rows):
    log("\nsummary (TFLOP/s: backward | forward+backward; FAILED = gradient check failed or raised)")
    log(f"{'dtype':9s} {'d':>4s} {'c':>2s} {'N':>6s} {'kernel':12s} {'bwd':>8s} {'fwd+bwd':>8s} {'max rel err':>11s}")
    for r in rows:
        err = max(r["rel_err"].values()) if r.get("rel_err") else float("nan")
        bwd = f"{r['bwd_tflops']:8.1f}" if "bwd_tflops" in r else "  FAILED"
        fb = f"{r['fwdbwd_tflops']:8.1f}" if "fwdbwd_tflops" in r else "  FAILED"
        log(f"{r['dtype']:9s} {r['d']:4d} {int(r['causal']):2d} {r['n']:6d} {r['kernel']:12s} {bwd} {fb} {err:11.2e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="bench_bwd_"))
    ap.add_argument("--kernels", default=None, help="our kernels (default: fa2_wgmma and fa2 where they "
                    "have a backward)")
    ap.add_argument("--seqs", default=",".join(map(str, SEQS)))
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--teaching-max-n", type=int, default=4096, help="largest N the teaching fa2 runs")
    ap.add_argument("--naive-max-n", type=int, default=16384, help="largest N the teaching naive runs. Its limit "
                    "is FA1 Alg. 3 line 3's row pass, which holds rows of P and dP on chip: 8·N bytes, N <= 29,000 "
                    "at 227 KB. Memory is not: P, dP, dS are B·H·N² input-dtype elements each (batch·N = 16k: "
                    "16k·H·N·2 bytes, 4.3 GB at N = 4096, d = 64; 52 GB for the three at N = 16k)")
    ap.add_argument("--math-max-n", type=int, default=8192, help="largest N SDPA math runs (N² memory)")
    ap.add_argument("--math-fp32-max-n", type=int, default=4096, help="largest N sdpa_math_fp32 runs (float32 "
                    "N² matrices: ~60 GB at N = 8k)")
    ap.add_argument("--no-sdpa-math", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fp16, N = 1024 and 4096, both d, both causal")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new cells after this long")
    args = ap.parse_args(argv)
    if args.quick:
        args.seqs, args.dtypes = "1024,4096", "float16"
    check_args(ap, args)

    import torch

    if harness.no_gpu("bench_bwd"):
        return 2
    ours = our_kernels(args.kernels)
    fns = contenders(ours)
    names = ours + [s for s in SDPA if not (s.startswith("sdpa_math") and args.no_sdpa_math)]
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    rows, t0 = [], time.time()
    for dname in args.dtypes.split(","):
        for d in (int(x) for x in args.dims.split(",")):
            for n in (int(x) for x in args.seqs.split(",")):
                for causal in (bool(int(x)) for x in args.causal.split(",")):
                    if time.time() - t0 > args.budget_s:
                        break
                    b, h = TOKENS // n, HIDDEN // d
                    for name in names:
                        if not runs(name, n, args):
                            continue
                        row = bench_cell(name, fns[name], b, h, n, d, dtypes[dname], dname, causal)
                        rows.append(row)
                        log(f"{dname} d{d} n{n:5d} causal={int(causal)} {name:11s} "
                            f"bwd {row.get('bwd_tflops', float('nan')):7.1f} fwd+bwd "
                            f"{row.get('fwdbwd_tflops', float('nan')):7.1f} TFLOP/s "
                            f"err {row.get('rel_err')} {'' if row.get('ok') else 'NOT OK'} {row.get('error', '')}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from kernels import fa2_wgmma_bwd

    meta = dict(run_id=harness.run_info()["run_id"], device=torch.cuda.get_device_name(), torch=torch.__version__,
                cudnn=torch.backends.cudnn.version(), kernels=names, timing=harness.timer_name(),
                # which main kernel fa2_wgmma's rows ran (issue 42): v4 at these d, v3 elsewhere; the GPU model reads
                # it (gpumodel.backward_model.kernel_of)
                fa2_wgmma_bwd_ws_head_dims=list(fa2_wgmma_bwd.WS_HEAD_DIMS),
                formula=f"backward FLOPs = {BWD_FACTOR} x forward, forward+backward {FWDBWD_FACTOR} x forward "
                        f"(the papers' convention), forward = {harness.flops_formula()}", tokens=TOKENS, hidden=HIDDEN,
                quick=args.quick)
    (out / "bwd_bench.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1, default=str))
    write_markdown(rows, out / "bwd_bench.md", meta)
    try:
        plot(rows, out / "bwd_bench.png")
    except Exception:
        traceback.print_exc()
    summary(rows)
    log(f"wrote {out}/bwd_bench.{{json,md,png}}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
