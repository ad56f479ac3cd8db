"""Backward kernels and kernels.attention (the differentiable op).

CPU (CI): the op traces on meta tensors, torch.compile(fullgraph=True) captures the forward and backward
custom ops with no graph break, and bad input gets one clear error. GPU (pytest -m gpu): the teaching
fa2 backward and every kernel with a backward against float64 autograd (hypothesis: odd shapes, tails,
Nq != Nk, causal with rows that see no key, scores up to ~1e4, each kernel's dtypes), opcheck, and a
compiled model's gradients against eager.

Tolerance of a gradient g against the float64 autograd gradient r (g_ref = the same algorithm in dense
float32 torch with o rounded to the input dtype, the one rounding Alg. 2's D = rowsum(dO o O) inherits):
    max|g - r| <= 3 max|g_ref - r| + ATOL[dtype] max|r|
so the bound follows what the dtype costs (scores ~1e4 make float32 S itself inexact) and stays tight
where the algorithm is exact.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.harness import Poisoned
from kernels import KERNELS

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _autograd():
    from kernels import autograd

    return autograd


def trainable():
    return [n for n, s in KERNELS.items() if s.backward is not None]


def meta(*shape, dtype=torch.float16, grad=True):
    return torch.empty(shape, device="meta", dtype=dtype, requires_grad=grad)


# ----------------------------------------------------------------------------- CPU

def test_fa2_has_a_backward_and_ci_compiles_it():
    assert KERNELS["fa2"].backward is KERNELS["fa2"].module.backward
    kernels = {kernel for _, kernel, _ in KERNELS["fa2"].compile_configs()}
    assert {"fa2_bwd_preprocess", "fa2_bwd", "fa2_bwd_dq"} <= kernels
    dpads = {d.get("D_PAD") for _, kernel, d in KERNELS["fa2"].compile_configs() if kernel == "fa2_bwd"}
    assert dpads == {64, 128}
    without = [n for n, s in KERNELS.items() if not hasattr(s.module, "backward")]
    assert all(KERNELS[n].backward is None for n in without)


def test_backward_shared_memory_fits_an_h200_at_the_default_blocks():
    from kernels import fa2

    h200_optin = 227 * 1024
    assert fa2.backward_shared_bytes(128) <= h200_optin
    assert 2 * (fa2.backward_shared_bytes(64) + 1024) <= 228 * 1024  # two blocks per SM at d <= 64
    assert fa2.backward_shared_bytes(128, 128, 128) > h200_optin  # the launcher refuses this one


def test_teaching_backward_default_blocks():
    """fa2_bwd.cu v5: 64 x 64 with the staging where it applies (16-bit, d_pad 128, d % 8 == 0, aligned rows), the
    H200's fastest (results/bwd_teaching_ab/v3_v4_staging_tiles); 32 x 32 where it does not; 64 x 64 at d <= 64."""
    from kernels import fa2

    assert fa2.backward_blocks(128, torch.float16) == (64, 64) == fa2.backward_blocks(96, torch.bfloat16)  # v5
    assert fa2.backward_blocks(128, torch.float32) == (32, 32) == fa2.backward_blocks(100, torch.float16)
    assert fa2.backward_blocks(128, torch.float16, aligned=False) == (32, 32)
    assert fa2.prefetch(torch.float16, 128) and not fa2.prefetch(torch.float32, 128)
    assert fa2.backward_blocks(40, torch.float32) == (64, 64)


@pytest.mark.slow
def test_teaching_backward_builds_keep_the_blocks_per_sm_their_shared_memory_allows():
    """fa2_bwd.cu's MIN_BLOCKS mirrors kernels/fa2.py's carving: wherever two blocks fit in shared memory
    (d <= 64 at 64 x 64, the 32 x 32 default at d = 128, with or without the prefetch), the registers stay
    within 128 per thread so the second block is not lost to them; the prefetch never costs a block."""
    from kernels import fa2, loader

    try:
        loader.nvrtc_version()
    except loader.ToolchainMissing as exc:
        pytest.skip(f"no NVRTC: {exc}")
    assert fa2.backward_blocks(64) == (64, 64) and fa2.backward_blocks(128) == (32, 32)
    for _, kernel, defs in fa2.compile_configs():
        if kernel != "fa2_bwd":
            continue
        d = defs["D_PAD"]
        smem = fa2.backward_shared_bytes(d, defs["BR"], defs["BC"], staged=bool(defs["FA2_PREFETCH"]))
        regs = loader.resource_usage(fa2.BWD_SOURCE, kernel, defines=defs, arch="sm_90")["registers"]
        if fa2.blocks_per_sm(smem) >= 2:
            assert regs <= 128, (defs, regs)
        if defs["FA2_PREFETCH"]:
            assert fa2.blocks_per_sm(smem) == fa2.blocks_per_sm(fa2.backward_shared_bytes(d, defs["BR"], defs["BC"]))
    assert fa2.blocks_per_sm(fa2.backward_shared_bytes(128, 32, 32, staged=True)) == 2
    assert fa2.blocks_per_sm(fa2.backward_shared_bytes(64)) == 2


