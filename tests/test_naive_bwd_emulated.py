"""The teaching naive backward (kernels/cuda/naive_bwd.cu, FA1 Alg. 3) run on the CPU, without a GPU.

tests/emulate/naive_bwd_host.cpp compiles the .cu file as C++ (tests/emulate/cuda_host.h: one std::thread per
CUDA thread, std::barrier for __syncthreads, shared memory poisoned before every block). kernels/naive.py's
own backward (its checks, allocations, grids, argument order, shared-memory sizes) drives the emulated
kernels, so what is checked is what the GPU would be asked to run. Hypothesis draws odd sizes, tails,
Nq != Nk, causal with rows that see no key, scores up to ~1e4 and the block shapes the GPU tests use, in
float32, fp16 and bf16 storage (tests/emulate/fake: g++'s _Float16 and bf16 bit rounding); dQ, dK, dV are
checked against float64 autograd with the GPU suite's tolerance for the unfused algorithm. P comes from a
float64 softmax rounded to the input dtype (the forward kernel is checked on the GPU). What it cannot see:
warp timing, real races.
"""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.test_kernels_backward import assert_grads_close

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "emulate" / "naive_bwd_host.cpp"
CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++20 compiler (g++)")

BLOCKS = [(64, 64), (16, 64), (32, 16)]  # (Br, Bc): one and several rows/columns per thread


STORAGE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


def compile_harness(out: Path, cuda_dir: Path, block_q: int, block_k: int, storage: str = "float") -> ctypes.CDLL:
    so = out / f"naive_bwd_{block_q}_{block_k}_{storage}.so"
    cmd = [CXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
           f"-I{ROOT / 'tests' / 'emulate'}", f"-I{ROOT / 'tests' / 'emulate' / 'fake'}", f"-I{cuda_dir}",
           f"-DSTORAGE={storage}", f"-DBR={block_q}", f"-DBC={block_k}", str(HARNESS), "-o", str(so)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "barrier" in proc.stderr and block_q == 64 and block_k == 64:
        pytest.skip(f"{CXX} lacks C++20 std::barrier / std::atomic_ref<float> (GCC >= 11 has them)")
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
    return ctypes.CDLL(str(so))


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out, libs = tmp_path_factory.mktemp("naive_bwd_host"), {}

    def get(block_q, block_k, dtype=torch.float32):
        key = (block_q, block_k, STORAGE[dtype])
        if key not in libs:
            libs[key] = compile_harness(out, ROOT / "kernels" / "cuda", *key)
        return libs[key]

    return get


def probabilities(q, k, causal, scale):
    """P as the forward's softmax leaves it (in q's dtype; rows that see no key: 0)."""
    s = scale * (q.double() @ k.double().transpose(-1, -2))
    if causal:
        from variants.reference import causal_mask

        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    den = e.sum(-1, keepdim=True)
    return (e / torch.where(den == 0, torch.ones_like(den), den)).to(q.dtype).contiguous()


def emulated_backward(monkeypatch, lib, q, k, v, do, causal, scale, block_q, block_k):
    """kernels/naive.py backward with loader.get_function routed to the emulated kernels; outputs and the
    dP, dS buffers start as NaN (poisoned torch.empty)."""
    from bench.harness import Poisoned
    from kernels import _teaching, loader, naive

    calls = []

    class Emulated:
        def __init__(self, name, defines):
            self.name, self.defines = name, defines

        def launch(self, grid, block, args, shared_mem=0):
            assert tuple(block) == (_teaching.NTHREADS,)
            assert shared_mem <= 4 * lib.shared_floats(), "the launcher asks for more than the harness holds"
            conv = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else
                    ctypes.c_longlong(int(a)) if isinstance(a, np.int64) else
                    ctypes.c_float(a) if isinstance(a, float) else int(a) for a in args]
            calls.append((self.name, tuple(grid), shared_mem))
            getattr(lib, self.name + "_launch")(*grid, *conv)

    def get_function(source, name, *, defines=None, **_):
        assert source == naive.BWD_SOURCE and defines["STORAGE"] == STORAGE[q.dtype]
        assert (defines["BR"], defines["BC"]) == (block_q, block_k)
        return Emulated(name, defines)

    monkeypatch.setattr(loader, "get_function", get_function)
    monkeypatch.setattr(loader, "check_cuda_inputs", lambda *a, **kw: None)  # CPU tensors stand in
    monkeypatch.setattr(loader, "max_dynamic_smem", lambda *a: 227 * 1024)
    P = probabilities(q, k, causal, scale)
    o, lse = torch.zeros_like(q), torch.zeros(q.shape[:-1])  # not read by FA1 Alg. 3
    do = do.to(q.dtype)
    with Poisoned():
        got = naive.backward(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q,
                             block_k=block_k, P=P)
    return got, calls


