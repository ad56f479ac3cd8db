"""Tensor-core kernels: correctness sweep, tuning sweep, benchmark against torch SDPA, ncu/sanitizer targets.

    python -m bench.bench_tc precompile             # no GPU: NVRTC every build into $FA_KERNEL_CACHE
    python -m bench.bench_tc resources --out DIR    # no GPU: registers / smem / spills / occupancy per build
    python -m bench.bench_tc check --out DIR        # GPU: every kernel variant vs the float64 oracle
    python -m bench.bench_tc sweep --out DIR        # GPU: fa2_tc (or --sweep-kernel fa2_wgmma) block shapes, TFLOP/s
    python -m bench.bench_tc bench --out DIR        # GPU: the issue's grid vs SDPA flash and cuDNN
    python -m bench.bench_tc target --what ncu      # GPU: one launch of each kernel (for ncu / sanitizer)

Every check, timing and name goes through bench/harness.py: entries are KernelSpec labels
(v_once_tc_sram_lazy, ...) and SDPA backends (sdpa_flash, sdpa_cudnn); TFLOP/s = harness.flops / median
time of harness.time_fn (triton's do_bench where present); every timed configuration is first checked
against the float64 reference (harness.check_on), and `check` poisons outputs. Tuned configs reach the
launchers as forward(config=...) (--configs-from), never by editing a module's CONFIGS. Records carry
the run id.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


SEQS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 16384
HIDDEN = 2048


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------- entries

TC_KERNELS = ("fa2_tc", "fa2_wgmma", "v_once_tc")


def tc_entries(names: str | None, *, sdpa=("flash", "cudnn"), configs=None, per_d=None):
    """bench.harness entries of the tensor-core kernels (v_once_tc: its four BENCH_OPTIONS modes) whose
    label starts with one of the comma-separated prefixes (all when None), then SDPA's backends.
    configs: {kernel: [config, ...]} adds sweep entries; per_d: {kernel: {d: config}} runs that kernel
    with the given config per head dim (configs are passed to forward, never written into CONFIGS)."""
    from bench import harness

    out = [e for e in harness.entries(TC_KERNELS, sdpa=(), configs=configs) if e.config is not None
           or not names or e.label.startswith(tuple(n.strip() for n in names.split(",")))]
    for e in out:
        if e.spec is not None and e.config is None and e.spec.name in (per_d or {}):
            e.config = per_d[e.spec.name]
    return out + harness.entries(["sdpa"], sdpa=sdpa)


def affordable(entry, n_k: int) -> bool:
    """Spilled eager rescaling reads+writes every earlier f block: O(Tc^2) traffic; timed to 4k keys."""
    return not (entry.options.get("placement") == "hbm" and entry.options.get("rescale") == "eager"
                and n_k > 4096)


CHECK_SHAPES = [  # (b, h, n_q, n_k, d, causal, input_scale)
    (2, 3, 128, 128, 64, False, 1.0), (2, 3, 128, 128, 128, True, 1.0),
    (1, 2, 77, 203, 64, False, 1.0), (1, 2, 77, 203, 128, True, 1.0),      # tails, Nq < Nk
    (1, 2, 300, 100, 64, True, 1.0), (1, 2, 300, 100, 128, True, 1.0),     # Nq > Nk: rows that see nothing
    (1, 2, 1, 1, 64, True, 1.0), (1, 1, 1, 513, 128, False, 1.0),
    (1, 4, 1000, 1000, 128, True, 1.0), (2, 2, 640, 1536, 64, False, 1.0),
    (1, 2, 257, 255, 128, False, 10.0), (1, 2, 190, 333, 64, True, 30.0),  # scores ~1e2..1e4
    (1, 2, 2048, 2048, 128, True, 1.0), (1, 1, 129, 4100, 64, False, 3.0),
]


def cmd_check(args):
    """Every tensor-core entry on CHECK_SHAPES x (fp16, bf16), by bench.harness's rule."""
    import torch

    from bench import harness

    configs = None
    if args.all_configs:  # every tuning candidate too (fp16 only), so a sweep never times a wrong build
        configs = {name: [c for cands in sweep_candidates(name).values() for c in cands]
                   for name in ("fa2_tc", "fa2_wgmma")}
    entries = [e for e in tc_entries(args.kernels, sdpa=(), configs=configs)]
    out, failures = [], 0
    for i, (b, h, n_q, n_k, d, causal, sc) in enumerate(CHECK_SHAPES):
        for dtype in (torch.float16, torch.bfloat16):
            for e in entries:
                if e.config is not None and (dtype != torch.float16 or e.config not in sweep_candidates(e.spec.name).get(d, [])):
                    continue
                r = harness.check_one(e, b, h, n_q, n_k, d, dtype, causal, input_scale=sc, seed=i)
                if "skipped" in r:
                    continue
                r.update(kernel=e.label, b=b, h=h, n_q=n_q, n_k=n_k, d=d, run_id=harness.run_info()["run_id"])
                out.append(r)
                failures += not r["ok"]
                log(f"{'ok  ' if r['ok'] else 'FAIL'} {e.label:24s} b{b} h{h} nq{n_q} nk{n_k} d{d} "
                    f"{r.get('dtype')} causal={causal} x{sc}: rel {r.get('rel_err', float('nan')):.2e} "
                    f"lse {r.get('lse_max_err', float('nan')):.1e} empty {r.get('empty_rows')} "
                    f"{r.get('error', '')}")
    _dump(args, "tc_check.json", out)
    log(f"check: {len(out) - failures} passed, {failures} failed")
    return failures


