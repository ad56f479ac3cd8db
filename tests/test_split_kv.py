"""split_kv (issue 44): exact attention over contiguous and paged KV caches against the float64 oracle, its counts
equal to counting/decode.py's closed form, the split rule, and bad caches refused before anything runs."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from counting import closed_forms as cf
from counting import decode
from counting.memory import Memory
from variants import VARIANTS, decode_reference

SPLIT_KV = VARIANTS["split_kv"]
TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}


@st.composite
def caches(draw, paged=None):
    """A decode problem: GQA group g in 1..8, Nq 1..64, per-sequence lengths (0 and 1 included), a paged cache with
    a shuffled block table or a contiguous one, causal or not, splits that need not divide the cache."""
    kv_heads, g = draw(st.integers(1, 2)), draw(st.integers(1, 8))
    n_q = draw(st.sampled_from([1, 1, 2, 3, 5, draw(st.integers(1, 64))]))
    batch, d = draw(st.integers(1, 3)), draw(st.integers(1, 16))
    paged = draw(st.booleans()) if paged is None else paged
    page_size = draw(st.sampled_from([1, 3, 4, 16])) if paged else None
    capacity = draw(st.integers(1, 70))
    if paged:
        capacity = math.ceil(capacity / page_size) * page_size
    lengths = [draw(st.sampled_from([0, 1, capacity, draw(st.integers(0, capacity))])) for _ in range(batch)]
    rows = g * n_q
    block_q = draw(st.integers(max(1, math.ceil(rows / 6)), rows + 4))
    block_k = draw(st.integers(max(1, math.ceil(capacity / 8)), capacity + 4))
    return dict(batch=batch, heads=kv_heads * g, kv_heads=kv_heads, n_q=n_q, d=d, capacity=capacity,
                page_size=page_size, lengths=lengths, causal=draw(st.booleans()), block_q=block_q,
                block_k=block_k, num_splits=draw(st.sampled_from([None, 1, 2, 3, 7])),
                dtype=draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16])),
                seed=draw(st.integers(0, 2**31 - 1)), spare_pages=draw(st.integers(0, 3)))


def make(pr, device="cpu"):
    """q, k, v, cache_seqlens, block_table of a drawn problem (pages shuffled: a sequence's pages are scattered)."""
    gen = torch.Generator().manual_seed(pr["seed"])
    b, h, hk, d = pr["batch"], pr["heads"], pr["kv_heads"], pr["d"]
    q = torch.randn(b, h, pr["n_q"], d, generator=gen).to(pr["dtype"])
    seqlens = torch.tensor(pr["lengths"], dtype=torch.int32)
    if pr["page_size"] is None:
        k, v = (torch.randn(b, hk, pr["capacity"], d, generator=gen).to(pr["dtype"]) for _ in range(2))
        return q.to(device), k.to(device), v.to(device), seqlens.to(device), None
    max_pages = pr["capacity"] // pr["page_size"]
    num_pages = b * max_pages + pr["spare_pages"]
    k, v = (torch.randn(num_pages, hk, pr["page_size"], d, generator=gen).to(pr["dtype"]) for _ in range(2))
    table = torch.randperm(num_pages, generator=gen)[:b * max_pages].view(b, max_pages).to(torch.int32)
    return q.to(device), k.to(device), v.to(device), seqlens.to(device), table.to(device)


def run(pr, mem=None, **extra):
    q, k, v, seqlens, table = make(pr)
    o, lse = SPLIT_KV.forward(q, k, v, causal=pr["causal"], cache_seqlens=seqlens, block_table=table,
                              num_splits=pr["num_splits"], block_q=pr["block_q"], block_k=pr["block_k"], mem=mem,
                              **extra)
    return (q, k, v, seqlens, table), o, lse


def assert_exact_attention(inputs, o, lse, pr):
    q, k, v, seqlens, table = inputs
    ref_o, ref_lse = decode_reference(q, k, v, causal=pr["causal"], cache_seqlens=seqlens, block_table=table)
    assert o.dtype == q.dtype and lse.dtype == torch.float32 and o.shape == q.shape
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), pr
    assert (o[empty] == 0).all() and not torch.isnan(o).any(), pr
    tol = TOL[pr["dtype"]]
    assert (o.double() - ref_o).abs().max().item() <= tol * max(1.0, v.abs().max().item()), pr
    if (~empty).any():
        err = ((lse.double() - ref_lse).abs()[~empty] / ref_lse.abs()[~empty].clamp(min=1)).max().item()
        assert err <= tol, pr


@settings(max_examples=60, deadline=None)
@given(pr=caches())
def test_matches_float64_oracle(pr):
    inputs, o, lse = run(pr)
    assert_exact_attention(inputs, o, lse, pr)