@pytest.mark.slow
@settings(max_examples=12)  # each example runs five emulated launches; 12 keeps the suite's budget under any profile
@given(n_q=st.integers(1, 100), n_k=st.integers(1, 100), d=st.sampled_from([1, 7, 40, 64, 65, 100, 128]),
       blocks=st.sampled_from(BLOCKS), causal=st.booleans(), scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
       large=st.booleans(), dtype=st.sampled_from(list(STORAGE)), seed=st.integers(0, 2**31 - 1))
def test_emulated_kernel_matches_float64_autograd(build, n_q, n_k, d, blocks, causal, scale, large, dtype, seed):
    assume(not (large and dtype != torch.float32))  # a 16-bit S at scores ~1e4: naive's documented limit
    scale = 1 / math.sqrt(d) if scale is None else scale
    g = torch.Generator().manual_seed(seed)
    q, do = torch.randn(1, 1, n_q, d, generator=g), torch.randn(1, 1, n_q, d, generator=g)  # B*H > 1: below
    k, v = torch.randn(1, 1, n_k, d, generator=g), torch.randn(1, 1, n_k, d, generator=g)
    if large:  # scale·q·k ~ 1e4
        a = math.sqrt(1e4 / (scale * math.sqrt(d)))
        q, k = q * a, k * a
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))
    with pytest.MonkeyPatch.context() as m:
        got, _ = emulated_backward(m, build(*blocks, dtype), q, k, v, do, causal, scale, *blocks)
    assert_grads_close(got, q, k, v, do, causal, scale, unfused=True,
                       what=f"{dtype} Br, Bc = {blocks}, {n_q}x{n_k}x{d} causal={causal}")


def test_grids_and_rows_that_see_no_key(build, monkeypatch):
    """Causal, Nq > Nk: the first Nq - Nk rows see nothing: dq = 0 there exactly, no NaN; the five launches
    run in FA1 Alg. 3's order on the grids the header names."""
    from kernels import naive

    g = torch.Generator().manual_seed(1)
    q, do = torch.randn(2, 1, 140, 24, generator=g), torch.randn(2, 1, 140, 24, generator=g)
    k, v = torch.randn(2, 1, 37, 24, generator=g), torch.randn(2, 1, 37, 24, generator=g)
    (dq, dk, dv), calls = emulated_backward(monkeypatch, build(32, 16), q, k, v, do, True, 0.2, 32, 16)
    assert [c[0] for c in calls] == list(naive.BWD_KERNELS)
    t_r, t_c = 5, 3  # ceil(140 / 32), ceil(37 / 16)
    assert [c[1] for c in calls] == [(t_c, 2), (t_c, t_r, 2), (140, 2), (t_r, 2), (t_c, 2)]
    assert calls[2][2] == naive.backward_shared_bytes("naive_bwd_ds", 24, 37)
    assert (dq[..., :103, :] == 0).all() and dq[..., 103:, :].abs().sum() > 0
    assert not any(torch.isnan(t).any() for t in (dq, dk, dv))
    assert_grads_close((dq, dk, dv), q, k, v, do, True, 0.2, unfused=True)


@pytest.mark.parametrize("line, edit", [
    ("line 3 without the D term", ("Prow[c] * (dProw[c] - D)", "Prow[c] * dProw[c]")),
    ("line 5 without the scale", ("tn_pass<128 / TX>(ds, q, dk, n_q, n_k, d, scale, causal)",
                                  "tn_pass<128 / TX>(ds, q, dk, n_q, n_k, d, 1.f, causal)")),
])
def test_a_wrong_kernel_fails(tmp_path, monkeypatch, line, edit):
    """The check can fail: the kernel with one line of FA1 Alg. 3 broken is caught."""
    src = (ROOT / "kernels" / "cuda" / "naive_bwd.cu").read_text()
    broken = src.replace(*edit)
    assert broken != src, "the line this test breaks has moved"
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "naive_bwd.cu").write_text(broken)
    for header in (ROOT / "kernels" / "cuda").glob("*.cuh"):  # teaching.cuh and what it includes
        shutil.copy(header, cuda / header.name)
    lib = compile_harness(tmp_path, cuda, 64, 64)
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(1, 1, 50, 100, generator=g) for _ in range(4))
    got, _ = emulated_backward(monkeypatch, lib, q, k, v, do, False, 0.3, 64, 64)
    with pytest.raises(AssertionError):
        assert_grads_close(got, q, k, v, do, False, 0.3)
