"""Execute the notebooks on CPU, commit their outputs, and build them into a static site (mkdocs-material + mkdocs-jupyter).

    python notebooks/build_site.py --write-outputs        # THE command: execute every notebook, write each executed
                                                          # .ipynb beside its .py, then build site/ from them
    python notebooks/build_site.py --write-outputs 02 07  # only those notebooks (a prefix or a stem each)
    python notebooks/build_site.py                        # build site/ from the committed .ipynb (seconds; refuses stale ones)
    python notebooks/build_site.py --out DIR              # the site elsewhere

The notebooks' source of truth is the jupytext percent-format `.py` beside each `.ipynb`. `--write-outputs` runs each
in a fresh kernel with nbclient (from notebooks/, as JupyterLab runs it; MPLBACKEND=agg, inline PNG figures) and
writes the executed notebook back deterministically: cell ids `NN-00, NN-01, ...`, no timing metadata, only the
kernel's name in the metadata, absolute paths in outputs rewritten relative, and the sha256 of the `.py` (its
`jupytext_version` header line aside) in `metadata.workbench.source_sha256`. tests/test_notebooks.py checks that hash
against the committed `.py`, the cells against the `.py`'s, and that no output is an error, so what GitHub shows
is what the `.py` computes.

The site is built from executed notebooks *without executing again* (mkdocs-jupyter `execute: false`), with
`--strict` so any warning fails the build. It works with the network off (tests/test_site_browser.py): MathJax 2.7
is bundled from the `jupyter-server-mathjax` wheel into `site/mathjax/` and every page loads it from there; the theme
loads no web font. Cells that draw a figure are tagged `fold-input` in the staged copy (the committed notebooks are
not touched) and their code folds into a <details> (site.js); output images are held to the page width (site.css).

Why mkdocs-material + mkdocs-jupyter (docs/notebooks-site.md): it renders an executed .ipynb as it is — every
plot and Markdown table — from one small config, with no second execution engine (jupyter-book's
caching, sphinx-gallery's own script runner) and no Sphinx toolchain to install in CI.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CELL_TIMEOUT_S = 120  # a single cell; the slowest notebook takes seconds on a 2-core machine
# the combined configuration the jupyter-server-mathjax wheel ships (TeX in, HTML-CSS out), then ours (MATHJAX_LOCAL,
# written into the bundled copy): the wheel carries the STIX-Web web fonts only, not MathJax's TeX fonts
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe,local/workbench"
MATHJAX_LOCAL = """MathJax.Hub.Config({
  "HTML-CSS": {webFont: "STIX-Web", imageFont: null,
               // its blank test font points at about:blank, which Chromium reports as a failed (CORS) font load
               styles: {"@font-face": {"font-family": "MathJax_Blank", src: "local('MathJax_Blank')"}}},
  // the quick preview typesets with MathJax's TeX fonts, which the wheel lacks (a 404 per \\mathcal)
  "fast-preview": {disabled: true}, menuSettings: {CHTMLpreview: false},
  messageStyle: "none"
});
MathJax.Ajax.loadComplete("[MathJax]/config/local/workbench.js");
"""
FOLD_TAG = "fold-input"
# a code cell that draws a figure: its code folds on the site (the figure stays open)
DRAWS = re.compile(r"\bplt\.|\.subplots\(|\bfig\.|\bax\.|\baxes\[")


def sources() -> list[Path]:
    """The notebooks' jupytext sources, in reading order."""
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def source_sha256(source: Path) -> str:
    """The hash an executed notebook records of its .py: the text, without the header line jupytext stamps with its
    own version (a newer jupytext rewrites it; the cells are the same)."""
    text = re.sub(r"^#\s*jupytext_version:.*\n", "", Path(source).read_text(), flags=re.M)
    return hashlib.sha256(text.encode()).hexdigest()


