"""FlashAttention-1 forward, teaching tier: launcher for kernels/cuda/fa1.cu (mirrors variants/fa1.py).

One launch: grid (B*H,) - one thread block per (batch, head), as the paper parallelises - 256
threads, dynamic shared memory K_j, V_j, Q_i and the P tile (float32):
4·(2·Bc·ld + Br·ld + Br·(Bc+1)) bytes (116 KB at d = 128). The running O lives in `o` itself
(output dtype), ℓ and m in two float32 scratch tensors (B, H, Nq), as Algorithm 1 keeps them in HBM.
"""
from __future__ import annotations

import torch

from kernels import _teaching, loader

SOURCE = "fa1.cu"
KERNEL = "fa1_forward"
DTYPES = _teaching.DTYPES
MAX_HEAD_DIM = _teaching.MAX_HEAD_DIM


def shared_bytes(d: int, block_q: int = 64, block_k: int = 64) -> int:
    ld = _teaching.tile_ld(d)
    return _teaching.F32 * (2 * block_k * ld + block_q * ld + block_q * (block_k + 1))


def compile_configs():
    return _teaching.compile_configs(SOURCE, [KERNEL])


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    stats = (p.batch, p.heads, p.n_q)
    o = torch.empty_like(q)  # the running O in HBM (initialised by the kernel, line 2)
    l_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    m_hbm = torch.empty(stats, dtype=torch.float32, device=q.device)
    lse = torch.empty(stats, dtype=torch.float32, device=q.device)
    fn = loader.get_function(SOURCE, KERNEL, defines=_teaching.defines(q.dtype, block_q, block_k),
                             device=q.device.index)
    fn.launch((p.batch * p.heads,), (_teaching.NTHREADS,),
              (q, k, v, o, l_hbm, m_hbm, lse, p.n_q, p.n_k, p.d, p.scale, int(causal)),
              shared_mem=shared_bytes(p.d, block_q, block_k))
    return o, lse
