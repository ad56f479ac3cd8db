"""analysis.knob_ab: the GPU model's ratio for each A/B variant of forward()'s build, against the A/B's measured ratio
(CPU only, the committed runs)."""
from __future__ import annotations

from analysis import knob_ab


def test_variant_labels_and_configs():
    assert knob_ab._knobs_of("fa2_wgmma[default+BLOCK_N=128+PERSISTENT=2]") == {"BLOCK_N": 128, "PERSISTENT": 2}
    assert knob_ab._knobs_of("fa2_wgmma[default]") is None and knob_ab._knobs_of("sdpa_cudnn") is None
    base = {"config": {"TMA": 1, "BLOCK_N": 176, "NWG": 2}, "knobs": {"DESC_STEP": 1}}
    # O_TILE turned on in a ping-pong build: the A/B's build carries TURN_CARRY too (forward()'s knobs)
    cfg = knob_ab.variant_config(base, {"BLOCK_N": 128, "PERSISTENT": 2, "O_TILE": 1})
    assert cfg["TURN_CARRY"] == 1 and cfg["DESC_STEP"] == 1 and cfg["BLOCK_N"] == 128
    assert knob_ab.variant_config(base, {"O_TILE": 1, "TURN_CARRY": 0})["TURN_CARRY"] == 0  # named: kept
    assert "TURN_CARRY" not in knob_ab.variant_config(base, {"RESCALE_THRESHOLD": 8})


def test_the_ragged_section_was_predicted():
    """stop 24: the model, told of the persistent build's causal order, prices the leftover section last (d = 128
    causal N = 10240: 16 heads in sections of 3) slower than the one-tile build and first faster, as measured."""
    rs = [r for r in knob_ab.rows(source="stop24/rf24ab/") if r["d"] == 128 and r["n"] == 10240]
    last = [r for r in rs if "SECTION_RAGGED_FIRST" not in r["variant"]]
    first = [r for r in rs if "SECTION_RAGGED_FIRST" in r["variant"]]
    assert len(last) == len(first) == 4  # two runs, fp16 and bf16
    assert all(r["model"] > 1.02 and r["measured"] > 1.0 for r in last)
    assert all(r["model"] < 0.95 and r["measured"] < 0.97 for r in first)


def test_summary_counts_the_cells_the_model_moves():
    rs = [dict(source="run/a.json", variant="v", model=0.9, measured=0.95, control=1.0),
          dict(source="run/a.json", variant="v", model=0.9, measured=1.02, control=1.0),
          dict(source="run/a.json", variant="v", model=1.0, measured=0.9, control=None)]
    (s,) = knob_ab.summary(rs)
    assert s["cells"] == 3 and s["moved"] == 2 and s["same_way"] == 1
    assert abs(s["model"] - (0.9 * 0.9 * 1.0) ** (1 / 3)) < 1e-12
