"""fa-traffic at the edges: exact integers, flags that do not apply, sizes with no bound, output
errors, narrow terminals, and TFLOP/s figures that respect the roof."""
from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from analysis import cli
from analysis.cli import main
from counting.gpus import GPUS
from analysis.roofline import matmul_rate

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(capsys, *argv, rc=2, match=None, within_s=5.0):
    t0 = time.perf_counter()
    got, out, err = run(capsys, *argv)
    assert time.perf_counter() - t0 < within_s, argv
    assert got == rc and out == "", (argv, got, out[:200], err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("fa-traffic: error:"), err
    if match:
        assert match in err, err
    return err


def test_integers_are_parsed_exactly(capsys):
    rc, out, err = run(capsys, "report", "--batch", "9007199254740993", "--heads", "3", "--seq-len",
                       "5", "--variant", "fa2", "--head-dim", "8", "--format", "json")
    assert rc == 0, err
    rec = json.loads(out)[0]
    assert rec["batch"] == 2 ** 53 + 1 and rec["seq_q"] == 5
    assert rec["reads"]["Q"] == (2 ** 53 + 1) * 3 * 5 * 8  # exact, through the closed forms
    assert cli.parse_bytes("9007199254740993") == 9007199254740993
    assert cli.parse_count("0.5k") == 512 and cli.parse_count("1.5k") == 1536


@pytest.mark.parametrize("argv,match", [
    (["report", "--plot", ""], "--plot needs a file name"),
    (["sweep-sram", "--sram", "64KiB"], "--sram does not apply to sweep-sram"),
    (["report", "--variant", "fa2", "--placement", "sram"], "--placement applies to v_once only"),
    (["sweep-sram", "--variant", "naive,fa1", "--rescale", "lazy"], "--rescale applies to v_once only"),
    (["sweep-sram", "--sram-min", "64KiB", "--sram-max", "64KiB", "--points", "9"], "--points 9 needs"),
])
def test_flags_that_do_not_apply_are_errors(capsys, argv, match):
    one_line_error(capsys, *argv, match=match)


@pytest.mark.parametrize("argv,match", [
    (["sweep-sram", "--points", "1000000000"], "over the limit of 1,000"),
    (["report", "--seq-len", ",".join(str(i) for i in range(1, 151)),
      "--seq-len-k", ",".join(str(i) for i in range(1, 151))], "the limit is 50,000"),
    (["report", "--seq-len", "100000000000000000000"], "over 2**63 - 1"),
    (["report", "--seq-len", "1000000000000000000"], "int64"),
    (["report", "--seq-len", "99999999999999999999999999"], "over 2**63 - 1"),
    (["report", "--variant", "naive", "--seq-len", "4294967296"], "S would have"),
    (["sweep-sram", "--seq-len", "1k,2k,3k,4k,5k,6k,7k,8k,9k", "--plot", "x.png"], "one panel per problem"),
])
def test_sizes_past_the_limits_are_clear_errors(capsys, argv, match):
    one_line_error(capsys, *argv, match=match)


@pytest.mark.parametrize("argv", [
    ["report", "--seq-len", "1024M", "--batch", "1", "--heads", "1"],  # (the default's 32 heads: naive's S past int64)
    ["report", "--seq-len", "10M", "--sram", "1KiB"],
    ["report", "--seq-len", "16M", "--seq-len-k", "3", "--causal", "--block-q", "1", "--block-k", "1"],
    ["sweep-sram", "--points", "1000", "--seq-len", "1M", "--format", "csv"],
])
def test_huge_sizes_answer_fast(capsys, argv):
    t0 = time.perf_counter()
    rc, out, err = run(capsys, *argv)
    assert rc == 0 and out, err
    assert time.perf_counter() - t0 < 10.0  # ~0.3 ms a row; the loop over blocks took minutes


def test_impossible_tflops_are_gone(capsys):
    """The issue's case: causal, Nq = 16k, Nk = 1k, d = 128 predicted 1777 TFLOP/s on a 989 one."""
    rc, out, err = run(capsys, "report", "--seq-len", "16k", "--seq-len-k", "1k", "--causal",
                       "--head-dim", "128", "--format", "json")
    assert rc == 0, err
    for rec in json.loads(out):
        peak = matmul_rate(GPUS[rec["gpu"]], rec["dtype"]) / 1e12
        assert rec["roofline"]["predicted_tflops"] <= peak, rec["label"]
        assert rec["attention_flops"] == rec["batch"] * rec["heads"] * 4 * 128 * (1024 * 1025 // 2)


@given(n_q=st.integers(1, 1 << 20), n_k=st.integers(1, 1 << 20), d=st.sampled_from([16, 64, 128, 256]),
       causal=st.booleans(), dtype=st.sampled_from(["fp16", "bf16", "fp32"]),
       gpu=st.sampled_from(sorted(GPUS)))
def test_predicted_tflops_never_beat_the_matmul_roof(n_q, n_k, d, causal, dtype, gpu):
    args = cli.build_parser().parse_args(
        ["report", "--seq-len", str(n_q), "--seq-len-k", str(n_k), "--head-dim", str(d), "--dtype", dtype,
         "--gpu", gpu] + (["--causal"] if causal else []))
    for rec in cli.iter_records(args):
        assert rec["roofline"]["predicted_tflops"] <= matmul_rate(GPUS[gpu], dtype) / 1e12 * (1 + 1e-12)


class _Failing(io.StringIO):
    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def write(self, text):
        raise self.exc

    def isatty(self):
        return False


@pytest.mark.parametrize("exc,match", [
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), "broken pipe"),
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
])
@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_output_errors_end_with_one_line(monkeypatch, capsys, exc, match, fmt):
    monkeypatch.setattr(sys, "stdout", _Failing(exc))
    rc = main(["report", "--seq-len", "1k", "--format", fmt])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1 and match in err, err


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_full_disk_in_a_real_process():
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "analysis", "report", "--format", "json"], stdout=full,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == ["fa-traffic: error: cannot write the output: No space left on device"]


