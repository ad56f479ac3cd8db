"""The decode kernels (kernels/split_kv*.py, issue 44) against the reference variants/split_kv.py: one contract, so
one answer on contiguous and paged caches, GQA groups, per-sequence lengths (0 and 1 included), causal, splits that
do not divide the cache; and the same refusals. GPU-marked; skipped until the kernels are in the tree.

    pytest -q tests/test_split_kv_kernels_vs_reference_gpu.py
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from tests.test_split_kv import caches, make
from variants import VARIANTS, decode_reference

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2}


def _kernel(name):
    import importlib

    try:
        return importlib.import_module(f"kernels.{name}")
    except ModuleNotFoundError:
        pytest.skip(f"kernels/{name}.py is not in this tree yet")


@pytest.mark.parametrize("name", ["split_kv_fast", "split_kv"])
@settings(max_examples=40, deadline=None)
@given(pr=caches())
def test_kernel_equals_the_reference(name, pr):
    mod = _kernel(name)
    pr = dict(pr, dtype=torch.float16 if pr["dtype"] == torch.float32 else pr["dtype"])
    if pr["d"] not in getattr(mod, "HEAD_DIMS", (pr["d"],)):
        pr = dict(pr, d=64)
    if pr["dtype"] not in getattr(mod, "DTYPES", (pr["dtype"],)):
        pr = dict(pr, dtype=mod.DTYPES[0])
    q, k, v, seqlens, table = make(pr, device="cuda")
    o, lse = mod.forward(q, k, v, causal=pr["causal"], cache_seqlens=seqlens, block_table=table,
                         num_splits=pr["num_splits"])
    ref_o, ref_lse = VARIANTS["split_kv"].forward(q.cpu(), k.cpu(), v.cpu(), causal=pr["causal"],
                                                  cache_seqlens=seqlens.cpu(),
                                                  block_table=None if table is None else table.cpu())
    o64, lse64 = decode_reference(q.cpu(), k.cpu(), v.cpu(), causal=pr["causal"], cache_seqlens=seqlens.cpu(),
                                  block_table=None if table is None else table.cpu())
    empty = torch.isneginf(lse64)
    assert torch.equal(torch.isneginf(lse.cpu()), empty) and (o.cpu()[empty] == 0).all(), pr
    tol = TOL[q.dtype] * max(1.0, v.abs().max().item())
    assert (o.cpu().double() - o64).abs().max().item() <= tol, pr
    assert (o.cpu().double() - ref_o.double()).abs().max().item() <= tol, pr
    seen = ~empty
    if seen.any():
        assert (lse.cpu().double() - lse64)[seen].abs().max().item() <= TOL[q.dtype] * max(1.0, lse64[seen].abs().max()), pr


@pytest.mark.parametrize("name", ["split_kv_fast", "split_kv"])
def test_kernel_refuses_what_the_reference_refuses(name):
    mod = _kernel(name)
    q = torch.randn(2, 4, 1, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(4, 2, 16, 64, device="cuda", dtype=torch.float16)
    bad = torch.tensor([[0, 9], [1, 2]], dtype=torch.int32, device="cuda")
    lens = torch.tensor([32, 32], dtype=torch.int32, device="cuda")
    for fn in (mod.forward, VARIANTS["split_kv"].forward):
        args = (q, k, k) if fn is mod.forward else (q.cpu(), k.cpu(), k.cpu())
        with pytest.raises(ValueError):
            fn(*args, cache_seqlens=lens if fn is mod.forward else lens.cpu(),
               block_table=bad if fn is mod.forward else bad.cpu())