def test_importing_kernels_does_not_register_the_ops():
    code = ("import sys, kernels; assert 'kernels.autograd' not in sys.modules; "
            "assert callable(kernels.attention); assert 'kernels.autograd' in sys.modules; "
            "assert 'cupy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


@pytest.mark.parametrize("causal", [False, True])
def test_meta_tensors_give_shapes_and_gradients(causal):
    ag = _autograd()
    q, k, v = meta(2, 3, 17, 64), meta(2, 3, 29, 64), meta(2, 3, 29, 64)
    o = ag.attention(q, k, v, causal=causal, kernel="fa2")
    assert o.shape == q.shape and o.dtype == q.dtype and o.device.type == "meta"
    o.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


class _Block(torch.nn.Module):
    """Projections around kernels.attention, with the (B, N, H, d) -> (B, H, N, d) transposes a
    transformer makes (non-contiguous inputs)."""

    def __init__(self, d_model=128, heads=2, kernel="fa2"):
        super().__init__()
        self.heads, self.kernel = heads, kernel
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)

    def forward(self, x):
        from kernels import attention

        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = attention(q, k, v, causal=True, kernel=self.kernel)
        return self.out(o.transpose(1, 2).reshape(b, n, c))


def _recording_backend(graphs):
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    def record(kind):
        def compiler(gm, _inputs):
            graphs.append((kind, [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]))
            return make_boxed_func(gm.forward)
        return compiler

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=record("fw"), bw_compiler=record("bw"))

    return backend


def test_compile_fullgraph_captures_forward_and_backward_ops():
    """torch.compile traces through the custom ops (fake implementations) with no graph break: one
    forward graph holding attention_fwd and one backward graph holding attention_bwd."""
    torch._dynamo.reset()
    graphs = []
    model = _Block().to(device="meta", dtype=torch.float16)
    compiled = torch.compile(model, fullgraph=True, backend=_recording_backend(graphs))
    x = meta(2, 33, 128)
    compiled(x).sum().backward()
    kinds = [kind for kind, _ in graphs]
    assert kinds == ["fw", "bw"], kinds
    fw, bw = graphs[0][1], graphs[1][1]
    assert any("attention_fwd" in t for t in fw) and not any("attention_bwd" in t for t in fw)
    assert any("attention_bwd" in t for t in bw)
    assert model.qkv.weight.grad is not None and model.qkv.weight.grad.shape == model.qkv.weight.shape


def test_bad_inputs_get_one_clear_error():
    ag = _autograd()
    q = meta(1, 2, 16, 64)
    with pytest.raises(ValueError, match="CUDA kernels: q is on cpu"):
        ag.attention(torch.randn(1, 2, 16, 64, dtype=torch.float16), q, q, kernel="fa2")
    with pytest.raises(ValueError, match="not a registered kernel; trainable kernels .*fa2"):
        ag.attention(q, q, q, kernel="flash3")
    no_bwd = [n for n, s in KERNELS.items() if s.backward is None]
    if no_bwd:
        with pytest.raises(ValueError, match=f"kernel '{no_bwd[0]}' has no backward.*fa2"):
            ag.attention(q, q, q, kernel=no_bwd[0])
    with pytest.raises(TypeError, match="dtype float64; kernel 'fa2' supports float32, float16, bfloat16"):
        ag.attention(*(meta(1, 2, 16, 64, dtype=torch.float64) for _ in range(3)), kernel="fa2")
    with pytest.raises(ValueError, match=r"d=160 unsupported: kernel 'fa2' takes d <= 128"):
        ag.attention(*(meta(1, 2, 16, 160) for _ in range(3)), kernel="fa2")
    with pytest.raises(ValueError, match="batch mismatch"):
        ag.attention(q, meta(2, 2, 16, 64), meta(2, 2, 16, 64), kernel="fa2")
    with pytest.raises(ValueError, match="H_kv dividing H: q has H = 2 heads, k and v have H_kv = 3"):
        ag.attention(q, meta(1, 3, 16, 64), meta(1, 3, 16, 64), kernel="fa2")
    with pytest.raises(ValueError, match="same number of heads"):
        ag.attention(q, meta(1, 1, 16, 64), meta(1, 2, 16, 64), kernel="fa2")
    with pytest.raises(ValueError, match="same sequence length"):
        ag.attention(q, meta(1, 2, 16, 64), meta(1, 2, 17, 64), kernel="fa2")
    with pytest.raises(ValueError, match="rank 4"):
        ag.attention(meta(2, 16, 64), q, q, kernel="fa2")
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        ag.attention(q, q, q, scale=float("nan"), kernel="fa2")
    with pytest.raises(TypeError, match="causal must be a bool"):
        ag.attention(q, q, q, causal=1, kernel="fa2")
    import numpy as np  # NumPy scalars are taken as the references take them
    assert ag.attention(q, q, q, causal=np.bool_(True), scale=np.float32(0.5), kernel="fa2").shape == q.shape
    for name in trainable():  # a head dim outside each kernel's set
        spec = KERNELS[name]
        dtype = spec.dtypes[0]
        d = next(x for x in range(1, 200) if not spec.supports_head_dim(x))
        with pytest.raises(ValueError, match=f"d={d} unsupported: kernel '{name}' takes"):
            ag.attention(*(meta(1, 1, 8, d, dtype=dtype) for _ in range(3)), kernel=name)


