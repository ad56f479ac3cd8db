"""results/ has an index: results/MANIFEST.json lists every file in results/ (and nothing that is not there), every
results/ path the prose names (README.md, docs/, the notebooks) exists, and results/README.md is the manifest's
rendering (analysis/results_index.py; `python -m analysis.results_index --check`)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis import results_index as ri

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def manifest():
    return ri.load()


def test_every_file_in_results_is_in_the_manifest(manifest):
    assert ri.unlisted(manifest) == [], "add these to results/MANIFEST.json (python -m analysis.results_index " \
                                        "--describe FILE gives run id, GPU, date), then --readme"


def test_every_manifest_entry_exists(manifest):
    assert ri.missing(manifest) == [], "no such file: fix the path in results/MANIFEST.json or list it under removed"


def test_every_results_path_in_the_prose_exists():
    assert ri.missing_mentions() == []


def test_the_results_readme_is_the_manifests_rendering(manifest):
    assert ri.README.read_text(encoding="utf-8") == ri.render_readme(manifest), \
        "regenerate: python -m analysis.results_index --readme"


def test_each_run_says_what_it_measured_and_each_file_where_it_came_from(manifest):
    folders = {f["path"] for f in manifest["folders"]}
    for run in manifest["runs"]:
        assert run.get("what"), run["path"]
        if run.get("folder", True):
            assert run["path"].split("/")[0] in folders, run["path"]
        for f in run["files"]:
            assert {"name", "run_id", "gpu", "date", "from"} <= set(f), (run["path"], f)
            assert f["date"] == "unknown" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", f["date"]), (run["path"], f)


def test_the_removed_files_are_gone_and_in_the_commit_named():
    manifest = ri.load()
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for r in manifest["removed"]:
        base = r["path"] if r["path"].endswith("/") else ""
        for name in r["files"]:
            path = f"results/{base}{name}"
            assert not (ROOT / path).exists(), path
            seen = subprocess.run(["git", "cat-file", "-e", f"{r['last_commit']}:{path}"], cwd=ROOT,
                                  capture_output=True)
            if seen.returncode != 0 and b"Not a valid object name" in seen.stderr:
                pytest.skip(f"commit {r['last_commit']} not in this clone (shallow)")
            assert seen.returncode == 0, f"{path} is not in {r['last_commit']}"


def test_docs_results_links_resolve():
    doc = ROOT / "docs" / "results.md"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8"))
    assert [link for link in links if "://" not in link and not (doc.parent / link).exists()] == []


def _tree(tmp_path, files, prose):
    for rel, text in files.items():
        (tmp_path / "results" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / rel).write_text(text)
    (tmp_path / "README.md").write_text(prose)
    return tmp_path


def test_the_checks_catch_an_unlisted_file_a_dangling_entry_and_a_missing_path(tmp_path):
    root = _tree(tmp_path, {"grid/run1/ab.txt": "x", "grid/run1/new.json": json.dumps({"run_id": "r"}),
                            "MANIFEST.json": "{}", "README.md": ""},
                 "see results/grid/run1/ab.txt and `results/grid/run2/ab.txt` and results/{RUN_FILE}\n")
    manifest = {"folders": [{"path": "grid", "what": "grids"}], "removed": [],
                "runs": [{"path": "grid/run1", "what": "a grid",
                          "files": [{"name": "ab.txt"}, {"name": "gone.txt"}]}]}
    found = ri.problems(manifest, root)
    assert found == ["not in results/MANIFEST.json: results/grid/run1/new.json",
                     "in the manifest, no such file: results/grid/run1/gone.txt",
                     "no such path: README.md:1: results/grid/run2/ab.txt"]


def test_describe_reads_the_harness_stamp(tmp_path):
    f = tmp_path / "ab_wgmma_speed.json"
    f.write_text(json.dumps({"env": {"run_id": "20261204T212645Z-stop25-grid-NVIDIA_H200", "gpu": "NVIDIA H200",
                                     "utc": "20261204T212645Z"}, "rows": []}))
    assert ri.describe(f) == {"run_id": "20261204T212645Z-stop25-grid-NVIDIA_H200", "gpu": "NVIDIA H200",
                              "date": "2026-12-04"}
    log = tmp_path / "tests.log"
    log.write_text("run 20261203T122303Z-ef19d6e-dirty-NVIDIA_H200\n3 passed\n")
    assert ri.describe(log) == {"run_id": "20261203T122303Z-ef19d6e-dirty-NVIDIA_H200", "date": "2026-12-03",
                                "gpu": "NVIDIA H200"}


def test_a_path_listed_twice_is_a_problem(manifest):
    import copy

    from analysis import results_index as ri

    assert ri.duplicated(manifest) == []
    twice = copy.deepcopy(manifest)
    twice["runs"].append(copy.deepcopy(twice["runs"][0]))
    twice["folders"].append(copy.deepcopy(twice["folders"][0]))
    assert ri.duplicated(twice) == [f"folders: {manifest['folders'][0]['path']}", f"runs: {manifest['runs'][0]['path']}"]
