"""The project documents itself: docs/design.md is the design (nothing points outside the
repository for it), relative links in the Markdown resolve, repository paths written in backticks exist, the
verdict's tables are the script's current output, and the tree passes its linter."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("*.py", "*.md", "*.cu", "*.cuh", "*.toml", "*.sh")
OUTSIDE = ("DESIGN" + ".md", "../" + "shared/")  # the design once lived outside the repository


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files", *TEXT], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.split()]


def test_nothing_points_at_a_design_file_outside_the_repository():
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in _tracked_text_files()
                 for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
                 if any(needle in line for needle in OUTSIDE)]
    assert offenders == [], f"point these at docs/design.md: {offenders}"


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md", "docs/issue-941-verdict.md", "docs/report.md"])
def test_relative_links_resolve(doc):
    path = ROOT / doc
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
    missing = [link for link in links if "://" not in link and not (path.parent / link).exists()]
    assert missing == [], f"{doc}: {missing}"


# where a path in backticks must exist: the prose a newcomer reads first
PROSE = ("README.md", "docs/*.md", "notebooks/[0-9][0-9]_*.py")
# paths the prose names on purpose although they are not in the tree
NOT_IN_THE_TREE = {
    "variants/two_pass.py",  # docs/design.md, "how to add a variant": the file the reader would create
}


def _backticked_paths(text: str):
    """(line, path) for each token inside a `...` span on one line that starts with a top-level folder of the
    repository (`kernels/fa2.py`, or the script in `python bench/verdict_table.py --cluster`). A `:12` line
    number or a `::test` id is dropped."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    for n, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`\n]+)`", line):
            for tok in span.split():
                tok = re.sub(r"(::\S*|:\d+(-\d+)?)$", "", tok.strip("()[],;:.'\""))
                if "/" in tok and tok.split("/")[0] in top:
                    yield n, tok


def _exists(path: str) -> bool:
    if path in NOT_IN_THE_TREE or re.search(r"<[^>]*>|NN", path):  # a placeholder: variants/<name>.py
        return True
    braces = re.search(r"\{([^}]*)\}", path)
    if braces:  # kernels/cuda/{naive,fa1}.cu: every alternative must exist
        return all(_exists(path[:braces.start()] + alt + path[braces.end():]) for alt in braces.group(1).split(","))
    if any(c in path for c in "*?["):  # a glob must match something
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


@pytest.mark.parametrize("doc", sorted({str(p.relative_to(ROOT)) for g in PROSE for p in ROOT.glob(g)}))
def test_backticked_repository_paths_exist(doc):
    missing = [f"{doc}:{n}: {path}" for n, path in _backticked_paths((ROOT / doc).read_text(encoding="utf-8"))
               if not _exists(path)]
    assert missing == [], "no such file (fix the path, or add it to NOT_IN_THE_TREE with why):\n" + "\n".join(missing)


@pytest.mark.parametrize("argv", [[], ["--cluster"]], ids=["tc", "cluster"])
def test_verdict_tables_are_the_scripts_output(argv):
    """docs/issue-941-verdict.md holds bench/verdict_table.py's tables and summary lines verbatim, so a refit of
    the GPU model (the cluster table's model column) or a new results file cannot leave them stale. Run in
    process: the script reads committed JSON only and takes well under a second."""
    spec = importlib.util.spec_from_file_location("verdict_table", ROOT / "bench" / "verdict_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert script.main(argv) == 0
    printed = out.getvalue().strip()
    doc = (ROOT / "docs" / "issue-941-verdict.md").read_text(encoding="utf-8")
    assert printed in doc, (f"regenerate with `python bench/verdict_table.py {' '.join(argv)}` and paste its "
                            f"output into docs/issue-941-verdict.md:\n{printed}")


def test_ruff_check_passes():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (pip install ruff); .ci/run runs it")
    out = subprocess.run([ruff, "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_gpu_model_constants_table_matches_the_fit():
    """docs/gpu-model.md's table of constants shows results/gpu_model_fit.json's values (3 significant
    digits, whole cycles from 100 up), so a refit that is not written into the doc fails here."""
    import json
    import re

    params = json.loads((ROOT / "results/gpu_model_fit.json").read_text())["params"]
    doc = (ROOT / "docs/gpu-model.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", doc, flags=re.M))
    assert set(params) <= set(rows), sorted(set(params) - set(rows))
    for name, value in params.items():
        want = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        assert rows[name].strip() == want, (name, rows[name], want)
