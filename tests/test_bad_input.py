"""Bad input gets a clear error that names the problem."""
from __future__ import annotations

import pytest
import torch

from counting import checks
from counting.memory import Memory
from variants import VARIANTS, attention, attention_reference

NAMES = list(VARIANTS)


def qkv(q=(1, 2, 8, 4), k=(1, 2, 8, 4), v=None, dtype=torch.float32):
    v = k if v is None else v
    return torch.randn(q).to(dtype), torch.randn(k).to(dtype), torch.randn(v).to(dtype)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shapes,match", [
    (((2, 2, 8, 4), (1, 2, 8, 4)), "batch mismatch"),
    (((1, 3, 8, 4), (1, 2, 8, 4)), "heads mismatch"),
    (((1, 2, 8, 5), (1, 2, 8, 4)), "head dim d mismatch"),
    (((2, 8, 4), (1, 2, 8, 4)), "rank 4"),
])
def test_shape_errors(name, shapes, match):
    with pytest.raises(ValueError, match=match):
        VARIANTS[name].forward(*qkv(*shapes))


@pytest.mark.parametrize("name", NAMES)
def test_k_v_length_mismatch(name):
    with pytest.raises(ValueError, match="same sequence length"):
        VARIANTS[name].forward(*qkv(k=(1, 2, 8, 4), v=(1, 2, 9, 4)))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("block", [0, -3, 2.5, True])
def test_non_positive_blocks(name, block):
    with pytest.raises(ValueError, match="block_q must be a positive integer"):
        VARIANTS[name].forward(*qkv(), block_q=block)
    with pytest.raises(ValueError, match="block_k must be a positive integer"):
        VARIANTS[name].forward(*qkv(), block_k=block)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_dtypes(name, dtype):
    q = torch.ones(1, 1, 4, 4, dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        VARIANTS[name].forward(q, q, q)


@pytest.mark.parametrize("name", NAMES)
def test_mixed_dtypes_and_bad_scale(name):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="share a dtype"):
        VARIANTS[name].forward(q, k.half(), v)
    with pytest.raises(ValueError, match="scale"):
        VARIANTS[name].forward(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        VARIANTS[name].forward(q.numpy(), k, v)
    with pytest.raises(TypeError, match="mem must be"):
        VARIANTS[name].forward(q, k, v, mem="counter")


def test_unknown_v_once_options():
    with pytest.raises(ValueError, match="unknown placement 'disk'.*auto, sram, hbm"):
        VARIANTS["v_once"].forward(*qkv(), placement="disk")
    with pytest.raises(ValueError, match="unknown rescale 'sometimes'.*eager, lazy"):
        VARIANTS["v_once"].forward(*qkv(), rescale="sometimes")


def test_bad_sram_capacity():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
            Memory(sram_bytes=bad)


def test_misaligned_out_is_refused_before_launch():
    """out=(o, lse) with o a contiguous view at an element offset: every tensor-core epilogue stores O in 16-byte vectors
    (a misaligned one is a sticky CUDA fault), so the shared output check refuses it first (CPU tensors suffice)."""
    from kernels import fa2_tc

    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    lse = torch.zeros(1, 2, 8)
    o = torch.zeros(q.numel() + 4, dtype=torch.float16)[4:].view(q.shape)  # 8 bytes past a boundary
    with pytest.raises(ValueError, match="16-byte boundary"):
        fa2_tc._outputs(q, (o, lse))
    assert fa2_tc._outputs(q, (torch.zeros_like(q), lse))[1] is lse


def test_backward_out_alignment_is_what_each_gradient_needs():
    """fa2_wgmma's backward can store dQ in 16-byte pieces (DQ_BULK=0's uint4) and stores dK, dV in 4-byte ones (u32
    stores of two halves): a dK at a 4-byte offset is taken, dK / dV at 2 or 6 bytes refused, dQ refused at 8 (CPU
    tensors suffice: the check is first)."""
    from kernels import fa2_wgmma_bwd

    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)

    def at(offset_elems):
        return torch.zeros(q.numel() + 8, dtype=torch.float16)[offset_elems:offset_elems + q.numel()].view(q.shape)

    assert fa2_wgmma_bwd._grads(q, q, (torch.zeros_like(q), at(2), at(6)))[1].data_ptr() % 16 == 4
    with pytest.raises(ValueError, match="out dk must start on a 4-byte boundary"):
        fa2_wgmma_bwd._grads(q, q, (torch.zeros_like(q), at(1), torch.zeros_like(q)))
    with pytest.raises(ValueError, match="out dv must start on a 4-byte boundary"):
        fa2_wgmma_bwd._grads(q, q, (torch.zeros_like(q), torch.zeros_like(q), at(3)))
    with pytest.raises(ValueError, match="out dq must start on a 16-byte boundary"):
        fa2_wgmma_bwd._grads(q, q, (at(4), torch.zeros_like(q), torch.zeros_like(q)))


