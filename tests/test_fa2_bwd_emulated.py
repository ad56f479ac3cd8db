"""The teaching backward kernel (kernels/cuda/fa2_bwd.cu, fa2_bwd) run on the CPU, without a GPU.

tests/emulate/fa2_bwd_host.cpp compiles the .cu file as C++ (g++ -std=c++20; tests/emulate/cuda_host.h) with one
std::thread per CUDA thread, a std::barrier for __syncthreads and std::atomic_ref for the dQ atomics, shared memory poisoned
before every block, and runs its three launches in order. Hypothesis drives it with the GPU suite's problems (odd sizes, tails, Nq != Nk, causal
with rows that see no key, scores up to ~1e4, every block shape the tests use) in float32, fp16 and bf16
storage (tests/emulate/fake: g++'s _Float16, bf16 bit rounding) and checks dQ, dK,
dV against float64 autograd with the GPU suite's tolerance. O and L come from the float64 reference here
(the forward kernel is checked on the GPU). What it cannot see: warp-level timing,
real races (the barrier is exact). One test routes kernels/fa2.py's own backward (grids, argument order,
shared-memory size) through the emulated kernels.
"""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_kernels_backward import assert_grads_close
from variants.reference import attention_reference

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "emulate" / "fa2_bwd_host.cpp"
CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++20 compiler (g++)")

BLOCKS = [(64, 64), (16, 64), (32, 16), (32, 32)]  # (Br, Bc): one and several rows/columns per thread; the defaults
STORAGE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


