"""gpumodel/decode_model.py's copies of the decode kernels' tiles (gpumodel may not import kernels: the layers in
pyproject.toml) held equal to the launchers' own: Bc, stages, rows per CTA, shared memory, the launches, and the CTAs
per SM that follow (two at d <= 128, one at d = 256 for split_kv_fast: docs/decoding.md, the split rule)."""
from __future__ import annotations

import pytest

from counting.gpus import get_gpu
from gpumodel import decode_model


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fast_tiles_are_the_launchers(d, dtype):
    from kernels import _decode, split_kv_fast

    desc = decode_model.describe("split_kv_fast", d, dtype)
    assert (desc.block_q, desc.block_k, desc.kv_stages) == (_decode.ROWS, split_kv_fast.block_k(d), split_kv_fast.STAGES)
    assert desc.smem_bytes == split_kv_fast.smem_bytes(d) and desc.launches == 1
    assert decode_model.HEAD_DIMS["split_kv_fast"] == split_kv_fast.HEAD_DIMS
    assert decode_model.ctas_per_sm(desc, get_gpu("h200")) == (1 if d == 256 else 2)


@pytest.mark.parametrize("d", [16, 64, 128, 256])
def test_teaching_tiles_are_the_launchers(d):
    from kernels import _decode, split_kv

    desc = decode_model.describe("split_kv", d, "fp32")
    assert (desc.block_q, desc.block_k) == (_decode.ROWS, split_kv.BLOCK_K)
    assert desc.smem_bytes == split_kv.shared_bytes(d) and desc.launches == len(split_kv.KERNELS_CU)