@settings(max_examples=60, deadline=None)
@given(pr=caches())
def test_counts_equal_the_closed_form(pr):
    """Every read and write (the partials of the merge included), FLOPs by kind and the SRAM peak, exactly."""
    mem = Memory()
    run(pr, mem=mem)
    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[pr["dtype"]]
    tr = cf.counts("split_kv", pr["batch"], pr["heads"], pr["n_q"], pr["capacity"], pr["d"], causal=pr["causal"],
                   dtype=name, block_q=pr["block_q"], block_k=pr["block_k"], kv_heads=pr["kv_heads"],
                   cache_seqlens=pr["lengths"], page_size=pr["page_size"], num_splits=pr["num_splits"])
    got = mem.counts.as_dict()
    for key in ("reads", "writes", "read_bytes", "write_bytes"):
        got[key] = {k: v for k, v in got[key].items() if v}
    assert got == tr.as_dict(), pr


def test_every_split_count_gives_the_same_attention():
    """S = 1 (FA2 over the cache) .. S past the blocks (empty splits): one answer, to float32 rounding."""
    pr = dict(batch=2, heads=8, kv_heads=2, n_q=3, d=16, capacity=97, page_size=None, lengths=[97, 40],
              causal=True, block_q=16, block_k=8, num_splits=1, dtype=torch.float32, seed=5, spare_pages=0)
    inputs, o1, l1 = run(pr)
    for s in (2, 3, 5, 13, 40):
        _, o, lse = run(dict(pr, num_splits=s))
        assert torch.allclose(o, o1, atol=1e-6) and torch.allclose(lse, l1, atol=1e-6), s
    assert_exact_attention(inputs, o1, l1, pr)


def test_empty_and_one_token_caches():
    pr = dict(batch=3, heads=4, kv_heads=1, n_q=2, d=8, capacity=32, page_size=4, lengths=[0, 1, 32], causal=True,
              block_q=8, block_k=8, num_splits=3, dtype=torch.float32, seed=1, spare_pages=1)
    inputs, o, lse = run(pr)
    assert torch.isneginf(lse[0]).all() and (o[0] == 0).all()
    # one token, causal, Nq = 2: query 0 sees t <= 0 + 1 - 2 = -1 (nothing), query 1 sees position 0
    assert torch.isneginf(lse[1, :, 0]).all() and torch.isfinite(lse[1, :, 1]).all()
    assert_exact_attention(inputs, o, lse, pr)


def test_gqa_reads_each_kv_byte_once_at_decode():
    """Nq = 1, g = 8 packed into one tile: K and V read exactly L_b·d per kv head, whatever S; Q once per
    nonempty split; the partials written and read once each."""
    b, hk, g, d, n = 2, 2, 8, 16, 200
    q = torch.randn(b, hk * g, 1, d)
    k, v = torch.randn(b, hk, n, d), torch.randn(b, hk, n, d)
    mem = Memory()
    SPLIT_KV.forward(q, k, v, num_splits=4, block_q=64, block_k=16, mem=mem)
    c = mem.counts
    assert c.reads["K"] == c.reads["V"] == b * hk * n * d
    assert c.reads["Q"] == 4 * b * hk * g * d
    assert c.writes["O_split"] == c.reads["O_split"] == 4 * b * hk * g * d
    assert c.read_bytes["O_split"] == 4 * c.reads["O_split"]  # float32 partials


def test_default_splits_fill_the_sms():
    """B·H_kv·⌈g·Nq/Br⌉ CTAs; S = ⌈2·132 / CTAs⌉ (counting/split_rule.py, the kernels' rule), no more than the
    cache's blocks, 1 when the grid fills the GPU."""
    assert decode.default_num_splits(1, 8, 8, 131072, 64, 128) == math.ceil(264 / 8)
    assert decode.default_num_splits(4, 8, 8, 131072, 16, 128) == math.ceil(264 / 32)
    assert decode.default_num_splits(1, 8, 8, 200, 64, 128) == 2  # only 2 blocks of 128
    assert decode.default_num_splits(16, 32, 4096, 4096, 64, 128) == 1  # training: 16·32·64 CTAs
    assert decode.default_num_splits(1, 8, 8, 0, 64, 128) == 1
    # paged: a chunk is whole pages too (lcm(Bc, page_size)); the launch drops trailing empty splits
    assert decode.split_chunk(1000, 3, 64, 256) == 512 and decode.split_chunk(1000, 3, 64) == 384
    assert decode.split_chunk(0, 3, 64) == 64
    assert decode.used_splits(1000, 3, 64, 256) == 2 and decode.used_splits(1000, 3, 64) == 3
    assert decode.used_splits(0, 7, 64) == 1


