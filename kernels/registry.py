"""The registry of the CUDA kernels: `KernelSpec` and `KERNELS`, parallel to variants.VARIANTS (re-exported by the
package, `from kernels import KERNELS`; the launcher contract is in kernels/__init__.py's docstring). Here, not in the
package's __init__, so that the package's own modules (kernels/autograd.py) import the registry from below the package
that re-exports them. Torch-free: a spec imports its launcher module only when first used."""
from __future__ import annotations

import importlib
import importlib.util
import itertools
from dataclasses import dataclass
from typing import Callable

TIERS = ("teaching", "tensor-core")
LAYOUTS = ("gqa", "strided")  # KernelSpec.layouts: what a launcher takes beyond contiguous, equal-head q, k, v


@dataclass(frozen=True)
class KernelSpec:
    name: str  # also the launcher module kernels.<name>
    tier: str  # "teaching" | "tensor-core"
    variant: str  # the variants.VARIANTS entry it mirrors and is checked against
    title: str
    # What both the launcher's forward and its backward take (kernels.attention passes it through, no copy):
    # "gqa": k, v (B, H_kv, Nk, d) with H_kv dividing H (grouped- and multi-query attention);
    # "strided": views with any strides and a unit last one (a (B, N, H, d) tensor's .transpose(1, 2)), the
    # backward's dq, dk, dv (and its do) in the caller's layout. Without "strided", inputs must be contiguous.
    layouts: tuple = ()
    decode: bool = False  # a decode kernel (q of 1..64 rows against a KV cache: cache_seqlens, block_table, num_splits;
    # kernels/_decode.py): the training-shape loops (tests, bench.harness, the GPU model) skip it

    def __post_init__(self):
        unknown = set(self.layouts) - set(LAYOUTS)
        if unknown:
            raise ValueError(f"{self.name}: layouts {sorted(unknown)} unknown; known: {LAYOUTS}")

    @property
    def module(self):
        return importlib.import_module(f"kernels.{self.name}")

    @property
    def forward(self) -> Callable:
        return self.module.forward

    @property
    def backward(self) -> Callable | None:
        """backward(q, k, v, o, lse, do, *, causal, scale, ...) -> (dq, dk, dv); None without one."""
        return getattr(self.module, "backward", None)

    def compile_configs(self) -> list[tuple[str, str, dict]]:
        return list(self.module.compile_configs())

    @property
    def dtypes(self) -> tuple:
        """The launcher's DTYPES; without one, fp32/fp16/bf16 (teaching) or fp16/bf16 (tensor-core)."""
        import torch

        default = ((torch.float32, torch.float16, torch.bfloat16) if self.tier == "teaching"
                   else (torch.float16, torch.bfloat16))
        return tuple(getattr(self.module, "DTYPES", default))

    @property
    def max_head_dim(self) -> int:
        return int(getattr(self.module, "MAX_HEAD_DIM", 128))

    @property
    def head_dims(self):
        return getattr(self.module, "HEAD_DIMS", None)

    @property
    def options(self) -> dict:
        return dict(getattr(self.module, "OPTIONS", {}))

    @property
    def bench_options(self) -> tuple:
        return tuple(getattr(self.module, "BENCH_OPTIONS", ({},)))

    @property
    def arch(self):
        """The arch its cubins need (None: any, the loader picks the GPU's)."""
        return getattr(self.module, "ARCH", None)

    def available(self) -> bool:
        """Whether this GPU runs it (fa2_wgmma needs compute capability 9.x)."""
        fn = getattr(self.module, "supported", None)
        return True if fn is None else bool(fn())

    @property
    def max_spill_bytes(self) -> int:
        return int(getattr(self.module, "MAX_SPILL_BYTES", 0))

    def supports_head_dim(self, d: int) -> bool:
        return d <= self.max_head_dim and (self.head_dims is None or d in self.head_dims)

    def configs(self) -> list[dict]:
        """Every combination of the launcher's options ([{}] when it has none)."""
        names = list(self.options)
        return [dict(zip(names, combo)) for combo in itertools.product(*self.options.values())]

    def label(self, **options) -> str:
        """fa2, v_once_auto_lazy: the name plus the option values, in OPTIONS order."""
        return "_".join([self.name] + [str(options[o]) for o in self.options if o in options])


_ALL = (
    KernelSpec("naive", "teaching", "naive", "standard attention: S, P in HBM (three kernels)"),
    KernelSpec("fa1", "teaching", "fa1", "FlashAttention-1: one block per (b, h), O/l/m round-trip HBM"),
    KernelSpec("fa2", "teaching", "fa2", "FlashAttention-2: one block per (Q block, b, h)", layouts=("gqa",)),
    KernelSpec("v_once", "teaching", "v_once", "multiply V once: f row in SRAM or HBM"),
    KernelSpec("fa2_tc", "tensor-core", "fa2", "FlashAttention-2 with mma.sync (m16n8k16) tensor cores"),
    KernelSpec("fa2_wgmma", "tensor-core", "fa2", "FlashAttention-2 with Hopper wgmma (sm_90a)",
               layouts=("gqa", "strided")),
    KernelSpec("v_once_tc", "tensor-core", "v_once", "multiply V once with tensor cores"),
    KernelSpec("v_once_cluster", "tensor-core", "v_once",
               "multiply V once, the f row on chip across a thread-block cluster (wgmma, DSMEM; sm_90a)"),
    KernelSpec("split_kv", "teaching", "split_kv", "split-KV decoding (Flash-Decoding): GQA-packed rows, fp32 merge",
               decode=True),
    KernelSpec("split_kv_fast", "tensor-core", "split_kv",
               "split-KV decoding with mma.sync, a cp.async ring and a fused last-CTA merge", decode=True),
)


def _present(spec: KernelSpec) -> bool:
    """A launcher module that does not exist yet (a tier still being written) is not registered."""
    return importlib.util.find_spec(f"kernels.{spec.name}") is not None


KERNELS: dict[str, KernelSpec] = {s.name: s for s in _ALL if _present(s)}
DECODE_KERNELS = tuple(n for n, s in KERNELS.items() if s.decode)  # ("split_kv", "split_kv_fast")
