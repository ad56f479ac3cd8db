"""naive keeps S and P in HBM in the input dtype (what unfused attention does): in fp16/bf16 large
scores overflow or are rounded coarsely there. That is kept, and reported: a ScoreRangeWarning naming
the score range. FA1, FA2 and v_once (float32 S on chip) are right on the same inputs."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, strategies as st

from variants import VARIANTS, attention_reference
from variants.reference import causal_mask
from variants.naive import OUTPUT_TOLERANCE, ScoreRangeWarning, score_limit

FUSED = ("fa1", "fa2", "v_once")


def _one_big_score(dtype, score, n=8, d=4, seed=0):
    """Random q, k, v whose score (0, 0) is `score` (scale 1/sqrt(d) = 1/2), the rest of order 1."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, n, d, generator=gen) for _ in range(3))
    q[..., 0, :] = torch.tensor([math.sqrt(abs(score) * 2), 0, 0, 0])
    k[..., 0, :] = torch.tensor([math.copysign(math.sqrt(abs(score) * 2), score), 0, 0, 0])
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _fused_are_right(q, k, v, **kw):
    ref_o, ref_lse = attention_reference(q, k, v, **kw)
    for name in FUSED:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            o, lse = VARIANTS[name].forward(q, k, v, block_q=4, block_k=4, **kw)
        assert torch.isfinite(o).all() and torch.isfinite(lse).all(), name
        assert (o.double() - ref_o).abs().max() < 2e-2, name
        assert ((lse.double() - ref_lse).abs() / ref_lse.abs().clamp(min=1)).max() < 1e-2, name


def test_fp16_overflow_is_reported_and_gives_nan():
    q, k, v = _one_big_score(torch.float16, 8e4)
    with pytest.warns(ScoreRangeWarning, match=r"8e\+04.*float16's largest finite 65504"):
        o, lse = VARIANTS["naive"].forward(q, k, v, block_q=4, block_k=4)
    assert torch.isnan(o[..., 0, :]).all() and torch.isnan(lse[..., 0]).all()  # the kept behaviour
    _fused_are_right(q, k, v)


def test_fp16_row_below_the_range_reads_as_seeing_no_key():
    """Every score of row 0 is ~ -9e4: naive's HBM S holds -inf, so o = 0 and lse = -inf; the right
    answer (the fused variants') is o = the V rows' softmax mix, lse ~ -9e4."""
    gen = torch.Generator().manual_seed(3)
    q, v = torch.randn(1, 1, 4, 4, generator=gen), torch.randn(1, 1, 6, 4, generator=gen)
    k = torch.zeros(1, 1, 6, 4)
    k[..., 0] = torch.linspace(-300, -299, 6)
    q[..., 0, :] = torch.tensor([600.0, 0, 0, 0])  # scores 600·(-300)/2 = -9e4
    q, k, v = q.half(), k.half(), v.half()
    with pytest.warns(ScoreRangeWarning, match="seeing no key"):
        o, lse = VARIANTS["naive"].forward(q, k, v, block_q=4, block_k=4)
    assert (o[..., 0, :] == 0).all() and torch.isneginf(lse[..., 0]).all()
    _, ref_lse = attention_reference(q, k, v)
    assert -1e5 < ref_lse[..., 0].item() < -8e4
    _fused_are_right(q, k, v)


def test_bf16_large_scores_are_reported():
    """bf16 does not overflow at 1e4 but rounds S to multiples of 64 there."""
    q, k, v = _one_big_score(torch.bfloat16, 1e4)
    with pytest.warns(ScoreRangeWarning, match=r"rounded to bfloat16 in HBM errs by up to 32"):
        VARIANTS["naive"].forward(q, k, v, block_q=4, block_k=4)
    _fused_are_right(q, k, v)


