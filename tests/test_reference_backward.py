"""variants.reference.backward_reference (the float64 oracle of the GPU backward checks and lab/bwd_ws_ab.py) equals
autograd of softmax attention, grouped-query K/V and causal rows that see no key included; its round_to floor moves it
by a 16-bit rounding's worth and no more."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.backward_helpers import reference_grads  # noqa: E402
from variants.reference import backward_reference  # noqa: E402


@pytest.mark.parametrize("b,h,h_kv,n_q,n_k,d,causal", [
    (1, 2, 2, 17, 33, 8, False), (2, 4, 2, 40, 23, 16, True),   # Nq > Nk causal: 17 rows see no key
    (1, 8, 1, 5, 64, 8, True), (1, 3, 3, 1, 1, 4, False)])
def test_backward_reference_is_autograd(b, h, h_kv, n_q, n_k, d, causal):
    g = torch.Generator().manual_seed(n_q * 100 + n_k)
    q, do = (torch.randn(b, h, n_q, d, generator=g) for _ in range(2))
    k, v = (torch.randn(b, h_kv, n_k, d, generator=g) for _ in range(2))
    want = reference_grads(q, k, v, do, causal=causal)
    got = backward_reference(q, k, v, do, causal=causal)
    for w, x in zip(want, got):
        assert torch.allclose(w.nan_to_num(0.0), x, atol=1e-10, rtol=1e-9)
    rounded = backward_reference(q, k, v, do, causal=causal, round_to=torch.bfloat16)
    errs = []
    for w, x in zip(want, rounded):
        w = w.nan_to_num(0.0)
        errs.append(float((x - w).norm()))
        if float(w.norm()) > 0:  # (Nk = 1: dq = dk = 0 exactly, and rounding O alone makes D differ from dP)
            assert errs[-1] <= 2e-2 * float(w.norm())  # bf16's 2^-8 on O, P, dS: percent level, no more
    assert max(errs) > 0  # the floor is a real rounding, not the exact gradients again
