"""v_once placement="cluster" (issue 18): the reference split over CS CTAs, its counts and its closed form.

Capacities are chosen so the cluster really has CS > 1 CTAs (counting.cluster.at_size: one CTA's bytes
at that size); an unlimited capacity gives CS = 1, which the registry-wide tests already cover.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

from counting import cluster
from counting import closed_forms as cf
from counting.memory import Memory, SramOverflow
from counting.tiling import Tiling
from tests.strategies import assert_close_to_reference, make_inputs, problems
from variants import VARIANTS, attention_reference

V_ONCE = VARIANTS["v_once"]


def capacity_for(pr, cs):
    itemsize = torch.empty((), dtype=pr["dtype"]).element_size()
    return cluster.at_size(cs, pr["n_k"], pr["d"], block_q=pr["block_q"], block_k=pr["block_k"],
                           itemsize=itemsize).smem_bytes


def run(q, k, v, *, capacity=None, **kw):
    mem = Memory(capacity)
    o, lse = V_ONCE.forward(q, k, v, placement="cluster", rescale="lazy", mem=mem, **kw)
    return o, lse, mem.counts


@given(pr=problems(max_n=120, max_d=24, max_tiles=8), cs=st.sampled_from([2, 4, 8, 16]))
def test_cluster_matches_float64_reference_and_sram_lazy(pr, cs):
    """The split is a partition of the keys: same result as one CTA holding the row (to float32
    association), and as the float64 reference by the suite's tolerance (scores to ~1e4, empty rows)."""
    q, k, v = make_inputs(pr)
    kw = dict(causal=pr["causal"], scale=pr["scale"], block_q=pr["block_q"], block_k=pr["block_k"])
    o, lse, counts = run(q, k, v, capacity=capacity_for(pr, cs), **kw)
    ref_o, ref_lse = attention_reference(q, k, v, causal=pr["causal"], scale=pr["scale"])
    assert_close_to_reference(o, lse, ref_o, ref_lse, v, pr["dtype"], large_scores=pr["large_scores"],
                              what=f"cluster cs<={cs} {pr}")
    o1, lse1 = V_ONCE.forward(q, k, v, placement="sram", rescale="lazy", **kw)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(lse1))
    seen = ~torch.isneginf(lse1)
    assert torch.allclose(lse[seen], lse1[seen], rtol=1e-5, atol=1e-5)
    # one rounding of O apart in fp16/bf16; in fp32 the float32 sums associated by CTA (a few ulps per block)
    eps = max(2 * torch.finfo(pr["dtype"]).eps, 64 * torch.finfo(torch.float32).eps)
    tol = eps * max(1.0, v.abs().max().item())
    assert (o.double() - o1.double()).abs().max().item() <= tol


def test_counts_by_hand_against_sram_lazy():
    """CS = 4 on a 256 x 256 problem: sram lazy's counts plus 3 more reads of Q, 3·Nq·d adds, and the
    DSMEM bytes of the two reductions: 4·CS(CS-1)·Nq for m and ℓ each, 4·(CS-1)·Nq·d for the partial O's."""
    b, h, n, d, br, bc = 1, 2, 256, 16, 32, 32
    pr = dict(n_k=n, d=d, block_q=br, block_k=bc, dtype=torch.float16)
    cap = capacity_for(pr, 4)
    assert cluster.plan(n, d, block_q=br, block_k=bc, capacity=cap).cluster_size == 4
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16) for _ in range(3))
    _, _, c = run(q, k, v, capacity=cap, block_q=br, block_k=bc)
    mem = Memory()
    V_ONCE.forward(q, k, v, placement="sram", rescale="lazy", mem=mem, block_q=br, block_k=bc)
    s = mem.counts
    bh, cs = b * h, 4
    assert c.reads["Q"] == cs * s.reads["Q"] == cs * bh * n * d
    assert c.reads["K"] == s.reads["K"] and c.reads["V"] == s.reads["V"] and c.writes == s.writes
    assert "f" not in c.reads and "f" not in c.writes
    assert c.flops["matmul"] == s.flops["matmul"] and c.flops["exp"] == s.flops["exp"]
    assert c.flops["other"] - s.flops["other"] == (cs - 1) * bh * n * d
    assert dict(c.dsmem_bytes) == {"m": 4 * cs * (cs - 1) * bh * n, "l": 4 * cs * (cs - 1) * bh * n,
                                   "O": 4 * (cs - 1) * bh * n * d}
    assert s.dsmem_bytes == {} and c.sram_peak_bytes <= cap
    tr = cf.counts("v_once", b, h, n, n, d, dtype="fp16", block_q=br, block_k=bc, placement="cluster",
                   rescale="lazy", sram_bytes=cap)
    assert tr.as_dict() == c.as_dict() and tr.cluster_size == cs and tr.dsmem_total_bytes == sum(c.dsmem_bytes.values())


