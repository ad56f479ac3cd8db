"""Algorithm-line tags (analysis/lines.py): docs/lines.md is current, every tag names a real line, and
no tier that implements an algorithm lacks a line another tier cites."""
from __future__ import annotations

import pytest

from analysis import lines


def test_docs_lines_md_is_current():
    assert lines.DOC.read_text(encoding="utf-8") == lines.render(), (
        "docs/lines.md is stale: run python -m analysis.lines")


def test_every_tag_is_well_formed_and_none_dangles():
    assert lines.problems() == []


def test_algorithm_tables_match_the_papers():
    # line counts as printed in arXiv 2205.14135 (FA1) and 2307.08691 (FA2)
    counts = {key: len(text) for key, text in lines.ALGORITHMS.items()}
    assert counts == {("FA1", 0): 4, ("FA1", 1): 16, ("FA1", 2): 19, ("FA1", 3): 6, ("FA1", 4): 26,
                      ("FA2", 1): 17, ("FA2", 2): 20}
    assert set(lines.IMPLEMENTED_BY) <= set(lines.ALGORITHMS)


def _tree(tmp_path, files: dict[str, str]):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


@pytest.mark.parametrize("text, expect", [
    ("# FA2 Alg. 1 line 18: past the end", "has lines 1-17"),
    ("# FA2 Alg. 3 line 1: no such algorithm", "not in analysis/lines.py ALGORITHMS"),
    ("# Algorithm 1 line 5: another syntax", "cite as"),
    ("# line 8: bare", "cite as"),
    ("# FA2 Alg. 1 line 12-15: range needs 'lines'", "write 'line L' or 'lines L1-L2'"),
])
def test_bad_tags_are_reported(tmp_path, text, expect):
    root = _tree(tmp_path, {"variants/x.py": text + "\n"})
    _, bad = lines.scan(root)
    assert any(expect in b for b in bad), bad


def test_a_line_missing_from_an_implementing_tier_dangles(tmp_path):
    root = _tree(tmp_path, {
        "variants/fa2.py": "# FA2 Alg. 1 line 8\n# FA2 Alg. 1 line 9\n",
        "kernels/cuda/fa2.cu": "// FA2 Alg. 1 line 8\n// FA2 Alg. 1 lines 9-10\n",
        "kernels/cuda/fa2_tc.cu": "// FA2 Alg. 1 lines 8-9\n",
        "counting/closed_forms.py": "# FA2 Alg. 1 line 12\n",
    })
    cites, bad = lines.scan(root)
    assert bad == []
    out = lines.dangling(cites)
    # line 10: teaching only; line 12: closed form only
    assert sorted(out) == sorted([
        f"FA2 Alg. 1 line 10 is cited in the teaching tier (kernels/cuda/fa2.cu:2) but nowhere in the {t} tier, "
        f"which implements FA2 Alg. 1" for t in ("reference", "tensor-core")] + [
        f"FA2 Alg. 1 line 12 is cited in the closed form tier (counting/closed_forms.py:1) but nowhere in the "
        f"{t} tier, which implements FA2 Alg. 1" for t in ("reference", "teaching", "tensor-core")])
    assert lines.dangling([c for c in cites if c.lines != range(10, 11)]) != []


def test_stale_doc_fails_the_check(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "lines.md"
    doc.write_text(lines.render() + "\nedited by hand\n")
    monkeypatch.setattr(lines, "DOC", doc)
    assert lines.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
