"""A/B of the teaching fa2's v2 change (kernels/cuda/fa2.cu FA2_OWN_V: V_j in its own buffer), in one run.

    PYTHONPATH=. python bench/fa2_teaching_ab.py [--out DIR]

Both builds (FA2_OWN_V = 0, v1; = 1, v2; the launcher picks 1 at d <= 64 only) are checked against the
float64 reference (odd shapes, causal, Nq != Nk), then timed (bench.timing.time_cuda, rotated inputs,
fp16, batch*N = 16k, hidden 2048) at N = 4096, d = 64 (both builds) and d = 128 (the shipped one),
causal and not, beside the shipped launcher and the teaching naive. Writes fa2_teaching_ab.json.
(An earlier run of this script also toggled exp2f for expf: fa2_teaching_ab_v2a.json.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    import torch

    from analysis.headline import attention_flops
    from bench.timing import make_input_sets, time_cuda
    from kernels import KERNELS, _teaching, fa2, loader
    from variants import attention_reference

    def run(flags, q, k, v, causal):
        p = _teaching.prepare(q, k, v, causal=causal, scale=None, block_q=64, block_k=64)
        o = torch.full_like(q, float("nan"))
        lse = torch.full((p.batch, p.heads, p.n_q), float("nan"), device=q.device)
        fn = loader.get_function(fa2.SOURCE, fa2.KERNEL, defines=_teaching.defines(q.dtype, 64, 64, **flags))
        fn.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
                  (q, k, v, o, lse, p.n_q, p.n_k, p.d, p.scale, int(causal)), shared_mem=fa2.shared_bytes(p.d))
        return o, lse

    builds = {"v1 own_v=0": dict(FA2_OWN_V=0), "v2 own_v=1": dict(FA2_OWN_V=1)}
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for d in (40, 64):
        q = torch.randn(2, 3, 301, d, device="cuda", generator=gen).half()
        k, v = (torch.randn(2, 3, 250, d, device="cuda", generator=gen).half() for _ in range(2))
        ref_o, ref_lse = attention_reference(q, k, v, causal=True)
        for name, flags in builds.items():
            o, lse = run(flags, q, k, v, True)
            torch.cuda.synchronize()
            err = (o.double() - ref_o).abs().max().item()
            fin = torch.isfinite(ref_lse)
            lerr = (lse.double() - ref_lse)[fin].abs().max().item()
            if not (err < 2e-3 and lerr < 1e-3 and torch.equal(torch.isinf(lse), ~fin)):
                print(f"WRONG {name} d={d}: o err {err}, lse err {lerr}", file=sys.stderr)
                return 1
    for d in (64, 128):
        n = 4096
        b, h = 16384 // n, 2048 // d
        sets = make_input_sets((b, h, n, d), (b, h, n, d), torch.float16)
        for causal in (False, True):
            flops = attention_flops(b, h, n, n, d, causal)
            cands = {name: (lambda q, k, v, f=flags: run(f, q, k, v, causal)) for name, flags in builds.items()
                     if d <= 64 or not flags["FA2_OWN_V"]}
            cands["fa2 (shipped)"] = lambda q, k, v: KERNELS["fa2"].forward(q, k, v, causal=causal)
            cands["naive"] = lambda q, k, v: KERNELS["naive"].forward(q, k, v, causal=causal)
            for name, fn in cands.items():
                t = time_cuda(fn, sets, warmup=2, reps=9)
                rows.append(dict(build=name, n=n, d=d, causal=causal, **t,
                                 tflops=flops / (t["median_ms"] * 1e-3) / 1e12))
                print(f"d={d} causal={int(causal)} {name:18s} {t['median_ms']:8.2f} ms "
                      f"{rows[-1]['tflops']:6.2f} TFLOP/s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fa2_teaching_ab.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