def test_registry_records_what_each_kernel_takes():
    """kernels.attention reads layouts from the registry (KernelSpec.layouts), not from kernel names: the teaching
    fa2 takes grouped-query K/V, fa2_wgmma also strided views; the deterministic mode is read off the backward's
    signature."""
    import inspect

    from kernels.registry import KernelSpec

    ag = _autograd()
    assert "fa2" in ag.kernels_taking("gqa") and "fa2" not in ag.kernels_taking("strided")
    if "fa2_wgmma" in ag._INFO:
        assert {"fa2_wgmma"} <= set(ag.kernels_taking("gqa")) & set(ag.kernels_taking("strided"))
    for name, info in ag._INFO.items():
        bwd = KERNELS[name].backward
        assert info["deterministic"] == (bwd is not None and "deterministic" in inspect.signature(bwd).parameters)
        assert info["gqa"] == ("gqa" in KERNELS[name].layouts)
    with pytest.raises(ValueError, match="layouts .*'ragged'.* unknown"):
        KernelSpec("x", "teaching", "fa2", "x", layouts=("ragged",))


@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_meta_grouped_query_shapes_and_gradients(group):
    """Grouped-/multi-query K/V through the custom ops on meta tensors: o like q (contiguous), dk, dv like k, v."""
    ag = _autograd()
    for name in ag.kernels_taking("gqa"):
        spec = KERNELS[name]
        d = 64 if spec.supports_head_dim(64) else spec.max_head_dim
        dtype = spec.dtypes[-1]
        q, k, v = meta(2, 8, 17, d, dtype=dtype), meta(2, 8 // group, 29, d, dtype=dtype), meta(2, 8 // group, 29, d,
                                                                                               dtype=dtype)
        o = ag.attention(q, k, v, causal=True, kernel=name)
        assert o.shape == q.shape and o.is_contiguous()
        o.sum().backward()
        for t in (q, k, v):
            assert t.grad.shape == t.shape and t.grad.dtype == t.dtype, name


def test_grouped_query_refused_by_kernels_without_it_naming_those_with_it():
    ag = _autograd()
    no_gqa = [n for n in trainable() if n not in ag.kernels_taking("gqa")]
    if not no_gqa:
        pytest.skip("every trainable kernel takes grouped-query K/V")
    spec = KERNELS[no_gqa[0]]
    d = 64 if spec.supports_head_dim(64) else spec.max_head_dim
    q, kv = meta(1, 4, 16, d, dtype=spec.dtypes[-1]), meta(1, 2, 16, d, dtype=spec.dtypes[-1])
    with pytest.raises(ValueError, match=f"kernel '{no_gqa[0]}' takes k, v with q's heads only; kernels that take "
                                         f"grouped-query K/V: .*fa2"):
        ag.attention(q, kv, kv, kernel=no_gqa[0])


def test_deterministic_refused_without_such_a_backward():
    ag = _autograd()
    q = meta(1, 2, 16, 64)
    assert "fa2" not in ag.kernels_taking("deterministic")  # its dQ atomics add in the order blocks run
    with pytest.raises(ValueError, match="the backward of kernel 'fa2' has no deterministic mode"):
        ag.attention(q, q, q, kernel="fa2", deterministic=True)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        ag.attention(q, q, q, kernel="fa2", deterministic=1)


