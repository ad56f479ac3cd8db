"""The Hopper backward (kernels.fa2_wgmma_bwd, FA2 Alg. 2 with wgmma) against float64 autograd, on a GPU.

Skipped cleanly without a compute capability 9.x GPU. The forward kernel supplies o and lse, as in
training. Hypothesis draws odd Nq and Nk, Nq != Nk, causal with Nq > Nk (rows that see no key: their dq
must be exactly 0), both dtypes, d in {64, 96, 128, 256}, group sizes H / H_kv in {1, 2, 4, 8}, (B, H, N, d)
or strided (B, N, H, d).transpose(1, 2) inputs, and input scales that put scores from ~1 to ~1e4. The
oracle for GQA is float64 autograd with K/V repeat_interleave'd, dK/dV summed over each group.
Outputs are poisoned with NaN first, so an unwritten element fails. d = 96 runs the d = 128 tiles with
zero-filled columns, d = 256 three passes of its own build (or, deterministic, a float32 torch route).
Since issue 42 d = 64 and 128 run v4's main kernel by default (kernels/fa2_wgmma_bwd_ws.py: these tests reach it
through the default rule), v3's under deterministic=True, config= (the SWEEP, the ORDER A/B) and impl="v3"
(test_v3_at_v4_head_dims); tests/test_kernels_bwd_ws_gpu.py compares the two.

Tolerance: a gradient passes when its norm-relative error to float64 is within TOL[dtype], or within
3x the error of a float64 backward that rounds what any fp16/bf16 kernel must round (O, P and dS to the
input dtype): with scores ~1e4 the rows are one-hot and dP - D cancels, so the exact gradients are tiny
and that rounding, not the kernel, sets the error. Where the exact dq, dk are 0 (one visible key: dS = P (dP - D)
with D = dP exactly) a kernel still leaves what fp32 summation order puts into dP - D: the error passes below
fp32_ds_floor (the root-sum-square of FP32_DS times each dS term's magnitude P |dO| |V|^T, carried through the
dq and dk products; measured 1.7e-4 on an H100 for 8 query heads x 115 rows at input scale 4, 10x below the floor),
and an RMS error of 1e-5 always passes.
"""
from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _hopper(), reason="the fa2_wgmma backward needs a compute capability 9.x GPU")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from variants.reference import backward_reference, fp32_ds_floor  # noqa: E402

TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def inputs(b, h, n_q, n_k, d, dtype, scale, seed, h_kv=None, strided=False):
    """q, do (B, H, Nq, d), k, v (B, H_kv, Nk, d); strided: (B, N, H, d) tensors seen through .transpose(1, 2)."""
    h_kv = h if h_kv is None else h_kv
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(heads, n, s):
        x = torch.randn(b, n, heads, d, generator=g, device="cuda") * s
        return x.to(dtype).transpose(1, 2) if strided else x.transpose(1, 2).contiguous().to(dtype)

    return make(h, n_q, scale), make(h_kv, n_k, scale), make(h_kv, n_k, 1.0), make(h, n_q, 1.0)


def poisoned_like(t):
    from kernels.fa2_wgmma_bwd import _empty_like_layout

    return _empty_like_layout(t).fill_(float("nan"))