def _relative_paths(text: str) -> str:
    """Outputs name no machine: the checkout, the home folder and the interpreter's prefix become relative names."""
    for prefix, name in ((str(HERE), "notebooks"), (str(ROOT), "."), (sys.prefix, "<python>"),
                         (sys.base_prefix, "<python>"), (str(Path.home()), "~")):
        text = text.replace(prefix + os.sep, name + "/").replace(prefix, name)
    return text


def normalise(nb, source: Path):
    """Make an executed notebook the same bytes run after run (figures aside): ids, metadata, paths."""
    stem = source.stem
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{stem[:2]}-{i:02d}"
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
            if "text" in out:
                out["text"] = _relative_paths(out["text"])
            for mime, value in out.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, str):
                    out["data"][mime] = _relative_paths(value)
            if out.get("output_type") == "error":
                out["traceback"] = [_relative_paths(line) for line in out["traceback"]]
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb,py:percent"
    nb.metadata["workbench"] = {"source_sha256": source_sha256(source)}
    return nb


def execute(source: Path, out_dir: Path):
    """Run one notebook top to bottom in a fresh kernel; write the executed, normalised .ipynb to out_dir.

    Returns (notebook, seconds). A cell that raises raises CellExecutionError with its traceback."""
    import jupytext
    import nbclient
    import nbformat

    nb = jupytext.read(source)
    env = {"MPLBACKEND": "agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONHASHSEED": "0",
           # tiny problems: extra BLAS/OpenMP threads only contend on a small CI machine
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                                         resources={"metadata": {"path": str(HERE)}})
        start = time.perf_counter()
        client.execute()
        elapsed = time.perf_counter() - start
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    normalise(nb, source)
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / f"{source.stem}.ipynb")
    return nb, elapsed


def stale(executed_dir: Path = HERE) -> list[str]:
    """The notebooks in executed_dir whose recorded source hash is not their .py's (or that record none)."""
    import nbformat

    out = []
    for src in sources():
        path = Path(executed_dir) / f"{src.stem}.ipynb"
        recorded = nbformat.read(path, as_version=4).metadata.get("workbench", {}).get("source_sha256") \
            if path.is_file() else None
        if recorded != source_sha256(src):
            out.append(src.stem)
    return out


def _title(nb) -> str:
    first = nb.cells[0].source.splitlines()[0] if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    return first.lstrip("# ").strip() or "notebook"


def fold_plotting_code(nb):
    """Tag the code cells that draw a figure (FOLD_TAG): site.js folds their code. Returns how many."""
    n = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and DRAWS.search(cell.source):
            tags = cell.metadata.setdefault("tags", [])
            if FOLD_TAG not in tags:
                tags.append(FOLD_TAG)
            n += 1
    return n


SITE_CSS = """/* output figures never wider than the page; folded code reads as a quiet line */
.jp-OutputArea-output img, .jp-RenderedImage img, .md-typeset img { max-width: 100%; height: auto; }
/* MathJax's hidden MathML copy (assistive) asks for its TeX web fonts by mathvariant; the bundle has STIX only */
.MJX_Assistive_MathML [mathvariant], math [mathvariant] { font-family: serif !important; }
details.fa-fold { margin: 0.4em 0; }
details.fa-fold > summary { cursor: pointer; color: var(--md-default-fg-color--light, #666); font-size: 0.8em; }
"""
SITE_JS = """// fold the code of the cells tagged fold-input (they draw a figure; the figure stays open)
document.querySelectorAll('.celltag_fold-input > .jp-Cell-inputWrapper').forEach(function (input) {
  var details = document.createElement('details');
  details.className = 'fa-fold';
  var summary = document.createElement('summary');
  summary.textContent = 'plotting code';
  details.appendChild(summary);
  input.parentNode.insertBefore(details, input);
  details.appendChild(input);
});
"""


def mathjax_dir() -> Path:
    """MathJax 2.7 as the jupyter-server-mathjax wheel ships it (MathJax.js, its config, jax, fonts)."""
    try:
        import jupyter_server_mathjax
    except ImportError as e:
        raise RuntimeError("the site bundles MathJax from jupyter-server-mathjax: pip install -e '.[notebooks]'") from e
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    if not (static / "MathJax.js").is_file():
        raise RuntimeError(f"no MathJax.js in {static}")
    return static


