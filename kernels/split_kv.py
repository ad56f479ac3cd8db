"""Split-KV decoding (Flash-Decoding), teaching tier: launcher for kernels/cuda/split_kv.cu (mirrors
variants/split_kv.py; the contract and its checks are counting/decode.py's, kernels/_decode.py adds the kernels'
limits).

    o, lse = forward(q, k, v, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None,
                     cache_seqlens_host=None)

Two launches: split_kv_partial on grid (B H_kv, row_tiles, S), 128 threads, float32 shared memory
4 (2 Br d + 2 Bc d + Br Bc + 4 Br) bytes (Br = 16 packed rows, Bc = 32 keys), then split_kv_merge, one block per
packed row. fp32/fp16/bf16, d <= 256, any Nq, contiguous or paged caches (any page size). Host reads of
cache_seqlens and block_table: once per tensor version (kernels/_decode.py, docs/decoding.md's contract). Checked against
float64 on an H100 (tests/test_split_kv_gpu.py) and in CPU emulation (tests/test_split_kv_emulated.py).
"""
from __future__ import annotations

import torch

from kernels import _decode, _teaching, loader

SOURCE = "split_kv.cu"
KERNELS_CU = ("split_kv_partial", "split_kv_merge")
DTYPES = _teaching.DTYPES
HEAD_DIMS = tuple(range(1, 257))
MAX_HEAD_DIM = 256
BLOCK_K = 32  # split_kv.cu BC
NTHREADS = 128
DECODE = True  # a decode kernel: (q, k, v) with a KV cache, cache_seqlens, block_table (kernels/registry.py)


def shared_bytes(d: int) -> int:
    return 4 * (2 * _decode.ROWS * d + 2 * BLOCK_K * d + _decode.ROWS * BLOCK_K + 4 * _decode.ROWS)


def compile_configs():
    return [(SOURCE, name, {"STORAGE": _teaching.STORAGE[dt]}) for dt in DTYPES for name in KERNELS_CU]


def forward(q, k, v, *, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None,
            cache_seqlens_host=None):
    p = _decode.check("split_kv", q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens,
                      block_table=block_table, num_splits=num_splits, dtypes=DTYPES, head_dims=HEAD_DIMS,
                      block_k=BLOCK_K, cache_seqlens_host=cache_seqlens_host)
    dev = q.device
    seqlens = _decode.seqlens_or_full(cache_seqlens, p, dev)
    table = _decode.table_or_dummy(block_table, dev)
    ws_o, ws_lse = _decode.workspace(p, dev)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=dev)
    defs = {"STORAGE": _teaching.STORAGE[q.dtype]}
    part = loader.get_function(SOURCE, "split_kv_partial", defines=defs, device=dev.index)
    part.launch((p.batch * p.heads_kv, p.row_tiles, p.splits), (NTHREADS,),
                (q, k, v, seqlens, table, ws_o, ws_lse, p.heads, p.heads_kv, p.n_q,
                 0 if p.paged else p.capacity, p.d, p.scale, int(p.causal), int(p.paged), p.page_size,
                 p.max_pages, p.chunk, p.splits, p.row_tiles),
                shared_mem=shared_bytes(p.d))
    merge = loader.get_function(SOURCE, "split_kv_merge", defines=defs, device=dev.index)
    merge.launch((p.batch * p.heads_kv * p.row_tiles * _decode.ROWS,), (NTHREADS,),
                 (ws_o, ws_lse, o, lse, p.heads, p.heads_kv, p.n_q, p.d, p.splits, p.row_tiles))
    return o, lse
