"""Grouped-query / multi-query K/V and strided views through the kernels (issue 42, the client side).

CPU: the shape rules (counting.checks with gqa=True) and the teaching launchers' grouped check, no GPU.
GPU (marked gpu): the teaching fa2 forward and backward with k, v (B, H_kv, Nk, d) against float64 autograd on
K/V repeat_interleave'd (the test's copy; the kernels never repeat K/V), group sizes 1, 2, 4, 8 (8 with H_kv = 1:
multi-query), odd shapes, Nq > Nk causal so rows see no key, outputs poisoned; then kernels.attention for every
kernel that takes grouped-query K/V, with (B, N, H, d) views for those that take strided inputs, and the
deterministic mode where a backward has it; opcheck and torch.compile(fullgraph=True) on those inputs.
"""
from __future__ import annotations

import math

import pytest
import torch

from bench.harness import Poisoned
from kernels import KERNELS
from tests.test_kernels_backward import ATOL, assert_compiled_matches_eager, assert_gqa_grads_close

GROUPS = [(1, 3), (2, 2), (4, 1), (8, 1)]  # (group = H / H_kv, H_kv): 8 x 1 is multi-query attention


def _ag():
    from kernels import autograd

    return autograd


# ----------------------------------------------------------------------------- CPU


def test_shape_rules_for_grouped_query():
    from counting.checks import check_shapes

    assert check_shapes((2, 8, 5, 64), (2, 2, 7, 64), (2, 2, 7, 64), gqa=True) == (2, 8, 5, 7, 64)
    with pytest.raises(ValueError, match="heads mismatch"):
        check_shapes((2, 8, 5, 64), (2, 2, 7, 64), (2, 2, 7, 64))
    with pytest.raises(ValueError, match="H_kv dividing H: q has H = 8 heads, k and v have H_kv = 3"):
        check_shapes((2, 8, 5, 64), (2, 3, 7, 64), (2, 3, 7, 64), gqa=True)
    with pytest.raises(ValueError, match="same number of heads"):
        check_shapes((2, 8, 5, 64), (2, 2, 7, 64), (2, 4, 7, 64), gqa=True)


def test_teaching_grouped_check_gives_the_problem_and_refuses_huge_scores():
    from kernels import _teaching

    q, k = torch.randn(2, 8, 5, 16), torch.randn(2, 2, 7, 16)
    p = _teaching._check_grouped(q, k, causal=True, scale=None, block_q=64, block_k=64)
    assert (p.batch, p.heads, p.n_q, p.n_k, p.d) == (2, 8, 5, 7, 16) and p.scale == 0.25
    assert _teaching.heads_per_kv(q, k) == 4
    with pytest.raises(ValueError, match="beyond float32's largest finite"):
        _teaching._check_grouped(q * 1e19, k * 1e19, causal=False, scale=1.0, block_q=64, block_k=64)


def test_compile_fullgraph_traces_grouped_query_views_on_meta():
    """torch.compile(fullgraph=True) of a grouped-query block whose q, k, v are (B, N, H, d) views, on meta tensors
    (the fake implementations): no graph break, both custom ops captured, every parameter's gradient shaped right;
    for a kernel that takes strided views and one that copies."""
    from tests.test_kernels_backward import _recording_backend

    ag = _ag()
    for name in ag.kernels_taking("gqa"):
        torch._dynamo.reset()
        graphs = []
        info = ag._INFO[name]
        d = 64 if info["head_dims"] is None or 64 in info["head_dims"] else info["head_dims"][0]
        dtype = torch.bfloat16 if torch.bfloat16 in info["dtypes"] else info["dtypes"][0]
        model = _GQABlock(d=d, heads=4, kv_heads=2, kernel=name).to(device="meta", dtype=dtype)
        compiled = torch.compile(model, fullgraph=True, backend=_recording_backend(graphs))
        compiled(torch.empty(2, 33, 4 * d, device="meta", dtype=dtype)).sum().backward()
        assert [kind for kind, _ in graphs] == ["fw", "bw"], name
        assert any("attention_fwd" in t for t in graphs[0][1]) and any("attention_bwd" in t for t in graphs[1][1])
        for p in model.parameters():
            assert p.grad is not None and p.grad.shape == p.shape, name


