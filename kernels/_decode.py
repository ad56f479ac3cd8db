"""What the two split-KV decode launchers (kernels/split_kv.py, kernels/split_kv_fast.py) share: the input checks
(every refusal raised before any launch, in an order that lets a CPU test reach each one), the split plan and the
fp32 workspace of the partial (o_s, lse_s).

Contract (issue 44; variants/split_kv.py is the PyTorch reference of the same contract):
    forward(q, k, v, *, causal=False, scale=None, cache_seqlens=None, block_table=None, num_splits=None) -> (o, lse)
q (B, H, Nq, d). Contiguous cache: k, v (B, H_kv, Nk, d). Paged cache: k, v (num_pages, H_kv, page_size, d) with
block_table int32 (B, max_pages) and cache_seqlens int32 (B,) required. Query head h reads kv head h // (H / H_kv).
Causal is bottom-right per sequence: query i sees position t iff t <= i + L_b - Nq.

Workspace layout (both kernels): the g Nq query rows of one (b, kv head) are packed as rows p = (h - h_kv g) Nq + i
and cut into row tiles of ROWS = 16; tile index T = (b H_kv + h_kv) row_tiles + rt; partial s of row r of tile T:
ws_o[((T S + s) 16 + r) d + c], ws_lse[(T S + s) 16 + r].
"""
from __future__ import annotations

from dataclasses import dataclass

from counting import split_rule
from counting.checks import flag, scale_value

ROWS = 16  # packed query rows per CTA (one m16 tile of the fast kernel)


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
    l_max: int
    row_tiles: int
    splits: int
    chunk: int
    scale: float
    causal: bool


def _tensor(name, t):
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _min_max(t) -> tuple[int, int]:
    """(min, max) of an index tensor, remembered on the tensor object with its version counter: a decode loop passes
    the same unmodified cache_seqlens / block_table every step, so only the first call pays the device-to-host read
    (an in-place write bumps t._version and is read again; a new tensor has no memo)."""
    memo = getattr(t, "_fa_decode_range", None)
    if memo is not None and memo[0] == t._version:
        return memo[1]
    value = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
    t._fa_decode_range = (t._version, value)
    return value


