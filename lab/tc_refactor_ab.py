"""GPU check of the tc_fa2.cuh refactor (issue 15 item 3): fa2_tc and v_once_tc, old against new.

    PYTHONPATH=. python3 lab/tc_refactor_ab.py [--skip tests,sanitize] [--budget-s 200]

The old sources (commit 029b51e, before the shared header) are kept beside this script as *.orig;
they compile through the same loader from a temporary folder (all 40 builds first, in parallel, into
the loader's disk cache). In order, writing under $OUT (default: a temporary folder):
  1. tests     pytest -m gpu on the fa2_tc / v_once_tc tests          -> gpu_tests_tc.log
  2. sanitize  compute-sanitizer memcheck + racecheck, both kernels   -> sanitize.json, *.log
  3. check     old and new on odd shapes (tails, Nq != Nk, causal rows that see no key, both dtypes,
               both head dims, every v_once placement x rescale): outputs poisoned with NaN first,
               each checked against the float64 reference, and new compared with old bit for bit
  4. time      old and new interleaved in one process, median of CUDA-event-timed repeats after
               warm-up, non-zero random inputs; ratio new/old per case (1.00 = unchanged)
Writes ab.json and prints a summary table last. Exit status 1 if a step failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORIG = Path(__file__).resolve().parent / "tc_refactor_ab"


def old_sources() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="tc_old_"))
    for f in ORIG.glob("*.orig"):
        shutil.copy(f, tmp / f.name[:-len(".orig")])
    return tmp


def _compile_one(job):
    from kernels import loader

    src, defs, arch = job
    loader.compile_cubin(src, defines=defs, arch=arch)


def precompile(old_dir: Path) -> dict:
    """Every old and new build this script (and the tests it runs) launches, compiled in parallel
    into the loader's disk cache, so the steps below time kernels, not NVRTC."""
    from concurrent.futures import ProcessPoolExecutor

    from kernels import fa2_tc, loader, v_once_tc

    t0 = time.time()
    arch = loader.default_arch()
    jobs = []
    for src_dir in (old_dir, None):
        _, _, fa2_src, v_src = kernels_for(src_dir)
        jobs += [(fa2_src, defs, arch) for _, _, defs in fa2_tc.compile_configs()]
        jobs += [(v_src, defs, arch) for _, _, defs in v_once_tc.compile_configs()]
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 4)) as pool:
        list(pool.map(_compile_one, jobs))
    return dict(rc=0, builds=len(jobs), seconds=round(time.time() - t0, 1))


def run_step(cmd, log: Path, timeout: int) -> dict:
    t0 = time.time()
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        log.write_text(out.stdout + out.stderr)
        rc = out.returncode
        tail = (out.stdout + out.stderr).strip().splitlines()[-1:] or [""]
    except subprocess.TimeoutExpired as exc:
        log.write_text(str(exc.stdout or "") + "\nTIMEOUT")
        rc, tail = 124, ["timeout"]
    return dict(rc=rc, seconds=round(time.time() - t0, 1), last_line=tail[0][:160])


def kernels_for(src_dir):
    """fa2_tc / v_once_tc launchers whose SOURCE points into src_dir (None: the tree's own)."""
    from kernels import fa2_tc, v_once_tc

    if src_dir is None:
        return fa2_tc, v_once_tc, str(fa2_tc.SOURCE), str(v_once_tc.SOURCE)
    return fa2_tc, v_once_tc, str(src_dir / "fa2_tc.cu"), str(src_dir / "v_once_tc.cu")


class Swap:
    """Point the launchers at one set of sources for the duration of a call."""

    def __init__(self, src_dir):
        self.fa2_tc, self.v_once_tc, self.fa2_src, self.v_src = kernels_for(src_dir)

    def __enter__(self):
        self.saved = (self.fa2_tc.SOURCE, self.v_once_tc.SOURCE)
        self.fa2_tc.SOURCE, self.v_once_tc.SOURCE = Path(self.fa2_src), Path(self.v_src)
        return self

    def __exit__(self, *exc):
        self.fa2_tc.SOURCE, self.v_once_tc.SOURCE = self.saved


CASES = [  # (B, H, Nq, Nk, d, causal)
    (1, 2, 70, 43, 64, True),     # 27 rows see no key
    (2, 3, 333, 517, 128, True),  # tails, Nq < Nk
    (1, 2, 517, 333, 64, False),
    (1, 1, 1, 1, 128, False),
    (1, 4, 1000, 1000, 128, True),
    (2, 1, 129, 2049, 64, True),
]
V_ONCE_OPTS = [dict(placement=p, rescale=r) for p in ("sram", "hbm") for r in ("eager", "lazy")]


