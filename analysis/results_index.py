"""The index of results/: results/MANIFEST.json lists every committed result file, what it backs, and where it
came from; results/README.md is rendered from it. torch-free.

    PYTHONPATH=. python -m analysis.results_index --check      # exit 1: a file not listed, an entry with no file,
                                                               # or a results/ path in the prose that does not exist
    PYTHONPATH=. python -m analysis.results_index --readme     # rewrite results/README.md from the manifest
    PYTHONPATH=. python -m analysis.results_index --describe results/some_run/ab_wgmma_speed.json
                                                               # the run id, GPU and date a new entry would get

The manifest (one JSON object): `folders` (each top-level folder: what its runs measured), `runs` (a folder of
one measurement, or a top-level file: `what` it measured, `was` its path before issue 40 renamed the visit-named
folders, `cited_in` the prose that cites it, `notes` the session's notes), each run's `files` (`run_id`, `gpu`,
`date`, and `from`: which of the file itself, a file of the same run folder, the notes, or the commit that added
it gave them; `read_by`: code that reads the file), and `removed` (files that backed nothing, with the last commit
that had them). tests/test_results_index.py holds the three checks of --check.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
MANIFEST = RESULTS / "MANIFEST.json"
README = RESULTS / "README.md"
INDEX_FILES = ("MANIFEST.json", "README.md")  # the index itself, not results
# the prose whose results/ paths must exist (tests/test_docs.py checks the backticked repository paths of the same)
PROSE = ("README.md", "docs/*.md", "notebooks/[0-9][0-9]_*.py", "notebooks/[0-9][0-9]_*.ipynb")

RUN_ID = re.compile(r"\b\d{8}T\d{6}Z-[A-Za-z0-9_.+-]*[A-Za-z0-9_+-]")  # not a sentence's full stop
GPU_NAME = re.compile(r"NVIDIA[ _](H100|H200|GH200|B200|A100)(?:[ _](?:PCIe|SXM5?|NVL|80GB|141GB)){0,2}")


def load(path: Path = MANIFEST) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def dumps(manifest: dict) -> str:
    """The manifest as committed: one line per folder, per run's fields and per file, so a diff shows what moved."""
    def one(obj) -> str:
        return json.dumps(obj, ensure_ascii=False)
    out = ["{", f' "about": {one(manifest["about"])},', ' "folders": [']
    out += [f"  {one(f)}," for f in manifest["folders"]]
    out[-1] = out[-1].rstrip(",")
    out += [" ],", ' "runs": [']
    for i, run in enumerate(manifest["runs"]):
        head = {k: v for k, v in run.items() if k != "files"}
        out.append("  {" + one(head)[1:-1] + ', "files": [')
        out += [f"   {one(f)}," for f in run["files"]]
        out[-1] = out[-1].rstrip(",")
        out.append("  ]}" + ("," if i < len(manifest["runs"]) - 1 else ""))
    out += [" ],", ' "removed": [']
    out += [f"  {one(r)}," for r in manifest.get("removed", [])]
    out[-1] = out[-1].rstrip(",")
    out += [" ]", "}"]
    return "\n".join(out) + "\n"


def listed(manifest: dict) -> list[str]:
    """Every file the manifest lists, relative to results/."""
    out = []
    for run in manifest["runs"]:
        base = run["path"]
        for f in run["files"]:
            out.append(f"{base}/{f['name']}" if run.get("folder", True) else base)
    return out


def on_disk(results: Path = RESULTS) -> list[str]:
    return sorted(str(p.relative_to(results)) for p in results.rglob("*")
                  if p.is_file() and str(p.relative_to(results)) not in INDEX_FILES and "__pycache__" not in p.parts)


def unlisted(manifest: dict, results: Path = RESULTS) -> list[str]:
    known = set(listed(manifest))
    return [p for p in on_disk(results) if p not in known]


def missing(manifest: dict, results: Path = RESULTS) -> list[str]:
    return [p for p in listed(manifest) if not (results / p).is_file()]


