"""analysis.results (committed GPU results, by named file and run), analysis.style, analysis.nbtools."""
from __future__ import annotations

import json

import pytest

from analysis import nbtools, results, style


def _write(tmp_path, name, rows, meta=None):
    (tmp_path / name).write_text(json.dumps({"meta": meta or {}, "rows": rows}))


def _row(kernel, n, tflops, d=64, causal=False, **kw):
    return dict(kernel=kernel, n=n, d=d, causal=causal, dtype="float16", tflops=tflops, **kw)


def test_load_records_reads_only_the_named_file_and_labels_its_run(tmp_path):
    _write(tmp_path, "a.json", [_row("fa2_tc", 512, 100.0), _row("v_once_tc", 512, 60.0, ok=False)])
    _write(tmp_path, "z_newer.json", [_row("fa2_tc", 512, 999.0)], meta={"run_id": "r42"})
    recs = results.load_records("a.json", results_dir=tmp_path)
    assert [(r["kernel"], r["tflops"], r["run"]) for r in recs] == [("fa2_tc", 100.0, "a.json")]  # ok=False dropped
    assert "no run id" in results.run_label(recs)
    newer = results.load_records("z_newer.json", results_dir=tmp_path)
    assert newer[0]["run"] == "r42" and results.run_label(newer).startswith("run r42")


def test_a_missing_named_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        results.load_records("nope.json", results_dir=tmp_path)


def test_measured_ratio_is_same_run_same_tier(tmp_path):
    _write(tmp_path, "one.json", [_row("fa2_tc", 1024, 200.0), _row("v_once_tc[hbm,lazy]", 1024, 120.0),
                                  _row("v_once_tc[sram,lazy]", 1024, 130.0), _row("fa2", 1024, 10.0),
                                  _row("v_once_auto_lazy", 1024, 9.0)])
    _write(tmp_path, "two.json", [_row("fa2_tc", 1024, 300.0)], meta={"run_id": "other"})
    one = results.load_records("one.json", results_dir=tmp_path)
    ratio, kernel, ref, run = results.measured_ratio(one, 1024)
    assert ratio == pytest.approx(130.0 / 200.0) and kernel == "v_once_tc[sram,lazy]" and ref == "fa2_tc"
    assert results.measured_ratio(one, 1024, ref=("fa2",))[0] == pytest.approx(0.9)
    assert results.measured_ratio(one, 2048) is None
    mixed = one + results.load_records("two.json", results_dir=tmp_path)
    with pytest.raises(ValueError, match="several runs"):
        results.measured_ratio(mixed, 1024)


def test_one_per_shape_lets_the_later_named_file_win(tmp_path):
    recs = [dict(_row("fa2", 512, 1.0), file="a", run="a"), dict(_row("fa2", 512, 2.0), file="b", run="b")]
    assert [r["tflops"] for r in results.one_per_shape(recs)] == [2.0]
    assert [r["tflops"] for r in results.one_per_shape(recs[::-1])] == [1.0]


def test_load_ncu_attaches_shapes(tmp_path):
    path = tmp_path / "x_ncu.csv"
    path.write_text("target launched fa2_tc n=4096 d=64 b=4 h=16\n"
                    '"ID","Kernel Name","Metric Name","Metric Value"\n'
                    '"0","k","dram__bytes_read.sum","1,000"\n"0","k","dram__bytes_write.sum","24"\n')
    (m,) = results.load_ncu(path)
    assert m["kernel"] == "fa2_tc" and m["n"] == "4096" and m["dram__bytes_read.sum"] == 1000.0
    assert list(results.find_counter_records({"x": [m]})) == [m]


def test_committed_results_the_notebooks_name_load():
    # notebooks 05 and 06 name these files; a rename must fail here, not as an empty notebook cell
    for name in ("tc_bench.json", "bench_kernels.json", "tc_bench_wgmma_tma.json"):
        assert results.load_records(name), name


def test_no_two_kernels_share_colour_and_marker():
    pairs = [(s["color"], s["marker"]) for s in style.STYLES.values()]
    assert len(pairs) == len(set(pairs))
    assert style.line_style("fa2_tc{BLOCK_M=128}")["color"] == style.STYLES["fa2_tc"]["color"]
    new = style.line_style("some_new_kernel")
    assert (new["color"], new["marker"]) not in set(pairs) and style.line_style("some_new_kernel") == new
    assert [style.tier(k) for k in ("fa2", "fa2_wgmma", "v_once_tc", "sdpa_flash")] == [
        "teaching", "tensor-core", "tensor-core", "library"]


def test_nbtools():
    assert nbtools.md_table(["a", "b|c"], [[1, "x|y"]]).splitlines() == ["| a | b\\|c |", "|---|---|", "| 1 | x\\|y |"]
    assert nbtools.human(1.5e9) == "1.5 GB" and nbtools.human(2048, binary=True) == "2 KiB" and nbtools.human(640) == "640 B"


def test_latest_run_cells_replaces_whole_cells(tmp_path):
    """A later file's cell replaces all of the earlier file's rows of that cell, so ratios never mix runs."""
    import json

    from analysis.results import latest_run_cells

    def row(n, label, ms):
        return dict(n=n, label=label, median_ms=ms)
    (tmp_path / "a.json").write_text(json.dumps({"rows": [row(512, "x", 1.0), row(512, "y", 2.0), row(1024, "x", 3.0)]}))
    (tmp_path / "b.json").write_text(json.dumps({"rows": [row(512, "x", 5.0), row(2048, "x", 0.0)]}))
    got = latest_run_cells([tmp_path / "a.json", tmp_path / "b.json"], lambda r: (r["n"],),
                           keep=lambda r: r["median_ms"] > 0)
    assert {k: (r["median_ms"], r["file"]) for k, r in got.items()} == {
        (512, "x"): (5.0, "b.json"), (1024, "x"): (3.0, "a.json")}  # a.json's (512, "y") left with its cell
