"""`attention(q, k, v, variant=...)`: any reference as a differentiable PyTorch op.

The autograd Function's forward runs the variant's forward and saves what that variant's backward
reads - the memory the choice of algorithm costs between the two passes:
    naive         P (Nq x Nk, input dtype)         Algorithm 3 reads it back
    fa1           O, ℓ, m (O is the output)        Algorithm 4 rebuilds P from ℓ and m
    fa2, v_once   O, L = lse (Nq floats)           Algorithm 2 rebuilds P from L
(plus q, k, v, the inputs every variant needs). Its backward calls the variant's `backward`.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from variants.registry import VARIANTS


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, name, causal, scale, options):
        saved = {}
        kwargs = dict(causal=causal, scale=scale, **options)
        if name in ("naive", "fa1"):
            kwargs["saved"] = saved
        o, lse = VARIANTS[name].forward(q, k, v, **kwargs)
        if name == "naive":
            ctx.save_for_backward(q, k, v, saved["P"])
        elif name == "fa1":
            ctx.save_for_backward(q, k, v, o, saved["l"], saved["m"])
        else:
            ctx.save_for_backward(q, k, v, o, lse)
        ctx.name, ctx.kwargs = name, dict(causal=causal, scale=scale, **options)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        backward, do = VARIANTS[ctx.name].backward, do.contiguous()
        if ctx.name == "naive":
            q, k, v, P = ctx.saved_tensors
            grads = backward(q, k, v, None, None, do, P=P, **ctx.kwargs)
        elif ctx.name == "fa1":
            q, k, v, o, l, m = ctx.saved_tensors  # noqa: E741
            grads = backward(q, k, v, o, None, do, l=l, m=m, **ctx.kwargs)
        else:
            q, k, v, o, lse = ctx.saved_tensors
            grads = backward(q, k, v, o, lse, do, **ctx.kwargs)
        return (*grads, None, None, None, None)


def attention(q, k, v, *, variant="fa2", causal=False, scale=None, **options):
    """o = softmax(scale·q kᵀ) v for (B, H, N, d) tensors, by `variant`, differentiable.

    options: block_q, block_k, and the variant's own (v_once: placement, rescale). Bad input raises
    the forward's one-line error before anything is saved."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    for bad in ("mem", "saved"):
        if bad in options:
            raise TypeError(f"attention() does not take {bad}=: call VARIANTS[{variant!r}].forward")
    return _Attention.apply(q, k, v, variant, causal, scale, options)
