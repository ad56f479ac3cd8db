"""CPU checks of fa2_wgmma's layouts and head dims (no GPU): the 4-D tensor-map arguments of strided
views (what cuTensorMapEncodeTiled receives), the input rules for strides, head counts (GQA) and d, the
builds per head dim (shared memory, knobs), the per-call plan cache, and the sanitizer shapes.
The NVRTC compile of every build (no spills) is tests/test_kernels_compile.py's compile_configs() check.
cuTensorMapEncodeTiled itself needs libcuda (the driver), which a machine without a GPU lacks, so the
encoding is exercised by the GPU tests (tests/test_kernels_layouts.py); here its arguments are checked."""
from __future__ import annotations

import pytest
import torch

from kernels import fa2_wgmma, layouts, tma

SMEM_LIMIT = 227 * 1024  # H100/H200 opt-in dynamic shared memory per block


def _args(t, box_rows=128, ptr=0):
    return tma.tensor_map_args(t.shape, t.stride(), t.element_size(), ptr, box_rows, name="q")


@pytest.mark.parametrize("d", fa2_wgmma.HEAD_DIMS)
def test_contiguous_map_is_the_old_3d_one_split(d):
    b, h, n = 2, 3, 70
    dims, strides, box = _args(torch.empty(b, h, n, d, dtype=torch.float16))
    assert dims == [d, n, h, b] and box == [64, 128, 1, 1]
    assert strides == [d * 2, n * d * 2, h * n * d * 2]  # (d, N, B*H) with B*H split into H and B


@pytest.mark.parametrize("d", fa2_wgmma.HEAD_DIMS)
def test_bnhd_view_is_described_without_a_copy(d):
    b, n, h = 2, 37, 5
    t = torch.empty(b, n, h, d, dtype=torch.bfloat16).transpose(1, 2)  # (B, H, N, d) view
    assert not t.is_contiguous()
    dims, strides, _ = _args(t)
    es = 2
    assert dims == [d, n, h, b]
    assert strides == [h * d * es, d * es, n * h * d * es]  # row, head, batch bytes of the (B, N, H, d) buffer
    # every element the map addresses is the view's element: offset of (b, h, n, c) in bytes
    for (bi, hi, ni) in ((1, 4, 36), (0, 2, 5)):
        assert ni * strides[0] + hi * strides[1] + bi * strides[2] == es * (
            bi * t.stride(0) + hi * t.stride(1) + ni * t.stride(2))


def test_size_one_dims_get_a_legal_stride():
    t = torch.empty(1, 40, 1, 64, dtype=torch.float16).transpose(1, 2)  # B = H = 1: any stride torch likes
    dims, strides, _ = _args(t)
    assert dims == [64, 40, 1, 1] and all(s % 16 == 0 and s > 0 for s in strides)


@pytest.mark.parametrize("make,match", [
    (lambda: torch.empty(1, 2, 64, 68, dtype=torch.float16)[..., :64], "N stride is 68 elements = 136 bytes"),
    (lambda: torch.empty(1, 64, 4, 60, dtype=torch.float16)[..., :56].transpose(1, 2), "H stride is 60 elements = 120"),
    (lambda: torch.empty(1, 1, 64, 64, dtype=torch.float16).expand(2, 4, 64, 64), "broadcast"),
    (lambda: torch.empty(1, 2, 64, 64, dtype=torch.float16).transpose(2, 3), "stride 1"),
])
def test_maps_tma_cannot_read_are_refused_naming_the_stride(make, match):
    with pytest.raises(tma.LayoutError, match=match):
        _args(make())


def test_unaligned_address_is_refused():
    with pytest.raises(ValueError, match="16-byte aligned address"):
        _args(torch.empty(1, 1, 8, 64, dtype=torch.float16), ptr=0x1008)


def _qkv(h=4, h_kv=4, d=64, n_q=33, n_k=47):
    return (torch.empty(2, h, n_q, d, dtype=torch.float16), torch.empty(2, h_kv, n_k, d, dtype=torch.float16),
            torch.empty(2, h_kv, n_k, d, dtype=torch.float16))


