"""lab.knob_ab: the GPU model's ratio for each A/B variant of forward()'s build, against the A/B's measured ratio
(CPU only, the committed runs)."""
from __future__ import annotations

import pytest

from lab import knob_ab


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
    rs = [r for r in knob_ab.rows(source="fwd_wgmma_ragged_section_first/ab/") if r["d"] == 128 and r["n"] == 10240]
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


def test_the_ab_records_the_build_a_variant_ran_and_knob_ab_reads_it(tmp_path, monkeypatch):
    """lab/ab_wgmma_speed.py default_with_config: the rule's build with the named knobs and the knobs forward() adds
    to the build they make (a one-tile build made persistent gets SECTION_RAGGED_FIRST; with O_TILE in ping-pong,
    TURN_CARRY); a named knob wins. knob_ab prices a row's recorded build."""
    import json

    from gpumodel import measured
    from lab.ab_wgmma_speed import default_with_config
    from kernels import fa2_wgmma

    cfg = default_with_config("default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1", 128, 16384, True)
    assert cfg["BLOCK_N"] == 128 and cfg["SECTION_RAGGED_FIRST"] == 1 and cfg["TURN_CARRY"] == 1
    assert default_with_config("default+TURN_CARRY=0+PERSISTENT=2+O_TILE=1", 128, 16384, True)["TURN_CARRY"] == 0
    assert default_with_config("default+WG_SKIP=0", 128, 512, True) == dict(
        fa2_wgmma.default_config(128, 512, True, True), WG_SKIP=0)
    with pytest.raises(ValueError, match="0bb604a"):  # a knob removed with its experiment (issue 40)
        default_with_config("default+HALF_DIAG=1", 128, 512, True)

    base = fa2_wgmma.choose_config(128, 16384, True, causal=True)
    row = dict(dtype="float16", d=128, n=16384, b=1, h=16, causal=True, ok=True)
    rows = [dict(row, variant="fa2_wgmma[default]", median_ms=2.0, config=base, knobs=fa2_wgmma.default_knobs(base)),
            dict(row, variant="fa2_wgmma[default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1]", median_ms=1.9, config=cfg),
            dict(row, variant="fa2_wgmma[default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1+X=1]", median_ms=1.9,
                 config=dict(cfg, SECTION_RAGGED_FIRST=0))]
    run = tmp_path / "run"
    run.mkdir()
    (run / measured.AB_FILE).write_text(json.dumps({"rows": rows, "env": {"timer": "do_bench"}}))
    monkeypatch.setattr(knob_ab, "RESULTS", tmp_path)
    recorded, other = knob_ab.rows()
    assert recorded["measured"] == 0.95 and recorded["model"] < 1.0  # the persistent build: faster (bc24b)
    # X is no knob: rebuilt from the label, the row would be refused and dropped; its recorded build is priced
    assert other["variant"].endswith("X=1") and other["model"] == recorded["model"]  # RF: no ragged section here
