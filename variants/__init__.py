"""The five attention algorithms (split_kv: decoding over a KV cache) as PyTorch references, and the registry everything iterates over.

    from variants import VARIANTS
    for variant in VARIANTS.values():
        for options in variant.configs():
            o, lse = variant.forward(q, k, v, causal=True, **options)
"""
from __future__ import annotations

from variants.autograd import attention
from variants.reference import attention_reference, decode_reference
from variants.registry import VARIANTS, Variant, register, unregister

__all__ = ["VARIANTS", "Variant", "attention", "attention_reference", "decode_reference", "register", "unregister"]
