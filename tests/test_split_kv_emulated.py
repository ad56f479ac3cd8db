"""The teaching split-KV kernels (kernels/cuda/split_kv.cu: split_kv_partial, split_kv_merge) run on the CPU, without a
GPU: tests/emulate/split_kv_host.cpp compiles the .cu file as C++ (one std::thread per CUDA thread, 256 per block;
tests/emulate/cuda_host.h) and runs its two launches on the grids kernels/split_kv.py computes (kernels/_decode.py's
plan). Hypothesis drives odd cache lengths, page sizes, empty and one-token caches, splits that do not divide the cache,
GQA groups, causal rows that see nothing, in float32, fp16 and bf16 storage; o and lse are checked against the float64
oracle of tests/test_split_kv_gpu.py, with the workspace and outputs poisoned (NaN) first. What it cannot see: the
fast kernel (PTX), real races, the 128-thread block the GPU runs (the loops are strided by NTHREADS)."""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import _decode, split_kv
from tests.test_split_kv_gpu import oracle, padded

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "emulate" / "split_kv_host.cpp"
CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++20 compiler (g++)")
STORAGE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
TOL = {torch.float32: 1e-4, torch.float16: 1.5e-2, torch.bfloat16: 4e-2}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out, libs = tmp_path_factory.mktemp("split_kv_host"), {}

    def get(dtype):
        if dtype not in libs:
            so = out / f"split_kv_{STORAGE[dtype]}.so"
            cmd = [CXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                   f"-I{ROOT / 'tests' / 'emulate'}", f"-I{ROOT / 'tests' / 'emulate' / 'fake'}",
                   f"-I{ROOT / 'kernels' / 'cuda'}", f"-DSTORAGE={STORAGE[dtype]}", str(HARNESS), "-o", str(so)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 and "barrier" in proc.stderr:
                pytest.skip(f"{CXX} lacks C++20 std::barrier")
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
            libs[dtype] = ctypes.CDLL(str(so))
        return libs[dtype]

    return get


def emulated(lib, q, k, v, *, causal, scale, cache_seqlens, block_table, num_splits):
    """kernels/split_kv.py's forward with the two launches emulated: the same plan, grids and arguments."""
    p = _decode.check("split_kv", q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens,
                      block_table=block_table, num_splits=num_splits, dtypes=split_kv.DTYPES,
                      head_dims=split_kv.HEAD_DIMS, block_k=split_kv.BLOCK_K, cuda=False)
    seqlens = _decode.seqlens_or_full(cache_seqlens, p, q.device)  # the launchers' int32 casts
    table = _decode.table_or_dummy(block_table, q.device)
    tiles = p.batch * p.heads_kv * p.row_tiles
    ws_o = torch.full((tiles * p.splits * _decode.ROWS * p.d,), math.nan)
    ws_lse = torch.full((tiles * p.splits * _decode.ROWS,), math.nan)
    o = torch.full(q.shape, math.nan, dtype=q.dtype)
    lse = torch.full((p.batch, p.heads, p.n_q), math.nan)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    i = ctypes.c_int
    lib.partial_launch(i(p.batch * p.heads_kv), i(p.row_tiles), i(p.splits), ptr(q), ptr(k), ptr(v), ptr(seqlens),
                       ptr(table), ptr(ws_o), ptr(ws_lse), i(p.heads), i(p.heads_kv), i(p.n_q),
                       i(0 if p.paged else p.capacity), i(p.d), ctypes.c_float(p.scale), i(int(p.causal)),
                       i(int(p.paged)), i(p.page_size), i(p.max_pages), i(p.chunk), i(p.splits), i(p.row_tiles))
    lib.merge_launch(i(tiles * _decode.ROWS), ptr(ws_o), ptr(ws_lse), ptr(o), ptr(lse), i(p.heads), i(p.heads_kv),
                     i(p.n_q), i(p.d), i(p.splits), i(p.row_tiles))
    return o, lse, p


def cache(b, h_kv, d, lens, dtype, page, seed):
    g = torch.Generator().manual_seed(seed)
    cap = max(max(lens), 1)
    if page is None:
        return torch.randn(b, h_kv, cap, d, generator=g).to(dtype), torch.randn(b, h_kv, cap, d, generator=g).to(
            dtype), None
    max_pages = -(-cap // page)
    pages = b * max_pages + 2
    k = torch.randn(pages, h_kv, page, d, generator=g).to(dtype)
    v = torch.randn(pages, h_kv, page, d, generator=g).to(dtype)
    return k, v, torch.randperm(pages, generator=g)[: b * max_pages].reshape(b, max_pages).to(torch.int32)


def run_case(build, b, h_kv, grp, n_q, d, lens, dtype, page, causal, splits, seed=0, pad=False):
    k, v, table = cache(b, h_kv, d, lens, dtype, page, seed)
    table = padded(table, lens, page) if pad else table  # int64, padding past the pages
    q = torch.randn(b, h_kv * grp, n_q, d, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32)
    o, lse, p = emulated(build(dtype), q, k, v, causal=causal, scale=None, cache_seqlens=seqlens,
                         block_table=table, num_splits=splits)
    ro, rl = oracle(q, k, v, lens, table, page, causal, 1 / math.sqrt(d))
    what = f"b={b} h_kv={h_kv} g={grp} Nq={n_q} d={d} lens={lens} {dtype} page={page} causal={causal} S={splits} {p}"
    assert not torch.isnan(o).any() and not torch.isnan(lse).any(), f"unwritten output: {what}"
    empty = torch.isinf(rl)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), what
    assert (o.double()[empty] == 0).all(), what
    assert (o.double() - ro).abs().max().item() <= TOL[dtype], what
    if (~empty).any():
        assert (lse.double()[~empty] - rl[~empty]).abs().max().item() <= 4 * TOL[dtype], what
    return p


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(b=st.integers(1, 2), h_kv=st.integers(1, 2), grp=st.sampled_from([1, 3, 4]), n_q=st.integers(1, 7),
       d=st.sampled_from([8, 20, 64]), dtype=st.sampled_from(list(STORAGE)),
       cap=st.sampled_from([1, 31, 32, 33, 100]), data=st.data(), page=st.sampled_from([None, 1, 5, 16, 32]),
       causal=st.booleans(), splits=st.sampled_from([None, 1, 2, 3, 5]))
def test_teaching_kernel_emulated(build, b, h_kv, grp, n_q, d, dtype, cap, data, page, causal, splits):
    lens = data.draw(st.lists(st.one_of(st.just(0), st.just(cap), st.integers(0, cap)), min_size=b, max_size=b))
    run_case(build, b, h_kv, grp, n_q, d, lens, dtype, page, causal, splits)


def test_edges_emulated(build):
    p = run_case(build, 1, 2, 4, 1, 64, [200], torch.float16, None, False, 3)
    assert p.splits == 3 and p.chunk == 96  # ceil(200 / 3) = 67 -> 96 (a multiple of Bc = 32): 96 + 96 + 8
    p = run_case(build, 2, 1, 8, 3, 16, [0, 0], torch.float32, 4, True, None)  # every cache empty
    assert p.splits == 1
    run_case(build, 1, 1, 8, 5, 16, [3], torch.float32, None, True, None)  # Nq > L: the first rows see nothing
    run_case(build, 1, 1, 4, 9, 256, [70], torch.bfloat16, 48, False, 2)  # d = 256, 36 packed rows (3 row tiles)
    run_case(build, 3, 1, 2, 2, 16, [20, 1, 0], torch.float16, 8, True, 2, pad=True)  # int64 table, padding
