"""Tensor-core kernels: correctness sweep, tuning sweep, benchmark against torch SDPA, ncu/sanitizer targets.

    python -m bench.bench_tc precompile             # no GPU: NVRTC every build into $FA_KERNEL_CACHE
    python -m bench.bench_tc resources --out DIR    # no GPU: registers / smem / spills / occupancy per build
    python -m bench.bench_tc check --out DIR        # GPU: every kernel variant vs the float64 oracle
    python -m bench.bench_tc sweep --out DIR        # GPU: fa2_tc (or --sweep-kernel fa2_wgmma) block shapes, TFLOP/s
    python -m bench.bench_tc bench --out DIR        # GPU: the issue's grid vs SDPA flash and cuDNN
    python -m bench.bench_tc target --what ncu      # GPU: one launch of each kernel (for ncu / sanitizer)

TFLOP/s = analysis.headline.attention_flops(B, H, Nq, Nk, d, causal) / median time: 4·d per visible
(query, key) pair per (batch, head) (FlashAttention's 4·Nq·Nk·d/2 causal is the papers' convention). Times are medians of
CUDA-event-timed calls over rotated input sets larger than L2 (bench.timing). Every timed configuration
is first checked against the float64 reference with poisoned outputs.
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

from analysis.headline import attention_flops, min_hbm_bytes  # noqa: E402

TOL = {"float16": 4e-3, "bfloat16": 2e-2}  # relative Frobenius error vs float64 (P is rounded to 16 bits)
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 16384
HIDDEN = 2048


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------- kernels

def kernel_fns():
    """name -> callable(q, k, v, causal) -> (o, lse or None); tensor-core variants and SDPA backends."""
    from kernels import fa2_tc, fa2_wgmma, v_once_tc

    fns = {"fa2_tc": lambda q, k, v, c: fa2_tc.forward(q, k, v, causal=c)}
    if fa2_wgmma.supported():
        fns["fa2_wgmma"] = lambda q, k, v, c: fa2_wgmma.forward(q, k, v, causal=c)
    for placement in ("sram", "hbm"):
        for rescale in ("lazy", "eager"):
            fns[f"v_once_tc[{placement},{rescale}]"] = (
                lambda q, k, v, c, p=placement, r=rescale: v_once_tc.forward(q, k, v, causal=c, placement=p,
                                                                             rescale=r))
    return fns


def sdpa_fns():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def make(backend):
        def f(q, k, v, c):
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c), None
        return f

    return {"sdpa_flash": make(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": make(SDPBackend.CUDNN_ATTENTION)}


def applies(name, n_q, n_k, d, causal):
    """Whether a kernel variant runs this shape (sram only where f fits; eager+hbm only where affordable)."""
    from kernels import v_once_tc

    if not name.startswith("v_once_tc"):
        return True
    placement, rescale = name[len("v_once_tc["):-1].split(",")
    p = v_once_tc.plan(n_q, n_k, d, causal=causal, placement="auto", rescale=rescale)
    if placement == "sram":
        return p["fits_sram"]
    if rescale == "eager":  # spilled eager rescaling reads+writes every earlier block: O(Tc^2) traffic
        return n_k <= 4096
    return True


# ------------------------------------------------------------------------------------------- checking

def check_one(fn, b, h, n_q, n_k, d, dtype, causal, *, input_scale=1.0, seed=0, has_lse=True):
    """Relative error of o (and max lse error) vs the float64 oracle on fresh random inputs, outputs
    poisoned with NaN before the call (fn must accept out=)."""
    import torch

    from variants.reference import attention_reference

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(b, h, n_q, d, generator=g, device="cuda") * input_scale).to(dtype)
    k = (torch.randn(b, h, n_k, d, generator=g, device="cuda") * input_scale).to(dtype)
    v = torch.randn(b, h, n_k, d, generator=g, device="cuda").to(dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, n_q), float("nan"), device="cuda")
    o2, lse2 = fn(q, k, v, causal, out=(o, lse))
    torch.cuda.synchronize()
    assert o2.data_ptr() == o.data_ptr()
    ro, rl = attention_reference(q, k, v, causal=causal)
    od = o.double()
    res = dict(b=b, h=h, n_q=n_q, n_k=n_k, d=d, dtype=str(dtype).replace("torch.", ""), causal=causal,
               input_scale=input_scale)
    res["o_finite"] = bool(torch.isfinite(od).all())
    res["rel_err"] = float((od - ro).norm() / ro.norm().clamp_min(1e-30)) if res["o_finite"] else float("inf")
    empty = ~torch.isfinite(rl)
    res["empty_rows"] = int(empty.sum())
    res["empty_rows_ok"] = bool((lse[empty] == float("-inf")).all() and (od[empty] == 0).all())
    fin = ~empty
    lerr = (lse.double()[fin] - rl[fin]).abs()
    res["lse_max_err"] = float(lerr.max()) if lerr.numel() else 0.0
    res["lse_ok"] = bool(torch.isfinite(lse.double()[fin]).all() and
                         (lerr <= 2e-3 + 1e-5 * rl[fin].abs()).all())
    res["ok"] = bool(res["o_finite"] and res["rel_err"] <= TOL[res["dtype"]] and res["empty_rows_ok"]
                     and res["lse_ok"])
    return res


def tc_with_out():
    """name -> fn(q, k, v, causal, out=...) for the checker."""
    from kernels import fa2_tc, fa2_wgmma, v_once_tc

    fns = {"fa2_tc": lambda q, k, v, c, out: fa2_tc.forward(q, k, v, causal=c, out=out)}
    if fa2_wgmma.supported():
        fns["fa2_wgmma"] = lambda q, k, v, c, out: fa2_wgmma.forward(q, k, v, causal=c, out=out)
    for placement in ("sram", "hbm"):
        for rescale in ("lazy", "eager"):
            fns[f"v_once_tc[{placement},{rescale}]"] = (
                lambda q, k, v, c, out, p=placement, r=rescale:
                v_once_tc.forward(q, k, v, causal=c, placement=p, rescale=r, out=out))
    return fns


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
    import torch

    from kernels import v_once_tc

    out = []
    fns = select(tc_with_out(), args.kernels)
    if args.all_configs:  # every tuning candidate too (fp16 only), so a sweep never times a wrong build
        from kernels import fa2_tc, fa2_wgmma

        for mod, name in ((fa2_tc, "fa2_tc"), (fa2_wgmma, "fa2_wgmma")):
            if name not in fns:
                continue
            for d, cands in mod.SWEEP.items():
                for c in cands:
                    fns[f"{name}{json.dumps(c, sort_keys=True)}"] = (
                        lambda q, k, v, cz, out, c=c, mod=mod: mod.forward(q, k, v, causal=cz, config=c, out=out))
    failures = 0
    for (b, h, n_q, n_k, d, causal, sc) in CHECK_SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            for name, fn in fns.items():
                if "{" in name and (dtype != torch.float16 or d not in _config_dims(name)):
                    continue
                if name.startswith("v_once_tc[sram"):
                    rescale = "lazy" if "lazy" in name else "eager"
                    if not v_once_tc.plan(n_q, n_k, d, causal=causal, rescale=rescale)["fits_sram"]:
                        continue
                try:
                    r = check_one(fn, b, h, n_q, n_k, d, dtype, causal, input_scale=sc)
                except Exception as exc:  # keep going: one broken variant must not hide the others
                    r = dict(b=b, h=h, n_q=n_q, n_k=n_k, d=d, dtype=str(dtype), causal=causal, ok=False,
                             error=f"{type(exc).__name__}: {exc}")
                    traceback.print_exc()
                r["kernel"] = name
                out.append(r)
                failures += not r["ok"]
                log(f"{'ok  ' if r['ok'] else 'FAIL'} {name:24s} b{b} h{h} nq{n_q} nk{n_k} d{d} "
                    f"{r.get('dtype')} causal={causal} x{sc}: rel {r.get('rel_err', float('nan')):.2e} "
                    f"lse {r.get('lse_max_err', float('nan')):.1e} empty {r.get('empty_rows')} "
                    f"{r.get('error', '')}")
    _dump(args, "tc_check.json", out)
    log(f"check: {len(out) - failures} passed, {failures} failed")
    return failures


def _config_dims(name: str) -> tuple:
    """Head dims whose sweep lists the config in `name` (kernel{json})."""
    kernel, cfg = name.split("{", 1)
    cfg = json.loads("{" + cfg)
    return tuple(d for d, cands in sweep_module(kernel).SWEEP.items() if cfg in cands)


def select(fns: dict, names: str | None) -> dict:
    """Keep the kernels whose name starts with one of the comma-separated prefixes (all when None)."""
    if not names:
        return fns
    prefixes = tuple(n.strip() for n in names.split(","))
    return {k: f for k, f in fns.items() if k.startswith(prefixes)}


def sweep_module(name: str):
    from kernels import fa2_tc, fa2_wgmma

    return {"fa2_tc": fa2_tc, "fa2_wgmma": fa2_wgmma}[name]


# ------------------------------------------------------------------------------------------- timing

def shapes(seqs=SEQS, dims=(64, 128)):
    for d in dims:
        for n in seqs:
            yield TOKENS // n, HIDDEN // d, n, d


def time_fn(fn, sets, causal, reps):
    from bench.timing import time_cuda

    return time_cuda(lambda q, k, v: fn(q, k, v, causal), sets, warmup=2, reps=reps)


def make_sets(b, h, n, d, dtype, max_sets=8):
    from bench.timing import make_input_sets

    _REF.clear()  # fresh inputs: the cached oracle output no longer applies
    return make_input_sets((b, h, n, d), (b, h, n, d), dtype, min_total_bytes=256 * 2**20, max_sets=max_sets)


_REF = {}


def quick_check(fn, q, k, v, causal, dtype_name):
    """One output of a timed configuration against the float64 oracle (first batch/head pair only, to
    bound the oracle's memory; the oracle is computed once per input set)."""
    import torch

    from variants.reference import attention_reference

    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), tuple(k.shape), causal)
    if key not in _REF:
        _REF.clear()
        _REF[key] = attention_reference(q[:1, :1], k[:1, :1], v[:1, :1], causal=causal)[0]
    ro = _REF[key]
    o = fn(q, k, v, causal)[0]
    torch.cuda.synchronize()
    err = float((o[:1, :1].double() - ro).norm() / ro.norm())
    return err, bool(torch.isfinite(o).all()) and err <= TOL[dtype_name]