def check(name: str, q, k, v, *, causal, scale, cache_seqlens, block_table, num_splits, dtypes, head_dims,
          block_k: int, max_n_q: int | None = None, sms: int = split_rule.SMS, cuda: bool = True) -> Plan:
    """Every refusal, with a message naming what is accepted; the device checks come last so that a CPU call reaches
    each of the others (tests/test_split_kv_inputs.py); cuda=False skips them (the CPU emulation of split_kv.cu,
    tests/test_split_kv_emulated.py, launches on CPU tensors)."""
    import torch

    q, k, v = _tensor("q", q), _tensor("k", k), _tensor("v", v)
    for n, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name}: {n} must be 4-D, got shape {tuple(t.shape)}")
    if q.dtype not in dtypes:
        raise TypeError(f"{name}: q has dtype {q.dtype}; this kernel takes {', '.join(map(str, dtypes))}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"{name}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"{name}: k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, h, n_q, d = q.shape
    h_kv = k.shape[1]
    if k.shape[3] != d:
        raise ValueError(f"{name}: k's head dim {k.shape[3]} differs from q's {d}")
    if d not in head_dims:
        raise ValueError(f"{name}: head dim d={d} unsupported; this kernel takes d in {tuple(head_dims)}")
    if b < 1 or h < 1 or n_q < 1 or h_kv < 1:
        raise ValueError(f"{name}: empty q or cache (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if h % h_kv:
        raise ValueError(f"{name}: H={h} query heads is not a multiple of H_kv={h_kv} kv heads (GQA groups of H/H_kv)")
    if max_n_q is not None and n_q > max_n_q:
        raise ValueError(f"{name}: Nq={n_q} query rows; this kernel takes 1..{max_n_q} (decoding, speculative "
                         f"decoding); use a prefill kernel (kernels.fa2_wgmma) for longer queries")
    causal = flag("causal", causal)
    scale = scale_value(scale, d)
    paged = block_table is not None
    if paged:
        if cache_seqlens is None:
            raise ValueError(f"{name}: a paged cache (block_table given) needs cache_seqlens")
        bt = _tensor("block_table", block_table)
        if bt.dtype != torch.int32:
            raise TypeError(f"{name}: block_table must be int32, got {bt.dtype}")
        if bt.dim() != 2 or bt.shape[0] != b or bt.shape[1] < 1:
            raise ValueError(f"{name}: block_table must have shape (B={b}, max_pages >= 1), got {tuple(bt.shape)}")
        num_pages, page_size, max_pages = k.shape[0], k.shape[2], bt.shape[1]
        if page_size < 1 or num_pages < 1:
            raise ValueError(f"{name}: empty paged cache {tuple(k.shape)}")
        lo, hi = _min_max(bt)
        if lo < 0 or hi >= num_pages:
            raise ValueError(f"{name}: block_table holds page indices in [{lo}, {hi}]; the cache has pages "
                             f"0..{num_pages - 1}")
        capacity = max_pages * page_size
    else:
        if k.shape[0] != b:
            raise ValueError(f"{name}: a contiguous cache k (B, H_kv, Nk, d) must have B={b} (q's), got "
                             f"{tuple(k.shape)}; a paged cache needs block_table")
        capacity, page_size, max_pages = k.shape[2], 0, 0
    if cache_seqlens is None:
        l_max = capacity
    else:
        sl = _tensor("cache_seqlens", cache_seqlens)
        if sl.dtype != torch.int32:
            raise TypeError(f"{name}: cache_seqlens must be int32, got {sl.dtype}")
        if sl.dim() != 1 or sl.shape[0] != b:
            raise ValueError(f"{name}: cache_seqlens must have shape (B={b},), got {tuple(sl.shape)}")
        lo, l_max = _min_max(sl)
        if lo < 0 or l_max > capacity:
            raise ValueError(f"{name}: cache_seqlens in [{lo}, {l_max}]; each must be in 0..{capacity} (the "
                             f"cache's capacity{' max_pages * page_size' if paged else ' Nk'})")
    g = h // h_kv
    row_tiles = -(-g * n_q // ROWS)
    if num_splits is None:
        splits = split_rule.num_splits(b, h_kv, row_tiles, l_max, block_k, sms)
    else:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise ValueError(f"{name}: num_splits must be a positive int or None, got {num_splits!r}")
        splits = num_splits
    chunk = split_rule.chunk_len(l_max, splits, block_k, page_size if paged else None)
    splits = split_rule.used_splits(l_max, chunk)
    if splits > 65535:
        raise ValueError(f"{name}: {splits} splits; at most 65535 (the grid's z)")
    # the device checks, last
    tensors = [("q", q), ("k", k), ("v", v)] + ([("block_table", block_table)] if paged else []) + (
        [("cache_seqlens", cache_seqlens)] if cache_seqlens is not None else [])
    for n, t in tensors if cuda else ():
        if not t.is_cuda:
            raise ValueError(f"{name}: {n} is on {t.device}; this CUDA kernel needs every tensor on one GPU")
        if t.device != q.device:
            raise ValueError(f"{name}: {n} is on {t.device}, q on {q.device}: one device")
        if not t.is_contiguous():
            raise ValueError(f"{name}: {n} must be contiguous (strides {t.stride()}); call .contiguous() first")
    return Plan(b, h, h_kv, n_q, d, paged, capacity, page_size, max_pages, l_max, row_tiles, splits, chunk, scale,
                causal)


_SEQLENS: dict = {}  # (device, B, Nk) -> an int32 tensor of B copies of Nk (the default cache_seqlens)
_EMPTY: dict = {}


def seqlens_or_full(cache_seqlens, p: Plan, device):
    import torch

    if cache_seqlens is not None:
        return cache_seqlens
    key = (str(device), p.batch, p.capacity)
    if key not in _SEQLENS:
        _SEQLENS[key] = torch.full((p.batch,), p.capacity, dtype=torch.int32, device=device)
    return _SEQLENS[key]


def table_or_dummy(block_table, device):
    """A contiguous cache passes a one-element int32 tensor the kernel never reads (it branches on `paged`)."""
    import torch

    if block_table is not None:
        return block_table
    if str(device) not in _EMPTY:
        _EMPTY[str(device)] = torch.zeros(1, dtype=torch.int32, device=device)
    return _EMPTY[str(device)]


def workspace(p: Plan, device):
    """ws_o (tiles, S, 16, d) and ws_lse (tiles, S, 16), fp32; nothing reads a row before its split writes it."""
    import torch

    tiles = p.batch * p.heads_kv * p.row_tiles
    return (torch.empty(tiles * p.splits * ROWS * p.d, dtype=torch.float32, device=device),
            torch.empty(tiles * p.splits * ROWS, dtype=torch.float32, device=device))