def check(old_dir) -> list[dict]:
    import torch

    from variants import attention_reference

    tol = {torch.float16: 1e-2, torch.bfloat16: 6e-2}
    rows = []
    gen = torch.Generator().manual_seed(0)
    for (b, h, nq, nk, d, causal) in CASES:
        for dtype in (torch.float16, torch.bfloat16):
            q = torch.randn(b, h, nq, d, generator=gen).to(dtype).cuda()
            k = torch.randn(b, h, nk, d, generator=gen).to(dtype).cuda()
            v = torch.randn(b, h, nk, d, generator=gen).to(dtype).cuda()
            ref_o, ref_lse = attention_reference(q, k, v, causal=causal)
            variants = [("fa2_tc", {})] + [("v_once_tc", o) for o in V_ONCE_OPTS]
            for name, opts in variants:
                outs = {}
                for which, src in (("old", old_dir), ("new", None)):
                    with Swap(src) as s:
                        mod = s.fa2_tc if name == "fa2_tc" else s.v_once_tc
                        if name == "v_once_tc" and opts["placement"] == "sram":
                            plan = mod.plan(nq, nk, d, causal=causal, placement="auto", rescale=opts["rescale"])
                            if not plan["fits_sram"]:
                                continue
                        o = torch.full_like(q, float("nan"))
                        lse = torch.full((b, h, nq), float("nan"), device=q.device)
                        mod.forward(q, k, v, causal=causal, out=(o, lse), **opts)
                        torch.cuda.synchronize()
                        outs[which] = (o, lse)
                if not outs:
                    continue
                o_new, lse_new = outs["new"]
                o_old, lse_old = outs["old"]
                err = ((o_new.double() - ref_o).abs().max() / max(1.0, v.abs().max().item())).item()
                fin = torch.isfinite(ref_lse)
                lse_err = ((lse_new.double() - ref_lse)[fin].abs().max().item() if fin.any() else 0.0)
                same_inf = bool((torch.isneginf(lse_new) == ~fin).all())
                bitwise = bool(torch.equal(o_new, o_old) and torch.equal(lse_new.nan_to_num(), lse_old.nan_to_num()))
                ok = (err < tol[dtype] and lse_err < tol[dtype] * 10 and same_inf
                      and not torch.isnan(o_new).any().item())
                rows.append(dict(kernel=name, **opts, shape=[b, h, nq, nk, d], causal=causal,
                                 dtype=str(dtype).replace("torch.", ""), err_o=err, err_lse=lse_err,
                                 no_key_rows_ok=same_inf, bitwise_equal_old=bitwise, ok=ok))
    return rows


def timed(fn, reps=20) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def timing(old_dir, budget_s: float) -> list[dict]:
    import torch

    t_end = time.time() + budget_s
    rows = []
    cases = [("fa2_tc", {}, 4, 16, n, d, c) for d in (64, 128) for n in (2048, 8192) for c in (False, True)]
    cases += [("v_once_tc", dict(placement="auto", rescale="lazy"), 4, 16, n, d, False)
              for d in (64, 128) for n in (1024, 4096)]
    for name, opts, b, h, n, d, causal in cases:
        if time.time() > t_end:
            break
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        per = {}
        fns = {}
        for which, src in (("old", old_dir), ("new", None)):
            with Swap(src) as s:
                mod = s.fa2_tc if name == "fa2_tc" else s.v_once_tc
                mod.forward(q, k, v, causal=causal, **opts)  # compile + warm
            fns[which] = (src, mod)
        for _ in range(3):  # interleave old and new, keep each one's best median
            for which, (src, mod) in fns.items():
                with Swap(src):
                    for _ in range(3):
                        mod.forward(q, k, v, causal=causal, **opts)
                    ms = timed(lambda: mod.forward(q, k, v, causal=causal, **opts))
                per[which] = min(per.get(which, math.inf), ms)
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        rows.append(dict(kernel=name, **opts, B=b, H=h, N=n, d=d, causal=causal, ms_old=per["old"],
                         ms_new=per["new"], tflops_new=flops / per["new"] / 1e9,
                         ratio_new_over_old=per["new"] / per["old"]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="comma list of steps to skip: tests,sanitize,check,time")
    ap.add_argument("--budget-s", type=float, default=45.0, help="time budget of the timing step")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="tc_ab_"))
    out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check", file=sys.stderr)
        return 2
    result = dict(device=torch.cuda.get_device_name(), steps={})
    old_dir = old_sources()
    result["steps"]["precompile"] = precompile(old_dir)
    if "tests" not in skip:
        result["steps"]["tests"] = run_step(
            [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
             "tests/test_kernels_tc.py", "-k", "fa2_tc or v_once_tc or long_rows or errors"],
            out / "gpu_tests_tc.log", timeout=90)
    if "sanitize" not in skip:
        result["steps"]["sanitize"] = run_step(
            [sys.executable, "bench/sanitize.py", "--out", str(out), "--kernels", "fa2_tc,v_once_tc",
             "--dtypes", "float16,bfloat16"], out / "sanitize_step.log", timeout=90)
    failed = any(s["rc"] != 0 for s in result["steps"].values())
    if "check" not in skip:
        rows = check(old_dir)
        result["check"] = rows
        bad = [r for r in rows if not r["ok"]]
        failed |= bool(bad)
        result["steps"]["check"] = dict(rc=int(bool(bad)), cases=len(rows), failed=len(bad),
                                        bitwise_equal_old=sum(r["bitwise_equal_old"] for r in rows))
    if "time" not in skip and not failed:
        result["time"] = timing(old_dir, args.budget_s)
    (out / "ab.json").write_text(json.dumps(result, indent=1))

    print(f"\n{result['device']}  (results in {out})")
    for step, s in result["steps"].items():
        print(f"  {step:9s} rc={s.get('rc')}  " + "  ".join(f"{k}={v}" for k, v in s.items() if k != "rc"))
    if result.get("time"):
        print(f"  {'kernel':10s} {'options':12s} {'N':>6s} {'d':>4s} {'causal':>6s} {'old ms':>8s} {'new ms':>8s} "
              f"{'new/old':>8s} {'TFLOP/s':>8s}")
        for r in result["time"]:
            o = f"{r.get('placement', '')}/{r.get('rescale', '')}" if r["kernel"] == "v_once_tc" else "-"
            print(f"  {r['kernel']:10s} {o:12s} {r['N']:6d} {r['d']:4d} {str(r['causal']):>6s} {r['ms_old']:8.3f} "
                  f"{r['ms_new']:8.3f} {r['ratio_new_over_old']:8.3f} {r['tflops_new']:8.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