def cmd_sweep(args):
    import torch

    mod = sweep_module(args.sweep_kernel)
    rows = []
    seqs = [int(s) for s in args.seqs.split(",")]
    for b, h, n, d in shapes(seqs):
        for causal in (False, True):
            for dtype in (torch.float16,):
                sets = make_sets(b, h, n, d, dtype, max_sets=4)
                flops = attention_flops(b, h, n, n, d, causal)
                cands = {f"{args.sweep_kernel}{json.dumps(c, sort_keys=True)}":
                         (lambda q, k, v, cz, c=c: mod.forward(q, k, v, causal=cz, config=c))
                         for c in (json.loads(args.sweep_configs)[str(d)] if args.sweep_configs else mod.SWEEP[d])}
                cands.update(sdpa_fns())
                for name, fn in cands.items():
                    row = dict(kernel=name, b=b, h=h, n=n, d=d, causal=causal, dtype="float16")
                    try:
                        err, ok = quick_check(fn, *sets[0], causal, "float16")
                        row.update(rel_err=err, ok=ok)
                        t = time_fn(fn, sets, causal, args.reps)
                        row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
                    except Exception as exc:
                        row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
                    rows.append(row)
                    log(f"sweep d{d} n{n} causal={causal} {name:90s} {row.get('tflops', float('nan')):7.1f} "
                        f"TFLOP/s err {row.get('rel_err', float('nan')):.1e} {row.get('error', '')}")
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