PROBE = "#include <barrier>\n#include <atomic>\nint main() { float f = 0; std::atomic_ref<float>(f).fetch_add(1.f); " \
        "std::barrier<> b(1); b.arrive_and_wait(); }\n"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out, libs = tmp_path_factory.mktemp("fa2_bwd_host"), {}
    probe = out / "probe.cpp"
    probe.write_text(PROBE)
    if subprocess.run([CXX, "-std=c++20", "-pthread", str(probe), "-o", str(out / "probe")],
                      capture_output=True).returncode != 0:
        pytest.skip(f"{CXX} lacks C++20 std::barrier / std::atomic_ref<float> (GCC >= 11 has them)")

    def get(block_q, block_k, d_pad, storage="float", prefetch=0):
        key = (block_q, block_k, d_pad, storage, prefetch)
        if key not in libs:
            so = out / f"fa2_bwd_{block_q}_{block_k}_{d_pad}_{storage}_{prefetch}.so"
            cmd = [CXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                   f"-I{ROOT / 'tests' / 'emulate'}", f"-I{ROOT / 'tests' / 'emulate' / 'fake'}", f"-I{ROOT / 'kernels' / 'cuda'}", f"-DSTORAGE={storage}", f"-DFA2_PREFETCH={prefetch}",
                   f"-DBR={block_q}", f"-DBC={block_k}", f"-DD_PAD={d_pad}", str(HARNESS), "-o", str(so)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
            libs[key] = ctypes.CDLL(str(so))
        return libs[key]

    return get


def emulated_backward(lib, q, k, v, do, causal, scale):
    """dq, dk, dv from the three emulated launches (preprocess, main, dq) on kernels/fa2.py's grids, with o
    and L from float64 (the forward is checked on the GPU); scratch and outputs start as NaN."""
    b, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    group = h // h_kv  # grouped-query K/V: the reference sees K/V repeated, the kernel never does
    o, lse = attention_reference(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), causal=causal,
                                 scale=scale)
    o, lse = o.to(q.dtype).contiguous(), lse.float().contiguous()
    nan = lambda t, dtype=None: torch.full_like(t, float("nan"), dtype=dtype)  # noqa: E731
    dq_acc, delta, dq, dk, dv = nan(q, torch.float32), nan(lse), nan(q), nan(k), nan(v)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    bh, f32 = b * h, ctypes.c_float
    lib.fa2_bwd_preprocess_launch(-(-n_q // 8), bh, ptr(o), ptr(do), ptr(dq_acc), ptr(delta), n_q, d)  # FA2 Alg. 2 lines 3-4
    lib.fa2_bwd_launch(-(-n_k // lib.block_k()), b * h_kv, ptr(q), ptr(k), ptr(v), ptr(do), ptr(lse), ptr(delta),
                       ptr(dq_acc), ptr(dk), ptr(dv), n_q, n_k, d, f32(scale), int(causal), group)  # lines 5-18
    lib.fa2_bwd_dq_launch(min(3, -(-dq.numel() // 256)), 1, ptr(dq_acc), ptr(dq), ctypes.c_longlong(dq.numel()),
                          f32(scale))  # line 20, a few blocks so the grid-stride loop strides
    assert torch.allclose(delta, (do.float() * o.float()).sum(-1), rtol=1e-5, atol=1e-5), "D = rowsum(dO o O)"
    return dq, dk, dv


@pytest.mark.slow
@settings(max_examples=25)  # 18 possible builds (blocks x d_pad x dtype); 25 keeps the suite's budget under any profile
@given(n_q=st.integers(1, 150), n_k=st.integers(1, 150), d=st.sampled_from([1, 7, 40, 64, 65, 100, 104, 128]),
       blocks=st.sampled_from(BLOCKS), causal=st.booleans(), scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
       large=st.booleans(), dtype=st.sampled_from(list(STORAGE)), seed=st.integers(0, 2**31 - 1))
def test_emulated_kernel_matches_float64_autograd(build, n_q, n_k, d, blocks, causal, scale, large, dtype, seed):
    scale = 1 / math.sqrt(d) if scale is None else scale
    g = torch.Generator().manual_seed(seed)
    q, do = torch.randn(1, 2, n_q, d, generator=g), torch.randn(1, 2, n_q, d, generator=g)
    k, v = torch.randn(1, 2, n_k, d, generator=g), torch.randn(1, 2, n_k, d, generator=g)
    if large:  # scale·q·k ~ 1e4
        a = math.sqrt(1e4 / (scale * math.sqrt(d)))
        q, k = q * a, k * a
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))
    from kernels import fa2

    lib = build(*blocks, 64 if d <= 64 else 128, STORAGE[dtype], int(fa2.prefetch(dtype, d, *blocks)))  # the launcher's
    got = emulated_backward(lib, q, k, v, do, causal, scale)
    assert_grads_close(got, q, k, v, do, causal, scale, what=f"Br, Bc = {blocks}, {n_q}x{n_k}x{d} causal={causal}")


def test_emulated_rows_that_see_no_key(build):
    """Causal, Nq > Nk: the first Nq - Nk rows see nothing: dq = 0 there exactly, no NaN."""
    g = torch.Generator().manual_seed(1)
    q, do = torch.randn(1, 2, 140, 24, generator=g), torch.randn(1, 2, 140, 24, generator=g)
    k, v = torch.randn(1, 2, 37, 24, generator=g), torch.randn(1, 2, 37, 24, generator=g)
    dq, _, _ = got = emulated_backward(build(32, 16, 64), q, k, v, do, True, 0.2)
    assert (dq[..., :103, :] == 0).all() and dq[..., 103:, :].abs().sum() > 0
    assert not any(torch.isnan(t).any() for t in got)
    assert_grads_close(got, q, k, v, do, True, 0.2)


def test_a_wrong_kernel_fails(build, tmp_path):
    """The check can fail: the same kernel with dK's scale left out is caught."""
    src = (ROOT / "kernels" / "cuda" / "fa2_bwd.cu").read_text()
    broken = src.replace("store_as(dKg + x, dK[a][b] * scale);", "store_as(dKg + x, dK[a][b]);")
    assert broken != src, "the line this test breaks has moved"
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "fa2_bwd.cu").write_text(broken)
    for header in (ROOT / "kernels" / "cuda").glob("*.cuh"):  # teaching.cuh and what it includes
        shutil.copy(header, cuda / header.name)
    so = tmp_path / "broken.so"
    subprocess.run([CXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                    f"-I{ROOT / 'tests' / 'emulate'}", f"-I{ROOT / 'tests' / 'emulate' / 'fake'}", f"-I{cuda}", "-DSTORAGE=float", "-DBR=64",
                    "-DBC=64", "-DD_PAD=64", str(HARNESS), "-o", str(so)], check=True)
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(1, 1, 50, 32, generator=g) for _ in range(4))
    got = emulated_backward(ctypes.CDLL(str(so)), q, k, v, do, False, 0.3)
    with pytest.raises(AssertionError, match="dk"):
        assert_grads_close(got, q, k, v, do, False, 0.3)


@pytest.mark.parametrize("h, h_kv", [(1, 1), (4, 2)])
def test_the_launcher_drives_the_emulated_kernels(build, monkeypatch, h, h_kv):
    """kernels/fa2.py backward itself (its checks, allocations, grids, argument order, shared-memory size)
    with loader.get_function routed to the emulated kernels: what the GPU would be asked to run; (4, 2): grouped-
    query K/V, one block per (key block, batch, kv head)."""
    import numpy as np

    from kernels import _teaching, fa2, loader

    calls = []

    class Emulated:
        def __init__(self, lib, name, defines):
            self.lib, self.name, self.defines = lib, name, defines

        def launch(self, grid, block, args, shared_mem=0):
            grid = tuple(grid) + (1,) * (3 - len(grid))
            assert tuple(block) == (_teaching.NTHREADS,) and grid[2] == 1, (grid, block)
            assert shared_mem <= 4 * self.lib.shared_floats(), "the launcher asks for more than the kernel carves"
            conv = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else
                    ctypes.c_longlong(int(a)) if isinstance(a, np.int64) else
                    ctypes.c_float(a) if isinstance(a, float) else int(a) for a in args]
            calls.append((self.name, grid[:2], shared_mem))
            getattr(self.lib, self.name + "_launch")(grid[0], grid[1], *conv)

    def get_function(source, name, *, defines=None, **_):
        assert source == fa2.BWD_SOURCE and defines["STORAGE"] == "float"
        return Emulated(build(defines["BR"], defines["BC"], defines["D_PAD"], "float", defines["FA2_PREFETCH"]), name,
                        defines)

    monkeypatch.setattr(loader, "get_function", get_function)
    monkeypatch.setattr(loader, "check_cuda_inputs", lambda *a, **kw: None)  # CPU tensors stand in
    monkeypatch.setattr(loader, "max_dynamic_smem", lambda *a: 227 * 1024)
    g = torch.Generator().manual_seed(3)
    q, do = torch.randn(2, h, 150, 40, generator=g), torch.randn(2, h, 150, 40, generator=g)
    k, v = torch.randn(2, h_kv, 90, 40, generator=g), torch.randn(2, h_kv, 90, 40, generator=g)
    group = h // h_kv
    o, lse = attention_reference(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), causal=True)
    got = fa2.backward(q, k, v, o.float(), lse.float(), do, causal=True)
    assert [c[0] for c in calls] == list(fa2.BWD_KERNELS)
    assert calls[1][1:] == ((2, 2 * h_kv), fa2.backward_shared_bytes(40))  # (Tc, B*H_kv) = (90/64, 2 H_kv)
    from tests.test_kernels_backward import assert_gqa_grads_close

    assert_gqa_grads_close(got, q, k, v, do, True, 1 / math.sqrt(40))
    assert (got[0][..., :60, :] == 0).all()  # causal, Nq > Nk: 60 rows see no key


