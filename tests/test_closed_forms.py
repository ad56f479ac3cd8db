"""The closed forms equal the instrumented counts of the references exactly, and are fast."""
from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import given, strategies as st

from counting import cluster
from counting import closed_forms as cf
from counting.memory import Memory, SramOverflow
from variants import VARIANTS, v_once

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def configs():
    """Every registered variant and option combination, read at call time (a variant registered at
    runtime is checked too: tests/test_add_a_variant.py)."""
    return [(name, opts) for name, var in VARIANTS.items() for opts in var.configs()]


def instrumented(name, pr, opts, capacity=None, device="meta"):
    """Run the reference under a counting Memory; (counts dict, overflowed?)."""
    dt = TORCH_DTYPES[pr["dtype"]]
    q = torch.randn(pr["batch"], pr["heads"], pr["n_q"], pr["d"], device=device).to(dt)
    k = torch.randn(pr["batch"], pr["heads"], pr["n_k"], pr["d"], device=device).to(dt)
    v = torch.randn(pr["batch"], pr["heads"], pr["n_k"], pr["d"], device=device).to(dt)
    mem = Memory(capacity)
    try:
        VARIANTS[name].forward(q, k, v, causal=pr["causal"], block_q=pr["block_q"],
                               block_k=pr["block_k"], mem=mem, **opts)
    except SramOverflow:
        return None, True
    return mem.counts.as_dict(), False


def closed(name, pr, opts, capacity=None):
    return cf.counts(name, pr["batch"], pr["heads"], pr["n_q"], pr["n_k"], pr["d"],
                     causal=pr["causal"], dtype=pr["dtype"], block_q=pr["block_q"],
                     block_k=pr["block_k"], sram_bytes=capacity, **opts)


def nonzero(d: dict) -> dict:
    """Counts.as_dict() with zero-element tensor entries dropped (the closed forms omit them)."""
    out = dict(d)
    for key in ("reads", "writes", "read_bytes", "write_bytes"):
        out[key] = {k: v for k, v in d[key].items() if v}
    return out


@st.composite
def problems(draw, max_n=64, max_tiles=8):
    n_q, n_k = draw(st.integers(1, max_n)), draw(st.integers(1, max_n))
    return dict(
        batch=draw(st.integers(1, 2)), heads=draw(st.integers(1, 2)), n_q=n_q, n_k=n_k,
        d=draw(st.integers(1, 12)),
        # bounded tile counts (the references loop in Python); blocks may exceed N (one tail tile)
        block_q=draw(st.integers(math.ceil(n_q / max_tiles), n_q + 5)),
        block_k=draw(st.integers(math.ceil(n_k / max_tiles), n_k + 5)),
        causal=draw(st.booleans()),
        dtype=draw(st.sampled_from(list(TORCH_DTYPES))),
        # the SRAM capacity: unlimited, or v_once's spilled working set (auto must spill; the other
        # variants may or may not fit it), or a random size, or one CTA's bytes in a cluster of
        # cluster_size CTAs (placement "cluster" needs a cluster of at most that size)
        capacity=draw(st.sampled_from(["none", "spill", "random", "cluster"])),
        random_capacity=draw(st.integers(64, 8192)),
        cluster_size=draw(st.sampled_from([2, 4, 8, 16])),
    )


def _capacity(pr, rescale):
    if pr["capacity"] == "none":
        return None
    if pr["capacity"] == "random":
        return pr["random_capacity"]
    itemsize = TORCH_DTYPES[pr["dtype"]].itemsize
    if pr["capacity"] == "cluster":
        return cluster.at_size(pr["cluster_size"], pr["n_k"], pr["d"], block_q=pr["block_q"],
                               block_k=pr["block_k"], itemsize=itemsize).smem_bytes
    return v_once.sram_bytes(pr["n_q"], pr["n_k"], pr["d"], pr["block_q"], pr["block_k"], itemsize,
                             pr["causal"], placement="hbm", rescale=rescale)


@given(pr=problems())
def test_closed_forms_equal_instrumented_counts(pr):
    """Every variant and v_once option: reads, writes (elements and bytes, per tensor), FLOPs by
    kind, SRAM peak and the placement auto resolves to, exactly; overflow exactly when not fits."""
    for name, opts in configs():
        cap = _capacity(pr, opts.get("rescale", "eager"))
        got, overflowed = instrumented(name, pr, opts, cap)
        tr = closed(name, pr, opts, cap)
        what = f"{name} {opts} {pr} capacity={cap}"
        assert overflowed == (not tr.fits), what
        if overflowed:
            continue
        assert nonzero(got) == tr.as_dict(), what
        if name == "v_once" and opts["placement"] == "auto":
            itemsize = TORCH_DTYPES[pr["dtype"]].itemsize
            expect = v_once.resolve_placement(pr["n_q"], pr["n_k"], pr["d"], pr["block_q"],
                                              pr["block_k"], itemsize, pr["causal"],
                                              rescale=opts["rescale"], capacity=cap)
            assert tr.placement_resolved == expect, what
        if name == "v_once" and opts["placement"] == "cluster":
            itemsize = TORCH_DTYPES[pr["dtype"]].itemsize
            plan = cluster.plan(pr["n_k"], pr["d"], block_q=min(pr["block_q"], pr["n_q"]),  # blocks clipped to N
                                block_k=min(pr["block_k"], pr["n_k"]), itemsize=itemsize,
                                capacity=cluster.UNLIMITED if cap is None else cap)
            assert tr.cluster_size == plan.cluster_size and tr.sram_peak_bytes == plan.smem_bytes <= (cap or plan.smem_bytes), what
            if pr["capacity"] == "cluster":
                assert tr.cluster_size <= pr["cluster_size"], what


