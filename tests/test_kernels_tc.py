"""Tensor-core kernels (kernels.fa2_tc, fa2_wgmma, v_once_tc) against the float64 oracle, on a GPU.

Skipped cleanly where there is no CUDA device (CI); the compile-only checks of these kernels (sm_90,
spill-free builds) live beside the loader's tests and in bench/bench_tc.py resources.
Hypothesis draws shapes: odd Nq and Nk, Nq != Nk, causal with Nq > Nk (rows that see no key), both
dtypes, d in {64, 128}, and input scales that put scores anywhere from ~1 to ~1e4.
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
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _inputs(b, h, n_q, n_k, d, dtype, scale, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(b, h, n_q, d, generator=g, device="cuda") * scale).to(dtype)
    k = (torch.randn(b, h, n_k, d, generator=g, device="cuda") * scale).to(dtype)
    v = torch.randn(b, h, n_k, d, generator=g, device="cuda").to(dtype)
    return q, k, v


def _check(fn, b, h, n_q, n_k, d, dtype, causal, scale, seed):
    q, k, v = _inputs(b, h, n_q, n_k, d, dtype, scale, seed)
    o = torch.full_like(q, float("nan"))  # poison: every element must be written
    lse = torch.full((b, h, n_q), float("nan"), device="cuda")
    fn(q, k, v, causal=causal, out=(o, lse))
    torch.cuda.synchronize()
    ro, rl = attention_reference(q, k, v, causal=causal)
    od = o.double()
    assert torch.isfinite(od).all(), "unwritten or non-finite output"
    rel = float((od - ro).norm() / ro.norm().clamp_min(1e-30))
    empty = ~torch.isfinite(rl)
    if empty.any():  # rows that see no key: o = 0, lse = -inf
        assert (od[empty] == 0).all() and (lse[empty] == float("-inf")).all()
    if (~empty).any():
        assert ro[~empty].norm() == 0 or rel <= TOL[dtype], f"relative error {rel:.2e}"
        err = (lse.double()[~empty] - rl[~empty]).abs()
        assert (err <= 2e-3 + 1e-5 * rl[~empty].abs()).all(), f"lse error {float(err.max()):.2e}"


shape = st.tuples(
    st.integers(1, 2),                                      # B
    st.integers(1, 3),                                      # H
    st.integers(1, 700),                                    # Nq
    st.integers(1, 700),                                    # Nk
    st.sampled_from([64, 128]),                             # d
    st.sampled_from([torch.float16, torch.bfloat16]),
    st.booleans(),                                          # causal
    st.sampled_from([0.5, 1.0, 4.0, 20.0]),                 # input scale: scores up to ~1e4
    st.integers(0, 2**31 - 1),                              # seed
)


@SETTINGS
@given(shape)
def test_fa2_tc_matches_reference(s):
    from kernels import fa2_tc

    _check(fa2_tc.forward, *s)


def _hopper():
    from kernels import fa2_wgmma

    return fa2_wgmma.supported()


needs_hopper = pytest.mark.skipif(not torch.cuda.is_available() or not _hopper(),
                                  reason="fa2_wgmma needs a compute capability 9.x GPU (wgmma)")


@needs_hopper
@SETTINGS
@given(shape)
def test_fa2_wgmma_matches_reference(s):
    from kernels import fa2_wgmma

    _check(fa2_wgmma.forward, *s)


def _sweep_ids():
    from kernels import fa2_wgmma

    return [(d, c) for d in fa2_wgmma.HEAD_DIMS for c in fa2_wgmma.named_builds(d).values()]


@needs_hopper
@pytest.mark.parametrize("d,config", _sweep_ids(), ids=lambda x: str(x))
def test_fa2_wgmma_every_tuning_candidate(d, config):
    """The named builds (CONFIGS, the rules' builds, the cp.async ones: 1..3 warpgroups, 2..4 ring slots, 1..3 CTAs/SM)
    on tails and causal."""
    from kernels import fa2_wgmma

    def fn(q, k, v, **kw):
        return fa2_wgmma.forward(q, k, v, config=config, **kw)

    for (n_q, n_k, causal) in ((77, 203, True), (300, 100, True), (333, 1025, False)):
        _check(fn, 1, 2, n_q, n_k, d, torch.float16, causal, 4.0, n_q)


@needs_hopper
def test_fa2_wgmma_refuses_what_it_cannot_run():
    from kernels import fa2_wgmma

    q = torch.randn(1, 1, 16, 80, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        fa2_wgmma.forward(q, q, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        fa2_wgmma.forward(q, q, q)


@SETTINGS
@given(shape, st.sampled_from(["sram", "hbm", "auto"]), st.sampled_from(["lazy", "eager"]))
def test_v_once_tc_matches_reference(s, placement, rescale):
    from kernels import v_once_tc

    b, h, n_q, n_k, d, dtype, causal, scale, seed = s
    if placement == "sram" and not v_once_tc.plan(n_q, n_k, d, causal=causal, rescale=rescale)["fits_sram"]:
        with pytest.raises(ValueError, match="shared memory"):
            v_once_tc.forward(*_inputs(b, h, n_q, n_k, d, dtype, scale, seed), causal=causal,
                              placement="sram", rescale=rescale)
        return

    def fn(q, k, v, **kw):
        return v_once_tc.forward(q, k, v, placement=placement, rescale=rescale, **kw)

    _check(fn, *s)


@pytest.mark.parametrize("n", [2048, 4100])
@pytest.mark.parametrize("d", [64, 128])
def test_long_rows(n, d):
    """Many key blocks (the sram f row does not fit: auto spills), every kernel, causal and not."""
    from kernels import fa2_tc, fa2_wgmma, v_once_tc

    for causal in (False, True):
        _check(fa2_tc.forward, 1, 2, n, n, d, torch.float16, causal, 1.0, 1)
        if fa2_wgmma.supported():  # forward()'s own choice of build (SIZE_RULES: per d, Nk, causal), both dtypes
            _check(fa2_wgmma.forward, 1, 2, n, n, d, torch.bfloat16, causal, 1.0, 3)
            _check(fa2_wgmma.forward, 1, 2, n, n, d, torch.float16, causal, 1.0, 4)
        _check(lambda q, k, v, **kw: v_once_tc.forward(q, k, v, placement="auto", rescale="lazy", **kw),
               1, 2, n, n, d, torch.bfloat16, causal, 1.0, 2)


@pytest.mark.parametrize("kernel", ["fa2_tc"])  # fa2_wgmma's trace build: commit 0bb604a
@pytest.mark.parametrize("d", [64, 128])
def test_cta_trace_build_records_every_cta_and_changes_nothing(kernel, d):
    """The CTA_TRACE builds (lab/cta_trace.py: fa2_tc's CONFIGS): against float64 on
    tails, Nq != Nk and empty causal rows; the same bits as the untraced build on a long row; one record per CTA
    (start <= quarter marks <= end, the key steps) and no word written past the grid's CTAs."""
    import cupy
    import numpy as np

    from lab.cta_trace import UNWRITTEN, read_trace, relative_records, trace_buffer
    from kernels import fa2_tc, loader

    mod = fa2_tc
    shipped = dict(mod.CONFIGS[d])
    cfg = dict(shipped, CTA_TRACE=1)
    for causal in (False, True):
        _check(lambda q, k, v, **kw: mod.forward(q, k, v, config=cfg, **kw), 2, 3, 300, 173, d, torch.float16,
               causal, 1.0, 5)
    q, k, v = _inputs(1, 3, 2000, 2000, d, torch.bfloat16, 1.0, 6)
    defs = fa2_tc.defines_for(d, True, cfg)
    fn = loader.get_function(fa2_tc.SOURCE, fa2_tc.KERNEL, defines=defs, device=q.device.index)
    bq, bk = defs["BLOCK_M"], defs["BLOCK_N"]
    trace_buffer(fn).fill(cupy.uint64(UNWRITTEN))
    assert all(torch.equal(a, b) for a, b in zip(mod.forward(q, k, v, config=shipped), mod.forward(q, k, v, config=cfg)))
    torch.cuda.synchronize()
    t_r, t_c = -(-2000 // bq), -(-2000 // bk)
    arr = read_trace(fn, 3 * t_r + 1)
    assert (arr[-1] == UNWRITTEN).all(), "a word past the grid's CTAs was written"
    recs = np.array(relative_records(arr[:-1]), dtype=np.int64)
    assert (recs[:, 6] == t_c).all() and (recs[:, 0] >= 0).all() and recs[:, 0].min() == 0
    assert (np.diff(recs[:, :5], axis=1) >= 0).all(), "marks out of time order"
    assert len(set(recs[:, 5].tolist())) > 1, "every CTA on one SM"


def test_errors_are_clear():
    from kernels import fa2_tc, v_once_tc

    q = torch.randn(1, 1, 16, 96, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        fa2_tc.forward(q, q, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        fa2_tc.forward(q, q, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="placement"):
        v_once_tc.forward(q, q, q, placement="nowhere")
    with pytest.raises(ValueError, match="shared memory"):
        k = torch.randn(1, 1, 8192, 64, device="cuda", dtype=torch.float16)
        v_once_tc.forward(q, k, k, placement="sram")


def _forwards():
    from kernels import fa2_tc, fa2_wgmma, v_once_cluster, v_once_tc

    fns = [("fa2_tc", fa2_tc.forward, False),
           ("v_once_tc", lambda q, k, v, **kw: v_once_tc.forward(q, k, v, placement="auto", rescale="lazy", **kw),
            False),
           ("fa2_wgmma", fa2_wgmma.forward, True),
           ("v_once_cluster", lambda q, k, v, **kw: v_once_cluster.forward(q, k, v, placement="cluster", **kw),
            True)]
    return [(name, fn) for name, fn, hopper in fns if not hopper or _hopper()]


@pytest.mark.parametrize("scale", [-0.125, 0.0], ids=["negative", "zero"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_non_positive_scale(scale, dtype):
    """scale <= 0 (the checks take any finite scale): the kernels mask S before scaling it, so the launchers
    run on (-q, -scale) or (0, 1) (kernels.layouts.positive_scale); causal with Nq > Nk and tails, poisoned."""
    q, k, v = _inputs(2, 2, 333, 200, 64, dtype, 1.0, 11)
    ref_o, ref_lse = attention_reference(q, k, v, causal=True, scale=scale)
    for name, fn in _forwards():
        o = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), device="cuda")
        fn(q, k, v, causal=True, scale=scale, out=(o, lse))
        torch.cuda.synchronize()
        empty = torch.isneginf(ref_lse)
        assert torch.isfinite(o).all() and torch.equal(torch.isneginf(lse), empty), name
        assert (o[empty] == 0).all(), name
        err = float((o.double() - ref_o).abs().max())
        assert err <= TOL[dtype] * 4, f"{name} scale {scale}: max error {err:.2e}"
        assert float((lse.double() - ref_lse)[~empty].abs().max()) <= 2e-3, name
