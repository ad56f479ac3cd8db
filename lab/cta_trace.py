"""When each CTA of fa2_tc ran: the schedule the L2 residency model assumes, measured.

Why: fa2_tc and SDPA flash run the same tiling (Br = 128, Bc = 64 at d = 128, 2 CTAs/SM, Q blocks fastest, a backward
key sweep), and SDPA flash's DRAM bytes are within 3% of the model at N = 16k-64k, where fa2_tc's are 0.84x / 0.88x
at 16k-32k and 1.42x at 64k (results/gpu_model_known_gaps.json). The model assumes a wave's CTAs sweep the key
blocks in near lockstep. lab/l2_sim.py walks the accesses through an LRU: in lockstep it gives the model's bytes;
if each CTA runs at its own pace, the misses fall at 16k-32k (the waves blur, straddled heads overlap) and, past some
spread, rise at 64k (docs/l2_pace.png; no one random spread fits all three, so the pace itself is wanted).
This probe measures the pace (issue 11): a build with CTA_TRACE=1 (kernels/cuda/cta_trace.cuh, in fa2_tc.cu) writes
each CTA's %globaltimer at its start, at each quarter of its sweep and at its end, and its SM. (`--kernel fa2_wgmma`,
the control, traced CONFIGS[d], whose DRAM bytes ncu has within 6% of the model; fa2_wgmma_tma.cu's CTA_TRACE left
with the experiments' knobs in issue 40 and lives at commit 0bb604a.) `python -m lab.l2_sim --trace FILE` walks
the recorded schedule; the prediction before the run is in results/ncu_fa2_tc_dram/cta_trace_prediction.json.

Per length: the traced build's output must equal its untraced build's (CONFIGS[d], explicit) bit for bit (the trace
only stores), and a small
causal Nq != Nk shape is checked against float64 first; both builds are timed (harness.time_fn), so a trace that
changes the schedule shows; then --traces launches are recorded, each after an L2-flushing write of 2x the L2.

--ncu: the traced launches alone (no checks, timings or flushes: ncu flushes the caches before each profiled launch),
each announced as `target launched KERNEL{CONFIG} n=N d=D b=1 h=H causal=0 dtype=fp16` (the traced build's own
config, so its rows are never read as the shipped build's) for gpumodel/measured.read_ncu_csv,
so that under `ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum` each schedule comes with its own DRAM bytes
(`python -m lab.l2_sim --trace FILE --ncu-csv CSV` pairs them).

    PYTHONPATH=. python3 lab/cta_trace.py --out DIR [--kernel fa2_tc] [--seqs 16384,32768,65536]
        [--head-dim 128] [--heads 16] [--ncu]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness  # noqa: E402

WORDS = ("t_start", "t_quarter", "t_half", "t_three_quarters", "t_end", "smid", "steps")
TRACE_WORDS, TRACE_MAX = 8, 1 << 17  # kernels/cuda/cta_trace.cuh's (a test ties them)
UNWRITTEN = (1 << 64) - 1  # the buffer's fill before a launch: a word still holding it was never written


def trace_buffer(kernel):
    """g_cta_trace of the kernel's loaded module (kernels/cuda/cta_trace.cuh), as a (TRACE_MAX, 8) uint64 cupy view."""
    import cupy

    ptr = kernel.module.get_global("g_cta_trace")
    return cupy.ndarray((TRACE_MAX, TRACE_WORDS), dtype=cupy.uint64, memptr=ptr)


def read_trace(kernel, n_ctas: int):
    """The first n_ctas records of g_cta_trace as a (n_ctas, 8) uint64 numpy array."""
    import cupy

    return cupy.asnumpy(trace_buffer(kernel)[:n_ctas])


def relative_records(arr) -> list[list[int]]:
    """Each CTA's 7 words with the times relative to the earliest start; a CTA with any word unwritten (UNWRITTEN) is
    all -1, which lab/l2_sim.py names as a CTA that did not record a whole sweep."""
    written = [r for r in arr.tolist() if UNWRITTEN not in r[:7]]
    t0 = min((r[0] for r in written), default=0)
    return [[r[0] - t0, r[1] - t0, r[2] - t0, r[3] - t0, r[4] - t0, r[5], r[6]] if UNWRITTEN not in r[:7] else [-1] * 7
            for r in arr.tolist()]


