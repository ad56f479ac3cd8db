"""The fast split-KV kernel (kernels/cuda/split_kv_fast.cu) run on the CPU, without a GPU:
tests/emulate/split_kv_fast_host.cpp compiles it as C++ with tests/emulate/tc_common_host.cuh standing in for the PTX
(cp.async as an immediate copy, ldmatrix and mma.sync m16n8k16 as warp collectives built from the PTX ISA's fragment
layouts) and launches it on kernels/split_kv_fast.py's grid and arguments. Checked against the float64 oracle of
tests/test_split_kv_gpu.py with outputs and workspace poisoned (NaN): the GQA packing, swizzled ldmatrix addressing,
the paged gather, masks, the 4-warp merge and the fused last-CTA merge with its counters. What it cannot see: the real
PTX (the emulated fragments follow the ISA's description), timing, races between CTAs (blocks run one at a time)."""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernels import _decode, layouts, split_kv_fast
from tests.test_split_kv_emulated import cache
from tests.test_split_kv_gpu import oracle, padded

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "emulate" / "split_kv_fast_host.cpp"
CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++20 compiler (g++)")
TOL = {torch.float16: 1.5e-2, torch.bfloat16: 4e-2}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out, libs = tmp_path_factory.mktemp("split_kv_fast_host"), {}

    def get(d, dtype):
        key = (d, dtype)
        if key not in libs:
            bf16 = int(dtype == torch.bfloat16)
            so = out / f"split_kv_fast_{d}_{bf16}.so"
            cmd = [CXX, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-DFA_EMULATE",
                   f"-I{ROOT / 'tests' / 'emulate'}", f"-I{ROOT / 'tests' / 'emulate' / 'fake'}",
                   f"-I{ROOT / 'kernels' / 'cuda'}", f"-DHEAD_DIM={d}", f"-DIS_BF16={bf16}", str(HARNESS), "-o",
                   str(so)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 and "barrier" in proc.stderr:
                pytest.skip(f"{CXX} lacks C++20 std::barrier")
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
            libs[key] = ctypes.CDLL(str(so))
        return libs[key]

    return get


COUNTERS = torch.zeros(4096, dtype=torch.int32)  # like the launcher's: zero between launches


def emulated(lib, q, k, v, *, causal, scale, cache_seqlens, block_table, num_splits):
    """kernels/split_kv_fast.py's forward with the launch emulated: the same plan, grid and arguments."""
    d = q.shape[-1]
    p = _decode.check("split_kv_fast", q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens,
                      block_table=block_table, num_splits=num_splits, dtypes=split_kv_fast.DTYPES,
                      head_dims=split_kv_fast.HEAD_DIMS, block_k=split_kv_fast.block_k(d),
                      max_n_q=split_kv_fast.MAX_N_Q, cuda=False)
    q, sc = layouts.positive_scale(q, p.scale)
    seqlens = _decode.seqlens_or_full(cache_seqlens, p, q.device)  # the launchers' int32 casts
    table = _decode.table_or_dummy(block_table, q.device)
    tiles = p.batch * p.heads_kv * p.row_tiles
    o = torch.full(q.shape, math.nan, dtype=q.dtype)
    lse = torch.full((p.batch, p.heads, p.n_q), math.nan)
    if p.splits > 1:
        ws_o = torch.full((tiles * p.splits * _decode.ROWS * p.d,), math.nan)
        ws_lse = torch.full((tiles * p.splits * _decode.ROWS,), math.nan)
        counters = COUNTERS
    else:
        ws_o = ws_lse = lse
        counters = table
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    i, f = ctypes.c_int, ctypes.c_float
    lib.fast_launch(i(p.batch * p.heads_kv), i(p.row_tiles), i(p.splits), ptr(q), ptr(k), ptr(v), ptr(seqlens),
                    ptr(table), ptr(o), ptr(lse), ptr(ws_o), ptr(ws_lse), ptr(counters), i(p.heads), i(p.heads_kv),
                    i(p.n_q), i(0 if p.paged else p.capacity), i(max(p.page_size, 1)), i(p.max_pages),
                    i(int(p.paged)), i(p.chunk), i(p.splits), i(p.row_tiles), f(sc * split_kv_fast.LOG2E), f(sc),
                    i(int(p.causal)))
    assert not COUNTERS.any(), "the merging CTA must leave its counter at 0"
    return o, lse, p


def run_case(build, b, h_kv, grp, n_q, d, lens, dtype, page, causal, splits, scale=None, seed=0, pad=False):
    k, v, table = cache(b, h_kv, d, lens, dtype, page, seed)
    table = padded(table, lens, page) if pad else table  # int64, padding past the pages
    q = torch.randn(b, h_kv * grp, n_q, d, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32)
    o, lse, p = emulated(build(d, dtype), q, k, v, causal=causal, scale=scale, cache_seqlens=seqlens,
                         block_table=table, num_splits=splits)
    ro, rl = oracle(q, k, v, lens, table, page, causal, 1 / math.sqrt(d) if scale is None else scale)
    what = f"b={b} h_kv={h_kv} g={grp} Nq={n_q} d={d} lens={lens} {dtype} page={page} causal={causal} S={splits} {p}"
    assert not torch.isnan(o).any() and not torch.isnan(lse).any(), f"unwritten output: {what}"
    empty = torch.isinf(rl)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), what
    assert (o.double()[empty] == 0).all(), what
    err = (o.double() - ro).abs().max().item()
    assert err <= TOL[dtype], f"o off by {err}: {what}"
    if (~empty).any():
        lerr = (lse.double()[~empty] - rl[~empty]).abs().max().item()
        assert lerr <= 4 * TOL[dtype], f"lse off by {lerr}: {what}"
    return p


