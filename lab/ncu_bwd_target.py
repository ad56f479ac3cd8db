"""ncu target for the backward kernels (issue 13 item 4): one shape per head dim, fp16, non-causal,
batch*N = 16k, hidden 2048. Each candidate runs once un-profiled (compile, autotune, allocate), then once
inside cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees only the measured call:

    ncu --clock-control none --profile-from-start off --csv --metrics ... python3 lab/ncu_bwd_target.py

Prints one "target launched: <label> N=<n> d=<d>" line per profiled call (the CSV's rows follow it in
launch order: ours = preprocess, main, dQ convert; SDPA = its own kernels).

    python3 lab/ncu_bwd_target.py [--n 16384] [--dims 128] [--dtype bf16]   (default: N = 4096, d = 64 and 128, fp16)
"""
from __future__ import annotations

import torch

from kernels import KERNELS


def run(label, fn):
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"target launched: {label}", flush=True)


def main(argv=None) -> int:
    import argparse

    from bench import harness

    if harness.no_gpu("ncu_bwd_target"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = ap.parse_args(argv)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]

    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    for d in (int(x) for x in args.dims.split(",")):
        n, heads = args.n, 2048 // d
        b = max(1, 16384 // n)
        q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=dtype) for _ in range(3))
        do = torch.randn_like(q)
        spec = KERNELS["fa2_wgmma"]
        o, lse = spec.forward(q, k, v, causal=False)
        run(f"fa2_wgmma_bwd N={n} d={d}", lambda: spec.backward(q, k, v, o, lse, do, causal=False))
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
            with sdpa_kernel(backend):
                out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv)

            def bwd(out=out, qq=qq):
                torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)
            run(f"{name}_bwd N={n} d={d}", bwd)


if __name__ == "__main__":
    raise SystemExit(main())