def check(b, h, n_q, n_k, d, dtype, causal, scale, seed, config=None, group=1, strided=False,
          deterministic=False, impl=None) -> dict:
    """Forward + backward of fa2_wgmma against float64; returns the errors (asserts on failure).
    group = H / H_kv (h is then H_kv: H = h * group query heads). impl: backward's (None: its rule, which runs v4's
    main kernel at d = 64, 128 unless deterministic or config=; v3 elsewhere)."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    q, k, v, do = inputs(b, h * group, n_q, n_k, d, dtype, scale, seed, h_kv=h, strided=strided)
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    grads = tuple(poisoned_like(t) for t in (q, k, v))  # poison, in the inputs' layout
    fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, config=config, out=grads, deterministic=deterministic,
                           impl=impl)
    torch.cuda.synchronize()
    checked = check_against_float64(grads, q, k, v, do, causal=causal, dtype=dtype)
    return {name: dict(rel=c["rel"], rounding_rel=c["rounding_rel"]) for name, c in checked.items()}


def check_against_float64(grads, q, k, v, do, *, causal, dtype) -> dict:
    """Asserts each of (dq, dk, dv) finite and within TOL[dtype] of float64 autograd, or 3x the error of a float64
    backward that rounds as a 16-bit kernel must, or below the absolute floor (fp32_ds_floor, RMS 1e-5); and dq = 0
    on causal rows that see no key. Per name: rel, rounding_rel, the float64 gradient (ref) and the floor (atol)."""
    exact = backward_reference(q, k, v, do, causal=causal)
    rounded = backward_reference(q, k, v, do, causal=causal, round_to=dtype)
    out, ds_floor = {}, (*fp32_ds_floor(q, k, v, do, causal=causal), 0.0)
    for name, g, ref, base, ds in zip(("dq", "dk", "dv"), grads, exact, rounded, ds_floor):
        gd = g.double()
        assert torch.isfinite(gd).all(), f"{name}: unwritten or non-finite elements"
        norm = float(ref.norm())
        err = float((gd - ref).norm())
        floor = float((base - ref).norm())
        atol = max(1e-5 * g.numel() ** 0.5, ds)  # exact gradients of 0 (one visible key): fp32's dP - D
        assert err <= max(TOL[dtype] * norm, 3 * floor, atol), (
            f"{name}: error {err:.3e} vs |ref| {norm:.3e} (rounding floor {floor:.3e})")
        out[name] = dict(rel=err / max(norm, 1e-30), rounding_rel=floor / max(norm, 1e-30), ref=ref, atol=atol)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal and n_q > n_k:  # rows i < Nq - Nk see no key
        assert (grads[0][:, :, : n_q - n_k] == 0).all(), "rows that see no key must get dq = 0"
    return out


def shapes(dims):
    """check()'s (B, H, Nq, Nk, d, dtype, causal, input scale, seed) with d drawn from dims."""
    return st.tuples(
        st.integers(1, 2),                                      # B
        st.integers(1, 3),                                      # H (H_kv when grouped)
        st.integers(1, 700),                                    # Nq
        st.integers(1, 700),                                    # Nk
        st.sampled_from(dims),                                  # d
        st.sampled_from([torch.float16, torch.bfloat16]),
        st.booleans(),                                          # causal
        st.sampled_from([0.5, 1.0, 4.0, 20.0]),                 # input scale: scores up to ~1e4
        st.integers(0, 2**31 - 1),                              # seed
    )


shape = shapes([64, 96, 128, 256])