@pytest.mark.parametrize("h_kv", [1, 2, 4])
def test_grouped_query_heads_pass_the_rules(h_kv):
    layouts.layout_rules(*_qkv(h_kv=h_kv), fa2_wgmma.HEAD_DIMS)


@pytest.mark.parametrize("kw,match", [
    (dict(h=4, h_kv=3), "H_kv dividing H: q has H = 4 heads, k and v have H_kv = 3"),
    (dict(h=2, h_kv=4), "H_kv dividing H"),
    (dict(d=80), r"head dim d=80 unsupported; this kernel takes d in \[64, 96, 128, 256\]"),
])
def test_bad_heads_and_d_get_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as exc:
        layouts.layout_rules(*_qkv(**kw), fa2_wgmma.HEAD_DIMS)
    assert "\n" not in str(exc.value)


def test_other_mismatches_get_one_line():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="same number of heads"):
        layouts.layout_rules(q, k, v[:, :2], fa2_wgmma.HEAD_DIMS)
    with pytest.raises(ValueError, match="same sequence length"):
        layouts.layout_rules(q, k, v[:, :, :5], fa2_wgmma.HEAD_DIMS)
    with pytest.raises(ValueError, match="unit stride in its last dimension"):
        layouts.layout_rules(q, k, torch.empty(2, 4, 64, 47, dtype=torch.float16).transpose(2, 3),
                             fa2_wgmma.HEAD_DIMS)


def test_cpu_tensors_still_get_the_shared_message():
    q = torch.randn(1, 1, 8, 64)
    with pytest.raises(ValueError, match="CUDA tensors"):
        fa2_wgmma.forward(q, q, q)


@pytest.mark.parametrize("d", fa2_wgmma.HEAD_DIMS)
def test_every_build_fits_shared_memory(d):
    builds = [fa2_wgmma.defines_for(d, bf16) for bf16 in (0, 1)]
    builds += [fa2_wgmma.defines_for(d, 0, c) for c in fa2_wgmma.named_builds(d).values()]
    for defs in builds:
        assert fa2_wgmma.smem_bytes(defs) <= SMEM_LIMIT, defs
        kv_tiles = 2 * defs.get("STAGES", 2)  # a K and a V tile per ring slot (ring1: one slot)
        assert fa2_wgmma.smem_bytes(defs) >= (fa2_wgmma.block_m(defs) + kv_tiles * defs["BLOCK_N"]) * d * 2


def test_new_head_dims_have_tma_builds_only():
    assert {96, 256} <= set(fa2_wgmma.HEAD_DIMS)
    for d in (96, 256):
        assert fa2_wgmma.defines_for(d, 0)["TMA"] == 1
        with pytest.raises(ValueError, match="needs a TMA build"):
            fa2_wgmma.defines_for(d, 0, dict(BLOCK_N=128, NWG=2))
    with pytest.raises(ValueError, match="supports head dims"):
        fa2_wgmma.defines_for(80, 0)
    with pytest.raises(ValueError, match="PV_N=112"):
        fa2_wgmma.defines_for(96, 0, dict(TMA=1, BLOCK_N=128, NWG=2, PV_N=112))
    assert fa2_wgmma.padded_d(96) == 128 and fa2_wgmma.padded_d(256) == 256


@pytest.mark.parametrize("d", fa2_wgmma.HEAD_DIMS)
def test_describe_matches_the_build(d):
    for dtype in ("fp16", "bf16"):
        desc = fa2_wgmma.describe(d, dtype)
        defs = fa2_wgmma.defines_for(d, dtype == "bf16")
        assert desc["block_k"] == defs["BLOCK_N"] and desc["block_q"] == fa2_wgmma.block_m(defs)
        assert desc["smem_bytes"] == fa2_wgmma.smem_bytes(defs)


def test_the_launch_plan_is_built_once():
    a = fa2_wgmma._plan(256, True, None)
    assert fa2_wgmma._plan(256, True, None) is a
    assert fa2_wgmma._plan(256, True, dict(fa2_wgmma.CONFIGS[256])) is not a  # keyed by the config too
    defs, _, kernel, block, smem, bm, bn, tma_build = a
    assert kernel == fa2_wgmma.KERNEL_TMA and tma_build and block == (384, 1, 1) and (bm, bn) == (128, 80)