def time_b2b(fn, sets, causal, calls=10):
    """Milliseconds per call for `calls` back-to-back calls between two events (host work overlapped):
    a secondary number beside time_cuda's per-call median, which includes the host's launch work."""
    import torch

    for r in range(2):
        fn(*sets[r % len(sets)], causal)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for r in range(calls):
        fn(*sets[r % len(sets)], causal)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def cmd_bench(args):
    import torch

    from kernels import fa2_tc, fa2_wgmma

    if args.configs_from:
        fa2_tc.CONFIGS.update(pick_configs(args.configs_from))
        fa2_wgmma.CONFIGS.update(pick_configs(args.configs_from, "fa2_wgmma"))
    rows = []
    seqs = [int(s) for s in args.seqs.split(",")]
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    fns = select(dict(kernel_fns()), args.kernels)
    fns.update(sdpa_fns())
    t_start = time.time()
    for dname in args.dtypes.split(","):
        dtype = dtypes[dname]
        for b, h, n, d in shapes(seqs):
            for causal in (False, True):
                sets = make_sets(b, h, n, d, dtype)
                flops = attention_flops(b, h, n, n, d, causal)
                for name, fn in fns.items():
                    if not applies(name, n, n, d, causal):
                        continue
                    row = dict(kernel=name, b=b, h=h, n=n, d=d, causal=causal, dtype=dname, flops=flops,
                               min_hbm_bytes=min_hbm_bytes(b, h, n, n, d, 2))
                    try:
                        err, ok = quick_check(fn, *sets[0], causal, dname)
                        row.update(rel_err=err, ok=ok)
                        reps = args.reps if not ("eager" in name and "hbm" in name) else 3
                        t = time_fn(fn, sets, causal, reps)
                        row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
                        if not ("eager" in name and "hbm" in name):
                            row["b2b_ms"] = time_b2b(fn, sets, causal)
                            row["b2b_tflops"] = flops / (row["b2b_ms"] * 1e-3) / 1e12
                    except Exception as exc:
                        row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
                    rows.append(row)
                    log(f"{dname} d{d} n{n:5d} causal={int(causal)} {name:24s} "
                        f"{row.get('median_ms', float('nan')):8.3f} ms {row.get('tflops', float('nan')):7.1f} "
                        f"TFLOP/s (b2b {row.get('b2b_tflops', float('nan')):6.1f}) "
                        f"err {row.get('rel_err', float('nan')):.1e} {'' if row.get('ok') else 'NOT OK'} "
                        f"{row.get('error', '')}")
                del sets
                torch.cuda.empty_cache()
                if time.time() - t_start > args.budget_s:
                    log(f"bench: time budget {args.budget_s}s reached; stopping")
                    break
            else:
                continue
            break
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, fa2_tc_configs=fa2_tc.CONFIGS,
                fa2_wgmma_configs=fa2_wgmma.CONFIGS,
                formula="TFLOP/s = attention_flops (4*d*B*H*visible pairs) / median time", tokens=TOKENS, hidden=HIDDEN)
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
             f"{meta['formula']}; batch*N = {TOKENS}, hidden = {HIDDEN} (H = {HIDDEN}/d). "
             "Medians of CUDA-event-timed calls over rotated input sets. Ratios: ours / sdpa_flash and "
             "ours / sdpa_cudnn, same run, same inputs.", ""]
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
    b2b = ours + ["sdpa_flash", "sdpa_cudnn"]
    lines += ["## Back-to-back timing (host launch work overlapped; secondary), TFLOP/s", "",
              "| dtype | d | causal | N | " + " | ".join(b2b) + " | " + " | ".join(f"{k} / flash" for k in ours)
              + " |", "|---" * (4 + len(b2b) + len(ours)) + "|"]
    fmt = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    for dt, d, c in keys:
        for n in sorted({r["n"] for r in rows if (r["dtype"], r["d"], r["causal"]) == (dt, d, c)}):
            cell = {r["kernel"]: r.get("b2b_tflops") for r in rows
                    if (r["dtype"], r["d"], r["causal"], r["n"]) == (dt, d, c, n)}
            fl = cell.get("sdpa_flash")
            lines.append(f"| {dt} | {d} | {int(c)} | {n} | " + " | ".join(fmt(cell.get(k)) for k in b2b) + " | "
                         + " | ".join("—" if not (cell.get(k) and fl) else f"{cell[k] / fl:.2f}" for k in ours)
                         + " |")
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
        ax.set_ylabel("TFLOP/s (4·N²·d·B·H [/2])")
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------- static

