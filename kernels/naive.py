"""Standard attention, teaching tier: launcher for kernels/cuda/naive.cu (mirrors variants/naive.py).

Three launches on one stream, S and P allocated in HBM in the input dtype (B, H, Nq, Nk) each:
    line 1  naive_scores   grid (Tc, Tr, B*H)   smem Q_i, K_j, S tile: 4·(Br·ld + Bc·ld + Br·(Bc+1))
    line 2  naive_softmax  grid (Nq, B*H)       smem one row of S: 4·Nk bytes (so S is read once)
    line 3  naive_pv       grid (Tr, B*H)       smem P tile, V_j: 4·(Br·(Bc+1) + Bc·ld)
"""
from __future__ import annotations

import torch

from kernels import _teaching, loader

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
    return _teaching.compile_configs(SOURCE, KERNELS)


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    t, bh = p.tiling, p.batch * p.heads
    row_bytes = shared_bytes("naive_softmax", p.d, p.n_k)
    if row_bytes + SOFTMAX_STATIC_SMEM > loader.max_dynamic_smem(q.device.index):
        raise ValueError(f"naive: the softmax keeps a row of S on chip ({row_bytes:,} bytes for "
                         f"Nk={p.n_k}), over the device's {loader.max_dynamic_smem():,} bytes")
    defines = _teaching.defines(q.dtype, block_q, block_k)
    s = torch.empty(p.batch, p.heads, p.n_q, p.n_k, dtype=q.dtype, device=q.device)  # S in HBM
    probs = torch.empty_like(s)  # P in HBM
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    threads = (_teaching.NTHREADS,)

    # line 1: S = scale·Q Kᵀ, every tile written (hidden ones as -inf)
    loader.get_function(SOURCE, "naive_scores", defines=defines, device=q.device.index).launch(
        (t.t_c, t.t_r, bh), threads, (q, k, s, p.n_q, p.n_k, p.d, p.scale, int(causal)),
        shared_mem=shared_bytes("naive_scores", p.d, p.n_k, block_q, block_k))
    # line 2: P = softmax(S), lse
    loader.get_function(SOURCE, "naive_softmax", defines=defines, device=q.device.index).launch(
        (p.n_q, bh), threads, (s, probs, lse, p.n_q, p.n_k), shared_mem=row_bytes)
    # line 3: O = P V over the visited tiles
    loader.get_function(SOURCE, "naive_pv", defines=defines, device=q.device.index).launch(
        (t.t_r, bh), threads, (probs, v, o, p.n_q, p.n_k, p.d, int(causal)),
        shared_mem=shared_bytes("naive_pv", p.d, p.n_k, block_q, block_k))
    return o, lse
