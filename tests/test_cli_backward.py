"""fa-traffic report --pass backward|train: numbers equal the backward closed forms; the new columns."""
from __future__ import annotations

import json
import re

import pytest

from counting import backward_forms as bf
from analysis.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("pass_name", ["backward", "train"])
def test_json_equals_the_closed_forms(capsys, pass_name):
    rc, out, err = run(capsys, "report", "--pass", pass_name, "--seq-len", "1k,3000", "--seq-len-k",
                       "2k", "--causal", "--batch", "2", "--heads", "3", "--format", "json")
    assert rc == 0, err
    recs = json.loads(out)
    # the backward: v_once one row (its backward is fa2's under every forward option); train: its three configs;
    # split_kv is left out (Nq >= 1k: not a decode shape, analysis/report_common.py is_decode_ask)
    assert len(recs) == 2 * (4 if pass_name == "backward" else 6) and {r["pass"] for r in recs} == {pass_name}
    for r in recs:
        opts = {"placement": r["placement"], "rescale": r["rescale"]} if r["placement"] else {}
        tr = bf.pass_counts(pass_name, r["variant"], 2, 3, r["seq_q"], r["seq_k"], r["head_dim"],
                            causal=True, dtype="fp16", block_q=r["block_q"], block_k=r["block_k"],
                            sram_bytes=r["sram_bytes"], **opts)
        assert r["reads"] == tr.reads and r["write_bytes"] == tr.write_bytes
        assert r["flops"] == tr.flops and r["recompute_flops"] == tr.recompute_flops
        assert r["saved_bytes"] == bf.saved_bytes(r["variant"], 2, 3, r["seq_q"], r["seq_k"], "fp16")
        assert r["hbm_bytes"] > r["min_hbm_bytes"] > 0
        assert r["fits"] or r["placement"] == "sram", r["label"]  # the half-SRAM rule fits FA's backward


@pytest.mark.parametrize("pass_name", ["backward", "train"])
@pytest.mark.parametrize("gpu,dtype", [("a100", "fp32"), ("h200", "fp32"), ("h200", "fp16"), ("h100", "bf16")])
def test_tflops_never_pass_the_peak(capsys, pass_name, gpu, dtype):
    """Issue 46: naive's backward was priced at 2.5 forwards though it executes 2 (four products, no
    recomputation), so its matmul-bound rows printed above the peak (fp32 A100 24.4 against 19.5, H200 71.7
    against 66.9). Every row, printed and in JSON, now stays at or under the matmul roof."""
    from analysis.roofline import matmul_rate
    from counting.gpus import GPUS

    peak = matmul_rate(GPUS[gpu], dtype) / 1e12
    argv = ["report", "--pass", pass_name, "--gpu", gpu, "--dtype", dtype, "--seq-len", "4k,1k", "--seq-len-k", "4k",
            "--head-dim", "64,128,256", "--causal"]
    rc, out, err = run(capsys, *argv, "--format", "json")
    assert rc == 0, err
    for r in json.loads(out):
        assert r["roofline"]["predicted_tflops"] <= peak * (1 + 1e-12), r["label"]
    rc, out, err = run(capsys, *argv, "--format", "markdown")
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    # the papers' column where no row has the model's (issue 43: not both), else the model's TFLOP/s
    col = header.index("papers' TFLOP/s" if "papers' TFLOP/s" in header else "TFLOP/s")
    tflops = [float(c) for line in out.splitlines()[2:] if line.startswith("|")
              for c in [line.strip("|").split("|")[col].strip()] if c != "—"]
    assert tflops and max(tflops) <= peak * (1 + 1e-3)


@pytest.mark.parametrize("pass_name,products", [("backward", {"naive": 4, "fa1": 5, "fa2": 5, "v_once": 5, "split_kv": 5}),
                                                ("train", {"naive": 6, "fa1": 7, "fa2": 7, "v_once": 7, "split_kv": 7})])
