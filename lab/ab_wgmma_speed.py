"""A/B of fa2_wgmma builds in one run (issue 14): forward()'s own build ("default"), that build with other knobs
("default+KNOB=V"), the named builds (kernels.fa2_wgmma.named_builds: "base" = CONFIGS, the rules' builds by name,
"cp.async"), with SDPA flash and cuDNN beside, on the same inputs. (The speed, size and tile candidates of issue 14,
each by name, and their knobs are at commit 0bb604a; every run's results record the configs its entries ran.)

    PYTHONPATH=. python lab/ab_wgmma_speed.py --out DIR [--dtypes float16,bfloat16] [--dims 64,128,256]
        [--seqs 512,1024,2048,4096,8192,16384] [--variants default,default-again,base,...] [--budget-s 120]

Shapes: batch*N = 16k tokens, hidden 2048 (H = 2048/d), causal and not. Every entry goes through
bench/harness.py: checked against the float64 reference on the timed inputs first (an entry that fails is
not timed), then timed by the one timer (do_bench, L2 flushed); TFLOP/s = harness.flops (4*d per visible
(query, key) pair: about half for causal) / median. Cells run d = 64 first (where cuDNN leads most); when
--budget-s is spent the remaining cells are listed as not run, and DIR/ab_wgmma_speed.json is rewritten
after every cell, so a time limit keeps what was measured. The summary table comes last.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import rotate  # noqa: E402  (each cell's entry order: a Williams design's row)
from lab.predict_ab import parse_variants, variant_knobs  # noqa: E402  (the entry names, read in one place)

SDPA = ("flash", "cudnn")
TOKENS, HIDDEN = 16384, 2048
DEFAULT_VARIANTS = "default,default-again,base"  # timed without --variants: forward()'s build, its control, CONFIGS
SIZE_MAX_N = 4096  # decisions(): the short rows a SIZE_RULES entry may take, apart from the rest
CONTROL = "fa2_wgmma[default-again]"  # forward()'s build timed as a second entry: the run's order and noise floor


def entries(d: int, variants, n: int, sdpa=SDPA):
    """forward()'s build and its variants, the named builds at d, then SDPA."""
    from bench import harness
    from kernels import KERNELS, fa2_wgmma

    spec = KERNELS["fa2_wgmma"]
    cfgs = fa2_wgmma.named_builds(d)
    out = [harness.Entry(f"fa2_wgmma[{v}]", spec.tier, spec, {}, dict(cfgs[v])) for v, dims in variants
           if v in cfgs and (dims is None or d in dims)]
    if any(v == "default" and (dims is None or d in dims) for v, dims in variants):  # what forward() picks: SIZE_RULES
        out.insert(0, harness.Entry("fa2_wgmma[default]", spec.tier, spec, {}, None))
    if any(v == "default-again" and (dims is None or d in dims) for v, dims in variants):  # the control (see run)
        out.append(harness.Entry(CONTROL, spec.tier, spec, {}, None))
    if any(v == "default-memset" and (dims is None or d in dims) for v, dims in variants):
        out.append(harness.Entry("fa2_wgmma[default-memset]", spec.tier, spec, {}, None, fn=_with_memset))
    for v, dims in variants:  # "default+KNOB=V[+KNOB=V]": the build forward() picks for the call, with these knobs
        if v.startswith("default+") and (dims is None or d in dims):
            out.append(harness.Entry(f"fa2_wgmma[{v}]", spec.tier, spec, {}, None, fn=_default_with(v)))
    return out + [harness.Entry(f"sdpa_{b}", "torch", backend=b) for b in sdpa]


def default_with_config(variant: str, d: int, n_k: int, causal: bool) -> dict:
    """The build a "default+KNOB=V[+KNOB=V]" entry runs for a call (kernels.fa2_wgmma.with_knobs: the rule's build with
    these knobs and the knobs forward() would add to it). Its rows record it (`config`)."""
    from kernels import fa2_wgmma

    return fa2_wgmma.with_knobs(d, n_k, causal, variant_knobs(variant))


def _default_with(variant: str):
    """forward()'s own choice for each call (fa2_wgmma.default_config) with the variant's knobs added: the A/B of a
    knob across every build the rules run, in one run ("default+DESC_STEP=1", run before DESC_STEP was a default)."""

    def fn(q, k, v, causal, out=None):
        from kernels import fa2_wgmma

        cfg = default_with_config(variant, q.shape[-1], k.shape[2], causal)
        return fa2_wgmma.forward(q, k, v, causal=causal, out=out, config=cfg)
    return fn


def _with_memset(q, k, v, causal, out=None):
    """forward()'s default as launched before v6e: a fresh torch.zeros tile counter (a fill kernel in the stream)
    before each call of a dynamic persistent build (PERSISTENT=2). The kernel ignores it; the A/B prices that launch
    (fa2_wgmma_tma.cu v6e). (fwd_wgmma_persistent/v6e was timed with the fill before every default call, these builds or not.)"""
    import torch

    from kernels import fa2_wgmma

    if fa2_wgmma.default_config(q.shape[-1], k.shape[2], True, causal).get("PERSISTENT") == 2:
        torch.zeros(1, dtype=torch.int32, device=q.device)
    return fa2_wgmma.forward(q, k, v, causal=causal, out=out)


# A cell is timed again, every entry, when one entry's two passes differ by more than this: spikes of one entry
# (grid21: fa2_wgmma d = 128 causal 1k bf16, passes 0.310 / 0.222 ms against a 0.148 ms minimum, samples up to
# 1.16 ms) that the mean of the passes would carry into the table. cuDNN's passes differ by up to ~17% without a spike
# (its first pass in a cell is the faster one: summary() prints the median ratio), so the bound sits above that.
RETIME_SPREAD = 1.25


def time_cell(harness, cell_entries, sets, causal, args) -> list[dict]:
    """Every entry checked against float64 first, then each timed in order, then (abba) again in reverse: a drift
    within the cell (the clock settling under load) then favours no position; each median is the mean of the two
    passes'. The checks come before the first pass, not each before its entry's timing, so no entry's first pass
    follows a pause its second lacks: with a check before each entry cuDNN's first / second pass was 0.93-0.97 over
    the stop-20/21 grids, ours 0.98-0.99 (results/probe_gpu/timing_passes probes it; a drift within the cell and the
    pause are not separated there)."""
    def timed(e, rec):  # an error while timing fails this entry (as harness.measure records it), not the run
        try:
            return harness.time_fn(lambda q_, k_, v_: e.forward(q_, k_, v_, causal), sets,
                                   warmup_ms=args.warmup_ms, rep_ms=args.rep_ms)
        except Exception as exc:
            for k in ("median_ms", "pass_ms", "tflops"):
                rec.pop(k, None)
            harness.failed(rec, exc)
            return None

    recs = [harness.measure(e, sets, causal, timed=False) for e in cell_entries]
    for e, rec in zip(cell_entries, recs):
        if rec.get("ok") and not rec.get("skipped") and (t := timed(e, rec)):
            rec.update(t, tflops=rec["flops"] / t["median_ms"] / 1e9)
    if args.order == "abba":
        # passes alternate direction (abba: two; --passes 4: abbaabba); each entry's median is the mean of its passes'
        passes = {id(rec): [dict(rec)] for rec in recs if rec.get("median_ms")}
        pairs = list(zip(cell_entries, recs))
        for p in range(1, max(2, getattr(args, "passes", 2) or 2)):
            for e, rec in (reversed(pairs) if p % 2 else pairs):
                if id(rec) in passes and rec.get("median_ms") and (t := timed(e, rec)):
                    passes[id(rec)].append(t)
        for rec in recs:
            ts = passes.get(id(rec))
            if ts and rec.get("median_ms") and len(ts) > 1:
                rec.update(harness.rounds(ts))  # two passes: harness.abba
                rec["tflops"] = rec["flops"] / rec["median_ms"] / 1e9
    return recs


def _even_passes(text: str) -> int:
    n = int(text)
    if n < 2 or n % 2:
        raise argparse.ArgumentTypeError(f"--passes takes an even count of at least 2, got {text}")
    return n


DEFAULT_ENTRIES = ("default", "default-again", "default-memset")  # forward()'s build, by the names entries() knows


def known_variants(d: int, n: int) -> set:
    """The build names entries() times at d and N (besides DEFAULT_ENTRIES and default+KNOB=V)."""
    from kernels import fa2_wgmma

    return set(fa2_wgmma.named_builds(d))


def check_args(ap, args) -> None:
    """Every argument of a run, checked before any GPU work: a bad one is ap.error (one line, exit 2). A variant
    entries() would time in no cell (an unknown name, a head dim outside --dims) or whose build the kernel refuses
    (default+KNOB=V) is refused here; it used to be dropped without a word, or fail every cell."""
    from bench import harness
    from kernels import fa2_wgmma

    harness.name_list(ap, "--dtypes", args.dtypes, ("float16", "bfloat16"), "dtype")
    dims = harness.int_list(ap, "--dims", args.dims, choices=fa2_wgmma.HEAD_DIMS, why="fa2_wgmma's head dims")
    seqs = harness.int_list(ap, "--seqs", args.seqs, at_most=TOKENS, why=f"batch*N = {TOKENS} tokens")
    causals = harness.flag_list(ap, "--causal", args.causal)
    if args.sdpa.strip():  # empty: no SDPA entries
        harness.name_list(ap, "--sdpa", args.sdpa, harness.SDPA_BACKENDS, "SDPA backend")
    harness.positive(ap, "--rep-ms", args.rep_ms)
    harness.positive(ap, "--warmup-ms", args.warmup_ms, zero=True)
    if not args.variants:
        return
    try:
        variants = parse_variants(args.variants)
    except ValueError:
        ap.error(f"--variants: malformed {args.variants!r}; names, each optionally @d1+d2 (comma-separated)")
    for name, only in variants:
        if only is not None and not only <= set(fa2_wgmma.HEAD_DIMS):
            ap.error(f"--variants: {name}@{'+'.join(map(str, sorted(only)))}: fa2_wgmma's head dims are "
                     f"{', '.join(map(str, fa2_wgmma.HEAD_DIMS))}")
        at = [d for d in dims if only is None or d in only]
        if not at:
            ap.error(f"--variants: {name} is limited to d = {'+'.join(map(str, sorted(only)))}, none of --dims")
        if name in DEFAULT_ENTRIES:
            continue
        if name.startswith("default+"):
            try:
                variant_knobs(name)
            except ValueError:
                ap.error(f"--variants: malformed {name!r}; default+KNOB=V[+KNOB=V] with integer values")
            for d in at:  # the build each cell would run, refused as forward() would refuse it
                for n in seqs:
                    for causal in causals:
                        try:
                            fa2_wgmma.defines_for(d, False, default_with_config(name, d, n, causal))
                        except ValueError as exc:
                            ap.error(f"--variants: {name} at d={d}, N={n}: {exc}")
            continue
        if not any(name in known_variants(d, n) for d in at for n in seqs):
            ap.error(f"--variants: unknown variant {name!r} at d = {', '.join(map(str, at))} (N = {args.seqs}); "
                     f"the names are {', '.join(DEFAULT_ENTRIES)}, default+KNOB=V and those of "
                     "kernels/fa2_wgmma.py named_builds (issue 14's candidates: commit 0bb604a)")


def run(args) -> dict:
    import torch

    from bench import harness
    from kernels import fa2_wgmma

    harness.start_clock()  # each timing records the SM clock over its window (None without nvidia-smi)

    variants = parse_variants(args.variants or DEFAULT_VARIANTS)
    sdpa = tuple(b for b in args.sdpa.split(",") if b)
    res = dict(env=dict(harness.environment(), order=args.order),
               variants={str(d): fa2_wgmma.named_builds(d) for d in (int(x) for x in args.dims.split(","))},
               size_max_n=SIZE_MAX_N,
               shapes=f"batch*N = {TOKENS}, hidden {HIDDEN}", rows=[], not_run=[])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ab_wgmma_speed.json"
    t0 = time.time()
    cells = [(d, n, causal, dt) for d in (int(x) for x in args.dims.split(","))
             for n in (int(x) for x in args.seqs.split(",")) for causal in (bool(int(c)) for c in getattr(args, "causal", "0,1").split(","))
             for dt in args.dtypes.split(",")]
    for i_cell, (d, n, causal, dt) in enumerate(cells):
        if time.time() - t0 > args.budget_s:
            res["not_run"].append(dict(d=d, n=n, causal=causal, dtype=dt))
            continue
        sets = harness.input_sets(TOKENS // n, HIDDEN // d, n, n, d, getattr(torch, dt), max_sets=2)
        cell_entries = rotate(entries(d, variants, n, sdpa), i_cell) if args.rotate else entries(d, variants, n, sdpa)
        recs = time_cell(harness, cell_entries, sets, causal, args)
        spread = max((max(r["pass_ms"]) / min(r["pass_ms"]) for r in recs if r.get("pass_ms")), default=1.0)
        if spread > RETIME_SPREAD:  # a disturbed cell (one entry's passes far apart): every entry timed again
            first = recs
            recs = time_cell(harness, cell_entries, sets, causal, args)
            for r, f in zip(recs, first):
                r["retimed_from_ms"] = f.get("pass_ms")
        for pos, (e, rec) in enumerate(zip(cell_entries, recs)):
            rec["variant"], rec["position"] = e.label, pos
            row = {k: rec.get(k) for k in ("variant", "dtype", "d", "n", "b", "h", "causal", "median_ms",
                                           "min_ms", "max_ms", "tflops", "ok", "rel_err", "skipped", "pass_ms",
                                           "position")}
            for k in ("clock_mhz", "power_w"):  # the SM clock and board power over its timings (harness.start_clock)
                if rec.get(k) is not None:
                    row[k] = rec[k]
            if "retimed_from_ms" in rec:
                row["retimed_from_ms"] = rec["retimed_from_ms"]
            if e.label == "fa2_wgmma[default]":  # the build forward()'s rule ran (the GPU model reads it back)
                row["config"] = fa2_wgmma.choose_config(d, n, True, causal=causal) or fa2_wgmma.CONFIGS[d]
                row["knobs"] = fa2_wgmma.default_knobs(row["config"])  # and what forward() added (since stop 19)
            elif e.label.startswith("fa2_wgmma[default+"):  # the whole build the variant ran (since stop 24)
                row["config"] = default_with_config(e.label[len("fa2_wgmma["):-1], d, n, causal)
            res["rows"].append(row)
            print(f"{dt:8s} d={d:3d} N={n:5d} causal={int(causal)} {e.label:26s} "
                  f"{rec.get('median_ms') or float('nan'):8.4f} ms {rec.get('tflops') or float('nan'):6.1f} TFLOP/s "
                  f"{rec.get('skipped', '')}", flush=True)
        del sets
        torch.cuda.empty_cache()
        res["seconds"] = round(time.time() - t0, 1)
        path.write_text(json.dumps(res, indent=1))
    res["seconds"] = round(time.time() - t0, 1)
    path.write_text(json.dumps(res, indent=1))
    return res


ABBREV = {"R": "rescale", "P": "poly", "S": "persist", "D": "dynamic", "A": "ahead", "st": "small-tma",
          "sc": "small-cp"}


def abbrev(variant: str) -> str:
    back = {v: k for k, v in ABBREV.items()}
    return "+".join(back.get(part, part) for part in variant.split("+"))


def reference(rows) -> str | None:
    """The build the table divides by: "base" (CONFIGS) where the run timed it, else the run's first fa2_wgmma
    build (e.g. forward()'s "default"). A run without base used to print every ratio as "fail"."""
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows) if v.startswith("fa2_wgmma[")]
    for v in ("fa2_wgmma[base]", "fa2_wgmma[default]"):  # not the first timed: rotation moves it from cell to cell
        if v in variants:
            return v
    return variants[0] if variants else None


