"""One H200 visit for the Hopper backward (kernels.fa2_wgmma_bwd): correctness first, then timing.

    PYTHONPATH=. python3 lab/bwd_wgmma_check.py [checks] [pytest] [bench] [ablate] [sanitize]
    (default: all). Writes $OUT/bwd_wgmma.json (every step's results), $OUT/bwd_gpu_tests.log,
    $OUT/bwd_sanitize.log; prints a table last.

checks   every tuning candidate (fa2_wgmma_bwd.SWEEP) on tails, Nq != Nk, causal with empty rows, both
         dtypes, scores up to ~1e4, against float64 (tests/test_kernels_bwd_gpu.check, poisoned outputs)
pytest   tests/test_kernels_bwd_gpu.py (hypothesis, 30 examples)
bench    backward TFLOP/s of each candidate, SDPA flash and cuDNN, batch*N = 16k, hidden 2048, d = 64/128,
         causal and not; each cell's gradients are checked against SDPA flash's before it is timed.
         FLOPs = 2.5 x forward = 2.5 * 4 * B * H * Nq * Nk * d, halved when causal.
ablate   the dQ atomics' cost: DQ_ABLATE=1 (dQ product, no atomics), 2 (no dQ at all); wrong dQ, timed only
sanitize compute-sanitizer memcheck and racecheck over one small causal tail launch per build
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="bwd_wgmma_")
os.makedirs(OUT, exist_ok=True)
RESULTS = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
NS = [int(x) for x in os.environ.get("BWD_NS", "1024,2048,4096,8192,16384").split(",")]
DTYPES = [getattr(torch, x) for x in os.environ.get("BWD_DTYPES", "float16,bfloat16").split(",")]
T0 = time.time()
DEADLINE_S = float(os.environ.get("BWD_DEADLINE_S", "1e9"))  # benchmark cells stop being added past this


def late() -> bool:
    return time.time() - T0 > DEADLINE_S


def save():
    with open(os.path.join(OUT, "bwd_wgmma.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def step_checks():
    from kernels import fa2_wgmma_bwd
    from tests.test_kernels_bwd_gpu import check

    shapes = [(1, 2, 77, 203, torch.float16, True, 4.0), (2, 1, 300, 100, torch.bfloat16, True, 1.0),
              (1, 2, 333, 1025, torch.float16, False, 20.0), (1, 1, 1000, 1000, torch.bfloat16, True, 1.0),
              (1, 3, 64, 64, torch.float16, False, 1.0), (1, 1, 129, 257, torch.bfloat16, False, 0.5),
              (2, 2, 1, 700, torch.float16, True, 1.0), (1, 1, 700, 1, torch.float16, True, 1.0),
              (1, 2, 2048, 2048, torch.float16, True, 1.0)]
    out = []
    for d, cands in fa2_wgmma_bwd.SWEEP.items():
        for cfg in cands:
            for (b, h, nq, nk, dtype, causal, scale) in shapes:
                rec = dict(d=d, config=cfg, shape=[b, h, nq, nk], dtype=str(dtype), causal=causal, scale=scale)
                try:
                    rec["errors"] = check(b, h, nq, nk, d, dtype, causal, scale, nq + nk, config=cfg)
                    rec["ok"] = True
                except Exception as exc:  # recorded, the visit goes on
                    rec["ok"], rec["error"] = False, f"{type(exc).__name__}: {exc}"[:500]
                out.append(rec)
                print(("ok  " if rec["ok"] else "FAIL"), d, cfg, rec["shape"], rec["dtype"], causal, scale,
                      rec.get("error", {k: round(v["rel"], 5) for k, v in rec.get("errors", {}).items()}))
    RESULTS["checks"] = out
    RESULTS["checks_passed"] = sum(r["ok"] for r in out)
    RESULTS["checks_total"] = len(out)


def step_pytest():
    t0 = time.time()
    with open(os.path.join(OUT, "bwd_gpu_tests.log"), "w") as log:
        try:
            rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 "tests/test_kernels_bwd_gpu.py"], stdout=log, stderr=subprocess.STDOUT,
                                timeout=float(os.environ.get("BWD_PYTEST_TIMEOUT", "100"))).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    with open(os.path.join(OUT, "bwd_gpu_tests.log")) as f:
        tail = f.read().strip().splitlines()[-3:]
    RESULTS["pytest"] = dict(rc=rc, seconds=round(time.time() - t0, 1), tail=tail)
    print("pytest", rc, tail)


def _time(fn):
    """Median ms of fn() by the one timing method (bench.harness.time_fn)."""
    from bench import harness

    return harness.time_fn(lambda: fn(), [()])["median_ms"]


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def _cell(n, d, dtype, causal, configs, ablate=False):
    from bench import harness
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    b, h = max(1, 16384 // n), 2048 // d
    g = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v, do = (torch.randn(b, h, n, d, generator=g, device="cuda").to(dtype) for _ in range(4))
    flops = 2.5 * harness.flops(b, h, n, n, d, causal)  # backward = 2.5 forwards (the papers' convention)
    rows = []
    ref = None
    for name, backend in (("sdpa_flash", "flash"), ("cudnn", "cudnn")):
        try:
            qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
            o = harness.sdpa(backend, qr, kr, vr, causal)  # the backward follows the forward's backend
            grads = torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True)
            if ref is None:
                ref = grads
            ms = _time(lambda: torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True))
            rows.append(dict(kernel=name, ms=ms, tflops=flops / ms / 1e9,
                             rel_err_vs_flash=[_rel(x, y) for x, y in zip(grads, ref)]))
            del o, grads
        except Exception as exc:
            rows.append(dict(kernel=name, error=f"{type(exc).__name__}: {exc}"[:300]))
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    for cfg in configs:
        name = "wgmma_bwd " + ",".join(f"{k}={v}" for k, v in cfg.items())
        try:
            out = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
            fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, config=cfg, out=out)
            errs = [_rel(x, y) for x, y in zip(out, ref)] if ref is not None else None
            ok = errs is not None and all(e < (2e-2 if dtype == torch.float16 else 6e-2) for e in errs)
            if cfg.get("DQ_ABLATE"):
                ok = errs is not None and errs[1] < 6e-2 and errs[2] < 6e-2  # dQ is wrong by design
            row = dict(kernel=name, config=cfg, rel_err_vs_flash=errs, grads_ok=ok)
            if ok or ablate:
                ms = _time(lambda: fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, config=cfg, out=out))
                row.update(ms=ms, tflops=flops / ms / 1e9)
            rows.append(row)
        except Exception as exc:
            rows.append(dict(kernel=name, config=cfg, error=f"{type(exc).__name__}: {exc}"[:300]))
    for r in rows:
        r.update(n=n, d=d, b=b, h=h, dtype=str(dtype).replace("torch.", ""), causal=causal)
    return rows


def step_bench():
    from kernels import fa2_wgmma_bwd

    rows = []
    for dtype in DTYPES:
        for d in (64, 128):
            for causal in (False, True):
                for n in NS:
                    if late():
                        RESULTS["bench_cut_short"] = True
                        return
                    cfgs = fa2_wgmma_bwd.SWEEP[d] if dtype == torch.float16 else [fa2_wgmma_bwd.CONFIGS[d]]
                    rows += _cell(n, d, dtype, causal, cfgs)
                    RESULTS["bench"] = rows
                    save()
                    torch.cuda.empty_cache()


def step_ablate():
    from kernels import fa2_wgmma_bwd

    rows = []
    for d in (64, 128):
        base = fa2_wgmma_bwd.CONFIGS[d]
        cfgs = [base, dict(base, DQ_ABLATE=1), dict(base, DQ_ABLATE=2)]
        for n in (4096, 16384):
            if late():
                break
            rows += _cell(n, d, torch.float16, False, cfgs, ablate=True)
    RESULTS["ablate"] = rows


def one_launch():
    """A small launch per shipped build, for compute-sanitizer."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    for d in (64, 128):
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v = (torch.randn(1, 2, n, d, device="cuda", dtype=dtype) for n in (200, 130, 130))
            do = torch.randn_like(q)
            o, lse = fa2_wgmma.forward(q, k, v, causal=True)
            fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True)
    torch.cuda.synchronize()