@pytest.mark.parametrize("blocks", [(64, 64), pytest.param((32, 32), marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype, d, causal", [(torch.float16, 128, True),
                                              pytest.param(torch.bfloat16, 104, False, marks=pytest.mark.slow)])
def test_emulated_prefetch_path(build, dtype, d, causal, blocks):
    """fa2_bwd.cu v3 (FA2_PREFETCH: Q_{i+1}, dO_{i+1} staged during step i), the build the launcher picks for
    16-bit inputs at d_pad = 128: several Q blocks with a tail, Nq > Nk so causal rows see no key; and the
    same problem through the v2 build gives the same gradients to float32 rounding."""
    from kernels import fa2

    assert fa2.prefetch(dtype, d) and fa2.bwd_defines(dtype, d)["FA2_PREFETCH"] == 1
    g = torch.Generator().manual_seed(d)
    q, do = (torch.randn(1, 2, 150, d, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(1, 2, 90, d, generator=g).to(dtype) for _ in range(2))
    scale = 1 / math.sqrt(d)
    got = emulated_backward(build(*blocks, 128, STORAGE[dtype], 1), q, k, v, do, causal, scale)
    assert_grads_close(got, q, k, v, do, causal, scale, what=f"prefetch {dtype} d={d} {blocks}")
    v2 = emulated_backward(build(*blocks, 128, STORAGE[dtype], 0), q, k, v, do, causal, scale)
    for a, b in zip(got, v2):
        assert torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2 * b.float().abs().max().item())
    if causal:
        assert (got[0][..., :60, :] == 0).all()


@pytest.mark.parametrize("group, h_kv, prefetch", [(2, 2, 0), (4, 1, 0), (3, 1, 1), pytest.param(8, 1, 0, marks=pytest.mark.slow)])
def test_emulated_grouped_query(build, group, h_kv, prefetch):
    """Grouped-query K/V (H = group * H_kv): the block of key block j of kv head h_kv walks its group's query heads
    and sums their dK_j, dV_j on chip. Against float64 autograd with K/V repeat_interleave'd (what the kernel never
    builds): odd sizes, tails, causal with Nq > Nk so rows see no key; prefetch: the v3 staging crossing from one
    query head's last Q block to the next head's first."""
    from tests.test_kernels_backward import assert_gqa_grads_close as close

    dtype, d = (torch.float16, 104) if prefetch else (torch.float32, 40)
    g = torch.Generator().manual_seed(group)
    q, do = (torch.randn(2, group * h_kv, 75, d, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(2, h_kv, 50, d, generator=g).to(dtype) for _ in range(2))
    scale = 1 / math.sqrt(d)
    blocks = (32, 32)
    got = emulated_backward(build(*blocks, 64 if d <= 64 else 128, STORAGE[dtype], prefetch), q, k, v, do, True, scale)
    assert got[1].shape == k.shape and got[2].shape == v.shape
    assert (got[0][..., :25, :] == 0).all()  # causal, Nq - Nk = 25 rows see no key
    close(got, q, k, v, do, True, scale, what=f"group {group}, H_kv {h_kv}")
