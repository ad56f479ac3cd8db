"""Do the Hopper FA2 builds compile to the same code in two trees? A check for changes that should not change a kernel
(issue 40: the knobs only experiments used left fa2_wgmma_tma.cu and its headers). Needs no GPU.

    PYTHONPATH=. python lab/same_builds.py [--base REF] [--jobs N]

The builds compared, enumerated in each tree by that tree's own launchers:
  forward   every build kernels.fa2_wgmma.forward() can pick itself: default_config() over head dims 64/96/128/256,
            Nk = 1..20000 (every rule boundary), causal and not, contiguous and strided/GQA inputs, fp16 and bf16
  cp.async  the readable fa2_wgmma.cu builds (this tree's named cp.async builds, kernels.fa2_wgmma.named_builds,
            built in both trees)
  backward  kernels.fa2_wgmma_bwd.compile_configs() + sweep_configs() (it includes wgmma_fa2.cuh and tma_pipe.cuh),
            but for v4's main kernel
  v4        fa2_wgmma_bwd_ws.cu, the warp-specialised backward: lab/bwd_ws.py's compile_configs() (default builds and
            ALTERNATIVES) + order_configs(), and what kernels.fa2_wgmma_bwd.compile_configs() lists of it. It moved from
            lab/cuda/ to kernels/cuda/ when issue 42 made it the default; builds pair by file name, so a tree from
            before the move is compared with one after.
  cluster   kernels.v_once_cluster.compile_configs() (it includes them too)
Each side compiles with kernels.loader (NVRTC, sm_90a, the disk cache keyed by the source and its headers), from the
base tree's sources (`git archive REF`, default: the merge base with main) and this working tree's. Builds are paired by
(source file, kernel name, defines); for each pair the ELF sections are compared byte for byte, all but the line
tables (.debug_*, .nv_debug_*, and their relocations: -lineinfo records source line numbers, which a moved comment
changes). A build on one side only is reported as such. Exit status 1 unless every pair is identical and none is
missing.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE_INFO = (".debug", ".rel.debug", ".rela.debug", ".nv_debug", ".rel.nv_debug", ".rela.nv_debug")

# run in each tree (PYTHONPATH = that tree): prints the builds as JSON [(group, source path, kernel, defines, arch)]
ENUMERATE = r"""
import json, sys
from pathlib import Path
from kernels import fa2_wgmma as f, fa2_wgmma_bwd as b, v_once_cluster as vc
from lab import bwd_ws as ws
cp_async = json.loads(sys.argv[1])
out = []
def add(group, src, kernel, defs, arch):
    item = [group, str(src), kernel, defs, arch]
    if item not in out:
        out.append(item)
seen = set()
for d in f.HEAD_DIMS:
    for causal in (False, True):
        for plain in (True, False):
            for n_k in list(range(1, 20001)) + [None]:
                cfg = f.default_config(d, n_k, plain, causal)
                if repr((d, cfg)) not in seen:
                    seen.add(repr((d, cfg)))
                    for bf16 in (0, 1):
                        defs = f.defines_for(d, bf16, cfg)
                        add("forward", *f.source_of(defs), defs, f.ARCH)
for d, cfg in cp_async:
    for bf16 in (0, 1):
        defs = f.defines_for(d, bf16, cfg)
        add("cp.async", *f.source_of(defs), defs, f.ARCH)
for src, kernel, defs in ws.compile_configs() + ws.order_configs():
    if kernel == ws.KERNEL:
        add("v4", src, kernel, defs, ws.ARCH)
for src, kernel, defs in b.compile_configs() + b.sweep_configs():
    add("v4" if Path(src).name == Path(str(ws.SOURCE)).name else "backward", src, kernel, defs, b.ARCH)
for src, kernel, defs in vc.compile_configs():
    add("cluster", src, kernel, defs, vc.ARCH)
print(json.dumps(out))
"""


def base_tree(ref: str, into: Path) -> Path:
    """The ref's python packages and kernel sources, unpacked (no worktree, no checkout); lab/ for lab/bwd_ws.py."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "kernels", "counting", "variants", "lab"],
                          check=True, capture_output=True).stdout
    tar = into / "base.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    return into / "tree"


def builds(tree: Path, cp_async: list) -> list:
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", ENUMERATE, json.dumps(cp_async)], cwd=tree, env=env,
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"enumerating the builds in {tree} failed:\n{res.stderr}")
    return json.loads(res.stdout)


def sections(cubin: bytes) -> dict:
    """{name: (type, flags, bytes)} of an ELF64 little-endian file (a cubin)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = cubin[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for name_off, typ, flags, _, off, size, *_ in heads:
        name = names[name_off:names.index(b"\0", name_off)].decode()
        out[name] = (typ, flags, b"" if typ == 8 else cubin[off:off + size])  # SHT_NOBITS: no bytes in the file
    return out


def _compile(item) -> bytes:
    from kernels import loader

    src, defs, arch = item
    return loader.compile_cubin(src, defines=defs, arch=arch)


def compare(before: bytes, after: bytes) -> list[str]:
    """Names of the sections (line tables aside) that differ or exist on one side only."""
    a, b = sections(before), sections(after)
    keep = lambda names: {n for n in names if not n.startswith(LINE_INFO)}  # noqa: E731
    return sorted(n for n in keep(a) | keep(b) if a.get(n) != b.get(n))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="lab/same_builds.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=None, help="git ref of the tree before (default: git merge-base HEAD main)")
    ap.add_argument("--jobs", type=int, default=1, help="NVRTC processes (each compile is single-threaded)")
    args = ap.parse_args(argv)
    base = args.base or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                                       capture_output=True, text=True).stdout.strip()
    sys.path.insert(0, str(ROOT))
    from kernels import fa2_wgmma

    cp_async = [[d, cfg] for d in fa2_wgmma.HEAD_DIMS for cfg in fa2_wgmma.named_builds(d).values() if not cfg.get("TMA")]
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = base_tree(base, Path(tmp))
        old, new = builds(old_tree, cp_async), builds(ROOT, cp_async)
        key = lambda b: (Path(b[1]).name, b[2], json.dumps(b[3], sort_keys=True))  # noqa: E731
        old_by, new_by = {key(b): b for b in old}, {key(b): b for b in new}
        pairs = [(old_by[k], new_by[k]) for k in old_by if k in new_by]
        items = [(b[1], b[3], b[4]) for pair in pairs for b in pair]
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            cubins = list(pool.map(_compile, items))
    print(f"base {base[:12]} against the working tree {ROOT}")
    bad = 0
    groups: dict = {}
    for i, (o, n) in enumerate(pairs):
        diff = compare(cubins[2 * i], cubins[2 * i + 1])
        same_file = cubins[2 * i] == cubins[2 * i + 1]
        g = groups.setdefault(o[0], [0, 0])
        g[0] += 1
        g[1] += not diff
        if diff:
            bad += 1
            print(f"  DIFFERENT {o[0]} {Path(o[1]).name} {o[2]} {o[3]}: {', '.join(diff)}")
        elif not same_file:
            pass  # only the line tables moved
    for k in sorted(old_by.keys() - new_by.keys()):
        bad += 1
        print(f"  only before: {old_by[k][0]} {k}")
    for k in sorted(new_by.keys() - old_by.keys()):
        bad += 1
        print(f"  only after: {new_by[k][0]} {k}")
    for g, (n, same) in groups.items():
        print(f"{g:9s} {n:3d} builds compared, {same:3d} identical (every ELF section but the line tables)")
    print("same builds: yes" if not bad else f"same builds: NO ({bad} differ or are missing)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
