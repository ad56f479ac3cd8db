"""Where the register spills of each fa2_tc build sit: bytes of local stores per thread per masked step,
per unmasked step and per CTA (outside the key-block loop), from the SASS of the NVRTC build. Needs no GPU.

    PYTHONPATH=. python lab/spill_sites.py      # writes results/tc_spills.json

ptxas' report (results/tc_resources.json: spill_stores, local_bytes) says how many bytes of STL a
build has, not how often they run. The GPU model (analysis/spill.py) needs the dynamic count: each STL
byte a thread executes goes through L1 to the L2 (l1tex__m_l1tex2xbar_write_bytes, results/ncu_levels.csv).
So: compile the build (kernels.loader, -lineinfo), disassemble it with nvdisasm -gi (the line table names
the call site each inlined instruction comes from), and sum the widths of the STL instructions by the line
of fa2_tc_fwd they were inlined at: the `fa2_step<true>` call (FA2 Alg. 1 lines 8-10 with the causal /
Nk-tail mask), the `fa2_step<false>` call (unmasked), or anywhere else (prologue, epilogue: once per CTA).
A region may hold alternative paths (the masked step of the d = 64 build stores the same 13 frame slots
on each of two branches: 104 B of STL, 52 B run), so a region's bytes are the distinct frame bytes its STLs
write (offsets into the stack frame [R1+x]): a thread stores each spilled value once per step. Checked
against ncu (results/ncu_levels.csv): fa2_tc d = 128 writes 272,629,760 B beyond O and lse at
N = 4096, exactly 131072 steps x 128 threads x 16 B + 2048 CTAs x 128 threads x 16 B; d = 64 causal
writes 27,262,976 B, exactly 4096 masked steps x 128 threads x 52 B (and 0 B non-causal: no masked step).

nvdisasm comes from the nvidia-cuda-nvdisasm wheel (or a CUDA toolkit on PATH); it is needed only here.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "results" / "tc_resources.json"
OUT = ROOT / "results" / "tc_spills.json"
SOURCE = ROOT / "kernels" / "cuda" / "fa2_tc.cu"

_LOC = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
_STL = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?STL(\.\w+)*\s")
_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia

        for base in nvidia.__path__:
            for cand in sorted(Path(base).glob("cu*/bin/nvdisasm")):
                return str(cand)
    except ImportError:
        pass
    raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or put a CUDA toolkit's bin on PATH)")


def step_lines(source: Path = SOURCE) -> dict:
    """Line numbers of the masked and unmasked step calls in the kernel source."""
    out = {}
    for no, line in enumerate(source.read_text().splitlines(), 1):
        if "fa2_step<true>(" in line:
            out["masked"] = no
        elif "fa2_step<false>(" in line:
            out["unmasked"] = no
    if set(out) != {"masked", "unmasked"}:
        raise SystemExit(f"{source}: no fa2_step<true>/<false> call sites found")
    return out


def stl_width(text: str) -> int:
    m = re.search(r"\bSTL((?:\.\w+)*)\s", text)
    for suffix in (m.group(1).split(".") if m else []):
        if suffix in _WIDTH:
            return _WIDTH[suffix]
    return 4


def classify(sass: str, lines: dict, source_name: str = "fa2_tc.cu") -> dict:
    """Bytes of STL per thread in each region, from nvdisasm -gi text."""
    where = "cta"
    by_line = {v: k for k, v in lines.items()}
    slots = {"masked": set(), "unmasked": set(), "cta": set()}
    out = {"masked": 0, "unmasked": 0, "cta": 0, "static": 0, "stl": 0}
    outer = None
    for text in sass.splitlines():
        m = _LOC.search(text)
        if m:
            # the last location comment before an instruction is its outermost frame (the kernel's line)
            fname, line = (m.group(3), m.group(4)) if m.group(3) else (m.group(1), m.group(2))
            if fname.endswith(source_name):
                outer = int(line)
            continue
        if _STL.match(text):
            where = by_line.get(outer, "cta")
            w = stl_width(text)
            a = re.search(r"\[R1(?:\+(0x[0-9a-f]+|\d+))?\]", text)
            off = int(a.group(1), 0) if a and a.group(1) else 0
            slots[where].update(range(off, off + w))
            out["static"] += w
            out["stl"] += 1
    for k, v in slots.items():
        out[k] = len(v)
    return out


def analyse(defines: dict, tool: str, lines: dict) -> dict:
    from kernels.loader import compile_cubin, resource_usage

    cubin = compile_cubin("fa2_tc.cu", defines=defines, arch="sm_90")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([tool, "-c", "-gi", str(path)], capture_output=True, text=True, check=True).stdout
    res = resource_usage("fa2_tc.cu", "fa2_tc_fwd", defines=defines, arch="sm_90")
    sites = classify(sass, lines)
    if sites["static"] != res["spill_stores"]:
        print(f"warning: {defines}: STL bytes {sites} vs ptxas spill stores {res['spill_stores']}", file=sys.stderr)
    return dict(kernel="fa2_tc", defines=defines, local_bytes=res["local_bytes"], spill_stores=res["spill_stores"],
                spill_loads=res["spill_loads"], stl_bytes_masked_step=sites["masked"],
                stl_bytes_unmasked_step=sites["unmasked"], stl_bytes_per_cta=sites["cta"],
                stl_bytes_static=sites["static"], stl_instructions=sites["stl"])


def main() -> int:
    tool = nvdisasm()
    lines = step_lines()
    seen, rows = set(), []
    for r in json.loads(RESOURCES.read_text()):
        key = json.dumps(r["defines"], sort_keys=True)
        if r["kernel"] != "fa2_tc" or key in seen:
            continue
        seen.add(key)
        if not r["spill_stores"]:
            continue  # nothing to place: the model counts no local traffic for it
        row = analyse(r["defines"], tool, lines)
        print(f"{row['defines']}: masked {row['stl_bytes_masked_step']} B, unmasked {row['stl_bytes_unmasked_step']} B, "
              f"per CTA {row['stl_bytes_per_cta']} B (frame {row['local_bytes']} B)", file=sys.stderr)
        rows.append(row)
    meta = dict(script="lab/spill_sites.py", source="kernels/cuda/fa2_tc.cu", step_lines=lines,
                tool="nvdisasm -c -gi on the NVRTC cubin (sm_90, -lineinfo)",
                about="distinct stack-frame bytes a thread stores (STL) per masked step, per unmasked step, per CTA; "
                      "builds without spill stores are not listed (no local traffic)")
    OUT.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} builds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
