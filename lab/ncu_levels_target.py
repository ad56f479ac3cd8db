"""One launch of each kernel the GPU model's levels are checked on, for ncu (lab/ncu_levels.sh).

fa2_wgmma, fa2_tc, v_once_tc (f spilled, lazy; eager non-causal), SDPA flash and cuDNN; fp16; d = 64 and 128 at N = 4096
(B·N = 16k, H = 2048/d, as every bench) non-causal and causal, and d = 128 at N = 16384 for the L2
residency model. Each launch logs "target launched NAME n=.. d=.. b=.. h=.. causal=.. dtype=fp16", the
line gpumodel/measured.py matches to ncu's rows (in launch order).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOKENS, HIDDEN = 16384, 2048
SHAPES = [(4096, 64), (4096, 128), (16384, 128)]


def _overrides():
    """NCU_LEVELS_SHAPES="32768x128,65536x128" (N x d, B = max(1, 16k / N), H = 2048 / d) and
    NCU_LEVELS_KERNELS="fa2_tc,fa2_wgmma": another set for lab/ncu_l2_capacity.sh; unset: the defaults.
    NCU_LEVELS_CAUSAL=1: causal beside non-causal at every N (default: at N = 4096 only)."""
    import os

    shapes = [tuple(int(x) for x in s.split("x")) for s in os.environ.get("NCU_LEVELS_SHAPES", "").split(",") if s]
    import re

    # commas inside brackets or braces belong to a name: "v_once_tc[hbm,lazy],fa2_tc" is two kernels, and so is
    # 'fa2_tc{"BLOCK_N":32,"MIN_BLOCKS":2},fa2_tc' (a build by its config, the label gpumodel/measured.py parses)
    kernels = [k for k in re.split(r",(?![^\[]*\])(?![^{]*\})", os.environ.get("NCU_LEVELS_KERNELS", "")) if k]
    return shapes or SHAPES, kernels, os.environ.get("NCU_LEVELS_CAUSAL") == "1"


def main() -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import fa2_tc, fa2_wgmma, v_once_tc

    def sdpa(backend):
        def f(q, k, v, c):
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c)
        return f

    fns = {"fa2_wgmma": lambda q, k, v, c: fa2_wgmma.forward(q, k, v, causal=c),
           "fa2_tc": lambda q, k, v, c: fa2_tc.forward(q, k, v, causal=c),
           "v_once_tc[hbm,lazy]": lambda q, k, v, c: v_once_tc.forward(q, k, v, causal=c, placement="hbm",
                                                                       rescale="lazy"),
           # eager at N = 4096 only: its DRAM bytes (the per-step reuse-distance ramp) were never profiled
           "v_once_tc[hbm,eager]": lambda q, k, v, c: v_once_tc.forward(q, k, v, causal=c, placement="hbm",
                                                                        rescale="eager"),
           "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    shapes, only, causal_everywhere = _overrides()
    for name in only:  # a build by its config: fa2_tc{...} or fa2_wgmma{...}, the rest of the config the kernel's own
        kernel, brace, cfg = name.partition("{")
        if brace and kernel in ("fa2_tc", "fa2_wgmma"):
            mod = fa2_tc if kernel == "fa2_tc" else fa2_wgmma
            fns[name] = (lambda mod, config: lambda q, k, v, c: mod.forward(q, k, v, causal=c, config=config))(
                mod, json.loads(brace + cfg))
    if only:
        unknown = [k for k in only if k not in fns]
        if unknown:
            raise SystemExit(f"ncu_levels_target: unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(fns)} "
                             "or fa2_tc{...} / fa2_wgmma{...} with a JSON config")
        fns = {k: f for k, f in fns.items() if k in only}
    from bench import harness

    if harness.no_gpu("ncu_levels_target"):  # after the names: a misspelt kernel is named first
        return 2
    for n, d in shapes:
        b, h = max(1, TOKENS // n), HIDDEN // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        for causal in ((False, True) if n == 4096 or causal_everywhere else (False,)):
            for name, f in fns.items():
                if name == "v_once_tc[hbm,eager]" and causal:
                    continue  # non-causal carries the O(Tc^2) rescale in full
                if n > 4096 and name.startswith("v_once"):
                    continue  # 16k: the f scratch alone is 8.6 GB of traffic; 4k already measures it
                f(q, k, v, causal)  # one launch: ncu profiles the kernel, NVRTC compiles on the host before it
                torch.cuda.synchronize()
                print(f"target launched {name} n={n} d={d} b={b} h={h} causal={int(causal)} dtype=fp16",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
