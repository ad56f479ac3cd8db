"""The backward's closed forms equal the instrumented backward references exactly (meta tensors)."""
from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import given, strategies as st

from counting import backward_forms as bf
from counting import closed_forms as cf
from counting.memory import Memory, SramOverflow
from counting.tiling import Tiling, tile_sums
from variants import VARIANTS

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CONFIGS = [(name, opts) for name, var in VARIANTS.items() for opts in var.configs()]


def instrumented(name, pr, opts=None, capacity=None, device="meta"):
    """Counts of the backward reference under a counting Memory (None if it overflows capacity)."""
    dt = TORCH_DTYPES[pr["dtype"]]
    b, h, nq, nk, d = pr["batch"], pr["heads"], pr["n_q"], pr["n_k"], pr["d"]
    q, do, o = (torch.randn(b, h, nq, d, device=device).to(dt) for _ in range(3))
    k, v = (torch.randn(b, h, nk, d, device=device).to(dt) for _ in range(2))
    lse = torch.randn(b, h, nq, device=device)
    mem = Memory(capacity)
    try:
        VARIANTS[name].backward(q, k, v, o, lse, do, causal=pr["causal"], block_q=pr["block_q"],
                                block_k=pr["block_k"], mem=mem, **(opts or {}))
    except SramOverflow:
        return None
    c = mem.counts.as_dict()
    for key in ("reads", "writes", "read_bytes", "write_bytes"):
        c[key] = {k: v for k, v in c[key].items() if v}
    return c


def closed(name, pr, opts=None, capacity=None):
    return bf.backward_counts(name, pr["batch"], pr["heads"], pr["n_q"], pr["n_k"], pr["d"],
                              causal=pr["causal"], dtype=pr["dtype"], block_q=pr["block_q"],
                              block_k=pr["block_k"], sram_bytes=capacity, **(opts or {}))


@st.composite
def problems(draw, max_n=64, max_tiles=8):
    n_q, n_k = draw(st.integers(1, max_n)), draw(st.integers(1, max_n))
    return dict(
        batch=draw(st.integers(1, 2)), heads=draw(st.integers(1, 2)), n_q=n_q, n_k=n_k,
        d=draw(st.integers(1, 12)),
        block_q=draw(st.integers(math.ceil(n_q / max_tiles), n_q + 5)),
        block_k=draw(st.integers(math.ceil(n_k / max_tiles), n_k + 5)),
        causal=draw(st.booleans()), dtype=draw(st.sampled_from(list(TORCH_DTYPES))),
        capacity=draw(st.one_of(st.none(), st.integers(64, 16384))),
    )


@given(pr=problems())
def test_backward_closed_forms_equal_instrumented_counts(pr):
    """Reads, writes (elements and bytes, per tensor), FLOPs by kind, SRAM peak; overflow exactly
    when the closed form says the working set does not fit."""
    for name in VARIANTS:
        got = instrumented(name, pr, capacity=pr["capacity"])
        tr = closed(name, pr, capacity=pr["capacity"])
        what = f"{name} {pr}"
        assert (got is None) == (not tr.fits), what
        if got is not None:
            assert got == tr.as_dict(), what


def test_real_tensors_count_like_meta_tensors():
    pr = dict(batch=2, heads=1, n_q=19, n_k=23, d=5, block_q=4, block_k=6, causal=True, dtype="bf16")
    for name, opts in CONFIGS:  # v_once's options change nothing in its backward
        assert instrumented(name, pr, opts, device="cpu") == closed(name, pr, opts).as_dict(), name


def test_causal_rows_that_see_nothing():
    """Nq > Nk causal: whole Q blocks visit no K block and are skipped; the counts still match."""
    pr = dict(batch=1, heads=1, n_q=40, n_k=9, d=4, block_q=8, block_k=4, causal=True, dtype="fp32")
    for name in VARIANTS:
        assert instrumented(name, pr) == closed(name, pr).as_dict(), name


