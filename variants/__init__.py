"""The four attention algorithms as PyTorch references, and the registry everything iterates over.

    from variants import VARIANTS
    for variant in VARIANTS.values():
        for options in variant.configs():
            o, lse = variant.forward(q, k, v, causal=True, **options)
"""
from __future__ import annotations

from variants.autograd import attention
from variants.reference import attention_reference
from variants.registry import VARIANTS, Variant, register, unregister

__all__ = ["VARIANTS", "Variant", "attention", "attention_reference", "register", "unregister"]
