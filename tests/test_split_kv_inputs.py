"""CPU tests of the split-KV decode launchers (kernels/split_kv.py, kernels/split_kv_fast.py): every refusal is raised
before any launch, with a message naming what is accepted (CPU tensors reach each check: the device checks come last),
and the split rule (counting/split_rule.py). One contract: the launchers raise counting/decode.py's refusals, with the
reference's messages (int32 or int64 indices; block-table padding past a sequence's pages accepted), then their own
limits, then the device."""
from __future__ import annotations

import pytest
import torch

from counting import decode, split_rule
from kernels import _decode, split_kv, split_kv_fast
from variants import split_kv as variants_split_kv

LAUNCHERS = [split_kv, split_kv_fast]
I32 = torch.int32


def contiguous(b=2, h=8, h_kv=2, n_q=1, n_k=40, d=64, dtype=torch.float16):
    return (torch.zeros(b, h, n_q, d, dtype=dtype), torch.zeros(b, h_kv, n_k, d, dtype=dtype),
            torch.zeros(b, h_kv, n_k, d, dtype=dtype))


def paged(b=2, h=8, h_kv=2, n_q=1, pages=6, page=16, max_pages=3, d=64, dtype=torch.float16):
    q = torch.zeros(b, h, n_q, d, dtype=dtype)
    k = torch.zeros(pages, h_kv, page, d, dtype=dtype)
    table = torch.arange(b * max_pages, dtype=I32).reshape(b, max_pages) % pages
    return q, k, k.clone(), table, torch.full((b,), page * max_pages, dtype=I32)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
def test_valid_cpu_inputs_reach_the_device_check(mod):
    q, k, v = contiguous()
    with pytest.raises(ValueError, match="q is on cpu; this CUDA kernel needs every tensor on one GPU"):
        mod.forward(q, k, v)
    q, k, v, table, lens = paged()
    with pytest.raises(ValueError, match="is on cpu"):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens, causal=True, num_splits=3)
    lens[0] = 49  # an in-place write after a checked call is checked again
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] = 49 is over the block table's capacity"):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
def test_padding_past_a_sequence_and_int64_indices_accepted_as_by_the_reference(mod):
    """One contract: entries past a sequence's ⌈L_b / page_size⌉ pages are padding (here -1, and a page index too large
    for int32), never read nor checked; int32 and int64 tables and lengths. The launchers' checks pass (the device
    check, last, is what stops a CPU call) and the reference computes the same attention."""
    q, k, v, table, _ = paged()
    lens = torch.tensor([17, 0], dtype=I32)  # sequence 0 reads entries 0..1, sequence 1 none
    table[0, 2], table[1] = -1, -1
    for tab, sl in ((table, lens), (table.long(), lens.long()), (table.long(), lens), (table, lens.long())):
        with pytest.raises(ValueError, match="q is on cpu"):
            mod.forward(q, k, v, block_table=tab, cache_seqlens=sl)
        variants_split_kv.forward(q.float(), k.float(), v.float(), block_table=tab, cache_seqlens=sl)
    wide = table.long()
    wide[0, 2] = 2 ** 40  # past int32: wraps in the kernels' cast, never read
    with pytest.raises(ValueError, match="q is on cpu"):
        mod.forward(q, k, v, block_table=wide, cache_seqlens=lens)
    lens[0] = 33  # now entry 2 is read: refused, by the launchers and the reference alike
    for check in (lambda: mod.forward(q, k, v, block_table=table, cache_seqlens=lens),
                  lambda: variants_split_kv.forward(q.float(), k.float(), v.float(), block_table=table,
                                                    cache_seqlens=lens)):
        with pytest.raises(ValueError, match=r"block_table\[0, 2\] = -1 is not a page index: the cache has pages "
                                             r"0..5 \(sequence 0 reads its first 3 entries\)"):
            check()


