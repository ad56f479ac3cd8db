"""The lab's handle on v4 of the Hopper backward (kernels/fa2_wgmma_bwd_ws.py, kernels/cuda/fa2_wgmma_bwd_ws.cu): the
shipped kernels.fa2_wgmma_bwd.backward runs it by default at d = 64 and 128 (issue 42); the A/Bs time it against v3.

    dq, dk, dv = backward(q, k, v, o, lse, do, causal=False, scale=None, config=None, out=None)

backward() is kernels.fa2_wgmma_bwd.backward(..., impl="ws"): v4 whatever the rule would pick, config= a dict of v4's
knobs (an ALTERNATIVES build, an order_config); v4 has no deterministic mode, so it takes no deterministic=. The kernel
module's names the lab scripts and tests read through this module (__all__: ARCH, CONFIGS, HEAD_DIMS, KERNEL, NWG,
SOURCE, defines_for, order_config, order_configs; lab/same_builds.py reads ARCH, KERNEL, SOURCE, compile_configs and
order_configs of this file in both trees) are re-exported. Lab-only here: ALTERNATIVES (other builds lab/bwd_ws_ab.py
times beside the default, compiled and held to the same checks), compile_configs() with them, and consumer_spills()
(the SASS split by role; it needs lab/spill_sites.py's nvdisasm).
"""
from __future__ import annotations

from kernels import fa2_wgmma_bwd, loader
from kernels.fa2_wgmma_bwd_ws import (ARCH, CONFIGS, HEAD_DIMS, KERNEL, NWG, SOURCE, defines_for, order_config,
                                      order_configs)

__all__ = ["ALTERNATIVES", "ARCH", "CONFIGS", "HEAD_DIMS", "KERNEL", "NWG", "SOURCE", "backward", "compile_configs",
           "consumer_spills", "defines_for", "order_config", "order_configs"]

ALTERNATIVES = {
    64: [dict(BR=128, STAGES=2, DS_BUFS=1, DQ_BUFS=2, MERGED=1), dict(BR=128, STAGES=2, DS_BUFS=2, DQ_BUFS=1, MERGED=1,
                                                                     L2_HINT=1)],
    128: [dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=1), dict(BR=64, STAGES=3, DS_BUFS=1, DQ_BUFS=1, MERGED=0),
          dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=0, L2_HINT=1)],
}


def backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
             out=None):
    """v4 forced: kernels.fa2_wgmma_bwd.backward(..., impl="ws"); returns (dq, dk, dv)."""
    return fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, scale=scale, config=config, out=out, impl="ws")


def compile_configs() -> list[tuple[str, str, dict]]:
    """Every v4 build the lab launches (the default and the ALTERNATIVES) and v3's pre and dq_bulk builds beside them,
    both dtypes: (source, kernel, defines)."""
    out = []
    for d in HEAD_DIMS:
        for bf16 in (0, 1):
            for cfg in [None, *ALTERNATIVES[d]]:
                out.append((str(SOURCE), KERNEL, defines_for(d, bf16, cfg)))
            companion = fa2_wgmma_bwd.ws_companion_defines(d, bool(bf16))  # v3's build: v4's pre and dq_bulk
            for k in (fa2_wgmma_bwd.KERNEL_PRE, fa2_wgmma_bwd.KERNEL_DQ_BULK):
                out.append((str(fa2_wgmma_bwd.SOURCE), k, companion))
    return out


def consumer_spills(defines: dict) -> dict:
    """Local-memory instructions of the main kernel by role, from its SASS (nvdisasm; no GPU): {'prologue',
    'consumer', 'producer'} -> (STL count, LDL count), and 'seen' -> the role markers found (a SASS without them would
    count everything as prologue). The roles are told apart by position: the consumers' code
    runs from their setmaxnreg.inc (USETMAXREG.TRY_ALLOC) and the producer's from its setmaxnreg.dec
    (USETMAXREG.DEALLOC), whichever comes first in the binary ending where the other begins."""
    import subprocess
    import tempfile

    from lab.spill_sites import nvdisasm

    cubin = loader.compile_cubin(SOURCE, defines=defines, arch=ARCH)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([nvdisasm(), "-c", str(f.name)], capture_output=True, text=True, check=True).stdout
    role, out = "prologue", {r: [0, 0] for r in ("prologue", "consumer", "producer")}
    seen = set()
    for line in sass.splitlines():
        if "USETMAXREG.TRY_ALLOC" in line:
            role = "consumer"
            seen.add(role)
        elif "USETMAXREG.DEALLOC" in line:
            role = "producer"
            seen.add(role)
        elif " STL" in line:
            out[role][0] += 1
        elif " LDL" in line:
            out[role][1] += 1
    return {**{r: tuple(v) for r, v in out.items()}, "seen": frozenset(seen)}
