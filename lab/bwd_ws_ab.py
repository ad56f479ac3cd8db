"""A/B of v4 of the Hopper backward (lab/bwd_ws.py: kernels/fa2_wgmma_bwd_ws.py forced with impl="ws", warp-specialised)
against v3 (the contender named "v3": kernels.fa2_wgmma_bwd.backward(impl="v3"), the shipped main kernel before
issue 42 made v4 the default at d = 64, 128; results/bwd_ws_v4's files, run before, name it "shipped", which table()
still reads as v3) and SDPA's (one GPU run).

    PYTHONPATH=. python lab/bwd_ws_ab.py --out DIR [--budget-s 200] [--n 2048,4096,16384] [--d 64,128]
                                          [--dtypes fp16,bf16] [--alternatives] [--jobs 16]

1. Precompiles, in parallel processes, every build it launches: the v4 builds (lab/bwd_ws.py compile_configs), the
   v3 backward's default builds at d = 64, 128 and the fa2_wgmma forward builds that make o and lse.
2. Correctness (exit 1 on a failure, before any timing): v4 on odd shapes (Nq != Nk, tails, causal rows that see no
   key, GQA groups 1/2/4/8, (B, N, H, d) views; gradients poisoned with NaN) against float64 autograd (norm-relative
   TOL[dtype], or 3x the error of a float64 backward that rounds P and dS as any 16-bit kernel must) and against the
   v3 fa2_wgmma backward (within 2^-8 of its norm: same roundings, only dQ's fp32 reduce order differs).
3. Timing, per (dtype, d, N, causal) with batch*N = 16k tokens and hidden 2048 (H = 2048 / d): backward only, medians
   of bench.harness.time_fn (triton.testing.do_bench, L2 flushed) of the v3 fa2_wgmma backward, v4 (and, with
   --alternatives, lab/bwd_ws.py ALTERNATIVES), SDPA cuDNN and SDPA flash (through autograd, graph kept). Each
   contender's gradients are first checked against cuDNN's on the same inputs (bench/bwd_layouts_speed.py's TOL); a
   failing one is reported, not timed, and makes the exit status 1. TFLOP/s count 2.5x the forward's FLOPs
   (bench.harness.flops, the papers' convention). Cells stop at --budget-s (the rest are listed as skipped), so
   a default run ends within ~240 s on an H100 including compiles.
Prints a table (TFLOP/s, ratio to cuDNN, v4 / v3) and writes bwd_ws_ab.json under --out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
TOL64 = {"fp16": 5e-3, "bf16": 3e-2}  # against float64 (tests/test_kernels_bwd_gpu.py TOL)
TOL_CUDNN = {"fp16": 2e-2, "bf16": 6e-2}  # against another 16-bit backward (bench/bwd_layouts_speed.py TOL)
V3_REL = 2.0 ** -8
V3_LABEL, OLD_V3_LABEL = "v3", "shipped"  # v3's contender name; the one results/bwd_ws_v4's files use
CHECKS = [  # (B, H_kv, group, Nq, Nk, d, dtype, causal, strided)
    (2, 2, 1, 333, 200, 64, "fp16", True, False),
    (1, 2, 4, 200, 333, 64, "bf16", True, True),
    (2, 1, 8, 129, 517, 64, "fp16", False, True),
    (2, 2, 1, 333, 200, 128, "bf16", True, True),
    (1, 2, 2, 200, 333, 128, "fp16", True, False),
    (1, 1, 8, 1000, 1000, 128, "bf16", False, True),
    (1, 3, 1, 1, 700, 128, "fp16", True, False),
]


DEVICE = "cuda"  # tests/test_kernels_bwd_ws_compile.py runs the glue on "cpu" with the kernels replaced by the oracle


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def log(*a):
    print(*a, flush=True)


def _dtype(name):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def builds(ds, dtypes, ns) -> list[tuple]:
    """(source, defines, arch) of every build this run launches."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from lab import bwd_ws
    from lab.precompile_bwd import unique

    jobs = [(src, defs, bwd_ws.ARCH) for src, _, defs in bwd_ws.compile_configs() if defs["HEAD_DIM"] in ds]
    for d in ds:
        for dt in dtypes:
            bf16 = dt == "bf16"
            jobs.append((str(fa2_wgmma_bwd.SOURCE), fa2_wgmma_bwd.defines_for(d, bf16), fa2_wgmma_bwd.ARCH))
            for n in sorted(set(ns) | {c[4] for c in CHECKS if c[5] == d}):
                for causal in (False, True):
                    for plain in (False, True):  # the forward's build depends on contiguous equal-head inputs
                        defs = fa2_wgmma.defines_for(d, bf16, fa2_wgmma.default_config(d, n, plain, causal))
                        jobs.append((str(fa2_wgmma.source_of(defs)[0]), defs, fa2_wgmma.ARCH))
    return unique(jobs)


