"""GPU tests of the split-KV decode kernels (kernels/split_kv.py, kernels/split_kv_fast.py) against a float64
oracle: a plain softmax over the gathered cache positions each query row sees. Outputs and the fp32 workspace are
poisoned with NaN before every launch (bench.harness.Poisoned), lse is checked too (-inf exactly where a row sees
nothing). Run: pytest -q -m gpu tests/test_split_kv_gpu.py"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.harness import Poisoned

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning"),
]

TOL = {torch.float32: 2e-4, torch.float16: 1.5e-2, torch.bfloat16: 4e-2}


def make_cache(b, h_kv, d, lens, dtype, page_size=None, seed=0):
    """(k, v, block_table) with random contents; paged: pages of every sequence in a random permutation, plus
    spare pages nobody owns (filled with NaN-free junk)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    cap = max(max(lens), 1)
    if page_size is None:
        k = torch.randn(b, h_kv, cap, d, generator=g, device="cuda").to(dtype)
        v = torch.randn(b, h_kv, cap, d, generator=g, device="cuda").to(dtype)
        return k, v, None
    max_pages = -(-cap // page_size)
    num_pages = b * max_pages + 3
    k = torch.randn(num_pages, h_kv, page_size, d, generator=g, device="cuda").to(dtype)
    v = torch.randn(num_pages, h_kv, page_size, d, generator=g, device="cuda").to(dtype)
    perm = torch.randperm(num_pages, generator=g, device="cuda")[: b * max_pages]
    return k, v, perm.reshape(b, max_pages).to(torch.int32).contiguous()


def gather(k, b, hk_all, L, table, page_size):
    """Cache positions 0..L-1 of sequence b: (H_kv, L, d)."""
    if table is None:
        return k[b, :, :L]
    t = torch.arange(L, device=k.device)
    pages = table[b, t // page_size].long()
    return k[pages, :, t % page_size].permute(1, 0, 2)


def padded(table, lens, page_size):
    """An int64 copy of table whose entries past each sequence's ⌈L_b / page_size⌉ pages are padding: -1 (even b) or
    2^31 - 1 (odd b; a kernel that read it would fault: far past any cache). The contract never reads them."""
    out = table.long().clone()
    for b, n in enumerate(lens):
        out[b, -(-n // page_size):] = -1 if b % 2 == 0 else 2 ** 31 - 1
    return out


def oracle(q, k, v, lens, table, page_size, causal, scale):
    b_, h, n_q, d = q.shape
    h_kv = k.shape[1]
    grp = h // h_kv
    o = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((b_, h, n_q), -math.inf, dtype=torch.float64, device=q.device)
    for b in range(b_):
        L = int(lens[b])
        if L == 0:
            continue
        kb = gather(k, b, h_kv, L, table, page_size).double().repeat_interleave(grp, 0)  # (H, L, d)
        vb = gather(v, b, h_kv, L, table, page_size).double().repeat_interleave(grp, 0)
        s = scale * q[b].double() @ kb.transpose(1, 2)  # (H, Nq, L)
        if causal:
            i = torch.arange(n_q, device=q.device)[:, None]
            t = torch.arange(L, device=q.device)[None, :]
            s = s.masked_fill(t > i + L - n_q, -math.inf)
        lb = torch.logsumexp(s, -1)
        seen = lb > -math.inf
        p = torch.where(seen[..., None], torch.exp(s - lb[..., None]), torch.zeros_like(s))
        o[b] = p @ vb
        lse[b] = lb
    return o, lse


def check(mod, b, h_kv, grp, n_q, d, lens, dtype, page_size, causal, num_splits, scale=None, seed=0, pad=False):
    h = h_kv * grp
    k, v, table = make_cache(b, h_kv, d, lens, dtype, page_size, seed)
    if pad:
        table = padded(table, lens, page_size)
    q = torch.randn(b, h, n_q, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 1))
    q = q.to(dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    with Poisoned():
        o, lse = mod.forward(q, k, v, causal=causal, scale=scale, cache_seqlens=seqlens, block_table=table,
                             num_splits=num_splits)
    torch.cuda.synchronize()
    ro, rl = oracle(q, k, v, lens, table, page_size, causal, sc)
    what = f"{mod.__name__} b={b} h_kv={h_kv} g={grp} Nq={n_q} d={d} lens={lens} {dtype} page={page_size} " \
           f"causal={causal} S={num_splits}"
    assert o.dtype == q.dtype and lse.dtype == torch.float32 and o.shape == q.shape and lse.shape == (b, h, n_q)
    assert not torch.isnan(o).any(), f"NaN in o (an unwritten element): {what}"
    assert not torch.isnan(lse).any(), f"NaN in lse: {what}"
    empty = torch.isinf(rl)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), f"lse = -inf rows differ: {what}"
    assert (o.double()[empty] == 0).all(), f"a row that sees nothing must give o = 0: {what}"
    err = (o.double() - ro).abs().max().item()
    assert err <= TOL[dtype], f"o off by {err}: {what}"
    if (~empty).any():
        lerr = (lse.double()[~empty] - rl[~empty]).abs().max().item()
        assert lerr <= TOL[dtype] * 4 + 1e-4, f"lse off by {lerr}: {what}"


def _kernels():
    from kernels import KERNELS

    return [KERNELS[n].module for n in ("split_kv", "split_kv_fast") if n in KERNELS]


@st.composite
def problems(draw, fast: bool):
    b = draw(st.integers(1, 3))
    h_kv = draw(st.integers(1, 3))
    grp = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    n_q = draw(st.one_of(st.just(1), st.integers(1, 64 if fast else 20)))
    d = draw(st.sampled_from((64, 128, 256) if fast else (8, 40, 64, 96, 128, 256)))
    dtype = draw(st.sampled_from((torch.float16, torch.bfloat16) if fast
                                 else (torch.float32, torch.float16, torch.bfloat16)))
    cap = draw(st.sampled_from([1, 2, 17, 63, 64, 65, 200, 511, 1000]))
    lens = draw(st.lists(st.one_of(st.just(0), st.just(1), st.just(cap), st.integers(0, cap)), min_size=b,
                         max_size=b))
    page = draw(st.sampled_from([None, None, 1, 3, 16, 64, 256]))
    causal = draw(st.booleans())
    splits = draw(st.sampled_from([None, None, 1, 2, 3, 7]))
    return b, h_kv, grp, n_q, d, lens, dtype, page, causal, splits


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pr=problems(fast=True), seed=st.integers(0, 1000))
def test_fast_matches_float64(pr, seed):
    from kernels import split_kv_fast

    check(split_kv_fast, *pr, seed=seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pr=problems(fast=False), seed=st.integers(0, 1000))
def test_teaching_matches_float64(pr, seed):
    from kernels import split_kv

    check(split_kv, *pr, seed=seed)


@pytest.mark.parametrize("name", ["split_kv", "split_kv_fast"])
@pytest.mark.parametrize("case", [
    # b, h_kv, g, Nq, d, lens, dtype, page, causal, splits
    (2, 2, 4, 1, 128, [0, 0], torch.float16, None, False, None),          # every cache empty
    (2, 2, 4, 1, 128, [1, 0], torch.bfloat16, 16, True, 3),               # one token, one empty
    (1, 8, 4, 1, 128, [40000], torch.float16, None, False, None),         # a long cache: many splits, fused merge
    (1, 8, 4, 1, 64, [33333], torch.bfloat16, 256, False, None),          # long, paged
    (3, 2, 8, 64, 128, [700, 64, 5], torch.float16, None, True, 5),       # 512 packed rows (32 row tiles), causal
    (2, 1, 1, 5, 64, [3, 300], torch.float16, None, True, 4),             # Nq > L: rows that see nothing (causal)
    (1, 4, 2, 3, 256, [1001], torch.bfloat16, 48, False, 7),              # splits that do not divide the cache
])
def test_edges(name, case):
    from kernels import KERNELS

    check(KERNELS[name].module, *case)


@pytest.mark.parametrize("name", ["split_kv", "split_kv_fast"])
def test_negative_and_zero_scale(name):
    from kernels import KERNELS

    for scale in (-0.3, 0.0):
        check(KERNELS[name].module, 1, 2, 4, 3, 64, [77], torch.float16, None, True, 2, scale=scale)


@pytest.mark.parametrize("name", ["split_kv", "split_kv_fast"])
def test_padding_past_a_sequence_is_never_read(name):
    """int64 tables whose entries past each sequence's pages are -1 or 2^31 - 1: accepted (one contract with the
    reference), cast to int32, and never read (a read of 2^31 - 1 would be an illegal address)."""
    from kernels import KERNELS

    check(KERNELS[name].module, 4, 2, 4, 1, 128, [17, 300, 0, 64], torch.float16, 16, False, 3, pad=True)
    check(KERNELS[name].module, 2, 1, 2, 3, 64, [40, 1], torch.bfloat16, 3, True, None, pad=True)


@pytest.mark.parametrize("name", ["split_kv", "split_kv_fast"])
def test_a_repeated_call_reads_no_index_to_the_host(name):
    """The checks read cache_seqlens and block_table to the host once per version (counting.decode._memo): the same
    unmodified tensors again cost no device-to-host sync; an in-place write is read (and checked) again."""
    from kernels import KERNELS

    mod = KERNELS[name].module
    k, v, table = make_cache(2, 2, 128, [300, 40], torch.float16, 16, 0)
    q = torch.randn(2, 8, 1, 128, device="cuda", dtype=torch.float16)
    seqlens = torch.tensor([300, 40], dtype=torch.int32, device="cuda")
    mod.forward(q, k, v, cache_seqlens=seqlens, block_table=table)
    torch.cuda.set_sync_debug_mode("error")
    try:
        mod.forward(q, k, v, cache_seqlens=seqlens, block_table=table)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    table[1, 0] = k.shape[0]  # now a page index past the cache, read by sequence 1
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] = .* is not a page index"):
        mod.forward(q, k, v, cache_seqlens=seqlens, block_table=table)


def test_repeated_launches_reset_the_merge_counters():
    """The fused merge's counters must be 0 again after each launch: the same multi-split call twice gives one
    answer, and a different shape after it is still right."""
    from kernels import split_kv_fast

    for _ in range(3):
        check(split_kv_fast, 2, 8, 4, 1, 128, [5000, 1234], torch.float16, None, False, 9)
        check(split_kv_fast, 1, 8, 4, 2, 64, [777], torch.bfloat16, 16, True, 4)