def test_sanitizer_shapes_reuse_every_ring_slot():
    """bench/sanitize.py runs fa2_wgmma on key loops that reuse each K/V slot several times, with
    several Q blocks per head, at every head dim (issue 14 item 4)."""
    from bench import sanitize

    shapes = sanitize.shapes_for("fa2_wgmma")
    for d in fa2_wgmma.HEAD_DIMS:
        defs = fa2_wgmma.defines_for(d, 0)
        deep = [s for s in shapes if s[4] == d and s[3] >= 3 * defs["STAGES"] * defs["BLOCK_N"]
                and s[2] >= 2 * fa2_wgmma.block_m(defs)]
        assert deep, f"no sanitizer shape at d={d} reuses each of the {defs['STAGES']} ring slots 3 times"
    assert any(len(s) > 6 and s[6] not in (None, s[1]) for s in shapes), "no grouped-query shape"


def test_the_registry_offers_every_head_dim():
    from kernels import KERNELS

    spec = KERNELS["fa2_wgmma"]
    assert all(spec.supports_head_dim(d) for d in fa2_wgmma.HEAD_DIMS)
    assert not spec.supports_head_dim(80)


def _kernel_softmax(q, k, v, causal, scale):
    """The tensor-core forwards' arithmetic in float64, one tile: S = Q K^T masked to -inf unscaled, m the
    row max of the unscaled S, P = exp2(S scale log2e - m scale log2e) (tc_fa2.cuh mask_s / exp_row)."""
    import math

    s = q.double() @ k.double().transpose(-1, -2)
    n_q, n_k = s.shape[-2:]
    if causal:
        rows, cols = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
        s = s.masked_fill(cols > rows + n_k - n_q, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isneginf(m)
    m = torch.where(empty, torch.zeros_like(m), m)
    log2e = 1 / math.log(2)
    p = torch.exp2(s * (scale * log2e) - m * (scale * log2e))
    l = p.sum(-1, keepdim=True)
    o = torch.where(empty, torch.zeros_like(p @ v.double()), (p @ v.double()) / l)
    lse = torch.where(empty, torch.full_like(m, float("-inf")), m * scale + torch.log(l)).squeeze(-1)
    return o, lse


@pytest.mark.parametrize("scale", [-0.7, -1e-3, 0.0, 0.3])
def test_positive_scale_keeps_the_scores_for_the_kernels_mask(scale):
    """scale <= 0: the kernels' mask-then-scale arithmetic goes wrong on the raw inputs (a hidden -inf
    times a negative scale is +inf, times 0 is NaN) and is exact on positive_scale's (-q, -scale) / (0, 1)."""
    from variants import attention_reference

    torch.manual_seed(0)
    q = torch.randn(1, 2, 9, 16, dtype=torch.float16)
    k, v = torch.randn(1, 2, 6, 16, dtype=torch.float16), torch.randn(1, 2, 6, 16, dtype=torch.float16)
    ref_o, ref_lse = attention_reference(q, k, v, causal=True, scale=scale)  # rows 0-2 see no key
    q2, scale2 = layouts.positive_scale(q, scale)
    assert scale2 > 0 and q2.dtype == q.dtype and q2.stride() == q.stride()
    o, lse = _kernel_softmax(q2, k, v, True, scale2)
    assert torch.allclose(o, ref_o, atol=1e-12) and torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    seen = ~torch.isneginf(ref_lse)
    assert torch.allclose(lse[seen], ref_lse[seen], atol=1e-12)
    raw_o, _ = _kernel_softmax(q, k, v, True, scale)
    assert (scale > 0) == bool(torch.isfinite(raw_o).all() and torch.allclose(raw_o, ref_o, atol=1e-12))


def test_positive_scale_keeps_a_strided_view_strided():
    q = torch.randn(2, 7, 3, 64, dtype=torch.bfloat16).transpose(1, 2)  # (B, N, H, d) viewed as (B, H, N, d)
    for scale in (-0.5, 0.0):
        q2, _ = layouts.positive_scale(q, scale)
        assert q2.stride() == q.stride() and q2.shape == q.shape
