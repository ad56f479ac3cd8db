"""Hypothesis strategies and tolerances shared by the CPU and GPU equivalence suites."""
from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# max |o - o_ref| / max(1, max|v|) and |lse - lse_ref| / max(1, |lse_ref|), per input dtype, for
# scores of order 1. The half types round f (v_once), the running O (fa1) and S, P (naive).
TOLERANCE = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}
# With scores ~1e4, float32 S itself carries ~|S|·sqrt(d)·eps32 ≈ 1e-2 absolute error, and softmax
# passes it on to P: the reference (exact from the same inputs) is that far from any float32 code.
LARGE_SCORE_O_TOLERANCE = 3e-2


@st.composite
def problems(draw, *, max_n=300, max_d=128, max_tiles=10, min_block=1):
    """A random attention problem: shapes, blocks, causal flag, dtype, scale and score magnitude.

    Blocks are drawn so each side has at most `max_tiles` tiles (the references loop in Python).
    """
    n_q = draw(st.integers(1, max_n))
    n_k = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    block_q = draw(st.integers(max(min_block, math.ceil(n_q / max_tiles)), max(min_block, n_q + 8)))
    block_k = draw(st.integers(max(min_block, math.ceil(n_k / max_tiles)), max(min_block, n_k + 8)))
    return dict(
        batch=draw(st.integers(1, 2)),
        heads=draw(st.integers(1, 2)),
        n_q=n_q, n_k=n_k, d=d, block_q=block_q, block_k=block_k,
        causal=draw(st.booleans()),
        dtype=draw(st.sampled_from(list(DTYPES.values()))),
        scale=draw(st.one_of(st.none(), st.floats(0.01, 2.0))),
        large_scores=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(pr, device="cpu"):
    """Random q, k, v (never zeros); with large_scores the scores reach ~1e4."""
    gen = torch.Generator().manual_seed(pr["seed"])
    shape_q = (pr["batch"], pr["heads"], pr["n_q"], pr["d"])
    shape_k = (pr["batch"], pr["heads"], pr["n_k"], pr["d"])
    q = torch.randn(shape_q, generator=gen)
    k = torch.randn(shape_k, generator=gen)
    v = torch.randn(shape_k, generator=gen)
    if pr["large_scores"]:
        # scale·|q·k| ~ 1e4: q·k has std ~ sqrt(d)·a², so pick a to hit it at the drawn scale
        scale = pr["scale"] if pr["scale"] is not None else 1 / math.sqrt(pr["d"])
        a = math.sqrt(1e4 / (scale * math.sqrt(pr["d"])))
        q, k = q * a, k * a
    dt = pr["dtype"]
    return q.to(dt).to(device), k.to(dt).to(device), v.to(dt).to(device)


def assert_close_to_reference(o, lse, ref_o, ref_lse, v, dtype, *, large_scores=False,
                              loose_half_scores=False, extra_tol=0.0, what=""):
    """o, lse against the float64 reference; rows that see no key must be exactly 0 and -inf.

    extra_tol: added to the dtype's tolerance (naive_score_tolerance: S rounded in HBM).

    loose_half_scores: S itself was rounded to a half type (naive) at scores ~1e4, so softmax can
    pick a different near-maximum; then only finiteness, the convex hull of V and lse are checked.
    """
    assert o.dtype == dtype and lse.dtype == torch.float32, what
    assert o.shape == ref_o.shape and lse.shape == ref_lse.shape, what
    o64, lse64 = o.double().cpu(), lse.double().cpu()
    ref_o, ref_lse = ref_o.cpu(), ref_lse.cpu()
    assert not torch.isnan(o64).any(), f"NaN in o {what}"
    assert not torch.isnan(lse64).any(), f"NaN in lse {what}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse64), empty), f"rows that see no key differ {what}"
    assert (o64[empty] == 0).all(), f"rows that see no key must give o = 0 {what}"
    tol = TOLERANCE[dtype] + extra_tol
    seen = ~empty
    lse_err = ((lse64 - ref_lse).abs()[seen] / ref_lse.abs()[seen].clamp(min=1)).max().item() \
        if seen.any() else 0.0
    v64 = v.double().cpu()
    if loose_half_scores:
        assert torch.isfinite(o64).all(), what
        lo = v64.amin(dim=-2, keepdim=True) - 1e-2 * v64.abs().amax()
        hi = v64.amax(dim=-2, keepdim=True) + 1e-2 * v64.abs().amax()
        inside = (o64 >= lo) & (o64 <= hi)  # rows that see no key were checked above (o = 0)
        assert inside[seen].all(), f"o outside the convex hull of V {what}"
        # S was rounded to dtype: its max (and lse) carries up to half an ulp of relative error
        eps = torch.finfo(dtype).eps
        assert lse_err <= eps, f"lse rel err {lse_err:.3g} > {eps:g} {what}"
        return
    o_err = (o64 - ref_o).abs().max().item() / max(1.0, v64.abs().max().item())
    if large_scores:
        tol = max(tol, LARGE_SCORE_O_TOLERANCE)
    assert o_err <= tol, f"o err {o_err:.3g} > {tol:g} {what}"
    assert lse_err <= tol, f"lse rel err {lse_err:.3g} > {tol:g} {what}"


def max_visible_score(q, k, *, causal, scale) -> float:
    """max |scale·q·k| over the scores the causal mask leaves visible (float64)."""
    d = q.shape[-1]
    s = (q.double() @ k.double().transpose(-1, -2)) * (1 / math.sqrt(d) if scale is None else scale)
    if causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        seen = torch.arange(n_k).unsqueeze(0) <= torch.arange(n_q).unsqueeze(-1) + (n_k - n_q)
        s = s.masked_fill(~seen, 0)
    return s.abs().max().item() if s.numel() else 0.0


def naive_score_tolerance(q, k, *, causal, scale, dtype) -> float:
    """What rounding S (and its row max) to `dtype` in HBM adds to naive's error: each visible score
    moves by up to δ = max|S|·eps/2, so a probability by a factor up to e^{±2δ} (and its row sum
    likewise): about 4δ of o's scale. 0 for float32/float64 (S is float32 on chip in every variant)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return 0.0
    return 4 * max_visible_score(q, k, causal=causal, scale=scale) * torch.finfo(dtype).eps / 2


# issue 46 item 5: the GPU model's rows at any size answer in well under a second (gpumodel.gpu_model._place_many,
# gpumodel/residency.py's closed waves, backward_model._makespan): B·H up to the grid's 65,535 rows (the external kernels
# past it), N to the report's 65,536 Q blocks, and long lists of lengths
MODEL_KERNELS = ("fa2_wgmma", "fa2_tc", "fa2", "sdpa_flash", "sdpa_cudnn", "v_once", "v_once_tc", "naive", "fa1")
BACKWARD_KERNELS = ("fa2_wgmma", "fa2", "sdpa_flash", "sdpa_cudnn")


@st.composite
def large_model_rows(draw):
    """argv of one `fa-traffic predict` with large counts: (argv, rows it prints at most)."""
    pass_name = draw(st.sampled_from(["forward", "forward", "backward", "train"]))
    kernel = draw(st.sampled_from(MODEL_KERNELS if pass_name == "forward" else BACKWARD_KERNELS))
    d = draw(st.sampled_from([64, 128] if pass_name != "forward" else [64, 96, 128, 256]))
    big = st.one_of(st.integers(1, 65535), st.sampled_from([1, 132, 133, 264, 4095, 65535]))
    batch, heads = draw(big), draw(st.integers(1, 64))
    if kernel not in ("sdpa_flash", "sdpa_cudnn"):
        heads = max(1, min(heads, 65535 // batch))  # the launchers' 65,535 grid rows
    n = st.one_of(st.integers(1, 1 << 22), st.sampled_from([1 << 20, (1 << 20) + 1, 12345, 48 * 1024]))
    lengths = draw(st.lists(n, min_size=1, max_size=3))
    argv = ["predict", "--kernel", kernel, "--batch", str(batch), "--heads", str(heads), "--head-dim", str(d),
            "--seq-len", ",".join(map(str, lengths)), "--pass", pass_name, "--format", "json"]
    if draw(st.booleans()):
        argv.append("--causal")
    if draw(st.booleans()):
        argv += ["--seq-len-k", str(draw(n))]
    return argv, len(lengths)