def precompile(jobs_n: int, ds, dtypes, ns) -> None:
    from lab.precompile_bwd import compile_or_exit

    compile_or_exit(builds(ds, dtypes, ns), jobs_n)


def reference(q, k, v, do, causal, round_to=None):
    """variants.reference.backward_reference: float64 (dq, dk, dv), K/V grouped, optionally rounded as a 16-bit kernel."""
    from variants.reference import backward_reference

    return backward_reference(q, k, v, do, causal=causal, round_to=round_to)


def check_grad(g, ref, base, ds, dt: str) -> dict:
    """One gradient g against float64: ref exact, base the 16-bit rounding floor (backward_reference round_to=),
    ds fp32_ds_floor's term (0 for dv). ok: finite and within max(TOL64 x |ref|, 3 x the rounding's error, an
    absolute floor of 1e-5 per sqrt(element) or ds). Keys rel, rounding_rel, ok, and err, norm, atol for callers."""
    import torch

    gd = g.double()
    finite = bool(torch.isfinite(gd).all())
    norm, err = float(ref.norm()), float((gd - ref).norm()) if finite else math.inf
    floor, atol = float((base - ref).norm()), max(1e-5 * g.numel() ** 0.5, ds)
    return dict(rel=err / max(norm, 1e-30), rounding_rel=floor / max(norm, 1e-30),
                ok=finite and err <= max(TOL64[dt] * norm, 3 * floor, atol), err=err, norm=norm, atol=atol)


def inputs(b, h, h_kv, n_q, n_k, d, dtype, scale, seed, strided):
    """q, do (B, H, Nq, d), k, v (B, H_kv, Nk, d); strided: (B, N, H, d) tensors seen through .transpose(1, 2)."""
    import torch

    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def make(heads, n, sc):
        x = torch.randn(b, n, heads, d, generator=g, device=DEVICE) * sc
        return x.to(dtype).transpose(1, 2) if strided else x.transpose(1, 2).contiguous().to(dtype)

    return make(h, n_q, scale), make(h_kv, n_k, scale), make(h_kv, n_k, 1.0), make(h, n_q, 1.0)


def correctness() -> list[dict]:

    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from lab import bwd_ws
    from variants.reference import fp32_ds_floor

    rows = []
    for i, (b, h_kv, group, n_q, n_k, d, dt, causal, strided) in enumerate(CHECKS):
        dtype = _dtype(dt)
        for cfg in [None, *bwd_ws.ALTERNATIVES[d]]:
            q, k, v, do = inputs(b, h_kv * group, h_kv, n_q, n_k, d, dtype, 4.0, 7 + i, strided)
            o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
            grads = tuple(fa2_wgmma_bwd._empty_like_layout(t).fill_(float("nan")) for t in (q, k, v))  # poisoned
            row = dict(b=b, h_kv=h_kv, group=group, n_q=n_q, n_k=n_k, d=d, dtype=dt, causal=causal, strided=strided,
                       config=cfg, ok=True)
            try:
                bwd_ws.backward(q, k, v, o, lse, do, causal=causal, config=cfg, out=grads)
                shipped = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, impl="v3")
                sync(DEVICE)
                exact, rounded = reference(q, k, v, do, causal), reference(q, k, v, do, causal, dtype)
                ds_floor = (*fp32_ds_floor(q, k, v, do, causal=causal), 0.0)
                for name, g, ref, base, sh, ds in zip(("dq", "dk", "dv"), grads, exact, rounded, shipped, ds_floor):
                    c, shd = check_grad(g, ref, base, ds, dt), sh.double()
                    diff = float((g.double() - shd).norm()) if math.isfinite(c["err"]) else math.inf
                    ok = c["ok"] and diff <= max(V3_REL * float(shd.norm()), 0.5 * float((shd - ref).norm()), c["atol"])
                    row[name] = dict(rel=c["rel"], rounding_rel=c["rounding_rel"],
                                     vs_v3=diff / max(float(shd.norm()), 1e-30), ok=ok)
                    row["ok"] = row["ok"] and ok
                if causal and n_q > n_k and not bool((grads[0][:, :, : n_q - n_k] == 0).all()):
                    row.update(ok=False, no_key_rows="dq not 0")
            except Exception as exc:
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
            log(f"check d={d} {dt} B={b} H_kv={h_kv} G={group} Nq={n_q} Nk={n_k} causal={int(causal)} "
                f"strided={int(strided)} {cfg or 'default'}: {'ok' if row['ok'] else 'FAILED ' + str(row)}")
    return rows


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-30))