def step_sanitize():
    res = {}
    with open(os.path.join(OUT, "bwd_sanitize.log"), "w") as log:
        for tool in ("memcheck", "racecheck"):
            try:
                p = subprocess.run(["compute-sanitizer", "--tool", tool, "--error-exitcode", "9", sys.executable,
                                    __file__, "--one"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=float(os.environ.get("BWD_SANITIZE_TIMEOUT", "75")))
                log.write(f"==== {tool} rc={p.returncode}\n{p.stdout}\n")
                res[tool] = dict(rc=p.returncode, summary=[x for x in p.stdout.splitlines() if "SUMMARY" in x])
            except Exception as exc:
                res[tool] = dict(error=str(exc)[:200])
    RESULTS["sanitize"] = res
    print("sanitize", res)


STEPS = dict(checks=step_checks, pytest=step_pytest, bench=step_bench, ablate=step_ablate, sanitize=step_sanitize)


def table():
    lines = []
    print = lines.append  # noqa: A001  (the table goes to stdout and to $OUT/bwd_wgmma.md)
    print("\n== checks: %s/%s passed" % (RESULTS.get("checks_passed"), RESULTS.get("checks_total")))
    if "pytest" in RESULTS:
        print("== pytest: %s %s" % (RESULTS["pytest"]["rc"], RESULTS["pytest"]["tail"][-1:]))
    for key in ("bench", "ablate"):
        rows = RESULTS.get(key, [])
        if not rows:
            continue
        print(f"== {key}: TFLOP/s (backward)")
        cells = {}
        for r in rows:
            cells.setdefault((r["dtype"], r["d"], r["causal"], r["n"]), {})[r["kernel"]] = (
                f"{r['tflops']:.0f}" if "tflops" in r else ("ERR" if "error" in r else "BAD"))
        kernels = sorted({r["kernel"] for r in rows}, key=lambda s: (not s.startswith("sdpa"), s))
        print("dtype d causal N | " + " | ".join(kernels))
        for key2, vals in cells.items():
            print(" ".join(str(x) for x in key2) + " | " + " | ".join(vals.get(kk, "-") for kk in kernels))
    text = "\n".join(lines)
    with open(os.path.join(OUT, "bwd_wgmma.md"), "w") as f:
        f.write(text + "\n")
    sys.stdout.write(text + "\n")


def parse_steps(argv) -> list[str]:
    """The steps named on the command line (none: all), --help's text, or one line and exit 2 for anything else: an
    unknown word (--help, a misspelt step) used to be dropped, which ran every step, the whole GPU visit."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        sys.exit(0)
    unknown = [a for a in argv if a not in STEPS and a != "--one"]
    if unknown:
        print(f"bwd_wgmma_check: unknown step {unknown[0]!r}; choose from {', '.join(STEPS)} (or --one)",
              file=sys.stderr)
        sys.exit(2)
    return [a for a in argv if a in STEPS] or list(STEPS)


if __name__ == "__main__":
    steps = parse_steps(sys.argv[1:])
    from bench import harness

    if harness.no_gpu("bwd_wgmma_check"):
        sys.exit(2)
    if "--one" in sys.argv:
        one_launch()
        sys.exit(0)
    for s in steps:
        t0 = time.time()
        try:
            STEPS[s]()
        except Exception:
            RESULTS.setdefault("step_errors", {})[s] = traceback.format_exc()[-2000:]
            print(f"step {s} failed:\n{traceback.format_exc()[-1500:]}")
        RESULTS.setdefault("step_seconds", {})[s] = round(time.time() - t0, 1)
        save()
    table()
