"""Every backward reference against float64 autograd; the autograd op; gradcheck; bad input."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

from tests.backward_helpers import (GRAD_TOLERANCE, LARGE_SCORE_GRAD_TOLERANCE, grad_error,
                                    reference_grads, rounding_floor)
from tests.strategies import make_inputs, problems
from variants import VARIANTS, attention, v_once

NAMES = list(VARIANTS)


def _saved_kwargs(name, saved):
    """What the forward left for the backward, as the backward's keyword arguments."""
    return {"P": saved["P"]} if name == "naive" else {"l": saved["l"], "m": saved["m"]} \
        if name == "fa1" else {}


@pytest.mark.parametrize("name", NAMES)
@given(pr=problems(max_n=80, max_d=128, max_tiles=6), use_saved=st.booleans(),
       opts=st.sampled_from(v_once.PLACEMENTS), rescale=st.sampled_from(v_once.RESCALES))
def test_gradients_match_float64_autograd(name, pr, use_saved, opts, rescale):
    """Odd Nq, Nk, Nq != Nk, d 1..128, any blocks, causal with rows that see no key, three dtypes,
    scores up to ~1e4; the backward called with the uniform signature or with what the forward saved."""
    if name == "naive" and pr["dtype"] != torch.float32:
        pr = {**pr, "large_scores": False}  # naive rounds S to fp16/bf16 (issue 17): in-range scores
    q, k, v = make_inputs(pr)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(pr["seed"] + 1)).to(q.dtype)
    kw = dict(causal=pr["causal"], scale=pr["scale"], block_q=pr["block_q"], block_k=pr["block_k"])
    if not v_once.valid(opts, rescale):  # placement "cluster" is lazy only (issue 18)
        rescale = "lazy"
    options = {"placement": opts, "rescale": rescale} if name == "v_once" else {}
    saved = {}
    o, lse = VARIANTS[name].forward(q, k, v, **kw, **options,
                                    **({"saved": saved} if name in ("naive", "fa1") else {}))
    extra = _saved_kwargs(name, saved) if use_saved else {}
    grads = VARIANTS[name].backward(q, k, v, o, lse, do, **kw, **options, **extra)
    ref = reference_grads(q, k, v, do, causal=pr["causal"], scale=pr["scale"])
    tol = GRAD_TOLERANCE[pr["dtype"]]
    if pr["large_scores"]:
        tol = max(tol, LARGE_SCORE_GRAD_TOLERANCE)
    # plus twice what the variant's own roundings (O, or naive's P/dP/dS, in the input dtype) make
    # unavoidable through dS = P ∘ (dP - D)'s cancellation: measured, not assumed
    floor = rounding_floor(name, q, k, v, do, o, causal=pr["causal"], scale=pr["scale"], block_k=pr["block_k"])
    for what, g, r, x in zip(("dq", "dk", "dv"), grads, ref, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape, what
        assert torch.isfinite(g).all(), f"{what} not finite {pr}"
        err = grad_error(g, r)
        bound = tol + 2 * floor[what]
        assert err <= bound, f"{name} {what} err {err:.3g} > {bound:g} (floor {floor[what]:.3g}) {pr}"


@pytest.mark.parametrize("name", NAMES)
def test_rows_that_see_no_key_get_zero_dq(name):
    """Causal, Nq > Nk: the first Nq - Nk rows see nothing: their dq is exactly 0, no NaN anywhere."""
    torch.manual_seed(5)
    q, k, v, do = (torch.randn(1, 2, n, 8) for n in (40, 13, 13, 40))
    for opts in VARIANTS[name].configs():
        o, lse = VARIANTS[name].forward(q, k, v, causal=True, block_q=16, block_k=4, **opts)
        dq, dk, dv = VARIANTS[name].backward(q, k, v, o, lse, do, causal=True, block_q=16, block_k=4,
                                             **opts)
        assert (dq[..., :27, :] == 0).all()
        assert not any(torch.isnan(g).any() for g in (dq, dk, dv))
        for g, r in zip((dq, dk, dv), reference_grads(q, k, v, do, causal=True)):
            assert grad_error(g, r) < 1e-5


def test_v_once_backward_is_fa2s():
    torch.manual_seed(6)
    q, k, v, do = (torch.randn(2, 1, n, 6) for n in (19, 23, 23, 19))
    o, lse = VARIANTS["fa2"].forward(q, k, v, causal=True, block_q=4, block_k=8)
    want = VARIANTS["fa2"].backward(q, k, v, o, lse, do, causal=True, block_q=4, block_k=8)
    for opts in VARIANTS["v_once"].configs():
        o1, lse1 = VARIANTS["v_once"].forward(q, k, v, causal=True, block_q=4, block_k=8, **opts)
        assert torch.allclose(o1, o, atol=1e-6) and torch.allclose(lse1, lse, atol=1e-5)
        got = VARIANTS["v_once"].backward(q, k, v, o, lse, do, causal=True, block_q=4, block_k=8,
                                          **opts)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), opts


GRADCHECK = [(n, {}) for n in NAMES if n != "v_once"] + [
    ("v_once", {"placement": pl, "rescale": "lazy"}) for pl in ("hbm", "sram")]  # f in HBM and on chip


