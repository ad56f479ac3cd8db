"""One launch each of fa2_wgmma (forward()'s default build) and SDPA's cuDNN backend on the cells of issue 14's
moonshot and its worst gap, for ncu (lab/ncu_moonshot.sh): fp16, batch*N = 16k, hidden 2048.

    d = 128 causal N = 4096 (FA3: 690 TFLOP/s), d = 128 and d = 256 non-causal N = 16384 (650 / 750),
    d = 64 non-causal N = 512 (the largest gap to cuDNN).
Environment: MOONSHOT_CELLS="512x128x0,512x128x1" (N x d x causal) replaces the cells; MOONSHOT_BUILDS, a JSON
{"label": config, ...} of fa2_wgmma builds profiled beside the default (e.g. the persistent scheduler at short N).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CELLS = [(4096, 128, True), (16384, 128, False), (16384, 256, False), (512, 64, False)]


def main() -> int:
    from bench import harness

    if harness.no_gpu("ncu_moonshot_target"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import fa2_wgmma

    def cudnn(q, k, v, c):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c)

    fns = {"fa2_wgmma": lambda q, k, v, c: fa2_wgmma.forward(q, k, v, causal=c), "sdpa_cudnn": cudnn}
    for label, cfg in json.loads(os.environ.get("MOONSHOT_BUILDS", "{}")).items():
        fns[f"fa2_wgmma[{label}]"] = lambda q, k, v, c, cfg=cfg: fa2_wgmma.forward(q, k, v, causal=c, config=cfg)
    cells = CELLS
    if os.environ.get("MOONSHOT_CELLS"):
        cells = [(int(n), int(d), bool(int(c))) for n, d, c in
                 (x.split("x") for x in os.environ["MOONSHOT_CELLS"].split(","))]
    for n, d, causal in cells:
        b, h = max(1, 16384 // n), 2048 // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        for name, f in fns.items():
            f(q, k, v, causal)  # NVRTC compiles on the host before the launch ncu profiles
            torch.cuda.synchronize()
            print(f"target launched {name} n={n} d={d} b={b} h={h} causal={int(causal)} dtype=fp16", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
