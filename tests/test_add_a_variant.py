"""docs/design.md "How to add a variant", run as written: its code blocks register a throwaway fifth
variant (two-pass softmax); the equivalence test, the closed-form test and the CLI pick it up with
no other edit; afterwards it is gone again."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import variants
from counting import closed_forms as cf
from analysis.cli import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "design.md"
NAME = "two_pass"


def guide_blocks() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## How to add a variant", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture
def toy():
    assert NAME not in variants.VARIANTS and NAME not in cf.CLOSED_FORMS
    namespace = {"__name__": "docs_design_toy"}
    try:
        for block in guide_blocks():
            exec(compile(block, str(GUIDE), "exec"), namespace)
        yield namespace
    finally:
        variants.VARIANTS.pop(NAME, None)
        cf.CLOSED_FORMS.pop(NAME, None)


def test_the_guide_has_the_three_pieces():
    blocks = guide_blocks()
    assert len(blocks) == 2
    assert "register(Variant(" in blocks[0] and "cf.register(cf.ClosedForm(" in blocks[1]


def test_registered_in_both_registries(toy):
    assert variants.VARIANTS[NAME].forward is toy["forward"]
    assert NAME in cf.VARIANT_NAMES and cf.CLOSED_FORMS[NAME].terms is toy["terms"]
    with pytest.raises(ValueError, match="already registered"):
        variants.register(variants.VARIANTS[NAME])


def test_equivalence_tests_pick_it_up(toy):
    from tests import test_equivalence as eq

    eq.test_matches_float64_reference(config=(NAME, {}))  # hypothesis draws the problems
    eq.test_causal_rows_that_see_no_key(NAME)
    eq.test_equal_lengths_causal_matches_torch_is_causal()  # iterates VARIANTS: includes it


def test_closed_form_test_picks_it_up(toy, monkeypatch):
    from tests import test_closed_forms as tc

    assert (NAME, {}) in tc.configs()
    tc.test_options_match_the_variant()
    # the suite's own test, run here on the new variant alone (the others are its own business)
    monkeypatch.setattr(tc, "VARIANTS", {NAME: variants.VARIANTS[NAME]})
    tc.test_closed_forms_equal_instrumented_counts()  # hypothesis: exact equality on drawn shapes


def test_closed_form_that_is_wrong_is_caught(toy):
    """The check can fail: a closed form that forgets the second read of K disagrees."""
    from tests import test_closed_forms as tc

    def one_pass_k(s, t, d):
        reads, writes, flops = toy["terms"](s, t, d)
        return dict(reads, K=s.c * d), writes, flops

    pr = dict(batch=1, heads=2, n_q=37, n_k=50, d=8, block_q=8, block_k=16, causal=True, dtype="fp16")
    got, _ = tc.instrumented(NAME, pr, {})
    assert tc.nonzero(got) == tc.closed(NAME, pr, {}).as_dict()
    cf.register(cf.ClosedForm(NAME, one_pass_k, toy["sram_bytes"]), replace=True)
    assert tc.nonzero(got) != tc.closed(NAME, pr, {}).as_dict()


def test_cli_picks_it_up(toy, capsys):
    # --blocks fa1-rule: the closed forms at one rule's blocks (the default is each variant's kernel's,
    # and the toy has no kernel)
    assert main(["report", "--variant", f"fa2,{NAME}", "--seq-len", "4k", "--format", "json",
                 "--blocks", "fa1-rule"]) == 0
    recs = json.loads(capsys.readouterr().out)
    by_name = {r["variant"]: r for r in recs}
    assert set(by_name) == {"fa2", NAME}
    # the two-pass variant reads K twice: exactly one more K than fa2 at the same blocks
    fa2, two = by_name["fa2"], by_name[NAME]
    assert (fa2["block_q"], fa2["block_k"]) == (two["block_q"], two["block_k"])
    assert two["reads"]["K"] == 2 * fa2["reads"]["K"] and two["reads"]["V"] == fa2["reads"]["V"]


def test_backward_report_without_its_backward(toy, capsys):
    """The guide's variant has no backward closed form: --pass backward leaves it out and says so; named, it
    is refused in one line (not a KeyError)."""
    assert main(["report", "--pass", "backward", "--seq-len", "1k", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert NAME not in {r["variant"] for r in json.loads(out)} and f"leaves out {NAME}" in err
    assert main(["report", "--pass", "train", "--variant", f"fa2,{NAME}", "--seq-len", "1k"]) == 2
    err = capsys.readouterr().err
    assert "no backward closed form" in err and len(err.strip().splitlines()) == 1


def test_gone_afterwards(capsys):
    assert NAME not in variants.VARIANTS and NAME not in cf.VARIANT_NAMES
    assert main(["report", "--variant", NAME]) == 2
    assert "two_pass" in capsys.readouterr().err