def _expand(path: str) -> list[str]:
    braces = re.search(r"\{([^}]*)\}", path)
    if braces:
        return [q for alt in braces.group(1).split(",") for q in _expand(path[:braces.start()] + alt + path[braces.end():])]
    return [path]


def _exists(path: str, root: Path = ROOT) -> bool:
    if any(c in path for c in "*?["):
        return any(root.glob(path))
    return (root / path).exists()


def mentions(root: Path = ROOT):
    """(doc, line number, path) for every results/... path the prose names (README.md, docs/*.md, the notebooks):
    plain, backticked or linked (../results/...); a placeholder (results/{RUN_FILE}, results/<run>/, results/stopNN)
    is skipped, a glob or {a,b} alternatives are expanded."""
    for pattern in PROSE:
        for doc in sorted(root.glob(pattern)):
            for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
                for m in re.finditer(r"(?<![\w/])(?:\.\./)*results/([A-Za-z0-9_.*?{},/-]*)", line):
                    tail = m.group(1).rstrip(".,;:)")
                    if re.search(r"<|NN|\{[A-Za-z_]+\}", line[m.start():m.end() + 1]) or "://" in line[max(0, m.start() - 8):m.start()]:
                        continue
                    for path in _expand("results/" + tail):
                        yield str(doc.relative_to(root)), n, path.rstrip("/") or "results"


def missing_mentions(root: Path = ROOT) -> list[str]:
    return [f"{doc}:{n}: {path}" for doc, n, path in mentions(root) if not _exists(path, root)]


