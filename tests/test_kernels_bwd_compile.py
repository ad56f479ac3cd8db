"""CPU-side checks of the Hopper backward (kernels.fa2_wgmma_bwd): every shipped and swept build compiles
for sm_90a with NVRTC within the stated spill budget, and the launcher names bad input before touching a GPU
(the GPU tests' float64 reference, variants.reference.backward_reference, is held equal to autograd by
tests/test_reference_backward.py)."""
from __future__ import annotations

import pytest
import torch

from kernels import fa2_wgmma, fa2_wgmma_bwd, loader
from tests.backward_helpers import LaunchRecorder
from tests.tiers import one_per
from tests.toolchain import needs_nvrtc
from variants.reference import backward_reference

BUILDS = sorted({(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.sweep_configs()})


def test_shipped_builds_are_swept():
    """Every fa2_wgmma_bwd.cu build backward() launches is swept (compiled below); v4's main-kernel builds
    (fa2_wgmma_bwd_ws.cu) are tests/test_kernels_bwd_ws_compile.py's."""
    swept = {(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.sweep_configs()}
    for _, k, d in fa2_wgmma_bwd.v3_compile_configs():
        assert (k, tuple(sorted(d.items()))) in swept
    assert {s for s, _, _ in fa2_wgmma_bwd.compile_configs()} == {str(fa2_wgmma_bwd.SOURCE),
                                                                  str(fa2_wgmma_bwd.fa2_wgmma_bwd_ws.SOURCE)}


@needs_nvrtc
@pytest.mark.parametrize("build", one_per(BUILDS, key=lambda b: b[0],
                                          ids=[b[0] + "-" + "-".join(f"{k}={v}" for k, v in b[1]) for b in BUILDS]))
def test_compiles_for_sm90a_within_spill_budget(build):
    """Every swept build (the slow tier); a plain pytest compiles one per kernel function."""
    kernel, defines = build[0], dict(build[1])
    res = loader.resource_usage(fa2_wgmma_bwd.SOURCE, kernel, defines=defines, arch=fa2_wgmma_bwd.ARCH)
    assert 0 < res["registers"] <= 255
    budget = fa2_wgmma_bwd.spill_budget(defines) if kernel == fa2_wgmma_bwd.KERNEL else 0
    assert max(res["spill_stores"], res["spill_loads"], res["local_bytes"]) <= budget, res
    assert not res["wgmma_serialized"], f"ptxas serialised the wgmma pipeline: {res['wgmma_serialized']}"
    smem = fa2_wgmma_bwd.smem_bytes(defines)
    assert smem <= 227 * 1024, f"{smem} B of shared memory is over the H100/H200 227 KB per CTA"


def test_forward_module_exposes_backward():
    assert fa2_wgmma.backward is fa2_wgmma_bwd.backward


def _t(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype)


GOOD = dict(q=_t(1, 2, 33, 64), k=_t(1, 2, 17, 64), v=_t(1, 2, 17, 64), o=_t(1, 2, 33, 64),
            lse=_t(1, 2, 33, dtype=torch.float32), do=_t(1, 2, 33, 64))


@pytest.mark.parametrize("change,error,match", [
    (dict(q=_t(1, 2, 33, 80), o=_t(1, 2, 33, 80), do=_t(1, 2, 33, 80), k=_t(1, 2, 17, 80), v=_t(1, 2, 17, 80)),
     ValueError, "head dim d=80 unsupported.*64, 96, 128, 256"),
    (dict(k=_t(1, 3, 17, 64), v=_t(1, 3, 17, 64)), ValueError, "H_kv=3 heads, which must divide q's H=2"),
    (dict(q=_t(1, 2, 33, 68)[..., :64]), ValueError, "q's row stride 68 .* multiple of 8 elements"),
    (dict(k=torch.zeros(9000, dtype=torch.float16).as_strided((1, 2, 17, 64), (4400, 2116, 64, 1))), ValueError,
     "k's head stride 2116"),
    (dict(v=torch.zeros(9000, dtype=torch.float16).as_strided((2, 2, 17, 64), (4260, 2176, 64, 1)),
          k=_t(2, 2, 17, 64), q=_t(2, 2, 33, 64), o=_t(2, 2, 33, 64), do=_t(2, 2, 33, 64),
          lse=_t(2, 2, 33, dtype=torch.float32)), ValueError, "v's batch stride 4260"),
    (dict(lse=_t(1, 33, 2, dtype=torch.float32).transpose(1, 2)), ValueError, "lse must be contiguous"),
    (dict(q=_t(1, 2, 33, 64, dtype=torch.float32)), TypeError, "float32.*supports float16, bfloat16"),
    (dict(k=_t(1, 2, 17, 64, dtype=torch.bfloat16)), TypeError, "share a dtype"),
    (dict(o=_t(1, 2, 32, 64)), ValueError, "o and do must have q's shape"),
    (dict(do=_t(1, 2, 33, 64)[:, :, :, :32]), ValueError, "o and do must have q's shape"),
    (dict(lse=_t(1, 2, 32, dtype=torch.float32)), ValueError, "lse must be float32 of shape"),
    (dict(lse=_t(1, 2, 33)), ValueError, "lse must be float32"),
    (dict(v=_t(1, 2, 18, 64)), ValueError, "k and v must be"),
    (dict(k=_t(2, 2, 17, 64), v=_t(2, 2, 17, 64)), ValueError, "k and v must be"),
    (dict(q=_t(1, 2, 33)), ValueError, "rank 4"),
    (dict(lse=[0.0]), TypeError, "lse must be a torch.Tensor"),
    (dict(do=_t(1, 2, 64, 33).transpose(2, 3)), ValueError, "do must have a unit stride in its last dimension"),
    ({}, ValueError, "q is on cpu; CUDA kernels need CUDA tensors"),
])
def test_bad_input_is_named(change, error, match):
    args = dict(GOOD, **change)
    with pytest.raises(error, match=match):
        fa2_wgmma_bwd.backward(args["q"], args["k"], args["v"], args["o"], args["lse"], args["do"])


def test_strided_gqa_inputs_pass_every_layout_rule():
    """(B, N, H, d).transpose(1, 2) views, H_kv = 1 and 2 of H = 4, d = 96 and 256: the only complaint left on a CPU
    is the device, so every layout rule accepted them (no copy asked for)."""
    for h_kv in (1, 2):
        for d in (64, 96, 256):
            q, o, do = (_t(2, 33, 4, d).transpose(1, 2) for _ in range(3))
            k, v = (_t(2, 17, h_kv, d).transpose(1, 2) for _ in range(2))
            with pytest.raises(ValueError, match="q is on cpu"):
                fa2_wgmma_bwd.backward(q, k, v, o, _t(2, 4, 33, dtype=torch.float32), do)


def test_gradients_keep_the_callers_layout():
    """_empty_like_layout: dense permutations keep their strides; a slice of a wider buffer gets the dense
    version of its dimension order."""
    for heads in (4, 1):  # one head: its stride ties with the row stride, and is kept as given
        bnhd = _t(2, 33, heads, 64).transpose(1, 2)
        assert fa2_wgmma_bwd._empty_like_layout(bnhd).stride() == bnhd.stride()
    wide = _t(2, 33, 4, 128)[..., :64].transpose(1, 2)  # (B, H, N, d) view, row stride 512
    got = fa2_wgmma_bwd._empty_like_layout(wide)
    assert got.shape == wide.shape and got.stride() == (33 * 4 * 64, 64, 4 * 64, 1)


def test_deterministic_needs_the_bulk_reduce():
    with pytest.raises(ValueError, match="DETERMINISTIC=1 .* needs DQ_BULK=1"):
        fa2_wgmma_bwd.defines_for(128, False, dict(NWG=2, BR=64, DQ_BULK=0), deterministic=True)
    assert fa2_wgmma_bwd.defines_for(64, True, deterministic=True)["DETERMINISTIC"] == 1
    assert "DETERMINISTIC" not in fa2_wgmma_bwd.defines_for(64, True)  # the default build is today's


@pytest.mark.parametrize("causal,n_q,n_k,h,h_kv", [(False, 13, 9, 4, 2), (True, 13, 9, 4, 1), (True, 7, 11, 2, 2),
                                                   (True, 40, 40, 8, 2)])
def test_torch_route_matches_autograd(causal, n_q, n_k, h, h_kv, monkeypatch):
    """The d = 256 route (_backward_torch, pure torch) on the CPU against float64 autograd with repeated K/V,
    with query blocks small enough that the loop takes several steps, and strided (B, N, H, d) gradients."""
    monkeypatch.setattr(fa2_wgmma_bwd, "_S_BLOCK", 3 * h * n_k)  # 3 query rows per block
    g = torch.Generator().manual_seed(n_q + h)
    q, do = (torch.randn(2, n_q, h, 16, generator=g).transpose(1, 2) for _ in range(2))
    k, v = (torch.randn(2, n_k, h_kv, 16, generator=g).transpose(1, 2) * 2 for _ in range(2))
    rep = h // h_kv
    kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = (q.double() @ kr.double().transpose(-1, -2)) * 0.25
    if causal:
        from variants.reference import causal_mask
        s = s.masked_fill(~causal_mask(n_q, n_k, q.device), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = (torch.where(torch.isfinite(lse)[..., None], torch.softmax(s, -1), torch.zeros_like(s)) @ vr.double())
    grads = tuple(fa2_wgmma_bwd._empty_like_layout(t).fill_(float("nan")) for t in (q, k, v))
    fa2_wgmma_bwd._backward_torch(q, k, v, o.float(), lse.float().contiguous(), do, causal, 0.25, *grads)
    want = backward_reference(q, k, v, do, causal=causal, scale=0.25)  # dK, dV summed over each group
    for got, ref in zip(grads, want):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)
    if causal and n_q > n_k:
        assert (grads[0][:, :, : n_q - n_k] == 0).all()


@pytest.mark.parametrize("br,bc", [(128, 128), (64, 128)])
def test_deterministic_wait_rule_holds(br, bc):
    """DETERMINISTIC's key block j waits until j * NWG reduces reached Q block i: right only if every key block
    below j adds into every Q block j adds into. With the kernel's causal skip (i_first = max(0, n0 - (Nk - Nq))
    // Br, fa2_wgmma_bwd.cu), the key blocks adding into Q block i are a prefix 0..J(i) for every shape."""
    for n_q in (1, 63, 64, 65, 200, 513, 1000):
        for n_k in (1, 100, 128, 129, 700, 1025):
            t_r, t_c = -(-n_q // br), -(-n_k // bc)
            for causal in (False, True):
                i_first = [max(0, j * bc - (n_k - n_q)) // br if causal else 0 for j in range(t_c)]
                for i in range(t_r):
                    adds = [j for j in range(t_c) if i_first[j] <= i]
                    assert adds == list(range(len(adds))), (n_q, n_k, causal, i, adds)


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="no options"):
        fa2_wgmma_bwd.backward(*GOOD.values(), block_q=64)


def test_defines_refuse_other_head_dims():
    with pytest.raises(ValueError, match="head dims"):
        fa2_wgmma_bwd.defines_for(80, False)
    with pytest.raises(ValueError, match="d=256 has one build per pass"):
        fa2_wgmma_bwd.defines_for(256, False, dict(NWG=2, BR=64))
    with pytest.raises(ValueError, match="d=256 has one build per pass"):
        fa2_wgmma_bwd.defines_for(256, False, deterministic=True)
    assert [fa2_wgmma_bwd.defines_for(256, False, pass_=p)["PASS"] for p in (0, 1, 2)] == [0, 1, 2]
    assert fa2_wgmma_bwd.knob_errors(dict(HEAD_DIM=256, NWG=2, BR=64, PASS=0))
    assert fa2_wgmma_bwd.knob_errors(dict(HEAD_DIM=128, NWG=2, BR=64, PASS=1))
    defs = fa2_wgmma_bwd.defines_for(96, True)  # the 128 tiles, columns 96..127 zero-filled
    assert defs["HEAD_DIM"] == 128 and defs["D_REAL"] == 96
    assert fa2_wgmma_bwd.smem_bytes(defs) == fa2_wgmma_bwd.smem_bytes(fa2_wgmma_bwd.defines_for(128, True))
    with pytest.raises(ValueError, match="D_REAL"):  # not a knob a caller sets
        fa2_wgmma_bwd.defines_for(128, False, dict(NWG=2, BR=64, D_REAL=96))
    assert fa2_wgmma_bwd.knob_errors(dict(HEAD_DIM=64, D_REAL=96, NWG=2, BR=128))


@pytest.mark.parametrize("d,group,deterministic", [(64, 4, False), (96, 2, True), (128, 8, False), (256, 2, False)])
def test_launch_plan_on_strided_gqa(monkeypatch, d, group, deterministic):
    """v3's launch plan (impl="v3"), on CPU tensors that pass as CUDA: the pre and dq kernels over B*H query heads, the main
    kernel on (Tc, B*H_kv) once (d = 256: PASS 0, 1, 2), the (batch, head, row) strides of the strided inputs and of
    gradients allocated in their layout, d = 96 on the 128-wide accumulator, the semaphore only when deterministic."""
    from kernels import loader

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(loader, "require_hopper", lambda *a, **kw: None)
    rec = LaunchRecorder()
    monkeypatch.setattr(loader, "get_function", rec)
    b, h_kv, n_q, n_k = 2, 2, 70, 200
    h = h_kv * group
    q, o, do = (_t(b, n_q, h, d).transpose(1, 2) for _ in range(3))
    k, v = (_t(b, n_k, h_kv, d).transpose(1, 2) for _ in range(2))
    dq, dk, dv = fa2_wgmma_bwd.backward(q, k, v, o, _t(b, h, n_q, dtype=torch.float32), do, causal=True,
                                        deterministic=deterministic, impl="v3")  # v4's: test_kernels_bwd_ws_compile
    assert (dq.stride(), dk.stride(), dv.stride()) == (q.stride(), k.stride(), v.stride())
    names = [x["name"] for x in rec.launches]
    mains = [x for x in rec.launches if x["name"] == fa2_wgmma_bwd.KERNEL]
    assert names[0] == fa2_wgmma_bwd.KERNEL_PRE and names[-1] in (fa2_wgmma_bwd.KERNEL_DQ, fa2_wgmma_bwd.KERNEL_DQ_BULK)
    assert [m["defines"].get("PASS", 0) for m in mains] == ([0, 1, 2] if d == 256 else [0])
    for m in mains:
        bc = fa2_wgmma_bwd.block_n(m["defines"])
        assert m["grid"] == (-(-n_k // bc), b * h_kv, 1)
        a = m["args"]
        assert a[15:17] == (h, group)  # H, G
        assert tuple(int(x) for x in a[18:]) == (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
                                                 *dk.stride()[:3], *dv.stride()[:3])
        assert (a[17].dtype == torch.int32) == deterministic  # the semaphore, else an unused pointer
        assert a[6].shape[-1] == (128 if d == 96 else d)  # dQ accumulator
        assert m["defines"].get("D_REAL", d) == d
    for x in (rec.launches[0], rec.launches[-1]):
        assert x["grid"][1] == b * h
    assert tuple(int(s) for s in rec.launches[0]["args"][-6:]) == (*o.stride()[:3], *do.stride()[:3])
    assert tuple(int(s) for s in rec.launches[-1]["args"][-3:]) == dq.stride()[:3]



AB = sorted({(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.order_configs() if k == fa2_wgmma_bwd.KERNEL})


def test_order_ab_builds_are_the_default_builds_but_for_order_and_lpt():
    """order_configs(): the ORDER=1, LPT=1 and ORDER=1 LPT=1 twins of each d = 64, 96, 128 main-kernel build backward()
    picks (both dtypes, deterministic on and off), and nothing else differs."""
    shipped = [dict(d) for _, k, d in fa2_wgmma_bwd.compile_configs()
               if k == fa2_wgmma_bwd.KERNEL and d["HEAD_DIM"] != 256]
    want = {tuple(sorted(dict(d, ORDER=o, **(dict(LPT=1) if lpt else {})).items()))
            for d in shipped for o, lpt in fa2_wgmma_bwd.ORDER_AB}
    assert {b for _, b in AB} == want and len(AB) == 36


@needs_nvrtc
@pytest.mark.parametrize("build", one_per(AB, key=lambda b: (dict(b[1]).get("ORDER"), dict(b[1]).get("LPT")),
                                          ids=["-".join(f"{k}={v}" for k, v in b[1]) for b in AB]))
def test_order_ab_builds_compile_within_spill_budget(build):
    """ORDER=1 (i descending, heads inner) and LPT=1 (grid (B*H_kv, Tc)) builds: ptxas keeps the wgmma pipeline and
    the same spill budget holds (NVRTC 13.0, fp16, ORDER=1: d=64 68 B (ORDER=0: 80), deterministic 104 (104), d=128 4
    (0), deterministic 0 (0), d=96 4 (0), deterministic 0 (8); LPT=1 spills what the same ORDER does without it).
    The slow tier compiles all 36; a plain pytest one per (ORDER, LPT)."""
    kernel, defines = build[0], dict(build[1])
    res = loader.resource_usage(fa2_wgmma_bwd.SOURCE, kernel, defines=defines, arch=fa2_wgmma_bwd.ARCH)
    assert 0 < res["registers"] <= 255
    assert max(res["spill_stores"], res["spill_loads"], res["local_bytes"]) <= fa2_wgmma_bwd.spill_budget(defines), res
    assert not res["wgmma_serialized"], f"ptxas serialised the wgmma pipeline: {res['wgmma_serialized']}"
