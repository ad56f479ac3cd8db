"""Split-KV decoding on tensor cores (kernels/cuda/split_kv_fast.cu): fp16/bf16, d in {64, 128, 256}, Nq 1..64,
contiguous or paged caches (any page size: each row is gathered through block_table), GQA packing, causal,
per-sequence lengths. The contract is counting/decode.py's (kernels/_decode.py adds this kernel's limits);
kernels/split_kv.py is the teaching kernel of it. Host reads of cache_seqlens and block_table: once per tensor
version (kernels/_decode.py, docs/decoding.md's contract).

    o, lse = forward(q, k, v, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None,
                     cache_seqlens_host=None)

One launch: grid (B H_kv, row_tiles, S), 128 threads; with S > 1 the last CTA of each (b, h_kv, row tile) merges
the S partials (an int32 arrival counter per tile). The counters are allocated per launch, zeroed on the launch's
stream from torch's caching allocator (one small memset per split launch), so launches on different streams never
share them and a launch that faults mid-merge leaves nothing behind for the next one. Checked against float64 on an H100
(tests/test_split_kv_gpu.py) and in CPU emulation (tests/test_split_kv_fast_emulated.py); timed in
results/decode_speed/.
"""
from __future__ import annotations

from pathlib import Path

import torch

from kernels import _decode, layouts, loader

SOURCE = Path(__file__).resolve().parent / "cuda" / "split_kv_fast.cu"
KERNEL = "split_kv_fast"
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128, 256)
MAX_HEAD_DIM = 256
MAX_N_Q = 64
STAGES = 3
NTHREADS = 128
LOG2E = 1.4426950408889634
DECODE = True  # a decode kernel (kernels/registry.py)


def block_k(d: int) -> int:
    """Keys per tile (Bc): 4 warps x 32 keys at d = 64, x 16 at d = 128 and 256 (split_kv_fast.cu KW)."""
    return 128 if d == 64 else 64


def smem_bytes(d: int, stages: int = STAGES) -> int:
    """Q (16 x d) + `stages` x (K_j + V_j), fp16/bf16, + 128 B of row lse and a flag (split_kv_fast.cu)."""
    return _decode.ROWS * d * 2 + stages * 2 * block_k(d) * d * 2 + 128


def defines_for(d: int, is_bf16: bool, stages: int = STAGES) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"split_kv_fast supports head dims {HEAD_DIMS}, got d={d}")
    return {"HEAD_DIM": d, "IS_BF16": int(bool(is_bf16)), "STAGES": stages}


def compile_configs():
    return [(str(SOURCE), KERNEL, defines_for(d, bf16)) for d in HEAD_DIMS for bf16 in (0, 1)]


def _counters(n: int, device):
    """One zeroed int32 arrival counter per tile, fresh per launch: zeros on the current stream, whose memory the
    caching allocator hands to no other stream's work before this launch is done with it. (A per-device buffer the
    merging CTAs reset would race between two streams, and a faulted launch would leave it non-zero.)"""
    return torch.zeros(n, dtype=torch.int32, device=device)


def _sms(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


_SM_COUNT: dict = {}


def forward(q, k, v, *, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None,
            cache_seqlens_host=None):
    d = q.shape[-1] if isinstance(q, torch.Tensor) and q.dim() == 4 else 0
    sms = 132
    if isinstance(q, torch.Tensor) and q.is_cuda:
        sms = _SM_COUNT.get(q.device.index) or _SM_COUNT.setdefault(q.device.index, _sms(q.device))
    p = _decode.check("split_kv_fast", q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens,
                      block_table=block_table, num_splits=num_splits, dtypes=DTYPES, head_dims=HEAD_DIMS,
                      block_k=block_k(d) if d in HEAD_DIMS else 64, max_n_q=MAX_N_Q, sms=sms, aligned=True,
                      cache_seqlens_host=cache_seqlens_host)
    dev = q.device
    q, scale = layouts.positive_scale(q, p.scale)  # the kernel masks S before scaling it
    seqlens = _decode.seqlens_or_full(cache_seqlens, p, dev)
    table = _decode.table_or_dummy(block_table, dev)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=dev)
    tiles = p.batch * p.heads_kv * p.row_tiles
    if p.splits > 1:
        ws_o, ws_lse = _decode.workspace(p, dev)
        counters = _counters(tiles, dev)
    else:  # S = 1 writes o and lse at once: the workspace is never touched
        ws_o = ws_lse = lse
        counters = table
    fn = loader.get_function(SOURCE, KERNEL, defines=defines_for(p.d, q.dtype == torch.bfloat16), device=dev.index)
    fn.launch((p.batch * p.heads_kv, p.row_tiles, p.splits), (NTHREADS,),
              (q, k, v, seqlens, table, o, lse, ws_o, ws_lse, counters, p.heads, p.heads_kv, p.n_q,
               0 if p.paged else p.capacity, max(p.page_size, 1), p.max_pages, int(p.paged), p.chunk, p.splits,
               p.row_tiles, float(scale * LOG2E), float(scale), int(p.causal)),
              shared_mem=smem_bytes(p.d))
    return o, lse