def sweep_module(name: str):
    from kernels import fa2_tc, fa2_wgmma

    return {"fa2_tc": fa2_tc, "fa2_wgmma": fa2_wgmma}[name]


def sweep_candidates(name: str) -> dict:
    """{d: [config]} a sweep times by default: fa2_tc's SWEEP, fa2_wgmma's named builds (kernels.fa2_wgmma.named_builds;
    its issue-14 candidates are at commit 0bb604a)."""
    mod = sweep_module(name)
    if name == "fa2_wgmma":
        return {d: list(mod.named_builds(d).values()) for d in mod.HEAD_DIMS}
    return mod.SWEEP


# ------------------------------------------------------------------------------------------- timing

def shapes(seqs=SEQS, dims=(64, 128)):
    for d in dims:
        for n in seqs:
            yield TOKENS // n, HIDDEN // d, n, d


def cmd_sweep(args):
    import torch

    from bench import harness

    candidates = sweep_candidates(args.sweep_kernel)
    given = json.loads(args.sweep_configs) if args.sweep_configs else None
    rows = []
    seqs = [int(s) for s in args.seqs.split(",")]
    for b, h, n, d in shapes(seqs):
        cands = given[str(d)] if given else candidates[d]
        entries = tc_entries("", configs={args.sweep_kernel: cands})
        entries = [e for e in entries if e.config is not None or e.spec is None]
        for causal in (False, True):
            sets = harness.input_sets(b, h, n, n, d, torch.float16, max_sets=4)
            for e in entries:
                row = harness.measure(e, sets, causal, rep_ms=args.rep_ms)
                rows.append(row)
                log(f"sweep d{d} n{n} causal={causal} {e.label:90s} {row.get('tflops', float('nan')):7.1f} "
                    f"TFLOP/s err {row.get('rel_err', float('nan')):.1e} {row.get('skipped', '')}")
            del sets
            torch.cuda.empty_cache()
    _dump(args, "tc_sweep.json", rows)


def pick_configs(sweep_json, kernel="fa2_tc"):
    """Best config of `kernel` per head dim from a sweep: highest geometric mean TFLOP/s over its shapes."""
    rows = json.loads(Path(sweep_json).read_text())
    best = {}
    for d in sorted({r["d"] for r in rows}):
        score = {}
        for r in rows:
            if r["d"] == d and r["kernel"].startswith(kernel + "{") and r.get("ok") and "tflops" in r:
                score.setdefault(r["kernel"], []).append(math.log(r["tflops"]))
        if not score:
            continue
        n_shapes = max(len(v) for v in score.values())
        cands = {k: sum(v) / len(v) for k, v in score.items() if len(v) == n_shapes}
        name = max(cands, key=cands.get)
        best[d] = json.loads(name[len(kernel):])
        log(f"configs-from: d={d} picks {best[d]} (geomean {math.exp(cands[name]):.1f} TFLOP/s)")
    return best