class _Recorder:
    """A launcher stand-in that records the strides it is handed and answers with meta tensors in the
    launchers' layouts (o contiguous; dq, dk, dv like q, k, v)."""

    def __init__(self):
        self.seen = []

    def forward(self, q, k, v, *, causal, scale):
        self.seen.append(("fwd", q.stride(), k.stride(), v.stride()))
        return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)

    def backward(self, q, k, v, o, lse, do, *, causal, scale, deterministic=False):
        self.seen.append(("bwd", q.stride(), k.stride(), do.stride(), deterministic))
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@pytest.mark.parametrize("strided", [False, True])
def test_strided_views_pass_through_only_to_kernels_that_take_them(monkeypatch, strided):
    """A (B, N, H, d) tensor's .transpose(1, 2) reaches a "strided" kernel as that view (q, k, v, and the
    transposed gradient do), and a contiguous copy otherwise; deterministic reaches the backward."""
    from kernels.registry import KernelSpec

    ag = _autograd()
    rec = _Recorder()
    layouts = ("gqa", "strided") if strided else ("gqa",)
    monkeypatch.setitem(KERNELS, "_rec", rec)
    monkeypatch.setitem(ag._INFO, "_rec", dict(dtypes=(torch.float16,), head_dims=None, max_head_dim=128,
                                               trainable=True, gqa=True, strided=strided, deterministic=True))
    assert KernelSpec("_rec", "teaching", "fa2", "x", layouts=layouts).layouts == layouts
    # CPU tensors: the custom ops then run their real implementations (meta ones their fakes); the device check
    # is attention()'s first step, tested elsewhere
    monkeypatch.setattr(ag, "check_inputs", lambda *a, **kw: 0.125)
    x = torch.randn(2, 33, 4, 64, dtype=torch.float16, requires_grad=True)  # (B, N, H, d)
    kv = torch.randn(2, 33, 2, 64, dtype=torch.float16, requires_grad=True)  # H_kv = 2
    q, k, v = x.transpose(1, 2), kv.transpose(1, 2), kv.transpose(1, 2)
    o = ag.attention(q, k, v, causal=True, kernel="_rec", deterministic=True)
    w = torch.randn(2, 33, 4, 64, dtype=torch.float16)
    (o.transpose(1, 2) * w).sum().backward()  # do = w.transpose(1, 2): a view of a (B, N, H, d) gradient
    (_, qs, ks, vs), (_, bqs, bks, dos, det) = rec.seen
    if strided:
        assert (qs, ks, vs) == (q.stride(), k.stride(), v.stride()) and (bqs, bks) == (qs, ks)
        assert dos == w.transpose(1, 2).stride()
    else:
        assert (qs, ks) == (q.contiguous().stride(), k.contiguous().stride())
        assert dos == q.contiguous().stride()
    assert det is True
    assert x.grad.shape == x.shape and kv.grad.shape == kv.shape
    rec.seen.clear()  # a sum's gradient (expanded ones, stride 0) is copied even for a strided kernel
    ag.attention(q, k, v, kernel="_rec").sum().backward()
    assert rec.seen[1][3] == q.contiguous().stride() and rec.seen[1][4] is False


def test_gradients_come_back_in_the_layouts_the_fakes_promise():
    """attention_bwd returns dq, dk, dv with torch.empty_like(q, k, v)'s strides (what its fake says, what a compiled
    graph assumes) even where a launcher lays one out otherwise (fa2_wgmma's dv follows k): a copy then, else none."""
    ag = _autograd()
    v = torch.randn(2, 4, 33, 64)                           # contiguous v
    k = torch.randn(2, 33, 4, 64).transpose(1, 2)           # a (B, N, H, d) view
    dv_like_k = torch.randn(2, 33, 4, 64).transpose(1, 2)
    out = ag._in_layout_of(dv_like_k, v)
    assert out.stride() == v.stride() and torch.equal(out, dv_like_k)
    assert ag._in_layout_of(dv_like_k, k) is dv_like_k
    g = torch.randn(2, 33, 1, 64).transpose(1, 2)            # one head: its stride differs, no layout does
    assert g.stride() != torch.empty(2, 1, 33, 64).stride() and ag._in_layout_of(g, torch.empty(2, 1, 33, 64)) is g


class _ReferenceLauncher:
    """Stands in for a CUDA launcher on the CPU (variants/fa2.py, FA2 Alg. 1 and 2), so the custom ops'
    plumbing (schema, fake implementations, autograd wiring, saved tensors) is checked without a GPU."""

    @staticmethod
    def forward(q, k, v, *, causal, scale):
        from variants import VARIANTS

        return VARIANTS["fa2"].forward(q, k, v, causal=causal, scale=scale, block_q=16, block_k=16)

    @staticmethod
    def backward(q, k, v, o, lse, do, *, causal, scale):
        from variants import VARIANTS

        return VARIANTS["fa2"].backward(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=16, block_k=16)


@pytest.mark.parametrize("causal", [False, True])
def test_custom_ops_pass_opcheck_with_a_cpu_stand_in(monkeypatch, causal):
    ag = _autograd()
    monkeypatch.setitem(KERNELS, "_cpu_reference", _ReferenceLauncher())
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 37, 16, generator=g, requires_grad=True)  # Nq > Nk, causal: rows see no key
    k = torch.randn(1, 2, 29, 16, generator=g, requires_grad=True)
    v = torch.randn(1, 2, 29, 16, generator=g, requires_grad=True)
    torch.library.opcheck(ag.attention_fwd, (q, k, v, causal, 0.25, "_cpu_reference"))
    o, lse = ag.attention_fwd(q, k, v, causal, 0.25, "_cpu_reference")
    do = torch.randn(o.shape, generator=g)
    torch.library.opcheck(ag.attention_bwd, (q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(), do,
                                             causal, 0.25, "_cpu_reference"))
    grads = torch.autograd.grad(o, (q, k, v), do)  # through register_autograd: dq, dk, dv in that order
    assert_grads_close(grads, q.detach(), k.detach(), v.detach(), do, causal, 0.25)
    if causal:
        assert (grads[0][..., :8, :] == 0).all()  # the 8 rows that see no key


