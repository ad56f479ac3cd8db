"""Execute the notebooks on CPU and build them into a static site (mkdocs + mkdocs-jupyter).

    python notebooks/build_site.py            # executes every notebook once, writes site/ (git-ignored)
    python notebooks/build_site.py --out DIR  # elsewhere

The notebooks' source of truth is the jupytext percent-format `.py` beside each `.ipynb`. Each is
executed once with nbclient (from notebooks/, as JupyterLab runs it); the executed copies go into a
staging folder and mkdocs builds the site from them *without executing again* (mkdocs-jupyter
`execute: false`), with `--strict` so any warning fails the build. tests/test_notebooks.py uses the
same two steps, so pytest executes each notebook exactly once and builds the site from those copies.

Why mkdocs + mkdocs-jupyter (docs/notebooks-site.md): it renders an executed .ipynb as it is — every
plot and Markdown table — from one small config, with no second execution engine (jupyter-book's
caching, sphinx-gallery's own script runner) and no Sphinx toolchain to install in CI.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CELL_TIMEOUT_S = 120  # a single cell; the slowest notebook takes seconds on a 2-core machine


def sources() -> list[Path]:
    """The notebooks' jupytext sources, in reading order."""
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def execute(source: Path, out_dir: Path):
    """Run one notebook top to bottom in a fresh kernel; write the executed .ipynb to out_dir.

    Returns (notebook, seconds). A cell that raises raises CellExecutionError with its traceback."""
    import jupytext
    import nbclient
    import nbformat

    nb = jupytext.read(source)
    env = {"MPLBACKEND": "agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
           # tiny problems: extra BLAS/OpenMP threads only contend on a small CI machine
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
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
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / f"{source.stem}.ipynb")
    return nb, elapsed


def _title(nb) -> str:
    first = nb.cells[0].source.splitlines()[0] if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    return first.lstrip("# ").strip() or "notebook"


def build_site(executed_dir: Path, site_dir: Path) -> Path:
    """mkdocs --strict over the executed notebooks in executed_dir (not executed again); returns site_dir."""
    import nbformat

    executed = sorted(Path(executed_dir).glob("[0-9][0-9]_*.ipynb"))
    if not executed:
        raise FileNotFoundError(f"no executed notebooks in {executed_dir}")
    with tempfile.TemporaryDirectory(prefix="fa-site-") as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        nav = ["  - Home: index.md"]
        lines = [(HERE / "site_index.md").read_text().rstrip(), ""]
        for path in executed:
            nb = nbformat.read(path, as_version=4)
            shutil.copy(path, docs / path.name)
            nav.append(f"  - '{_title(nb)}': {path.name}")
            lines.append(f"1. [{_title(nb)}]({path.name})")
        (docs / "index.md").write_text("\n".join(lines) + "\n")
        config = Path(tmp) / "mkdocs.yml"
        config.write_text("\n".join([
            "site_name: FlashAttention workbench — notebooks",
            "docs_dir: docs",
            "use_directory_urls: false",  # the site opens from the file system, no server needed
            "theme:", "  name: mkdocs",
            "markdown_extensions:", "  - tables",
            "plugins:", "  - mkdocs-jupyter:", "      execute: false", "      include_source: true",
            "nav:", *nav, ""]))
        site_dir = Path(site_dir).resolve()
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                               "-f", str(config), "-d", str(site_dir)],
                              capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}")
    return site_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "site"), help="where the site lands (default: site/)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fa-executed-") as tmp:
        for src in sources():
            _, seconds = execute(src, Path(tmp))
            print(f"executed {src.name}: {seconds:.1f} s")
        site = build_site(Path(tmp), Path(args.out))
    print(f"site: {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
