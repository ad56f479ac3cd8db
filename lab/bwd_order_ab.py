"""A/B of the backward's step and dispatch order (issue 42: causal GQA runs at 0.67-1.01x of equal heads), one GPU run.

    PYTHONPATH=. python lab/bwd_order_ab.py --out DIR [--budget-s 200] [--n 2048,8192,16384] [--d 64,128] [--jobs 16]
                                            [--contenders shipped,shipped_o1,...,cudnn]

Two hypotheses, each a compile-time knob of v3's main kernel (kernels/cuda/fa2_wgmma_bwd.cu; contender "shipped",
run with impl="v3") and v4's (kernels/cuda/fa2_wgmma_bwd_ws.cu, the default at d = 64/128); the default of both is
today's kernel:
  ORDER=1  L2 reuse. Today the CTA of key block j runs its group's query heads outer, Q blocks i ascending from
           i_first(j); concurrent CTAs of one kv head drift apart by (h+1)*i_first(j) steps, so a Q_i, dO_i tile read
           by one is re-read by another long after it left the 50 MB L2. ORDER=1: i descending from Tr-1, heads inner:
           step (Tr-1-i)*G + h reads tile (h, i) in every CTA that sees it (kernels.fa2_wgmma_bwd.step_tiles).
  LPT=1    load balance. A causal GQA CTA runs G*(Tr - i_first(j)) steps, G times an equal-heads CTA's; the grid
           (Tc, B*H_kv) dispatches one row's key blocks 0..Tc-1, then the next row's, so long CTAs of late rows start
           late and end in a tail. LPT=1 launches (B*H_kv, Tc): every row's key block 0 first, then every block 1, ...
           (longest first). A list-scheduling model (equal-cost steps, 132 SMs, dispatch in grid order) predicts the
           GQA8/equal busy-SM ratio today at d=128 0.65/0.70/0.99 for N=2k/8k/16k, d=64 0.79/0.83/0.99 (measured
           bf16, as this A/B runs: 0.74/0.72/0.96 and 0.89/0.87/1.01), and 0.97-0.99 everywhere with LPT=1.
The two pull apart: l2_hit_fraction (a lockstep strict-LRU model of the Q_i, dO_i reads, 50 MB) gives causal GQA8
hit rates default / ORDER=1 / LPT=1 / both of d=128 N=2k 0.51/0.88/0.35/0.64, 8k 0.72/0.97/0.40/0.76, 16k
0.50/0.59/0.42/0.78; d=64 2k 0.88/0.88/0.61/0.46, 8k 0.97/0.97/0.76/0.64, 16k 0.98/0.82/0.80/0.68 (LPT's
concurrent CTAs belong to many kv heads). The GPU decides; both models are crude (equal-cost steps).

1. Precompiles, in parallel processes, every build it launches (both kernels' default, ORDER=1, LPT=1 and
   ORDER=1 LPT=1 builds, the shipped pre/dq kernels, the forward builds that make o and lse).
2. Correctness (exit 1 on a failure, before any timing): every build of both kernels (the shipped ones also with
   deterministic=True), on GQA causal shapes with tails, Nq != Nk and rows that see no key: dq, dk, dv against
   float64 (norm-relative TOL64[dtype] of lab/bwd_ws_ab.py check_grad, or 3x the error of a float64 backward that rounds O, P, dS to the input dtype,
   or variants.reference.fp32_ds_floor), gradients poisoned with NaN first.
3. Timing, per (kv heads, causal, d, N), bf16, batch*N = 16k tokens, hidden 2048 (bench/bwd_layouts_speed.py's
   cells: H = 2048 / d, gqa8 H_kv = H / 8, equal H_kv = H): backward only, bench.harness.time_fn medians
   (triton's do_bench, L2 flushed) of every build of both kernels and SDPA cuDNN (K/V repeat_interleave'd in the
   graph, bwd_layouts_speed's cudnn_gqa8). Each contender's gradients are checked against cuDNN's on the same inputs
   first (bwd_layouts_speed.TOL); a failing one is reported, not timed, exit 1. Cells run until --budget-s (the rest
   are listed as skipped); GQA causal cells first, then equal-heads causal, then non-causal.
Prints a table (TFLOP/s; each variant over its kernel's default build; the best shipped build over cuDNN) and writes
bwd_order_ab.json under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bwd_layouts_speed as layouts  # noqa: E402
from bench import harness  # noqa: E402
from lab.bwd_ws_ab import _dtype, check_grad, log, sync  # noqa: E402

DTYPE = "bf16"
# <kernel>[_o1][_lpt]: ORDER=1 (i descending, heads inner) and/or LPT=1 (grid (B*H_kv, Tc): every row's key block 0
# dispatched first, the longest causal CTAs first); no suffix: the default build, exactly what backward() launches
KERNELS = ("shipped", "shipped_o1", "shipped_lpt", "shipped_o1_lpt", "v4", "v4_o1", "v4_lpt", "v4_o1_lpt")
CONTENDERS = (*KERNELS, "cudnn")
CHECKS = [  # (B, H_kv, group, Nq, Nk, d, dtype, causal)
    (2, 2, 8, 333, 200, 128, "bf16", True),    # Nq > Nk: 133 rows see no key; tails
    (1, 2, 8, 200, 333, 64, "fp16", True),     # Nq < Nk: hidden Q blocks skipped per key block
    (1, 1, 8, 1000, 1000, 128, "fp16", True),  # 8 x 16 steps per CTA
    (1, 2, 2, 777, 777, 64, "bf16", True),
    (2, 2, 1, 129, 517, 128, "bf16", False),
]
DEVICE = "cuda"  # tests/test_bwd_order.py runs the glue on "cpu" with the kernels replaced by the oracle


def cells(ds, ns) -> list[tuple]:
    """(group, causal, d, n) in run order: GQA causal (the issue's gap) first, then equal-heads causal, then
    non-causal GQA and equal heads."""
    return [(g, causal, d, n) for causal in (True, False) for g in (layouts.GROUP, 1) for d in sorted(ds, reverse=True)
            for n in ns]


def busy_fraction(d: int, n: int, group: int, causal: bool, lpt: int, sms: int = 132) -> float:
    """The docstring's load-balance model: the fraction of SM-time busy when the cell's CTAs (one per (row, key block
    j), G*(Tr - i_first(j)) equal-cost steps each, the default builds' Br and Bc = 128) are dispatched in grid order
    (LPT=0: row-major, j fastest; LPT=1: j-major) each to the first SM that frees (one CTA per SM)."""
    import heapq

    br, bc = (128 if d == 64 else 64), 128
    b, h = layouts.TOKENS // n, layouts.heads_for(d)
    t_r, t_c = -(-n // br), -(-n // bc)
    ctas = [(j, row) if lpt else (row, j) for row in range(b * h // group) for j in range(t_c)]
    steps = {c: group * (t_r - (max(0, (c[0] if lpt else c[1]) * bc) // br if causal else 0)) for c in ctas}
    free, end = [0] * sms, 0
    for c in sorted(ctas):
        start = heapq.heappop(free)
        heapq.heappush(free, start + steps[c])
        end = max(end, start + steps[c])
    return sum(steps.values()) / (sms * end)


def l2_hit_fraction(d: int, n: int, group: int, causal: bool, order: int, lpt: int, sms: int = 132,
                    l2_mb: float = 50.0) -> float:
    """The docstring's L2 model: the fraction of Q_i + dO_i tile reads that hit a strict-LRU L2 of l2_mb (the dQ tile's
    fp32 reduce-adds also pass through it, uncounted), the cell's CTAs dispatched in grid order (LPT) one per SM and
    advancing in lockstep, one step (step_tiles(order, ...)) each per round. Crude: equal-cost steps, no K/V, no
    sectors or ways; it ranks orders, it does not predict TFLOP/s."""
    from collections import OrderedDict

    from kernels.fa2_wgmma_bwd import step_tiles

    br, bc = (128 if d == 64 else 64), 128
    b, h = layouts.TOKENS // n, layouts.heads_for(d)
    t_r, t_c = -(-n // br), -(-n // bc)
    ctas = [(row, j) for row in range(b * h // group) for j in range(t_c)]
    if lpt:
        ctas.sort(key=lambda c: (c[1], c[0]))
    cap, tile, dq_tile = l2_mb * 2**20, 2 * br * d * 2, br * d * 4
    lru: OrderedDict = OrderedDict()
    used, hits, reads = 0, 0, 0
    queue, live = list(reversed(ctas)), {}
    while queue or live:
        while len(live) < sms and queue:
            c = queue.pop()
            live[c] = step_tiles(order, max(0, c[1] * bc) // br if causal else 0, t_r, group)[::-1]
        for c in list(live):
            hq, i = live[c].pop()
            for key, nbytes, counted in (((c[0], hq, i, "q"), tile, True), ((c[0], hq, i, "dq"), dq_tile, False)):
                if key in lru:
                    lru.move_to_end(key)
                    hits += counted
                else:
                    lru[key] = nbytes
                    used += nbytes
                    while used > cap:
                        used -= lru.popitem(last=False)[1]
                reads += counted
            if not live[c]:
                del live[c]
    return hits / reads


def knobs(name: str) -> tuple[str, int, int]:
    """'shipped_o1_lpt' -> ('shipped', ORDER=1, LPT=1)."""
    parts = name.split("_")
    return parts[0], int("o1" in parts), int("lpt" in parts)


def run(name: str, q, k, v, o, lse, do, causal, deterministic=False, out=None):
    """One contender's backward (a name of KERNELS): v3 ("shipped": kernels.fa2_wgmma_bwd.backward with impl="v3") or
    v4 (lab/bwd_ws.py) with its ORDER and LPT; the plain name runs the default build (config=None)."""
    from kernels import fa2_wgmma_bwd
    from lab import bwd_ws

    kernel, order, lpt = knobs(name)
    if kernel == "shipped":
        cfg = fa2_wgmma_bwd.order_config(q.shape[3], order, lpt) if order or lpt else None
        return fa2_wgmma_bwd.backward(q, k, v, o, lse, do, causal=causal, config=cfg, deterministic=deterministic,
                                      out=out, impl="v3")  # v3 also at d = 64, 128, where v4 is now the default
    return bwd_ws.backward(q, k, v, o, lse, do, causal=causal, config=bwd_ws.order_config(order, lpt), out=out)


def builds(ds, ns) -> list[tuple]:
    """(source, defines, arch) of every build this run launches."""
    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from lab import bwd_ws
    from lab.precompile_bwd import unique

    jobs = []
    for d in sorted(set(ds) | {c[5] for c in CHECKS}):
        for dt in ("fp16", "bf16"):
            bf16 = dt == "bf16"
            for order, lpt in ((0, 0), *fa2_wgmma_bwd.ORDER_AB):
                for det in (False, True):
                    cfg = fa2_wgmma_bwd.order_config(d, order, lpt) if order or lpt else None
                    jobs += [(s, defs, fa2_wgmma_bwd.ARCH) for s, _, defs in
                             fa2_wgmma_bwd._build(fa2_wgmma_bwd.defines_for(d, bf16, cfg, deterministic=det))]
                jobs.append((str(bwd_ws.SOURCE), bwd_ws.defines_for(d, bf16, bwd_ws.order_config(order, lpt)),
                             bwd_ws.ARCH))
            for n in sorted(set(ns) | {c[4] for c in CHECKS if c[5] == d}):
                for causal in (False, True):
                    for plain in (False, True):  # the forward's build depends on contiguous equal-head inputs
                        defs = fa2_wgmma.defines_for(d, bf16, fa2_wgmma.default_config(d, n, plain, causal))
                        jobs.append((str(fa2_wgmma.source_of(defs)[0]), defs, fa2_wgmma.ARCH))
    return unique(jobs)


def precompile(jobs_n: int, ds, ns) -> None:
    from lab.precompile_bwd import compile_or_exit

    compile_or_exit(builds(ds, ns), jobs_n)


def correctness() -> list[dict]:
    import torch

    from kernels import fa2_wgmma, fa2_wgmma_bwd
    from variants.reference import backward_reference, fp32_ds_floor

    rows = []
    for i, (b, h_kv, group, n_q, n_k, d, dt, causal) in enumerate(CHECKS):
        dtype = _dtype(dt)
        g = torch.Generator(device=DEVICE).manual_seed(17 + i)
        q, do = (torch.randn(b, n_q, h_kv * group, d, generator=g, device=DEVICE).to(dtype).transpose(1, 2)
                 for _ in range(2))
        k, v = (torch.randn(b, n_k, h_kv, d, generator=g, device=DEVICE).to(dtype).transpose(1, 2) for _ in range(2))
        o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
        exact = backward_reference(q, k, v, do, causal=causal)
        rounded = backward_reference(q, k, v, do, causal=causal, round_to=dtype)
        ds_floor = (*fp32_ds_floor(q, k, v, do, causal=causal), 0.0)
        for name, det in [(c, False) for c in KERNELS] + [(c, True) for c in KERNELS if c.startswith("shipped")]:
            row = dict(b=b, h_kv=h_kv, group=group, n_q=n_q, n_k=n_k, d=d, dtype=dt, causal=causal, contender=name,
                       deterministic=det, ok=True)
            try:
                grads = tuple(fa2_wgmma_bwd._empty_like_layout(t).fill_(float("nan")) for t in (q, k, v))  # poisoned
                run(name, q, k, v, o, lse, do, causal, deterministic=det, out=grads)
                sync(DEVICE)
                for gname, gr, ref, base, ds in zip(("dq", "dk", "dv"), grads, exact, rounded, ds_floor):
                    c = check_grad(gr, ref, base, ds, dt)
                    row[gname] = dict(rel=c["rel"], rounding_rel=c["rounding_rel"], ok=c["ok"])
                    row["ok"] = row["ok"] and c["ok"]
                if causal and n_q > n_k and not bool((grads[0][:, :, : n_q - n_k] == 0).all()):
                    row.update(ok=False, no_key_rows="dq not 0")
            except Exception as exc:
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
            log(f"check {name}{' det' if det else ''} d={d} {dt} B={b} H_kv={h_kv} G={group} Nq={n_q} Nk={n_k} "
                f"causal={int(causal)}: {'ok' if row['ok'] else 'FAILED ' + str(row)}")
    return rows


def run_cell(group, causal, d, n, end, rows, contenders=CONTENDERS):
    import torch

    from kernels import fa2_wgmma

    dtype = _dtype(DTYPE)
    b, h = layouts.TOKENS // n, layouts.heads_for(d)
    cell = dict(dtype=DTYPE, d=d, n=n, causal=causal, batch=b, heads=h, h_kv=h // group, group=group,
                bwd_flops=2.5 * harness.flops(b, h, n, n, d, causal))
    q, k, v, do = layouts.make(b, h, h // group, n, d, dtype, False, n + d + group)
    o, lse = fa2_wgmma.forward(q, k, v, causal=causal)
    ref = None
    for name in sorted(contenders, key=lambda c: c != "cudnn"):  # cuDNN first: the reference of the others
        rec = dict(cell, contender=name)
        rows.append(rec)
        if time.time() > end:
            rec["skipped"] = "budget"
            continue
        try:
            if name == "cudnn":
                fn = layouts.cudnn_grads(q, k, v, do, causal, gqa=group > 1)
            else:
                def fn(name=name):
                    return run(name, q, k, v, o, lse, do, causal)
            grads = fn()
            sync(DEVICE)
            if name == "cudnn":
                ref = grads
            rec["finite"] = all(bool(torch.isfinite(x).all()) for x in grads)
            if ref is not None and name != "cudnn":
                rec["rel_err_vs_cudnn"] = [layouts.rel(x, r) for x, r in zip(grads, ref)]
            rec["ok"] = rec["finite"] and max(rec.get("rel_err_vs_cudnn", [0.0])) <= layouts.TOL[DTYPE]
            if not rec["ok"]:
                log(f"  {name}: gradient check FAILED {rec}")
                continue
            del grads
            ms = float(harness.time_fn(lambda: fn(), [()])["median_ms"])
            rec.update(median_ms=ms, tflops=cell["bwd_flops"] / ms / 1e9)
        except Exception as exc:  # a contender that cannot run is reported; the others go on
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            if DEVICE == "cuda":
                torch.cuda.empty_cache()


def table(rows) -> str:
    """One line per cell: TFLOP/s of each contender, then each variant over its kernel's default build, and the best
    shipped build over cuDNN."""
    by_cell: dict[tuple, dict] = {}
    for r in rows:
        by_cell.setdefault((r["group"], r["causal"], r["d"], r["n"]), {})[r["contender"]] = r

    def tf(rec):
        if rec is None:
            return "-"
        if "tflops" in rec:
            return f"{rec['tflops']:.0f}"
        return "skip" if "skipped" in rec else "FAIL"

    def ratio(a, b):
        return f"{a['tflops'] / b['tflops']:.2f}" if a and b and "tflops" in a and "tflops" in b else "-"

    variants = [c for c in KERNELS if "_" in c]
    head = ["G", "causal", "d", "N", *CONTENDERS, *(f"{c}/{c.split('_')[0]}" for c in variants), "best_shipped/cudnn"]
    widths = [3, 6, 4, 6] + [max(6, len(h)) for h in head[4:]]
    lines = [" ".join(f"{x:>{w}}" for x, w in zip(head, widths))]
    for (g, causal, d, n), recs in by_cell.items():
        shipped = [recs.get(c) for c in KERNELS if c.startswith("shipped") and "tflops" in (recs.get(c) or {})]
        best = max(shipped, key=lambda r: r["tflops"]) if shipped else None
        vals = [g, int(causal), d, n, *(tf(recs.get(c)) for c in CONTENDERS),
                *(ratio(recs.get(c), recs.get(c.split("_")[0])) for c in variants), ratio(best, recs.get("cudnn"))]
        lines.append(" ".join(f"{x:>{w}}" for x, w in zip(vals, widths)))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="bwd_order_"))
    ap.add_argument("--budget-s", type=float, default=200.0, help="timing stops after this many seconds from start")
    ap.add_argument("--n", default="2048,8192,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help=f"a subset of {','.join(CONTENDERS)}")
    args = ap.parse_args(argv)
    contenders = tuple(c for c in args.contenders.split(",") if c)
    if not contenders or any(c not in CONTENDERS for c in contenders):
        ap.error(f"--contenders: a comma-separated subset of {','.join(CONTENDERS)}, got {args.contenders!r}")
    ns = harness.int_list(ap, "--n", args.n, at_most=layouts.TOKENS, why="batch*N = 16k tokens")
    ds = harness.int_list(ap, "--d", args.d, choices=(64, 128), why="both kernels' head dims")
    harness.positive_int(ap, "--jobs", args.jobs)
    if not args.budget_s > 0:
        ap.error(f"--budget-s must be positive, got {args.budget_s}")
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (compute capability 9.x)")
    start = time.time()
    precompile(args.jobs, ds, ns)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, dtype=DTYPE)
    checks = correctness()
    result["checks"] = checks
    path = out / "bwd_order_ab.json"
    if not all(r["ok"] for r in checks):
        path.write_text(json.dumps(result, indent=1))
        log(f"correctness FAILED: no timing; wrote {path}")
        return 1
    rows: list[dict] = []
    end = start + args.budget_s
    for group, causal, d, n in cells(ds, ns):
        run_cell(group, causal, d, n, end, rows, contenders)
        log(table([r for r in rows if (r["group"], r["causal"], r["d"], r["n"]) == (group, causal, d, n)])
            .splitlines()[-1])
    result.update(rows=rows, seconds=time.time() - start)
    path.write_text(json.dumps(result, indent=1))
    log(table(rows))
    log(f"wrote {path} ({time.time() - start:.0f} s)")
    return 1 if any(r.get("ok") is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