def cmd_precompile(args):
    from kernels import fa2_tc, fa2_wgmma, loader, v_once_tc

    t0 = time.time()
    configs = [(c, None) for c in fa2_tc.compile_configs() + fa2_tc.sweep_configs() + v_once_tc.compile_configs()]
    configs += [(c, fa2_wgmma.ARCH) for c in fa2_wgmma.compile_configs() + fa2_wgmma.sweep_configs()]
    seen = []
    for (src, name, defs), arch in configs:
        if (src, name, defs) in seen:
            continue
        seen.append((src, name, defs))
        loader.compile_cubin(src, defines=defs, arch=arch)
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

    from kernels import fa2_tc, fa2_wgmma, v_once_tc

    if args.configs_from:
        fa2_tc.CONFIGS.update(pick_configs(args.configs_from))
        fa2_wgmma.CONFIGS.update(pick_configs(args.configs_from, "fa2_wgmma"))
    wgmma = fa2_wgmma.supported()
    if args.what == "sanitize":
        shapes_ = [(1, 2, 77, 203, 64, True), (1, 2, 130, 64, 128, True), (1, 1, 200, 200, 128, False)]
        for (b, h, n_q, n_k, d, causal) in shapes_:
            for dtype in (torch.float16, torch.bfloat16):
                q = torch.randn(b, h, n_q, d, device="cuda", dtype=dtype)
                k = torch.randn(b, h, n_k, d, device="cuda", dtype=dtype)
                v = torch.randn(b, h, n_k, d, device="cuda", dtype=dtype)
                fa2_tc.forward(q, k, v, causal=causal)
                if wgmma:
                    fa2_wgmma.forward(q, k, v, causal=causal)
                for placement in ("sram", "hbm"):
                    for rescale in ("lazy", "eager"):
                        v_once_tc.forward(q, k, v, causal=causal, placement=placement, rescale=rescale)
        torch.cuda.synchronize()
        log("sanitize target done")
        return
    # ncu: representative shapes, one launch each (inputs made first): N=4096 (f spilled) and N=1024 (f in smem)
    for n in (int(x) for x in args.ncu_seqs.split(",")):
        d = args.d
        b, h = TOKENS // n, HIDDEN // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        torch.cuda.synchronize()
        fns = {"fa2_tc": lambda: fa2_tc.forward(q, k, v, causal=False)}
        if wgmma:
            fns["fa2_wgmma"] = lambda: fa2_wgmma.forward(q, k, v, causal=False)
            for c in json.loads(args.wgmma_configs):  # other builds to profile beside the default
                fns[f"fa2_wgmma{json.dumps(c, sort_keys=True)}"] = (
                    lambda c=c: fa2_wgmma.forward(q, k, v, causal=False, config=c))
        fns.update({n_: (lambda f=f: f(q, k, v, False)) for n_, f in sdpa_fns().items()})
        if v_once_tc.plan(n, n, d)["fits_sram"]:
            fns["v_once_tc[sram,lazy]"] = lambda: v_once_tc.forward(q, k, v, placement="sram", rescale="lazy")
        else:
            fns["v_once_tc[hbm,lazy]"] = lambda: v_once_tc.forward(q, k, v, placement="hbm", rescale="lazy")
        for name, f in fns.items():
            f()
            torch.cuda.synchronize()
            log(f"target launched {name} n={n} d={d} b={b} h={h}")


def _dump(args, name, obj):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(obj, indent=1, default=str))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["precompile", "resources", "check", "sweep", "bench", "target"])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--seqs", default=",".join(map(str, SEQS)))
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--reps", type=int, default=15)
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
    rc = {"precompile": cmd_precompile, "resources": cmd_resources, "check": cmd_check, "sweep": cmd_sweep,
          "bench": cmd_bench, "target": cmd_target}[args.cmd](args)
    return int(bool(rc))


if __name__ == "__main__":
    sys.exit(main())
