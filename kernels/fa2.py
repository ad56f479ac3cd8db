"""FlashAttention-2 forward, teaching tier: launcher for kernels/cuda/fa2.cu (mirrors variants/fa2.py).

One launch: grid (Tr, B*H), 256 threads, dynamic shared memory Q_i + one K_j/V_j buffer + the P tile
(float32): 4·(Br·ld + Bc·ld + Br·(Bc+1)) bytes, ld = d_pad + 1 (83 KB at d = 128, 50 KB at d = 64).
"""
from __future__ import annotations

import torch

from kernels import _teaching, loader

SOURCE = "fa2.cu"
KERNEL = "fa2_forward"
DTYPES = _teaching.DTYPES
MAX_HEAD_DIM = _teaching.MAX_HEAD_DIM


def shared_bytes(d: int, block_q: int = 64, block_k: int = 64) -> int:
    ld = _teaching.tile_ld(d)
    return _teaching.F32 * (block_q * ld + block_k * ld + block_q * (block_k + 1))


def compile_configs():
    return _teaching.compile_configs(SOURCE, [KERNEL])


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    fn = loader.get_function(SOURCE, KERNEL, defines=_teaching.defines(q.dtype, block_q, block_k))
    fn.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
              (q, k, v, o, lse, p.n_q, p.n_k, p.d, p.scale, int(causal)),
              shared_mem=shared_bytes(p.d, block_q, block_k))
    return o, lse
