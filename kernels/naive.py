"""Standard attention, teaching tier: launcher for kernels/cuda/naive.cu (mirrors variants/naive.py).

Three launches on one stream, S and P allocated in HBM in the input dtype (B, H, Nq, Nk) each:
    line 1  naive_scores   grid (Tc, Tr, B*H)   smem Q_i, K_j, S tile: 4·(Br·ld + Bc·ld + Br·(Bc+1))
    line 2  naive_softmax  grid (Nq, B*H)       smem one row of S: 4·Nk bytes (so S is read once)
    line 3  naive_pv       grid (Tr, B*H)       smem P tile, V_j: 4·(Br·(Bc+1) + Bc·ld)

backward (FA1 Alg. 3, kernels/cuda/naive_bwd.cu), five launches, reading the forward's P from HBM and
writing dP, dS there (input dtype, (B, H, Nq, Nk) each):
    line 1  naive_bwd_dv   grid (Tc, B*H)       smem P tile, dO_i: 4·(Br·(Bc+1) + Br·ld)
    line 2  naive_bwd_dp   grid (Tc, Tr, B*H)   smem dO_i, V_j, dP tile: as naive_scores
    line 3  naive_bwd_ds   grid (Nq, B*H)       smem the rows of P and dP: 4·(2·Nk + 8)
    line 4  naive_bwd_dq   grid (Tr, B*H)       smem dS tile, K_j: as naive_pv
    line 5  naive_bwd_dk   grid (Tc, B*H)       as line 1
P: `forward(..., saved=d)` leaves the forward's P in d["P"] and `backward(..., P=d["P"])` reads it, as
variants/naive.py does (what an unfused autograd keeps: `trainable` below). Called with the uniform
signature and no P (kernels.attention), the backward first rebuilds it with the forward's own passes 1-2
(naive_scores, naive_softmax: the same P bit for bit), which costs a forward's S and P traffic more.
"""
from __future__ import annotations

import torch

from kernels import _teaching, loader
from kernels.fa2 import _check_saved

SOURCE = "naive.cu"
KERNELS = ("naive_scores", "naive_softmax", "naive_pv")
DTYPES = _teaching.DTYPES
MAX_HEAD_DIM = _teaching.MAX_HEAD_DIM
SOFTMAX_STATIC_SMEM = 32  # naive_softmax's block-reduction scratch (8 floats)


def shared_bytes(kernel: str, d: int, n_k: int, block_q: int = 64, block_k: int = 64) -> int:
    ld = _teaching.tile_ld(d)
    if kernel == "naive_scores":
        return _teaching.F32 * (block_q * ld + block_k * ld + block_q * (block_k + 1))
    if kernel == "naive_softmax":
        return _teaching.F32 * n_k
    return _teaching.F32 * (block_q * (block_k + 1) + block_k * ld)


def compile_configs():
    return (_teaching.compile_configs(SOURCE, KERNELS)
            + _teaching.compile_configs(BWD_SOURCE, BWD_KERNELS))


def _probabilities(p, q, k, causal, block_q, block_k):
    """FA1 Alg. 0 lines 1-2 on the GPU: (P, lse), P in HBM in q's dtype (S is dropped on return)."""
    t, bh = p.tiling, p.batch * p.heads
    row_bytes = shared_bytes("naive_softmax", p.d, p.n_k)
    if row_bytes + SOFTMAX_STATIC_SMEM > loader.max_dynamic_smem(q.device.index):
        raise ValueError(f"naive: the softmax keeps a row of S on chip ({row_bytes:,} bytes for "
                         f"Nk={p.n_k}), over the device's {loader.max_dynamic_smem():,} bytes")
    defines = _teaching.defines(q.dtype, block_q, block_k)
    s = torch.empty(p.batch, p.heads, p.n_q, p.n_k, dtype=q.dtype, device=q.device)  # S in HBM
    probs = torch.empty_like(s)  # P in HBM
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    threads = (_teaching.NTHREADS,)

    # line 1: S = scale·Q Kᵀ, every tile written (hidden ones as -inf)
    loader.get_function(SOURCE, "naive_scores", defines=defines, device=q.device.index).launch(
        (t.t_c, t.t_r, bh), threads, (q, k, s, p.n_q, p.n_k, p.d, p.scale, int(causal)),
        shared_mem=shared_bytes("naive_scores", p.d, p.n_k, block_q, block_k))
    # line 2: P = softmax(S), lse
    loader.get_function(SOURCE, "naive_softmax", defines=defines, device=q.device.index).launch(
        (p.n_q, bh), threads, (s, probs, lse, p.n_q, p.n_k), shared_mem=row_bytes)
    return probs, lse


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None, saved=None):
    """(o, lse); with saved (a dict), the forward's P is left in saved["P"] for `backward(..., P=...)`."""
    if saved is not None and not isinstance(saved, dict):  # else a TypeError after the three launches
        raise TypeError(f"saved must be a dict (the forward leaves P in saved['P']) or None, got {type(saved).__name__}")
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    probs, lse = _probabilities(p, q, k, causal, block_q, block_k)
    o = torch.empty_like(q)
    # line 3: O = P V over the visited tiles
    loader.get_function(SOURCE, "naive_pv", defines=_teaching.defines(q.dtype, block_q, block_k),
                        device=q.device.index).launch(
        (p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,), (probs, v, o, p.n_q, p.n_k, p.d, int(causal)),
        shared_mem=shared_bytes("naive_pv", p.d, p.n_k, block_q, block_k))
    if saved is not None:  # what the backward reads (FA1 Alg. 3): P stays in HBM
        saved["P"] = probs
    return o, lse


