"""The tensor cores' attainable rate in FLOP per SM clock, per instruction path, and the other pipes' (issue 11).

Runs lab/tc_ceiling.cu's loops (wgmma, mma.sync, FFMA, ex2, shared loads), one CTA per SM (wgmma: a dynamic
shared-memory request that only one CTA fits; the others: CTAS_PER_SM CTAs each asking for 1/CTAS_PER_SM of it), and reads
each CTA's start and end on its SM's clock64 and its SM id. Per SM: FLOPs of its CTAs / its busy interval (first start
to last end, so CTAs that did not fit together and ran in turn are timed as they ran, and named) -> FLOP/clk/SM; the
median over SMs and --reps launches is the config's rate. The launch's event time gives the clock it ran at
(interval / time): a cross-check, not part of the rate. The FP32 pipe
(FFMA lane-ops), the MUFU (ex2 results) and shared memory (bytes of 16-byte loads) are measured the same way, per SM
clock, against the figures the model takes from the CUDA guide and the whitepaper (128, 16, 128).

Checks before anything is written: every SM holds the CTAs the launch meant it to (one per SM for wgmma), and no rate
is over the dense peak (4096 FLOP/clk/SM: 989.4 TFLOP/s / 132 SMs / 1.83 GHz, H100 whitepaper), which a loop whose
products were dropped would show.

    PYTHONPATH=. python3 lab/tc_ceiling.py --out DIR        # writes DIR/tc_ceiling.json, prints a table
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = Path(__file__).resolve().parent / "tc_ceiling.cu"
PEAK = 4096  # dense fp16 FLOP/clk/SM (H100 whitepaper: 989.4 TFLOP/s at 1.83 GHz over 132 SMs)
# (path, defines, CTAs per SM, threads per CTA); wgmma: the kernels' shapes (S = Q K^T: WN = Bc, SS; O += P V: WN = d, RS)
WGMMA = [dict(WN=wn, NWG=nwg, RS=rs, WAIT=wait)
         for wn, nwg, rs, wait in [(128, 2, 0, 1), (128, 2, 0, 0), (128, 1, 0, 1), (128, 3, 0, 1), (64, 2, 0, 1),
                                   (64, 3, 0, 1), (176, 2, 0, 1), (256, 2, 0, 1), (128, 2, 1, 1), (64, 2, 1, 1)]]
MMA = [dict(WARPS=w, CTAS=c, CHAINS=8) for w, c in [(4, 2), (4, 1), (8, 1), (8, 2)]]
# the other pipes, per SM clock: FFMA lanes (datasheet 128), ex2 results (CUDA guide CC 9.0: 16), shared-memory bytes
# (32 banks x 4 B: 128); units: (what one op counts, the figure the model uses)
PIPES = {"ffma": ("FP32 lane-ops", 128), "mufu": ("ex2 results", 16), "lds": ("shared bytes", 128)}
# lds at half the warps: its 70 registers fit 16 warps per SM, not 32 (stop 28: asked for 2 x 16 warps, its CTAs ran in
# turn and the per-CTA span read twice the rate)
OTHER = [dict(PIPE=p, WARPS=w, CTAS=c, CHAINS=8) for p in PIPES
         for w, c in ([(8, 2), (16, 1)] if p == "lds" else [(16, 2), (32, 1)])]


def sm_rates(records, work_per_cta: float, sms: int, ctas_per_sm: int):
    """records: (start, end, SM id) per CTA, start and end on that SM's clock64. Per SM, the work of its CTAs over its
    busy interval (first start to last end), so CTAs that did not fit together and ran one after the other are timed
    as they ran. Returns (per-SM rates, their median, the median interval in cycles, problems): an SM count or CTAs per
    SM other than asked, and SMs whose CTAs did not overlap (not co-resident: the rate is then one CTA's)."""
    per_sm, problems = {}, []
    unwritten = sum(1 for t0, t1, sm in records if sm < 0 or t1 <= t0)
    if unwritten:  # out starts at -1: a CTA that never reached its end_span (or a clock that did not advance)
        problems.append(f"{unwritten} CTAs wrote no interval")
    for t0, t1, sm in records:
        if sm >= 0 and t1 > t0:
            per_sm.setdefault(sm, []).append((t0, t1))
    if not per_sm:
        return {}, float("nan"), float("nan"), problems
    counts = {len(v) for v in per_sm.values()}
    if len(per_sm) != sms or counts != {ctas_per_sm}:
        problems.append(f"{len(per_sm)} SMs, CTAs per SM {sorted(counts)}")
    spans = {sm: max(t1 for _, t1 in v) - min(t0 for t0, _ in v) for sm, v in per_sm.items()}
    rates = {sm: work_per_cta * len(per_sm[sm]) / spans[sm] for sm in per_sm}
    # co-resident CTAs overlap; CTAs that ran in turn leave an interval of about the sum of their own spans
    serial = [sm for sm, v in per_sm.items() if len(v) > 1 and spans[sm] > 1.5 * max(t1 - t0 for t0, t1 in v)]
    if serial:
        problems.append(f"{len(serial)} of {len(per_sm)} SMs ran their {ctas_per_sm} CTAs one after another "
                        "(not co-resident: registers or smem)")
    return rates, statistics.median(rates.values()), statistics.median(spans.values()), problems


def run_config(path: str, cfg: dict, iters: int, reps: int, sms: int, smem_max: int) -> dict:
    import torch

    from kernels import loader

    if path == "wgmma":
        defines = {k: cfg[k] for k in ("WN", "NWG", "RS", "WAIT")}
        fn = loader.get_function(SOURCE, "wgmma_ceiling", defines=defines, arch="sm_90a")
        threads, ctas_per_sm, smem = cfg["NWG"] * 128, 1, smem_max - 4096  # with the static start[] / end[]: one CTA per SM
        flops_cta = cfg["NWG"] * iters * 4 * 2 * 64 * cfg["WN"] * 16
    else:
        kernel = "mma_ceiling" if path == "mma_sync" else f"{cfg['PIPE']}_ceiling"
        fn = loader.get_function(SOURCE, kernel, defines={"CHAINS": cfg["CHAINS"]}, arch="sm_90a")
        threads, ctas_per_sm = cfg["WARPS"] * 32, cfg["CTAS"]
        smem = smem_max // ctas_per_sm - 20 * 1024  # at most ctas_per_sm CTAs fit an SM (lds: 16 KB static besides)
        per_op = {"mma_sync": 2 * 16 * 8 * 16 / 32, "ffma": 1, "mufu": 1, "lds": 16}[cfg.get("PIPE", path)]
        flops_cta = threads * iters * cfg["CHAINS"] * per_op  # per thread: CHAINS ops per iteration
    grid = sms * ctas_per_sm
    out = torch.zeros(3 * grid, dtype=torch.int64, device="cuda")
    sink = torch.zeros(threads, dtype=torch.float32, device="cuda")
    rates, mhz, bad = [], [], []
    for rep in range(reps + 1):  # the first launch warms up and is dropped
        out.fill_(-1)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn.launch((grid, 1, 1), (threads, 1, 1), [out, sink, iters], shared_mem=smem)
        e1.record()
        torch.cuda.synchronize()
        if rep == 0:
            continue
        per_sm, rate, cycles, problems = sm_rates(out.view(grid, 3).cpu().tolist(), flops_cta, sms, ctas_per_sm)
        bad += [f"rep {rep}: {p}" for p in problems]
        rates.append(rate)
        ms = e0.elapsed_time(e1)
        mhz.append(cycles / (ms * 1e3))
    rate = statistics.median(rates)
    unit, peak = PIPES.get(cfg.get("PIPE"), ("FLOP", PEAK))
    if rate > peak * 1.01:
        bad.append(f"{rate:.0f} {unit}/clk/SM is over the datasheet's {peak}: work dropped?")
    key = "flop_per_clk_sm" if unit == "FLOP" else "per_clk_sm"
    return dict(path=path if path != "other" else cfg["PIPE"], config=cfg, iters=iters, ctas_per_sm=ctas_per_sm,
                threads=threads, unit=unit, **{key: rate}, of_peak=rate / peak, datasheet=peak, rates=rates,
                clock_mhz=statistics.median(mhz), problems=bad)


def main(argv=None) -> int:
    import torch

    from bench import harness
    from kernels import loader

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "results")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=4000)
    args = ap.parse_args(argv)
    harness.positive_int(ap, "--reps", args.reps)
    harness.positive_int(ap, "--iters", args.iters)
    if harness.no_gpu("tc_ceiling"):
        return 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    smem_max = loader.max_dynamic_smem()
    rows = []
    for path, cfgs in (("wgmma", WGMMA), ("mma_sync", MMA), ("other", OTHER)):
        for cfg in cfgs:
            try:
                r = run_config(path, cfg, args.iters, args.reps, sms, smem_max)
            except Exception as exc:  # noqa: BLE001 -- one config's failure is reported, the others still run
                r = dict(path=path, config=cfg, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(r)
            if "error" in r:
                print(f"{path:8s} {cfg}  ERROR {r['error']}")
            else:
                rate = r.get("flop_per_clk_sm", r.get("per_clk_sm"))
                print(f"{r['path']:8s} {cfg}  {rate:7.1f} {r['unit']}/clk/SM ({r['of_peak']:.3f} of {r['datasheet']}) "
                      f"at {r['clock_mhz']:.0f} MHz {'  ' + '; '.join(r['problems']) if r['problems'] else ''}")
    path = harness.write_rows(args.out, "tc_ceiling.json", rows)
    print(f"wrote {path}")
    return 1 if any("error" in r or r.get("problems") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
