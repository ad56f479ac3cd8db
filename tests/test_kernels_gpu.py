"""Teaching kernels against the float64 oracle on a GPU (pytest -m gpu; skipped without CUDA).

Every output and scratch tensor a launcher allocates is NaN-poisoned first (torch.empty and
torch.empty_like are wrapped for the duration of the call), so an element the kernel fails to write,
or a scratch value it reads before writing, shows up as NaN instead of passing as a stale zero.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import KERNELS
from bench.harness import Poisoned
from tests.strategies import assert_close_to_reference, make_inputs, problems
from variants import attention_reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    # CuPy 14 deprecates ExternalStream (the loader's view of torch's stream) in favour of
    # Stream.from_external; the loader keeps the path that was run on the H200.
    pytest.mark.filterwarnings("ignore:ExternalStream is deprecated:DeprecationWarning"),
]

TEACHING = [s for s in KERNELS.values() if s.tier == "teaching" and not s.decode]  # decode: test_split_kv_gpu.py
CONFIGS = [(s.name, opts) for s in TEACHING for opts in s.configs()]
IDS = [KERNELS[n].label(**o) for n, o in CONFIGS]




def run(name, q, k, v, **kw):
    with Poisoned():
        o, lse = KERNELS[name].forward(q, k, v, **kw)
    torch.cuda.synchronize()  # surface asynchronous launch errors here
    return o, lse


# Blocks the 16 x 16 thread grid takes: one and four rows/columns per thread, and Bc = 128. Each
# (Br, Bc, dtype) is a separate compilation, so the set stays small (kernels cache their cubins).
BLOCKS_Q, BLOCKS_K = (16, 64), (16, 64, 128)


@st.composite
def kernel_problems(draw):
    """The equivalence suite's problems, with blocks the teaching kernels take."""
    pr = draw(problems(max_n=300, max_d=128))
    pr["block_q"] = draw(st.sampled_from(BLOCKS_Q))
    pr["block_k"] = draw(st.sampled_from(BLOCKS_K))
    return pr


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pr=kernel_problems())
def test_matches_float64_reference(config, pr):
    name, opts = config
    q, k, v = make_inputs(pr, device="cuda")
    o, lse = run(name, q, k, v, causal=pr["causal"], scale=pr["scale"], block_q=pr["block_q"],
                 block_k=pr["block_k"], **opts)
    ref_o, ref_lse = attention_reference(q, k, v, causal=pr["causal"], scale=pr["scale"])
    loose = KERNELS[name].variant == "naive" and pr["large_scores"] and pr["dtype"] != torch.float32
    assert_close_to_reference(o, lse, ref_o, ref_lse, v, pr["dtype"],
                              large_scores=pr["large_scores"], loose_half_scores=loose,
                              what=f"{KERNELS[name].label(**opts)} {pr}")


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_many_blocks(config, dtype):
    """Sizes with many Q and K blocks and tails (v_once auto spills at fp32 Nk=1100)."""
    name, opts = config
    torch.manual_seed(5)
    q = torch.randn(2, 3, 777, 100, device="cuda").to(dtype)
    k = torch.randn(2, 3, 1100, 100, device="cuda").to(dtype)
    v = torch.randn(2, 3, 1100, 100, device="cuda").to(dtype)
    if opts.get("placement") == "sram" and dtype == torch.float32:
        opts = dict(opts, placement="auto")  # an fp32 f row of 1100 keys does not fit on chip
    for causal in (False, True):
        o, lse = run(name, q, k, v, causal=causal, **opts)
        ref_o, ref_lse = attention_reference(q, k, v, causal=causal)
        assert_close_to_reference(o, lse, ref_o, ref_lse, v, dtype, what=f"{name} {opts} {causal}")


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_causal_rows_that_see_no_key(config):
    """Nq > Nk, causal: the first Nq - Nk rows see nothing: o = 0, lse = -inf, never NaN."""
    name, opts = config
    torch.manual_seed(1)
    q = torch.randn(1, 2, 140, 24, device="cuda")
    k, v = torch.randn(1, 2, 37, 24, device="cuda"), torch.randn(1, 2, 37, 24, device="cuda")
    o, lse = run(name, q, k, v, causal=True, block_q=32, block_k=16, **opts)
    assert torch.isneginf(lse[..., :103]).all() and torch.isfinite(lse[..., 103:]).all()
    assert (o[..., :103, :] == 0).all() and not torch.isnan(o).any()
    ref_o, _ = attention_reference(q, k, v, causal=True)
    assert (o.double() - ref_o).abs().max() < 1e-5


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_equal_lengths_causal_matches_torch(config):
    name, opts = config
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 200, 64, device="cuda") for _ in range(3))
    expect = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                              is_causal=True)
    o, _ = run(name, q, k, v, causal=True, **opts)
    assert (o.double() - expect).abs().max() < 1e-5


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_deterministic_and_stream_aware(config):
    """Two runs on a side stream agree bit for bit (a race would show as a moving result), and the
    kernels run on torch's current stream, after the work that produced their inputs."""
    name, opts = config
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.manual_seed(3)
        q = torch.randn(1, 4, 333, 72, device="cuda").half()
        k, v = torch.randn(1, 4, 500, 72, device="cuda").half(), torch.randn(1, 4, 500, 72, device="cuda").half()
        first = KERNELS[name].forward(q, k, v, causal=True, **opts)
        second = KERNELS[name].forward(q, k, v, causal=True, **opts)
    side.synchronize()
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    ref_o, _ = attention_reference(q, k, v, causal=True)
    assert (first[0].double() - ref_o).abs().max() < 1e-2


