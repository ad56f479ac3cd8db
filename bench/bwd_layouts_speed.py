"""The Hopper backward (kernels.fa2_wgmma_bwd) on what the forward takes, timed beside cuDNN (GPU, one run).

    PYTHONPATH=. python bench/bwd_layouts_speed.py [--out DIR] [--n 2048,8192,16384] [--d 64,96,128,256]
                                                   [--dtypes fp16,bf16] [--budget-s 210]

Per (dtype, d, N, causal): batch*N = 16k tokens, hidden 2048, H = 2048 // d rounded down to a multiple of 8
(d = 96: 16, d = 256: 8). Backward only (o and lse from kernels.fa2_wgmma.forward; cuDNN's through autograd
with the graph kept), bench.harness.time_fn medians (triton's do_bench, L2 flushed):
  contiguous     q, k, v, do (B, H, N, d) contiguous, equal heads (the baseline)
  gqa8           k, v with H_kv = H / 8 heads (H = 16, H_kv = 2 at d = 128)
  bnhd           q, k, v, o, do as (B, N, H, d) tensors seen through .transpose(1, 2) (no copy)
  deterministic  contiguous with deterministic=True (dQ's reduce-adds in key-block order)
  cudnn          torch SDPA with SDPBackend.CUDNN_ATTENTION on the contiguous inputs
  cudnn_gqa8     the same on the gqa8 inputs, K/V repeat_interleave'd in the graph (autograd sums dK, dV)
Before a contender is timed its gradients are checked (finite, norm-relative error to cuDNN's on the same
inputs within TOL; where cuDNN cannot run, to float32 SDPA "efficient" on the first batch and kv group);
a failing contender is reported, not timed. d = 96 runs the d = 128 tiles with zero-filled columns, d = 256
three passes (its deterministic contender: the float32 torch route; fa2_wgmma_bwd's docstring); TFLOP/s
count each d's own FLOPs (the papers' 2.5 x forward). Cells run until --budget-s
(default 210 s, so a run ends within 4 minutes on an H100 including compiles); the rest are listed as skipped.
Writes bwd_layouts_speed.json under --out (default $OUT, else a temp dir) and prints one line per cell.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

TOKENS, HIDDEN, GROUP = 16384, 2048, 8
TOL = {"fp16": 2e-2, "bf16": 6e-2}  # norm-relative, against another 16-bit backward (both round P, dS)
CONTENDERS = ("contiguous", "gqa8", "bnhd", "deterministic", "cudnn", "cudnn_gqa8")


def heads_for(d: int) -> int:
    return max(GROUP, (HIDDEN // d) // GROUP * GROUP)


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-30))


def cudnn_grads(q, k, v, do, causal, gqa):
    """run() -> (dq, dk, dv): cuDNN's backward through autograd (graph kept), via bench.harness.sdpa. GQA: K/V
    repeat_interleave'd to H heads inside the graph, so autograd sums dK, dV over each group (the repeat's
    backward, a small reduction, is in the time)."""
    import torch

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    kk, vv = (k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)) if gqa and rep > 1 else (k, v)
    out = harness.sdpa("cudnn", q, kk, vv, causal)
    return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def slice_reference(q, k, v, do, causal):
    """float32 SDPA (efficient, else math) gradients of batch 0 and kv head 0's query heads."""
    import torch

    g = q.shape[1] // k.shape[1]
    qs, ks, vs, dos = (t[:1, :n].float().detach().requires_grad_() for t, n in ((q, g), (k, 1), (v, 1), (do, g)))
    kr, vr = ks.expand(1, g, *ks.shape[2:]), vs.expand(1, g, *vs.shape[2:])
    for backend in ("efficient", "math"):
        try:
            out = harness.sdpa(backend, qs, kr, vr, causal)
            return torch.autograd.grad(out, (qs, ks, vs), dos.detach())
        except Exception:
            continue
    raise RuntimeError("no float32 SDPA backend ran")


