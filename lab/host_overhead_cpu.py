"""Python host time of fa2_wgmma.forward without the GPU: the launcher's per-call path (checks, plan,
tensor maps from the memo, output allocation, argument tuple) with the launch itself stubbed out.

    PYTHONPATH=. python lab/host_overhead_cpu.py [--old PATH_TO_OLD_fa2_wgmma.py PATH_TO_OLD_tma.py]

CPU tensors pose as CUDA ones (a Tensor subclass with torch-function dispatch disabled, so attribute reads
cost what they cost on real tensors); the capability query is stubbed (on a GPU it is a driver call the
new path makes once per device). Tensor maps are pre-filled in the memo, as after a first call. Prints
microseconds per call, median of 7 runs; GPU numbers come from bench/launch_overhead.py.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402


class PosingCuda(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True


class _Stub:
    def launch(self, *a, **kw):
        pass


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(fa2_wgmma, tma_mod, q, k, v, n=2000) -> float:
    from kernels import loader

    loader.get_function = lambda *a, **kw: _Stub()
    torch.cuda.get_device_capability = lambda *a, **kw: (9, 0)
    blank = np.zeros(16, dtype=np.uint64)
    memo = tma_mod.__dict__.get("_MEMO4", tma_mod._MEMO)
    real_args = getattr(tma_mod, "tensor_map_args", None)
    for t in (q, k, v):  # pre-fill the memo under the key each version uses
        for box in (64, 80, 128, 176):
            if "_MEMO4" in tma_mod.__dict__:
                memo[(t.data_ptr(), t.shape, t.stride(), t.dtype, box, 64)] = blank
            else:
                b, h, nn, d = t.shape
                memo[(t.data_ptr(), b * h, nn, d, str(t.dtype), box, 64)] = blank
    del real_args
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fa2_wgmma.forward(q, k, v, causal=True)
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", nargs=2, metavar=("FA2_WGMMA_PY", "TMA_PY"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    q = torch.randn(2, 8, 1024, 128, dtype=torch.float16).as_subclass(PosingCuda)
    from kernels import fa2_wgmma, loader, tma

    rows = [("new, contiguous", fa2_wgmma, tma, (q, q, q))]
    qs = torch.randn(2, 1024, 8, 128, dtype=torch.float16).transpose(1, 2).as_subclass(PosingCuda)
    ks = torch.randn(2, 1024, 2, 128, dtype=torch.float16).transpose(1, 2).as_subclass(PosingCuda)
    rows.append(("new, (B,N,H,d) view + GQA", fa2_wgmma, tma, (qs, ks, ks)))
    if args.old:
        old_tma = _load(args.old[1], "kernels.tma")  # the old launcher imports kernels.tma by name
        sys.modules["kernels.tma"] = old_tma
        old = _load(args.old[0], "fa2_wgmma_old")
        rows.insert(0, ("old, contiguous", old, old_tma, (q, q, q)))
    loader._HOPPER.add(None)  # CPU tensors have device index None: the Hopper check passes
    results = []
    for label, mod, tmod, qkv in rows:
        if tmod is tma:
            sys.modules["kernels.tma"] = tma
        results.append((label, measure(mod, tmod, *qkv)))
    print(f"{'path':32s} {'host us/call (no launch)':>24s}")
    for label, us in results:
        print(f"{label:32s} {us:24.1f}")


if __name__ == "__main__":
    main()