@given(n_q=st.integers(1, 200), n_k=st.integers(1, 200), br=st.integers(1, 64), bc=st.integers(1, 64))
def test_every_k_block_is_visited_bottom_right(n_q, n_k, br, bc):
    """The last query row sees every key, so no K/V block goes unvisited: dK, dV are all computed."""
    t = Tiling(n_q, n_k, br, bc, True)
    assert tile_sums(t).k_blocks == t.t_c
    assert all(len(t.q_blocks(j)) for j in range(t.t_c))


def test_fa2_backward_by_hand():
    """Non-causal, no tails: the docstring's table, and the five products per tile."""
    b, h, n, d, blk = 2, 3, 96, 16, 32
    t_c, bh = n // blk, b * h
    tr = bf.backward_counts("fa2", b, h, n, n, d, dtype="fp16", block_q=blk, block_k=blk)
    assert tr.reads == {"O": bh * n * d, "dO": bh * (n * d + t_c * n * d), "K": bh * n * d,
                        "V": bh * n * d, "Q": bh * t_c * n * d, "lse": bh * t_c * n,
                        "D": bh * t_c * n, "dQ": bh * (t_c * n * d + n * d)}
    assert tr.writes == {"D": bh * n, "dQ": bh * (2 * n * d + t_c * n * d), "dK": bh * n * d,
                         "dV": bh * n * d}
    # dQ: the float32 accumulator (zeros, then every tile) and the final fp16 copy
    assert tr.write_bytes["dQ"] == bh * (4 * (n * d + t_c * n * d) + 2 * n * d)
    assert tr.flops["matmul"] == 10 * bh * n * n * d == tr.paper_flops  # the papers: 2.5 forwards
    assert tr.recompute_flops["matmul"] == 2 * bh * n * n * d and tr.recompute_flops["exp"] == bh * n * n


def test_naive_backward_moves_quadratic_bytes_and_recomputes_nothing():
    n, d = 64, 8
    tr = bf.backward_counts("naive", 1, 1, n, n, d, dtype="fp16", block_q=16, block_k=16)
    assert tr.writes["dP"] == tr.writes["dS"] == n * n and tr.reads["dP"] == n * n
    assert tr.flops["exp"] == 0 and not any(tr.recompute_flops.values())


def test_saved_bytes():
    b, h, n = 2, 4, 1000
    assert bf.saved_bytes("naive", b, h, n, n, "fp16") == b * h * n * n * 2
    assert bf.saved_bytes("fa1", b, h, n, n, "fp16") == b * h * n * 8
    assert bf.saved_bytes("fa2", b, h, n, n, "bf16") == bf.saved_bytes("v_once", b, h, n, n) == b * h * n * 4
    with pytest.raises(ValueError, match="unknown variant"):
        bf.saved_bytes("fa3", 1, 1, 8, 8)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_train_is_forward_plus_backward(name):
    args = (name, 1, 2, 70, 45, 8)
    kw = dict(causal=True, dtype="fp16", block_q=16, block_k=8)
    fwd, bwd = cf.counts(*args, **kw), bf.backward_counts(*args, **kw)
    tr = bf.pass_counts("train", *args, **kw)
    assert tr.hbm_bytes == fwd.hbm_bytes + bwd.hbm_bytes
    assert tr.flops == {k: fwd.flops[k] + bwd.flops[k] for k in cf.FLOP_KINDS}
    assert tr.sram_peak_bytes == max(fwd.sram_peak_bytes, bwd.sram_peak_bytes)
    assert tr.paper_flops == 3.5 * fwd.paper_flops
    assert bf.pass_counts("forward", *args, **kw).as_dict() == fwd.as_dict()
    with pytest.raises(ValueError, match="unknown pass"):
        bf.pass_counts("both", *args, **kw)


def test_fast_at_64k():
    t0 = time.perf_counter()
    for name in VARIANTS:
        for causal in (False, True):
            bf.pass_counts("train", name, 4, 16, 65536, 65536, 128, causal=causal, dtype="bf16",
                           block_q=64, block_k=64, sram_bytes=232448)
    assert time.perf_counter() - t0 < 2.0


def test_module_imports_no_torch():
    """fa-traffic report imports counting.backward_forms: importing it must not pull torch in (its
    counts call closed_forms.counts, torch-free once the forward's SRAM forms are)."""
    import subprocess
    import sys

    code = "import sys, counting.backward_forms; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