def per_d_configs(args) -> dict:
    """{kernel: {d: config}} from --configs-from (empty without it)."""
    if not args.configs_from:
        return {}
    return {k: picked for k in ("fa2_tc", "fa2_wgmma") if (picked := pick_configs(args.configs_from, k))}


def cmd_bench(args):
    import torch

    from bench import harness
    from kernels import fa2_tc, fa2_wgmma

    per_d = per_d_configs(args)
    entries = tc_entries(args.kernels, per_d=per_d)
    rows = []
    seqs = [int(s) for s in args.seqs.split(",")]
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    t_start = time.time()
    for dname in args.dtypes.split(","):
        dtype = dtypes[dname]
        for b, h, n, d in shapes(seqs):
            for causal in (False, True):
                sets = harness.input_sets(b, h, n, n, d, dtype)
                for e in entries:
                    if not affordable(e, n) or e.skip_reason(n, n, d, causal, dtype):
                        continue
                    row = harness.measure(e, sets, causal, rep_ms=args.rep_ms)
                    rows.append(row)
                    log(f"{dname} d{d} n{n:5d} causal={int(causal)} {e.label:24s} "
                        f"{row.get('median_ms', float('nan')):8.3f} ms {row.get('tflops', float('nan')):7.1f} "
                        f"TFLOP/s err {row.get('rel_err', float('nan')):.1e} {'' if row.get('ok') else 'NOT OK'} "
                        f"{row.get('skipped', '')}")
                del sets
                torch.cuda.empty_cache()
                if time.time() - t_start > args.budget_s:
                    log(f"bench: time budget {args.budget_s}s reached; stopping")
                    break
            else:
                continue
            break
    configs = {name: {d: per_d.get(name, {}).get(d, mod.CONFIGS[d]) for d in mod.CONFIGS}
               for name, mod in (("fa2_tc", fa2_tc), ("fa2_wgmma", fa2_wgmma))}
    meta = dict(harness.environment(), device=torch.cuda.get_device_name(), fa2_tc_configs=configs["fa2_tc"],
                fa2_wgmma_configs=configs["fa2_wgmma"],
                formula=f"TFLOP/s = {harness.flops_formula()} / median time", tokens=TOKENS, hidden=HIDDEN)
    tag = f"tc_bench{args.tag}"
    _dump(args, f"{tag}.json", dict(meta=meta, rows=rows))
    write_markdown(rows, Path(args.out) / f"{tag}.md", meta)
    try:
        plot(rows, Path(args.out) / f"{tag}.png")
    except Exception:
        traceback.print_exc()


