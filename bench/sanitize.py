"""Run every registered kernel under compute-sanitizer (memcheck, racecheck) on small shapes.

    PYTHONPATH=. python bench/sanitize.py [--out DIR] [--tools memcheck,racecheck] [--kernels fa2,...]
        [--configs '{"fa2_wgmma": [{...}, {"64": {...}, "128": {...}}]}'] [--only-configs] [--kernel-shapes N]

One child process per tool runs every kernel configuration on a few small shapes (tails, Nq != Nk,
causal with rows that see no key, d below and above 64) and prints a marker line before each one
and synchronises after it, so that each sanitizer report lands in its kernel's section. Writes
sanitize.json (error counts per tool and per kernel; 0 expected) and one log per tool to DIR
(default $OUT, else results/). Exit status 1 if any error was reported. --configs adds launcher
builds (forward(config=...)) beside each kernel's option sets; --kernel-shapes keeps the first N of a
kernel's KERNEL_SHAPES (racecheck is slow).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MARK = "@@SANITIZE kernel="
# (B, H, Nq, Nk, d, causal): tails everywhere; the first has 27 rows that see no key
# the first line of each sanitizer report (summary lines such as "0 hazards displayed" are not)
REPORT = re.compile(r"=+ (Invalid |Error: |Race reported|Program hit|Uninitialized|Barrier error)")
# An API error report: "Program hit CUDA_ERROR_NOT_FOUND (error 500) due to ... on CUDA API call to cuGetProcAddress_v2."
API_ERROR = re.compile(r"=+ Program hit (\w+).* on CUDA API call to (\w+)")
# cuda.bindings resolves every driver entry point it wraps with cuGetProcAddress at its first driver call (the
# loader's first cuLaunchKernel or cuFuncSetAttribute, kernels.tma's first cuTensorMapEncodeTiled: whichever comes
# first), asking for each at the CUDA version the bindings were built for; the entry points this driver does not
# have come back as errors (34 in the memcheck run issue 42 reports). They are lookups, not calls that ran:
# counted and printed apart, not as errors. Any other API error counts (docs/usage.md, "compute-sanitizer").
PROBE_APIS = ("cuGetProcAddress", "cuGetProcAddress_v2")
SHAPES = [(1, 2, 70, 43, 40, True), (1, 1, 97, 150, 96, False), (1, 1, 64, 64, 128, True)]
# Per kernel, after SHAPES: the pipeline at scale (issue 14 item 4): key loops that reuse every K/V ring
# slot several times (Nk = 2900 >= 8 * STAGES * Bc for every build: 17-37 key blocks over 2 slots, each slot
# refilled 8-18 times) and several Q blocks per head (Nq = 300: 3 of Br = 128), at every head dim, one
# (batch, head) first so racecheck's --kernel-shapes 4 stays short; then strided views and grouped-query K/V:
# (B, H, Nq, Nk, d, causal, H_kv, layout) with layout "bnhd" = a (B, N, H, d) tensor transposed.
KERNEL_SHAPES = {
    "fa2_wgmma": [(1, 1, 300, 2900, 64, True), (1, 1, 300, 2900, 128, False), (1, 1, 300, 2900, 256, True),
                  (1, 1, 300, 2900, 96, False),
                  (1, 2, 300, 2900, 64, False), (1, 2, 300, 2900, 128, True), (1, 2, 300, 2900, 256, False),
                  (2, 4, 300, 1100, 96, True, 2, "bnhd"), (1, 4, 300, 1100, 256, False, 1, "bnhd"),
                  (1, 4, 257, 2900, 128, True, 4, "bnhd")],
    # issue 42: the teaching forward with grouped-query K/V (contiguous: it takes no strided views), multi-query too
    "fa2": [(2, 4, 70, 43, 40, True, 2, "bhnd"), (1, 8, 97, 150, 128, False, 1, "bhnd")],
    # issue 18: every cluster size (1, 2, 4, 8 CTAs), each CTA's slice several times round the 2-slot ring
    # (K then V), several Q blocks, causal ranks with nothing to do, a GQA view
    "v_once_cluster": [(1, 2, 300, 1100, 64, True), (1, 1, 300, 1100, 128, False), (1, 1, 200, 2500, 128, True),
                       (1, 1, 300, 5000, 64, True), (1, 1, 130, 9000, 128, False),
                       (1, 4, 257, 2999, 128, True, 2, "bnhd")],
}


def shapes_for(name: str, shapes=SHAPES, kernel_shapes: int | None = None) -> list[tuple]:
    return list(shapes) + KERNEL_SHAPES.get(name, [])[:kernel_shapes]


def check_layout_shape(entry, b, h, n_q, n_k, d, dtype, causal, h_kv, layout) -> dict:
    """harness.check_one's rule on strided / grouped-query inputs: poisoned out, float64 reference on
    contiguous copies with K/V heads expanded."""
    import torch

    from bench import harness

    try:
        g = torch.Generator(device="cuda").manual_seed(n_q + n_k)

        def make(heads, n):
            shape = (b, n, heads, d) if layout == "bnhd" else (b, heads, n, d)
            t = torch.randn(*shape, generator=g, device="cuda").to(dtype)
            return t.transpose(1, 2) if layout == "bnhd" else t

        q, k, v = make(h, n_q), make(h_kv, n_k), make(h_kv, n_k)
        out = (torch.full((b, h, n_q, d), float("nan"), dtype=dtype, device="cuda"),
               torch.full((b, h, n_q), float("nan"), device="cuda"))
        o, lse = entry.forward(q, k, v, causal, out=out)
        torch.cuda.synchronize()
        rep = h // h_kv
        return harness.compare(o, lse, q.contiguous(), k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                               causal, str(dtype).replace("torch.", ""))
    except Exception as exc:
        return dict(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for path in sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"), reverse=True):
        return path
    return None


def child(names: list[str], dtypes: list[str], shapes=SHAPES, launcher_configs=None, kernel_shapes=None,
          only_configs=False) -> int:
    """Runs inside compute-sanitizer: every configuration of every kernel on SHAPES, each launch checked
    by bench.harness's rule (poisoned outputs, float64 reference)."""
    import torch

    from bench import harness
    from kernels import KERNELS

    bad = 0
    launcher_configs = launcher_configs or {}
    for name in names:
        spec = KERNELS[name]
        try:
            if not spec.available():
                print(f"@@SKIPPED {name}: not supported on this GPU", flush=True)
                continue
            configs, dtypes_ok = spec.configs(), spec.dtypes
        except Exception as exc:  # a launcher that does not load: report it, check the others
            print(f"@@FAILED {name}: {exc!r}", flush=True)
            bad += 1
            continue
        entries = [] if only_configs else [harness.Entry(spec.label(**options), spec.tier, spec, dict(options))
                                           for options in configs]
        for c in launcher_configs.get(name, ()):  # {"64": config, ...} from JSON: one build per head dim
            c = {int(k): v for k, v in c.items()} if c and all(str(k).isdigit() for k in c) else c
            entries.append(harness.Entry(spec.label() + json.dumps(c, sort_keys=True), spec.tier, spec, {}, c))
        for entry in entries:
            for dt_name in dtypes:
                dtype = getattr(torch, dt_name)
                if dtype not in dtypes_ok:
                    continue
                for b, h, n_q, n_k, d, causal, *layout in shapes_for(name, shapes, kernel_shapes):
                    if layout:
                        label = f"{entry.label} {dt_name} {(b, h, n_q, n_k, d)} causal={causal} H_kv={layout[0]} {layout[1]}"
                        print(MARK + label, flush=True)
                        rec = check_layout_shape(entry, b, h, n_q, n_k, d, dtype, causal, *layout)
                        if "error" in rec or not rec.get("ok"):
                            bad += 1
                            print(f"@@WRONG {label}: {rec}", flush=True)
                        continue
                    if not spec.supports_head_dim(d):  # nearest supported d at or above, else the largest
                        dims = sorted(spec.head_dims or [spec.max_head_dim])
                        d = next((x for x in dims if x >= d), dims[-1])
                    label = f"{entry.label} {dt_name} {(b, h, n_q, n_k, d)} causal={causal}"
                    print(MARK + label, flush=True)
                    rec = harness.check_one(entry, b, h, n_q, n_k, d, dtype, causal)
                    if "skipped" in rec:
                        print(f"@@SKIPPED {label}: {rec['skipped']}", flush=True)
                    elif "error" in rec:
                        print(f"@@FAILED {label}: {rec['error']}", flush=True)
                        bad += 1
                    elif not rec["ok"]:
                        bad += 1
                        print(f"@@WRONG {label}: rel err {rec.get('rel_err')}", flush=True)
    print("@@DONE", flush=True)
    return 1 if bad else 0


