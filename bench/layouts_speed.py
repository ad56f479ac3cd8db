"""fa2_wgmma on the layouts models pass, timed beside its contiguous equal-heads self and SDPA (GPU).

    PYTHONPATH=. python bench/layouts_speed.py [--out DIR] [--n 4096,8192] [--d 64,128,96,256]

Per (d, N, causal): batch*N = 16k tokens, H = 2048 // d heads (a multiple of 4), fp16; layouts
  contiguous   q, k, v (B, H, N, d) contiguous (the baseline; checked against the float64 oracle on the
               first (batch, head) pair by bench.harness.check_on)
  bnhd         q, k, v as (B, N, H, d) tensors transposed (what models pass; no copy)
  gqa          k, v with H_kv = H / 4 heads, contiguous
  bnhd_gqa     both
each checked for the same output bits as the contiguous kernel on contiguous, head-expanded copies of
the same values, then timed with bench.harness.time_fn (rotating input sets) in --rounds rounds whose orders are a
Williams design's rows (the mean of the rounds' medians; time_rounds); SDPA flash and cuDNN on
the contiguous inputs for scale. Issue 14's target: strided and GQA within 3% of contiguous at N >= 2k.
Writes layouts_speed.json; prints a table of time ratios to contiguous.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

TOKENS = 16384
HIDDEN = 2048


def heads_for(d: int) -> int:
    return max(4, (HIDDEN // d) // 4 * 4)


LAYOUTS = ("contiguous", "bnhd", "gqa", "bnhd_gqa")


def time_rounds(checked, fn, time_fn, n_rounds: int = 8, warmup_rounds: int = 1) -> int:
    """Times each checked layout (record, input sets; sets None: not timed) n_rounds times, round i in row i of a
    Williams design (harness.rotate: every layout takes every slot and follows every other equally often), and puts
    the mean of the rounds' medians in its record (pass_ms keeps each; harness.rounds). A fixed order put every
    strided layout right after the contiguous one (stop 22's layouts22: strided causal 1.00-1.05x); one pass in
    order and one reversed (stop 23's layouts_abba) left cells at 0.90-1.08x, as the SM clock moved 1545-1980 MHz
    under the board's power cap between and within cells (results/probe_gpu/sm_clock_power_cap). The first warmup_rounds are
    timed and dropped: a cell's first timing follows the checks, with the GPU idle, and ran 2.2% faster at a 2.5%
    higher clock than the rest (clock_probe). n_rounds is rounded up to whole periods of the design over the layouts
    that pass the warm-up (a layout that fails later leaves the others' rounds unbalanced). Returns the count of
    timings that raised."""
    bad = 0
    live = [(rec, sets) for rec, sets in checked if sets is not None]

    def time_one(rec, sets):
        nonlocal bad
        try:
            return time_fn(fn, sets)
        except Exception as exc:
            bad += 1
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            return None

    for i in range(warmup_rounds):
        for rec, sets in harness.rotate(live, i):
            if rec.get("ok"):
                time_one(rec, sets)
    # the design balances over whole periods of its rows (n rows for an even count of layouts, 2n for an odd one), so
    # the measured rounds are rounded up to whole periods, counted from row 0, over the layouts still ok
    live = [(rec, sets) for rec, sets in live if rec.get("ok")]
    period = len(live) if len(live) % 2 == 0 else 2 * len(live)
    rounds = max(1, -(-max(1, n_rounds) // max(1, period))) * max(1, period)
    times = {id(rec): [] for rec, _ in live}
    for i in range(rounds):
        for rec, sets in harness.rotate(live, i):
            if rec.get("ok") and (t := time_one(rec, sets)) is not None:
                times[id(rec)].append(t)
    for rec, _ in live:
        ts = times[id(rec)]
        if rec.get("ok") and len(ts) == rounds:
            rec.update(ts[0], **harness.rounds(ts))
    return bad


def make_sets(b, h, h_kv, n, d, layout, n_sets, dtype):
    import torch

    sets = []
    for i in range(n_sets):
        g = torch.Generator(device="cuda").manual_seed(1000 + i)

        def mk(heads):
            if layout.startswith("bnhd"):
                return torch.randn(b, n, heads, d, generator=g, device="cuda").to(dtype).transpose(1, 2)
            return torch.randn(b, heads, n, d, generator=g, device="cuda").to(dtype)

        sets.append((mk(h), mk(h_kv), mk(h_kv)))
    return sets


def main(argv=None) -> int:
    import torch

    from kernels import fa2_wgmma

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    ap.add_argument("--n", default="4096,8192")
    ap.add_argument("--d", default="64,128,96,256")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8, help="timings of each layout, in Williams-design rounds")
    args = ap.parse_args(argv)
    harness.int_list(ap, "--n", args.n)
    harness.int_list(ap, "--d", args.d, choices=fa2_wgmma.HEAD_DIMS, why="fa2_wgmma's head dims")
    harness.flag_list(ap, "--causal", args.causal)
    harness.positive_int(ap, "--sets", args.sets)
    harness.positive_int(ap, "--rounds", args.rounds)
    if harness.no_gpu("layouts_speed"):
        return 2
    dtype = torch.float16
    harness.start_clock()  # each timing records the SM clock over its window
    ent = {e.label: e for e in harness.entries(["fa2_wgmma", "sdpa_flash", "sdpa_cudnn"], sdpa=("flash", "cudnn"))}
    rows, bad = [], 0
    for d in [int(x) for x in args.d.split(",")]:
        h = heads_for(d)
        for n in [int(x) for x in args.n.split(",")]:
            b = max(1, TOKENS // n)
            for causal in [bool(int(x)) for x in args.causal.split(",")]:
                checked = []  # (record, input sets) of each layout, checked before any is timed
                for layout in LAYOUTS:
                    h_kv = h // 4 if layout.endswith("gqa") else h
                    sets = make_sets(b, h, h_kv, n, d, layout, args.sets, dtype)
                    rec = dict(kernel="fa2_wgmma", layout=layout, d=d, n=n, b=b, h=h, h_kv=h_kv, causal=causal,
                               flops=harness.flops(b, h, n, n, d, causal))
                    try:
                        q, k, v = sets[0]
                        o = fa2_wgmma.forward(q, k, v, causal=causal)[0]
                        if layout == "contiguous":
                            chk = harness.check_on(ent["fa2_wgmma"], q, k, v, causal)
                            rec.update(rel_err=chk["rel_err"], ok=chk["ok"])
                        else:
                            rep = h // h_kv
                            ref = fa2_wgmma.forward(q.contiguous(), k.repeat_interleave(rep, 1),
                                                    v.repeat_interleave(rep, 1), causal=causal)[0]
                            rec.update(ok=bool(torch.equal(o, ref)), same_bits_as_contiguous=bool(torch.equal(o, ref)))
                    except Exception as exc:
                        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
                    bad += not rec["ok"]
                    checked.append((rec, sets if rec["ok"] else None))
                bad += time_rounds(checked, lambda q_, k_, v_: fa2_wgmma.forward(q_, k_, v_, causal=causal),
                                   harness.time_fn, args.rounds)
                base = checked[0][0].get("median_ms")
                for rec, _ in checked:
                    if "median_ms" in rec:
                        rec.update(tflops=rec["flops"] / rec["median_ms"] / 1e9,
                                   ratio_to_contiguous=rec["median_ms"] / base if base else None)
                    rows.append(rec)
                del checked
                sets = make_sets(b, h, h, n, d, "contiguous", args.sets, dtype)
                for label in ("sdpa_flash", "sdpa_cudnn"):
                    r = harness.measure(ent[label], sets, causal)
                    r.update(layout="contiguous", ratio_to_contiguous=(r["median_ms"] / base) if base and "median_ms" in r else None)
                    rows.append(r)
                del sets
                torch.cuda.empty_cache()
    harness.write_rows(args.out, "layouts_speed.json", rows)
    print(f"{'kernel':12s} {'layout':10s} {'d':>4s} {'N':>6s} {'causal':>6s} {'ms':>8s} {'TFLOP/s':>8s} {'t/contig':>8s}  ok")
    for r in rows:
        ms = r.get("median_ms")
        print(f"{r.get('kernel', r.get('label')):12s} {r.get('layout', ''):10s} {r['d']:4d} {r['n']:6d} {str(r['causal']):>6s} "
              f"{ms if ms is None else round(ms, 4)!s:>8s} {round(r['tflops'], 1) if 'tflops' in r else '-'!s:>8s} "
              f"{round(r['ratio_to_contiguous'], 3) if r.get('ratio_to_contiguous') else '-'!s:>8s}  "
              f"{r.get('ok', '-')}{' ' + r['error'] if 'error' in r else ''}{' ' + r['skipped'] if 'skipped' in r else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
