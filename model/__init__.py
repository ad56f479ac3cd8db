"""A tiny byte-level GPT whose attention is pluggable: any `attention(q, k, v, causal=True) -> o` on
(B, H, N, d) tensors, e.g. `variants.attention(..., variant="fa2")` or `sdpa_attention`."""
from model.gpt import GPT, GPTConfig, sdpa_attention

__all__ = ["GPT", "GPTConfig", "sdpa_attention"]
