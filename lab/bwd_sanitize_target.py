"""The teaching backwards (fa2, naive) on a few small shapes, for compute-sanitizer (lab/gpu_check_bwd.sh).

    compute-sanitizer --tool memcheck|racecheck python3 lab/bwd_sanitize_target.py [fa2,naive] [small]

Shapes with several Q blocks and key blocks, tails on both sides, Nq != Nk, causal with rows that see no
key, d below and above 64, each dtype. Prints one line per shape (max error of dq, dk, dv against float64
autograd) and exits 1 if any gradient is non-finite or off by more than 5e-2 (relative to its largest).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMES = ("fa2", "naive")  # the teaching backwards: FA2 Alg. 2 and the unfused FA1 Alg. 3
# `small` (second argument): racecheck within a minute; fa2 at d = 128 with the default 64 x 64 blocks and the
# cp.async prefetch (fp16), several Q and key blocks, tails, rows that see no key; v4's 32 x 32 beside it
SMALL = [(1, 1, 150, 100, 128, True, "float16", 64, 64),    # 3 x 2, 50 rows see no key
         (1, 1, 100, 70, 128, True, "float16", 32, 32),     # 4 x 3, 30 rows see no key
         (1, 1, 70, 100, 96, False, "bfloat16", 64, 64),    # 2 x 2, prefetch at 64 x 64
         (1, 1, 50, 40, 40, True, "float32", 32, 16)]       # 2 x 3, d_pad 64
# (B, H, Nq, Nk, d, causal, dtype, Br, Bc): Tr x Tc tiles
SHAPES = [(1, 2, 150, 200, 40, True, "float16", 64, 64),     # 3 x 4, tails
          (1, 1, 140, 37, 128, True, "float32", 32, 16),     # 5 x 3, 103 rows see no key
          (1, 1, 97, 150, 96, False, "bfloat16", 64, 64),    # 2 x 3 (fa2: the cp.async prefetch build)
          (1, 1, 200, 130, 128, True, "float16", 64, 64)]    # 4 x 3, prefetch, 70 rows see no key


def main() -> int:
    from bench import harness

    if harness.no_gpu("bwd_sanitize_target"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    import torch

    from kernels import KERNELS
    from variants.reference import causal_mask

    bad = 0
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(NAMES)
    shapes = SMALL if sys.argv[2:] == ["small"] else SHAPES
    for name, (b, h, n_q, n_k, d, causal, dt, br, bc) in ((nm, shape) for nm in names for shape in shapes):
        spec = KERNELS[name]
        dtype = getattr(torch, dt)
        g = torch.Generator(device="cuda").manual_seed(0)
        q, do = (torch.randn(b, h, n_q, d, generator=g, device="cuda").to(dtype) for _ in range(2))
        k, v = (torch.randn(b, h, n_k, d, generator=g, device="cuda").to(dtype) for _ in range(2))
        saved = {} if name == "naive" else None  # naive's backward reads the forward's P (FA1 Alg. 3)
        o, lse = spec.forward(q, k, v, causal=causal, block_q=br, block_k=bc,
                              **({"saved": saved} if saved is not None else {}))
        grads = spec.backward(q, k, v, o, lse, do, causal=causal, block_q=br, block_k=bc,
                              **({"P": saved["P"]} if saved is not None else {}))
        torch.cuda.synchronize()
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        s = (leaves[0] @ leaves[1].transpose(-1, -2)) / d ** 0.5
        if causal:
            s = s.masked_fill(~causal_mask(n_q, n_k, s.device), float("-inf"))
        m = s.amax(-1, keepdim=True).detach()
        e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        den = e.sum(-1, keepdim=True)
        ref = torch.autograd.grad((e / torch.where(den == 0, torch.ones_like(den), den)) @ leaves[2], leaves,
                                  do.double())
        errs = [float((x.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)) for x, r in zip(grads, ref)]
        ok = all(bool(torch.isfinite(x).all()) for x in grads) and max(errs) <= 5e-2
        bad += not ok
        print(f"{name} backward {dt} {(b, h, n_q, n_k, d)} causal={causal} Br={br} Bc={bc}: "
              f"rel err dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e} {'ok' if ok else 'BAD'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