@SETTINGS
@given(shape, st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_backward_matches_float64_autograd(s, group, strided):
    check(*s, group=group, strided=strided)


@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_gqa_strided_every_head_dim(d, group):
    """Every (d, group) cell on strided (B, N, H, d) views: tails, Nq > Nk causal (rows with no key), Nq < Nk,
    both dtypes; the gradients allocated by the launcher keep the inputs' strides."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    for n_q, n_k, causal, dtype in ((333, 200, True, torch.float16), (129, 517, False, torch.bfloat16),
                                    (200, 333, True, torch.bfloat16)):
        check(2, 2, n_q, n_k, d, dtype, causal, 4.0, n_q + d + group, group=group, strided=True)
    q, k, v, do = inputs(2, 2 * group, 77, 130, d, torch.float16, 1.0, 3, h_kv=2, strided=True)
    o, lse = fa2_wgmma.forward(q, k, v, causal=True)
    dq, dk, dv = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True)
    assert dq.stride() == q.stride() and dk.stride() == k.stride() and dv.stride() == v.stride()
    assert dk.shape == k.shape and dv.shape == v.shape


@pytest.mark.parametrize("use_kernel", [True, False], ids=["three_passes", "torch_route"])
def test_d256_both_routes(use_kernel, monkeypatch):
    """d = 256: the kernel's three passes (the default) and the float32 torch route (deterministic=True, or
    D256_KERNEL = False) against float64, GQA and strided, tails, causal with rows that see no key."""
    from kernels import fa2_wgmma_bwd

    monkeypatch.setattr(fa2_wgmma_bwd, "D256_KERNEL", use_kernel)
    for n_q, n_k, causal, dtype, group in ((333, 200, True, torch.float16, 4), (129, 517, False, torch.bfloat16, 1),
                                           (1000, 1000, True, torch.bfloat16, 8), (65, 64, False, torch.float16, 2)):
        check(2, 2, n_q, n_k, 256, dtype, causal, 4.0, n_q, group=group, strided=True)


@pytest.mark.parametrize("d", [64, 96, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_deterministic_is_bitwise_repeatable(d, dtype):
    """deterministic=True: two runs give identical bits (dQ's reduce-adds in key-block order), and the same
    gradients as the default up to fp32 summation order; many key blocks per Q block, GQA, causal and not."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    for causal in (False, True):
        q, k, v, do = inputs(1, 8, 1500, 2100, d, dtype, 1.0, 11, h_kv=2, strided=True)
        o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
        runs = [fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, deterministic=True) for _ in range(2)]
        default = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal)
        torch.cuda.synchronize()
        for name, a, b_, c in zip(("dq", "dk", "dv"), runs[0], runs[1], default):
            assert torch.isfinite(a).all(), name
            assert torch.equal(a, b_), f"{name}: deterministic runs differ"
            # norm-relative: at d = 256 the deterministic route is float32 torch, the default the kernel
            assert float((a.double() - c.double()).norm()) <= TOL[dtype] * float(c.double().norm()), name
        check(1, 2, 1500, 2100, d, dtype, causal, 1.0, 12, group=4, strided=True, deterministic=True)


def _sweep_ids():
    from kernels import fa2_wgmma_bwd

    return [(d, c) for d, cands in fa2_wgmma_bwd.SWEEP.items() for c in cands]


@pytest.mark.parametrize("d,config", _sweep_ids(), ids=lambda x: str(x))
def test_every_tuning_candidate(d, config):
    for n_q, n_k, causal, dtype in ((77, 203, True, torch.float16), (300, 100, True, torch.bfloat16),
                                    (333, 1025, False, torch.float16), (1000, 1000, True, torch.bfloat16)):
        check(1, 2, n_q, n_k, d, dtype, causal, 4.0, n_q, config=config)


@pytest.mark.parametrize("d", [64, 128])
def test_long_rows(d):
    """Many Q blocks per key block: the ring wraps many times, the atomics pile up on dQ."""
    for causal in (False, True):
        check(1, 2, 2048, 2048, d, torch.float16, causal, 1.0, 1)
        check(1, 1, 1500, 3000, d, torch.bfloat16, causal, 1.0, 2)


def test_refuses_what_it_cannot_run():
    from kernels import fa2_wgmma

    q = torch.randn(1, 1, 16, 80, device="cuda", dtype=torch.float16)
    lse = torch.zeros(1, 1, 16, device="cuda")
    with pytest.raises(ValueError, match="head dim"):
        fa2_wgmma.backward(q, q, q, q, lse, q)
    q = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        fa2_wgmma.backward(q, q, q, q, lse, q)