def test_rows_that_see_no_key_across_a_cluster():
    """Causal, Nq > Nk: whole Q blocks see nothing and ranks own no visited block; o = 0, lse = -inf."""
    torch.manual_seed(5)
    q, k, v = torch.randn(1, 2, 40, 8), torch.randn(1, 2, 13, 8), torch.randn(1, 2, 13, 8)
    pr = dict(n_k=13, d=8, block_q=16, block_k=2, dtype=torch.float32)
    o, lse, c = run(q, k, v, capacity=capacity_for(pr, 4), causal=True, block_q=16, block_k=2)
    assert cf.counts("v_once", 1, 2, 40, 13, 8, causal=True, dtype="fp32", block_q=16, block_k=2,
                     placement="cluster", rescale="lazy", sram_bytes=capacity_for(pr, 4)).cluster_size == 4
    assert torch.isneginf(lse[..., :27]).all() and torch.isfinite(lse[..., 27:]).all()
    assert (o[..., :27, :] == 0).all() and not torch.isnan(o).any()
    ref_o, _ = attention_reference(q, k, v, causal=True)
    assert torch.allclose(o.double(), ref_o, atol=1e-5)
    assert c.dsmem_bytes["O"] == 4 * 3 * 2 * 40 * 8  # every Q block runs the whole protocol


def test_no_cluster_holds_the_row():
    """Past 16 CTAs: the reference raises SramOverflow with both numbers, the closed form says it does not fit."""
    q = k = v = torch.randn(1, 1, 64, 16)
    pr = dict(n_k=64, d=16, block_q=16, block_k=4, dtype=torch.float32)
    cap = capacity_for(pr, 16) - 1
    with pytest.raises(SramOverflow, match=r"placement=cluster, 16 CTAs.*capacity is"):
        run(q, k, v, capacity=cap, block_q=16, block_k=4)
    tr = cf.counts("v_once", 1, 1, 64, 64, 16, dtype="fp32", block_q=16, block_k=4, placement="cluster",
                   rescale="lazy", sram_bytes=cap)
    assert not tr.fits and tr.over_by_bytes == 1 and tr.cluster_size == 16


def test_cluster_is_lazy_only():
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(ValueError, match="cluster.*lazy"):
        V_ONCE.forward(q, q, q, placement="cluster", rescale="eager")
    assert {"placement": "cluster", "rescale": "eager"} not in V_ONCE.configs()
    assert {"placement": "cluster", "rescale": "lazy"} in V_ONCE.configs()


@given(n_k=st.integers(1, 5000), d=st.sampled_from([64, 128]), cs=st.sampled_from(cluster.CLUSTER_SIZES))
def test_rank_blocks_partition_the_visited_prefix(n_k, d, cs):
    p = cluster.at_size(cs, n_k, d)
    for visible in {n_k, n_k // 2, 1}:
        visited = range(math.ceil(visible / 64))
        got = [j for r in range(cs) for j in cluster.rank_blocks(r, p, visited)]
        assert got == list(visited)
        assert all(len(cluster.rank_blocks(r, p, visited)) <= p.key_blocks_per_cta for r in range(cs))


def test_plan_or_largest():
    assert cluster.plan_or_largest(100_000, 128).cluster_size == 1  # unlimited: one CTA
    big = cluster.plan_or_largest(100_000, 128, capacity=cluster.SMEM_PER_CTA)
    assert big.cluster_size == 16 and big.smem_bytes > cluster.SMEM_PER_CTA
    at_16k = cluster.plan_or_largest(16384, 64, capacity=cluster.SMEM_PER_CTA)
    assert at_16k == cluster.plan(16384, 64) and at_16k.cluster_size > 1


def test_dsmem_counts_float32_bytes():
    mem = Memory()
    mem.dsmem("m", torch.zeros(2, 3, dtype=torch.float16))
    assert mem.counts.dsmem_bytes == {"m": 24} and mem.counts.hbm_bytes == 0
    quiet = Memory(counting=False)
    quiet.dsmem("m", torch.zeros(4))
    assert quiet.counts.dsmem_bytes == {}


def test_tiles_visited_per_rank_add_up():
    """The closed form's K and V reads are the visited tiles, whichever rank visits them."""
    t = Tiling(300, 1000, 64, 64, True)
    p = cluster.at_size(4, 1000, 64)
    for i in range(t.t_r):
        visited = t.k_blocks(i)
        assert sum(len(cluster.rank_blocks(r, p, visited)) for r in range(4)) == len(visited)


def test_blocks_larger_than_the_problem_are_clipped():
    """Bc = 1024 over Nk = 100 keys (Br = 64 over Nq = 40 rows): the cluster's CTA holds the 100 keys it has,
    as placement sram counts a block's actual rows, instead of a 1024-key slice that overflows."""
    q = torch.randn(1, 1, 40, 64, dtype=torch.float16)
    k = torch.randn(1, 1, 100, 64, dtype=torch.float16)
    mem = Memory(227 * 1024)
    VARIANTS["v_once"].forward(q, k, k, block_q=64, block_k=1024, placement="cluster", rescale="lazy", mem=mem)
    clipped = cluster.plan(100, 64, block_q=40, block_k=100, capacity=227 * 1024)
    assert mem.counts.sram_peak_bytes == clipped.smem_bytes < 227 * 1024
    tr = cf.counts("v_once", 1, 1, 40, 100, 64, block_q=64, block_k=1024, placement="cluster", rescale="lazy",
                   sram_bytes=227 * 1024)
    assert tr.sram_peak_bytes == clipped.smem_bytes and tr.cluster_size == 1