def test_unlimited_sram_counts_even_when_it_does_not_fit():
    """With a capacity the working set exceeds, the closed form still gives the counts (of a chip
    big enough) and says by how much it is over."""
    pr = dict(batch=1, heads=2, n_q=37, n_k=50, d=8, block_q=8, block_k=16, causal=True, dtype="fp16")
    want, _ = instrumented("v_once", pr, {"placement": "sram", "rescale": "eager"})
    tr = closed("v_once", pr, {"placement": "sram", "rescale": "eager"}, capacity=500)
    assert not tr.fits and tr.over_by_bytes == tr.sram_peak_bytes - 500 > 0
    assert nonzero(want) == tr.as_dict()


def test_real_tensors_count_like_meta_tensors():
    pr = dict(batch=2, heads=1, n_q=19, n_k=23, d=5, block_q=4, block_k=6, causal=True, dtype="bf16")
    for name, opts in configs():
        real, _ = instrumented(name, pr, opts, device="cpu")
        assert nonzero(real) == closed(name, pr, opts).as_dict(), name


def test_causal_rows_that_see_nothing_and_whole_blocks_hidden():
    """Nq > Nk causal: the first Nq - Nk rows see no key; whole Q blocks visit no K block."""
    pr = dict(batch=1, heads=1, n_q=40, n_k=9, d=4, block_q=8, block_k=4, causal=True, dtype="fp32")
    for name, opts in configs():
        got, _ = instrumented(name, pr, opts)
        assert nonzero(got) == closed(name, pr, opts).as_dict(), (name, opts)


def test_options_match_the_variant():
    assert cf.PLACEMENTS == v_once.PLACEMENTS and cf.RESCALES == v_once.RESCALES
    assert set(cf.VARIANT_NAMES) == set(VARIANTS)


def test_non_causal_closed_forms_match_the_docstrings():
    """fa2 as its docstring prints it: Q once, K and V Tr times, O and lse once."""
    b, h, n, d, br, bc = 2, 3, 1000, 64, 64, 128
    tr = cf.counts("fa2", b, h, n, n, d, dtype="fp16", block_q=br, block_k=bc)
    t_r = -(-n // br)
    assert tr.reads == {"Q": b * h * n * d, "K": b * h * t_r * n * d, "V": b * h * t_r * n * d}
    assert tr.writes == {"O": b * h * n * d, "lse": b * h * n}
    assert tr.flops["matmul"] == 4 * b * h * n * n * d == tr.paper_flops
    causal = cf.counts("fa2", b, h, n, n, d, causal=True, dtype="fp16", block_q=br, block_k=bc)
    assert causal.flops["matmul"] > causal.paper_flops  # full visited tiles, not the triangle


def test_fast_at_64k():
    t0 = time.perf_counter()
    for name, opts in configs():
        for causal in (False, True):
            cf.counts(name, 4, 16, 65536, 65536, 128, causal=causal, dtype="bf16", block_q=64,
                      block_k=64, sram_bytes=232448, **opts)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fa1_rule_blocks_fit_h200(d, dtype):
    """FA1's rule with M = SRAM bytes / 4 (float32 elements) fits fa1 and fa2 on H200's 227 KiB."""
    sram = 227 * 1024
    br, bc = cf.fa1_blocks(sram, d)
    assert bc == math.ceil((sram // 4) / (4 * d)) and br == min(bc, d)
    for name in ("fa1", "fa2"):
        assert cf.counts(name, 1, 1, 16384, 16384, d, dtype=dtype, block_q=br, block_k=bc,
                         sram_bytes=sram).fits, (name, br, bc)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown variant"):
        cf.counts("fa3", 1, 1, 8, 8, 4)
    with pytest.raises(ValueError, match="positive"):
        cf.counts("fa2", 1, 1, 0, 8, 4)
    with pytest.raises(ValueError, match="unknown dtype"):
        cf.counts("fa2", 1, 1, 8, 8, 4, dtype="fp8")
    with pytest.raises(ValueError, match="placement"):
        cf.counts("v_once", 1, 1, 8, 8, 4, placement="l2")
    with pytest.raises(ValueError, match="cluster.*lazy"):
        cf.counts("v_once", 1, 1, 8, 8, 4, placement="cluster", rescale="eager")
