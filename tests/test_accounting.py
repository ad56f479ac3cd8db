"""The counts a run records equal hand-derived values (docs/design.md, accounting conventions)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given

from counting.memory import Memory, SramOverflow
from tests.strategies import make_inputs, problems
from variants import VARIANTS

B, H, N, D, BLK = 2, 3, 96, 16, 32  # T = N / BLK = 3 blocks a side, no tails
T = N // BLK
BH = B * H


def run(name, *, causal=False, dtype=torch.float16, n_q=N, n_k=N, sram=None, **opts):
    q = torch.randn(B, H, n_q, D).to(dtype)
    k, v = torch.randn(B, H, n_k, D).to(dtype), torch.randn(B, H, n_k, D).to(dtype)
    mem = Memory(sram_bytes=sram)
    VARIANTS[name].forward(q, k, v, causal=causal, block_q=BLK, block_k=BLK, mem=mem, **opts)
    return mem.counts


def test_fa2_reads_k_and_v_once_per_q_block():
    c = run("fa2")
    assert c.reads == {"Q": BH * N * D, "K": BH * T * N * D, "V": BH * T * N * D}
    assert c.writes == {"O": BH * N * D, "lse": BH * N}
    assert c.write_bytes["lse"] == 4 * BH * N and c.read_bytes["K"] == 2 * BH * T * N * D


def test_fa1_round_trips_o_l_m_at_every_visited_tile():
    c = run("fa1")
    tiles = T * T
    # line 8 reads Q_i, O_i, l_i, m_i per tile; the lse epilogue reads l and m once more
    assert c.reads == {"K": BH * N * D, "V": BH * N * D, "Q": BH * tiles * BLK * D,
                       "O": BH * tiles * BLK * D, "l": BH * (tiles * BLK + N), "m": BH * (tiles * BLK + N)}
    # line 2 initialises O, l, m; lines 12-13 write them back per tile; the epilogue writes lse
    assert c.writes == {"O": BH * (N * D + tiles * BLK * D), "l": BH * (N + tiles * BLK),
                        "m": BH * (N + tiles * BLK), "lse": BH * N}
    assert c.write_bytes["O"] == 2 * c.writes["O"]  # running O in the output dtype (fp16)
    assert c.write_bytes["l"] == 4 * c.writes["l"]


def test_naive_materialises_s_and_p():
    c = run("naive", causal=True)
    visited = T * (T + 1) // 2
    assert c.writes == {"S": BH * N * N, "P": BH * N * N, "lse": BH * N, "O": BH * N * D}
    assert c.reads == {"S": BH * N * N, "Q": BH * visited * BLK * D, "K": BH * visited * BLK * D,
                       "P": BH * visited * BLK * BLK, "V": BH * visited * BLK * D}


@pytest.mark.parametrize("rescale", ["eager", "lazy"])
def test_v_once_spilled_f_traffic(rescale):
    c = run("v_once", placement="hbm", rescale=rescale)
    assert c.reads["K"] == c.reads["V"] == BH * T * N * D  # as FA2
    extra = BH * T * (T * (T - 1) // 2) * BLK * BLK if rescale == "eager" else 0
    assert c.writes["f"] == BH * N * N + extra  # each block written once, eager rewrites earlier ones
    assert c.reads["f"] == BH * N * N + extra  # read once for the product, eager re-reads


def test_v_once_in_sram_moves_no_f():
    c = run("v_once", placement="sram")
    assert "f" not in c.reads and "f" not in c.writes
    assert c.reads == {"Q": BH * N * D, "K": BH * T * N * D, "V": BH * T * N * D}


@pytest.mark.parametrize("name,opts", [(n, o) for n, v in VARIANTS.items() for o in v.configs()])
def test_matmul_flops_equal_4_nq_nk_d(name, opts):
    c = run(name, n_q=70, n_k=45, **opts)  # tails on both sides, Nq != Nk
    assert c.flops["matmul"] == 4 * BH * 70 * 45 * D


def test_fa2_exp_and_other_flops_by_hand():
    c = run("fa2")
    tiles = T * T
    r = c_ = BLK
    # per tile: exp r·c (P) + r (alpha); other 4rc + 4r + 2rd; per Q block: other r·d + 2r
    assert c.flops["exp"] == BH * tiles * (r * c_ + r)
    assert c.flops["other"] == BH * (tiles * (4 * r * c_ + 4 * r + 2 * r * D) + T * (r * D + 2 * r))


def test_fa1_does_more_non_matmul_work_than_fa2():
    """FA2's point: fewer non-matmul FLOPs (deferred normalisation, no per-step divide)."""
    fa1, fa2 = run("fa1"), run("fa2")
    assert fa1.flops["other"] > fa2.flops["other"] and fa1.flops["exp"] > fa2.flops["exp"]