def describe(path: Path | str) -> dict:
    """What a result file says of itself: run_id, gpu and date, where it records them (the bench harness stamps
    `run_id` in env / run / meta / the top level; older files name the device or a start time)."""
    path = Path(path)
    out: dict = {}
    text = ""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:400_000]
    except OSError:
        return out
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for obj in (data, data.get("env"), data.get("run"), data.get("meta")):
                if not isinstance(obj, dict):
                    continue
                if isinstance(obj.get("run_id"), str):
                    out.setdefault("run_id", obj["run_id"])
                for key in ("gpu", "device"):
                    if isinstance(obj.get(key), str) and "NVIDIA" in obj[key]:
                        out.setdefault("gpu", obj[key])
                for key in ("utc", "started"):
                    if isinstance(obj.get(key), str) and re.match(r"\d{4}-?\d{2}-?\d{2}", obj[key]):
                        d = obj[key].replace("-", "")[:8]
                        out.setdefault("date", f"{d[:4]}-{d[4:6]}-{d[6:8]}")
    if "run_id" not in out:
        m = RUN_ID.search(text)
        if m:
            out["run_id"] = m.group(0)
    if "run_id" in out:
        d = out["run_id"][:8]
        out.setdefault("date", f"{d[:4]}-{d[4:6]}-{d[6:8]}")
        m = GPU_NAME.search(out["run_id"])
        if m:
            out.setdefault("gpu", m.group(0).replace("_", " "))
    if "gpu" not in out:
        m = GPU_NAME.search(text)
        if m:
            out["gpu"] = m.group(0).replace("_", " ")
    return out


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def render_readme(manifest: dict) -> str:
    """results/README.md: every folder and run, what it measured, where it is cited, its run ids, GPU and dates."""
    runs = manifest["runs"]
    lines = [
        "# results/",
        "",
        "Every committed GPU measurement of this repository, filed by what it measured. Generated from",
        "[MANIFEST.json](MANIFEST.json) by `python -m analysis.results_index --readme` (edit the manifest, not this",
        "file); `python -m analysis.results_index --check` (and `tests/test_results_index.py`) fails when a file here",
        "is not in the manifest, an entry has no file, or a `results/` path in README.md, docs/ or the notebooks does",
        "not exist.",
        "",
        manifest.get("about", ""),
        "",
        "Names: `kind_kernel_what/run/`, kind one of fwd (forward timings), bwd (backward timings), ncu (Nsight",
        "Compute profiles), probe (measurements of the GPU itself), tests (GPU test runs), sanitize",
        "(compute-sanitizer), lab (the A/B method), train; `sessions/` holds each GPU session's notes (which commit",
        "each part ran, what failed), not measurements. `was` is a run's path before the renames (the labels the",
        "notes and `lab/NOTES-tc.md` use: grid25, q24ab, ...).",
        "",
        "## Top-level files",
        "",
        "| file | what | GPU | date | run id | cited in / read by |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        if run.get("folder", True):
            continue
        f = run["files"][0]
        refs = ", ".join(run.get("cited_in", [])[:3] + f.get("read_by", [])[:2])
        lines.append(f"| [{run['path']}]({run['path']}) | {_cell(run.get('what', ''))[:300]} | {f.get('gpu', '')} | "
                     f"{f.get('date', '')} | {f.get('run_id') or '-'} | {_cell(refs)} |")
    for folder in manifest["folders"]:
        lines += ["", f"## [{folder['path']}/]({folder['path']}/)", "", _cell(folder["what"]), "",
                  "| run | was | what | files | GPU | dates | run ids |", "|---|---|---|---|---|---|---|"]
        for run in runs:
            if not run.get("folder", True) or not (run["path"] + "/").startswith(folder["path"] + "/"):
                continue
            files = run["files"]
            ids = sorted({f["run_id"] for f in files if f.get("run_id")})
            dates = sorted({f["date"] for f in files if f.get("date")})
            gpus = sorted({f["gpu"] for f in files if f.get("gpu")})
            name = run["path"][len(folder["path"]) + 1:] or "."
            what = _cell(run.get("what", ""))
            if len(what) > 300:
                what = what[:297] + "..."
            lines.append(f"| [{name}/]({run['path']}/) | {run.get('was') or '-'} | {what} | {len(files)} | "
                         f"{', '.join(gpus)} | {', '.join(dates)} | {len(ids) if len(ids) > 1 else (ids[0] if ids else '-')} |")
    if manifest.get("removed"):
        lines += ["", "## Removed (backed nothing: no reader, no link, no claim)", "",
                  "| path | files | last commit that had them | why |", "|---|---|---|---|"]
        for r in manifest["removed"]:
            lines.append(f"| {r['path']} | {len(r['files'])} | {r['last_commit']} | {_cell(r['why'])} |")
    return "\n".join(lines) + "\n"


def problems(manifest: dict | None = None, root: Path = ROOT) -> list[str]:
    manifest = load() if manifest is None else manifest
    out = [f"not in results/MANIFEST.json: results/{p}" for p in unlisted(manifest, root / "results")]
    out += [f"in the manifest, no such file: results/{p}" for p in missing(manifest, root / "results")]
    out += [f"no such path: {m}" for m in missing_mentions(root)]
    out += [f"listed twice in the manifest: {p}" for p in duplicated(manifest)]
    return out


def duplicated(manifest: dict) -> list[str]:
    """Folder or run paths the manifest lists more than once (a merge of two branches that both indexed one run)."""
    out = []
    for kind in ("folders", "runs"):
        paths = [entry["path"] for entry in manifest[kind]]
        out += [f"{kind}: {p}" for p in dict.fromkeys(p for p in paths if paths.count(p) > 1)]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.results_index", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="list what is out of index; exit 1 if anything is")
    ap.add_argument("--readme", action="store_true", help="rewrite results/README.md from the manifest")
    ap.add_argument("--describe", nargs="+", metavar="FILE", help="the run id, GPU and date a file records")
    args = ap.parse_args(argv)
    if args.describe:
        for f in args.describe:
            print(f, json.dumps(describe(f)))
        return 0
    if args.readme:
        README.write_text(render_readme(load()), encoding="utf-8")
        print(f"wrote {README.relative_to(ROOT)}")
    if args.check or not args.readme:
        found = problems()
        print("\n".join(found) if found else "results/ and its manifest agree; every results/ path in the prose exists")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
