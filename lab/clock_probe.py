"""The SM clock each entry runs at: time and cycles side by side (issues 11 and 14).

Why: two effects in the A/B runs have no explanation in the kernels' work. cuDNN's first pass of a cell runs 3-5%
faster than its second (median over cells 0.965; ours 0.996), and at d = 128 cuDNN runs fp16 2-7% slower than bf16,
where the model prices both alike. The H200 does not hold its 1.98 GHz boost under load (ncu: 1.58-1.71 GHz), so
a kernel's time is cycles / clock, and the clock depends on power: what ran just before, and what the kernel
itself draws. This probe times each entry with the benchmark's own timer (harness.time_fn) while nvidia-smi samples
the SM clock and board power every 50 ms, and writes each timing with the clock and power over its window, so
time differences can be split into cycles and clock.

The sampler and the per-timing clock are bench/harness.py's (start_clock, time_fn); stop 23's clock_probe.json was
written by this script's first form, which sampled on its own (keys mhz, watts, temp_c, throttle_reasons; window from
40 ms after the timing began).

Each cell: every entry checked against float64 first (harness.check_on, first (b, h) pair), then --rounds rounds,
each timing every entry once, in a Williams design's rows (harness.rotate: each entry takes each slot and follows
each other equally often; stop 23's first run rotated cyclically). Output: clock_probe.json, a printed table
(median ms, MHz, W, kilocycles = ms x MHz, and each round's ms and MHz for the drift across rounds).

    PYTHONPATH=. python3 lab/clock_probe.py --out DIR [--cells d:N:causal,...] [--rounds 6] [--rep-ms 300]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness  # noqa: E402

TOKENS, HIDDEN = 16384, 2048


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "results")
    ap.add_argument("--cells", default="128:512:1,128:512:0,128:4096:1,128:4096:0,64:4096:0",
                    help="d:N:causal,... (batch*N = 16k, hidden 2048)")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rep-ms", type=int, default=300)
    args = ap.parse_args(argv)
    cells = harness.cell_list(ap, "--cells", args.cells)
    harness.name_list(ap, "--dtypes", args.dtypes, ("float16", "bfloat16"), "dtype")
    harness.positive_int(ap, "--rounds", args.rounds)
    harness.positive_int(ap, "--rep-ms", args.rep_ms)
    if harness.no_gpu("clock_probe"):
        return 2
    ent = [e for e in harness.entries(["fa2_wgmma", "sdpa_flash", "sdpa_cudnn"], sdpa=("flash", "cudnn"))
           if e.label in ("fa2_wgmma", "sdpa_flash", "sdpa_cudnn")]  # forward()'s own build, the two backends
    if harness.start_clock() is None:
        print("nvidia-smi did not start: no clock to read", file=sys.stderr)
        return 2
    rows, bad = [], 0
    for d, n, causal in cells:
        for dname in args.dtypes.split(","):
            dtype = getattr(torch, dname)
            b, h = max(1, TOKENS // n), HIDDEN // d
            sets = harness.input_sets(b, h, n, n, d, dtype)
            ok = {}
            for e in ent:
                chk = harness.check_on(e, *sets[0], causal)
                ok[e.label] = chk["ok"]
                bad += not chk["ok"]
            live = [e for e in ent if ok[e.label]]
            for r in range(args.rounds):
                for slot, e in enumerate(harness.rotate(live, r)):  # a Williams design's rows
                    # time_fn records the median SM clock and power over its timed calls (harness.start_clock)
                    tm = harness.time_fn(lambda q, k, v, e=e: e.forward(q, k, v, causal), sets, rep_ms=args.rep_ms)
                    rows.append(dict(label=e.label, d=d, n=n, b=b, h=h, causal=causal, dtype=dname, round=r,
                                     slot=slot, **tm))
            del sets
            torch.cuda.empty_cache()
    harness.write_rows(args.out, "clock_probe.json", rows)
    report(rows)
    return 1 if bad else 0


def report(rows) -> None:
    cells = {}
    for r in rows:
        cells.setdefault((r["d"], r["n"], r["causal"], r["dtype"]), {}).setdefault(r["label"], []).append(r)
    print(f"{'cell':28s} {'entry':20s} {'ms':>7s} {'MHz':>6s} {'W':>5s} {'kcyc':>7s}  rounds: ms@MHz")
    for (d, n, c, dt), by in cells.items():
        for label, rs in by.items():
            ms = statistics.median(x["median_ms"] for x in rs)
            mhz = [x["clock_mhz"] for x in rs if "clock_mhz" in x]
            w = [x["power_w"] for x in rs if "power_w" in x]
            m = statistics.median(mhz) if mhz else float("nan")
            print(f"d={d:<3d} N={n:<5d} c={int(c)} {dt:9s} {label:20s} {ms:7.4f} {m:6.0f} "
                  f"{statistics.median(w) if w else float('nan'):5.0f} {ms * m:7.1f}  "
                  + " ".join(f"{x['median_ms']:.4f}@{x.get('clock_mhz', 0):.0f}" for x in rs))


if __name__ == "__main__":
    sys.exit(main())