def sdpa_grads(backend, q, k, v, do, causal):
    """run() -> (dq, dk, dv): SDPA's backward with one backend through autograd (the graph kept)."""
    import torch

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = harness.sdpa(backend, q, k, v, causal)
    return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def run_cell(dt, d, n, causal, contenders, end, rows):
    import torch

    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from lab import bwd_ws

    dtype = _dtype(dt)
    b, h = TOKENS // n, HIDDEN // d
    cell = dict(dtype=dt, d=d, n=n, causal=causal, batch=b, heads=h, bwd_flops=2.5 * harness.flops(b, h, n, n, d, causal))
    g = torch.Generator(device=DEVICE).manual_seed(n + d)
    q, k, v, do = (torch.randn(b, h, n, d, generator=g, device=DEVICE, dtype=dtype) for _ in range(4))
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    ref = None
    for name, cfg in contenders:
        rec = dict(cell, contender=name, config=cfg)
        rows.append(rec)
        if time.time() > end:
            rec["skipped"] = "budget"
            continue
        try:
            if name in ("cudnn", "flash"):
                fn = sdpa_grads(name, q, k, v, do, causal)
            elif name == "v3":
                def fn():
                    return fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, impl="v3")
            else:
                def fn(cfg=cfg):
                    return bwd_ws.backward(q, k, v, o, lse, do, causal=causal, config=cfg)
            grads = fn()
            sync(DEVICE)
            if name == "cudnn":
                ref = grads
            rec["finite"] = all(bool(torch.isfinite(x).all()) for x in grads)
            if ref is not None and name != "cudnn":
                rec["rel_err_vs_cudnn"] = [rel(x, r) for x, r in zip(grads, ref)]
            rec["ok"] = rec["finite"] and max(rec.get("rel_err_vs_cudnn", [0.0])) <= TOL_CUDNN[dt]
            if not rec["ok"]:
                log(f"  {name}: gradient check FAILED {rec}")
                continue
            del grads
            ms = float(harness.time_fn(lambda: fn(), [()])["median_ms"])
            rec.update(median_ms=ms, tflops=cell["bwd_flops"] / ms / 1e9)
        except Exception as exc:  # a contender that cannot run is reported; the others go on
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            if DEVICE == "cuda":
                torch.cuda.empty_cache()