@pytest.mark.parametrize("softmax_scale", [-0.125, 0.0], ids=["negative", "zero"])
def test_non_positive_softmax_scale(softmax_scale):
    """scale <= 0 through forward (run on (-q, -scale) or (0, 1): kernels.layouts.positive_scale) and backward
    (which masks P after the exponential and takes the scale as given), causal with Nq > Nk and tails."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    for dtype in (torch.float16, torch.bfloat16):
        q, k, v, do = inputs(1, 2, 333, 200, 64, dtype, 1.0, 5)
        o, lse = fa2_wgmma.forward(q, k, v, causal=True, scale=softmax_scale)
        grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
        fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True, scale=softmax_scale, out=grads)
        torch.cuda.synchronize()
        exact = backward_reference(q, k, v, do, causal=True, scale=softmax_scale)
        for name, g, ref in zip(("dq", "dk", "dv"), grads, exact):
            assert torch.isfinite(g).all(), name
            err, norm = float((g.double() - ref).norm()), float(ref.norm())
            assert err <= max(TOL[dtype] * norm, 1e-5 * g.numel() ** 0.5), f"{name}: {err:.3e} vs {norm:.3e}"


def test_gradients_into_views_at_4_byte_offsets():
    """out=(dq, dk, dv) with dk, dv contiguous views 4 bytes past a 16-byte boundary (what their u32 stores need; the
    launcher refuses 2) and dq aligned: the same gradients as into fresh tensors, every element written (NaN first)."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    q, k, v, do = inputs(1, 2, 200, 333, 64, torch.float16, 1.0, 7)
    o, lse = fa2_wgmma.forward(q, k, v, causal=True)
    want = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True)

    bufs = []

    def at_4_bytes(like):
        buf = torch.full((like.numel() + 8,), float("nan"), device=like.device, dtype=like.dtype)
        bufs.append(buf)
        return buf[2:2 + like.numel()].view(like.shape)

    grads = (torch.full_like(q, float("nan")), at_4_bytes(k), at_4_bytes(v))
    assert grads[1].data_ptr() % 16 == 4 and grads[2].data_ptr() % 16 == 4
    fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True, out=grads)
    torch.cuda.synchronize()
    for buf in bufs:  # nothing written outside the views
        assert buf[:2].isnan().all() and buf[2 + k.numel():].isnan().all()
    for name, g, w in zip(("dq", "dk", "dv"), grads, want):
        assert torch.isfinite(g).all(), name
        assert torch.equal(g, w) if name != "dq" else torch.allclose(g, w, atol=1e-3, rtol=1e-2), name


ORDER_AB = [(1, 0), (0, 1), (1, 1)]  # kernels.fa2_wgmma_bwd.ORDER_AB: (ORDER, LPT) of the A/B's builds


@pytest.mark.parametrize("order,lpt", ORDER_AB, ids=lambda x: str(x))
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("group", [1, 2, 8])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_order1_against_float64(d, group, deterministic, order, lpt):
    """ORDER=1 (a key block's steps i descending, the group's query heads inner; issue 42's L2 reuse) and LPT=1 (grid
    (B*H_kv, Tc), longest CTAs first) on strided GQA inputs: causal Nq > Nk (rows that see no key: dq exactly 0),
    Nq != Nk, tails, a many-block square."""
    from kernels import fa2_wgmma_bwd

    assert fa2_wgmma_bwd.ORDER_AB == tuple(ORDER_AB)
    cfg = fa2_wgmma_bwd.order_config(d, order, lpt)
    for n_q, n_k, causal, dtype in ((333, 200, True, torch.float16), (129, 517, False, torch.bfloat16),
                                    (200, 333, True, torch.bfloat16), (1000, 1000, True, torch.float16)):
        check(2, 2, n_q, n_k, d, dtype, causal, 4.0, n_q + d + group, config=cfg, group=group, strided=True,
              deterministic=deterministic)