# ----------------------------------------------------------------------------- GPU helpers



def _scores(q, k, causal, scale):
    s = scale * (q @ k.transpose(-1, -2))
    if causal:
        from variants.reference import causal_mask

        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return s


def float64_grads(q, k, v, do, causal, scale):
    """Exact gradients: float64 autograd of softmax attention (rows that see no key: o = 0)."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = _scores(q64, k64, causal, scale)
    m = s.amax(-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    l = e.sum(-1, keepdim=True)
    o = (e / torch.where(l == 0, torch.ones_like(l), l)) @ v64
    return torch.autograd.grad(o, (q64, k64, v64), do.double())


def float32_grads(q, k, v, do, causal, scale):
    """Alg. 2's arithmetic densely in float32, o rounded to the input dtype before D, outputs rounded:
    what the input dtype costs any correct kernel (the yardstick of the tolerance). Also returns the
    magnitudes the rounding of S and L is amplified by (see assert_grads_close)."""
    q32, k32, v32, do32 = (t.float() for t in (q, k, v, do))
    s = _scores(q32, k32, causal, scale)
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)))
    o = (p @ v32).to(q.dtype).float()
    dp_minus_d = do32 @ v32.transpose(-1, -2) - (do32 * o).sum(-1, keepdim=True)
    ds = p * dp_minus_d
    grads = tuple(g.to(q.dtype) for g in (scale * ds @ k32, scale * ds.transpose(-1, -2) @ q32,
                                          p.transpose(-1, -2) @ do32))
    finite = torch.isfinite(s)
    s_max = s[finite].abs().max().item() if finite.any() else 0.0
    seen = p > 0
    dpd_max = dp_minus_d[seen].abs().max().item() if seen.any() else 0.0
    return grads, s_max, dpd_max


def unfused_float32_grads(q, k, v, do, causal, scale):
    """FA1 Alg. 3 densely in float32 with S, P, dP and dS rounded to the input dtype where the unfused
    algorithm keeps them in HBM (variants/naive.py): the yardstick of the naive kernels, whose 16-bit S
    costs P a relative error of up to half an ulp of |S| (fp16 at |S| ~ 100: 3%), more than the fused
    kernels' float32 S. Same return as float32_grads."""
    def hbm(t):
        return t.to(q.dtype).float()

    q32, k32, v32, do32 = (t.float() for t in (q, k, v, do))
    s = hbm(_scores(q32, k32, causal, scale))                      # FA1 Alg. 0 line 1
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    den = e.sum(-1, keepdim=True)
    p = hbm(e / torch.where(den == 0, torch.ones_like(den), den))  # FA1 Alg. 0 line 2
    dp = hbm(do32 @ v32.transpose(-1, -2))                        # FA1 Alg. 3 line 2
    dp_minus_d = dp - (p * dp).sum(-1, keepdim=True)              # FA1 Alg. 3 line 3
    ds = hbm(p * dp_minus_d)
    grads = tuple(g.to(q.dtype) for g in (scale * ds @ k32, scale * ds.transpose(-1, -2) @ q32,
                                          p.transpose(-1, -2) @ do32))
    finite = torch.isfinite(s)
    s_max = s[finite].abs().max().item() if finite.any() else 0.0
    seen = p > 0
    dpd_max = dp_minus_d[seen].abs().max().item() if seen.any() else 0.0
    return grads, s_max, dpd_max


def grad_floors(q, k, v, do, scale, s_max):
    """What float32 rounding of the scores leaves in each gradient, whatever the kernel's order of sums.

    A kernel rebuilds P = exp(S - L) from a recomputed S and the forward's L, each rounded in float32
    (in the exp2 domain, S·scale·log2e): P carries a relative error up to δ ≈ 8·eps32·|S|max. dv = Pᵀ dO
    takes δ relative; dq = scale·dS K and dk = scale·dSᵀ Q take δ·|dO|·|V| through dS = P ∘ (dP - D),
    times |K| or |Q|. At ordinary scores δ ~ 1e-6 and the floors vanish; at scores ~1e4 the exact dq, dk
    are ~0 (P one-hot) and these floors are what can be checked: one largest-value product each, no more
    (a looser product let noise pass: review of stop 10)."""
    eps = torch.finfo(torch.float32).eps
    delta = 8 * eps * s_max
    aq, ak, av, ado = (t.double().abs().max().item() for t in (q, k, v, do))
    return scale * ak * delta * ado * av, scale * aq * delta * ado * av, delta * ado


