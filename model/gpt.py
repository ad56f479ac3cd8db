"""A pre-LayerNorm decoder-only transformer (GPT-2 shape) with a pluggable attention function.

    model = GPT(GPTConfig(n_layer=2, d_model=64, n_head=4, ctx=64), attention=sdpa_attention)
    logits, loss = model(idx, targets)          # idx, targets: (B, N) int64 byte ids

`attention(q, k, v, causal=True) -> o` receives q, k, v as (B, H, N, d) - the workbench's one layout -
and returns o in the same layout; the model never looks inside it, so two attentions that agree on
o and its gradients train the same model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    vocab: int = 256  # bytes
    n_layer: int = 6
    n_head: int = 8
    d_model: int = 512
    ctx: int = 1024  # the longest sequence (positions are learned)
    dropout: float = 0.0

    def __post_init__(self):
        for name in ("vocab", "n_layer", "n_head", "d_model", "ctx"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")


def sdpa_attention(q, k, v, causal=True):
    """PyTorch's fused attention, (B, H, N, d) in and out (the oracle the references train against)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, attention: Callable):
        super().__init__()
        self.n_head, self.attention = cfg.n_head, attention
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        # (B, N, C) -> (B, H, N, d): the layout every attention in the workbench takes
        q, k, v = (t.view(b, n, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v))
        o = self.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
        x = x + self.drop(self.proj(o.transpose(1, 2).reshape(b, n, c)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, attention: Callable = sdpa_attention, *,
                 tie_embeddings: bool = True):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab, config.d_model)
        self.pos = nn.Embedding(config.ctx, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, attention) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab, bias=False)
        self.apply(self._init)
        if tie_embeddings:  # one matrix maps bytes to vectors and back (GPT-2)
            self.head.weight = self.tok.weight

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype.is_floating_point or idx.is_complex():
            what = f"shape {tuple(idx.shape)}, {idx.dtype}" if isinstance(idx, torch.Tensor) else type(idx).__name__
            raise ValueError(f"idx must be token ids, an integer tensor (B, N); got {what}")
        b, n = idx.shape
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.config.vocab):
            # checked here: on a GPU an id out of range is a device-side assert that ends the process
            raise ValueError(f"token ids must be in [0, {self.config.vocab}), got {int(idx.min())}..{int(idx.max())}")
        if n > self.config.ctx:
            raise ValueError(f"sequence of {n} tokens is longer than ctx={self.config.ctx}")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(n, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss
