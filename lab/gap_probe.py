"""What a do_bench timing holds besides the kernel: device time (CUPTI), host launch work, back-to-back time (GPU).

Why: at d = 128 the benchmark's timings (bench/harness.time_fn: triton's do_bench, an L2 flush before each call, events
around each call) carried 12-17% more cycles than ncu's durations of the same kernels, for fa2_wgmma and cuDNN alike
(stop 23: clock_probe against stop 22's moonshot_ncu), and fa2_wgmma trails cuDNN by 1-3% only where kernels are
~0.1 ms. A call's host work overlaps the flush kernel; whatever exceeds it lands inside the event window. Per entry and
cell this probe reports, after a float64 check on the timed inputs:
  bench_ms    harness.time_fn's median (what every table of this repo reports)
  device_ms   the median over calls of the summed CUDA kernel durations of one call (torch.profiler / CUPTI), each
              call behind a flush as in do_bench, the flush's own kernel left out
  host_us     harness.host_us: the host's work per call, calls not synchronised
  b2b_ms      wall time of 50 calls queued back to back with no flush, between two events, per call
  gap_us      bench_ms - device_ms: launch latency plus host work the flush did not hide

    PYTHONPATH=. python3 lab/gap_probe.py --out DIR [--cells d:N:causal,...]
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
FLUSH_BYTES = 256 * 1024 * 1024  # do_bench's cache buffer (triton.testing: 256 MB of int32, zeroed before each call)


def device_ms(fn, sets, calls=30) -> tuple[float, list, int]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    for i in range(3):
        cache.zero_()
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            cache.zero_()
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
    total, names, flushes = 0.0, [], 0
    for ev in prof.key_averages():  # per kernel name: its summed device time over the calls
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        if not t:
            continue
        if "fill" in ev.key.lower() or "memset" in ev.key.lower():  # the flush (cache.zero_())
            flushes += ev.count
            continue
        total += t
        names.append(f"{ev.key[:60]} x{ev.count}")
    return total / calls / 1e3, names, flushes  # us -> ms per call


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "results")
    ap.add_argument("--cells", default="128:512:1,128:512:0,128:4096:1,64:512:1,128:16384:0")
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args(argv)
    cells = harness.cell_list(ap, "--cells", args.cells)
    harness.name_list(ap, "--dtype", args.dtype, ("float16", "bfloat16"), "dtype")
    if harness.no_gpu("gap_probe"):
        return 2
    ent = [e for e in harness.entries(["fa2_wgmma", "sdpa_flash", "sdpa_cudnn"], sdpa=("flash", "cudnn"))
           if e.label in ("fa2_wgmma", "sdpa_flash", "sdpa_cudnn")]
    dtype = getattr(torch, args.dtype)
    rows, bad = [], 0
    for d, n, causal in cells:
        b, h = max(1, TOKENS // n), HIDDEN // d
        sets = harness.input_sets(b, h, n, n, d, dtype)
        for e in ent:
            rec = dict(label=e.label, d=d, n=n, b=b, h=h, causal=causal, dtype=args.dtype)
            chk = harness.check_on(e, *sets[0], causal)
            rec["ok"] = chk["ok"]
            if not chk["ok"]:
                bad += 1
                rows.append(rec)
                continue

            def fn(q, k, v, e=e):
                return e.forward(q, k, v, causal)
            rec["bench_ms"] = harness.time_fn(fn, sets)["median_ms"]
            rec["device_ms"], rec["kernels"], rec["flushes"] = device_ms(fn, sets)
            first = sets[0]
            rec["host_us"] = harness.host_us(lambda fn=fn, first=first: fn(*first), calls=300)
            rec["b2b_ms"] = harness.back_to_back_ms(fn, sets)
            rec["bench_again_ms"] = harness.time_fn(fn, sets)["median_ms"]
            rec["gap_us"] = (min(rec["bench_ms"], rec["bench_again_ms"]) - rec["device_ms"]) * 1e3
            rows.append(rec)
        del sets
        torch.cuda.empty_cache()
    harness.write_rows(args.out, "gap_probe.json", rows)
    print(f"{'cell':22s} {'entry':11s} {'bench ms':>9s} {'again':>8s} {'device':>8s} {'b2b':>8s} {'host us':>8s} "
          f"{'gap us':>7s}  kernels")
    for r in rows:
        if "bench_ms" not in r:
            print(f"d={r['d']} N={r['n']} c={int(r['causal'])} {r['label']} check failed")
            continue
        print(f"d={r['d']:<3d} N={r['n']:<5d} c={int(r['causal'])}   {r['label']:11s} {r['bench_ms']:9.4f} "
              f"{r['bench_again_ms']:8.4f} {r['device_ms']:8.4f} {r['b2b_ms']:8.4f} {r['host_us']:8.1f} "
              f"{r['gap_us']:7.1f}  {len(r['kernels'])}: {'; '.join(k[:40] for k in r['kernels'])}")
    print("median gap us per entry:", {lab: round(statistics.median(r["gap_us"] for r in rows
                                                                     if r["label"] == lab and "gap_us" in r), 1)
                                       for lab in {r["label"] for r in rows}})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