@pytest.mark.parametrize("case", [
    # b, h_kv, g, Nq, d, lens, dtype, page, causal, splits
    (1, 1, 4, 1, 64, [100], torch.float16, None, False, 1),        # one CTA, a tail tile
    (1, 1, 4, 1, 128, [150], torch.bfloat16, None, False, 1),
    (2, 1, 2, 3, 64, [300, 7], torch.float16, None, True, 2),      # splits + fused merge, causal, per-sequence L
    (1, 2, 1, 1, 128, [0], torch.float16, None, False, None),      # empty cache
    (1, 1, 8, 1, 64, [1], torch.bfloat16, 16, False, None),        # one token, paged
    (1, 1, 3, 2, 128, [200], torch.float16, 48, False, 3),         # paged, page 48 (chunk lcm(64, 48) = 192)
    (1, 1, 1, 5, 64, [3], torch.float16, 1, True, None),           # Nq > L: rows that see nothing; page 1
    (1, 1, 5, 4, 64, [130], torch.float16, None, True, 2),         # 20 packed rows: two row tiles
    # pages a multiple of Bc (Bc = 64 at d = 128, 128 at d = 64): one block_table lookup per tile (load_kv's
    # one_page path), tails inside a page, a page shared by two tiles, splits over several pages
    (2, 1, 2, 1, 128, [300, 129], torch.bfloat16, 128, True, 2),
    (1, 2, 1, 3, 64, [700], torch.float16, 256, False, 3),
])
def test_fast_kernel_emulated(build, case):
    run_case(build, *case)


def test_fast_kernel_emulated_padded_int64_table(build):
    run_case(build, 3, 1, 2, 2, 64, [70, 1, 0], torch.float16, 16, True, 2, pad=True)  # padding past the pages


@pytest.mark.slow
def test_fast_kernel_emulated_d256(build):
    run_case(build, 1, 1, 4, 1, 256, [70], torch.bfloat16, 32, True, 2)


def test_fast_kernel_emulated_negative_scale(build):
    run_case(build, 1, 1, 2, 2, 64, [40], torch.float16, None, True, 1, scale=-0.2)
