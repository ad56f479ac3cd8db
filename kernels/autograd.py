"""kernels.attention: the workbench's CUDA kernels as one differentiable PyTorch op.

    o = kernels.attention(q, k, v, causal=True)                  # fa2_wgmma forward and backward
    o = kernels.attention(q, k, v, causal=True, kernel="fa2")    # the teaching tier (fp32/fp16/bf16)
    o = kernels.attention(q, k, v)      # k, v (B, H_kv, Nk, d): grouped-/multi-query, no K/V repeated
    o = kernels.attention(x_q.transpose(1, 2), ...)   # (B, N, H, d) views read in place where the kernel can

Two torch.library custom ops, so torch.compile traces a model that uses them without a graph break
(each has a fake implementation that only computes shapes and strides) and torch.library.opcheck can test them:
    fa_workbench::attention_fwd(q, k, v, causal, scale, kernel, deterministic) -> (o, lse)
    fa_workbench::attention_bwd(q, k, v, o, lse, do, causal, scale, kernel, deterministic) -> (dq, dk, dv)
The forward saves q, k, v, o and lse (B, H, Nq, float32: the natural-log log-sum-exp of the scaled
scores, FA2 Alg. 1 line 13), never the Nq x Nk matrix; the backward kernel recomputes P from them
(FA2 Alg. 2 line 11). lse is not an output of kernels.attention, so no gradient flows through it.

Layouts (kernels.registry.KernelSpec.layouts, read into _INFO): a kernel with "gqa" takes k, v with H_kv heads
dividing H (query head h reads kv head h // (H / H_kv)); others refuse it, naming the kernels that take it. A
kernel with "strided" gets q, k, v and the gradient do as the caller's views (any strides, a unit last one) and
returns dq, dk, dv in their layouts; others get contiguous copies. o is contiguous either way.

What a kernel cannot take (CPU tensors, a dtype or head dim outside its set, a kernel with no backward, grouped-
query K/V, deterministic=True without such a backward) raises one error naming what it supports; nothing falls
back to another implementation. Meta tensors are accepted so shapes can be traced without a GPU (nothing runs
on them).
"""
from __future__ import annotations

import inspect
import sys

import torch
from torch import Tensor

from counting import checks
from kernels.registry import KERNELS

DEFAULT_KERNEL = "fa2_wgmma"
_LIB = "fa_workbench"


def _describe(spec) -> dict:
    """What kernels.attention takes: what both the forward and the backward take (a forward may
    cover more head dims than its backward: fa2_wgmma's forward takes d = 96, 256, its backward not)."""
    head_dims = spec.head_dims
    bwd = spec.backward
    bwd_dims = getattr(sys.modules.get(getattr(bwd, "__module__", ""), None), "HEAD_DIMS", None)
    if bwd is not None and bwd_dims is not None:
        head_dims = tuple(d for d in (head_dims if head_dims is not None else bwd_dims) if d in bwd_dims)
    takes_deterministic = bwd is not None and "deterministic" in inspect.signature(bwd).parameters
    return dict(dtypes=spec.dtypes, head_dims=head_dims, max_head_dim=spec.max_head_dim,
                trainable=bwd is not None, gqa="gqa" in spec.layouts, strided="strided" in spec.layouts,
                deterministic=takes_deterministic)


# What each launcher takes, read once here: torch.compile cannot trace the lazy module imports that
# KernelSpec's properties make, but it folds these plain dict lookups into guards.
_INFO = {name: _describe(spec) for name, spec in KERNELS.items()}


def trainable_kernels() -> list[str]:
    """Registered kernels whose launcher has a backward."""
    return [name for name, info in _INFO.items() if info["trainable"]]


def kernels_taking(what: str) -> list[str]:
    """Trainable kernels whose forward and backward take `what`: "gqa", "strided" or "deterministic"."""
    return [name for name, info in _INFO.items() if info["trainable"] and info[what]]


def _dtype_names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def _info(kernel: str) -> dict:
    info = _INFO.get(kernel) if isinstance(kernel, str) else None
    if info is None:
        raise ValueError(f"kernel={kernel!r} is not a registered kernel; trainable kernels (with a "
                         f"backward): {', '.join(trainable_kernels()) or 'none'}")
    if not info["trainable"]:
        raise ValueError(f"kernel {kernel!r} has no backward, so it cannot train; kernels with one: "
                         f"{', '.join(trainable_kernels()) or 'none'}")
    return info


