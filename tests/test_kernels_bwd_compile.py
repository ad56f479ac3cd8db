"""CPU-side checks of the Hopper backward (kernels.fa2_wgmma_bwd): every shipped and swept build compiles
for sm_90a with NVRTC within the stated spill budget, the launcher names bad input before touching a GPU,
and the float64 reference the GPU tests use agrees with itself (autograd against FA2 Alg. 2's formulas)."""
from __future__ import annotations

import pytest
import torch

from kernels import fa2_wgmma, fa2_wgmma_bwd, loader
from tests.tiers import one_per
from tests.test_kernels_bwd_gpu import reference_grads

try:
    loader.nvrtc_version()
    loader.cuda_include_dirs()
    TOOLCHAIN = None
except loader.ToolchainMissing as exc:
    TOOLCHAIN = str(exc)

needs_nvrtc = pytest.mark.skipif(TOOLCHAIN is not None, reason=f"no NVRTC toolchain: {TOOLCHAIN}")

BUILDS = sorted({(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.sweep_configs()})


def test_shipped_builds_are_swept():
    swept = {(k, tuple(sorted(d.items()))) for _, k, d in fa2_wgmma_bwd.sweep_configs()}
    for _, k, d in fa2_wgmma_bwd.compile_configs():
        assert (k, tuple(sorted(d.items()))) in swept


@needs_nvrtc
@pytest.mark.parametrize("build", one_per(BUILDS, key=lambda b: b[0],
                                          ids=[b[0] + "-" + "-".join(f"{k}={v}" for k, v in b[1]) for b in BUILDS]))
def test_compiles_for_sm90a_within_spill_budget(build):
    """Every swept build (the slow tier); a plain pytest compiles one per kernel function."""
    kernel, defines = build[0], dict(build[1])
    res = loader.resource_usage(fa2_wgmma_bwd.SOURCE, kernel, defines=defines, arch=fa2_wgmma_bwd.ARCH)
    assert 0 < res["registers"] <= 255
    budget = fa2_wgmma_bwd.MAX_SPILL_BYTES if kernel == fa2_wgmma_bwd.KERNEL else 0
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
    (dict(q=_t(1, 2, 33, 96), o=_t(1, 2, 33, 96), do=_t(1, 2, 33, 96), k=_t(1, 2, 17, 96), v=_t(1, 2, 17, 96)),
     ValueError, "head dim d=96 unsupported.*64, 128"),
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
    (dict(do=_t(1, 2, 64, 33).transpose(2, 3)), ValueError, "do must be contiguous"),
    ({}, ValueError, "q is on cpu; CUDA kernels need CUDA tensors"),
])
def test_bad_input_is_named(change, error, match):
    args = dict(GOOD, **change)
    with pytest.raises(error, match=match):
        fa2_wgmma_bwd.backward(args["q"], args["k"], args["v"], args["o"], args["lse"], args["do"])


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="no options"):
        fa2_wgmma_bwd.backward(*GOOD.values(), block_q=64)


def test_defines_refuse_other_head_dims():
    with pytest.raises(ValueError, match="head dims"):
        fa2_wgmma_bwd.defines_for(96, False)


@pytest.mark.parametrize("causal,n_q,n_k", [(False, 13, 9), (True, 13, 9), (True, 7, 11)])
def test_reference_autograd_matches_algorithm_2(causal, n_q, n_k):
    """The GPU tests' two references: float64 autograd, and Alg. 2's formulas with no rounding."""
    g = torch.Generator().manual_seed(n_q)
    q, k, v, do = (torch.randn(2, 1, n, 8, generator=g, dtype=torch.float64) * 3 for n in (n_q, n_k, n_k, n_q))
    auto = reference_grads(q, k, v, do, causal=causal)
    formula = reference_grads(q, k, v, do, causal=causal, round_to=torch.float64)
    for a, f in zip(auto, formula):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, f, rtol=1e-9, atol=1e-9)
    if causal and n_q > n_k:
        assert (auto[0][:, :, : n_q - n_k] == 0).all()
