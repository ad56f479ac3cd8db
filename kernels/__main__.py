"""python -m kernels check [--arch sm_90] [--kernels fa2,v_once] [--json FILE]

Compiles every registered kernel configuration with NVRTC (no GPU needed; the `gpu` extra, pip install -e '.[gpu]',
installs it: without it one line says so, exit status 2) and prints, per kernel,
registers, static shared memory, stack frame and spill bytes from ptxas' report, and why ptxas serialised the
kernel's wgmma pipeline where it did (loader.SerializedWgmmaWarning). Exit status 1 if any configuration fails to
compile.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from kernels import KERNELS, loader


def check(arch: str, names=None) -> list[dict]:
    rows = []
    for spec in KERNELS.values():
        if names and spec.name not in names:
            continue
        own = spec.arch  # a kernel tied to one arch (fa2_wgmma: sm_90a) builds for that arch only
        if own and own.rstrip("a") != arch.rstrip("a"):
            rows.append(dict(spec=spec.name, tier=spec.tier, kernel="-", arch=arch, ok=True,
                             defines=f"skipped: needs {own}"))
            continue
        for source, kernel, defines in spec.compile_configs():
            row = dict(spec=spec.name, tier=spec.tier, source=source, kernel=kernel, arch=own or arch,
                       defines=" ".join(f"{k}={v}" for k, v in sorted(defines.items())))
            try:
                row.update(loader.resource_usage(source, kernel, defines=defines, arch=own or arch))
                row["ok"] = True
            except loader.ToolchainMissing:  # no NVRTC or headers: every row would fail alike; main says it once
                raise
            except Exception as exc:  # report every failure, keep going
                row.update(ok=False, error=str(exc).splitlines()[0][:200])
            rows.append(row)
    return rows


INSTALL_HINT = "install the GPU extra, pip install -e '.[gpu]' (NVRTC; no GPU needed to compile)"

COLUMNS = (("spec", "spec"), ("kernel", "kernel"), ("defines", "defines"), ("registers", "regs"),
           ("shared_static", "smem static"), ("local_bytes", "stack"), ("spill_stores", "spill st"),
           ("spill_loads", "spill ld"), ("wgmma_serialized", "wgmma serialised"))


def render(rows, arch: str) -> None:
    title = f"kernels compiled for {arch} with NVRTC {'.'.join(map(str, loader.nvrtc_version()))}"
    cells = [[str(r.get(key, "FAILED: " + r.get("error", "") if key == "registers" else ""))
              for key, _ in COLUMNS] for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for _, head in COLUMNS:
            table.add_column(head, justify="right" if head in ("regs", "smem static", "stack",
                                                               "spill st", "spill ld") else "left")
        for c in cells:
            table.add_row(*c)
        Console(width=200).print(table)
    except ImportError:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h) in enumerate(COLUMNS)]
        print(title)
        print("  ".join(h.ljust(w) for (_, h), w in zip(COLUMNS, widths)))
        for c in cells:
            print("  ".join(x.ljust(w) for x, w in zip(c, widths)))
    print("dynamic shared memory is sized per launch (see each launcher's shared_bytes)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="compile every kernel configuration and report resources")
    c.add_argument("--arch", default=loader.DEFAULT_ARCH)
    c.add_argument("--kernels", default="", help="comma-separated registry names (default: all)")
    c.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    names = {n for n in args.kernels.split(",") if n}
    unknown = names - set(KERNELS)
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; registered: {sorted(KERNELS)}")
    try:  # before compiling anything: a bad arch failed every configuration, one row each, exit 1
        loader.check_arch(args.arch)
    except ValueError as exc:
        parser.error(f"--arch: {exc}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: no folder {os.path.dirname(os.path.abspath(args.json))} to write it in")
    try:  # the toolchain first: without the GPU extra, one line saying what to install, not a traceback
        loader.nvrtc_version()
        loader.cuda_include_dirs()
        rows = check(args.arch, names)
    except loader.ToolchainMissing as exc:
        print(f"python -m kernels: error: cannot compile: {INSTALL_HINT} [{str(exc).splitlines()[0][:160]}]",
              file=sys.stderr)
        return 2
    render(rows, args.arch)
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        except OSError as exc:  # e.g. no permission, a full disk
            print(f"python -m kernels: error: cannot write --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
