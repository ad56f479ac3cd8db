"""FlashAttention-2 forward, teaching tier: launcher for kernels/cuda/fa2.cu (mirrors variants/fa2.py).

One launch: grid (Tr, B*H), 256 threads, dynamic shared memory Q_i + K_j + the P tile, + V_j at
d <= 64 (at d > 64, V_j reuses K_j's buffer), float32: 4·(Br·ld + Bc·ld + Br·(Bc+1) [+ Bc·ld]) bytes,
ld = d_pad + 1 (83 KB at d = 128, 66 KB at d = 64).
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
    return _teaching.F32 * (block_q * ld + block_k * ld * (1 + own_v(d)) + block_q * (block_k + 1))


def own_v(d: int) -> int:
    """fa2.cu's FA2_OWN_V: V_j gets its own buffer when the tiles are 64 wide (measured 1-3% faster there;
    at d = 128 the extra 33 KB would leave one block per SM)."""
    return int(_teaching.d_padded(d) <= 64)


def compile_configs():
    return _teaching.compile_configs(SOURCE, [KERNEL], extra_defines=({"FA2_OWN_V": 0}, {"FA2_OWN_V": 1}))


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    fn = loader.get_function(SOURCE, KERNEL, defines=_teaching.defines(q.dtype, block_q, block_k,
                                                                      FA2_OWN_V=own_v(p.d)),
                             device=q.device.index)
    fn.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
              (q, k, v, o, lse, p.n_q, p.n_k, p.d, p.scale, int(causal)),
              shared_mem=shared_bytes(p.d, block_q, block_k))
    return o, lse
