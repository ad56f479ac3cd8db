"""The lab's v4 backward (lab/bwd_ws.py) on small shapes that wrap every ring, for compute-sanitizer.

    compute-sanitizer --tool memcheck|racecheck|synccheck python3 lab/bwd_ws_sanitize_target.py [small|tiny]

Each shape has several Q blocks and key blocks, tails on both sides, Nq != Nk, and enough steps per key-block CTA
(G query heads x its Q blocks) that the Q/dO ring's slots and the dS^T and dQ buffers are each reused several times;
causal shapes with Nq > Nk have rows that see no key. Group sizes 1, 2, 4, 8, (B, N, H, d).transpose(1, 2) views,
d = 64 and 128, fp16 and bf16, every build of lab/bwd_ws.py (default and ALTERNATIVES). o and lse come from the
fa2_wgmma forward; the gradients are poisoned (NaN) before the launch; the oracle is lab/bwd_ws_ab.py's float64
reference. A marker line (bench.sanitize.MARK) before each shape puts each sanitizer report in its shape's
section. Prints one line per shape; exit 1 on a non-finite or wrong gradient, 2 without a GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (B, H, H_kv, Nq, Nk, d, causal, dtype, strided)
SHAPES = [
    (1, 2, 2, 700, 600, 64, True, "fp16", False),     # 6 x 5 blocks, 6 steps over 2 slots, 100 rows see no key
    (1, 16, 2, 300, 290, 64, True, "bf16", True),     # G = 8: 24 steps, 10 rows see no key
    (2, 4, 2, 300, 500, 128, True, "fp16", True),     # G = 2: 10 steps
    (1, 8, 1, 200, 333, 128, False, "bf16", False),   # MQA, G = 8: 32 steps
    (1, 4, 1, 400, 300, 128, True, "bf16", False),    # G = 4: 28 steps, 100 rows see no key
]
SMALL = [SHAPES[1], SHAPES[2]]
TINY = [SHAPES[0], SHAPES[2]]  # racecheck within two minutes: d = 64 and 128, default builds only


def run_shape(shape, cfg) -> bool:
    import torch

    from bench.sanitize import MARK
    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from lab import bwd_ws, bwd_ws_ab
    from variants.reference import fp32_ds_floor

    b, h, h_kv, n_q, n_k, d, causal, dt, strided = shape
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    label = f"v4 {dt} {(b, h, n_q, n_k, d)} H_kv={h_kv} strided={int(strided)} causal={int(causal)} {cfg or 'default'}"
    print(MARK + label, flush=True)
    q, k, v, do = bwd_ws_ab.inputs(b, h, h_kv, n_q, n_k, d, dtype, 2.0, n_q + d, strided)
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    grads = tuple(fa2_wgmma_bwd._empty_like_layout(t).fill_(float("nan")) for t in (q, k, v))
    bwd_ws.backward(q, k, v, o, lse, do, causal=causal, config=cfg, out=grads)
    torch.cuda.synchronize()
    exact, rounded = bwd_ws_ab.reference(q, k, v, do, causal), bwd_ws_ab.reference(q, k, v, do, causal, dtype)
    ds_floor = (*fp32_ds_floor(q, k, v, do, causal=causal), 0.0)
    checks = [bwd_ws_ab.check_grad(g, ref, base, ds, dt) for g, ref, base, ds in zip(grads, exact, rounded, ds_floor)]
    ok, errs = all(c["ok"] for c in checks), [c["rel"] for c in checks]
    if causal and n_q > n_k:
        ok = ok and bool((grads[0][:, :, : n_q - n_k] == 0).all())
    print(f"{label}: norm-rel err dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e} {'ok' if ok else 'BAD'}",
          flush=True)
    return ok


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("needs a compute capability 9.x GPU", file=sys.stderr)
        return 2
    from lab import bwd_ws

    shapes = {"small": SMALL, "tiny": TINY}.get(argv[0] if argv else "", SHAPES)
    configs = (lambda d: [None]) if argv[:1] == ["tiny"] else (lambda d: [None, *bwd_ws.ALTERNATIVES[d]])
    results = [run_shape(s, cfg) for s in shapes for cfg in configs(s[5])]
    print(f"{sum(results)} of {len(results)} shapes ok", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