def assert_grads_close(got, q, k, v, do, causal, scale, what="", unfused=False):
    """max|g - r| <= 4 max|y - r| + ATOL max|r| + floor + 1e-6 (1 + max|r|): r the float64 gradient,
    y the same algorithm in dense float32 (`float32_grads`, or `unfused_float32_grads` for the naive
    kernels (unfused=True); measured rounding; 4x for another order of sums), floor what the scores'
    float32 rounding leaves (`grad_floors`)."""
    exact = float64_grads(q, k, v, do, causal, scale)
    yard, s_max, _ = (unfused_float32_grads if unfused else float32_grads)(q, k, v, do, causal, scale)
    floors = grad_floors(q, k, v, do, scale, s_max)
    for name, g, r, y, t, floor in zip(("dq", "dk", "dv"), got, exact, yard, (q, k, v), floors):
        assert g.dtype == t.dtype and g.shape == t.shape, f"{name} {what}"
        assert not torch.isnan(g).any(), f"NaN in {name} {what}"
        err = (g.double() - r).abs().max().item()
        r_max = r.abs().max().item()
        bound = (4 * (y.double() - r).abs().max().item() + ATOL[t.dtype] * r_max + floor
                 + 1e-6 * (1 + r_max))
        assert err <= bound, f"{name}: max err {err:.3g} > {bound:.3g} {what}"


def assert_gqa_grads_close(got, q, k, v, do, causal, scale, what=""):
    """assert_grads_close for grouped-query K/V (k, v with H_kv heads dividing q's H): the float64 reference runs on
    K/V repeat_interleave'd to H heads (the test's copy, never the kernel's), and its dk, dv are summed over each
    group; the yardstick and floors likewise, the floors times the group (dk, dv sum that many heads)."""
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    def fold(grads):  # (dq, dk, dv) on H heads -> dk, dv on H_kv heads (float64 sums)
        dq, dk, dv = grads
        return (dq.double(), *(t.double().unflatten(1, (k.shape[1], group)).sum(2) for t in (dk, dv)))

    exact = fold(float64_grads(q, kr, vr, do, causal, scale))
    yard, s_max, _ = float32_grads(q, kr, vr, do, causal, scale)
    yard = fold(yard)
    f_q, f_k, f_v = grad_floors(q, kr, vr, do, scale, s_max)
    for name, g, r, y, t, floor in zip(("dq", "dk", "dv"), got, exact, yard, (q, k, v),
                                       (f_q, group * f_k, group * f_v)):
        assert g.dtype == t.dtype and g.shape == t.shape, f"{name} {what}: {g.dtype} {tuple(g.shape)}"
        assert not torch.isnan(g).any(), f"NaN in {name} {what}"
        err = (g.double() - r).abs().max().item()
        r_max = r.abs().max().item()
        bound = (4 * (y - r).abs().max().item() + ATOL[t.dtype] * r_max + floor + 1e-6 * (1 + r_max))
        assert err <= bound, f"{name}: max err {err:.3g} > {bound:.3g} {what}"


def test_gradient_check_refuses_noise():
    """The check must fail noise: at ordinary scores noise of the gradient's size, at scores ~1e4 (where
    the exact dq, dk are ~0) noise ten times the rounding floor."""
    torch.manual_seed(3)
    for amp in (1.0, 40.0):
        q, k, v, do = (torch.randn(1, 2, 50, 16) for _ in range(4))
        q, k = q * amp, k * amp
        exact = float64_grads(q, k, v, do, True, 0.25)
        _, s_max, _ = float32_grads(q, k, v, do, True, 0.25)
        floors = grad_floors(q, k, v, do, 0.25, s_max)
        for i in range(3):
            noisy = [r.float() for r in exact]
            noisy[i] = (exact[i] + torch.randn_like(exact[i]) * (10 * floors[i] + exact[i].abs().max())).float()
            with pytest.raises(AssertionError):
                assert_grads_close(tuple(noisy), q, k, v, do, True, 0.25)
        assert_grads_close(tuple(r.float() for r in exact), q, k, v, do, True, 0.25)


@st.composite
def grad_problems(draw, *, dtypes, head_dims=None, max_n=300):
    n_q, n_k = draw(st.integers(1, max_n)), draw(st.integers(1, max_n))
    d = draw(st.sampled_from(head_dims)) if head_dims else draw(st.integers(1, 128))
    return dict(batch=draw(st.integers(1, 2)), heads=draw(st.integers(1, 3)), n_q=n_q, n_k=n_k, d=d,
                causal=draw(st.booleans()), dtype=draw(st.sampled_from(dtypes)),
                scale=draw(st.one_of(st.none(), st.floats(0.05, 2.0))),
                large_scores=draw(st.booleans()), seed=draw(st.integers(0, 2**31 - 1)))