def summarise(rec: dict) -> dict:
    """The pace the walk needs: each CTA's ns per key step (start to end) against the median, its 10th / 50th / 90th
    percentiles, and the kernel's span; an error where no CTA recorded a whole sweep."""
    ctas = [c for c in rec["ctas"] if c[6] > 0 and c[4] >= c[0] >= 0]
    pace = [(c[4] - c[0]) / c[6] for c in ctas]
    if not pace or statistics.median(pace) <= 0:
        return dict(error=f"{len(rec['ctas']) - len(ctas)} of {len(rec['ctas'])} CTAs recorded no whole sweep")
    med = statistics.median(pace)
    rel = sorted(p / med for p in pace)
    q = lambda f: rel[min(len(rel) - 1, int(f * len(rel)))]  # noqa: E731
    return dict(median_ns_per_step=med, pace_p10=q(0.1), pace_p50=q(0.5), pace_p90=q(0.9),
                makespan_us=(max(c[4] for c in ctas) - min(c[0] for c in ctas)) / 1e3,
                unrecorded_ctas=len(rec["ctas"]) - len(ctas))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "results")
    ap.add_argument("--seqs", default="16384,32768,65536")
    ap.add_argument("--kernel", default="fa2_tc", choices=("fa2_tc", "fa2_wgmma"))
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--traces", type=int, default=2)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--ncu", action="store_true", help="the traced launches alone, for a run under ncu")
    args = ap.parse_args(argv)
    if args.kernel == "fa2_wgmma":
        ap.error("--kernel fa2_wgmma: its CTA_TRACE build lives at commit 0bb604a (removed in issue 40)")
    seqs = harness.int_list(ap, "--seqs", args.seqs)
    harness.positive_int(ap, "--heads", args.heads)
    harness.positive_int(ap, "--traces", args.traces)
    d = args.head_dim
    for n in seqs:
        if -(-n // 128) * args.heads > TRACE_MAX:
            ap.error(f"--seqs {n} with --heads {args.heads}: over the {TRACE_MAX} CTAs the trace buffer holds")
    if harness.no_gpu("cta_trace"):
        return 2
    import cupy
    import torch

    from kernels import fa2_tc, loader

    dtype = getattr(torch, args.dtype)
    bf16 = dtype == torch.bfloat16
    mod, shipped = fa2_tc, dict(fa2_tc.CONFIGS[d])
    cfg = dict(shipped, CTA_TRACE=1)
    defs = fa2_tc.defines_for(d, bf16, cfg)
    block_q, block_k = defs["BLOCK_M"], defs["BLOCK_N"]
    kernel = loader.get_function(fa2_tc.SOURCE, fa2_tc.KERNEL, defines=defs, device=torch.cuda.current_device())
    bad, small = 0, None
    if not args.ncu:  # float64 first, on a shape with tails, Nq != Nk and empty causal rows
        with harness.Poisoned():
            q, k, v = harness.random_qkv(2, 3, 300, 173, d, dtype, seed=7)
            small = harness.compare(*mod.forward(q, k, v, causal=True, config=cfg), q, k, v, True, args.dtype)
        print(f"traced build, B=2 H=3 Nq=300 Nk=173 causal, against float64: {small}")
        bad += not small["ok"]
    flush = None if args.ncu else torch.empty(2 * 64 * 2 ** 20 // 4, dtype=torch.float32, device="cuda")
    dname = {"float16": "fp16", "bfloat16": "bf16"}[args.dtype]
    records = []
    for n in seqs:
        q, k, v = harness.random_qkv(1, args.heads, n, n, d, dtype, seed=n)
        same, t_plain, t_traced = None, {}, {}
        if not args.ncu:
            o_ref, lse_ref = mod.forward(q, k, v, config=shipped)
            o_tr, lse_tr = mod.forward(q, k, v, config=cfg)
            same = bool(torch.equal(o_ref, o_tr) and torch.equal(lse_ref, lse_tr))
            bad += not same
            del o_ref, lse_ref, o_tr, lse_tr
            sets = [(q, k, v)]
            t_plain = harness.time_fn(lambda q, k, v: mod.forward(q, k, v, config=shipped), sets)
            t_traced = harness.time_fn(lambda q, k, v: mod.forward(q, k, v, config=cfg), sets)
        t_r = -(-n // block_q)
        n_ctas = t_r * args.heads
        for rep in range(args.traces):
            trace_buffer(kernel).fill(cupy.uint64(UNWRITTEN))
            if flush is not None:
                flush.zero_()
            torch.cuda.synchronize()
            if args.ncu:
                print(f"target launched {args.kernel}{json.dumps(cfg, separators=(',', ':'))} n={n} d={d} b=1 "
                      f"h={args.heads} causal=0 dtype={dname}", flush=True)
            mod.forward(q, k, v, config=cfg)
            torch.cuda.synchronize()
            arr = read_trace(kernel, n_ctas)
            ctas = relative_records(arr)
            complete = all(c[6] == -(-n // block_k) and c[4] >= c[0] >= 0 for c in ctas)
            bad += not complete
            rec = dict(kernel=args.kernel, config=cfg, batch=1, heads=args.heads, n=n, d=d, dtype=args.dtype,
                       causal=False, grid=[t_r, args.heads], block_q=block_q, block_k=block_k,
                       sweep="backward", rep=rep, words=list(WORDS), identical_to_untraced=same, complete=complete,
                       plain_ms=t_plain.get("median_ms"), traced_ms=t_traced.get("median_ms"), under_ncu=args.ncu,
                       ctas=ctas)
            rec["summary"] = summarise(rec)
            records.append(rec)
            print(f"N={n} rep {rep}: same output {same}, complete {complete}, plain {t_plain.get('median_ms')} ms, "
                  f"traced {t_traced.get('median_ms')} ms, {rec['summary']}", file=sys.stderr if args.ncu else sys.stdout,
                  flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"cta_trace_{args.kernel}.json"
    path.write_text(json.dumps(dict(env=harness.environment(), small_check=small, records=records)))
    print(f"wrote {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
