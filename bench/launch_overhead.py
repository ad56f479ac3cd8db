"""Host work per kernel call: CuPy's launch against cuLaunchKernel through ctypes (kernels.loader).

    PYTHONPATH=. python bench/launch_overhead.py [--out DIR]

Why: bench/bench_tc.py times each call with CUDA events around it after a synchronise, so the host
work of a call (argument checks, output allocation, the launch itself) is inside the timed window.
At N = 512…2k that is several per cent of a FlashAttention call (bench/NOTES-tc.md v2). This script
measures, on a tiny problem whose kernel time is negligible:
  host_us    wall time per call of 2000 back-to-back calls without synchronising (the host's cost),
  event_ms   the per-call median of bench.timing.time_cuda (what the benchmark reports),
for each launch path of fa2_tc and the teaching fa2, beside SDPA's flash backend. Outputs are checked
against the float64 reference first (both paths must give the same bits). Writes launch_overhead.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def host_us(fn, calls=2000):
    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    import torch

    from bench.timing import time_cuda
    from kernels import KERNELS, loader
    from variants import attention_reference

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 2, 128, 64, device="cuda", generator=gen, dtype=torch.float16) for _ in range(3))
    ref, _ = attention_reference(q, k, v)
    rows, outputs = [], {}
    for name in ("fa2_tc", "fa2"):
        fwd = KERNELS[name].forward
        for path in ("cupy", "driver"):
            loader._DRIVER[:] = [None] if path == "cupy" else []  # [] = look libcuda up again
            o, _ = fwd(q, k, v)
            torch.cuda.synchronize()
            err = (o.double() - ref).abs().max().item()
            outputs[name, path] = o.clone()
            fn = lambda: fwd(q, k, v)  # noqa: E731
            rows.append(dict(kernel=name, path=path, max_err=err, host_us=host_us(fn),
                             event_ms=time_cuda(lambda *_: fn(), [()], warmup=20, reps=200)["median_ms"]))
            print(rows[-1], flush=True)
        same = torch.equal(outputs[name, "cupy"], outputs[name, "driver"])
        rows.append(dict(kernel=name, path="same bits", equal=same))
        if not same or err > 1e-2:
            print(f"{name}: the launch paths disagree or the output is wrong", file=sys.stderr)
            return 1
    loader._DRIVER[:] = []
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
        rows.append(dict(kernel="sdpa_flash", path="torch", host_us=host_us(fn),
                         event_ms=time_cuda(lambda *_: fn(), [()], warmup=20, reps=200)["median_ms"]))
    print(rows[-1])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_overhead.json").write_text(json.dumps(
        dict(device=torch.cuda.get_device_name(), shape=[1, 2, 128, 64], dtype="float16", rows=rows),
        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
