"""fa-traffic as a newcomer meets it (issue 40 item 5, issue 46 items 5 and 6): report and predict agree by default and
say what they assumed; predict --gpu; validate's progress and width; kernels check without the GPU extra; closed
streams, odd COLUMNS, unwritable --plot paths, CSV cells and long lists, for every subcommand."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis import cli
from analysis.cli import main

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# one argv per subcommand (validate's cells are the module fixture's, so it runs in a fraction of a second)
EVERY = {
    "report": ["report", "--seq-len", "1k"],
    "report-backward": ["report", "--pass", "backward", "--seq-len", "1k"],
    "sweep-sram": ["sweep-sram", "--points", "3"],
    "predict": ["predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128"],
    "validate": ["validate"],
    "gpus": ["gpus"],
}
BAD = {  # one bad input per subcommand: exit 2, one line on stderr
    "report": ["report", "--bogus"],
    "sweep-sram": ["sweep-sram", "--points", "0"],
    "predict": ["predict", "--kernel", "nope", "--seq-len", "4k", "--head-dim", "64"],
    "validate": ["validate", "--plot", "x.svg"],
    "gpus": ["gpus", "--format", "xml"],
}


@pytest.fixture(scope="module")
def cells():
    from gpumodel import validate as val

    return val.rows()


@pytest.fixture
def quick_validate(monkeypatch, cells):
    """validate's ~20,000 model calls done once per module: val.rows returns them (and reports progress)."""
    from gpumodel import validate as val

    def rows(params=None, progress=None):
        for done in (1, len(cells) // 2, len(cells)):
            if progress is not None:
                progress(done, len(cells))
        return [dict(r) for r in cells]

    monkeypatch.setattr(val, "rows", rows)


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# -- report and predict: one default shape, said in each header ------------------------------------
def test_report_and_predict_agree_by_default(capsys):
    """fa2_wgmma, N = 4k, d = 128: report's row and predict's record are the same prediction (649 TFLOP/s "tensor"
    against 128.7 "host" before: B = H = 1 in predict, the full GPU in report's model), at the B, H both print."""
    rc, out, err = run(capsys, "report", "--variant", "fa2", "--seq-len", "4k", "--head-dim", "128", "--format", "json")
    assert rc == 0, err
    (r,) = json.loads(out)
    rc, out, err = run(capsys, "predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128",
                       "--format", "json")
    assert rc == 0, err
    (p,) = json.loads(out)
    g = r["gpu_model"]
    assert (r["batch"], r["heads"]) == (p["batch"], p["heads"]) == (g["model_batch"], g["model_heads"]) == (4, 16)
    assert g["kernel"] == p["kernel"] == "fa2_wgmma" and g["build"] == p["build"] and g["bound"] == p["bound"]
    assert g["time_s"] == pytest.approx(p["time_s"]) and g["tflops"] == pytest.approx(p["tflops"])
    for k in ("l2_bytes", "dram_bytes", "requests_bytes"):
        assert g[k] == pytest.approx(p[k], abs=1), k
    assert r["hbm_bytes"] == g["requests_bytes"]  # the papers' count at the same B, H
    # each table names the GPU and the B, H it assumed
    for argv in (["report", "--variant", "fa2", "--seq-len", "4k", "--head-dim", "128"],
                 ["predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128"]):
        rc, out, _ = run(capsys, *argv)
        assert rc == 0 and "NVIDIA H200" in out and "B=4 H=16" in out and "benchmarks' full GPU" in out, argv[0]
    # --batch/--heads given: both take them, and say so without the full-GPU note
    rc, out, _ = run(capsys, "predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128",
                     "--batch", "2", "--heads", "3")
    assert rc == 0 and "B=2 H=3" in out and "full GPU" not in out
    rc, out, _ = run(capsys, "report", "--variant", "fa2", "--seq-len", "1k,4k", "--head-dim", "128")
    assert rc == 0 and "16×16 at N=1024, 4×16 at N=4096" in out


def test_predict_gpu(capsys):
    from gpumodel import gpu_model as gm

    rc, out, _ = run(capsys, "predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128",
                     "--gpu", "h200", "--format", "json")
    assert rc == 0 and json.loads(out)[0]["gpu"] == "h200"
    t0 = time.perf_counter()
    rc, out, err = run(capsys, "predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128",
                       "--gpu", "a100")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "A100" in err
    assert all(g in err for g in gm.COVERED_GPUS) and time.perf_counter() - t0 < 1.0
    rc, _, err = run(capsys, "predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128", "--gpu", "x")
    assert rc == 2 and len(err.strip().splitlines()) == 1


# -- validate: progress on stderr, 100 columns, details behind a flag --------------------------------
def test_validate_fits_100_columns_and_shows_progress(capsys):
    """The real run (its cells priced here): --progress writes progress lines to stderr, stdout fits 100 columns."""
    rc, out, err = run(capsys, "validate", "--progress")
    assert rc == 0 and "ranking:" in out and "known gap" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "100%" in err and all(line.startswith("fa-traffic validate: ") for line in err.splitlines())


def test_validate_details_and_clean_json(capsys, quick_validate):
    rc, out, err = run(capsys, "validate")
    assert rc == 0 and err == ""  # not a terminal, no --progress: nothing on stderr
    assert max(len(line) for line in out.splitlines()) <= 100
    rc, wide, _ = run(capsys, "validate", "--details")
    assert rc == 0 and "source" in wide and "{BLOCK_N=" in wide  # the source files and the builds' knobs
    rc, out, err = run(capsys, "validate", "--format", "json", "--progress")
    assert rc == 0 and "100%" in err and set(json.loads(out)) == {"summary", "ranking", "cell_medians", "cells",
                                                                 "backward", "heldout_gpus"}


# -- kernels check without the GPU extra --------------------------------------------------------------
def test_kernels_check_without_the_gpu_extra_is_one_line():
    code = ("import sys\nfor m in ('cuda', 'cuda.bindings', 'cuda.core', 'cupy'): sys.modules[m] = None\n"
            "from kernels.__main__ import main\nsys.exit(main(['check']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "pip install -e '.[gpu]'" in p.stderr


# -- closed streams -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EVERY))
def test_closed_stdout_every_subcommand(capsys, monkeypatch, quick_validate, name):
    """`fa-traffic gpus >&-`: one line on stderr, exit 1, before any work (an AttributeError traceback before)."""
    monkeypatch.setattr(sys, "stdout", None)
    rc = main(EVERY[name])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_OUTPUT == 1 and "Traceback" not in err
    assert err.strip().splitlines() == ["fa-traffic: error: standard output is closed: nothing to write the output to"]


@pytest.mark.parametrize("name", sorted(BAD))
def test_closed_stderr_keeps_errors_off_stdout(capsys, monkeypatch, name):
    """`2>&-`: an error is not printed to stdout (print(file=None) did), the exit status tells."""
    monkeypatch.setattr(sys, "stderr", None)
    rc = main(BAD[name])
    assert rc == 2 and capsys.readouterr().out == ""


@pytest.mark.parametrize("name", sorted(EVERY))
def test_closed_stderr_output_unchanged(capsys, monkeypatch, quick_validate, name):
    monkeypatch.setattr(sys, "stderr", None)
    rc = main(EVERY[name])
    out = capsys.readouterr().out
    assert rc == 0 and out and "fa-traffic: error" not in out


@pytest.mark.parametrize("fd", [1, 2])
@pytest.mark.parametrize("argv", [["gpus"], ["report", "--bogus"]])
def test_closed_streams_in_a_real_process(fd, argv):
    bad = "--bogus" in argv
    p = subprocess.run([sys.executable, "-m", "analysis", *argv], stdout=None if fd == 1 else subprocess.PIPE,
                       stderr=subprocess.PIPE if fd == 1 else None, text=True, cwd=ROOT, env=_env(), timeout=120,
                       preexec_fn=lambda: os.close(fd))
    if fd == 1:  # stdout closed: one line on stderr, non-zero
        assert p.returncode == (2 if bad else 1) and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    else:  # stderr closed: the output as ever, and an error not on stdout
        assert p.returncode == (2 if bad else 0) and (p.stdout == "") == bad, p.stdout[:300]


# -- odd COLUMNS ----------------------------------------------------------------------------------------
def _body_firsts(out: str) -> list[str]:
    return [line.split("│")[1].strip() for line in ANSI.sub("", out).splitlines() if line.startswith("│")]


@pytest.mark.parametrize("columns", ["0", "1", "7", "-5", "abc"])
@pytest.mark.parametrize("name", sorted(EVERY))
def test_odd_columns_every_subcommand(monkeypatch, quick_validate, name, columns):
    """On a terminal with COLUMNS=0 the tables printed nothing (exit 0); narrow ones cut the first column, where
    v_once_auto(sram)_eager and _lazy then read alike. Now every table prints whole, its first cells uncut."""
    monkeypatch.setenv("COLUMNS", columns)
    out, err = _Tty(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(EVERY[name])
    out = out.getvalue()
    assert rc == 0 and out.strip(), (name, err.getvalue())
    firsts = _body_firsts(out)
    assert firsts or name == "gpus"  # gpus prints lines, not a table
    assert not any(f.endswith("…") for f in firsts), firsts
    if name == "report":
        assert {"v_once_auto(sram)_eager", "v_once_auto(sram)_lazy"} <= set(firsts)


# -- CSV, --plot paths, long lists -------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["report", "--seq-len", "1k"],
                                  ["predict", "--kernel", "fa2_wgmma", "--seq-len", "4k", "--head-dim", "128"]])
def test_csv_cells_hold_no_python_repr(capsys, argv):
    rc, out, _ = run(capsys, *argv, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and rows
    assert not [(k, v) for r in rows for k, v in r.items() if v.startswith(("{", "[", "("))]
    if argv[0] == "report":
        assert "gpu_model_terms_tensor" in rows[0] and "gpu_model_terms" not in rows[0]
    else:
        assert "terms_tensor" in rows[0] and "track_record_median" in rows[0]


def test_unwritable_plot_is_refused_before_any_work(capsys, monkeypatch, tmp_path):
    from gpumodel import validate as val

    def boom(*a, **k):
        raise AssertionError("computed before the --plot path was checked")

    monkeypatch.setattr(cli._Plan, "__iter__", boom)
    monkeypatch.setattr(val, "rows", boom)
    a_file = tmp_path / "f.txt"
    a_file.write_text("")
    (tmp_path / "d.png").mkdir()
    for argv, why in ((["report", "--plot", str(tmp_path / "no" / "x.png")], "no folder"),
                      (["sweep-sram", "--plot", str(a_file / "x.png")], "no folder"),
                      (["report", "--pass", "train", "--plot", str(tmp_path / "d.png")], "is a folder"),
                      (["validate", "--plot", str(tmp_path / "no" / "x.png")], "no folder")):
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert "cannot write the plot" in err and why in err, err


def test_a_long_list_of_lengths_is_refused_at_once(capsys):
    """30,000 lengths: refused by the row limit in well under a second (a quadratic de-duplication took seconds)."""
    lengths = ",".join(str(i) for i in range(1, 30_001))
    t0 = time.perf_counter()
    rc, out, err = run(capsys, "report", "--seq-len", lengths)
    assert rc == 2 and "the limit is 50,000" in err and time.perf_counter() - t0 < 1.0
    assert cli._flatten([[3, 1, 3], [2, 1]]) == [3, 1, 2]