def driver_probes(log: str) -> int:
    """How many of the log's API error reports are cuda.bindings' entry-point lookups (PROBE_APIS)."""
    return sum(1 for line in log.splitlines() if (m := API_ERROR.match(line)) and m.group(2) in PROBE_APIS)


def count_errors(log: str, tool: str) -> tuple[int, dict]:
    """Total from the sanitizer's summary line less cuda.bindings' entry-point lookups (driver_probes); per kernel
    by the section each report lands in (the lookups excluded)."""
    total = None
    if m := re.search(r"ERROR SUMMARY: (\d+) error", log):
        total = int(m.group(1))
    if m := re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", log):
        total = int(m.group(1))
    per_kernel, current = {}, None
    for line in log.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):]
            per_kernel.setdefault(current, 0)
        elif current and REPORT.match(line) and not ((m := API_ERROR.match(line)) and m.group(2) in PROBE_APIS):
            per_kernel[current] += 1
    if total is not None:
        total -= driver_probes(log)
    return (total if total is not None else -1), per_kernel


def run_tool(cmd: list[str], timeout: float | None) -> tuple[str, int]:
    """(stdout + stderr, return code) of the sanitizer run; past `timeout` seconds its whole process group (the
    sanitizer and the program under it, which would otherwise keep the GPU) is killed and the output so far
    returned with code -9: the sections it reached still count (a partial run is evidence, not a pass)."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return (out or "") + f"\n@@TIMEOUT after {timeout} s\n", -9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    ap.add_argument("--tools", default="memcheck,racecheck")
    ap.add_argument("--api-errors", default="explicit", choices=("explicit", "all", "no"),
                    help="compute-sanitizer --report-api-errors (cuGetProcAddress lookups are counted apart)")
    ap.add_argument("--kernels", default="", help="comma-separated registry names (default: all)")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="the first this many of SHAPES")
    ap.add_argument("--configs", default="", help='launcher builds per kernel, JSON {"name": [config, ...]}')
    ap.add_argument("--kernel-shapes", type=int, default=None, help="the first this many of KERNEL_SHAPES")
    ap.add_argument("--only-configs", action="store_true", help="the --configs builds only, not the option sets")
    ap.add_argument("--timeout", type=float, default=None,
                    help="stop each tool after this many seconds and keep its partial log (finished: false)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    from bench import harness
    from kernels import KERNELS

    # every argument before the sanitizer starts (one line, exit 2): an unknown kernel or dtype was a KeyError or an
    # AttributeError inside it, an unknown tool a sanitizer error per tool, bad JSON a traceback
    names = harness.name_list(ap, "--kernels", args.kernels, list(KERNELS), "kernel") if args.kernels else [
        n for n, s in KERNELS.items() if not s.decode]
    dtypes = harness.name_list(ap, "--dtypes", args.dtypes, ("float32", "float16", "bfloat16"), "dtype")
    harness.name_list(ap, "--tools", args.tools, ("memcheck", "racecheck", "synccheck", "initcheck"), "tool")
    for flag, value in (("--shapes", args.shapes), ("--kernel-shapes", args.kernel_shapes)):
        if value is not None and value < 0:
            ap.error(f"{flag} must be a count, 0 or more, got {value}")
    configs = {}
    if args.configs:
        try:
            configs = json.loads(args.configs)
        except ValueError as exc:
            ap.error(f"--configs: not JSON ({exc})")
        if not (isinstance(configs, dict) and set(configs) <= set(KERNELS)
                and all(isinstance(c, list) for c in configs.values())):
            ap.error(f'--configs: give {{"name": [config, ...]}} with registered kernel names, got {args.configs!r}')
    if args.child:
        return child(names, dtypes, SHAPES[:args.shapes], configs, args.kernel_shapes, args.only_configs)

    if harness.no_gpu("sanitize"):
        return 2
    sanitizer = find_sanitizer()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    report = {"run_id": harness.run_info()["run_id"], "sanitizer": sanitizer, "kernels": names, "dtypes": dtypes,
              "shapes": SHAPES[:args.shapes], "configs": configs,
              "kernel_shapes": {n: KERNEL_SHAPES.get(n, [])[:args.kernel_shapes] for n in names},
              "tools": {}}
    if sanitizer is None:
        report["error"] = "compute-sanitizer not found"
        (out / "sanitize.json").write_text(json.dumps(report, indent=1))
        print(report["error"])
        return 1
    failed = False
    for tool in [t for t in args.tools.split(",") if t]:
        # --report-api-errors explicit (--api-errors no: none): every failed driver/runtime call is reported; the
        # entry-point lookups cuda.bindings makes on its first driver call (PROBE_APIS) are counted apart and
        # printed, every other API error counts with the device-side reports (memory errors, hazards).
        cmd = [sanitizer, "--tool", tool, "--report-api-errors", args.api_errors, "--print-limit", "50",
               "--error-exitcode", "3"]
        cmd += [sys.executable, __file__, "--child", "--kernels", ",".join(names),
                "--dtypes", ",".join(dtypes), "--shapes", str(args.shapes)]
        cmd += ["--configs", args.configs] if args.configs else []
        cmd += ["--kernel-shapes", str(args.kernel_shapes)] if args.kernel_shapes is not None else []
        cmd += ["--only-configs"] if args.only_configs else []
        t0 = time.time()
        log, returncode = run_tool(cmd, args.timeout)
        (out / f"sanitize_{tool}.log").write_text(log)
        total, per_kernel = count_errors(log, tool)
        probes = driver_probes(log)
        finished = "@@DONE" in log
        wrong = log.count("@@WRONG") + log.count("@@FAILED")
        report["tools"][tool] = {
            "errors": total, "driver_entry_point_lookups": probes, "per_kernel_reports": per_kernel,
            "returncode": returncode,
            "finished": finished, "wrong_results": wrong, "seconds": round(time.time() - t0, 1)}
        failed |= total != 0 or not finished or wrong > 0
        print(f"{tool}: {total} errors (not counting {probes} failed cuGetProcAddress lookups of cuda.bindings' "
              f"first driver call), {wrong} wrong results, finished={finished}, "
              f"rc={returncode}, {time.time() - t0:.0f} s", flush=True)
        for label, n in per_kernel.items():
            if n:
                print(f"   {n} reports in {label}")
    (out / "sanitize.json").write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