def build_site(executed_dir: Path, site_dir: Path) -> Path:
    """mkdocs --strict over the executed notebooks in executed_dir (not executed again); returns site_dir."""
    import nbformat

    executed = sorted(Path(executed_dir).glob("[0-9][0-9]_*.ipynb"))
    if not executed:
        raise FileNotFoundError(f"no executed notebooks in {executed_dir}")
    mathjax = mathjax_dir()
    with tempfile.TemporaryDirectory(prefix="fa-site-") as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        nav = ["  - Home: index.md"]
        lines = [(HERE / "site_index.md").read_text().rstrip(), ""]
        for path in executed:
            nb = nbformat.read(path, as_version=4)
            fold_plotting_code(nb)
            nbformat.write(nb, docs / path.name)
            nav.append(f"  - '{_title(nb)}': {path.name}")
            lines.append(f"1. [{_title(nb)}]({path.name})")
        (docs / "index.md").write_text("\n".join(lines) + "\n")
        (docs / "site.css").write_text(SITE_CSS)
        (docs / "site.js").write_text(SITE_JS)
        config = Path(tmp) / "mkdocs.yml"
        config.write_text("\n".join([
            "site_name: FlashAttention workbench — notebooks",
            "docs_dir: docs",
            "use_directory_urls: false",  # every page at the top (one relative MathJax URL); serve it: Chromium refuses fonts from file://
            "theme:", "  name: material", "  font: false",  # no web font: the site reads offline
            "extra_css: [site.css]", "extra_javascript: [site.js]",
            "markdown_extensions:", "  - tables",
            "plugins:", "  - search", "  - mkdocs-jupyter:", "      execute: false", "      include_source: true",
            # every page sits at the top of the site, so one relative URL reaches the bundled MathJax
            f"      custom_mathjax_url: 'mathjax/MathJax.js?config={MATHJAX_CONFIG}'",
            "nav:", *nav, ""]))
        site_dir = Path(site_dir).resolve()
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                               "-f", str(config), "-d", str(site_dir)],
                              capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}")
    shutil.copytree(mathjax, site_dir / "mathjax", ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (site_dir / "mathjax" / "config" / "local").mkdir(parents=True, exist_ok=True)
    (site_dir / "mathjax" / "config" / "local" / "workbench.js").write_text(MATHJAX_LOCAL)
    return site_dir


def _chosen(names: list[str]) -> list[Path]:
    if not names:
        return sources()
    chosen = [s for s in sources() if any(s.stem == n or s.stem.startswith(n) or s.name == n for n in names)]
    if not chosen:
        raise SystemExit(f"no notebook matches {names}; the notebooks: {[s.stem for s in sources()]}")
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-outputs", nargs="*", metavar="NOTEBOOK", default=None,
                        help="execute the notebooks (all, or those named: 02, 02_online_softmax) and write each "
                             "executed .ipynb beside its .py, then build the site")
    parser.add_argument("--out", default=str(ROOT / "site"), help="where the site lands (default: site/)")
    args = parser.parse_args(argv)
    if args.write_outputs is not None:
        for src in _chosen(args.write_outputs):
            _, seconds = execute(src, HERE)
            size = (HERE / f"{src.stem}.ipynb").stat().st_size
            print(f"executed {src.name}: {seconds:.1f} s, wrote {src.stem}.ipynb ({size / 1024:.0f} KiB)")
    old = stale(HERE)
    if old:
        print(f"stale outputs (the .py changed since they were written): {', '.join(old)}\n"
              f"run: python notebooks/build_site.py --write-outputs {' '.join(n[:2] for n in old)}", file=sys.stderr)
        return 1
    site = build_site(HERE, Path(args.out))
    print(f"site: {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