def write_markdown(rows, path, meta):
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    ours = [k for k in ("fa2_tc", "fa2_wgmma") if k in kernels]
    lines = [f"# Tensor-core kernels vs torch SDPA ({meta['device']}, torch {meta['torch']})", "",
             f"Run {meta.get('run_id')}. {meta['formula']}; batch*N = {TOKENS}, hidden = {HIDDEN} (H = {HIDDEN}/d). "
             f"Timer: {meta.get('timer')} (bench/harness.py), rotated input sets. Ratios: ours / sdpa_flash "
             "and ours / sdpa_cudnn, same run, same inputs.", ""]
    keys = sorted({(r["dtype"], r["d"], r["causal"]) for r in rows})
    ratio_heads = [f"{k} / {b}" for k in ours for b in ("flash", "cuDNN")]

    def ratio(cell, a, b):
        ra, rb = cell.get(a), cell.get(b)
        if ra and rb and ra.get("tflops") and rb.get("tflops"):
            return f"{ra['tflops'] / rb['tflops']:.2f}"
        return "—"

    for dt, d, c in keys:
        lines += [f"## {dt}, d = {d}, {'causal' if c else 'non-causal'} (TFLOP/s)", "",
                  "| N | " + " | ".join(kernels + ratio_heads) + " |",
                  "|---" * (len(kernels) + len(ratio_heads) + 1) + "|"]
        for n in sorted({r["n"] for r in rows if (r["dtype"], r["d"], r["causal"]) == (dt, d, c)}):
            cell = {r["kernel"]: r for r in rows if (r["dtype"], r["d"], r["causal"], r["n"]) == (dt, d, c, n)}
            vals = []
            for kname in kernels:
                r = cell.get(kname)
                vals.append("—" if r is None or "tflops" not in r else
                            f"{r['tflops']:.1f}" + ("" if r.get("ok") else " (FAILED CHECK)"))
            vals += [ratio(cell, k, b) for k in ours for b in ("sdpa_flash", "sdpa_cudnn")]
            lines.append(f"| {n} | " + " | ".join(vals) + " |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["dtype"], r["d"], r["causal"]) for r in rows})
    fig, axes = plt.subplots(2, max(1, -(-len(keys) // 2)), figsize=(5 * max(1, -(-len(keys) // 2)), 8),
                             squeeze=False)
    for ax, (dt, d, c) in zip(axes.T.flat, keys):
        sel = [r for r in rows if (r["dtype"], r["d"], r["causal"]) == (dt, d, c) and "tflops" in r]
        for kname in dict.fromkeys(r["kernel"] for r in sel):
            pts = sorted((r["n"], r["tflops"]) for r in sel if r["kernel"] == kname)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kname,
                    linestyle="--" if kname.startswith("sdpa") else "-")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dt} d={d} {'causal' if c else 'non-causal'}")
        ax.set_xlabel("N (batch*N = 16k)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------- static

def _compile_one(item):
    from kernels import loader

    (src, _, defs), arch = item
    loader.compile_cubin(src, defines=defs, arch=arch)


def cmd_precompile(args):
    """Every build CI compiles (all registered kernels) plus the tuning candidates, into the disk cache;
    --jobs processes (NVRTC is single-threaded; a GPU visit starts with a cold cache)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from kernels import KERNELS, fa2_tc, fa2_wgmma, loader

    t0 = time.time()
    default = loader.default_arch()  # resolved here: the workers never touch CUDA
    configs = [(c, spec.arch or default) for spec in KERNELS.values() for c in spec.compile_configs()]
    configs += [(c, default) for c in fa2_tc.sweep_configs()]
    configs += [(c, fa2_wgmma.ARCH) for c in fa2_wgmma.sweep_configs()]
    seen = []
    for item in configs:
        if item not in seen:
            seen.append(item)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_compile_one, seen))
    else:
        for item in seen:
            _compile_one(item)
    log(f"precompiled {len(seen)} builds in {time.time() - t0:.1f}s into {loader.cache_dir()}")


def cmd_resources(args):
    from kernels import fa2_tc, loader, v_once_tc

    rows = []
    for src, name, defs in fa2_tc.compile_configs() + fa2_tc.sweep_configs():
        ru = loader.resource_usage(src, name, defines=defs)
        occ = fa2_tc.occupancy(defs, ru["registers"])
        rows.append(dict(kernel="fa2_tc", defines=defs, **ru, **occ,
                         default=(src, name, defs) in fa2_tc.compile_configs()))
    from kernels import fa2_wgmma

    for src, name, defs in fa2_wgmma.sweep_configs():
        ru = loader.resource_usage(src, name, defines=defs, arch=fa2_wgmma.ARCH)
        occ = fa2_wgmma.occupancy(defs, ru["registers"])
        rows.append(dict(kernel="fa2_wgmma", defines=defs, **ru, **occ,
                         default=(src, name, defs) in fa2_wgmma.compile_configs()))
    for src, name, defs in v_once_tc.compile_configs():
        ru = loader.resource_usage(src, name, defines=defs)
        rows.append(dict(kernel="v_once_tc", defines=defs, **ru))
    for r in rows:
        log(f"{r['kernel']:9s} {json.dumps(r['defines'], sort_keys=True):150s} regs {r['registers']:3d} "
            f"spill {r['spill_stores']}/{r['spill_loads']} stack {r['local_bytes']} "
            + (f"smem {r['smem_per_cta']} CTAs/SM {r['ctas_per_sm']} warps/SM {r['warps_per_sm']}"
               if 'ctas_per_sm' in r else ""))
    _dump(args, "tc_resources.json", rows)


# ------------------------------------------------------------------------------------------- targets

def cmd_target(args):
    """A few launches on small (sanitizer) or representative (ncu) shapes; nothing timed."""
    import torch

    from bench import harness
    from kernels import v_once_tc

    per_d = per_d_configs(args)
    if args.what == "sanitize":
        entries = tc_entries(None, sdpa=(), per_d=per_d)
        shapes_ = [(1, 2, 77, 203, 64, True), (1, 2, 130, 64, 128, True), (1, 1, 200, 200, 128, False)]
        for (b, h, n_q, n_k, d, causal) in shapes_:
            for dtype in (torch.float16, torch.bfloat16):
                q, k, v = harness.random_qkv(b, h, n_q, n_k, d, dtype)
                for e in entries:
                    if not e.skip_reason(n_q, n_k, d, causal, dtype):
                        e.forward(q, k, v, causal)
        torch.cuda.synchronize()
        log("sanitize target done")
        return
    # ncu: representative shapes, one launch each (inputs made first): N=4096 (f spilled) and N=1024 (f in smem)
    extra = {"fa2_wgmma": json.loads(args.wgmma_configs)}  # other builds to profile beside the default
    for n in (int(x) for x in args.ncu_seqs.split(",")):
        d = args.d
        b, h = TOKENS // n, HIDDEN // d
        q, k, v = harness.random_qkv(b, h, n, n, d, torch.float16)
        torch.cuda.synchronize()
        mode = dict(placement="sram" if v_once_tc.plan(n, n, d)["fits_sram"] else "hbm", rescale="lazy")
        for e in tc_entries(None, configs=extra, per_d=per_d):
            if e.spec is not None and e.spec.name == "v_once_tc" and e.options != mode:
                continue
            if e.skip_reason(n, n, d, False, torch.float16):
                continue
            e.forward(q, k, v, False)
            torch.cuda.synchronize()
            log(f"target launched {e.label} n={n} d={d} b={b} h={h}")


def _dump(args, name, obj):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(obj, indent=1, default=str))


GPU_COMMANDS = ("check", "sweep", "bench", "target")


def _json_arg(ap, flag: str, text: str, kind: type, shape: str):
    try:
        value = json.loads(text)
    except ValueError as exc:
        ap.error(f"{flag}: not JSON ({exc}); give {shape}")
    if not isinstance(value, kind):
        ap.error(f"{flag}: give {shape}, got {text!r}")
    return value


def _configs_arg(ap, flag: str, kernel: str, d: int, configs) -> None:
    """Each config a launcher would refuse (defines_for: unknown knobs, values it cannot build) is refused here."""
    if not isinstance(configs, list):
        ap.error(f"{flag}: d={d}: give a list of configs, got {configs!r}")
    for cfg in configs:
        try:
            sweep_module(kernel).defines_for(d, False, cfg)
        except (TypeError, ValueError) as exc:
            ap.error(f"{flag}: {kernel} config {cfg!r} at d={d}: {exc}")


def check_args(ap, args) -> None:
    """Every argument the command uses, checked before any GPU work or compile: a bad one is ap.error (one line, exit
    2). An unknown --kernels prefix used to select nothing (`check` then passed with nothing checked); --dtypes float32
    and a --sweep-configs without a head dim were KeyErrors, bad JSON a traceback."""
    from bench import harness
    from kernels import KERNELS

    if args.cmd == "precompile":
        harness.positive_int(ap, "--jobs", args.jobs)
    if args.cmd in ("sweep", "bench"):
        harness.int_list(ap, "--seqs", args.seqs, at_most=TOKENS, why=f"batch*N = {TOKENS} tokens")
        harness.positive(ap, "--rep-ms", args.rep_ms)
    if args.cmd == "bench":
        harness.name_list(ap, "--dtypes", args.dtypes, ("float16", "bfloat16"), "dtype")
        harness.positive(ap, "--budget-s", args.budget_s)
    if args.cmd in ("check", "bench") and args.kernels is not None:
        labels = [spec.label(**o) for name in TC_KERNELS if name in KERNELS for spec in [KERNELS[name]]
                  for o in spec.bench_options] + ["sdpa"] + [f"sdpa_{b}" for b in harness.SDPA_BACKENDS]
        for prefix in (x.strip() for x in args.kernels.split(",") if x.strip()):  # tc_entries: label prefixes
            if not any(label.startswith(prefix) for label in labels):
                ap.error(f"--kernels: {prefix!r} starts no entry's label; the labels are {', '.join(labels)}")
    if args.cmd in ("bench", "target") and args.configs_from:
        rows = None
        try:
            rows = json.loads(Path(args.configs_from).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--configs-from: cannot read {args.configs_from}: {exc}")
        if not isinstance(rows, list):
            ap.error(f"--configs-from: {args.configs_from} is not a tc_sweep.json (a list of rows)")
    if args.cmd == "sweep" and args.sweep_configs:
        given = _json_arg(ap, "--sweep-configs", args.sweep_configs, dict, 'a JSON object {"64": [config, ...], '
                          '"128": [...]}')
        if set(given) != {"64", "128"}:  # shapes(): the head dims a sweep runs
            ap.error(f"--sweep-configs: the sweep runs d = 64 and 128: give a list of configs for each, got the keys "
                     f"{sorted(given)}")
        for d in (64, 128):
            _configs_arg(ap, "--sweep-configs", args.sweep_kernel, d, given[str(d)])
    if args.cmd == "target":
        harness.int_list(ap, "--ncu-seqs", args.ncu_seqs, at_most=TOKENS, why=f"batch*N = {TOKENS} tokens")
        dims = sorted({d for name in TC_KERNELS if name in KERNELS
                       for d in (KERNELS[name].head_dims or range(1, KERNELS[name].max_head_dim + 1))})
        harness.int_list(ap, "--d", str(args.d), choices=dims, why="no tensor-core kernel takes it")
        _configs_arg(ap, "--wgmma-configs", "fa2_wgmma", args.d,
                     _json_arg(ap, "--wgmma-configs", args.wgmma_configs, list, "a JSON list of fa2_wgmma configs"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["precompile", "resources", "check", "sweep", "bench", "target"])
    ap.add_argument("--out", default=os.environ.get("OUT", "results"))
    ap.add_argument("--seqs", default=",".join(map(str, SEQS)))
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="precompile: processes")
    ap.add_argument("--rep-ms", type=float, default=100.0, help="timed milliseconds per entry (harness.time_fn)")
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--tag", default="", help="suffix of the bench output files")
    ap.add_argument("--configs-from", default=None, help="tc_sweep.json: use its best fa2_tc config per d")
    ap.add_argument("--what", default="ncu", choices=["ncu", "sanitize"])
    ap.add_argument("--ncu-seqs", default="4096,1024")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--kernels", default=None, help="check/bench only these (comma-separated name prefixes)")
    ap.add_argument("--wgmma-configs", default="[]", help="target: JSON list of extra fa2_wgmma configs")
    ap.add_argument("--sweep-configs", default=None, help='sweep: JSON {"64": [config, ...], "128": [...]} '
                    "instead of the module's SWEEP")
    ap.add_argument("--all-configs", action="store_true", help="check: every sweep candidate too (fp16)")
    ap.add_argument("--sweep-kernel", default="fa2_tc", choices=["fa2_tc", "fa2_wgmma"])
    args = ap.parse_args(argv)
    check_args(ap, args)
    if args.cmd in GPU_COMMANDS:
        from bench import harness

        if harness.no_gpu(f"bench_tc {args.cmd}"):
            return 2
    rc = {"precompile": cmd_precompile, "resources": cmd_resources, "check": cmd_check, "sweep": cmd_sweep,
          "bench": cmd_bench, "target": cmd_target}[args.cmd](args)
    return int(bool(rc))


if __name__ == "__main__":
    sys.exit(main())
