"""CUDA kernels for the four variants, and the registry everything iterates over.

    from kernels import KERNELS
    for spec in KERNELS.values():             # parallel to variants.VARIANTS
        for options in spec.configs():
            o, lse = spec.forward(q, k, v, causal=True, **options)   # CUDA tensors in and out

Importing this package needs no GPU (nor CuPy's GPU runtime): a spec imports its launcher module
`kernels.<name>` only when `.forward` or `.compile_configs()` is first used.

The contract of a launcher module kernels/<name>.py; what follows scale differs by tier (docs/design.md,
"The signatures"):
    forward(q, k, v, *, causal=False, scale=None, **options) -> (o, lse)
        teaching:    block_q=64, block_k=64, mem=None (mem only None: a kernel counts nothing)
        tensor-core: config=None (a build's knobs; None: the default build for the shape), out=None ((o, lse) to fill)
        v_once's add placement, rescale (v_once_cluster: placement only)
    backward(q, k, v, o, lse, do, *, causal=False, scale=None, **options) -> (dq, dk, dv)   (optional)
    compile_configs() -> [(source, kernel_name, defines), ...]   every configuration CI compiles
    DTYPES          the torch dtypes it takes (optional; default by tier, see KernelSpec.dtypes)
    MAX_HEAD_DIM    largest d (optional: HEAD_DIMS, the exact set of d it takes)
    OPTIONS         option -> choices, first the default (optional; as variants.Variant.options)
    BENCH_OPTIONS   the option dicts bench/bench_kernels.py times (optional; default ({},))
    ARCH            the arch its cubins need (optional; default: the GPU's sm_XY, e.g. "sm_90a" for wgmma)
    supported()     whether the current GPU runs it (optional; default True)
    MAX_SPILL_BYTES the spill/stack bytes per thread a configuration may have (optional; default 0: the
                    compile test asserts no spills; a tuned kernel that trades a few spilled
                    registers for 2 CTAs/SM states its measured budget so growth still fails)
Kernels compile and load through kernels/loader.py (one place for the compile options).
"""
from __future__ import annotations

from kernels.registry import KERNELS, TIERS, KernelSpec


def __getattr__(name):
    """kernels.attention (differentiable, kernels/autograd.py) imports torch.library only when used."""
    if name == "attention":
        from kernels.autograd import attention

        return attention
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")


__all__ = ["KERNELS", "KernelSpec", "TIERS", "attention"]
