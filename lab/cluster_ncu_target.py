"""One launch each of v_once_cluster and fa2_wgmma, for ncu (lab/gpu_check_cluster.sh, step ncu).

fp16, non-causal, B·N = 16k, H = 2048 / d: (N, d) = (4096, 64), (4096, 128), (8192, 128) -- clusters of 4, 4
and 8 CTAs. One warm-up call per kernel first (NVRTC load, tensor maps); ncu profiles the launches whose
names match --kernel-name. Issue 18's target read from it: the cluster kernel's DRAM bytes stay at the
compulsory Q, K, V read and O write (no f byte leaves the chip), against fa2_wgmma's in the same run.
Prints "target launched NAME n=.. d=.. b=.. h=.. causal=0 dtype=fp16 compulsory_bytes=.." per profiled launch.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHAPES = [(4096, 64), (4096, 128), (8192, 128)]
TOKENS, HIDDEN = 16384, 2048


def _overrides():
    """CLUSTER_NCU_SHAPES="16384x64,16384x128" (N x d) and CLUSTER_NCU_CONFIG='{"MAX_CLUSTER": 16}' (the cluster
    kernel's build: 16 CTAs for the rows an 8-CTA cluster cannot hold); unset: SHAPES and the default build."""
    import json
    import os

    shapes = [tuple(int(x) for x in s.split("x")) for s in os.environ.get("CLUSTER_NCU_SHAPES", "").split(",") if s]
    return shapes or SHAPES, json.loads(os.environ.get("CLUSTER_NCU_CONFIG") or "null")


def main() -> int:
    from bench import harness

    if harness.no_gpu("cluster_ncu_target"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    import torch

    from kernels import fa2_wgmma, v_once_cluster

    shapes, cfg = _overrides()
    fns = {"v_once_cluster": lambda q, k, v: v_once_cluster.forward(q, k, v, placement="cluster", config=cfg),
           "fa2_wgmma": lambda q, k, v: fa2_wgmma.forward(q, k, v)}
    for n, d in shapes:
        b, h = max(1, TOKENS // n), HIDDEN // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        for name, fn in fns.items():
            fn(q, k, v)  # warm: load, tensor maps (ncu profiles this one too: launch order is what counts)
            torch.cuda.synchronize()
            fn(q, k, v)
            torch.cuda.synchronize()
            plan = v_once_cluster.last_plan() if name == "v_once_cluster" else {}
            print(f"target launched {name} n={n} d={d} b={b} h={h} causal=0 dtype=fp16 "
                  f"compulsory_bytes={4 * b * h * n * d * 2} cluster_size={plan.get('cluster_size', '-')}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
