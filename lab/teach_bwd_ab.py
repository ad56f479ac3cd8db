"""A/B of the teaching backwards (issue 13's last target: the teaching backward faster than a naive
(unfused) backward at N >= 4k), in one run, same inputs, same timer.

    PYTHONPATH=. python lab/teach_bwd_ab.py [--out DIR] [--budget-s 80] [--seqs 4096,8192,2048]

Contenders, each through autograd (backward timed alone on a kept graph, bench/bench_bwd.py's method):
    fa2            the shipped teaching FA2 backward (kernels/cuda/fa2_bwd.cu, the newest version: at d = 128
                   v5, 64 x 64 blocks with v3's prefetch; at d = 64 v2 at 64 x 64)
    fa2_32         d = 128 only: 32 x 32 blocks with the prefetch (v4's default)
    fa2_32_sync    d = 128 only: 32 x 32 without the prefetch (v4 without v3)
    fa2_v2         d = 128 only: 64 x 64 without the prefetch (v2)
    fa2_bRxC       d = 128 only: Br x Bc blocks with the prefetch (64 x 32: 119 KB, one block per SM; 48 x 32:
                   98 KB, two)
    fa2_v1         the frozen v1 (lab/cuda/fa2_bwd_v1.cu, the build measured in results/bwd_kernels_vs_sdpa_grid)
    naive          the teaching unfused backward (kernels/cuda/naive_bwd.cu, FA1 Alg. 3: P kept from the
                   forward, dP, dS in HBM; the same float32 micro-tiles)
    sdpa_math_fp32 torch SDPA math on float32 copies (cuBLAS FFMA SGEMMs; S, P, dP, dS in HBM)
    sdpa_math      torch SDPA math in the input dtype (tensor-core GEMMs)
fa2_v1 / naive is the like-for-like ratio (both on teaching.cuh's scalar micro-tiles: fused vs unfused
alone); fa2 / naive adds fa2_bwd.cu v2's float4 micro-tiles (and v3's prefetch) to the fusion.
fp16, d = 64 and 128, batch·N = 16k, hidden 2048, causal and not, N = 4096 and 8192 first (the target),
then 2048. Every cell's gradients are checked first against float32 math (bench_bwd.check, poisoned
outputs); a failing cell is reported, not timed. Before any timing, fa2 and fa2_v1 are checked in float32
against float64 autograd on odd shapes (the fp32 path must stay exact to ~1e-6).

TFLOP/s = 2.5 x 4·Nq·Nk·d·B·H (halved causal: bench/harness.py flops) / median backward time.
Writes teach_bwd_ab.json and teach_bwd_ab.md to --out (default $OUT, else a temp dir); prints a summary
table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bench_bwd, harness  # noqa: E402

V1_SOURCE = str(Path(__file__).resolve().parent / "cuda" / "fa2_bwd_v1.cu")  # the frozen v1, lab only
NAMES = ("fa2", "fa2_32", "fa2_32_sync", "fa2_v2", "fa2_b64x32", "fa2_b48x32", "fa2_v1", "naive", "sdpa_math_fp32",
         "sdpa_math")
RATIOS = (("fa2", "fa2_v1"), ("fa2", "fa2_32"), ("fa2", "fa2_32_sync"), ("fa2", "fa2_v2"), ("fa2", "naive"),
          ("fa2_v1", "naive"), ("fa2", "sdpa_math_fp32"), ("naive", "sdpa_math_fp32"))
D128_ONLY = ("fa2_32", "fa2_32_sync", "fa2_v2", "fa2_b64x32", "fa2_b48x32")  # differ from fa2 at d_pad = 128 only


def log(*a):
    print(*a, flush=True)


def fa2_v1_backward(q, k, v, o, lse, do, *, causal=False, scale=None):
    """kernels/fa2.py's backward as it was at v1 (its shared-memory carving), launching fa2_bwd_v1.cu."""
    import numpy as np
    import torch

    from kernels import _teaching, fa2, loader

    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=64, block_k=64)
    fa2._check_saved(q, o, lse, do)
    ld = _teaching.tile_ld(p.d)
    smem = _teaching.F32 * (2 * 64 * ld + 2 * 64 * ld + 2 * 64 * 65 + 2 * 64)
    bh = p.batch * p.heads
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    delta = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    defs = _teaching.defines(q.dtype, 64, 64, D_PAD=_teaching.d_padded(p.d))

    def fn(name):
        return loader.get_function(V1_SOURCE, name, defines=defs, device=q.device.index)

    fn("fa2_bwd_preprocess").launch((-(-p.n_q // 8), bh), (256,), (o, do, dq_acc, delta, p.n_q, p.d))
    fn("fa2_bwd").launch((p.tiling.t_c, bh), (256,),
                         (q, k, v, do, lse, delta, dq_acc, dk, dv, p.n_q, p.n_k, p.d, p.scale, int(causal)),
                         shared_mem=smem)
    n = dq.numel()
    fn("fa2_bwd_dq").launch((min(-(-n // 256), 8192),), (256,), (dq_acc, dq, np.int64(n), p.scale))
    return dq, dk, dv


def _with_backward(backward):
    """The teaching fa2 forward with another backward build, as one differentiable function."""
    import torch

    from kernels import KERNELS

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            o, lse = KERNELS["fa2"].forward(q, k, v, causal=causal)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal = causal
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            return (*backward(q, k, v, o, lse, do.contiguous(), causal=ctx.causal), None)

    return lambda q, k, v, c: Fn.apply(q, k, v, c)


def contenders() -> dict:
    from kernels import fa2

    fns = bench_bwd.contenders(["fa2", "naive"])
    fns["fa2_v1"] = _with_backward(fa2_v1_backward)
    fns["fa2_v2"] = _with_backward(lambda *a, **kw: fa2.backward(*a, use_prefetch=False, block_q=64, block_k=64,
                                                                 **kw))
    fns["fa2_32"] = _with_backward(lambda *a, **kw: fa2.backward(*a, block_q=32, block_k=32, **kw))
    fns["fa2_32_sync"] = _with_backward(lambda *a, **kw: fa2.backward(*a, use_prefetch=False, **kw))
    for br, bc in ((64, 32), (48, 32)):  # other block shapes at d = 128 (one block per SM at 119 KB; two at 98 KB)
        fns[f"fa2_b{br}x{bc}"] = _with_backward(lambda *a, br=br, bc=bc, **kw: fa2.backward(*a, block_q=br, block_k=bc,
                                                                                           **kw))
    return {n: fns[n] for n in NAMES}


def fp32_exactness() -> list[dict]:
    """fa2 (new) and fa2_v1 in float32 against float64 autograd on odd shapes: max |g - r| / max |r|."""
    import torch

    from kernels import KERNELS
    from tests.test_kernels_backward import float64_grads

    rows = []
    for b, h, n_q, n_k, d, causal in [(1, 2, 333, 517, 64, True), (2, 1, 300, 100, 128, True),
                                      (1, 2, 777, 777, 100, False)]:
        g = torch.Generator(device="cuda").manual_seed(n_q + d)
        q, do = (torch.randn(b, h, n_q, d, generator=g, device="cuda") for _ in range(2))
        k, v = (torch.randn(b, h, n_k, d, generator=g, device="cuda") for _ in range(2))
        exact = float64_grads(q, k, v, do, causal, d ** -0.5)
        with harness.Poisoned():
            o, lse = KERNELS["fa2"].forward(q, k, v, causal=causal)
            got = {"fa2": KERNELS["fa2"].backward(q, k, v, o, lse, do, causal=causal),
                   "fa2_v1": fa2_v1_backward(q, k, v, o, lse, do, causal=causal)}
        for name, grads in got.items():
            errs = [float((x.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)) for x, r in zip(grads, exact)]
            rows.append(dict(kernel=name, shape=[b, h, n_q, n_k, d], causal=causal, max_rel_err=max(errs),
                             finite=all(bool(torch.isfinite(x).all()) for x in grads)))
    return rows


def fa2_prefetches(d: int) -> bool:
    import torch

    from kernels import fa2

    return fa2.prefetch(torch.float16, d)


def cell(name, fn, b, h, n, d, causal) -> dict:
    import torch

    flops = harness.flops(b, h, n, n, d, causal)
    row = dict(kernel=name, b=b, h=h, n=n, d=d, causal=causal, dtype="float16", bwd_flops=bench_bwd.BWD_FACTOR * flops)
    try:
        finite, errs = bench_bwd.check(fn, b, h, n, d, torch.float16, causal)
        row.update(finite=finite, rel_err=dict(zip(("dq", "dk", "dv"), errs)),
                   ok=finite and max(errs) <= bench_bwd.TOL["float16"])
        if row["ok"]:
            (q, k, v), do = bench_bwd.make_inputs(b, h, n, d, torch.float16, seed=n + d)
            o = fn(q, k, v, causal)
            ms = bench_bwd.time_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            row.update(bwd_ms=ms, bwd_tflops=row["bwd_flops"] / (ms * 1e-3) / 1e12)
            del o, q, k, v, do
    except Exception as exc:  # report, keep going (an N² buffer that does not fit, say)
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:400])
    finally:
        torch.cuda.empty_cache()
    return row


def table(rows) -> list[str]:
    lines = []
    for d in sorted({r["d"] for r in rows}):
        for causal in (False, True):
            sel = [r for r in rows if r["d"] == d and r["causal"] == causal]
            if not sel:
                continue
            ratios = [f"{a}/{b}" for a, b in RATIOS]
            lines += [f"### fp16, d = {d}, {'causal' if causal else 'non-causal'}: backward TFLOP/s", "",
                      "| N | " + " | ".join(NAMES) + " | " + " | ".join(ratios) + " |",
                      "|---" * (1 + len(NAMES) + len(ratios)) + "|"]
            for n in sorted({r["n"] for r in sel}):
                by = {r["kernel"]: r for r in sel if r["n"] == n}
                vals = [f"{by[k]['bwd_tflops']:.1f}" if "bwd_tflops" in by.get(k, {}) else
                        ("—" if k not in by else "FAILED" if "rel_err" in by[k] else "error") for k in NAMES]
                vals += [f"{by[a]['bwd_tflops'] / by[b]['bwd_tflops']:.2f}"
                         if "bwd_tflops" in by.get(a, {}) and "bwd_tflops" in by.get(b, {}) else "—"
                         for a, b in RATIOS]
                lines.append(f"| {n} | " + " | ".join(vals) + " |")
            lines.append("")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="teach_bwd_ab_"))
    ap.add_argument("--seqs", default="4096,8192,2048")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new cell after this long")
    ap.add_argument("--no-fp32-check", action="store_true", help="skip the float32 exactness check (the GPU tests "
                    "check the same)")
    args = ap.parse_args(argv)
    # every argument before any GPU work (one line, exit 2): an unknown --names entry was dropped without a word, a
    # head dim over the teaching kernels' 128 failed every cell
    harness.int_list(ap, "--seqs", args.seqs, at_most=bench_bwd.TOKENS, why=f"batch*N = {bench_bwd.TOKENS} tokens")
    harness.int_list(ap, "--dims", args.dims, at_most=128, why="the teaching kernels' largest head dim")
    harness.name_list(ap, "--names", args.names, NAMES, "contender")
    harness.positive(ap, "--budget-s", args.budget_s)
    import torch

    if harness.no_gpu("teach_bwd_ab"):
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    exact = [] if args.no_fp32_check else fp32_exactness()
    for r in exact:
        log(f"fp32 exactness {r['kernel']:7s} {r['shape']} causal={int(r['causal'])}: max rel err "
            f"{r['max_rel_err']:.2e} {'ok' if r['finite'] and r['max_rel_err'] <= 1e-5 else 'BAD'}")
    fns = contenders()
    names = [n for n in args.names.split(",") if n in fns]
    rows, skipped = [], []
    for n in (int(x) for x in args.seqs.split(",")):
        for d in (int(x) for x in args.dims.split(",")):
            for causal in (False, True):
                for name in names:
                    if name in D128_ONLY and not fa2_prefetches(d):
                        continue  # the same build as fa2 there
                    if time.time() - t0 > args.budget_s:
                        skipped.append(dict(kernel=name, n=n, d=d, causal=causal))
                        continue
                    b, h = bench_bwd.TOKENS // n, bench_bwd.HIDDEN // d
                    row = cell(name, fns[name], b, h, n, d, causal)
                    rows.append(row)
                    log(f"fp16 d{d} n{n:5d} causal={int(causal)} {name:15s} bwd "
                        f"{row.get('bwd_tflops', float('nan')):6.1f} TFLOP/s err {row.get('rel_err')} "
                        f"{'' if row.get('ok') else 'NOT OK'} {row.get('error', '')}")
    meta = dict(run_id=harness.run_info()["run_id"], device=torch.cuda.get_device_name(), torch=torch.__version__,
                timing=harness.timer_name(), formula=f"backward FLOPs = {bench_bwd.BWD_FACTOR} x forward, forward = "
                f"{harness.flops_formula()}", tokens=bench_bwd.TOKENS, hidden=bench_bwd.HIDDEN, names=names)
    (out / "teach_bwd_ab.json").write_text(json.dumps(dict(meta=meta, fp32_exactness=exact, rows=rows,
                                                           skipped_for_budget=skipped), indent=1, default=str))
    md = [f"# Teaching backwards A/B ({meta['device']}, torch {meta['torch']}, run {meta['run_id']})", "",
          f"{meta['formula']}; batch·N = {bench_bwd.TOKENS}, hidden {bench_bwd.HIDDEN}; medians ({meta['timing']}); "
          "gradients checked per cell against float32 math first.", "", *table(rows)]
    if skipped:
        md.append(f"Not run (time budget): {len(skipped)} cells.")
    (out / "teach_bwd_ab.md").write_text("\n".join(md) + "\n")
    log("\n" + "\n".join(table(rows)))
    bad = [r for r in rows if not r.get("ok")] + [r for r in exact if not (r["finite"] and r["max_rel_err"] <= 1e-5)]
    log(f"teach_bwd_ab: {len(rows)} cells, {len(bad)} not ok, {len(skipped)} skipped for time; {out}/teach_bwd_ab.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
