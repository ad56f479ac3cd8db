"""Issue 42's promotion in the backward model: "fa2_wgmma" is v4 (the warp-specialised main kernel the package runs at
d = 64, 128), fitted on the H100 A/B (results/bwd_ws_v4, N <= 4k trains, N = 16k held out) and carried over to the
H200 unvalidated; v3's model is fa2_wgmma_v3, and the committed runs that timed v3 under the name "fa2_wgmma" (the
H200 grid, the H100 held-out run) are read as v3's, never re-scored against v4's constants.
"""
import json
import re

import pytest

from analysis.cli import main
from gpumodel import backward_model as bm
from gpumodel import coverage, heldout


def test_the_runs_before_the_promotion_are_v3s():
    cells = bm.all_cells()
    grid = [c for c in cells if c["source"] == bm.GRID_SOURCE]
    assert {c["kernel"] for c in grid} == {"fa2_wgmma_v3", "fa2_v1", "sdpa_flash", "sdpa_cudnn"}
    assert {c["gpu"] for c in grid} == {"h200"}
    held = heldout.backward_cells(heldout.RUNS["h100"] / heldout.BACKWARD_FILE, "h100")
    assert {c["label"] for c in held if c["kernel"] == "fa2_wgmma_v3"} == {"fa2_wgmma"}
    assert "fa2_wgmma" not in {c["kernel"] for c in held}
    record = heldout.load("h100")
    assert {t["kernel"] for t in record["track"] if t["pass_name"] == "backward"} >= {"fa2_wgmma_v3"}
    assert "fa2_wgmma" not in {t["kernel"] for t in record["track"] if t["pass_name"] == "backward"}


def test_v4s_cells_are_the_ab_contender_v4_on_the_h100_split_at_4k():
    sources = {bm.results_key(f) for f in bm.V4_AB_FILES}
    v4 = [c for c in bm.all_cells() if c["kernel"] == "fa2_wgmma" and c["source"] in sources]
    assert not [c for c in bm.all_cells() if c["kernel"] == "fa2_wgmma" and c["train"] and c["source"] not in sources]
    assert {c["gpu"] for c in v4} == {"h100"} and len(v4) == 48
    assert {c["n"] for c in v4 if c["train"]} == {2048, 4096} and {c["n"] for c in v4 if not c["train"]} == {16384}
    raw = [r for f in bm.V4_AB_FILES for r in json.loads(f.read_text())["rows"] if r["contender"] == "v4"]
    assert sorted(c["time_s"] for c in v4) == sorted(r["median_ms"] * 1e-3 for r in raw)


def test_each_kernels_constants_name_their_gpu_and_v4_is_carried_to_the_h200():
    fit = json.loads(bm.FIT_FILE.read_text())
    assert fit["fitted_on"] == {k: bm.fit_gpu(k) for k in bm.KERNELS}
    assert fit["fitted_on"]["fa2_wgmma"] == "h100" and fit["fitted_on"]["fa2_wgmma_v3"] == "h200"
    assert fit["params"]["fa2_wgmma"] != fit["params"]["fa2_wgmma_v3"]
    assert bm.footing("fa2_wgmma", "h100") == coverage.FITTED
    assert bm.footing("fa2_wgmma", "h200") == coverage.CARRIED
    assert bm.footing("fa2_wgmma_v3", "h100") == coverage.CARRIED
    assert bm.footing("sdpa_cudnn", "h200") == coverage.FITTED
    lines = {(t["kernel"], t["split"]): t for t in fit["track_record"]}
    assert lines[("fa2_wgmma", "held-out")]["gpu"] == "h100" and lines[("fa2_wgmma_v3", "held-out")]["gpu"] == "h200"


def test_v4_held_out_cells_are_within_the_band():
    """N = 16k, never in the fit: every cell within ±15% (the committed constants; a refit must keep this)."""
    sources = {bm.results_key(f) for f in bm.V4_AB_FILES}
    held = [r for r in bm.rows() if r["kernel"] == "fa2_wgmma" and not r["train"] and r["source"] in sources]
    assert len(held) == 16
    assert all(abs(r["err"]) <= bm.BAND["fa2_wgmma"] for r in held), [(r["n"], r["d"], r["err"]) for r in held]
    # the track record the fit file holds is what the committed constants give
    fit = json.loads(bm.FIT_FILE.read_text())
    assert json.loads(json.dumps(bm.track_record(bm.rows()))) == fit["track_record"]


def test_v4s_stored_constants_are_what_its_fit_gives_and_the_others_are_kept():
    pytest.importorskip("scipy")
    stored = bm.load_params()
    refit = bm.fit(only=("fa2_wgmma",))
    assert refit["fa2_wgmma"] == pytest.approx(stored["fa2_wgmma"], rel=1e-4)
    assert {k: v for k, v in refit.items() if k != "fa2_wgmma"} == {k: v for k, v in stored.items()
                                                                    if k != "fa2_wgmma"}
    with pytest.raises(ValueError, match="no backward model of"):
        bm.fit(only=("fa2_wgmma_v9",))


def test_a_fit_on_another_gpus_cells_is_refused():
    pytest.importorskip("scipy")
    cells = [dict(c, gpu="h200") for c in bm.all_cells() if c["kernel"] == "fa2_wgmma"]
    with pytest.raises(ValueError, match="its fit is the H100's"):
        bm.fit(cells, only=("fa2_wgmma",))