@pytest.mark.parametrize("d", [64, 96, 128])
def test_order1_deterministic_dq_is_order0s_bits(d):
    """deterministic=True adds dQ's slices into each tile in key-block order whatever the step or dispatch order, and
    each slice is the same product: every ORDER/LPT build's dq is the default's bit for bit (ORDER=1 twice); dk, dv
    (summed in registers in another order under ORDER=1) agree to fp32 rounding, bit for bit under LPT alone."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    builds = [(0, 0), *ORDER_AB, (1, 0)]
    for causal in (False, True):
        q, k, v, do = inputs(1, 8, 1500, 2100, d, torch.bfloat16, 1.0, 13, h_kv=1, strided=True)
        o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
        runs = [fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, deterministic=True,
                                       config=fa2_wgmma_bwd.order_config(d, order, lpt)) for order, lpt in builds]
        torch.cuda.synchronize()
        for (order, lpt), run in zip(builds[1:], runs[1:]):
            assert torch.equal(runs[0][0], run[0]), f"dq of ORDER={order} LPT={lpt}"
            for name, a, b_ in zip(("dk", "dv"), runs[0][1:], run[1:]):
                assert torch.isfinite(b_).all(), name
                if order == 0:
                    assert torch.equal(a, b_), f"{name} of LPT={lpt}"
                assert float((a.double() - b_.double()).norm()) <= 1e-2 * float(a.double().norm()), name


@pytest.mark.parametrize("d", [64, 128])
def test_v3_at_v4_head_dims(d):
    """v3's main kernel (impl="v3"), no longer the default at d = 64, 128, on the odd shapes: tails, Nq > Nk causal
    (rows that see no key), Nq < Nk, GQA, strided and contiguous."""
    for n_q, n_k, causal, dtype, group, strided in ((333, 200, True, torch.float16, 4, True),
                                                    (129, 517, False, torch.bfloat16, 1, False),
                                                    (200, 333, True, torch.bfloat16, 8, True),
                                                    (1, 700, True, torch.float16, 2, False)):
        check(2, 2, n_q, n_k, d, dtype, causal, 4.0, n_q + d, group=group, strided=strided, impl="v3")


@pytest.mark.parametrize("d", [64, 128])
def test_default_rule_runs_v4_and_broadcast_kv_runs_v3(d):
    """The default at d = 64, 128 is v4: dk, dv bit for bit impl="ws"'s (no atomics on them), dq within fp32 reduce
    order. K/V broadcast by expand (head stride 0: v3 takes it, no TMA map describes it) run v3 under the default
    rule, bit for bit impl="v3"'s dk, dv, and match float64 (each expanded head's own gradients)."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd

    q, k, v, do = inputs(2, 4, 333, 200, d, torch.bfloat16, 1.0, 21, h_kv=2, strided=True)
    o, lse = fa2_wgmma.forward(q, k, v, causal=True)
    assert fa2_wgmma_bwd.main_kernel(q, k, v, do) == "ws"  # the rule's pick here; v3 under it would fail this test
    auto = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True)
    ws = fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=True, impl="ws")
    torch.cuda.synchronize()
    assert torch.equal(auto[1], ws[1]) and torch.equal(auto[2], ws[2])
    assert float((auto[0].double() - ws[0].double()).norm()) <= 1e-2 * float(ws[0].double().norm())
    kb, vb = (t[:, :1].expand(2, 4, 200, d) for t in (k, v))  # one kv head seen as four (stride 0)
    assert kb.stride(1) == 0
    o, lse = fa2_wgmma.forward(q, kb.contiguous(), vb.contiguous(), causal=True)
    grads = tuple(poisoned_like(t) for t in (q, kb.contiguous(), vb.contiguous()))
    assert fa2_wgmma_bwd.main_kernel(q, kb, vb, do) == "v3"
    got = fa2_wgmma_bwd.backward(q, kb, vb, o, lse, do, causal=True, out=grads)
    v3 = fa2_wgmma_bwd.backward(q, kb, vb, o, lse, do, causal=True, impl="v3")
    torch.cuda.synchronize()
    assert torch.equal(got[1], v3[1]) and torch.equal(got[2], v3[2])
    check_against_float64(grads, q, kb.contiguous(), vb.contiguous(), do, causal=True, dtype=torch.bfloat16)
