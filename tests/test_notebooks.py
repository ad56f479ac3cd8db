"""Every teaching notebook runs top to bottom, headless, on a CPU (GPU cells show committed results),
and the executed notebooks build into the static site with every plot and table.

The source of truth is each notebook's jupytext percent-format `.py` (notebooks/NN_*.py); the paired
`.ipynb` is committed *executed*, with its outputs (GitHub shows every plot and table), written by
`python notebooks/build_site.py --write-outputs`. Here: its cells are the .py's, it records the sha256 of
the .py it was executed from (so its outputs came from the committed source), and no output is an error
or names a path on the machine that wrote it. Comparing is enough for the committed outputs: each notebook
is still executed exactly once (into a temporary folder) to prove today's code runs it, and the site test
builds from those executed copies with `mkdocs build --strict`, without executing again.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
jupytext = pytest.importorskip("jupytext")

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))
IDS = [p.stem for p in SOURCES]


def _site_module():
    spec = importlib.util.spec_from_file_location("build_site", NOTEBOOKS_DIR / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


site = _site_module()
_executed: dict[str, object] = {}  # stem -> executed notebook, shared with the site test


@pytest.fixture(scope="module")
def executed_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("executed")


def test_the_notebooks_exist():
    assert [n[:2] for n in IDS] == ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "99"], IDS
    assert sorted(p.stem for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")) == IDS, "a .py without its .ipynb"


def _without_tool_version(text: str) -> str:
    """The header line jupytext stamps with its own version (`jupytext_version: 1.19.6`) differs by install, not by
    content: a fresh install with a newer jupytext must not fail the round trip."""
    return re.sub(r"^#\s*jupytext_version:.*\n", "", text, flags=re.M)


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_ipynb_round_trips_to_its_source(source):
    """The committed .ipynb holds exactly the .py's cells; the .py is jupytext's own text."""
    text = source.read_text()
    nb_py = jupytext.reads(text, fmt="py:percent")
    assert _without_tool_version(jupytext.writes(nb_py, fmt="py:percent")) == _without_tool_version(text), (
        f"{source.name} is not in jupytext's canonical form: run jupytext --sync {source.relative_to(NOTEBOOKS_DIR.parent)}")
    ipynb = source.with_suffix(".ipynb")
    nb = nbformat.read(ipynb, as_version=4)
    nbformat.validate(nb)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in nb_py.cells], (
        f"{ipynb.name} differs from {source.name}: edit the .py, then run "
        f"python notebooks/build_site.py --write-outputs {source.stem[:2]}")


MAX_IPYNB_BYTES = 1_500_000  # PNG figures at the notebooks' own sizes: the largest is about 650 kB today


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_committed_outputs_came_from_the_committed_source(source):
    """The .ipynb was executed from this very .py (its recorded hash), every code cell ran, none failed, and the
    outputs name no path of the machine that ran them; figures are PNG and the file stays a sane size."""
    ipynb = source.with_suffix(".ipynb")
    nb = nbformat.read(ipynb, as_version=4)
    fix = f"run: python notebooks/build_site.py --write-outputs {source.stem[:2]}"
    recorded = nb.metadata.get("workbench", {}).get("source_sha256")
    assert recorded, f"{ipynb.name} records no source hash: it was not written by build_site.py ({fix})"
    assert recorded == site.source_sha256(source), f"{ipynb.name}'s outputs are stale: {source.name} changed ({fix})"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{ipynb.name}: not executed in order"
    for cell in code:
        for out in cell.outputs:
            assert out.output_type != "error", f"{ipynb.name}, cell {cell.id}: {out.get('ename')}: {out.get('evalue')}"
            assert not (out.output_type == "stream" and out.name == "stderr" and "Traceback" in out.text), (
                f"{ipynb.name}, cell {cell.id}: a traceback on stderr")
            text = json.dumps(out)
            for path in (str(NOTEBOOKS_DIR.parent), str(Path.home()) + "/", "/tmp/"):
                assert path not in text, f"{ipynb.name}, cell {cell.id}: an output names {path}"
            assert "image/svg+xml" not in out.get("data", {}), f"{ipynb.name}: figures are committed as PNG"
    assert any(c.outputs for c in code), f"{ipynb.name}: no output at all"
    assert ipynb.stat().st_size < MAX_IPYNB_BYTES, f"{ipynb.name}: {ipynb.stat().st_size} bytes"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_executes(source, executed_dir):
    nb, elapsed = site.execute(source, executed_dir)  # raises CellExecutionError with the failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    _executed[source.stem] = nb
    print(f"{source.name}: {elapsed:.1f} s")


def _count_outputs(nb, mime):
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if mime in o.get("data", {}))


def test_site_builds_with_every_plot_and_table(executed_dir, tmp_path):
    for source in SOURCES:  # when run alone (-k site): execute what the notebook tests did not
        if source.stem not in _executed:
            _executed[source.stem] = site.execute(source, executed_dir)[0]
    out = site.build_site(executed_dir, tmp_path / "site")
    assert (out / "index.html").is_file()
    index = (out / "index.html").read_text()
    for stem, nb in _executed.items():
        page = (out / f"{stem}.html").read_text()
        assert f'href="{stem}.html"' in index, f"index does not link {stem}"
        plots = _count_outputs(nb, "image/png")
        tables = sum(o["data"]["text/markdown"].count("\n|---") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if "text/markdown" in o.get("data", {}))
        assert page.count("data:image/png") >= plots, f"{stem}: {plots} plots executed, fewer on the page"
        assert len(re.findall(r"<table", page)) >= tables, f"{stem}: {tables} tables executed, fewer on the page"
        # maths offline: the bundled MathJax, never an empty src or another host (the browser tier renders it)
        assert 'src="mathjax/MathJax.js?config=' in page and '<script src=""' not in page, f"{stem}: MathJax not bundled"
        external = re.findall(r"<(?:script|img)\b[^>]*\bsrc=[\"']?(?:https?:)?//[^\"' >]+", page)
        external += [t for t in re.findall(r"<link\b[^>]*>", page) if re.search(r"href=[\"']?(?:https?:)?//", t)
                     and "canonical" not in t]
        assert not external, f"{stem}: loads from another host: {external[:3]}"
    assert (out / "mathjax" / "MathJax.js").is_file() and (out / "mathjax" / "config" / "local" / "workbench.js").is_file()


def test_every_notebook_ends_with_exercises():
    for source in SOURCES:
        nb = jupytext.read(source)
        assert nb.cells[-1].cell_type == "markdown" and "Exercises" in nb.cells[-1].source, source.name


def _exercises(source):
    nb = jupytext.read(source)
    text = nb.cells[-1].source
    return re.split(r"\n(?=\*\*\d+\.\*\* )", text.split("\n", 1)[1].strip())


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_every_exercise_ends_in_a_check_or_a_solution(source):
    items = _exercises(source)
    assert len(items) >= 3, f"{source.name}: exercises not written as '**1.** ...' paragraphs"
    for n, item in enumerate(items, 1):
        assert item.startswith(f"**{n}.** "), f"{source.name}: exercise {n} numbering"
        closed = "<details>" in item and item.rstrip().endswith("</details>")
        assert closed or "check_" in item, f"{source.name}, exercise {n}: no check call and no collapsible solution"
        if source.stem[:2] in ("01", "02", "03", "04", "05", "07"):  # issue 41 item 5: every one has a solution
            assert closed, f"{source.name}, exercise {n}: no folded solution (<details><summary>Solution</summary>)"