def test_a_fa2_wgmma_row_of_an_unnamed_run_is_refused(tmp_path):
    """A run neither in BUILD_OF nor recording its main kernel may have timed v3 or v4: refused, not read as v4."""
    for meta in (None, {}, {"device": "NVIDIA H100 80GB HBM3"}):
        with pytest.raises(ValueError, match="name its build in .*BUILD_OF"):
            bm.kernel_of("fa2_wgmma", tmp_path / "bwd_bench.json", meta, 64)
        assert bm.kernel_of("sdpa_flash", tmp_path / "bwd_bench.json", meta, 64) == "sdpa_flash"
    assert bm.kernel_of("fa2_wgmma", bm.GRID_FILE, None, 64) == "fa2_wgmma_v3"  # BUILD_OF names the grid's


@pytest.mark.parametrize("meta,d,want", [
    ({"fa2_wgmma_bwd_ws_head_dims": [64, 128]}, 128, "fa2_wgmma"),
    ({"fa2_wgmma_bwd_ws_head_dims": [64, 128]}, 96, "fa2_wgmma_v3"),
    ({"fa2_wgmma_bwd_ws_head_dims": []}, 64, "fa2_wgmma_v3"),  # WS_HEAD_DIMS emptied: v3 everywhere
])
def test_a_new_runs_fa2_wgmma_rows_are_the_main_kernel_its_meta_names(tmp_path, meta, d, want):
    assert bm.kernel_of("fa2_wgmma", tmp_path / "bwd_bench.json", meta, d) == want
    assert bm.kernel_of("sdpa_flash", tmp_path / "bwd_bench.json", meta, d) == "sdpa_flash"


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_predict_names_where_v4s_track_record_comes_from(capsys):
    rc, out, err = _run(capsys, "predict", "--kernel", "fa2_wgmma", "--pass", "backward", "--seq-len", "16k",
                        "--head-dim", "128", "--gpu", "h100")
    assert rc == 0, err
    assert "results/bwd_ws_v4/first/bwd_ws_ab.json" in out and re.search(r" (\d+)/\1 within ±15%", out), out
    rc, out, err = _run(capsys, "predict", "--kernel", "fa2_wgmma", "--pass", "backward", "--seq-len", "16k",
                        "--head-dim", "128", "--gpu", "h200")
    assert rc == 0, err
    assert "carried over" in out and "unvalidated" in out
    rc, out, err = _run(capsys, "predict", "--kernel", "fa2_wgmma_v3", "--pass", "backward", "--seq-len", "16k",
                        "--head-dim", "128", "--gpu", "h100", "--format", "json")
    (r,) = json.loads(out)
    assert rc == 0 and r["track_record"]["source"] == "gpu_model_h100_heldout.json" and r["track_record"]["cells"] == 32


def test_the_backward_reports_caption_says_where_fa2_wgmmas_constants_come_from(capsys):
    rc, out, err = _run(capsys, "report", "--pass", "backward", "--variant", "fa2", "--seq-len", "16k")
    assert rc == 0, err
    assert "the H100 fit carried over" in out and "unvalidated on the H200" in out
    rc, out, err = _run(capsys, "report", "--pass", "backward", "--variant", "fa2", "--seq-len", "16k", "--gpu", "h100")
    assert rc == 0, err
    assert "fitted on its H100 runs" in out and "results/bwd_ws_v4/first/bwd_ws_ab.json" in out


def test_a_later_run_named_held_out_only_is_never_in_the_fit_and_gets_its_own_line():
    """HELDOUT_RUNS: a bench_bwd.py run added after the fit (here the committed H100 one stands in) is all held out,
    on the GPU its meta names, one track line per kernel and GPU; a train cell from it would change no constant."""
    key = "h100_heldout/bwd_bench.json"
    cells = bm.all_cells(heldout_runs=(key,))
    later = [c for c in cells if c["source"] == key]
    assert later and not any(c["train"] for c in later) and {c["gpu"] for c in later} == {"h100"}
    assert {c["kernel"] for c in later} == {"fa2_wgmma_v3", "fa2", "sdpa_flash", "sdpa_cudnn"}
    line = bm.held_out_line("fa2_wgmma_v3", "h100", bm.rows(cells=cells))
    assert line["source"] == key and line["cells"] == 32 and line["within"] == 32
    assert bm.held_out_line("fa2_wgmma_v3", "h100") is None  # not committed as such: the record holds it


def test_record_rewrites_only_the_track_record_and_the_committed_file_is_current(tmp_path, monkeypatch, capsys):
    """--record (after a run joins HELDOUT_RUNS) keeps every constant; on the committed state it rewrites nothing."""
    copy = tmp_path / "fit.json"
    copy.write_text(bm.FIT_FILE.read_text())
    monkeypatch.setattr(bm, "FIT_FILE", copy)
    assert bm.main(["--record"]) == 0
    assert copy.read_text() == (bm.ROOT / "results" / "gpu_model_bwd_fit.json").read_text()
    assert re.search(r"fa2_wgmma +held-out h100 (\d+)/\1 within", capsys.readouterr().out)
