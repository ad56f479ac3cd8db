"""Input check of the launchers that read q, k, v through TMA tensor maps (kernels.fa2_wgmma):
strided views and grouped-query attention, which the contiguous-only launchers refuse.

    b, h, h_kv, n_q, n_k, d = check_strided_gqa(q, k, v, head_dims=(64, 96, 128, 256))

Accepted: q (B, H, Nq, d), k and v (B, H_kv, Nk, d) with H_kv dividing H (query head h reads kv head
h // (H / H_kv)), any strides with a unit last one -- e.g. a (B, N, H, d) tensor's .transpose(1, 2) --
fp16/bf16, one device. What TMA further needs (16-byte aligned address and strides) is checked where
the maps are made (kernels.tma.tensor_map_args), with the stride named. Everything else gets the
contiguous launchers' messages (kernels.loader.check_cuda_inputs), so one input reads the same everywhere.
"""
from __future__ import annotations

from counting.checks import check_shapes
from kernels import loader

_DTYPES = None


def check_strided_gqa(q, k, v, *, head_dims) -> tuple[int, int, int, int, int, int]:
    import torch

    global _DTYPES
    if _DTYPES is None:
        _DTYPES = (torch.float16, torch.bfloat16)
    T = torch.Tensor
    # fast path for valid inputs: few attribute reads (the launch's host time counts in event timings);
    # get_device() is an int (-1 on the CPU), cheaper than comparing torch.device objects
    if isinstance(q, T) and isinstance(k, T) and isinstance(v, T):
        qs, ks, dt, dev = q.shape, k.shape, q.dtype, q.get_device()
        if (len(qs) == 4 and len(ks) == 4 and q.is_cuda and (dt is _DTYPES[0] or dt is _DTYPES[1])
                and dt is k.dtype and dt is v.dtype and dev == k.get_device() == v.get_device()
                and ks == v.shape):
            b, h, n_q, d = qs
            bk, h_kv, n_k, dk = ks
            if (b == bk and d == dk and d in head_dims and h_kv and h % h_kv == 0 and b * h * n_q and n_k * h_kv
                    and q.stride(3) == 1 and k.stride(3) == 1 and v.stride(3) == 1):
                return b, h, h_kv, n_q, n_k, d
    _explain(q, k, v, head_dims)
    raise ValueError("unsupported inputs")  # not reached: _explain names the problem


def _explain(q, k, v, head_dims) -> None:
    import torch

    for t in (q, k, v):  # type, device, rank, dtype: the shared check's first loop says it
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dim() != 4 or t.dtype not in _DTYPES:
            loader.check_cuda_inputs(q, k, v, supported_dtypes=_DTYPES, head_dims=head_dims)
            raise TypeError("q, k, v must be rank-4 CUDA tensors of dtype float16 or bfloat16")  # not reached
    layout_rules(q, k, v, head_dims)


def layout_rules(q, k, v, head_dims) -> None:
    """What this module adds to the shared check, on tensors of any device (the CPU tests use it):
    raises with one line naming the first broken rule."""
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    _, _, _, _, d = check_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), gqa=True)  # the shared wording
    if d not in head_dims:
        raise ValueError(f"head dim d={d} unsupported; this kernel takes d in {sorted(head_dims)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(3) != 1:
            raise ValueError(f"{name} must have a unit stride in its last dimension (d), got strides "
                             f"{t.stride()} for shape {tuple(t.shape)}; call .contiguous() for a copy")


def positive_scale(q, scale: float):
    """(q', scale') with scale' > 0 and q' k^T scale' = q k^T scale exactly, for the tensor-core forwards.

    Those kernels set hidden scores (causal, the Nk tail) to -inf in the unscaled S = Q K^T and take the row
    max m of the unscaled S before the exponential exp2(S scale log2e - m scale log2e) (FA2 Alg. 1 lines
    9-10 with the scale folded into one FFMA). That is right only for scale > 0: a negative scale turns a
    hidden -inf into +inf and makes m the row's minimum; scale = 0 gives -inf x 0 = NaN. So:
    scale < 0 runs on -q with -scale (negation is exact in fp16 and bf16), scale = 0 on a zero q with
    scale 1 (every visible score exactly 0, as 0 x q k^T is). o and lse are those of the caller's scores; the
    backward kernels mask P after the exponential and take any finite scale as given."""
    if scale > 0:
        return q, scale
    if scale < 0:
        return q.neg(), -scale
    import torch

    return torch.zeros_like(q), 1.0
