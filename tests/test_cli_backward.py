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
    # the backward: v_once one row (its backward is fa2's under every forward option); train: its three configs
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


def test_table_shows_what_recomputation_buys(capsys):
    rc, out, err = run(capsys, "report", "--pass", "train", "--seq-len", "16k", "--variant",
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
