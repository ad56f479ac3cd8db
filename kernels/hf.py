"""kernels.attention as a Hugging Face transformers attention implementation (transformers >= 4.51, the first with
`from transformers import AttentionInterface`, huggingface/transformers#36889).

    from kernels import hf
    hf.register()                       # attn_implementation "workbench", kernel fa2_wgmma
    model = LlamaForCausalLM(config)    # config built with attn_implementation="workbench", or:
    model.config._attn_implementation = "workbench"

transformers calls fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs) with
query (B, H, N, d) and key, value (B, H_kv, N, d) -- usually views of (B, N, H, d) projections -- and expects
(attn_output (B, N, H, d), attention weights or None), as its sdpa_attention_forward returns. This adapter hands
query, key, value to kernels.attention as they come: grouped-query K/V are never repeated (the kernel reads kv
head h // (H / H_kv)), and strided views are read in place by a kernel that takes them.

What it takes, as transformers' SDPA path decides it: causal = is_causal (the kwarg, else module.is_causal, else
True) and more than one query; an attention mask of None, or one that is exactly the causal pattern (bottom-right:
the last query sees every key, as transformers' masks with a KV cache are) or all-visible. A padding mask, dropout
> 0, a sliding window, logit soft-capping or attention sinks are refused with a ValueError (kernels.attention has
none of them) rather than computed wrongly. register() also registers transformers' SDPA mask builder under the same
name where transformers has that interface (>= 4.53), so a causal batch with no padding reaches the adapter as
mask None and costs no mask check; older versions hand a 4-D mask, which is checked (one device sync per layer).

transformers is an optional extra (`pip install fa-workbench[hf]`): this module imports without it.
"""
from __future__ import annotations

from typing import Callable

EXTRA = 'pip install "fa-workbench[hf]"  (transformers >= 4.51)'
REFUSED_KWARGS = {"sliding_window": "a sliding window", "softcap": "logit soft-capping", "s_aux": "attention sinks"}


def _causal_pattern(mask, n_q: int, n_k: int):
    """True where query i sees key j under kernels.attention's bottom-right causal alignment."""
    import torch

    rows = torch.arange(n_q, device=mask.device).unsqueeze(-1) + (n_k - n_q)
    return torch.arange(n_k, device=mask.device) <= rows


def mask_to_causal(attention_mask, n_q: int, n_k: int, is_causal: bool) -> bool:
    """The causal flag a mask stands for, or a ValueError for a mask kernels.attention cannot express.

    None: is_causal. A 2-D (B, Nk) padding mask (1 = keep; what transformers hands an implementation it has no mask
    builder for): all ones means no padding, so is_causal. A 4-D (B or 1, 1 or H, Nq, Nk) mask, boolean (True =
    keep) or additive (0 = keep, a large negative = hidden): the causal pattern gives True, all-visible False."""
    if attention_mask is None:
        return is_causal
    import torch

    m = attention_mask
    if m.dim() == 2:
        if m.shape[-1] != n_k or not bool((m != 0).all()):
            raise ValueError("kernels.hf: a padding mask (some attention_mask entries 0) is not supported: "
                             "kernels.attention takes causal or full attention over whole sequences; use "
                             "attn_implementation='sdpa' for padded batches")
        return is_causal
    if m.dim() != 4 or tuple(m.shape[-2:]) != (n_q, n_k):
        raise ValueError(f"kernels.hf: attention_mask of shape {tuple(m.shape)} not understood; expected None, "
                         f"(B, {n_k}) or (B, 1, {n_q}, {n_k})")
    keep = m if m.dtype == torch.bool else m == 0
    if bool(keep.all()):
        return False
    if bool((keep == _causal_pattern(m, n_q, n_k)).all()):
        return True
    raise ValueError("kernels.hf: the attention mask is neither causal nor all-visible (padding or a custom "
                     "pattern); kernels.attention takes causal or full attention only: use attn_implementation="
                     "'sdpa' for such masks")


def make_attention(kernel: str = "fa2_wgmma", *, deterministic: bool = False) -> Callable:
    """The function transformers' AttentionInterface calls, running kernels.attention with `kernel`."""

    def workbench_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        from kernels.autograd import attention

        if dropout:
            raise ValueError(f"kernels.hf: dropout={dropout} is not supported (kernels.attention has no dropout); "
                             "set the model's attention_dropout to 0")
        for name, what in REFUSED_KWARGS.items():
            if kwargs.get(name) is not None:
                raise ValueError(f"kernels.hf: {what} ({name}={kwargs[name]!r}) is not supported by "
                                 "kernels.attention; use attn_implementation='sdpa' for this model")
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        n_q, n_k = query.shape[2], key.shape[2]
        # one query (decoding) sees every cached key, as in transformers' SDPA path
        causal = mask_to_causal(attention_mask, n_q, n_k, bool(is_causal) and n_q > 1)
        o = attention(query, key, value, causal=causal, scale=scaling, kernel=kernel, deterministic=deterministic)
        return o.transpose(1, 2).contiguous(), None  # (B, N, H, d), as sdpa_attention_forward returns it

    workbench_attention.kernel = kernel
    return workbench_attention


def register(name: str = "workbench", kernel: str = "fa2_wgmma", *, deterministic: bool = False) -> Callable:
    """Register kernels.attention (with `kernel`) as transformers' attention implementation `name`; returns the
    registered function. Then attn_implementation=name in a config, from_pretrained or from_config selects it."""
    try:
        from transformers import AttentionInterface
    except ImportError as e:
        raise ImportError(f"kernels.hf.register needs transformers >= 4.51 (AttentionInterface): {EXTRA}") from e
    from kernels.autograd import _info

    _info(kernel)  # an unknown kernel, or one without a backward, is named now rather than at the first step
    fn = make_attention(kernel, deterministic=deterministic)
    AttentionInterface.register(name, fn)
    try:  # transformers >= 4.53 builds masks per implementation: SDPA's gives None for plain causal batches
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:
        return fn
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return fn
