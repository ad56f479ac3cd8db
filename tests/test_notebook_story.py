"""The notebooks' story holds to the GPU model and the measurements (issue 41, items 2 and 6).

Each test is a check that would catch one of the issue's defects again:
- FA2 called memory-bound without saying "by the papers' count" / "no cache" (01's table and roofline, 04's
  section 4, 07's exercise 5);
- a table's "bound" column that does not say which count or model it comes from;
- notebook 01's figure drawing kernels on the memory slope instead of at their measured speed;
- the "×" factors notebook 04 quotes against the ones its rates give (the old ~15× / 30-250× clash);
- an algorithm-line citation in a notebook that is off (07 cited FA1 Alg. 4's lines 12/18/20/4 for 13/19/21/5);
- the claims notebooks 1 and 5 make in prose about the figure and the comparison table.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis import lines as alg_lines
from analysis import story

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def _source(stem: str) -> str:
    return next(p for p in NOTEBOOKS if p.name.startswith(stem)).read_text(encoding="utf-8")


def _flat(text: str) -> str:
    """The source with comment markers dropped and lines joined: a sentence may cross a line break."""
    return " ".join(line.lstrip("# ").rstrip() for line in text.splitlines())


MEMORY_BOUND = re.compile(r"memory[- ]bound|bound by memory|bound by the memory|on the memory slope", re.I)
FA2 = re.compile(r"\bFA2\b|FlashAttention-2|\bfa2(_wgmma)?\b")
QUALIFIED = re.compile(r"papers' count|no cache|not memory-bound|not bound by memory|is not bound", re.I)
WINDOW = 300  # characters either side: about two sentences


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_fa2_memory_bound_only_by_the_papers_count(path):
    text = _flat(path.read_text(encoding="utf-8"))
    bad = []
    for m in MEMORY_BOUND.finditer(text):
        around = text[max(0, m.start() - WINDOW):m.end() + WINDOW]
        if FA2.search(around) and not QUALIFIED.search(around):
            bad.append(around)
    assert not bad, ("FA2 called memory-bound without 'papers' count' / 'no cache' nearby (the GPU model and "
                     "ncu say it is bound by tensor cores or exponentials):\n" + "\n---\n".join(bad))
    assert "H200 (memory-bound" not in text, "the H200 is not memory-bound: name the count that says so"


BOUND_HEADER = re.compile(r"\"([^\"]*\bbound\b[^\"]*)\"")


@pytest.mark.parametrize("stem", ["01", "04", "05"])
def test_bound_columns_say_which_count(stem):
    """A table column headed '... bound ...' names its source: the papers' count, the GPU model or DRAM."""
    text = _source(stem)
    for call in re.findall(r"show_table\(\[(.*?)\]", text, flags=re.S):
        for header in BOUND_HEADER.findall(call):
            assert re.search(r"papers' count|GPU model|DRAM", header), \
                f"notebook {stem}: column {header!r} does not say which count or model gives the bound"


def test_01_draws_kernels_at_their_measured_speed():
    text = _source("01")
    assert "story.points" in text and "measured_tflops" in text, "01's figure: each kernel at its measured TFLOP/s"
    # the old roofline put FA2 at min(peak, BW x I) of the papers' count: on the memory slope by construction
    assert not re.search(r"np\.minimum\(peak, bw \* np\.array", text), "01 plots kernels on the roofline, not measured"
    for word in ("papers' count", "L2", "DRAM", "exponential", "tensor"):
        assert word in text


def test_story_facts():
    """What notebooks 1 and 5 say of the figure and the table, from the model and the results."""
    for d, fa2_bound in ((64, "softmax"), (128, "tensor")):
        pts = {p.kernel: p for p in story.points(4096, d)}
        ce = story.ceilings(d)
        hopper = pts["fa2_wgmma"]
        assert hopper.bound == fa2_bound and not hopper.memory_bound
        assert abs(hopper.dram_bytes / hopper.compulsory_bytes - 1) < 0.02  # DRAM ≈ compulsory Q, K, V, O
        assert hopper.requests_bytes > 1.5 * hopper.dram_bytes  # the papers' count overstates the traffic
        naive = pts["naive"]
        assert naive.intensity("dram") < ce.ridge  # naive: memory-bound as an algorithm
        assert pts["v_once_tc"].memory_bound
        for p in pts.values():
            assert p.measured_tflops, f"{p.kernel} at N = 4096, d = {d}: no measurement in {p.measured_file}"
    # 01: at d = 128 fa2_wgmma runs faster than the HBM slope allows at its papers' count
    hopper = {p.kernel: p for p in story.points(4096, 128)}["fa2_wgmma"]
    assert hopper.measured_tflops * 1e12 > story.ceilings(128).hbm_bandwidth * hopper.intensity("requests")
    # the exponential roof halves with d and is above the tensor roof at d = 128
    assert story.ceilings(128).exp_flops == 2 * story.ceilings(64).exp_flops > story.ceilings(128).tensor_flops