def test_closed_pipe_in_a_real_process():
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte
    try:
        p = subprocess.run([sys.executable, "-m", "analysis", "report", "--format", "csv"], stdout=w,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(), timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "broken pipe" in p.stderr


@pytest.mark.parametrize("width", [40, 60, 100])
@pytest.mark.parametrize("command", ["report", "sweep-sram"])
def test_narrow_terminal_keeps_the_first_column(command, width):
    """Each table fits the terminal and every row keeps its whole first cell (the variant, or N)."""
    from rich.console import Console

    args = cli.build_parser().parse_args([command, "--seq-len", "1k,3000", "--points", "4"]
                                         if command == "sweep-sram" else [command, "--seq-len", "1k,3000"])
    recs = cli.build_records(args, sweep=command == "sweep-sram")
    if command == "report":
        header, rows = list(cli.REPORT_COLUMNS), [cli._report_row(r) for r in recs]
        groups = [[header.index(h) for h in g] for g in (("Br×Bc", "d", "HBM read", "HBM write", "× min", "SRAM"),
                                                          ("matmul", "exp", "other"),
                                                          ("t mem", "t matmul", "t non-mm", cli.PAPERS_BOUND,
                                                           cli.PAPERS_TFLOPS))]
        keep = 2
    else:
        header, rows = cli._sweep_table(recs, cli._Plan(args, True).sweep_labels())
        groups, keep = None, 4
    buf = io.StringIO()
    console = Console(file=buf, width=width)
    tables = cli._rich_tables(header, rows, width, "t", "c", groups=groups, keep=keep)
    for t in tables:
        console.print(t)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= width
    body = [line for line in out.splitlines() if line.startswith("│")]
    assert len(body) == len(rows) * len(tables)
    firsts = {row[0] for row in rows}
    for line in body:
        assert line.split("│")[1].strip() in firsts, line
    shown = set()
    for t in tables:
        shown |= {c.header for c in t.columns}
    assert shown == set(header)  # no column lost


def test_json_is_streamed_in_json_dump_format(capsys):
    args = cli.build_parser().parse_args(["report", "--seq-len", "1k,2k", "--causal"])
    recs = cli.build_records(args)
    buf = io.StringIO()
    cli.write_json(iter(recs), buf)
    assert buf.getvalue() == json.dumps(recs, indent=1) + "\n"


def test_long_jobs_show_progress_on_a_terminal(monkeypatch, capsys):
    """A progress bar on stderr when it is a terminal and the job is long; stdout is unchanged."""
    class Tty(io.StringIO):
        def isatty(self):
            return True

    rc, plain, _ = run(capsys, "report", "--seq-len", "1k,2k", "--format", "csv")
    tty = Tty()
    monkeypatch.setattr(cli._Progress, "MIN_ROWS", 1)
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["report", "--seq-len", "1k,2k", "--format", "csv"]) == 0
    assert capsys.readouterr().out == plain and "counting" in tty.getvalue()


def test_control_characters_stay_on_one_line(capsys):
    err = one_line_error(capsys, "gpus", "--batch", "x\ny\x1e")  # argparse echoes unknown arguments
    assert "x\\ny\\x1e" in err


def test_csv_leaves_absent_fields_empty(capsys):
    """A row without a field others have (no GPU model past its limit; a cell with no known gap) writes it empty:
    a 0 there would read as a modelled time of 0 s or a known gap named "0"."""
    import csv

    rc, out, err = run(capsys, "report", "--variant", "fa2", "--seq-len", "1k,100m", "--format", "csv")
    assert rc == 0, err
    modelled, past = list(csv.DictReader(io.StringIO(out)))
    assert float(modelled["gpu_model_time_s"]) > 0 and past["gpu_model_why"]
    assert past["gpu_model_time_s"] == past["gpu_model_kernel"] == ""
    buf = io.StringIO()
    cli.render_csv([{"a": 1, "b": 2}, {"a": 3}], buf)  # the writer predict and validate use
    assert buf.getvalue() == "a,b\n1,2\n3,\n"