# -- backward (FA1 Alg. 3) ---------------------------------------------------------------------------
BWD_SOURCE = "naive_bwd.cu"
BWD_KERNELS = ("naive_bwd_dv", "naive_bwd_dp", "naive_bwd_ds", "naive_bwd_dq", "naive_bwd_dk")
ROW_SCRATCH = 8  # naive_bwd_ds's block-reduction scratch (NTHREADS / 32 floats), carved after the rows


def backward_shared_bytes(kernel: str, d: int, n_k: int, block_q: int = 64, block_k: int = 64) -> int:
    """The dynamic shared memory each backward kernel carves (naive_bwd.cu)."""
    ld = _teaching.tile_ld(d)
    if kernel in ("naive_bwd_dv", "naive_bwd_dk"):
        return _teaching.F32 * (block_q * (block_k + 1) + block_q * ld)
    if kernel == "naive_bwd_dp":
        return shared_bytes("naive_scores", d, n_k, block_q, block_k)
    if kernel == "naive_bwd_ds":
        return _teaching.F32 * (2 * n_k + ROW_SCRATCH)
    if kernel == "naive_bwd_dq":
        return shared_bytes("naive_pv", d, n_k, block_q, block_k)
    raise ValueError(f"not a naive backward kernel: {kernel!r}")


def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=64, block_k=64, mem=None, P=None):
    """FA1 Alg. 3 on the GPU: (dq, dk, dv) in q's dtype, reading the forward's P (`forward(saved=...)`);
    without P it is rebuilt first by the forward's passes 1-2. o and lse are not read (the contract's
    signature; rows that see no key have P = 0, so dq = 0 there)."""
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    _check_saved(q, o, lse, do)
    limit = loader.max_dynamic_smem(q.device.index)
    row_bytes = backward_shared_bytes("naive_bwd_ds", p.d, p.n_k)
    if row_bytes > limit:
        raise ValueError(f"naive backward: FA1 Alg. 3 line 3 keeps a row of P and of dP on chip "
                         f"({row_bytes:,} bytes for Nk={p.n_k}), over the device's {limit:,} bytes")
    scores = (p.batch, p.heads, p.n_q, p.n_k)
    if P is None:
        P, _ = _probabilities(p, q, k, causal, block_q, block_k)
    if not isinstance(P, torch.Tensor) or P.shape != scores or P.dtype != q.dtype or P.device != q.device \
            or not P.is_contiguous():
        raise ValueError(f"P must be the forward's probabilities: contiguous {q.dtype} of shape {scores} on "
                         f"{q.device}; got {getattr(P, 'shape', type(P).__name__)}")
    t, bh = p.tiling, p.batch * p.heads
    dp = torch.empty(scores, dtype=q.dtype, device=q.device)  # dP in HBM, input dtype
    ds = torch.empty_like(dp)  # dS in HBM
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    defs = _teaching.defines(q.dtype, block_q, block_k)
    threads = (_teaching.NTHREADS,)

    def launch(name, grid, args):
        loader.get_function(BWD_SOURCE, name, defines=defs, device=q.device.index).launch(
            grid, threads, args, shared_mem=backward_shared_bytes(name, p.d, p.n_k, block_q, block_k))

    c = int(causal)
    launch("naive_bwd_dv", (t.t_c, bh), (P, do, dv, p.n_q, p.n_k, p.d, c))                # line 1
    launch("naive_bwd_dp", (t.t_c, t.t_r, bh), (do, v, dp, p.n_q, p.n_k, p.d, c))         # line 2
    launch("naive_bwd_ds", (p.n_q, bh), (P, dp, ds, p.n_q, p.n_k))                        # line 3
    launch("naive_bwd_dq", (t.t_r, bh), (ds, k, dq, p.n_q, p.n_k, p.d, p.scale, c))       # line 4
    launch("naive_bwd_dk", (t.t_c, bh), (ds, q, dk, p.n_q, p.n_k, p.d, p.scale, c))       # line 5
    return dq, dk, dv  # line 6


class _Unfused(torch.autograd.Function):
    """Standard attention as an unfused autograd keeps it: the forward's P saved for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        saved = {}
        o, lse = forward(q, k, v, causal=causal, scale=scale, saved=saved)
        ctx.save_for_backward(q, k, v, o, lse, saved["P"])
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, P = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, o, lse, do.contiguous(), causal=ctx.causal, scale=ctx.scale, P=P)
        return dq, dk, dv, None, None


def trainable(q, k, v, *, causal=False, scale=None):
    """Differentiable naive attention that keeps P (Θ(Nq·Nk) bytes) from the forward to the backward, as
    SDPA's math backend does; bench/bench_bwd.py times it as "naive" (kernels.attention(kernel="naive")
    would rebuild P in the backward instead)."""
    return _Unfused.apply(q, k, v, causal, scale)