def grad_inputs(pr):
    """q, k, v, do on the GPU; with large_scores, scale·q·k reaches ~1e4 (tests/strategies.py)."""
    g = torch.Generator(device="cuda").manual_seed(pr["seed"])
    b, h, n_q, n_k, d = pr["batch"], pr["heads"], pr["n_q"], pr["n_k"], pr["d"]
    q = torch.randn(b, h, n_q, d, generator=g, device="cuda")
    k = torch.randn(b, h, n_k, d, generator=g, device="cuda")
    v = torch.randn(b, h, n_k, d, generator=g, device="cuda")
    do = torch.randn(b, h, n_q, d, generator=g, device="cuda")
    scale = pr["scale"] if pr["scale"] is not None else 1 / math.sqrt(d)
    if pr["large_scores"]:
        a = math.sqrt(1e4 / (scale * math.sqrt(d)))
        q, k = q * a, k * a
    dt = pr["dtype"]
    return q.to(dt), k.to(dt), v.to(dt), do.to(dt), scale


TEACHING_BACKWARDS = ("fa2", "naive")  # FA2 Alg. 2 and the unfused FA1 Alg. 3 at the same tier


def teaching_backward(q, k, v, do, causal, scale, name="fa2", **blocks):
    """The teaching forward then backward; naive's backward reads the forward's P (FA1 Alg. 3)."""
    spec = KERNELS[name]
    with Poisoned():
        if name == "naive":
            saved = {}
            o, lse = spec.forward(q, k, v, causal=causal, scale=scale, saved=saved, **blocks)
            grads = spec.backward(q, k, v, o, lse, do, causal=causal, scale=scale, P=saved["P"], **blocks)
        else:
            o, lse = spec.forward(q, k, v, causal=causal, scale=scale, **blocks)
            grads = spec.backward(q, k, v, o, lse, do, causal=causal, scale=scale, **blocks)
    torch.cuda.synchronize()
    return grads


def scores_rounded(name, pr) -> bool:
    """naive holds S (and P, dP, dS) in HBM in the input dtype: at scores ~1e4 an fp16/bf16 S is off by
    units (variants/naive.py ScoreRangeWarning), which no gradient tolerance should forgive; those
    problems are the forward's documented limit, not checked here."""
    return KERNELS[name].variant == "naive" and pr["large_scores"] and pr["dtype"] != torch.float32


