"""v4 of the Hopper backward (kernels/fa2_wgmma_bwd_ws.py: the warp-specialised main kernel, the default of
kernels.fa2_wgmma_bwd.backward at d = 64, 128 since issue 42) against float64 autograd and against v3 (impl="v3", the
main kernel shipped before), on a GPU (compute capability 9.x; skipped cleanly otherwise). v4 is forced here with
impl="ws" (every build: config= its knobs); tests/test_kernels_bwd_gpu.py reaches it through the default rule.

The helpers and tolerances are the Hopper backward's (tests/test_kernels_bwd_gpu.py): o and lse come from the
fa2_wgmma forward, gradients are poisoned with NaN before the launch (an unwritten element fails), a gradient passes
against float64 when its norm-relative error is within TOL[dtype] or 3x that of a float64 backward that rounds O, P
and dS to the input dtype. Against v3 (same tiles, same roundings: only the order of dQ's fp32
reduce-adds differs) the difference must be within 2^-8 of its norm, or half v3's own distance to
float64 (tiny, cancelling gradients at scores ~1e4), or below fp32_ds_floor / the 1e-5 RMS floor
(variants/reference.py: what fp32 rounding of dP - D leaves where the exact gradient is 0). Shapes: Nq != Nk,
tails, Nq = 1, Nk = 1, causal with Nq > Nk (rows that see no key: dq exactly 0), GQA groups 1/2/4/8, (B, N, H, d) views, every build
(default and lab/bwd_ws.py ALTERNATIVES), and long loops (many ring and dQ-buffer phases).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _hopper(), reason="the v4 backward needs a compute capability 9.x GPU")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.test_kernels_bwd_gpu import check_against_float64, inputs, poisoned_like, shapes  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
V3_REL = 2.0 ** -8


def check_v4(b, h, n_q, n_k, d, dtype, causal, scale, seed, group=1, strided=False, config=None) -> dict:
    """v4 (impl="ws") against float64 and against v3 (impl="v3"); returns the errors (asserts on failure). h is
    H_kv."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    q, k, v, do = inputs(b, h * group, n_q, n_k, d, dtype, scale, seed, h_kv=h, strided=strided)
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    grads = tuple(poisoned_like(t) for t in (q, k, v))
    got = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, config=config, out=grads, impl="ws")
    assert all(g is o_ for g, o_ in zip(got, grads))
    v3 = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, impl="v3")
    torch.cuda.synchronize()
    checked = check_against_float64(grads, q, k, v, do, causal=causal, dtype=dtype)
    errors = {}
    for name, g, sh in zip(("dq", "dk", "dv"), grads, v3):
        gd, shd, ref, atol = g.double(), sh.double(), checked[name]["ref"], checked[name]["atol"]
        diff = float((gd - shd).norm())
        v3_err = float((shd - ref).norm())
        assert diff <= max(V3_REL * float(shd.norm()), 0.5 * v3_err, atol), (
            f"{name}: differs from v3 by {diff:.3e} (|v3| {float(shd.norm()):.3e}, "
            f"v3's error {v3_err:.3e})")
        errors[name] = dict(rel=checked[name]["rel"], rounding_rel=checked[name]["rounding_rel"],
                            vs_v3=diff / max(float(shd.norm()), 1e-30), bitwise_v3=bool(torch.equal(g, sh)))
    return errors


def _builds():
    from lab import bwd_ws  # ALTERNATIVES: the lab's A/B builds

    return [(d, cfg) for d in bwd_ws.HEAD_DIMS for cfg in [None, *bwd_ws.ALTERNATIVES[d]]]


ODD = [  # (B, H_kv, Nq, Nk, causal, dtype, group, input scale)
    (2, 2, 333, 200, True, torch.float16, 1, 4.0),     # Nq > Nk causal: 133 rows see no key; Nk tail
    (1, 1, 129, 517, False, torch.bfloat16, 2, 1.0),   # Nq < Nk, both tails
    (2, 2, 200, 333, True, torch.bfloat16, 4, 4.0),    # causal Nq < Nk: hidden Q blocks skipped per key block
    (1, 3, 1, 700, True, torch.float16, 8, 1.0),       # one query row, many key blocks
    (2, 1, 700, 1, False, torch.bfloat16, 1, 1.0),     # one key: dS = 0 exactly
    (1, 2, 1, 1, True, torch.float16, 2, 1.0),
    (1, 2, 128, 128, True, torch.float16, 2, 20.0),    # whole blocks, scores ~1e4 (one-hot rows)
    (1, 1, 1000, 1000, False, torch.bfloat16, 8, 1.0),  # 8 x 16 steps per CTA: many ring / dQ-buffer phases
]