def test_fp16_scores_between_1k_and_2k_are_reported():
    """Issue 46: fp16 rounds S in [1024, 2048) to steps of 1, which moved o by 2-5% with no warning (the old
    limit was 2048); the warning now starts where the rounding can pass the tolerance (|S| = 64)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(3))
    scale = 1500 / (q @ k.transpose(-1, -2)).abs().max().item()
    q, k, v = q.half(), k.half(), v.half()
    with pytest.warns(ScoreRangeWarning, match=r"errs by up to 0.5.*tolerance 0.02"):
        o, _ = VARIANTS["naive"].forward(q, k, v, scale=scale, block_q=8, block_k=8)
    ref_o, _ = attention_reference(q, k, v, scale=scale)
    assert (o.double() - ref_o).abs().max() > OUTPUT_TOLERANCE[torch.float16]  # the error it warns of
    _fused_are_right(q, k, v, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@given(log2_target=st.floats(0.0, 12.0), seed=st.integers(0, 2 ** 31 - 1), causal=st.booleans())
def test_unwarned_naive_is_within_its_tolerance(dtype, log2_target, seed, causal):
    """Random q, k, v scaled so max|S| = target (keys clustered round one, so that many weights count): naive warns, or its o is within OUTPUT_TOLERANCE (the rule of
    variants/naive.py: rounding S can move o by at most 2·tanh(δ/2)·max|v|, δ = half an ulp of max|S|)."""
    gen, target = torch.Generator().manual_seed(seed), 2.0 ** log2_target
    q, k, v = (torch.randn(1, 2, 24, 8, generator=gen) for _ in range(3))
    k = k[..., :1, :] + k / math.sqrt(target)  # keys clustered: scores spread by ~sqrt(target), many weights matter
    scale = target / (q.double() @ k.double().transpose(-1, -2)).abs().max().item()
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o, _ = VARIANTS["naive"].forward(q, k, v, causal=causal, scale=scale, block_q=8, block_k=8)
    if any(issubclass(w.category, ScoreRangeWarning) for w in caught):
        return
    ref_o, _ = attention_reference(q, k, v, causal=causal, scale=scale)
    err = (o.double() - ref_o).abs().max().item() / max(1.0, v.double().abs().max().item())
    assert err <= OUTPUT_TOLERANCE[dtype], (target, err)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_ordinary_scores_are_silent(dtype):
    q, k, v = (torch.randn(2, 2, 33, 16).to(dtype) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        VARIANTS["naive"].forward(q, k, v, causal=True, block_q=8, block_k=8)
        VARIANTS["naive"].forward(q.to("meta"), k.to("meta"), v.to("meta"), block_q=8, block_k=8)


@given(score=st.floats(1.0, 2e5), sign=st.sampled_from([1.0, -1.0]),
       dtype=st.sampled_from([torch.float16, torch.bfloat16]), causal=st.booleans())
def test_warns_exactly_when_the_score_is_out_of_range(score, sign, dtype, causal):
    """Warned iff |S| reaches the dtype's limit (score_limit: fp16 64, bf16 32; overflow beyond max); 1% margin
    for the rounding of q and k themselves. An unwarned result is within naive's tolerance."""
    q, k, v = _one_big_score(dtype, sign * score)
    s = (q.double() @ k.double().transpose(-1, -2)) / 2
    if causal:
        s = s.masked_fill(~causal_mask(8, 8), 0)
    s_max, limit = s.abs().max().item(), score_limit(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o, lse = VARIANTS["naive"].forward(q, k, v, causal=causal, block_q=4, block_k=4)
    warned = any(issubclass(w.category, ScoreRangeWarning) for w in caught)
    if s_max >= limit * 1.01:
        assert warned, s_max
    elif s_max <= limit * 0.99:
        assert not warned, s_max
        ref_o, _ = attention_reference(q, k, v, causal=causal)
        # inside the range: no NaN, no lost row, and o within naive's tolerance
        assert (o.double() - ref_o).abs().max() <= OUTPUT_TOLERANCE[dtype] * max(1.0, v.double().abs().max())