def test_index_tensors_reach_the_kernels_as_contiguous_int32():
    q, k, v, table, lens = paged()
    p = _decode.check("split_kv", q, k, v, causal=False, scale=None, cache_seqlens=lens.long(),
                      block_table=table.long().t().contiguous().t(), num_splits=None, dtypes=split_kv.DTYPES,
                      head_dims=split_kv.HEAD_DIMS, block_k=split_kv.BLOCK_K, cuda=False)
    sl = _decode.seqlens_or_full(lens.long(), p, q.device)
    tab = _decode.table_or_dummy(table.long().t().contiguous().t(), q.device)
    for got, want in ((sl, lens), (tab, table)):
        assert got.dtype == I32 and got.is_contiguous() and torch.equal(got, want)
    assert _decode.table_or_dummy(table, q.device) is table  # int32 and contiguous: passed as is


def test_the_host_read_is_remembered_per_version(monkeypatch):
    """On CUDA the index tensors are read to the host once per version (a sync avoided per decode step); CPU tensors
    are read every call (no sync to save). Here CPU stands in for CUDA."""
    monkeypatch.setattr(decode, "MEMO_DEVICES", ("cpu",))
    reads = []
    read = lambda t: reads.append(1) or t.tolist()  # noqa: E731
    lens = torch.tensor([3, 4], dtype=I32)
    assert decode._memo(lens, None, read) == decode._memo(lens, None, read) == [3, 4] and len(reads) == 1
    lens[1] = 5  # an in-place write bumps the version: read again
    assert decode._memo(lens, None, read) == [3, 5] and len(reads) == 2
    assert decode._memo(lens, 7, read) == [3, 5] and len(reads) == 3  # another key (num_pages): read again
    with torch.inference_mode():  # no version counter: read every call
        frozen = torch.tensor([1], dtype=I32)
        decode._memo(frozen, None, read), decode._memo(frozen, None, read)
    assert len(reads) == 5
    q, k, v, table, lens = paged()
    with pytest.raises(ValueError, match="is on cpu"):
        split_kv.forward(q, k, v, block_table=table, cache_seqlens=lens)
    table[1, 2] = 6
    with pytest.raises(ValueError, match=r"block_table\[1, 2\] = 6 is not a page index"):
        split_kv.forward(q, k, v, block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("case, exc, match", [
    ("table_high", ValueError, r"block_table\[1, 2\] = 6 is not a page index: the cache has pages 0..5"),
    ("table_negative", ValueError, r"block_table\[0, 0\] = -1 is not a page index"),
    ("table_dtype", TypeError, "block_table must be an int32 or int64 tensor, got int16"),
    ("table_shape", ValueError, r"block_table must have shape \(B, max_pages\) = \(2, max_pages\)"),
    ("table_1d", ValueError, r"block_table must have shape"),
    ("paged_no_lens", ValueError, "a paged cache .* needs cache_seqlens"),
    ("lens_over", ValueError, r"cache_seqlens\[1\] = 49 is over the block table's capacity .* of 48 positions"),
    ("lens_negative", ValueError, r"cache_seqlens\[0\] = -1 is negative"),
    ("lens_shape", ValueError, r"cache_seqlens must have B = 2 entries"),
    ("lens_dtype", TypeError, "cache_seqlens must be an int32 or int64 tensor, got float32"),
])
def test_paged_refusals(mod, case, exc, match):
    """The contract's refusals (counting/decode.py's messages), raised on CPU tensors: before the device check."""
    q, k, v, table, lens = paged()
    if case == "table_high":
        table[1, 2] = 6
    elif case == "table_negative":
        table[0, 0] = -1
    elif case == "table_dtype":
        table = table.short()
    elif case == "table_shape":
        table = table[:1]
    elif case == "table_1d":
        table = table.flatten()
    elif case == "paged_no_lens":
        lens = None
    elif case == "lens_over":
        lens[1] = 49
    elif case == "lens_negative":
        lens[0] = -1
    elif case == "lens_shape":
        lens = lens[:1]
    elif case == "lens_dtype":
        lens = lens.float()
    with pytest.raises(exc, match=match):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens)
    with pytest.raises(exc, match=match):  # the reference: the same refusal, the same message
        variants_split_kv.forward(q.float(), k.float(), v.float(), block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
def test_contiguous_refusals(mod):
    q, k, v = contiguous(h=8, h_kv=3)
    with pytest.raises(ValueError, match="q has H = 8 heads, k and v have H_kv = 3; H_kv must divide H"):
        mod.forward(q, k, v)
    q, k, v = contiguous()
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = 41 is over the cache's Nk of 40 positions"):
        mod.forward(q, k, v, cache_seqlens=torch.tensor([3, 41], dtype=I32))
    with pytest.raises(ValueError, match=r"batch mismatch: q has 2, k and v have 1 \(a paged cache needs block_table"):
        mod.forward(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="k and v must have the same sequence length"):
        mod.forward(q, k, v[:, :, :7])
    with pytest.raises(ValueError, match="q must have rank 4"):
        mod.forward(q[0], k, v)
    with pytest.raises(TypeError, match="q, k, v must share a dtype"):
        mod.forward(q, k.bfloat16(), v)
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        mod.forward(q, k.numpy(), v)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="num_splits must be an integer >= 1"):
            mod.forward(q, k, v, num_splits=bad)
    with pytest.raises(TypeError, match="causal must be a bool"):
        mod.forward(q, k, v, causal=1)
    with pytest.raises(ValueError, match="scale must be a finite real"):
        mod.forward(q, k, v, scale=float("nan"))


