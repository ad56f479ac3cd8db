"""The Hopper backward (kernels.fa2_wgmma_bwd) on small shapes that wrap every loop, for compute-sanitizer
(issue 42 item 4; lab/visits/sanitize_new.sh).

    compute-sanitizer --tool memcheck|racecheck|synccheck python3 lab/bwd_wgmma_sanitize_target.py [small]

Each shape has several Q blocks per head and several key blocks, tails on both sides (Nq % Br, Nk % Bc != 0),
Nq != Nk, and enough steps per key-block CTA (G query heads x its Q blocks, fa2_wgmma_bwd.cu's TG) that the
Q/dO ring's STAGES slots are each refilled several times; causal shapes with Nq > Nk have rows that see no key.
Together they cover group sizes 1, 2, 4, 8 (MQA: H_kv = 1), (B, N, H, d).transpose(1, 2) views, every d (64, 96 on
the 128 tiles, 128, 256 in three passes), fp16 and bf16, deterministic on and off (d = 256 deterministic is the
float32 torch route: no kernel, checked all the same). Blocks of the default builds (fa2_wgmma_bwd.CONFIGS):
d = 64 Br = Bc = 128, STAGES 2; d = 96, 128 Br = 64, Bc = 128, STAGES 3; d = 256 Br = Bc = 64, STAGES 2.

o and lse come from float64 torch (not the forward kernel: the sanitizer sees the backward's launches alone); the
backward runs inside bench.harness.Poisoned (its gradients and scratch start as NaN) with the launcher's own
allocation, whose strides must be the inputs'; deterministic shapes run twice and must agree bit for bit. The
oracle is float64 autograd with K/V repeat_interleave'd (dK, dV summed over each group by autograd). A marker
line (bench.sanitize.MARK) before each shape puts each sanitizer report in its shape's section. Prints one line
per shape and exits 1 on a non-finite or wrong gradient (norm-relative error over TOL), 2 without a GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (B, H, H_kv, Nq, Nk, d, causal, dtype, layout, deterministic); layout "bnhd": (B, N, H, d).transpose(1, 2).
# Comments: Tr x Tc tiles, the steps of key block 0's CTA (G * its Q blocks) over the ring's STAGES slots (tiling()).
SHAPES = [
    (1, 2, 2, 700, 600, 64, True, "float16", "bhnd", False),      # 6 x 5, 6 steps / 2 slots, 100 rows see no key
    (1, 1, 1, 800, 700, 64, False, "bfloat16", "bnhd", True),     # 7 x 6, 7 steps / 2, dQ semaphore over 6 blocks
    (1, 16, 2, 300, 290, 64, True, "float16", "bnhd", True),      # G = 8: 3 x 3, 24 steps / 2, 10 rows see no key
    (2, 4, 2, 300, 500, 128, True, "float16", "bnhd", False),     # G = 2: 5 x 4, 10 steps / 3
    (1, 8, 1, 200, 333, 128, False, "bfloat16", "bhnd", True),    # MQA, G = 8: 4 x 3, 32 steps / 3
    (1, 1, 1, 650, 400, 128, False, "float16", "bhnd", False),    # 11 x 4, 11 steps / 3
    (1, 2, 1, 400, 300, 128, True, "bfloat16", "bhnd", True),     # G = 2: 7 x 3, 12 steps / 3, 100 rows see no key
    (1, 2, 2, 600, 540, 96, True, "float16", "bhnd", False),      # D_REAL = 96: 10 x 5, 10 steps / 3, 60 rows no key
    (2, 4, 1, 260, 400, 96, False, "bfloat16", "bnhd", True),     # MQA, G = 4: 5 x 4, 20 steps / 3
    (1, 2, 2, 400, 350, 256, True, "bfloat16", "bhnd", False),    # three passes: 7 x 6, 7 steps / 2, 50 rows no key
    (1, 4, 2, 150, 260, 256, False, "float16", "bnhd", False),    # G = 2: 3 x 5, 6 steps / 2
    (1, 8, 1, 130, 200, 256, True, "float16", "bhnd", True),      # MQA, deterministic: the float32 torch route
]
# `small` (racecheck within a minute): one shape per kernel tile shape, the semaphore and GQA among them
SMALL = [
    (1, 4, 2, 300, 290, 64, True, "float16", "bnhd", True),       # G = 2: 3 x 3, 6 steps / 2, 10 rows see no key
    (1, 4, 2, 200, 270, 128, False, "bfloat16", "bhnd", False),   # G = 2: 4 x 3, 8 steps / 3
    (1, 2, 1, 150, 140, 96, True, "float16", "bnhd", True),       # G = 2: 3 x 2, 6 steps / 3, 10 rows see no key
    (1, 4, 2, 150, 140, 256, False, "bfloat16", "bhnd", False),   # G = 2, three passes: 3 x 3, 6 steps / 2
]
DEVICE = "cuda"  # the tests run the glue on "cpu" with the launch replaced by the oracle
TOL = {"float16": 1e-2, "bfloat16": 4e-2}  # norm-relative, float64 oracle; fp16/bf16 round O, P and dS


def tiling(shape) -> dict:
    """The default build's tiles for a shape (fa2_wgmma_bwd.defines_for): Tr, Tc, the ring's STAGES and the steps
    of key block 0's CTA (fa2_wgmma_bwd.cu: TG = G * its Q blocks, from i_first, the first that sees the block)."""
    from kernels import fa2_wgmma_bwd

    b, h, h_kv, n_q, n_k, d, causal, dt, layout, det = shape
    defs = fa2_wgmma_bwd.defines_for(d, dt == "bfloat16", pass_=0) if d == 256 else \
        fa2_wgmma_bwd.defines_for(d, dt == "bfloat16", deterministic=det)
    br, bc = defs["BR"], fa2_wgmma_bwd.block_n(defs)
    t_r = -(-n_q // br)
    i_first = max(0, n_q - n_k) // br if causal else 0  # key block 0: n0 = 0, causal_off = Nk - Nq
    return dict(Br=br, Bc=bc, Tr=t_r, Tc=-(-n_k // bc), stages=defs["STAGES"], steps=(h // h_kv) * (t_r - i_first))


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make(b, heads, n, d, dtype, layout, gen):
    import torch

    if layout == "bnhd":  # a (B, N, H, d) tensor seen as (B, H, N, d): strides (N H d, d, H d, 1)
        return torch.randn(b, n, heads, d, generator=gen, device=DEVICE).to(dtype).transpose(1, 2)
    return torch.randn(b, heads, n, d, generator=gen, device=DEVICE).to(dtype)


def reference(q, k, v, do, causal):
    """float64: o, lse (natural log, -inf where a row sees no key) and autograd's (dq, dk, dv), K/V
    repeat_interleave'd inside the graph so dK, dV come back summed over each group."""
    import torch

    from variants.reference import causal_mask

    rep = q.shape[1] // k.shape[1]
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(rep, 1) for t in leaves[1:])
    s = (leaves[0] @ kk.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], s.device), float("-inf"))
    # the max detached and a row with no key divided by 1, not 0 (logsumexp's own backward is NaN on such a row)
    m = s.amax(-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    den = e.sum(-1, keepdim=True)
    o = (e / torch.where(den == 0, torch.ones_like(den), den)) @ vv
    grads = torch.autograd.grad(o, leaves, do.double())
    return o.detach(), torch.logsumexp(s.detach(), -1), grads


def run_shape(shape) -> bool:
    import torch

    from bench.harness import Poisoned
    from kernels import fa2_wgmma_bwd

    b, h, h_kv, n_q, n_k, d, causal, dt, layout, det = shape
    dtype = getattr(torch, dt)
    gen = torch.Generator(device=DEVICE).manual_seed(n_q + n_k + d)
    q, do = (make(b, h, n_q, d, dtype, layout, gen) for _ in range(2))
    k, v = (make(b, h_kv, n_k, d, dtype, layout, gen) for _ in range(2))
    o64, lse64, ref = reference(q, k, v, do, causal)
    o = torch.empty_like(q).copy_(o64)  # in q's layout (empty_like keeps a dense view's strides)
    lse = lse64.float().contiguous()
    runs = []
    for _ in range(2 if det else 1):
        with Poisoned():  # gradients and the launcher's scratch (L2, D, dQ accumulator) start as NaN
            runs.append(fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, deterministic=det))
        sync()
    grads = runs[0]
    errs = [float((g.double() - r).norm() / r.norm().clamp_min(1e-30)) for g, r in zip(grads, ref)]
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    layout_ok = all(g.stride() == t.stride() for g, t in zip(grads, (q, k, v)))
    same = all(torch.equal(x, y) for x, y in zip(runs[0], runs[-1]))
    empty_ok = not (causal and n_q > n_k) or bool((grads[0][:, :, : n_q - n_k] == 0).all())  # rows with no key
    ok = finite and layout_ok and same and empty_ok and max(errs) <= TOL[dt]
    notes = "".join([" NON-FINITE" * (not finite), " STRIDES" * (not layout_ok), " RUNS-DIFFER" * (not same),
                     " DQ-NOT-0" * (not empty_ok)])
    print(f"fa2_wgmma backward {dt} {(b, h, n_q, n_k, d)} H_kv={h_kv} {layout} causal={causal} "
          f"deterministic={det}: norm-rel err dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e}"
          f"{notes} {'ok' if ok else 'BAD'}", flush=True)
    return ok


def label(shape) -> str:
    b, h, h_kv, n_q, n_k, d, causal, dt, layout, det = shape
    return f"fa2_wgmma_bwd {dt} {(b, h, n_q, n_k, d)} H_kv={h_kv} {layout} causal={causal} det={det}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["small"]):
        print(f"usage: bwd_wgmma_sanitize_target.py [small]; got {argv}", file=sys.stderr)
        return 2
    from bench import harness

    if harness.no_gpu("bwd_wgmma_sanitize_target"):  # one line and exit 2, not the first CUDA call's traceback
        return 2
    import torch

    from bench.sanitize import MARK

    if torch.cuda.get_device_capability()[0] != 9:
        print("bwd_wgmma_sanitize_target: the fa2_wgmma backward needs a compute capability 9.x GPU",
              file=sys.stderr)
        return 2
    bad = 0
    for shape in SMALL if argv == ["small"] else SHAPES:
        print(MARK + label(shape), flush=True)
        try:
            bad += not run_shape(shape)
        except Exception as exc:  # a launch error: report it, run the other shapes
            bad += 1
            print(f"@@FAILED {label(shape)}: {type(exc).__name__}: {exc}"[:400], flush=True)
    print("@@DONE", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