def test_causal_skips_hidden_tiles():
    full, causal = run("fa2"), run("fa2", causal=True)
    assert causal.reads["K"] == BH * (T * (T + 1) // 2) * BLK * D
    assert causal.flops["matmul"] == 4 * BH * (T * (T + 1) // 2) * BLK * BLK * D
    assert causal.flops["matmul"] < full.flops["matmul"]


def test_sram_overflow_names_both_numbers():
    with pytest.raises(SramOverflow, match=r"needs [\d,]+ bytes of SRAM but the capacity is 4,096"):
        run("fa2", sram=4096)
    with pytest.raises(SramOverflow, match="v_once"):
        run("v_once", placement="sram", sram=12_000)


def test_a_run_refused_for_sram_leaves_the_memory_as_it_was():
    """An SramOverflow stops the run before it counts anything: the same Memory takes the retry, and an
    accumulating one keeps no part of the failed run (not its runs, not its SRAM peak)."""
    q = torch.randn(B, H, N, D).to(torch.float16)
    mem = Memory(sram_bytes=12_000)
    with pytest.raises(SramOverflow):
        VARIANTS["v_once"].forward(q, q, q, block_q=BLK, block_k=BLK, placement="sram", mem=mem)
    assert mem.runs == 0 and mem.counts.sram_peak_bytes == 0 and not mem.counts.reads
    VARIANTS["v_once"].forward(q, q, q, block_q=BLK, block_k=BLK, placement="hbm", mem=mem)
    assert mem.runs == 1 and mem.counts.writes["f"] > 0 and mem.counts.sram_peak_bytes <= 12_000
    acc = Memory(sram_bytes=12_000, accumulate=True)
    VARIANTS["fa2"].forward(q, q, q, block_q=BLK, block_k=BLK, mem=acc)
    before = acc.counts.as_dict()
    with pytest.raises(SramOverflow):
        VARIANTS["v_once"].forward(q, q, q, block_q=BLK, block_k=BLK, placement="sram", mem=acc)
    assert acc.runs == 1 and acc.counts.as_dict() == before


def test_auto_placement_spills_when_f_row_does_not_fit():
    small, big = run("v_once", placement="auto", sram=12_000), run("v_once", placement="auto", sram=10**6)
    assert small.writes["f"] > 0 and "f" not in big.writes
    assert big.sram_peak_bytes > 12_000 >= small.sram_peak_bytes


@pytest.mark.filterwarnings("ignore::variants.naive.ScoreRangeWarning")  # counts, not values
@pytest.mark.parametrize("name,opts", [(n, o) for n, v in VARIANTS.items() for o in v.configs()])
@given(pr=problems(max_n=80, max_d=24, max_tiles=5))
def test_meta_tensors_count_the_same(name, opts, pr):
    q, k, v = make_inputs(pr)
    counts = []
    for dev in ("cpu", "meta"):
        mem = Memory()
        VARIANTS[name].forward(q.to(dev), k.to(dev), v.to(dev), causal=pr["causal"], scale=pr["scale"],
                               block_q=pr["block_q"], block_k=pr["block_k"], mem=mem, **opts)
        counts.append(mem.counts.as_dict())
    assert counts[0] == counts[1]


def test_mem_none_counts_nothing_and_gives_the_same_result():
    q, k, v = (torch.randn(1, 1, 40, 8) for _ in range(3))
    mem = Memory()
    o1, l1 = VARIANTS["fa2"].forward(q, k, v, mem=mem, block_q=16, block_k=16)
    o2, l2 = VARIANTS["fa2"].forward(q, k, v, block_q=16, block_k=16)
    assert torch.equal(o1, o2) and torch.equal(l1, l2) and mem.counts.hbm_bytes > 0
