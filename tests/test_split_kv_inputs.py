"""CPU tests of the split-KV decode launchers (kernels/split_kv.py, kernels/split_kv_fast.py): every refusal is raised
before any launch, with a message naming what is accepted (CPU tensors reach each check: the device checks come last),
and the split rule (counting/split_rule.py)."""
from __future__ import annotations

import pytest
import torch

from counting import split_rule
from kernels import split_kv, split_kv_fast

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
    with pytest.raises(ValueError, match="is on cpu; this CUDA kernel needs every tensor on one GPU"):
        mod.forward(q, k, v)
    q, k, v, table, lens = paged()
    with pytest.raises(ValueError, match="is on cpu"):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens, causal=True, num_splits=3)
    lens[0] = 49  # an in-place write after a checked call is checked again (the range memo keys on the version)
    with pytest.raises(ValueError, match=r"cache_seqlens in \[48, 49\]"):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("case, exc, match", [
    ("table_high", ValueError, r"block_table holds page indices in \[0, 6\]; the cache has pages 0..5"),
    ("table_negative", ValueError, r"block_table holds page indices in \[-1, "),
    ("table_dtype", TypeError, "block_table must be int32, got torch.int64"),
    ("table_shape", ValueError, r"block_table must have shape \(B=2, max_pages >= 1\)"),
    ("table_1d", ValueError, r"block_table must have shape"),
    ("paged_no_lens", ValueError, "a paged cache .* needs cache_seqlens"),
    ("lens_over", ValueError, r"cache_seqlens in \[48, 49\]; each must be in 0..48"),
    ("lens_negative", ValueError, r"cache_seqlens in \[-1, "),
    ("lens_shape", ValueError, r"cache_seqlens must have shape \(B=2,\)"),
    ("lens_dtype", TypeError, "cache_seqlens must be int32"),
])
def test_paged_refusals(mod, case, exc, match):
    q, k, v, table, lens = paged()
    if case == "table_high":
        table[1, 2] = 6
    elif case == "table_negative":
        table[0, 0] = -1
    elif case == "table_dtype":
        table = table.long()
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
        lens = lens.long()
    with pytest.raises(exc, match=match):
        mod.forward(q, k, v, block_table=table, cache_seqlens=lens)


@pytest.mark.parametrize("mod", LAUNCHERS, ids=lambda m: m.__name__)
def test_contiguous_refusals(mod):
    q, k, v = contiguous(h=8, h_kv=3)
    with pytest.raises(ValueError, match="H=8 query heads is not a multiple of H_kv=3"):
        mod.forward(q, k, v)
    q, k, v = contiguous()
    with pytest.raises(ValueError, match=r"cache_seqlens in \[3, 41\]; each must be in 0..40"):
        mod.forward(q, k, v, cache_seqlens=torch.tensor([3, 41], dtype=I32))
    with pytest.raises(ValueError, match=r"must have B=2"):
        mod.forward(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="k and v must have one shape"):
        mod.forward(q, k, v[:, :, :7])
    with pytest.raises(ValueError, match="must be 4-D"):
        mod.forward(q[0], k, v)
    with pytest.raises(TypeError, match="q, k, v must share one dtype"):
        mod.forward(q, k.float(), v)
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        mod.forward(q, k.numpy(), v)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="num_splits must be a positive int or None"):
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
    with pytest.raises(TypeError, match="q has dtype torch.float32; this kernel takes torch.float16, torch.bfloat16"):
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
    with pytest.raises(TypeError, match="q has dtype torch.float64"):
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
