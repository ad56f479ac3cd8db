"""fa2_wgmma on the layouts models pass, on a Hopper GPU, against the float64 oracle: q, k, v as strided
views ((B, N, H, d) transposed to (B, H, N, d), sliced heads), grouped-query K/V (H_kv = 1, 2, H/2),
head dims 64/96/128/256, fp16/bf16, odd Nq/Nk, tails, causal with rows that see no key; and the clear
errors for what TMA cannot read. The oracle sees contiguous copies, K/V expanded by repeat_interleave.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from variants.reference import attention_reference  # noqa: E402

TOL = {torch.float16: 4e-3, torch.bfloat16: 2e-2}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _hopper() -> bool:
    from kernels import fa2_wgmma

    return fa2_wgmma.supported()


needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not _hopper(),
                                  reason="fa2_wgmma needs a compute capability 9.x GPU (wgmma)")


def _make(b, heads, n, d, dtype, scale, layout, g):
    """A (B, heads, n, d) view in the given memory layout: 'bhnd' contiguous, 'bnhd' a (B, N, H, d)
    tensor transposed (what models pass), 'slice' every other head of a wider tensor."""
    if layout == "bnhd":
        t = torch.randn(b, n, heads, d, generator=g, device="cuda") * scale
        return t.to(dtype).transpose(1, 2)
    if layout == "slice":
        t = torch.randn(b, 2 * heads, n, d, generator=g, device="cuda") * scale
        return t.to(dtype)[:, ::2]
    return (torch.randn(b, heads, n, d, generator=g, device="cuda") * scale).to(dtype)


def _check(b, h, h_kv, n_q, n_k, d, dtype, causal, scale, layout, seed, config=None):
    from kernels import fa2_wgmma

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = _make(b, h, n_q, d, dtype, scale, layout, g)
    k = _make(b, h_kv, n_k, d, dtype, scale, layout, g)
    v = _make(b, h_kv, n_k, d, dtype, 1.0, layout, g)
    if layout != "bhnd":  # a view over one head or one row (H = 1, N = 1) is contiguous whatever its layout
        assert not q.is_contiguous() or h == 1 or n_q == 1, "the test must pass real strided views"
        assert not k.is_contiguous() or h_kv == 1 or n_k == 1, "the test must pass real strided views"
    o = torch.full((b, h, n_q, d), float("nan"), dtype=dtype, device="cuda")  # poison
    lse = torch.full((b, h, n_q), float("nan"), device="cuda")
    fa2_wgmma.forward(q, k, v, causal=causal, out=(o, lse), config=config)
    torch.cuda.synchronize()
    group = h // h_kv
    ro, rl = attention_reference(q.contiguous(), k.repeat_interleave(group, dim=1),
                                 v.repeat_interleave(group, dim=1), causal=causal)
    od = o.double()
    assert torch.isfinite(od).all(), "unwritten or non-finite output"
    empty = ~torch.isfinite(rl)
    if empty.any():  # rows that see no key: o = 0, lse = -inf
        assert (od[empty] == 0).all() and (lse[empty] == float("-inf")).all()
    if (~empty).any():
        rel = float((od - ro).norm() / ro.norm().clamp_min(1e-30))
        assert ro[~empty].norm() == 0 or rel <= TOL[dtype], f"relative error {rel:.2e}"
        err = (lse.double()[~empty] - rl[~empty]).abs()
        assert (err <= 2e-3 + 1e-5 * rl[~empty].abs()).all(), f"lse error {float(err.max()):.2e}"


def _heads(draw_h, kind):
    return {"equal": draw_h, "one": 1, "two": 2, "half": draw_h // 2}[kind]


case = st.tuples(
    st.integers(1, 2),                                      # B
    st.sampled_from([2, 4, 6]),                             # H (even: H/2 and 2 divide it)
    st.sampled_from(["equal", "one", "two", "half"]),       # H_kv
    st.integers(1, 600),                                    # Nq
    st.integers(1, 600),                                    # Nk
    st.sampled_from([64, 96, 128, 256]),                    # d
    st.sampled_from([torch.float16, torch.bfloat16]),
    st.booleans(),                                          # causal
    st.sampled_from([0.5, 1.0, 4.0, 20.0]),                 # input scale
    st.sampled_from(["bhnd", "bnhd", "slice"]),
    st.integers(0, 2**31 - 1),
)


@needs_hopper
@SETTINGS
@given(case)
def test_strided_gqa_matches_reference(c):
    b, h, kind, n_q, n_k, d, dtype, causal, scale, layout, seed = c
    h_kv = _heads(h, kind)
    if h % h_kv:
        h_kv = h
    _check(b, h, h_kv, n_q, n_k, d, dtype, causal, scale, layout, seed)


@needs_hopper
@pytest.mark.parametrize("d", [96, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_q,n_k,causal", [(77, 203, True), (300, 100, True), (333, 1025, False),
                                            (300, 1000, True)])
def test_new_head_dims(d, dtype, n_q, n_k, causal):
    """d = 96 and 256, contiguous: tails, Nq != Nk, rows that see no key, key loops past every ring slot."""
    _check(1, 2, 2, n_q, n_k, d, dtype, causal, 4.0, "bhnd", n_q + n_k)


@needs_hopper
@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("h_kv", [1, 2, 4])
def test_gqa_strided_at_scale(d, h_kv):
    """(B, N, H, d) views with shared K/V heads, key loop long enough to reuse each ring slot often."""
    _check(2, 8, h_kv, 300, 1000, d, torch.bfloat16, d % 128 == 0, 1.0, "bnhd", d + h_kv)


@needs_hopper
def test_outputs_keep_the_documented_layout():
    from kernels import fa2_wgmma

    q = torch.randn(1, 70, 4, 64, device="cuda", dtype=torch.float16).transpose(1, 2)
    o, lse = fa2_wgmma.forward(q, q, q)
    assert o.shape == (1, 4, 70, 64) and o.is_contiguous()
    assert lse.shape == (1, 4, 70) and lse.dtype == torch.float32 and lse.is_contiguous()


@needs_hopper
def test_bad_layouts_are_refused_clearly():
    from kernels import fa2_wgmma

    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.float16)
    k3 = torch.randn(1, 3, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="H_kv dividing H"):
        fa2_wgmma.forward(q, k3, k3)
    wide = torch.randn(1, 4, 64, 68, device="cuda", dtype=torch.float16)[..., :64]  # rows of 136 B
    with pytest.raises(ValueError, match="N stride is 68 elements = 136 bytes"):
        fa2_wgmma.forward(wide, q, q)
    with pytest.raises(ValueError, match="unit stride in its last dimension"):
        fa2_wgmma.forward(q, q.transpose(2, 3), q)
    with pytest.raises(ValueError, match="broadcast"):
        fa2_wgmma.forward(q, q[:, :1].expand(1, 4, 64, 64), q)
    q80 = torch.randn(1, 1, 16, 80, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        fa2_wgmma.forward(q80, q80, q80)
    with pytest.raises(ValueError, match="cp.async build"):  # the TMA=0 build reads contiguous inputs only
        fa2_wgmma.forward(q, q[:, :2], q[:, :2], config=dict(BLOCK_N=128, NWG=2))


@needs_hopper
def test_tensor_maps_are_reused_per_call(monkeypatch):
    """Host overhead: a second call with the same buffers encodes no map (a driver call per input, and per output
    where the build stores O by TMA: forward()'s default at d = 64, N = 128 does, so the outputs are given)."""
    from kernels import fa2_wgmma, tma

    q = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.float16).transpose(1, 2)
    out = (torch.empty(1, 2, 128, 64, device="cuda", dtype=torch.float16), torch.empty(1, 2, 128, device="cuda"))
    fa2_wgmma.forward(q, q, q, out=out)
    made = []
    real = tma.tensor_map_args
    monkeypatch.setattr(tma, "tensor_map_args", lambda *a, **kw: made.append(a) or real(*a, **kw))
    fa2_wgmma.forward(q, q, q, out=out)
    assert made == []
    fa2_wgmma.forward(q, q.contiguous(), q, out=out)  # a new buffer: its map is made, the others reused
    assert len(made) == 1
    assert fa2_wgmma.choose_config(64, 128, False).get("O_TMA")  # else the docstring's case is gone: update it


@pytest.mark.parametrize("name", ["fa2_tc", "v_once_tc", "fa2", "fa1", "naive", "v_once"])
def test_contiguous_launchers_refuse_strided_and_gqa_clearly(name):
    """The launchers without TMA maps take contiguous, equal-head inputs only, and say so
    (kernels.loader.check_cuda_inputs): no silent wrong read of a view, no hidden copy."""
    from kernels import KERNELS

    if name not in KERNELS:
        pytest.skip(f"{name} not registered")
    fwd = KERNELS[name].forward
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="heads"):
        fwd(q, q[:, :2], q[:, :2])
    view = torch.randn(1, 64, 4, 64, device="cuda", dtype=torch.float16).transpose(1, 2)
    with pytest.raises(ValueError, match="contiguous"):
        fwd(view, view, view)