def test_tflops_count_what_each_variant_executes(capsys, pass_name, products):
    """attention_flops = 2·d per visible pair per product the pass executes (naive's backward four, the fused
    ones five, train plus the forward's two), and the caption says so for the variants shown."""
    rc, out, err = run(capsys, "report", "--pass", pass_name, "--seq-len", "1000", "--seq-len-k", "700", "--causal",
                       "--batch", "2", "--heads", "3", "--head-dim", "96", "--format", "json", "--variant",
                       "naive,fa1,fa2,v_once,split_kv")  # split_kv's backward is fa2's (variants/split_kv.py)
    assert rc == 0, err
    from counting.headline import visible_pairs

    for r in json.loads(out):
        assert r["attention_flops"] == products[r["variant"]] * 2 * 96 * 6 * visible_pairs(1000, 700, True)
        assert r["paper_flops"] == {"backward": 2.5, "train": 3.5}[pass_name] * 4 * 6 * 1000 * 700 * 96 / 2
    rc, out, err = run(capsys, "report", "--pass", pass_name, "--seq-len", "1000")
    n = products["naive"]
    assert f"naive {n} products, {2 * n}·d; fa1, fa2, v_once {n + 1} products, {2 * n + 2}·d; naive reads P" in out
    assert "TFLOP/s = 4·d per visible" not in out


def test_table_shows_what_recomputation_buys(capsys):
    rc, out, err = run(capsys, "report", "--pass", "train", "--seq-len", "16k", "--batch", "1", "--heads", "1", "--variant",
                       "naive,fa2", "--format", "markdown")
    assert rc == 0, err
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    assert "saved" in header and "recompute" in header
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines()[2:]}
    saved, recompute = header.index("saved"), header.index("recompute")
    assert rows["naive"][saved] == "512 MiB" and rows["fa2"][saved] == "64 KiB"
    assert rows["naive"][recompute] == "0" and rows["fa2"][recompute].endswith("%)")


def test_backward_prints_v_once_once(capsys):
    """v_once's three forward configs have one backward (fa2's): one row, named by the variant alone."""
    rc, out, err = run(capsys, "report", "--pass", "backward", "--seq-len", "1k,4k", "--format", "json")
    assert rc == 0, err
    recs = json.loads(out)
    v_once = [r for r in recs if r["variant"] == "v_once"]
    assert [r["label"] for r in v_once] == ["v_once", "v_once"] and v_once[0]["placement"] is None
    fa2 = [r for r in recs if r["variant"] == "fa2"]
    assert [r["hbm_bytes"] for r in v_once] == [r["hbm_bytes"] for r in fa2]
    rc, out, err = run(capsys, "report", "--pass", "backward", "--seq-len", "1k")
    assert rc == 0 and sum(bool(re.match(r"v_once +1024 ", line)) for line in out.splitlines()) == 1, out
    assert "v_once: one row, its backward is fa2's" in out


def test_forward_is_the_default_pass(capsys):
    _, default, _ = run(capsys, "report", "--seq-len", "1k", "--format", "json")
    _, forward, _ = run(capsys, "report", "--pass", "forward", "--seq-len", "1k", "--format", "json")
    assert default == forward and "saved_bytes" not in json.loads(forward)[0]


def test_footprint_plot(capsys, tmp_path):
    path = tmp_path / "footprint.png"
    rc, _, err = run(capsys, "report", "--pass", "backward", "--seq-len", "1k,4k", "--plot", str(path))
    assert rc == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,match", [
    (("report", "--pass", "both"), "invalid choice: 'both'"),
    (("report", "--pass", "backward", "--block-q", "0"), "--block-q"),
    (("report", "--pass", "train", "--sram", "10"), "smaller than any block needs"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, match):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and match in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv,match", [
    (("report", "--pass", "backward", "--blocks", "kernel"), "--blocks applies to --pass forward"),
    (("report", "--pass", "train", "--blocks", "fa1-rule"), "--blocks applies to --pass forward"),
    (("report", "--pass", "backward", "--placement", "sram"), "do not apply to --pass backward"),
    (("report", "--pass", "backward", "--variant", "v_once", "--placement", "cluster", "--rescale", "lazy"),
     "do not apply to --pass backward"),
    (("report", "--pass", "backward", "--rescale", "eager"), "do not apply to --pass backward"),
])
def test_flags_that_change_nothing_in_the_backward_are_errors(capsys, argv, match):
    """Both passes take FA1's rule on half the SRAM whatever --blocks says, and v_once's backward is fa2's under every
    placement and rescale: those flags only renamed rows (identical output), so they are refused."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and match in err and len(err.strip().splitlines()) == 1, err


def test_placement_still_applies_to_train(capsys):
    """train adds the forward, whose traffic the placement does change."""
    got = {}
    for placement in ("sram", "hbm"):
        rc, out, err = run(capsys, "report", "--pass", "train", "--variant", "v_once", "--placement", placement,
                           "--seq-len", "4k", "--format", "json")
        assert rc == 0, err
        got[placement] = [r["hbm_bytes"] for r in json.loads(out)]
    assert got["sram"] != got["hbm"]