@pytest.mark.parametrize("build", _builds(), ids=lambda b: f"d{b[0]}-{'default' if b[1] is None else b[1]}")
@pytest.mark.parametrize("strided", [False, True], ids=["bhnd", "bnhd"])
def test_odd_shapes_every_build(build, strided):
    d, cfg = build
    for i, (b, h, n_q, n_k, causal, dtype, group, scale) in enumerate(ODD):
        check_v4(b, h, n_q, n_k, d, dtype, causal, scale, 100 + i, group=group, strided=strided, config=cfg)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_gqa_groups(d, group):
    for n_q, n_k, causal, dtype in ((333, 200, True, torch.float16), (129, 517, False, torch.bfloat16),
                                    (200, 333, True, torch.bfloat16), (257, 257, False, torch.float16)):
        check_v4(2, 2, n_q, n_k, d, dtype, causal, 4.0, n_q + d + group, group=group, strided=True)


shape = shapes([64, 128])  # (B, H_kv, Nq, Nk, d, dtype, causal, input scale, seed)


@SETTINGS
@given(shape, st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_matches_float64_and_v3(s, group, strided):
    check_v4(*s, group=group, strided=strided)


def test_repeated_calls_and_gradients_layout():
    """Two calls give the same dk, dv (no atomics on them) and dq within fp32 reduce order; gradients allocated by
    the launcher keep the inputs' (B, N, H, d) strides."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    q, k, v, do = inputs(2, 8, 1500, 2100, 128, torch.bfloat16, 1.0, 11, h_kv=2, strided=True)
    for causal in (False, True):
        o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
        a = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal)  # the default rule: v4 at d = 128
        b_ = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, impl="ws")
        torch.cuda.synchronize()
        assert torch.equal(a[1], b_[1]) and torch.equal(a[2], b_[2])
        assert float((a[0].double() - b_[0].double()).norm()) <= 1e-2 * float(a[0].double().norm())
        assert all(g.stride() == t.stride() for g, t in zip(a, (q, k, v)))


ORDER_AB = [(1, 0), (0, 1), (1, 1)]  # kernels.fa2_wgmma_bwd_ws.ORDER_AB: (ORDER, LPT) of the A/B's builds


@pytest.mark.parametrize("order,lpt", ORDER_AB, ids=lambda x: str(x))
@pytest.mark.parametrize("strided", [False, True], ids=["bhnd", "bnhd"])
@pytest.mark.parametrize("d", [64, 128])
def test_order1_odd_shapes(d, strided, order, lpt):
    """ORDER=1 (i descending, heads inner: the loader's (i, hq), the reducer's tile and the consumers' m0 all follow
    it) and LPT=1 (grid (B*H_kv, Tc)) on every odd shape: causal rows that see no key, Nq != Nk, tails, Nq = 1,
    Nk = 1, GQA 1..8."""
    from kernels import fa2_wgmma_bwd_ws

    for i, (b, h, n_q, n_k, causal, dtype, group, scale) in enumerate(ODD):
        check_v4(b, h, n_q, n_k, d, dtype, causal, scale, 300 + i, group=group, strided=strided,
                 config=fa2_wgmma_bwd_ws.order_config(order, lpt))


@pytest.mark.parametrize("order,lpt", ORDER_AB, ids=lambda x: str(x))
@pytest.mark.parametrize("group", [1, 2, 8])
@pytest.mark.parametrize("d", [64, 128])
def test_order1_gqa_groups(d, group, order, lpt):
    from kernels import fa2_wgmma_bwd_ws

    for n_q, n_k, causal, dtype in ((333, 200, True, torch.float16), (129, 517, False, torch.bfloat16),
                                    (200, 333, True, torch.bfloat16), (1000, 1000, True, torch.float16)):
        check_v4(2, 2, n_q, n_k, d, dtype, causal, 4.0, n_q + d + group + 7, group=group, strided=True,
                 config=fa2_wgmma_bwd_ws.order_config(order, lpt))