@pytest.mark.parametrize("name,opts", GRADCHECK, ids=[f"{n}-{o.get('placement', '')}" for n, o in GRADCHECK])
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_through_attention(name, opts, causal):
    """torch.autograd.gradcheck in float64 on tiny shapes (tails, Nq != Nk) through the op."""
    torch.manual_seed(7)
    q = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    fn = lambda q, k, v: attention(q, k, v, variant=name, causal=causal, block_q=2,  # noqa: E731
                                   block_k=3, **opts)
    # fa1 keeps ℓ, m in float32 HBM as the forward does: its o moves in float32 steps
    atol = 1e-3 if name == "fa1" else 1e-6
    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6 if name != "fa1" else 1e-3, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_attention_op_matches_sdpa_and_its_gradients(name):
    torch.manual_seed(8)
    q, k, v = (torch.randn(2, 2, 33, 16, requires_grad=True) for _ in range(3))
    do = torch.randn(2, 2, 33, 16)
    o = attention(q, k, v, variant=name, causal=True, block_q=8, block_k=16)
    o.backward(do)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o2 = torch.nn.functional.scaled_dot_product_attention(q2, k2, v2, is_causal=True)
    o2.backward(do)
    assert torch.allclose(o, o2, atol=1e-5)
    for a, b in zip((q, k, v), (q2, k2, v2)):
        assert torch.allclose(a.grad, b.grad, atol=1e-4), name


def test_attention_saves_what_the_variant_saves():
    """naive keeps the Nq x Nk P; fa2 keeps O and the Nq floats of lse, nothing quadratic."""
    q, k, v = (torch.randn(1, 1, 48, 4, requires_grad=True) for _ in range(3))
    sizes = {}
    for name in NAMES:
        o = attention(q, k, v, variant=name, block_q=16, block_k=16)
        saved = o.grad_fn.saved_tensors
        sizes[name] = sum(t.numel() for t in saved) - 3 * q.numel()  # beyond q, k, v
    assert sizes["naive"] == 48 * 48
    assert sizes["fa1"] == 48 * 4 + 2 * 48 and sizes["fa2"] == sizes["v_once"] == 48 * 4 + 48


def qkv(nq=8, nk=8, d=4, dtype=torch.float32):
    q, k, v = torch.randn(1, 2, nq, d).to(dtype), torch.randn(1, 2, nk, d).to(dtype), \
        torch.randn(1, 2, nk, d).to(dtype)
    return q, k, v, torch.zeros(1, 2, nq, d, dtype=dtype), torch.zeros(1, 2, nq), \
        torch.randn(1, 2, nq, d).to(dtype)


@pytest.mark.parametrize("name", NAMES)
def test_bad_backward_input(name):
    q, k, v, o, lse, do = qkv()
    back = VARIANTS[name].backward
    with pytest.raises(ValueError, match=r"do must have shape \(1, 2, 8, 4\)"):
        back(q, k, v, o, lse, do[..., :7, :])
    with pytest.raises(TypeError, match="do must have dtype torch.float32"):
        back(q, k, v, o, lse, do.half())
    with pytest.raises(TypeError, match="do must be a torch.Tensor"):
        back(q, k, v, o, lse, None)
    with pytest.raises(ValueError, match="batch mismatch"):  # q, k, v checked as the forward does
        back(q, k.expand(2, 2, 8, 4), v, o, lse, do)
    if name != "naive":  # naive reads P, not O or lse
        with pytest.raises(ValueError, match=r"o must have shape \(1, 2, 8, 4\)"):
            back(q, k, v, o[..., :3], lse, do)
        with pytest.raises(ValueError, match=r"lse must have shape \(1, 2, 8\)"):
            back(q, k, v, o, lse[..., None], do)
        with pytest.raises(TypeError, match="lse must have dtype torch.float32"):
            back(q, k, v, o, lse.double(), do)


def test_bad_saved_tensors_and_attention_arguments():
    q, k, v, o, lse, do = qkv()
    with pytest.raises(ValueError, match=r"P must be a torch.float32 tensor of shape \(1, 2, 8, 8\)"):
        VARIANTS["naive"].backward(q, k, v, None, None, do, P=torch.zeros(1, 2, 8, 7))
    with pytest.raises(ValueError, match="m must be a torch.float32 tensor"):
        VARIANTS["fa1"].backward(q, k, v, o, None, do, l=torch.ones(1, 2, 8), m=torch.ones(1, 2, 7))
    with pytest.raises(ValueError, match="unknown variant 'fa3'"):
        attention(q, k, v, variant="fa3")
    with pytest.raises(ValueError, match="unknown placement"):
        VARIANTS["v_once"].backward(q, k, v, o, lse, do, placement="disk")
    with pytest.raises(ValueError, match="rescales lazily"):  # the forward's pairs, no more
        VARIANTS["v_once"].backward(q, k, v, o, lse, do, placement="cluster", rescale="eager")


@pytest.mark.parametrize("name", NAMES)
def test_a_reference_called_directly_builds_no_graph(name):
    """VARIANTS[...].forward/backward carry no autograd graph (fa1's in-place O update could not be walked
    back); gradients come from variants.attention, which runs the variant's own backward."""
    q, k, v = (torch.randn(1, 1, n, 3, requires_grad=True) for n in (5, 7, 7))
    o, lse = VARIANTS[name].forward(q, k, v, causal=True, block_q=2, block_k=3)
    assert not o.requires_grad and not lse.requires_grad
    o2 = attention(q, k, v, variant=name, causal=True, block_q=2, block_k=3)
    o2.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
