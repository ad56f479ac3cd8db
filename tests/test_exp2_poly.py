"""The FMA-pipe 2^x (kernels/cuda/exp2_poly.cuh, knob EXP2_POLY of fa2_wgmma_tma.cu) on the CPU: a float32
emulation of the device sequence (kernels/exp2_poly.py) against numpy's exp2 across the range the softmax
feeds it (x = s*scale_log2 - m <= RESCALE_THRESHOLD <= 15), incl. -inf (masked scores) and very negative
inputs, which must give 0; and its error against the rounding of P to fp16/bf16 that follows it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import exp2_poly

# what the header promises per degree (its comment), a little above the measured 8.6e-5 / 2.9e-6 / 1.4e-7
BOUND = {3: 9e-5, 4: 3.1e-6, 5: 2e-7}


@pytest.mark.parametrize("deg", exp2_poly.DEGREES)
def test_relative_error_over_the_range(deg):
    err = exp2_poly.max_rel_error(deg)
    assert err <= BOUND[deg], f"degree {deg}: {err:.3g}"
    assert err > BOUND[deg] / 20, "the bound must be tight enough to catch a wrong coefficient"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_default_degree_is_well_under_the_rounding_of_p(dtype):
    err = exp2_poly.max_rel_error(exp2_poly.DEFAULT_DEG[dtype])
    assert err * 40 <= exp2_poly.UNIT_ROUNDOFF[dtype], f"{dtype}: {err:.3g} vs u = {exp2_poly.UNIT_ROUNDOFF[dtype]:.3g}"


@pytest.mark.parametrize("deg", exp2_poly.DEGREES)
def test_masked_and_underflowing_inputs_give_zero(deg):
    x = np.array([-np.inf, -3.4e38, -1e6, -200.0, -128.0, -127.0, np.nan], dtype=np.float32)
    assert (exp2_poly.emulate(x, deg) == 0).all()
    tiny = exp2_poly.emulate(np.linspace(-127, -126, 1001, dtype=np.float32), deg)
    assert (tiny >= 0).all() and (tiny < 2.0 ** -125).all(), "below 2^-126 only denormal-sized values"


@pytest.mark.parametrize("deg", exp2_poly.DEGREES)
def test_integers_are_exact(deg):
    """c0 = 1: 2^n exactly, so a row's max score gives P = 1 as ex2.approx does."""
    n = np.arange(-126, 16, dtype=np.float32)
    assert (exp2_poly.emulate(n, deg) == np.exp2(n)).all()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.floats(-126.0, 15.0, width=32), st.sampled_from(exp2_poly.DEGREES))
def test_any_float32_in_range(x, deg):
    got = float(exp2_poly.emulate(np.float32(x), deg))
    assert abs(got - 2.0 ** x) <= BOUND[deg] * 2.0 ** x


@pytest.mark.parametrize("deg", exp2_poly.DEGREES)
def test_coefficients_are_near_minimax(deg):
    """The header's coefficients are the fit's (rounded to fp32): a stale or mistyped one shows here."""
    c, err = exp2_poly.fit(deg)
    assert np.allclose(exp2_poly.coefficients(deg), c, rtol=2e-3, atol=1e-5)
    assert exp2_poly.max_rel_error(deg) <= 1.05 * err + 1.5e-7  # + fp32 evaluation
