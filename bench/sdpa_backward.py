"""GPU check for issue 12: SDPA's unfused (math) against fused (flash, efficient, cuDNN) backward, the
backward references on CUDA tensors, and the tiny GPT trained with variants.attention against SDPA.

    PYTHONPATH=. python3 bench/sdpa_backward.py          # writes $OUT/sdpa_backward.{json,md}

1. checks: every SDPA backend's dq, dk, dv against float64 autograd (tests/backward_helpers.py) on
   odd shapes, fp16 and bf16, causal and not (Nq = Nk: SDPA's causal is top-left aligned); the
   naive/fa1/fa2 references' backward run on CUDA tensors against the same oracle. A backend that
   fails its check is not timed.
2. timings (fp16, B·N = 16k, H = 2048/d as bench_kernels.py; bench.harness's inputs rotated beyond L2
   and its one timer, time_fn): forward alone and forward + backward (torch.autograd.grad, nothing
   accumulated), so backward = the difference; backward TFLOP/s = 2.5 x bench.harness.flops / time.
3. model: 6 steps of the tiny GPT (model/) in float32 with variants.attention(variant="fa2") and
   with SDPA from one seed; the loss difference.
Total runtime: about 2 minutes on an H200.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness  # noqa: E402
from tests.backward_helpers import GRAD_TOLERANCE, grad_error, reference_grads  # noqa: E402

BACKENDS = ("math", "efficient", "flash", "cudnn")
MATH_MAX_BYTES = 40 * 2**30  # math materialises S, P, dP, dS (B·H·N² each, several copies)


def sdpa(backend, causal):
    return lambda q, k, v: harness.sdpa(backend, q, k, v, causal)


def grads_of(fn, q, k, v, do):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(fn(q, k, v), (q, k, v), do)


def checks():
    out = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(1, 3, 129, 64), (2, 2, 257, 128), (1, 2, 1000, 64)]
    for backend in BACKENDS:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                errs, status = [], "ok"
                for b, h, n, d in shapes:
                    q, k, v, do = (torch.randn(b, h, n, d, generator=gen, device="cuda").to(dtype)
                                   for _ in range(4))
                    try:
                        g = grads_of(sdpa(backend, causal), q, k, v, do)
                    except RuntimeError as e:  # backend not available for this shape/dtype
                        status = f"unavailable: {str(e).splitlines()[0][:100]}"
                        break
                    ref = reference_grads(q, k, v, do, causal=causal)
                    e = max(grad_error(x, r.to(x.device)) for x, r in zip(g, ref))
                    finite = all(torch.isfinite(x).all().item() for x in g)
                    errs.append(e)
                    if not finite or e > GRAD_TOLERANCE[dtype]:
                        status = f"FAIL err {e:.3g} finite={finite} shape {(b, h, n, d)}"
                        break
                out.append(dict(what=f"sdpa_{backend}", dtype=str(dtype).replace("torch.", ""),
                                causal=causal, max_err=max(errs) if errs else None, status=status))
    from variants import VARIANTS

    for name in ("naive", "fa1", "fa2"):
        q, k, v, do = (torch.randn(2, 2, n, 40, generator=gen, device="cuda") for n in (77, 50, 50, 77))
        for causal in (False, True):
            o, lse = VARIANTS[name].forward(q, k, v, causal=causal, block_q=16, block_k=32)
            g = VARIANTS[name].backward(q, k, v, o, lse, do, causal=causal, block_q=16, block_k=32)
            ref = reference_grads(q, k, v, do, causal=causal)
            e = max(grad_error(x, r.to(x.device)) for x, r in zip(g, ref))
            ok = e <= GRAD_TOLERANCE[torch.float32] and all(torch.isfinite(x).all().item() for x in g)
            out.append(dict(what=f"reference {name} (cuda)", dtype="float32", causal=causal, max_err=e,
                            status="ok" if ok else f"FAIL err {e:.3g}"))
    return out


def timings(ok_backends, deadline):
    out = []
    for d in (64, 128):
        h = 2048 // d
        for causal in (False, True):
            for n in (512, 1024, 2048, 4096, 8192, 16384):
                b = 16384 // n
                for backend in ok_backends:
                    if time.time() > deadline:
                        return out
                    if backend == "math" and b * h * n * n * 2 * 6 > MATH_MAX_BYTES:
                        continue
                    fn = sdpa(backend, causal)
                    sets = harness.input_sets(b, h, n, n, d, torch.float16)
                    dos = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in sets]
                    train_sets = [(q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), do)
                                  for (q, k, v), do in zip(sets, dos)]

                    def fwd(q, k, v, do):
                        with torch.no_grad():
                            return fn(q, k, v)

                    def fwd_bwd(q, k, v, do):
                        return torch.autograd.grad(fn(q, k, v), (q, k, v), do)
                    try:
                        tf = harness.time_fn(fwd, train_sets)
                        tt = harness.time_fn(fwd_bwd, train_sets)
                    except RuntimeError as e:
                        out.append(dict(backend=backend, n=n, d=d, causal=causal, skipped=str(e)[:120]))
                        torch.cuda.empty_cache()
                        continue
                    flops = harness.flops(b, h, n, n, d, causal)
                    bwd_ms = tt["median_ms"] - tf["median_ms"]
                    out.append(dict(backend=backend, n=n, d=d, causal=causal, batch=b, heads=h,
                                    dtype="float16", run_id=harness.run_info()["run_id"], timer=tt["timer"],
                                    fwd_ms=tf["median_ms"], fwd_bwd_ms=tt["median_ms"],
                                    bwd_ms=bwd_ms, fwd_tflops=flops / tf["median_ms"] / 1e9,
                                    bwd_tflops=2.5 * flops / bwd_ms / 1e9 if bwd_ms > 0 else None))
                    del sets, dos, train_sets
                    torch.cuda.empty_cache()
    return out


def model_check():
    from model.gpt import GPTConfig, sdpa_attention
    from model.train import attention_by_name, train
    from model.data import byte_corpus

    cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, ctx=64)
    corpus = byte_corpus(256 * 1024)
    a = train(cfg, sdpa_attention, 6, 4, 3e-3, 0, device="cuda", corpus=corpus)
    b = train(cfg, attention_by_name("fa2", 16, 32), 6, 4, 3e-3, 0, device="cuda", corpus=corpus)
    rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    return dict(sdpa=a, fa2_reference=b, max_rel_diff=rel, status="ok" if rel < 1e-3 else "FAIL")


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="sdpa_backward_"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = dict(harness.environment(), device=torch.cuda.get_device_name(),
               convention="fp16; batch*N = 16384; hidden = 2048 (H = 2048/d); bwd = fwd_bwd - fwd; "
                          f"bwd TFLOP/s = 2.5 x ({harness.flops_formula()}) / bwd time")
    res["checks"] = checks()
    ok = sorted({c["what"][5:] for c in res["checks"] if c["what"].startswith("sdpa_")}
                - {c["what"][5:] for c in res["checks"] if c["what"].startswith("sdpa_") and c["status"] != "ok"},
                key=BACKENDS.index)
    res["timed_backends"] = ok
    res["records"] = timings(ok, t0 + 150)
    res["model"] = model_check()
    res["wall_s"] = time.time() - t0
    (out / "sdpa_backward.json").write_text(json.dumps(res, indent=1))
    lines = ["| backend | d | causal | N | fwd ms | bwd ms | bwd/fwd | bwd TFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    for r in res["records"]:
        if "skipped" in r:
            continue
        lines.append(f"| {r['backend']} | {r['d']} | {r['causal']} | {r['n']} | {r['fwd_ms']:.3f} | "
                     f"{r['bwd_ms']:.3f} | {r['bwd_ms'] / r['fwd_ms']:.2f} | "
                     f"{r['bwd_tflops'] or float('nan'):.1f} |")
    (out / "sdpa_backward.md").write_text("\n".join(lines) + "\n")
    print("checks:")
    for c in res["checks"]:
        err = "-" if c["max_err"] is None else f"{c['max_err']:.2e}"
        print(f"  {c['what']:22s} {c['dtype']:9s} causal={c['causal']!s:5s} err {err:9s} {c['status']}")
    print(f"model: max relative loss difference fa2 reference vs SDPA {res['model']['max_rel_diff']:.2e} "
          f"{res['model']['status']}")
    print("\n".join(lines))
    print(f"wrote {out}/sdpa_backward.json, .md in {res['wall_s']:.0f} s")
    bad = [c for c in res["checks"] if c["status"].startswith("FAIL")] or res["model"]["status"] != "ok"
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