def check_inputs(q, k, v, *, causal, scale, kernel, deterministic=False) -> float:
    """Raise one clear error for what `kernel` cannot take; return the resolved scale."""
    info = _info(kernel)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"kernels.attention runs CUDA kernels: {name} is on {t.device}; move the "
                             f"tensors to a GPU (CPU references: variants.attention)")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in info["dtypes"]:
            raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; kernel {kernel!r} "
                            f"supports {_dtype_names(info['dtypes'])}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    (b, h, _, d), (bk, hk, n_k, dk), (bv, hv, n_v, dv) = q.shape, k.shape, v.shape
    if b != bk or b != bv:
        raise ValueError(f"batch mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if hk != hv:
        raise ValueError(f"k and v must have the same number of heads, got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if hk != h and not info["gqa"]:
        raise ValueError(f"grouped-query K/V (q has H = {h} heads, k and v H_kv = {hk}): kernel {kernel!r} takes "
                         f"k, v with q's heads only; kernels that take grouped-query K/V: "
                         f"{', '.join(kernels_taking('gqa')) or 'none'}")
    if hk < 1 or h % hk != 0:
        raise ValueError(f"grouped-query attention needs H_kv dividing H: q has H = {h} heads, k and v have "
                         f"H_kv = {hk}")
    if not d == dk == dv:
        raise ValueError(f"head dim d mismatch: q has {d}, k has {dk}, v has {dv}")
    if n_k != n_v:
        raise ValueError(f"k and v must have the same sequence length, got {n_k} and {n_v}")
    head_dims, max_d = info["head_dims"], info["max_head_dim"]
    if d > max_d or (head_dims is not None and d not in head_dims):
        dims = f"d in {sorted(head_dims)}" if head_dims is not None else f"d <= {max_d}"
        raise ValueError(f"head dim d={d} unsupported: kernel {kernel!r} takes {dims}")
    if min(q.shape) < 1 or min(k.shape) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    checks.flag("causal", causal)  # the references' rules: a NumPy bool or number is taken as they take it
    if checks.flag("deterministic", deterministic) and not info["deterministic"]:
        raise ValueError(f"deterministic=True: the backward of kernel {kernel!r} has no deterministic mode (its dQ "
                         f"atomics add in the order blocks run); kernels with one: "
                         f"{', '.join(kernels_taking('deterministic')) or 'none'}")
    return checks.scale_value(scale, d)


@torch.library.custom_op(f"{_LIB}::attention_fwd", mutates_args=())
def attention_fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float,
                  kernel: str, deterministic: bool = False) -> tuple[Tensor, Tensor]:
    # deterministic: the backward's mode, an input here only so that autograd's context carries it there
    o, lse = KERNELS[kernel].forward(q, k, v, causal=causal, scale=scale)
    return o, lse


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, scale, kernel, deterministic=False):
    # o is contiguous (B, H, Nq, d) whatever q's strides: every launcher allocates it so
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _a_view_it_reads(t: Tensor) -> bool:
    """Whether a "strided" kernel reads `t` in place (TMA: unit last stride, 16-byte aligned address and strides,
    no broadcast dimension); a gradient autograd made otherwise (a sum's expanded ones) gets a copy instead of an
    error the caller could not act on."""
    size = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s > 0 and s * size % 16 == 0 for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1))


@torch.library.custom_op(f"{_LIB}::attention_bwd", mutates_args=())
def attention_bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, do: Tensor, causal: bool,
                  scale: float, kernel: str, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    if not (_INFO.get(kernel, {}).get("strided") and _a_view_it_reads(do)):
        do = do.contiguous()  # autograd may hand over an expanded or transposed gradient: row-major tiles for them
    extra = {"deterministic": True} if deterministic else {}  # check_inputs refused it for kernels without one
    dq, dk, dv = KERNELS[kernel].backward(q, k, v, o, lse, do, causal=causal, scale=scale, **extra)
    return _in_layout_of(dq, q), _in_layout_of(dk, k), _in_layout_of(dv, v)


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return all(x == y for x, y, n in zip(a.stride(), b.stride(), a.shape) if n > 1)  # size-1 dims' strides: any


def _in_layout_of(g: Tensor, t: Tensor) -> Tensor:
    """g with the strides the fake implementation promises, torch.empty_like(t)'s, so that a compiled graph's
    assumptions hold: a copy only where a launcher chose others (fa2_wgmma's dv follows k's layout, so a v laid out
    unlike k gets one)."""
    if _same_layout(g, t):
        return g
    like = torch.empty_like(t)
    return g if _same_layout(g, like) else like.copy_(g)


@attention_bwd.register_fake
def _attention_bwd_fake(q, k, v, o, lse, do, causal, scale, kernel, deterministic=False):
    # dq, dk, dv in q's, k's, v's layouts (k, v with H_kv heads under grouped-query attention)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, kernel, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)  # O and L: what FA2's backward needs (Alg. 2 line 2)
    ctx.causal, ctx.scale, ctx.kernel, ctx.deterministic = causal, scale, kernel, deterministic


def _backward(ctx, do, _dlse):
    # _dlse: lse never leaves kernels.attention, so nothing downstream depends on it
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_bwd(q, k, v, o, lse, do, ctx.causal, ctx.scale, ctx.kernel, ctx.deterministic)
    return dq, dk, dv, None, None, None, None


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: float | None = None,
              kernel: str = DEFAULT_KERNEL, deterministic: bool = False) -> Tensor:
    """softmax(scale · q kᵀ) v with a workbench kernel, differentiable in q, k, v.

    q (B, H, Nq, d), k and v (B, H_kv, Nk, d) on a GPU, H_kv = H or (kernels that take grouped-query K/V,
    `kernels_taking("gqa")`) H_kv dividing H: query head h reads kv head h // (H / H_kv), and dk, dv sum over
    each group. causal is aligned bottom-right (query i sees key j iff j <= i + Nk - Nq); a row that sees no key
    gives o = 0 and zero gradients. Strided views (a (B, N, H, d) tensor's .transpose(1, 2)) are read in place
    by the kernels that take them (`kernels_taking("strided")`) and copied to contiguous ones for the rest.
    deterministic: the backward adds dQ in a fixed order (bitwise-reproducible gradients), for kernels whose
    backward has that mode (`kernels_taking("deterministic")`); others refuse it.
    """
    scale = check_inputs(q, k, v, causal=causal, scale=scale, kernel=kernel, deterministic=deterministic)
    causal, deterministic = bool(causal), bool(deterministic)  # the custom op's schema takes Python bools
    if not _INFO[kernel]["strided"]:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, _ = attention_fwd(q, k, v, causal, scale, kernel, deterministic)
    return o