def test_training_shapes_are_fa2_without_splits():
    """On a full B·H grid S = 1: split_kv is FA2 over the cache, the same o, lse and the same K/V traffic."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 32, 40, 8) for _ in range(3))
    m1, m2 = Memory(), Memory()
    o1, l1 = SPLIT_KV.forward(q, k, v, block_q=16, block_k=16, mem=m1)
    o2, l2 = VARIANTS["fa2"].forward(q, k, v, block_q=16, block_k=16, mem=m2)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    assert m1.counts.as_dict() == m2.counts.as_dict()


def _qkv(b=2, h=4, hk=2, n_q=1, n=16, d=8, pages=None, page_size=4):
    q = torch.randn(b, h, n_q, d)
    if pages is None:
        return q, torch.randn(b, hk, n, d), torch.randn(b, hk, n, d)
    return q, torch.randn(pages, hk, page_size, d), torch.randn(pages, hk, page_size, d)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(cache_seqlens=torch.tensor([3, 17])), ValueError, r"cache_seqlens\[1\] = 17 is over"),
    (dict(cache_seqlens=torch.tensor([3, -1])), ValueError, "negative"),
    (dict(cache_seqlens=torch.tensor([3.0, 1.0])), TypeError, "int32 or int64"),
    (dict(cache_seqlens=torch.tensor([3])), ValueError, "B = 2 entries"),
    (dict(cache_seqlens=[3, 4]), TypeError, "torch.Tensor"),
    (dict(num_splits=0), ValueError, "num_splits"),
    (dict(num_splits=2.5), ValueError, "num_splits"),
])
def test_bad_contiguous_inputs_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        SPLIT_KV.forward(*_qkv(), **kwargs)


def test_gqa_needs_h_kv_dividing_h():
    q, k, v = _qkv(h=6, hk=4)
    with pytest.raises(ValueError, match="H_kv must divide H"):
        SPLIT_KV.forward(q, k, v)


@pytest.mark.parametrize("table,lengths,error,match", [
    (torch.tensor([[0, 1], [2, 9]], dtype=torch.int32), [8, 8], ValueError, r"block_table\[1, 1\] = 9"),
    (torch.tensor([[0, -1], [2, 3]], dtype=torch.int32), [8, 8], ValueError, r"block_table\[0, 1\] = -1"),
    (torch.tensor([[0, 1], [2, 3]], dtype=torch.int16), [8, 8], TypeError, "int32 or int64"),
    (torch.tensor([[0., 1.], [2., 3.]]), [8, 8], TypeError, "int32 or int64"),
    (torch.tensor([0, 1, 2, 3], dtype=torch.int32), [8, 8], ValueError, "shape"),
    (torch.tensor([[0, 1]], dtype=torch.int32), [8, 8], ValueError, "shape"),
    (torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), [8, 9], ValueError, "capacity"),
    (torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), None, ValueError, "needs cache_seqlens"),
])
def test_bad_block_tables_refused(table, lengths, error, match):
    q, k, v = _qkv(pages=4)
    seqlens = None if lengths is None else torch.tensor(lengths)
    with pytest.raises(error, match=match):
        SPLIT_KV.forward(q, k, v, cache_seqlens=seqlens, block_table=table)


def test_padding_entries_past_a_sequence_are_not_read():
    """A sequence of 3 positions (page_size 4) reads one page: the padding entry -1 after it is allowed."""
    q, k, v = _qkv(pages=4)
    for dtype in (torch.int32, torch.int64):  # int32 or int64 tables and lengths
        table = torch.tensor([[2, -1], [0, 1]], dtype=dtype)
        seqlens = torch.tensor([3, 8], dtype=dtype)
        o, lse = SPLIT_KV.forward(q, k, v, cache_seqlens=seqlens, block_table=table, num_splits=2)
        ref_o, _ = decode_reference(q, k, v, cache_seqlens=seqlens, block_table=table)
        assert torch.allclose(o.double(), ref_o, atol=1e-5)


def test_closed_form_refuses_decode_options_for_other_variants():
    with pytest.raises(ValueError, match="apply to split_kv only"):
        cf.counts("fa2", 1, 8, 1, 1024, 64, kv_heads=2)
    with pytest.raises(ValueError, match="H_kv must divide H"):
        cf.counts("split_kv", 1, 8, 1, 1024, 64, kv_heads=3)
    with pytest.raises(ValueError, match="over the"):
        cf.counts("split_kv", 2, 8, 1, 1024, 64, cache_seqlens=[10, 2000])


def test_closed_form_at_131k_is_fast_and_memory_bound():
    """Nq = 1 against 128k positions, 64 query heads on 8 kv heads, pages of 256: the K/V bytes dominate and the
    arithmetic intensity is about g·Nq FLOP per K/V element... far below the H100's ridge."""
    tr = cf.counts("split_kv", 1, 64, 1, 131072, 128, dtype="bf16", block_q=64, block_k=128, kv_heads=8,
                   page_size=256)
    kv = tr.read_bytes["K"] + tr.read_bytes["V"]
    assert kv == 2 * 8 * 131072 * 128 * 2 and kv / tr.hbm_bytes > 0.99
    # 33 asked for (⌈264 / 8⌉): chunks of 4096 positions (16 pages of 256), so 32 run
    assert tr.decode["num_splits"] == decode.used_splits(131072, math.ceil(264 / 8), 128, 256) == 32
    assert tr.decode["group"] == 8
    assert tr.flops["matmul"] / kv == pytest.approx(4 * 8 / (2 * 2))  # 4·g·d FLOPs per 2·d·2 bytes of K and V