def make(b, h, h_kv, n, d, dtype, bnhd, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def t(heads):
        x = torch.randn(b, n, heads, d, generator=g, device="cuda", dtype=dtype)
        return x.transpose(1, 2) if bnhd else x.transpose(1, 2).contiguous()

    return t(h), t(h_kv), t(h_kv), t(h)


def run_cell(dtype_name, d, n, causal, budget_end, rows):
    import torch

    from kernels import fa2_wgmma, fa2_wgmma_bwd

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    b, h = TOKENS // n, heads_for(d)
    cell = dict(dtype=dtype_name, d=d, n=n, causal=causal, batch=b, heads=h, h_kv_gqa=h // GROUP,
                bwd_flops=2.5 * harness.flops(b, h, n, n, d, causal))
    inputs = {"contiguous": make(b, h, h, n, d, dtype, False, 1), "gqa8": make(b, h, h // GROUP, n, d, dtype, False, 2),
              "bnhd": make(b, h, h, n, d, dtype, True, 3)}
    refs = {}
    for name in CONTENDERS:
        if time.time() > budget_end:
            rows.append(dict(cell, contender=name, skipped="budget"))
            continue
        rec = dict(cell, contender=name)
        rows.append(rec)
        key = {"deterministic": "contiguous", "cudnn": "contiguous", "cudnn_gqa8": "gqa8"}.get(name, name)
        q, k, v, do = inputs[key]
        try:
            if name.startswith("cudnn"):
                fn = cudnn_grads(q, k, v, do, causal, name == "cudnn_gqa8")
                grads = fn()
                refs[key] = grads
            else:
                o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
                det = name == "deterministic"

                def fn(q=q, k=k, v=v, o=o, lse=lse, do=do, det=det):
                    return fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, deterministic=det)

                out = tuple(fa2_wgmma_bwd._empty_like_layout(t).fill_(float("nan")) for t in (q, k, v))
                grads = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, deterministic=det, out=out)
                if name == "bnhd":
                    rec["strides_kept"] = all(g_.stride() == t.stride() for g_, t in zip(fn(), (q, k, v)))
            torch.cuda.synchronize()
            rec["finite"] = all(bool(torch.isfinite(g_).all()) for g_ in grads)
            rec["ok"] = rec["finite"]
            rec["checked_against"] = None
            if not name.startswith("cudnn"):
                ref_key = "gqa8" if name == "gqa8" else "contiguous"
                ref = refs.get(ref_key)
                if ref is None:  # cuDNN has not run on these values yet: run it now (or fall back)
                    rq, rk, rv, rdo = inputs[ref_key]
                    try:
                        ref = refs[ref_key] = cudnn_grads(rq, rk, rv, rdo, causal, ref_key == "gqa8")()
                    except Exception:
                        ref = None
                if name == "bnhd":  # other values than the contiguous set: its own cuDNN reference
                    try:
                        ref = cudnn_grads(q, k, v, do, causal, False)()
                    except Exception:
                        ref = None
                if ref is not None:
                    rec["checked_against"] = "cudnn"
                    rec["rel_err"] = [rel(g_, r) for g_, r in zip(grads, ref)]
                else:
                    rec["checked_against"] = "sdpa_fp32_slice"
                    sref = slice_reference(q, k, v, do, causal)
                    g = q.shape[1] // k.shape[1]
                    rec["rel_err"] = [rel(grads[0][:1, :g], sref[0]), rel(grads[1][:1, :1], sref[1]),
                                      rel(grads[2][:1, :1], sref[2])]
                rec["ok"] = rec["finite"] and max(rec["rel_err"]) <= TOL[dtype_name]
            if not rec["ok"]:
                harness_log(f"  {name}: gradient check FAILED {rec}")
                continue
            ms = float(harness.time_fn(lambda: fn(), [()])["median_ms"])  # do_bench median, L2 flushed
            rec.update(median_ms=ms, tflops=cell["bwd_flops"] / ms / 1e9)
        except Exception as exc:  # a contender that cannot run is reported; the others go on
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            torch.cuda.empty_cache()


def harness_log(*a):
    print(*a, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="bwd_layouts_"))
    ap.add_argument("--n", default="2048,8192,16384")
    ap.add_argument("--d", default="64,96,128,256")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--budget-s", type=float, default=210.0)
    args = ap.parse_args(argv)
    ns = harness.int_list(ap, "--n", args.n, at_most=TOKENS, why="batch*N = 16k tokens")
    ds = harness.int_list(ap, "--d", args.d, choices=(64, 96, 128, 256), why="fa2_wgmma backward's head dims")
    dtypes = [x for x in args.dtypes.split(",") if x]
    if not dtypes or any(x not in TOL for x in dtypes):
        ap.error(f"--dtypes: a comma-separated subset of {', '.join(TOL)}, got {args.dtypes!r}")
    if not args.budget_s > 0:
        ap.error(f"--budget-s must be positive, got {args.budget_s}")
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (compute capability 9.x)")
    start = time.time()
    end = start + args.budget_s
    rows: list[dict] = []
    for dt in dtypes:
        for d in ds:
            for n in ns:
                for causal in (False, True):
                    run_cell(dt, d, n, causal, end, rows)
                    cell = [r for r in rows if (r["dtype"], r["d"], r["n"], r["causal"]) == (dt, d, n, causal)]
                    harness_log(f"{dt} d={d} N={n} causal={int(causal)}: " + "  ".join(
                        f"{r['contender']}={r['tflops']:.0f}" if "tflops" in r else
                        f"{r['contender']}={'skip' if 'skipped' in r else 'FAIL'}" for r in cell))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "bwd_layouts_speed.json"
    path.write_text(json.dumps(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                    seconds=time.time() - start, rows=rows), indent=1))
    harness_log(f"wrote {path} ({time.time() - start:.0f} s)")
    bad = [r for r in rows if r.get("ok") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
