"""The registry of the PyTorch references: `Variant` and `VARIANTS`, the five algorithms every test and the CLI iterate
over (re-exported by the package, `from variants import VARIANTS`). Here, not in variants/__init__.py, so that the
package's own modules (variants/autograd.py) can import the registry from below the package that re-exports them."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

from counting import registry
from variants import fa1, fa2, naive, split_kv, v_once


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    source: str
    forward: Callable
    sram_bytes: Callable
    options: dict = field(default_factory=dict)  # option -> choices (first is the default)
    backward: Callable | None = None  # (q, k, v, o, lse, do, *, causal, scale, ...) -> (dq, dk, dv)
    valid: Callable | None = None  # valid(**options) -> bool: combinations that exist (None: all)

    def configs(self) -> list[dict]:
        """Every valid combination of this variant's options ([{}] when it has none)."""
        names = list(self.options)
        combos = [dict(zip(names, combo)) for combo in itertools.product(*self.options.values())]
        return [c for c in combos if self.valid is None or self.valid(**c)]

    def label(self, *, block_q=None, block_k=None, **options) -> str:
        """A name that says what ran: fa2_Br64_Bc64, v_once_hbm_lazy_Br64_Bc128."""
        parts = [self.name] + [str(options[o]) for o in self.options if o in options]
        if block_q is not None:
            parts.append(f"Br{block_q}")
        if block_k is not None:
            parts.append(f"Bc{block_k}")
        return "_".join(parts)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("naive", "standard attention (S, P in HBM)", "FlashAttention paper, Algorithm 0",
                naive.forward, naive.sram_bytes, backward=naive.backward),
        Variant("fa1", "FlashAttention-1 (K/V outer loop; O, l, m round-trip HBM)",
                "FlashAttention paper, Algorithm 1", fa1.forward, fa1.sram_bytes, backward=fa1.backward),
        Variant("fa2", "FlashAttention-2 (Q outer loop; O, l, m on chip)",
                "FlashAttention-2 paper, Algorithm 1", fa2.forward, fa2.sram_bytes, backward=fa2.backward),
        Variant("v_once", "multiply V once (f row, then one (f/l)V product)",
                "Dao-AILab/flash-attention issue #941", v_once.forward, v_once.sram_bytes,
                {"placement": v_once.PLACEMENTS, "rescale": v_once.RESCALES}, backward=v_once.backward,
                valid=v_once.valid),
        Variant("split_kv", "split-KV decoding (FlashDecoding: S chunks of the cache, partials merged by LSE)",
                "FlashDecoding (Dao et al. 2023); FA2 Algorithm 1 per chunk", split_kv.forward, split_kv.sram_bytes,
                backward=split_kv.backward),
    )
}


def register(variant: Variant, *, replace: bool = False) -> Variant:
    """Add a variant to VARIANTS: the equivalence, accounting and closed-form tests and the CLI
    iterate over the registry, so a registered variant is checked and reported with no other edit
    (docs/design.md, "How to add a variant"). Its closed form goes to counting.closed_forms.register."""
    return registry.add(VARIANTS, variant, Variant, replace=replace)


def unregister(name: str) -> Variant:
    """Remove a registered variant (the throwaway variant of tests/test_add_a_variant.py)."""
    return registry.remove(VARIANTS, name)