@pytest.mark.parametrize("argv,match", [
    (["predict", "--kernel", "fa2", "--kernel", "fa2_wgmma", "--seq-len", "1k", "--head-dim", "64"], "--kernel"),
    (["predict", "--kernel", "fa2", "--seq-len", "1k", "--head-dim", "64", "--head-dim", "128"], "--head-dim"),
    (["report", "--batch", "2", "--batch", "3"], "--batch"),
    (["report", "--gpu", "h100", "--gpu", "a100"], "--gpu"),
    (["sweep-sram", "--points", "5", "--points", "9"], "--points"),
    (["predict", "--kernel", "fa2_wgmma", "--seq-len", "1k", "--head-dim", "64", "--knobs", "BLOCK_N=128,BLOCK_N=64"],
     "BLOCK_N given twice"),
])
def test_a_single_value_flag_given_twice_is_an_error(capsys, argv, match):
    """argparse keeps the last value of a repeated flag: the answer would be for one of the two values, silently."""
    err = one_line_error(capsys, *argv, match=match)
    assert "twice" in err


def test_list_flags_still_repeat(capsys):
    rc, out, err = run(capsys, "report", "--variant", "fa1", "--variant", "fa2", "--seq-len", "1k", "--seq-len", "2k",
                       "--blocks", "fa1-rule", "--format", "json")
    assert rc == 0, err
    assert [(r["variant"], r["seq_q"]) for r in json.loads(out)] == [("fa1", 1024), ("fa2", 1024), ("fa1", 2048),
                                                                   ("fa2", 2048)]


def test_predict_lists_each_length_once(capsys):
    """As report does: 1k,1k (or --seq-len 1k --seq-len 1024) is one row, not two identical ones."""
    rc, out, err = run(capsys, "predict", "--kernel", "fa2", "--seq-len", "1k,1k,2k", "--seq-len", "1024",
                       "--head-dim", "64", "--format", "json")
    assert rc == 0, err
    assert [r["seq_q"] for r in json.loads(out)] == [1024, 2048]


@given(n_q=st.integers(1, 5000), n_k=st.integers(1, 5000), d=st.integers(1, 160), block_q=st.integers(1, 128),
       block_k=st.integers(1, 300), causal=st.booleans(), pass_name=st.sampled_from(["forward", "backward", "train"]))
def test_no_variant_moves_less_than_the_minimum(n_q, n_k, d, block_q, block_k, causal, pass_name):
    """× min >= 1 for every variant and pass: the minimum reads Q (and, backward, O, dO, lse) only for the rows that
    see a key, as naive and fa1 do (it counted all of Q: × min 0.54-0.59 at causal Nq = 4k, Nk = 1)."""
    from counting import closed_forms as cf
    from counting.backward_forms import pass_counts
    from analysis.backward_report import min_bytes

    for name in cf.VARIANT_NAMES:
        for opts in ([{"placement": p, "rescale": r} for p in ("sram", "hbm") for r in ("eager", "lazy")]
                     if name == "v_once" else [{}]):
            tr = pass_counts(pass_name, name, 2, 3, n_q, n_k, d, causal=causal, block_q=block_q, block_k=block_k,
                             **opts)
            least = (cli.min_hbm_bytes(2, 3, n_q, n_k, d, 2, causal) if pass_name == "forward" else
                     min_bytes(pass_name, 2, 3, n_q, n_k, d, 2, causal))
            assert tr.hbm_bytes >= least, (name, opts, tr.hbm_bytes, least)


def test_report_causal_short_keys_stay_above_the_minimum(capsys):
    rc, out, err = run(capsys, "report", "--variant", "fa1,naive", "--seq-len", "4k", "--seq-len-k", "1", "--causal",
                       "--blocks", "fa1-rule", "--format", "json")
    assert rc == 0, err
    assert all(r["hbm_bytes"] >= r["min_hbm_bytes"] for r in json.loads(out))
    rc, out, err = run(capsys, "report", "--seq-len", "4k", "--seq-len-k", "1,100", "--causal", "--format", "json")
    assert rc == 0, err
    for r in json.loads(out):
        assert r["min_hbm_bytes"] <= r["hbm_bytes"], r["label"]
        g = r["gpu_model"]  # its bytes per the row's B·H, rounded
        assert "why" in g or r["min_hbm_bytes"] - 1 <= g["dram_bytes"] <= g["l2_bytes"], r["label"]