def test_fast_kernel_refusals():
    q, k, v = contiguous(n_q=65)
    with pytest.raises(ValueError, match="Nq=65 query rows; this kernel takes 1..64"):
        split_kv_fast.forward(q, k, v)
    q, k, v = contiguous(n_q=64)
    with pytest.raises(ValueError, match="is on cpu"):  # 64 is in range
        split_kv_fast.forward(q, k, v)
    q, k, v = contiguous(d=96)
    with pytest.raises(ValueError, match=r"head dim d=96 unsupported; this kernel takes d in \(64, 128, 256\)"):
        split_kv_fast.forward(q, k, v)
    q, k, v = contiguous(dtype=torch.float32)
    with pytest.raises(TypeError, match="q has dtype float32; supported: float16, bfloat16"):
        split_kv_fast.forward(q, k, v)


def test_teaching_kernel_takes_fp32_any_nq_and_d_up_to_256():
    for kw in (dict(dtype=torch.float32, n_q=100, d=96), dict(d=256), dict(d=1, dtype=torch.bfloat16)):
        q, k, v = contiguous(**kw)
        with pytest.raises(ValueError, match="is on cpu"):
            split_kv.forward(q, k, v)
    q, k, v = contiguous(d=257)
    with pytest.raises(ValueError, match="head dim d=257 unsupported"):
        split_kv.forward(q, k, v)
    q, k, v = contiguous(dtype=torch.float64)
    with pytest.raises(TypeError, match="q has dtype float64; supported: float32, float16, bfloat16"):
        split_kv.forward(q, k, v)


def test_split_rule():
    # H100: 132 SMs; B = 1, H_kv = 8, one row tile: ceil(264 / 8) = 33 splits if the cache has 33 tiles
    assert split_rule.num_splits(1, 8, 1, 32768, 64) == 33
    assert split_rule.num_splits(1, 8, 1, 64 * 5, 64) == 5  # capped by the Bc-chunks of the longest sequence
    assert split_rule.num_splits(64, 8, 1, 32768, 64) == 1  # 512 CTAs already fill the SMs
    assert split_rule.num_splits(8, 8, 1, 32768, 64) == 5   # ceil(264 / 64)
    assert split_rule.num_splits(1, 1, 1, 0, 64) == 1       # an empty cache still launches one split
    assert split_rule.num_splits(2, 8, 2, 10 ** 6, 64, sms=78) == 5
    with pytest.raises(ValueError, match="row_tiles must be a positive int"):
        split_rule.num_splits(1, 8, 0, 100, 64)
    # chunks: ceil(L / S) up to a multiple of Bc, and of the page size (lcm) for a paged cache
    assert split_rule.chunk_len(1000, 3, 64) == 384
    assert split_rule.chunk_len(1000, 3, 64, page_size=48) == 384  # lcm(64, 48) = 192
    assert split_rule.chunk_len(1000, 3, 64, page_size=256) == 512
    assert split_rule.chunk_len(0, 1, 64) == 64
    assert split_rule.used_splits(1000, 384) == 3 and split_rule.used_splits(1000, 512) == 2
    assert split_rule.used_splits(0, 64) == 1