def test_05_prose_matches_the_table():
    headers, rows = story.comparison_rows(4096, 128)
    col = headers.index("DRAM bytes / compulsory")
    by = {r[0]: r for r in rows}
    text = _flat(_source("05"))
    naive = float(by["naive"][col].rstrip("×"))
    assert f"{naive:.0f}× the compulsory bytes" in text
    assert f"DRAM sees {by['FA2'][col]} the compulsory bytes" in text
    bound = headers.index("bound on the H200 (GPU model)")
    assert by["Hopper FA2"][bound] == "tensor cores" and "bound by its tensor cores" in text


def test_04_factors_agree():
    from counting.gpus import get_gpu
    g = get_gpu("h200")
    tc = g.fp16_tensor_flops.value
    other, exp = tc / (g.fp32_flops.value / 2), tc / g.exp_rate.value
    text = _flat(_source("04"))
    assert "~15×" not in text, "04 quotes the tensor/FP32 peak ratio where it means a non-matmul FLOP's cost"
    quoted = re.findall(r"(\d+) \(other\) to (\d+) \(exp\)", text) + re.findall(r"costs (\d+) to (\d+) matmul", text)
    assert quoted, "04's section 4 quotes what a non-matmul FLOP costs"
    for o, e in quoted:
        assert abs(int(o) / other - 1) < 0.05 and abs(int(e) / exp - 1) < 0.05, \
            f"04 says {o} (other) to {e} (exp); the rates give {other:.0f} and {exp:.0f}"


# each algorithm-line citation in a notebook, with words its line (analysis/lines.py ALGORITHMS) must contain:
# a citation that is off by one names a line without them
CITED = {
    ("FA1", 4, 5): "dK, dV = 0", ("FA1", 4, 13): "exp(S_ij^masked - m_i)", ("FA1", 4, 19): "D_i = rowsum",
    ("FA1", 4, 21): "write dQ_i", ("FA2", 2, 4): "D = rowsum", ("FA2", 2, 11): "exp(S_ij - L_i)",
    ("FA2", 2, 15): "dQ_i ← dQ_i", ("FA2", 2, 18): "write dK_j, dV_j",
    # notebook 09: a split runs FA2's inner loop (lines 6-10) and its epilogue (12-13); the merge is lines 9-10
    ("FA2", 1, 6): "for 1 ≤ j ≤ Tc", ("FA2", 1, 7): "load K_j, V_j", ("FA2", 1, 8): "S_i^(j) = Q_i K_jᵀ",
    ("FA2", 1, 9): "m_i^(j) = max", ("FA2", 1, 10): "O_i^(j) = diag",
    ("FA2", 1, 12): "O_i = diag(ℓ_i^(Tc))⁻¹", ("FA2", 1, 13): "L_i = m_i^(Tc) + log",
}


def test_notebook_line_citations():
    seen = set()
    for path in NOTEBOOKS:
        for m in alg_lines.TAG.finditer(path.read_text(encoding="utf-8")):
            paper, alg, first = m.group(1), int(m.group(2)), int(m.group(4))
            last = int(m.group(5)) if m.group(5) else first
            lines = alg_lines.ALGORITHMS.get((paper, alg), ())
            assert 1 <= first <= last <= len(lines), f"{path.name}: '{m.group(0)}' does not exist"
            for line in range(first, last + 1):
                want = CITED.get((paper, alg, line))
                assert want is not None, (f"{path.name}: '{m.group(0)}' - add it to CITED with words of "
                                          f"line {line}: {lines[line - 1]!r}")
                assert want in lines[line - 1], \
                    f"{path.name}: '{m.group(0)}' cites {lines[line - 1]!r}, not the line with {want!r}"
                seen.add((paper, alg, line))
    # 07's table of FA1 Alg. 4 against FA2 Alg. 2 cites in tags, so this test reads it
    text = _source("07")
    table = [line for line in text.splitlines() if line.startswith("# |") and "(line " in line]
    assert not table, f"07 cites bare '(line N)' in a table: write 'FA1 Alg. 4 line N': {table}"
    assert {k for k in CITED if k[:2] in (("FA1", 4), ("FA2", 2))} <= seen
    for key, want in CITED.items():  # the expectations themselves agree with docs/lines.md's source
        assert want in alg_lines.ALGORITHMS[key[:2]][key[2] - 1]
