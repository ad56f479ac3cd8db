"""What the two split-KV decode launchers (kernels/split_kv.py, kernels/split_kv_fast.py) share: the input checks
(every refusal raised before any launch, in an order that lets a CPU test reach each one), the split plan and the
fp32 workspace of the partial (o_s, lse_s).

Contract (issue 44; variants/split_kv.py is the PyTorch reference of the same contract):
    forward(q, k, v, *, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None) -> (o, lse)
The contract, its checks and its messages are counting/decode.py's (the reference's): int32 or int64 cache_seqlens
and block_table, only the block-table entries a sequence reads checked; here only each kernel's own limits (d,
dtypes, Nq, int32 positions, the grid) and the device, and the cast of the index tensors to the kernels' int32.

Workspace layout (both kernels): the g Nq query rows of one (b, kv head) are packed as rows p = (h - h_kv g) Nq + i
and cut into row tiles of ROWS = 16; tile index T = (b H_kv + h_kv) row_tiles + rt; partial s of row r of tile T:
ws_o[((T S + s) 16 + r) d + c], ws_lse[(T S + s) 16 + r].
"""
from __future__ import annotations

from dataclasses import dataclass

from counting import decode, split_rule
from kernels import loader

ROWS = 16  # packed query rows per CTA (one m16 tile of the fast kernel): Br of the contract's split rule
INT_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class Plan:
    batch: int
    heads: int
    heads_kv: int
    n_q: int
    d: int
    paged: bool
    capacity: int  # positions a sequence can hold: Nk, or max_pages * page_size
    page_size: int  # 0 for a contiguous cache
    max_pages: int
    row_tiles: int
    splits: int
    chunk: int
    scale: float
    causal: bool


def check(name: str, q, k, v, *, causal, scale, cache_seqlens, block_table, num_splits, dtypes, head_dims,
          block_k: int, max_n_q: int | None = None, sms: int = split_rule.SMS, cuda: bool = True,
          aligned: bool = False) -> Plan:
    """The contract's checks (counting.decode.check_decode_tensors, the reference's: int32 or int64 indices, only the
    block-table entries a sequence reads), then this kernel's limits, then the device last, so that a CPU call
    reaches each of the others (tests/test_split_kv_inputs.py); cuda=False skips it (the CPU emulations of the
    kernels, tests/test_split_kv*_emulated.py, launch on CPU tensors). aligned: q, k, v start on 16 bytes (cp.async)."""
    p = decode.check_decode_tensors(q, k, v, causal=causal, scale=scale, block_q=ROWS, block_k=block_k,
                                    cache_seqlens=cache_seqlens, block_table=block_table, num_splits=num_splits,
                                    dtypes=dtypes, num_sms=sms)
    if p.d not in head_dims:
        raise ValueError(f"{name}: head dim d={p.d} unsupported; this kernel takes d in {tuple(head_dims)}")
    if max_n_q is not None and p.n_q > max_n_q:
        raise ValueError(f"{name}: Nq={p.n_q} query rows; this kernel takes 1..{max_n_q} (decoding, speculative "
                         f"decoding); use a prefill kernel (kernels.fa2_wgmma) for longer queries")
    l_max = max(p.lengths)
    if l_max + p.chunk > INT_MAX:  # positions, a split's end among them, are ints in the kernels
        raise ValueError(f"{name}: cache_seqlens up to {l_max}; this kernel takes at most {INT_MAX - p.chunk}")
    if p.num_splits > 65535:
        raise ValueError(f"{name}: {p.num_splits} splits; at most 65535 (the grid's z)")
    if cuda:  # check_decode_tensors put every tensor on q's device
        if not q.is_cuda:
            raise ValueError(f"{name}: q is on {q.device}; this CUDA kernel needs every tensor on one GPU")
        for n, t in (("q", q), ("k", k), ("v", v)):
            if not t.is_contiguous():
                raise ValueError(f"{name}: {n} must be contiguous (strides {t.stride()}); call .contiguous() first")
            if aligned:
                loader.check_aligned(n, t)
    paged = p.page_size is not None
    return Plan(p.batch, p.heads, p.kv_heads, p.n_q, p.d, paged, p.capacity, p.page_size or 0,
                p.capacity // p.page_size if paged else 0, p.t_r, p.num_splits, p.chunk, p.scale, p.causal)


_SEQLENS: dict = {}  # (device, B, Nk) -> an int32 tensor of B copies of Nk (the default cache_seqlens)
_EMPTY: dict = {}


def seqlens_or_full(cache_seqlens, p: Plan, device):
    """The kernels' int32 contiguous cache_seqlens (checked: every value <= INT_MAX); B copies of Nk if None."""
    import torch

    if cache_seqlens is not None:
        return cache_seqlens.to(torch.int32).contiguous()  # no copy when it is int32 and contiguous already
    key = (str(device), p.batch, p.capacity)
    if key not in _SEQLENS:
        _SEQLENS[key] = torch.full((p.batch,), p.capacity, dtype=torch.int32, device=device)
    return _SEQLENS[key]


def table_or_dummy(block_table, device):
    """The kernels' int32 contiguous block_table: the entries they read are checked page indices (< num_pages, which
    fits); padding past a sequence's pages may wrap in the cast, and is never read (split_kv.cu kv_offset and
    split_kv_fast.cu kv_row index positions t < min(end, L_b) only). A contiguous cache passes a one-element int32
    tensor the kernel never reads (it branches on `paged`)."""
    import torch

    if block_table is not None:
        return block_table.to(torch.int32).contiguous()
    if str(device) not in _EMPTY:
        _EMPTY[str(device)] = torch.zeros(1, dtype=torch.int32, device=device)
    return _EMPTY[str(device)]


def workspace(p: Plan, device):
    """ws_o (tiles, S, 16, d) and ws_lse (tiles, S, 16), fp32; nothing reads a row before its split writes it."""
    import torch

    tiles = p.batch * p.heads_kv * p.row_tiles
    return (torch.empty(tiles * p.splits * ROWS * p.d, dtype=torch.float32, device=device),
            torch.empty(tiles * p.splits * ROWS, dtype=torch.float32, device=device))