def table(rows, names) -> str:
    def cell_word(rec):  # no record: this d has no such build (d = 64 has fewer ALTERNATIVES than d = 128)
        return "-" if rec is None else "skip" if "skipped" in rec else "FAIL"

    def label(x):  # results/bwd_ws_v4's files name v3 "shipped" (it was, then)
        return V3_LABEL if x == OLD_V3_LABEL else x

    names = [label(x) for x in names]
    cells = sorted({(r["dtype"], r["d"], r["n"], r["causal"]) for r in rows}, key=lambda c: (c[0], c[1], c[3], c[2]))
    head = f"{'dtype':5} {'d':>4} {'N':>6} {'causal':>6} " + " ".join(f"{x:>9}" for x in names)
    head += "  v3/cuDNN  v4/cuDNN  v4/v3"
    out = [head]
    for c in cells:
        by = {label(r["contender"]): r for r in rows if (r["dtype"], r["d"], r["n"], r["causal"]) == c}
        tf = {x: by.get(x, {}).get("tflops") for x in names}
        line = f"{c[0]:5} {c[1]:>4} {c[2]:>6} {int(c[3]):>6} " + " ".join(
            f"{tf[x]:9.1f}" if tf[x] else f"{cell_word(by.get(x)):>9}" for x in names)

        def ratio(a, b):
            return f"{tf[a] / tf[b]:.3f}" if tf.get(a) and tf.get(b) else "-"
        line += f"  {ratio('v3', 'cudnn'):>8}  {ratio('v4', 'cudnn'):>8}  {ratio('v4', 'v3'):>5}"
        out.append(line)
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="bwd_ws_ab_"))
    ap.add_argument("--n", default="2048,4096,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--budget-s", type=float, default=200.0, help="timing stops here (seconds from the start)")
    ap.add_argument("--alternatives", action="store_true", help="also time lab/bwd_ws.py ALTERNATIVES")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    ns = harness.int_list(ap, "--n", args.n, at_most=TOKENS, why="batch*N = 16k tokens")
    ds = harness.int_list(ap, "--d", args.d, choices=(64, 128), why="the v4 backward's head dims")
    dtypes = [x for x in args.dtypes.split(",") if x]
    if not dtypes or any(x not in TOL64 for x in dtypes):
        ap.error(f"--dtypes: a comma-separated subset of {', '.join(TOL64)}, got {args.dtypes!r}")
    if not args.budget_s > 0:
        ap.error(f"--budget-s must be positive, got {args.budget_s}")
    harness.positive_int(ap, "--jobs", args.jobs)
    import torch

    from lab import bwd_ws

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        ap.error("needs a compute capability 9.x GPU")
    start = time.time()
    precompile(args.jobs, ds, dtypes, ns)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    checks = correctness()
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, timer=harness.timer_name(),
                  flops=f"backward = 2.5 x forward, forward = {harness.flops_formula()}", tokens=TOKENS,
                  hidden=HIDDEN, configs={d: bwd_ws.CONFIGS[d] for d in ds}, checks=checks, rows=[],
                  alternatives={d: {f"v4_alt{i}": cfg for i, cfg in enumerate(bwd_ws.ALTERNATIVES[d])} for d in ds})
    path = out_dir / "bwd_ws_ab.json"
    if not all(r["ok"] for r in checks):
        path.write_text(json.dumps(result, indent=1, default=str))
        log(f"correctness FAILED: {sum(not r['ok'] for r in checks)} of {len(checks)} checks; no timing. Wrote {path}")
        return 1
    log(f"correctness: {len(checks)} checks passed ({time.time() - start:.0f} s)")
    if args.alternatives:  # v4_altI is a different build at each d
        for d in ds:
            log(f"d = {d}: " + "; ".join(f"{k} = {v}" for k, v in result["alternatives"][d].items()))
    end = start + args.budget_s
    rows = result["rows"]
    names = [V3_LABEL, "v4", "cudnn", "flash"]
    for dt in dtypes:
        for d in ds:
            contenders = [("cudnn", None), (V3_LABEL, None), ("v4", None), ("flash", None)]
            if args.alternatives:
                alts = [(f"v4_alt{i}", cfg) for i, cfg in enumerate(bwd_ws.ALTERNATIVES[d])]
                contenders += alts
                names += [a for a, _ in alts if a not in names]
            for n in ns:
                for causal in (False, True):
                    run_cell(dt, d, n, causal, contenders, end, rows)
                    cell = [r for r in rows if (r["dtype"], r["d"], r["n"], r["causal"]) == (dt, d, n, causal)]
                    log(f"{dt} d={d} N={n} causal={int(causal)}: " + "  ".join(
                        f"{r['contender']}={r['tflops']:.0f}" if "tflops" in r else
                        f"{r['contender']}={'skip' if 'skipped' in r else 'FAIL'}" for r in cell))
    result["seconds"] = time.time() - start
    result["table"] = table(rows, names)
    path.write_text(json.dumps(result, indent=1, default=str))
    log("\nTFLOP/s (backward; do_bench medians)\n" + result["table"])
    log(f"wrote {path} ({time.time() - start:.0f} s)")
    bad = [r for r in rows if r.get("ok") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