# ----------------------------------------------------------------------------- GPU: teaching fa2


def _reference(q, k, v, causal, scale):
    from variants.reference import attention_reference

    group = q.shape[1] // k.shape[1]
    return attention_reference(q.double(), k.double().repeat_interleave(group, 1),
                               v.double().repeat_interleave(group, 1), causal=causal, scale=scale)


@pytest.mark.parametrize("group, h_kv", GROUPS)
@pytest.mark.parametrize("dtype, d", [(torch.float32, 40), (torch.bfloat16, 128), (torch.float16, 72)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_teaching_fa2_grouped_query_matches_float64(group, h_kv, dtype, d, causal):
    from kernels import fa2

    g = torch.Generator(device="cuda").manual_seed(group * 100 + d)
    b, n_q, n_k = 2, 150, 93  # tails in both; causal: the first 57 rows see no key
    q, do = (torch.randn(b, group * h_kv, n_q, d, device="cuda", generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(b, h_kv, n_k, d, device="cuda", generator=g).to(dtype) for _ in range(2))
    scale = 1 / math.sqrt(d)
    with Poisoned():
        o, lse = fa2.forward(q, k, v, causal=causal, scale=scale)
        got = fa2.backward(q, k, v, o, lse, do, causal=causal, scale=scale)
    ref_o, ref_lse = _reference(q, k, v, causal, scale)
    assert not torch.isnan(o).any()
    assert (o.double() - ref_o).abs().max().item() <= 4 * ATOL[dtype] * max(1.0, ref_o.abs().max().item())
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), fin) and torch.allclose(lse[fin].double(), ref_lse[fin], atol=1e-4)
    assert_gqa_grads_close(got, q, k, v, do, causal, scale, what=f"fa2 group {group} H_kv {h_kv} {dtype} d={d}")
    if causal:
        assert (got[0][..., : n_q - n_k, :] == 0).all()


# ----------------------------------------------------------------------------- GPU: kernels.attention


def _views(name, group, h_kv, d, dtype, strided, n_q=130, n_k=97, b=2, seed=0):
    """q, k, v, do; with strided, q, k, v are (B, N, H, d) tensors' .transpose(1, 2) views (no copy)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = group * h_kv

    def make(heads, n):
        t = torch.randn(b, n, heads, d, device="cuda", generator=g).to(dtype)
        return t.transpose(1, 2) if strided else t.transpose(1, 2).contiguous()

    return make(h, n_q), make(h_kv, n_k), make(h_kv, n_k), make(h, n_q)


def _cases():
    ag = _ag()
    out = []
    for name in ag.kernels_taking("gqa"):
        for strided in ([False, True] if name in ag.kernels_taking("strided") else [False]):
            out.append(pytest.param(name, strided, id=f"{name}-{'strided' if strided else 'contiguous'}"))
    return out


def _spec(name):
    spec = KERNELS[name]
    if not spec.available():
        pytest.skip(f"{name} does not run on this GPU")
    info = _ag()._INFO[name]
    d = 128 if (info["head_dims"] is None or 128 in info["head_dims"]) and spec.max_head_dim >= 128 else 64
    dtype = torch.bfloat16 if torch.bfloat16 in spec.dtypes else spec.dtypes[0]
    return info, d, dtype


@pytest.mark.parametrize("group, h_kv", GROUPS)
@pytest.mark.parametrize("name, strided", _cases())
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_attention_grouped_query_matches_float64(name, strided, group, h_kv, causal):
    """kernels.attention with grouped-query K/V (and strided views where the kernel takes them): o and the
    gradients of the leaves against float64; dk, dv come back with k's and v's shapes (H_kv heads)."""
    info, d, dtype = _spec(name)
    q, k, v, do = _views(name, group, h_kv, d, dtype, strided, n_q=130, n_k=97 if not causal else 60)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    if strided:  # the leaves keep the views' strides: clone preserves them
        assert not leaves[0].is_contiguous() and leaves[0].stride() == q.stride()
    scale = 1 / math.sqrt(d)
    o = _ag().attention(*leaves, causal=causal, scale=scale, kernel=name)
    o.backward(do)
    ref_o, _ = _reference(q, k, v, causal, scale)
    assert (o.double() - ref_o).abs().max().item() <= 4 * ATOL[dtype] * max(1.0, ref_o.abs().max().item())
    grads = [t.grad for t in leaves]
    assert_gqa_grads_close(grads, q, k, v, do, causal, scale, what=f"{name} group {group} strided={strided}")


@pytest.mark.parametrize("name, strided", _cases())
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_deterministic_backward_is_bitwise_reproducible(name, strided):
    ag = _ag()
    if name not in ag.kernels_taking("deterministic"):
        pytest.skip(f"{name}'s backward has no deterministic mode")
    _, d, dtype = _spec(name)
    q, k, v, do = _views(name, 4, 2, d, dtype, strided, n_q=1000, n_k=1000)
    runs = []
    for _ in range(3):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        ag.attention(*leaves, causal=True, kernel=name, deterministic=True).backward(do)
        runs.append([t.grad for t in leaves])
    for other in runs[1:]:
        for a, b_ in zip(runs[0], other):
            assert torch.equal(a, b_)


@pytest.mark.parametrize("name, strided", _cases())
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_opcheck_grouped_query_and_strided(name, strided):
    """torch.library.opcheck (schema, fake implementations' shapes and strides, autograd registration) on
    grouped-query K/V, with (B, N, H, d) views for a kernel that takes them."""
    ag = _ag()
    _, d, dtype = _spec(name)
    q, k, v, do = _views(name, 4, 1, d, dtype, strided, n_q=100, n_k=77)
    q, k, v = (t.requires_grad_() for t in (q.detach(), k.detach(), v.detach()))
    torch.library.opcheck(ag.attention_fwd, (q, k, v, True, 0.125, name))
    o, lse = ag.attention_fwd(q, k, v, True, 0.125, name)
    assert o.is_contiguous() and o.shape == q.shape
    torch.library.opcheck(ag.attention_bwd, (q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(),
                                             do, True, 0.125, name))


class _GQABlock(torch.nn.Module):
    """A Llama-style attention block: q from H heads, k and v from H_kv, the (B, N, H, d) -> (B, H, N, d)
    transposes handed to kernels.attention as views (a copy only where the kernel needs one)."""

    def __init__(self, d=64, heads=4, kv_heads=2, kernel="fa2"):
        super().__init__()
        self.d, self.heads, self.kv_heads, self.kernel = d, heads, kv_heads, kernel
        self.q = torch.nn.Linear(heads * d, heads * d)
        self.kv = torch.nn.Linear(heads * d, 2 * kv_heads * d)
        self.out = torch.nn.Linear(heads * d, heads * d)

    def forward(self, x):
        from kernels import attention

        b, n, c = x.shape
        q = self.q(x).view(b, n, self.heads, self.d).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.d).unbind(2)
        o = attention(q, k.transpose(1, 2), v.transpose(1, 2), causal=True, kernel=self.kernel)
        return self.out(o.transpose(1, 2).reshape(b, n, c))


@pytest.mark.parametrize("name", _ag().kernels_taking("gqa"))
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning")
def test_compiled_grouped_query_block_matches_eager(name):
    """torch.compile(fullgraph=True) of a grouped-query block whose q, k, v are strided views: no graph break,
    the same gradients as eager."""
    _, d, dtype = _spec(name)
    torch.manual_seed(0)
    model = _GQABlock(d=d, heads=4, kv_heads=2, kernel=name).to(device="cuda", dtype=dtype)
    x = torch.randn(2, 190, 4 * d, device="cuda", dtype=dtype)
    assert_compiled_matches_eager(model, x, name)