def test_naive_scores_too_large_to_index():
    """naive materialises S and P (B, H, Nq, Nk): past int64 indexing it says so, as the closed forms do
    (meta tensors: nothing is allocated)."""
    q = torch.empty(1, 1, 2**32, 1, device="meta", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"S would have .* int64 indexing"):
        VARIANTS["naive"].forward(q, q, q, block_q=2**31, block_k=2**31)
    with pytest.raises(ValueError, match=r"S would have .* int64 indexing"):
        VARIANTS["naive"].backward(q, q, q, None, None, q, block_q=2**31, block_k=2**31)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scores_beyond_float32_are_refused(name, dtype):
    """S is float32 in every variant: a score past 3.4e38 would make o NaN silently, so it is refused;
    inputs whose norm bound is out of range but whose scores are not still run (the bound only gates)."""
    q, v = torch.full((1, 1, 1, 4), 2e19).to(dtype), torch.randn(1, 1, 1, 4).to(dtype)
    with pytest.raises(ValueError, match="beyond float32's largest finite"):
        VARIANTS[name].forward(q, q, v)
    k = torch.zeros(1, 1, 1, 4, dtype=dtype)
    k[..., 0], k[..., 1] = 1e19, -1e19  # q·k = 0 exactly
    o, _ = VARIANTS[name].forward(q, k, v)
    assert torch.equal(o, v)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("scale", [1e308, -1e308, 1.7e308])
def test_scales_near_the_float_limits_are_refused(name, dtype, scale):
    """Issue 46: with unit q, k a scale of 1e308 makes scores that overflow float64 as well; the range check
    used to drop them (already inf) before it looked, and o, lse came back NaN with no error."""
    q, v = torch.ones(1, 1, 2, 2, dtype=dtype), torch.randn(1, 1, 2, 2).to(dtype)
    with pytest.raises(ValueError, match="largest finite"):
        VARIANTS[name].forward(q, q, v, scale=scale)
    with pytest.raises(ValueError, match="largest finite"):
        attention(q, q, v, variant=name, scale=scale)


@pytest.mark.parametrize("name", NAMES)
def test_scores_just_inside_float32_still_run(name):
    """A score of 2e38 is finite in float32: it runs and matches the oracle; q·k past float32 with a scale
    that would bring it back is refused (Q Kᵀ is float32 before the scale is applied)."""
    q, v = torch.ones(1, 1, 2, 2), torch.randn(1, 1, 2, 2)
    o, lse = VARIANTS[name].forward(q, q, v, scale=1e38)
    ref_o, ref_lse = attention_reference(q, q, v, scale=1e38)
    assert torch.allclose(o.double(), ref_o) and torch.allclose(lse.double(), ref_lse, rtol=1e-6)
    big = torch.full((1, 1, 2, 2), 1e20)
    with pytest.raises(ValueError, match=r"products q·k reach 2e\+40"):
        VARIANTS[name].forward(big, big, v, scale=1e-30)


@pytest.mark.parametrize("scale", [10 ** 400, -(10 ** 400), 2 ** 1024], ids=["1e400", "-1e400", "2**1024"])
def test_integer_scale_past_float_is_a_value_error(scale):
    """Issue 46: an integer too large for a float raised OverflowError with a traceback."""
    q = torch.ones(1, 1, 2, 2)
    for name in NAMES:
        with pytest.raises(ValueError, match="scale must be a finite real number or None, got .*beyond float64"):
            VARIANTS[name].forward(q, q, q, scale=scale)
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        attention(q, q, q, scale=scale)
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        checks.scale_value(scale, 2)  # what the CUDA launchers call too