# ----------------------------------------------------------------------------- GPU: teaching fa2

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", TEACHING_BACKWARDS)
@pytest.mark.parametrize("block_q, block_k", [(64, 64), (16, 64), (64, 16), (32, 32)])  # 32 x 32: fa2's d > 64
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(pr=grad_problems(dtypes=[torch.float32, torch.float16, torch.bfloat16]))
def test_teaching_backward_matches_float64_autograd(name, block_q, block_k, pr):
    assume(not scores_rounded(name, pr))
    q, k, v, do, scale = grad_inputs(pr)
    got = teaching_backward(q, k, v, do, pr["causal"], scale, name, block_q=block_q, block_k=block_k)
    assert_grads_close(got, q, k, v, do, pr["causal"], scale, what=f"{name} Br={block_q} Bc={block_k} {pr}",
                       unfused=name == "naive")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("d", [40, 64, 100, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", TEACHING_BACKWARDS)
def test_teaching_backward_many_blocks(name, dtype, d, causal):
    """Several Q and key blocks with tails on both sides: 13 x 18 tiles of 64."""
    pr = dict(batch=2, heads=3, n_q=777, n_k=1100, d=d, dtype=dtype, scale=None, large_scores=False,
              seed=d + causal)
    q, k, v, do, scale = grad_inputs(pr)
    got = teaching_backward(q, k, v, do, causal, scale, name)
    assert_grads_close(got, q, k, v, do, causal, scale, what=f"{name} {dtype} d={d} causal={causal}",
                       unfused=name == "naive")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", TEACHING_BACKWARDS)
def test_teaching_backward_rows_that_see_no_key(name):
    """Causal, Nq > Nk: the first Nq - Nk rows see nothing: dq = 0 there, no NaN anywhere."""
    torch.manual_seed(1)
    q, do = torch.randn(1, 2, 140, 24, device="cuda"), torch.randn(1, 2, 140, 24, device="cuda")
    k, v = torch.randn(1, 2, 37, 24, device="cuda"), torch.randn(1, 2, 37, 24, device="cuda")
    scale = 1 / math.sqrt(24)
    dq, _, _ = got = teaching_backward(q, k, v, do, True, scale, name, block_q=32, block_k=16)
    assert (dq[..., :103, :] == 0).all() and dq[..., 103:, :].abs().sum() > 0
    assert all(torch.isfinite(g).all() for g in got)
    assert_grads_close(got, q, k, v, do, True, scale)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_teaching_dk_dv_are_deterministic():
    """dK_j, dV_j are owned by one block each: two runs agree bit for bit (a race would not); dQ's
    float32 atomics may differ in the last bits only."""
    pr = dict(batch=1, heads=4, n_q=333, n_k=500, d=72, dtype=torch.float16, scale=None,
              large_scores=False, seed=3)
    q, k, v, do, scale = grad_inputs(pr)
    first = teaching_backward(q, k, v, do, True, scale)
    second = teaching_backward(q, k, v, do, True, scale)
    assert torch.equal(first[1], second[1]) and torch.equal(first[2], second[2])
    assert (first[0].float() - second[0].float()).abs().max() <= 2e-3 * first[0].float().abs().max()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_teaching_backward_bad_saved_tensors():
    bwd = KERNELS["fa2"].backward
    q = torch.randn(1, 2, 64, 32, device="cuda")
    lse = torch.zeros(1, 2, 64, device="cuda")
    with pytest.raises(ValueError, match="o must match q"):
        bwd(q, q, q, q[..., :16], lse, q)
    with pytest.raises(ValueError, match="do must match q"):
        bwd(q, q, q, q, lse, q.half())
    with pytest.raises(ValueError, match="lse must be float32 of shape"):
        bwd(q, q, q, q, lse[..., :10], q)
    with pytest.raises(ValueError, match="lse must be float32"):
        bwd(q, q, q, q, lse.double(), q)
    with pytest.raises(ValueError, match="shared memory"):
        bwd(*(torch.randn(1, 1, 8, 128, device="cuda") for _ in range(4)), torch.zeros(1, 1, 8, device="cuda"),
            torch.randn(1, 1, 8, 128, device="cuda"), block_q=128, block_k=128)


# ----------------------------------------------------------------------------- GPU: kernels.attention

def _attention_case(name):
    spec = KERNELS[name]
    if not spec.available():
        pytest.skip(f"{name} does not run on this GPU")
    return spec


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", trainable())
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_attention_gradients_match_float64_autograd(name, data):
    spec = _attention_case(name)
    pr = data.draw(grad_problems(dtypes=list(spec.dtypes), head_dims=_autograd()._INFO[name]["head_dims"]))
    assume(not scores_rounded(name, pr))
    q, k, v, do, scale = grad_inputs(pr)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = _autograd().attention(*leaves, causal=pr["causal"], scale=pr["scale"], kernel=name)
    o.backward(do)
    assert_grads_close([t.grad for t in leaves], q, k, v, do, pr["causal"], scale, what=f"{name} {pr}",
                       unfused=spec.variant == "naive")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", trainable())
def test_opcheck(name, causal=True):  # causal: the masks too; one flag keeps opcheck's compiles few
    spec = _attention_case(name)
    ag = _autograd()
    d = 64 if spec.supports_head_dim(64) else spec.max_head_dim
    dtype = torch.float16
    q = torch.randn(1, 2, 100, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(1, 2, 77, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(1, 2, 77, d, device="cuda", dtype=dtype, requires_grad=True)
    torch.library.opcheck(ag.attention_fwd, (q, k, v, causal, 0.125, name))
    o, lse = ag.attention_fwd(q, k, v, causal, 0.125, name)
    do = torch.randn_like(o)
    torch.library.opcheck(ag.attention_bwd, (q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(),
                                             do, causal, 0.125, name))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_compiled_model_matches_eager_without_graph_breaks():
    """One kernel (inductor's compile is the slow part): the default where it trains here, else fa2."""
    ready = [n for n in ("fa2_wgmma", "fa2") if n in trainable() and KERNELS[n].available()]
    if not ready:
        pytest.skip("no kernel with a backward runs on this GPU")
    name = ready[0]
    spec = KERNELS[name]
    dtype = torch.bfloat16 if torch.bfloat16 in spec.dtypes else spec.dtypes[0]
    d = 64 if spec.supports_head_dim(64) else spec.max_head_dim
    torch.manual_seed(0)
    model = _Block(d_model=2 * d, heads=2, kernel=name).to(device="cuda", dtype=dtype)
    x = torch.randn(2, 190, 2 * d, device="cuda", dtype=dtype)
    assert_compiled_matches_eager(model, x, name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cpu_tensors_are_refused_not_computed():
    with pytest.raises(ValueError, match="CUDA kernels"):
        _autograd().attention(*(torch.randn(1, 1, 8, 64) for _ in range(3)), kernel="fa2")


def assert_compiled_matches_eager(model, x, name) -> None:
    """torch.compile(fullgraph=True) of `model` gives the parameter gradients eager gives (a graph break is an
    error). tests/test_attention_gqa.py uses it too."""
    model(x).float().square().mean().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: a graph break is an error
    compiled(x).float().square().mean().backward()
    for ge, p in zip(eager, model.parameters()):
        assert torch.allclose(p.grad.float(), ge.float(), rtol=5e-2, atol=5e-2 * ge.float().abs().max().item()), name
