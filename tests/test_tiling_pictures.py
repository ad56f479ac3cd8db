"""The tiling pictures (analysis/tiling_pictures.py) show what the references move: the reads and writes of every
frame, summed, equal what counting.memory.Memory counts when variants/fa1.py and fa2.py run the same problem."""
from __future__ import annotations

import pytest
import torch

from analysis import tiling_pictures as tp
from counting.memory import Memory
from counting.tiling import Tiling
from variants import VARIANTS


@pytest.mark.parametrize("order", ["fa1", "fa2"])
@pytest.mark.parametrize("n_q,n_k,blk,causal", [(16, 16, 4, False), (16, 16, 4, True), (14, 18, 4, True),
                                                 (18, 10, 4, True), (10, 10, 3, False)])
def test_frames_move_what_the_reference_counts(order, n_q, n_k, blk, causal):
    d = 8
    t = Tiling(n_q, n_k, blk, blk, causal)
    reads, writes = tp.transferred_elements(t, tp.frames(t, order), d)
    q, k, v = torch.randn(1, 1, n_q, d), torch.randn(1, 1, n_k, d), torch.randn(1, 1, n_k, d)
    mem = Memory()
    VARIANTS[order].forward(q, k, v, causal=causal, block_q=blk, block_k=blk, mem=mem)
    assert reads == dict(mem.counts.reads)
    assert writes == dict(mem.counts.writes)


def test_frames_tile_order_and_on_chip():
    t = Tiling(16, 16, 4, 4, causal=True)
    fa1 = [f.tile for f in tp.frames(t, "fa1") if f.tile]
    fa2 = [f.tile for f in tp.frames(t, "fa2") if f.tile]
    assert sorted(fa1) == sorted(fa2) == sorted(t.visited())
    assert fa2 == list(t.visited())
    assert fa1 == [(i, j) for j in range(t.t_c) for i in t.q_blocks(j)]
    # FA2 writes O_i once per query block; FA1 writes it at every tile (plus the initial zeros)
    assert sum(("O", i) in f.writes for f in tp.frames(t, "fa2") for i in range(4)) == t.t_r
    assert sum(("O", i) in f.writes for f in tp.frames(t, "fa1") for i in range(4)) == len(fa1)
    with pytest.raises(ValueError):
        tp.frames(t, "fa3")


def test_draw(tmp_path):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    t = Tiling(16, 16, 4, 4, causal=True)
    for order in ("fa1", "fa2"):
        fig = tp.draw_frames(t, order)
        fig.savefig(tmp_path / f"{order}.png", dpi=60)
        plt.close(fig)
    fig, ax = plt.subplots()
    tp.plot_visit_order(ax, t, list(t.visited()))
    grid = tp.visit_grid(t, list(t.visited()))
    assert grid[0, 0] == 0 and grid[0, 3] != grid[0, 3]  # step 0 a number, the hidden tile NaN (drawn apart)
    plt.close(fig)


def test_backward_products_are_the_references():
    # five products per visited tile, of 2 Br Bc d FLOPs each: what variants/fa2.py's backward counts
    n, blk, d = 16, 4, 8
    q, k, v, do = (torch.randn(1, 1, n, d) for _ in range(4))
    o, lse = VARIANTS["fa2"].forward(q, k, v, block_q=blk, block_k=blk)
    mem = Memory()
    VARIANTS["fa2"].backward(q, k, v, o, lse, do, block_q=blk, block_k=blk, mem=mem)
    tiles = (n // blk) ** 2
    products = sum(s[4] for s in tp.BACKWARD_STEPS)
    assert products == 5
    assert mem.counts.flops["matmul"] == tiles * products * 2 * blk * blk * d
    assert set(tp.BACKWARD_HOME) >= {x for s in tp.BACKWARD_STEPS for x in (*s[2], s[3])}
    # what the picture says crosses per tile is what the reference reads per tile
    per_tile = {x for x, home in tp.BACKWARD_HOME.items() if "every tile" in home}
    assert {"Q", "dO", "lse", "D", "dQ"} == {{"Q_i": "Q", "dO_i": "dO", "L_i": "lse", "D_i": "D",
                                              "dQ_i": "dQ"}[x] for x in per_tile}
    assert all(mem.counts.reads[t] >= tiles * blk for t in ("Q", "dO", "lse", "D", "dQ"))
