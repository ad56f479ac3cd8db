"""Every variant and option combination agrees with the float64 reference on random problems."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given

from tests.strategies import (assert_close_to_reference, make_inputs, max_visible_score, naive_score_tolerance,
                              problems)
from variants import VARIANTS, attention_reference
from variants.naive import ScoreRangeWarning, score_limit

CONFIGS = [(name, opts) for name, var in VARIANTS.items() for opts in var.configs()]


def _id(cfg):
    name, opts = cfg
    return VARIANTS[name].label(**opts)


@pytest.mark.parametrize("config", CONFIGS, ids=[_id(c) for c in CONFIGS])
@given(pr=problems())
def test_matches_float64_reference(config, pr):
    """naive in fp16/bf16 gets no scores ~1e4: they overflow or are rounded coarsely in its HBM S (a
    documented, warned behaviour: tests/test_naive_precision.py). Its warning starts where S's rounding
    can cost more than its tolerance (variants.naive.score_limit: fp16 64, bf16 32), which scores of
    order one with scale up to 2 and d up to 128 reach: there it is expected; elsewhere a warning fails.
    Either way S's rounding costs naive up to 4·max|S|·eps/2 (naive_score_tolerance)."""
    name, opts = config
    if name == "naive" and pr["dtype"] != torch.float32:
        pr = {**pr, "large_scores": False}
    q, k, v = make_inputs(pr)
    limit = score_limit(pr["dtype"]) if name == "naive" else None
    coarse = limit is not None and max_visible_score(q, k, causal=pr["causal"], scale=pr["scale"]) >= limit * 0.99
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if coarse else "error", ScoreRangeWarning)
        o, lse = VARIANTS[name].forward(q, k, v, causal=pr["causal"], scale=pr["scale"],
                                        block_q=pr["block_q"], block_k=pr["block_k"], **opts)
    ref_o, ref_lse = attention_reference(q, k, v, causal=pr["causal"], scale=pr["scale"])
    extra = naive_score_tolerance(q, k, causal=pr["causal"], scale=pr["scale"], dtype=pr["dtype"]) \
        if name == "naive" else 0.0
    assert_close_to_reference(o, lse, ref_o, ref_lse, v, pr["dtype"], large_scores=pr["large_scores"],
                              extra_tol=extra, what=f"{_id(config)} {pr}")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_causal_rows_that_see_no_key(name):
    """Nq > Nk, causal: the first Nq - Nk rows see nothing: o = 0, lse = -inf, never NaN."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 40, 8), torch.randn(1, 2, 13, 8), torch.randn(1, 2, 13, 8)
    for opts in VARIANTS[name].configs():
        o, lse = VARIANTS[name].forward(q, k, v, causal=True, block_q=16, block_k=4, **opts)
        assert torch.isneginf(lse[..., :27]).all() and torch.isfinite(lse[..., 27:]).all()
        assert (o[..., :27, :] == 0).all() and not torch.isnan(o).any()
        ref_o, _ = attention_reference(q, k, v, causal=True)
        assert torch.allclose(o.double(), ref_o, atol=1e-5)


def test_equal_lengths_causal_matches_torch_is_causal():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 50, 16) for _ in range(3))
    expect = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for name, var in VARIANTS.items():
        o, _ = var.forward(q, k, v, causal=True, block_q=16, block_k=16)
        assert torch.allclose(o, expect, atol=1e-5), name


def test_default_scale_is_one_over_sqrt_d():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 1, 20, 9) for _ in range(3))
    for var in VARIANTS.values():
        o_default, _ = var.forward(q, k, v)
        o_explicit, _ = var.forward(q, k, v, scale=1 / 3)
        assert torch.equal(o_default, o_explicit)


def test_large_scores_stay_finite_in_fp32():
    """Scores ~1e4 overflow exp() without the running max; every variant must stay finite."""
    torch.manual_seed(4)
    q, k, v = torch.randn(1, 1, 70, 32) * 100, torch.randn(1, 1, 90, 32) * 100, torch.randn(1, 1, 90, 32)
    ref_o, _ = attention_reference(q, k, v)
    for name, var in VARIANTS.items():
        for opts in var.configs():
            o, lse = var.forward(q, k, v, block_q=16, block_k=16, **opts)
            assert torch.isfinite(o).all() and torch.isfinite(lse).all(), name
            assert (o.double() - ref_o).abs().max() < 1e-2, name


def test_oracle_keeps_nan_for_non_finite_inputs():
    """Only rows that see no key are o = 0 in the oracle; an inf key makes its rows NaN, as in every
    variant and SDPA, so a kernel that zeroed such rows would not pass as right."""
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    k[0, 0, 2] = float("inf")
    ref_o, _ = attention_reference(q, k, v)
    assert torch.isnan(ref_o).all()
    for name in VARIANTS:
        assert torch.isnan(VARIANTS[name].forward(q, k, v)[0]).all(), name
    ref_o, ref_lse = attention_reference(q[..., :2, :], k[..., :1, :] * 0 + 1, v[..., :1, :], causal=True)
    assert (ref_o[..., 0, :] == 0).all() and torch.isneginf(ref_lse[..., 0])  # no key: still 0, -inf