def summary(res: dict) -> str:
    """One line per (dtype, d, causal, N): cuDNN and flash TFLOP/s, the reference build's TFLOP/s (base, else the
    first build timed) and its ratio to cuDNN, each other variant as its time ratio to the reference (< 1: faster;
    "fail": that entry failed its check; "-": not timed in this cell), the best fa2_wgmma build over cuDNN."""
    rows = res["rows"]
    cell = {}
    for r in rows:
        cell.setdefault((r["dtype"], r["d"], r["causal"], r["n"]), {})[r["variant"]] = r
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows) if v.startswith("fa2_wgmma[")]
    ref = reference(rows)
    others = [v for v in variants if v != ref]
    short = [abbrev(v[len("fa2_wgmma["):-1]) for v in others]
    ref_name = abbrev(ref[len("fa2_wgmma["):-1]) if ref else "base"
    lines = [f"{'dtype':8s} {'d':>3s} {'c':>1s} {'N':>5s} {'cuDNN':>6s} {'flash':>6s} {ref_name[:6]:>6s} {'r/cuD':>5s} "
             + " ".join(f"{s[:9]:>9s}" for s in short) + f" {'best/cuDNN':>10s}",
             f"  (TFLOP/s; variant columns: time / {ref_name} time, < 1 is faster; best/cuDNN: the fastest fa2_wgmma build;"
             " " + ", ".join(f"{k} = {v}" for k, v in ABBREV.items()) + ")"]
    worst = []
    for (dt, d, causal, n), c in sorted(cell.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        def tf(v):
            r = c.get(v)
            return r["tflops"] if r and r.get("tflops") else None

        def ms(v):
            r = c.get(v)
            return r["median_ms"] if r and r.get("median_ms") and r.get("ok") else None

        cud, fl, ref_tf = tf("sdpa_cudnn"), tf("sdpa_flash"), tf(ref)
        fast = [tf(v) for v in variants if tf(v) and c[v].get("ok")]
        best = max(fast) if fast else None
        ratios = []
        for v in others:
            a, b = ms(v), ms(ref)
            failed = v in c and c[v].get("ok") is False
            ratios.append(f"{a / b:9.3f}" if (a and b) else f"{'fail' if failed else '-':>9s}")
        f = lambda x: f"{x:6.1f}" if x else f"{'-':>6s}"  # noqa: E731
        bc = f"{ref_tf / cud:5.2f}" if ref_tf and cud else f"{'-':>5s}"
        bb = best / cud if best and cud else None
        if bb:
            worst.append((bb, dt, d, causal, n))
        lines.append(f"{dt:8s} {d:3d} {int(causal):1d} {n:5d} {f(cud)} {f(fl)} {f(ref_tf)} {bc} " + " ".join(ratios)
                     + f" {bb if bb else float('nan'):10.3f}")
    if worst:
        w = min(worst)
        lines.append(f"cells with best/cuDNN >= 1.0: {sum(x[0] >= 1.0 for x in worst)} of {len(worst)}; worst "
                     f"{w[0]:.3f} ({w[1]}, d={w[2]}, causal={int(w[3])}, N={w[4]})")
    lines += pass_lines(cell, ref)
    lines += clock_lines(rows)
    lines += decisions(rows)
    bad = [r for r in rows if r.get("ok") is False or (r.get("skipped") and "SDPA" not in str(r.get("skipped")))]
    lines.append(f"failed or skipped entries: {len(bad)}" + "".join(
        f"\n  {r['variant']} {r['dtype']} d={r['d']} N={r['n']} causal={r['causal']}: {r.get('skipped')}" for r in bad[:10]))
    if res.get("not_run"):
        lines.append(f"cells not run (time budget): {len(res['not_run'])}")
    return "\n".join(lines)


def pass_lines(cell: dict, ref: str | None) -> list[str]:
    """abba runs: the reference build against cuDNN on each entry's faster pass (the min of its passes), beside the table's
    mean of the passes, and each library's first pass / second pass (median over cells). While each entry's check
    came right before its own first pass, cuDNN's first pass ran 3-7% faster than its second (grid20, v13final 0.966,
    grid21 0.928; fa2_wgmma and SDPA flash 0.98-1.00). With the checks first (time_cell) a four-entry run had the two
    tensor-core kernels alike (checkfirst21: 0.975 / 0.974), the full grid not (grid21c: 0.966 / 0.994). Both counts
    are printed."""
    fast, firsts = [], {}
    for c in cell.values():
        for v, r in c.items():
            if r.get("pass_ms") and len(r["pass_ms"]) >= 2 and min(r["pass_ms"]) > 0:  # --passes 4: the first two
                firsts.setdefault(v, []).append(r["pass_ms"][0] / r["pass_ms"][1])
        a, b = c.get(ref), c.get("sdpa_cudnn")
        if a and b and a.get("ok") and a.get("pass_ms") and b.get("pass_ms"):
            fast.append(min(b["pass_ms"]) / min(a["pass_ms"]))
    if not fast:
        return []
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return [f"{ref} / cuDNN on each entry's faster pass: >= 1.0 in {sum(x >= 1.0 for x in fast)} of {len(fast)} "
            f"cells, worst {min(fast):.3f}",
            "first pass / second pass, median over cells: " + ", ".join(
                f"{v} {med(xs):.3f}" for v, xs in firsts.items() if v in (ref, "sdpa_cudnn", "sdpa_flash"))]


def clock_lines(rows: list) -> list[str]:
    """Runs with the SM clock recorded (harness.start_clock): each entry's median clock over its cells, and its
    time / cuDNN's in cycles (ms x MHz) beside the time ratio, where both ran in a cell: how much of a lead is the clock
    the board's power cap gave each kernel (results/probe_gpu/sm_clock_power_cap)."""
    clocks, ratio_t, ratio_c = {}, {}, {}
    cells = {}
    for r in rows:
        if r.get("clock_mhz") and r.get("median_ms"):
            clocks.setdefault(r["variant"], []).append(r["clock_mhz"])
            cells.setdefault((r["dtype"], r["d"], r["n"], r["causal"]), {})[r["variant"]] = r
    if not clocks:
        return []
    for c in cells.values():
        b = c.get("sdpa_cudnn")
        for v, r in c.items():
            if b is not None and v != "sdpa_cudnn":
                ratio_t.setdefault(v, []).append(r["median_ms"] / b["median_ms"])
                ratio_c.setdefault(v, []).append(r["median_ms"] * r["clock_mhz"] / (b["median_ms"] * b["clock_mhz"]))
    med = statistics.median
    lines = ["SM clock (MHz), median over cells: " + ", ".join(f"{v} {med(xs):.0f}" for v, xs in clocks.items())]
    if ratio_t:
        lines.append("time / cuDNN's, median over cells, in time | in cycles: " + ", ".join(
            f"{v} {med(ratio_t[v]):.3f} | {med(ratio_c[v]):.3f}" for v in ratio_t))
    return lines


# The rule that turns the table into defaults (time / base time per cell, both checked ok): a build goes into
# CONFIGS[d] when its geomean over all cells of d is <= 0.99 and no cell is over 1.03; into SIZE_RULES up to the
# largest measured N (<= SIZE_MAX_N) for which that holds over the cells at or below it; otherwise it stays off.
ALL_GAIN, WORST_LOSS = 0.99, 1.03


def decisions(rows, ref: str | None = None) -> list[str]:
    """Per (d, build): geomean time / the reference build's (reference(): base, else forward()'s default, else the
    first timed) at N <= SIZE_MAX_N and above, the worst cell, the geomean over every cell against the control
    (default-again, forward()'s build timed a second time; '-' without one): what the build gains beyond the run's
    order and noise floor), and the rule's call; with causal and non-causal cells, per flag too, against the same
    reference."""
    ref = ref or reference(rows)

    def cell(r):
        return r["dtype"], r["d"], r["causal"], r["n"]
    timed = [r for r in rows if r.get("ok") and r.get("median_ms")]
    base = {cell(r): r["median_ms"] for r in timed if r["variant"] == ref}
    ctrl = {cell(r): r["median_ms"] for r in timed if r["variant"] == CONTROL}
    ratios: dict = {}
    per_ctrl: dict = {}
    for r in timed:
        if not r["variant"].startswith("fa2_wgmma[") or r["variant"] == ref:
            continue
        build = (r["d"], r["variant"][len("fa2_wgmma["):-1])
        if cell(r) in base:
            ratios.setdefault(build, []).append((r["n"], r["median_ms"] / base[cell(r)]))
        if cell(r) in ctrl and r["variant"] != CONTROL:
            per_ctrl.setdefault(build, []).append(r["median_ms"] / ctrl[cell(r)])
    if not ratios:
        return []

    def geo(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
    out = [f"{'d':>3s} {'build':22s} {'N<=' + str(SIZE_MAX_N):>8s} {'N>' + str(SIZE_MAX_N):>8s} "
           f"{'worst':>6s} {'cells':>5s} {'/ctrl':>6s}  rule (<= {ALL_GAIN} geomean, no cell > {WORST_LOSS})"]
    for (d, name), vals in sorted(ratios.items()):
        small = [x for n, x in vals if n <= SIZE_MAX_N]
        large = [x for n, x in vals if n > SIZE_MAX_N]
        every = small + large
        # SIZE_RULES: the largest measured N up to SIZE_MAX_N where the rule holds over every cell at or below it
        wins = [n0 for n0 in sorted({n for n, _ in vals if n <= SIZE_MAX_N})
                if geo([x for n, x in vals if n <= n0]) <= ALL_GAIN and max(x for n, x in vals if n <= n0) <= WORST_LOSS]
        if geo(every) <= ALL_GAIN and max(every) <= WORST_LOSS:
            call = f"CONFIGS[{d}]"
        elif wins:
            call = f"SIZE_RULES[{d}] (Nk <= {wins[-1]})"
        else:
            call = "off"
        vs = per_ctrl.get((d, name))
        out.append(f"{d:3d} {name:22s} {geo(small):8.3f} {geo(large):8.3f} {max(every):6.3f} {len(every):5d} "
                   f"{(f'{geo(vs):.3f}' if vs else '-'):>6s}  {call}")
    if len({r["causal"] for r in rows}) > 1:  # SIZE_RULES entries may be causal-only: the rule per flag as well
        for flag, label in ((True, "causal"), (False, "non-causal")):
            part = decisions([r for r in rows if bool(r["causal"]) == flag], ref)
            out += [f"{line}  [{label} cells]" for line in part[1:]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--variants", default="", help="default (forward()'s rule), default-again (the same build timed "
                    "as a second entry: the run's noise and order floor), default-memset (the same after a "
                    "torch.zeros launch, as before v6e), default+KNOB=V[+KNOB=V] (forward()'s build with these knobs), "
                    "names of fa2_wgmma.named_builds, each optionally @d1+d2 (only at those head dims); default: "
                    f"{DEFAULT_VARIANTS}")
    ap.add_argument("--causal", default="0,1", choices=("0", "1", "0,1", "1,0"),
                    help="0 (non-causal), 1 (causal) or both; decisions() over one kind of cell speaks for that kind only")
    ap.add_argument("--sdpa", default=",".join(SDPA), help="SDPA backends beside (default: flash,cudnn)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new cell after this many seconds")
    ap.add_argument("--no-rotate", dest="rotate", action="store_false",
                    help="time each cell's entries in the listed order (default: a Williams-design row per cell, see "
                    "rotate())")
    ap.add_argument("--order", choices=("abba", "once"), default="abba",
                    help="abba: every cell's entries timed in order, then in reverse (the mean of both); once: in "
                    "order only. Identical builds timed first and third in one cell differed by 0-8%% (mean ~3%%, the "
                    "first faster: results/fwd_wgmma_d64_tiles/bc192), so 'once' favours the first entries")
    ap.add_argument("--passes", type=_even_passes, default=2, help="--order abba: timing passes per cell, alternating "
                    "direction, an even count (2: in order then reversed; 4: twice that); an odd count would not cancel "
                    "a drift through the cell")
    ap.add_argument("--warmup-ms", type=float, default=10)
    ap.add_argument("--rep-ms", type=float, default=40)
    ap.add_argument("--summary", default="", help="print the summary of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.summary:
        try:
            res = json.loads(Path(args.summary).read_text())
        except (OSError, ValueError) as exc:  # missing, unreadable or not JSON
            ap.error(f"--summary: cannot read {args.summary}: {exc}")
        if not (isinstance(res, dict) and isinstance(res.get("rows"), list)):
            ap.error(f"--summary: {args.summary} is not an ab_wgmma_speed.json (no list of rows)")
        print(summary(res))
        return 0
    check_args(ap, args)
    from bench import harness

    if harness.no_gpu("ab_wgmma_speed"):
        return 2
    res = run(args)
    print()
    print(summary(res))
    return 1 if any(r.get("ok") is False for r in res["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
