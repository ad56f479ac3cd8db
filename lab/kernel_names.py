"""Which kernel an external backend launches, and with what grid and block (issue 11: the descriptors of SDPA flash and
cuDNN state the tiling of each head-dim bucket; this records what the library actually ran).

For each backend, head dim, length and causal flag: one SDPA call under torch.profiler (CUPTI), the chrome trace's
kernel events read back for name, grid, block, registers and shared memory. No timing: the descriptors' traits
(gpumodel/builds.py _sdpa_flash, _sdpa_cudnn) are what this checks.

    PYTHONPATH=. python3 lab/kernel_names.py --out DIR [--dims 64,96,128,256] [--seqs 512,4096]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness  # noqa: E402

TOKENS, HIDDEN = 16384, 2048  # the grid: batch * N = 16k, H * d = 2048


def kernels_of(fn) -> list[dict]:
    """The CUDA kernels one call of fn launches (the first call's compile and autotune left out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path)).get("traceEvents", [])
    out = []
    for ev in events:
        if ev.get("cat") != "kernel":
            continue
        args = ev.get("args", {})
        out.append(dict(name=ev.get("name"), grid=args.get("grid"), block=args.get("block"),
                        registers=args.get("registers per thread"), smem=args.get("shared memory"),
                        dur_us=ev.get("dur")))
    return out


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp")
    ap.add_argument("--dims", default="64,96,128,256")
    ap.add_argument("--seqs", default="512,4096")
    ap.add_argument("--backends", default="flash,cudnn")
    a = ap.parse_args(argv)
    harness.int_list(ap, "--dims", a.dims, at_most=HIDDEN, why=f"H = {HIDDEN} / d heads")
    harness.int_list(ap, "--seqs", a.seqs, at_most=TOKENS, why=f"batch*N = {TOKENS} tokens")
    harness.name_list(ap, "--backends", a.backends, harness.SDPA_BACKENDS, "SDPA backend")
    if harness.no_gpu("kernel_names"):
        return 2
    rows = []
    for d in (int(x) for x in a.dims.split(",")):
        for n in (int(x) for x in a.seqs.split(",")):
            b, h = TOKENS // n, HIDDEN // d
            for dtype in (torch.float16, torch.bfloat16):
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
                for causal in (False, True):
                    for backend in a.backends.split(","):
                        try:
                            ks = kernels_of(lambda: harness.sdpa(backend, q, k, v, causal))
                        except Exception as e:  # a backend that refuses this shape: recorded, not fatal
                            ks = [dict(error=f"{type(e).__name__}: {str(e)[:200]}")]
                        row = dict(backend=backend, d=d, n=n, batch=b, heads=h, causal=causal,
                                   dtype=str(dtype).removeprefix("torch."), kernels=ks)
                        rows.append(row)
                        if not ks:  # CUPTI recorded no kernel (no activity, or the profiler unavailable)
                            ks = [dict(error="no kernel events in the profiler's trace")]
                            row["kernels"] = ks
                        main_k = max((x for x in ks if "dur_us" in x), key=lambda x: x["dur_us"] or 0, default=ks[0])
                        print(f"{backend:6s} d={d:3d} n={n:5d} {row['dtype']:8s} causal={int(causal)} "
                              f"{main_k.get('name', main_k.get('error'))[:110]} grid={main_k.get('grid')} "
                              f"block={main_k.get('block')} regs={main_k.get('registers')} smem={main_k.get('smem')}")
                        # written after every row: a part stopped at its time limit keeps what it had
                        harness.write_rows(a.out, "kernel_names.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