# ----------------------------------------------------------------------------- bad inputs

def qkv(q=(1, 2, 64, 32), k=(1, 2, 64, 32), v=None, dtype=torch.float16, device="cuda"):
    v = k if v is None else v
    return (torch.randn(q, device=device).to(dtype), torch.randn(k, device=device).to(dtype),
            torch.randn(v, device=device).to(dtype))


@pytest.mark.parametrize("name", [s.name for s in TEACHING])
def test_bad_inputs(name):
    fwd = KERNELS[name].forward
    with pytest.raises(ValueError, match="CUDA tensors"):
        fwd(*qkv(device="cpu"))
    with pytest.raises(ValueError, match="batch mismatch"):
        fwd(*qkv(q=(2, 2, 64, 32)))
    with pytest.raises(ValueError, match="head dim d mismatch"):
        fwd(*qkv(q=(1, 2, 64, 16)))
    with pytest.raises(ValueError, match="same sequence length"):
        fwd(*qkv(v=(1, 2, 65, 32)))
    with pytest.raises(ValueError, match="maximum 128"):
        fwd(*qkv(q=(1, 1, 8, 129), k=(1, 1, 8, 129)))
    with pytest.raises(TypeError, match="dtype float64"):
        fwd(*qkv(dtype=torch.float64))
    q, k, v = qkv()
    with pytest.raises(ValueError, match="contiguous"):
        fwd(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
    with pytest.raises(ValueError, match="multiples of 16"):
        fwd(q, k, v, block_q=24)
    with pytest.raises(ValueError, match="mem=None"):
        fwd(q, k, v, mem=object())


def test_v_once_sram_overflow_is_an_error():
    from counting.memory import SramOverflow

    q, k, v = qkv(k=(1, 2, 4096, 32), dtype=torch.float32)
    with pytest.raises(SramOverflow, match="bytes of SRAM"):
        KERNELS["v_once"].forward(q, k, v, placement="sram")
    o, _ = run("v_once", q, k, v, placement="auto")  # auto spills instead
    assert torch.isfinite(o).all()


def test_scale_argument():
    q, k, v = qkv(dtype=torch.float32)
    for spec in TEACHING:
        o_default, _ = spec.forward(q, k, v)
        o_explicit, _ = spec.forward(q, k, v, scale=1 / math.sqrt(32))
        assert torch.equal(o_default, o_explicit), spec.name
