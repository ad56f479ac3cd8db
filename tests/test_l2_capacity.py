"""The effective L2 capacity (gpumodel/l2_capacity.py): fitted on the ncu rows of its training files, held out
on the rest; the committed fit is what the levels use and what a re-run would recompute."""
from __future__ import annotations

import json

import pytest

from gpumodel import l2_capacity as lc
from counting.gpus import GPUS
from gpumodel.levels import effective_l2, ramp_l2


def test_levels_use_the_committed_fit():
    fit = json.loads(lc.FIT_FILE.read_text())
    h200 = GPUS["h200"]
    assert effective_l2(h200) == int(h200.value("l2_bytes", "measured") * fit["share_of_l2"])
    assert abs(effective_l2(h200) - fit["capacity_bytes"]) <= 1
    assert 0.5 <= fit["share_of_l2"] <= 1.0  # between every line held twice and none
    assert ramp_l2(h200) == h200.value("l2_bytes", "measured") // 2  # the ramp keeps the capacity it was checked at


def test_training_and_held_out_rows_are_disjoint_and_named():
    from gpumodel.measured import ncu_cells

    cells = [c for c in ncu_cells() if c.get("dram_bytes")]
    train = [c for c in cells if lc.is_train(c)]
    held = [c for c in cells if not lc.is_train(c)]
    assert train and held
    assert {c["source"] for c in held}.isdisjoint(lc.TRAIN_SOURCES)


def test_the_committed_held_out_ratios_recompute():
    """A change to the levels that moves a held-out row must be seen against the committed fit (re-fit, re-read)."""
    fit = json.loads(lc.FIT_FILE.read_text())
    held = lc._rows(train=False)
    got = lc._ratios(held, fit["share_of_l2"])
    want = {(h["source"], h["label"], h["n"], h["d"], h["causal"]): h["ratio"] for h in fit["held_out"]}
    assert len(got) == len(want)
    for c, r in zip(held, got):
        assert r == pytest.approx(want[(c["source"], c["label"], c["n_q"], c["d"], c["causal"])], abs=2e-4)


def test_the_override_changes_the_per_block_rule():
    """The scan must see the capacity it sets (the levels are computed inside the override)."""
    rows = [c for c in lc._rows(train=True) if c["kernel"] == "fa2_wgmma" and c["n_q"] == 32768]
    assert rows
    low, high = lc._ratios(rows, 0.5), lc._ratios(rows, 0.6)
    assert low[0] > high[0] * 1.1  # fewer misses with more capacity
