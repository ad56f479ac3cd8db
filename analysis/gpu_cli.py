"""`fa-traffic predict` and `fa-traffic validate`: the GPU model (gpumodel.gpu_model) from the command line.

    fa-traffic predict --kernel fa2_wgmma --batch 4 --heads 16 --seq-len 4k --head-dim 128 --dtype fp16
    fa-traffic predict --kernel sdpa_cudnn --seq-len 2k,8k --head-dim 64 --causal --format json
    fa-traffic validate [--plot FILE.png] [--format table|csv|json|markdown] [--all] [--details] [--progress]

predict's default B, H are report's: the benchmarks' full GPU (analysis.report_gpu.full_gpu_problem, B = 16k/N,
H = 2048/d), so the two print the same figures for the same kernel and shape; its header names the GPU (--gpu, one of
gpumodel.gpu_model.COVERED_GPUS) and the B, H. validate shows progress on stderr (a terminal, or --progress) and fits
100 columns unless --details.

analysis/cli.py registers the two subcommands (add_subcommands) and dispatches to run(); the logic is here.
predict refuses (one line, exit 2) what the kernel would refuse (its launcher's checks: head dims, shared memory, B*H
past the 65535 grid rows, a knob its source cannot build) and rows past the model's own limit, report_gpu.MAX_MODEL_Q_BLOCKS
Q blocks (report falls back to the papers' roofline there;
predict has nothing else to print).
Imports no torch: the descriptors come from torch-free modules (gpumodel.descriptors).
"""
from __future__ import annotations

import json
import sys

from analysis.format import human_bytes, human_time, is_tty, render_csv, render_markdown, render_table, say
from analysis.report_gpu import MAX_MODEL_Q_BLOCKS

PREDICT_KEYS = ("kernel", "build", "gpu", "batch", "heads", "seq_q", "seq_k", "head_dim", "dtype", "causal",
                "block_q", "block_k", "ctas_per_sm", "time_s", "gpu_time_s", "host_s", "tflops", "l2_bytes",
                "dram_bytes", "requests_bytes", "dsmem_bytes", "bound", "terms", "track_record")
# track_record: how the model's time compared with every committed held-out timing of this kernel, head dim and causal
# flag at N >= 2k (gpumodel/accuracy.py, results/gpu_model_accuracy.json): cells, the median of model / measured,
# p10, p90, the share within validate's band and the band; None where nothing of the kind was timed
# time_s is the time the project's benchmarks measure (bench/harness.time_fn: do_bench's calls queued back to back, so
# the host's launch work overlaps the GPU's: the larger of the two, gpu_model.as_timed); gpu_time_s the kernel alone,
# host_s the launcher's measured host work per call (results/launch_overhead.json). Before stop 23 time_s was
# GPU + host, a single synchronous call's time: at N = 512, d = 128 causal it printed 165 us (208 TFLOP/s) for a kernel
# the benchmark times at 109 us (results/probe_gpu/sm_clock_power_cap), 99 us of it the model's GPU time (gpu_model.as_benchmarked).


def add_subcommands(sub, common_types: dict) -> None:
    """Register predict and validate on cli.py's subparsers (common_types: its argument parsers)."""
    count, pos, lst, gpu = (common_types[k] for k in ("count", "positive", "list", "gpu"))
    p = sub.add_parser("predict", help="the GPU model's time, bound and traffic levels of one kernel")
    p.add_argument("--kernel", required=True, help="a KERNELS name, sdpa_flash or sdpa_cudnn")
    p.add_argument("--batch", type=pos, help="batch B (default: the benchmarks' full GPU, B = 16k/N, as report; "
                                              "1 when only --heads is given)")
    p.add_argument("--heads", type=pos, help="heads H (default: the benchmarks' full GPU, H = 2048/d, as report; "
                                              "1 when only --batch is given)")
    p.add_argument("--gpu", type=gpu, default="h200", help="the GPU to model (default h200; the model covers "
                                                           "gpumodel.gpu_model.COVERED_GPUS)")
    p.add_argument("--seq-len", action="append", type=lst(count), required=True, help="Nq (list allowed)")
    p.add_argument("--seq-len-k", type=count, help="Nk (default = Nq)")
    p.add_argument("--head-dim", type=pos, required=True)
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--placement", choices=("auto", "sram", "hbm"),
                   help="v_once kernels: f placement (default auto: on chip where the f row fits)")
    p.add_argument("--rescale", choices=("eager", "lazy"),
                   help="v_once kernels: rescale mode (default: the kernel's own, eager for v_once, lazy for v_once_tc)")
    p.add_argument("--knobs", metavar="KNOB=V[,KNOB=V]",
                   help="fa2_wgmma: forward()'s build for each shape with these knobs (kernels.fa2_wgmma.KNOBS), priced "
                        "before it is built, e.g. BLOCK_N=128,PERSISTENT=2")
    p.add_argument("--kv-heads", type=pos, help="split_kv kernels: kv heads H_kv dividing H (default H)")
    p.add_argument("--page-size", type=pos, help="split_kv kernels: a paged cache of pages of this many positions")
    p.add_argument("--cache-lens", type=lst(common_types["cache_len"]),
                   help="split_kv kernels: per-sequence cache lengths (B of them, each 0..Nk; needs --batch)")
    p.add_argument("--num-splits", type=pos, help="split_kv kernels: splits S (default counting/split_rule.py's)")
    p.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    p.add_argument("--pass", dest="pass_name", choices=("forward", "backward", "train"), default="forward",
                   help="forward (default); backward: FA2 Alg. 2 (gpumodel/backward_model.py: fa2_wgmma (v4), "
                        "fa2_wgmma_v3 (backward only), fa2, fa2_v1, sdpa_flash, sdpa_cudnn); train: forward + backward")
    v = sub.add_parser("validate", help="the GPU model against every committed measurement (exit 1 off band)")
    v.add_argument("--plot", metavar="FILE.png", help="model vs measured plot")
    v.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    v.add_argument("--all", action="store_true", help="list every cell, not only the summary and misses")
    v.add_argument("--details", action="store_true",
                   help="every field of each cell listed (source file, the build's knobs, band, split) and the text "
                        "in full; without it the table output fits 100 columns")
    v.add_argument("--progress", action="store_true",
                   help="show progress on stderr even when it is not a terminal (on a terminal it always shows)")


def _flat(seq):
    """The lengths asked for, in order, each once (as report's lists: 1k,1k is one row)."""
    return list(dict.fromkeys(x for item in seq or [] for x in (item if isinstance(item, list) else [item])))


DECODE_FLAGS = ("kv_heads", "page_size", "cache_lens", "num_splits")


def decode_records(args, error) -> list[dict]:
    """predict for the split-KV decode kernels (issue 44): gpumodel/decode_model.py at each Nq."""
    from counting.gpus import GPUS
    from gpumodel import decode_model as dm

    if args.gpu not in ("h100", "h200"):
        raise error(f"the decode model prices Hopper GPUs (--gpu h100, h200), not the {GPUS[args.gpu].name}")
    for flag in ("placement", "rescale", "knobs"):
        if getattr(args, flag, None):
            raise error(f"--{flag} does not apply to {args.kernel}")
    if args.cache_lens and args.batch is None:
        raise error("--cache-lens gives one length per sequence: give --batch B too")
    dec = {"kv_heads": args.kv_heads, "page_size": args.page_size, "num_splits": args.num_splits,
           "cache_seqlens": args.cache_lens}
    recs = []
    for n_q in _flat(args.seq_len):
        n_k = args.seq_len_k or n_q
        batch, heads = shape(args, n_q, n_k)
        try:
            if n_q > 64:
                raise ValueError(f"{args.kernel} takes Nq <= 64 query rows (decoding); Nq = {n_q} is a prefill")
            desc = dm.describe(args.kernel, args.head_dim, args.dtype)
            p = dm.predict(desc, batch, heads, n_q, n_k, args.head_dim, args.dtype, args.causal, args.gpu, **dec)
            tr = dm.counts(desc, batch, heads, n_q, n_k, args.head_dim, args.dtype, args.causal, args.gpu, **dec)
        except ValueError as e:
            raise error(str(e).splitlines()[0]) from None
        recs.append(dict(kernel=p.kernel, build=p.build, gpu=args.gpu, batch=batch, heads=heads, seq_q=n_q, seq_k=n_k,
                         head_dim=args.head_dim, dtype=args.dtype, causal=args.causal, block_q=p.block_q,
                         block_k=p.block_k, ctas_per_sm=p.ctas_per_sm, time_s=p.time_s,
                         gpu_time_s=p.time_s - p.terms["overhead"], host_s=p.terms["overhead"], tflops=p.tflops,
                         l2_bytes=p.l2_bytes, dram_bytes=p.dram_bytes, requests_bytes=p.requests_bytes, dsmem_bytes=0,
                         bound=p.bound, terms=dict(p.terms), track_record=None, decode=dict(tr.decode),
                         model="gpumodel/decode_model.py: checked on one H100 run: results/decode_model_h100.json"))
    return recs


def predict_records(args, error) -> list[dict]:
    from gpumodel import accuracy
    from gpumodel import decode_model as dm
    from gpumodel import gpu_model as gm
    from gpumodel.descriptors import describe, kernel_names

    if args.kernel in dm.DECODE_KERNELS:
        return decode_records(args, error)
    given = [f"--{f.replace('_', '-')}" for f in DECODE_FLAGS if getattr(args, f, None) is not None]
    if given:
        raise error(f"{given[0]} applies to the decode kernels ({', '.join(dm.DECODE_KERNELS)}), not {args.kernel}")
    names = kernel_names()
    if args.kernel not in names:
        raise error(f"unknown kernel {args.kernel!r}; choose one of {', '.join(names)}")
    if args.gpu not in gm.COVERED_GPUS:
        from counting.gpus import GPUS

        raise error(f"the GPU model covers the {', '.join(GPUS[g].name for g in gm.COVERED_GPUS)} only "
                    f"(--gpu {', '.join(gm.COVERED_GPUS)}: the H200 fitted to its runs, the H100 with the H200's "
                    f"constants, gpumodel/coverage.py), not the {GPUS[args.gpu].name}")
    opts = {}
    if args.placement or args.rescale:
        if args.kernel not in ("v_once", "v_once_tc"):
            raise error(f"--placement/--rescale apply to v_once and v_once_tc, not {args.kernel}")
        # only what was given: the rest is the kernel's own default (v_once rescales eagerly, v_once_tc lazily), the
        # build it runs with no option, whichever of the two flags is given
        opts = {k: v for k, v in (("placement", args.placement), ("rescale", args.rescale)) if v}
    knobs = _knobs(getattr(args, "knobs", None), args.kernel, error)
    track = accuracy.load()
    recs = []
    for n_q in _flat(args.seq_len):
        n_k = args.seq_len_k or n_q
        batch, heads = shape(args, n_q)
        try:
            if knobs is not None:
                from kernels import fa2_wgmma

                if args.head_dim not in fa2_wgmma.CONFIGS:
                    raise ValueError(f"fa2_wgmma supports head dims {fa2_wgmma.HEAD_DIMS}, got d={args.head_dim}")
                opts = dict(config=fa2_wgmma.with_knobs(args.head_dim, n_k, args.causal, knobs))
            desc = describe(args.kernel, args.head_dim, args.dtype, args.causal, n_q=n_q, n_k=n_k, **opts)
            t_r = -(-n_q // desc.block_q)
            if t_r > MAX_MODEL_Q_BLOCKS:  # report's limit: prepare() builds a list per Q block, O(Tr) time and memory
                raise ValueError(f"Nq = {n_q:,} is {t_r:,} Q blocks of {desc.block_q} rows; the GPU model walks every Q "
                                 f"block and takes at most {MAX_MODEL_Q_BLOCKS:,} (report shows the papers' roofline "
                                 "past it)")
            p = gm.predict_work(gm.prepare(desc, batch, heads, n_q, n_k, args.head_dim, args.dtype,
                                           args.causal, gpu=args.gpu), gpu=args.gpu)
        except ValueError as e:
            raise error(str(e).splitlines()[0]) from None
        b = gm.as_benchmarked(p)
        recs.append(dict(kernel=p.kernel, build=p.build, gpu=args.gpu, batch=batch, heads=heads, seq_q=n_q, seq_k=n_k,
                         head_dim=args.head_dim, dtype=args.dtype, causal=args.causal, block_q=p.block_q,
                         block_k=p.block_k, ctas_per_sm=p.ctas_per_sm, time_s=b["time_s"], gpu_time_s=b["gpu_time_s"],
                         host_s=b["host_s"], tflops=b["tflops"],
                         l2_bytes=p.l2_bytes, dram_bytes=p.dram_bytes, requests_bytes=p.requests_bytes,
                         dsmem_bytes=p.dsmem_bytes, bound=b["bound"], terms=dict(p.terms),
                         track_record=_track(args, track),
                         **({"config": opts["config"]} if knobs is not None else {})))
    return recs


def _track(args, table) -> dict | None:
    """predict's track record: the fitted GPU's held-out timings (gpumodel/accuracy.py), or on a GPU the fit is carried
    over to, its own held-out runs (gpumodel/heldout.py), never the other GPU's."""
    from gpumodel import accuracy, coverage, heldout

    if coverage.footing(args.gpu) == coverage.CARRIED:
        return heldout.record(args.gpu, "forward", args.kernel, args.head_dim, args.causal)
    return accuracy.record(args.kernel, args.head_dim, args.causal, table)


def full_gpu(args) -> bool:
    """Neither --batch nor --heads given: each length at the benchmarks' full GPU (report's default too)."""
    return args.batch is None and args.heads is None


def shape(args, n_q: int, n_k: int | None = None) -> tuple[int, int]:
    """(B, H) predict prices at Nq = n_q: as report's rows (analysis.report_gpu.full_gpu_problem by default)."""
    from analysis.report_gpu import full_gpu_problem

    n_k = n_k or getattr(args, "seq_len_k", None)
    return full_gpu_problem(n_q, args.head_dim, n_k) if full_gpu(args) else (args.batch or 1, args.heads or 1)


def header_line(args, recs) -> str:
    """The GPU and the B, H assumed: "fa-traffic predict: the GPU model of the NVIDIA H200 ..., B=4 H=16 (...)"."""
    from analysis.report_gpu import shape_text
    from counting.gpus import GPUS

    shapes = {(r["seq_q"], r["head_dim"]): (r["batch"], r["heads"]) for r in recs}
    return f"fa-traffic predict: the GPU model of the {GPUS[args.gpu].name}, {shape_text(shapes, full_gpu(args))}"


def _knobs(text, kernel, error) -> dict | None:
    """--knobs "A=1,B=2" (or A=1+B=2) -> {"A": 1, "B": 2}; None without it. fa2_wgmma only; which names exist is
    fa2_wgmma.defines_for's to say (describe raises its ValueError)."""
    if text is None:
        return None
    if kernel != "fa2_wgmma":
        raise error(f"--knobs applies to fa2_wgmma, not {kernel}")
    out = {}
    for item in filter(None, text.replace("+", ",").split(",")):
        name, eq, value = item.partition("=")
        if name.strip() in out:  # the later value would win silently, as a repeated flag's did
            raise error(f"--knobs: {name.strip()} given twice")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise error(f"--knobs: {item!r} is not KNOB=integer") from None
        if not eq or not name.strip():
            raise error(f"--knobs: {item!r} is not KNOB=integer")
    if not out:
        raise error("--knobs: no KNOB=V given")
    return out


def _table(header, rows, fmt, recs, file=None, title=None):
    """recs in fmt; title (table and markdown only) names what the table assumed."""
    file = file or sys.stdout
    if fmt == "json":
        json.dump(recs, file, indent=1)
        file.write("\n")
    elif fmt == "csv":
        render_csv(recs, file)
    elif fmt == "markdown":
        if title:
            print(title + "\n", file=file)
        render_markdown(header, rows, file)
    else:
        render_table(header, rows, file=file, title=title)


BWD_KEYS = ("kernel", "pass", "gpu", "batch", "heads", "seq_q", "seq_k", "head_dim", "dtype", "causal", "block_q",
            "block_k", "ctas", "time_s", "tflops", "bound", "terms", "levels", "forward_s", "backward_s", "track_record")


def backward_records(args, error) -> list[dict]:
    """predict --pass backward|train: gpumodel.backward_model at each length (its B, H as the forward's)."""
    from gpumodel import backward_model as bm
    from gpumodel import coverage, heldout

    if args.kernel not in bm.KERNELS:
        raise error(f"--pass {args.pass_name}: the backward model covers {', '.join(bm.KERNELS)}, not {args.kernel}")
    if args.gpu not in bm.COVERED_GPUS:
        raise error(f"the backward model covers the {coverage.names()} only, not --gpu {args.gpu}")
    for flag in ("placement", "rescale", "knobs"):
        if getattr(args, flag, None):
            raise error(f"--{flag} does not apply to --pass {args.pass_name}")
    held_here = bm.held_out_line(args.kernel, args.gpu)  # the model's own held-out cells on this GPU
    recs = []
    for n_q in _flat(args.seq_len):
        b, h = shape(args, n_q)
        n_k = args.seq_len_k or n_q
        try:
            p = bm.predict(args.kernel, b, h, n_q, n_k, args.head_dim, args.dtype, args.causal, gpu=args.gpu)
            t = (bm.predict_train(args.kernel, b, h, n_q, n_k, args.head_dim, args.dtype, args.causal, gpu=args.gpu)
                 if args.pass_name == "train" else None)
        except ValueError as e:
            raise error(str(e).splitlines()[0]) from None
        held = held_here
        if held is None and coverage.footing(args.gpu) == coverage.CARRIED:  # that GPU's held-out record (none:
            # the constants are unchecked there)
            held = next((dict(kernel=t["kernel"], split="held-out", gpu=args.gpu, cells=t["cells"],
                              within=t["in_band"], band=t["band"], median=t["median_abs_err"],
                              worst=abs(t["worst_ratio"] - 1), source=f"gpu_model_{args.gpu}_heldout.json")
                         for t in (heldout.load(args.gpu) or {}).get("track", [])
                         if t["pass_name"] == "backward" and t["kernel"] == args.kernel), None)
        rec = dict(kernel=args.kernel, gpu=args.gpu, batch=b, heads=h, seq_q=n_q, seq_k=n_k, head_dim=args.head_dim,
                   dtype=args.dtype, causal=args.causal, block_q=p.br, block_k=p.bc, ctas=p.ctas,
                   time_s=p.time_s, tflops=p.tflops, bound=p.bound, terms=dict(p.terms), levels=dict(p.levels),
                   forward_s=None, backward_s=p.time_s, track_record=held)
        rec["pass"] = args.pass_name
        if t:
            rec.update(time_s=t["time_s"], tflops=t["tflops"], bound=t["bound"], forward_s=t["forward_s"])
        recs.append(rec)
    return recs


def cmd_predict_backward(args, error) -> int:
    recs = backward_records(args, error)
    header = ["kernel", "N", "d", "Br×Bc", "CTAs", "time", "TFLOP/s", "bound", "t tensor", "t exp", "t dQ L2",
              "t latency", "t DRAM", "dQ acc→L2", "Q,dO→L2", "DRAM"]
    if args.pass_name == "train":
        header[5:5] = ["forward", "backward"]
    rows = []
    for r in recs:
        tm = r["terms"]
        row = [r["kernel"], str(r["seq_q"]) if r["seq_q"] == r["seq_k"] else f"{r['seq_q']}×{r['seq_k']}",
               str(r["head_dim"]), f"{r['block_q']}×{r['block_k']}", str(r["ctas"]), human_time(r["time_s"]),
               f"{r['tflops']:.4g}", r["bound"]]
        row += [human_time(tm[k]) for k in ("tensor", "exp", "dq_l2", "latency", "dram")]
        row += [human_bytes(r["levels"][k]) for k in ("dq_accum_bytes", "q_do_bytes", "dram_bytes")]
        if args.pass_name == "train":
            row[5:5] = [human_time(r["forward_s"]), human_time(r["backward_s"])]
        rows.append(row)
    title = header_line(args, recs).replace("fa-traffic predict:", f"fa-traffic predict --pass {args.pass_name}:")
    _table(header, rows, args.format, recs, title=title)
    if args.format in ("table", "markdown"):
        t = recs[0]["track_record"] if recs else None
        print("backward: per (Q block, K/V block) tile the five products (10·Br·Bc·d FLOPs), the recomputed "
              "exponentials P = exp(S - L) (Br·Bc at the MUFU rate) and dQ's fp32 accumulation (4·Br·d bytes to the "
              "L2); t terms = each summed over the tiles per SM slot (time = their sum; DRAM: compulsory bytes + dQ's accumulator "
              "written back and read once, at the HBM rate of gpumodel/coverage.py hbm_rate, limiting only if it outlasts them); TFLOP/s = 10·d per visible pair "
              + ("(+ the forward's 4·d) " if args.pass_name == "train" else "") + "/ time.")
        if t:
            where = ", ".join(f"results/{s}" for s in t["source"].split(", "))
            print(f"track record ({recs[0]['kernel']} backward on the {args.gpu.upper()}, held out, N >= 2k, {where}): "
                  f"{t['within']}/{t['cells']} within ±{t['band']:.0%}, median |err| {t['median']:.1%}, worst "
                  f"{t['worst']:.1%}")
        elif recs:
            from gpumodel import backward_model as bm

            k = recs[0]["kernel"]
            print(f"track record: none on the {args.gpu.upper()} - {k}'s backward constants are the "
                  f"{bm.fit_gpu(k).upper()} fit's, carried over with no {args.gpu.upper()} timing of {k} to check "
                  "them against (unvalidated)")
    return 0


def cmd_predict(args, error) -> int:
    if getattr(args, "pass_name", "forward") != "forward":
        if any(getattr(args, f, None) is not None for f in DECODE_FLAGS):
            raise error(f"the decode flags apply to --pass forward (decoding has no backward), not --pass "
                        f"{args.pass_name}")
        return cmd_predict_backward(args, error)
    recs = predict_records(args, error)
    header = ["kernel", "N", "d", "Br×Bc", "CTAs/SM", "time", "GPU", "host", "TFLOP/s", "bound", "L2", "DRAM", "requests",
              "t tensor", "t softmax", "t smem", "t latency", "t L2", "t DRAM"]
    rows = [[r["kernel"], str(r["seq_q"]) if r["seq_q"] == r["seq_k"] else f"{r['seq_q']}×{r['seq_k']}",
             str(r["head_dim"]), f"{r['block_q']}×{r['block_k']}", str(r["ctas_per_sm"]), human_time(r["time_s"]),
             human_time(r["gpu_time_s"]), human_time(r["host_s"]), f"{r['tflops']:.4g}", r["bound"], human_bytes(r["l2_bytes"]), human_bytes(r["dram_bytes"]),
             human_bytes(r["requests_bytes"])]
            + [human_time(r["terms"][k]) for k in ("tensor", "softmax", "smem", "latency", "l2", "dram")]
            for r in recs]
    if any("dsmem" in r["terms"] for r in recs):  # a cluster kernel (issue 18): its reductions and barriers
        header += ["DSMEM", "t DSMEM", "t sync"]
        for row, r in zip(rows, recs):
            row += [human_bytes(r["dsmem_bytes"])] + [human_time(r["terms"].get(k, 0.0)) for k in ("dsmem", "sync")]
    _table(header, rows, args.format, recs, title=header_line(args, recs))
    if args.format in ("table", "markdown"):
        print(track_caption(recs, args.gpu))
        if any("decode" in r for r in recs):
            d = recs[0]["decode"]
            print(f"decode: H_kv = {d['kv_heads']} (g = {d['group']}), S = {d['num_splits']} splits, {d['ctas']} CTAs; "
                  "gpumodel/decode_model.py: the DRAM bytes in waves of CTAs, each wave capped by Little's law on the "
                  "K/V tiles in flight, plus the call's fixed time - checked on one H100 run "
                  "(results/decode_model_h100.json)")
    return 0


def track_caption(recs: list[dict], gpu: str = "h200") -> str:
    """One line per kernel / d / causal printed: how the model's time compared with the committed timings (on a GPU
    the fit is carried over to, its own held-out runs)."""
    from gpumodel import coverage

    where = "" if coverage.footing(gpu) != coverage.CARRIED else \
        f" on the {gpu.upper()} (held-out runs, results/gpu_model_{gpu}_heldout.json)"
    seen, lines = set(), []
    for r in recs:
        key = (r["kernel"], r["head_dim"], r["causal"])
        if key in seen:
            continue
        seen.add(key)
        t = r.get("track_record")
        what = f"{r['kernel']} d = {r['head_dim']} {'causal' if r['causal'] else 'non-causal'}{where}"
        if not t:
            lines.append(f"track record: {what}: no committed timing at N >= 2k to check this time against")
            continue
        band = "" if t["in_band"] is None else f", {100 * t['in_band']:.0f}% within ±{100 * t['band']:.0f}%"
        lines.append(f"track record: {what}: model / measured {t['median']:.2f} at the median of {t['cells']} committed "
                     f"timings at N >= 2k (p10 {t['p10']:.2f}, p90 {t['p90']:.2f}{band}; below 1: the model is fast)")
    return "\n".join(lines)


WIDTH = 100  # validate's table output fits this many columns without --details
MISORDERED_SHOWN, MISORDERED_DETAILS = 3, 10  # misordered pairs listed without --details and with it
SHORT_QUANTITY = {"dram bytes": "DRAM", "l2 bytes (SM xbar)": "L2 xbar", "l2 bytes (srcunit_tex)": "L2 tex",
                  "l2 bytes (lts__t_bytes)": "L2 lts"}  # the compact cell table's quantity column


class _CellProgress:
    """validate's progress on stderr: a rich bar on a terminal; with --progress elsewhere, a line per tenth; else
    nothing (stdout, where JSON goes, is never touched)."""

    def __init__(self, forced: bool):
        self.tty = is_tty(sys.stderr)
        self.on = self.tty or forced
        self.bar, self.tenth = None, -1

    def __call__(self, done: int, total: int) -> None:
        if not self.on:
            return
        if self.tty:
            if self.bar is None:
                from rich.console import Console
                from rich.progress import Progress

                self.bar = Progress(console=Console(file=sys.stderr), transient=True, redirect_stdout=False,
                                    redirect_stderr=False)
                self.bar.start()
                self.task = self.bar.add_task("validate: the model on every committed cell", total=total)
            self.bar.update(self.task, completed=done)
            return
        tenth = 10 * done // max(total, 1)
        if tenth != self.tenth:
            self.tenth = tenth
            say(f"fa-traffic validate: {done:,} of {total:,} committed cells modelled ({10 * tenth}%)")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _say(text: str, file=None) -> None:
    """A paragraph of validate's text, wrapped to WIDTH columns (continuation lines indented)."""
    import textwrap

    lead = len(text) - len(text.lstrip(" "))
    print(textwrap.fill(text, WIDTH, subsequent_indent=" " * (lead + 2), break_on_hyphens=False,
                        break_long_words=False), file=file or sys.stdout)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def cmd_validate(args, error) -> int:
    from gpumodel import validate as val

    progress = _CellProgress(getattr(args, "progress", False))
    try:
        rs = val.rows(progress=progress)
    finally:
        progress.close()
    rank = val.ranking(rs)
    summ = val.summary(rs)
    gaps = val.known_gaps()
    misses = [r for r in rs if r["in_band"] is False]
    for r in misses:
        r["known_gap"] = val.gap_reason(r, gaps)
    unexplained = [r for r in misses if not r["known_gap"]]
    rank_explained = rank["ok"] or bool(gaps.get("ranking", {}).get("reason"))
    if args.plot:
        from analysis import plots_gpu

        try:
            from gpumodel import backward_model as bm

            plots_gpu.plot_validation(rs, args.plot, backward=bm.rows(), heldout=heldout_gpus())
        except OSError as e:
            raise error(f"cannot write the plot {args.plot!r}: {e.strerror or e}") from None
    per_cell = val.cell_medians(rs)
    if args.format == "json":
        from gpumodel import backward_model as bm

        bwd_rows = bm.rows()
        bwd = bm.track_record(bwd_rows)
        bwd_ok = all(t["split"] == "train" or t["within"] == t["cells"] for t in bwd)
        from gpumodel import heldout

        held = heldout_gpus()
        held_ok = all("why" in doc or not heldout.unexplained(doc["cells"]) for doc in held.values())
        json.dump(dict(summary=summ, ranking=rank, cell_medians=per_cell, cells=rs,
                       backward=dict(track_record=bwd, cells=bwd_rows),
                       heldout_gpus={k: doc if "why" in doc else dict(track=doc["track"], runs=doc["runs"],
                                                                      unexplained=doc["unexplained"])
                                     for k, doc in held.items()}), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 1 if unexplained or not rank_explained or not bwd_ok or not held_ok else 0
    details = getattr(args, "details", False)
    full = details or args.format == "csv"  # every field: the source file, the build's knobs, the band, the split
    show = rs if args.all or args.format == "csv" else misses

    def fmt(x, q):
        return f"{x * 1e3:.4g} ms" if "time" in q else f"{x / 1e9:.4g} GB"

    def ok(r):
        return {None: "", True: "yes", False: ("NO (known gap)" if full else "gap") if r.get("known_gap")
                else "NO"}[r["in_band"]]

    if full:
        header = ["source", "kernel", "n", "d", "dtype", "causal", "quantity", "model", "measured", "ratio",
                  "band", "ok", "train", "bound"]
        rows = [[r["source"], r["kernel"], str(r["n"]), str(r["d"]), r["dtype"], "y" if r["causal"] else "",
                 r["quantity"], fmt(r["model"], r["quantity"]), fmt(r["measured"], r["quantity"]),
                 f"{r['ratio']:.3f}", "-" if r["band"] is None else f"±{r['band']:.0%}", ok(r),
                 "train" if r["train"] else "", r["bound"]]
                for r in show]
    else:  # fits WIDTH: the build's knobs shortened to {…}, the quantity to its level (--details for the rest)
        header = ["kernel", "n", "d", "dtype", "causal", "quantity", "model", "measured", "ratio", "ok"]
        rows = [[_cut(r["kernel"].split("{")[0] + ("{…}" if "{" in r["kernel"] else ""), 22), str(r["n"]),
                 str(r["d"]), r["dtype"], "y" if r["causal"] else "", SHORT_QUANTITY.get(r["quantity"], r["quantity"]),
                 fmt(r["model"], r["quantity"]), fmt(r["measured"], r["quantity"]), f"{r['ratio']:.3f}", ok(r)]
                for r in show]
    if args.format == "csv":
        _table(header, rows, "csv", show)
        return 1 if unexplained or not rank_explained else 0
    sheader = ["quantity", "tier", "split", "cells", "banded", "in band", "median |err|", "worst ratio"]
    srows = [[s["quantity"], s["tier"], s["split"], str(s["cells"]), str(s["banded"]), str(s["in_band"]),
              "" if s["median_abs_err"] is None else f"{s['median_abs_err']:.1%}",
              "" if s["worst"] is None else f"{s['worst']:.3f}"] for s in summ]
    _table(sheader, srows, args.format, summ)
    print()
    _say(f"time per cell, the model against the median of the cell's timings over every run (held out, banded): "
         f"{per_cell['in_band']} of {per_cell['cells']} cells in band"
         + ("; out: " + ", ".join(f"{k[0]} N={k[3]} d={k[4]} {k[5]}{' causal' if k[6] else ''} {q:.3f} "
                                  f"({n} runs)" for k, q, n in per_cell["out"][:8]) if per_cell["out"] else ""))
    _say(f"ranking: {rank['agree']}/{rank['pairs']} pairs ordered as measured "
         f"({rank['share']:.1%}; target {val.RANK_TARGET:.0%}; {rank['ties']} pairs measured within "
         f"{val.RANK_TIE:.0%} are ties, right when the model puts them within its time band); "
         f"strict, every pair by sign: {rank['strict_agree']}/{rank['pairs']} ({rank['strict_share']:.1%})")
    if rank.get("families"):
        _say("  by run: " + ", ".join(f"{f} {v:.1%}" for f, v in rank["families"].items()))
    wrong = rank["wrong"][:MISORDERED_DETAILS if details else MISORDERED_SHOWN]
    for w in wrong:
        _say(f"  misordered: {w}")
    if len(wrong) < len(rank["wrong"]):
        _say(f"  ... and {len(rank['wrong']) - len(wrong)} more misordered pairs (--format json lists every one)")
    if not rank["ok"]:
        _say(f"  below target, known gap: {gaps['ranking']['reason']}" if rank_explained
             else "  below target, and no reason in results/gpu_model_known_gaps.json")
    print()
    _say(f"{len(misses)} cells out of band, {len(misses) - len(unexplained)} of them known gaps "
         f"(results/gpu_model_known_gaps.json)" + (":" if misses else ""))
    if rows:
        _table(header, rows, args.format, show)
    for reason in dict.fromkeys(r["known_gap"] for r in misses if r["known_gap"]):
        if details:
            _say(f"  known gap: {reason}")
        else:
            print(_cut(f"  known gap: {reason}", WIDTH))
    if not details and misses:
        print("(--details: every field of each cell, and each known gap's reason in full)")
    bwd_ok = backward_track(rs)
    return 1 if unexplained or not rank_explained or not bwd_ok else 0


def backward_track(rs) -> bool:
    """validate's tail (issue 43): one line per kernel and pass, its track record, held-out runs apart from the fit;
    the forward's lines from the rows above (time, N >= 2k, banded), the backward's from gpumodel.backward_model."""
    from gpumodel import backward_model as bm

    print()
    _say("track record, one line per kernel and pass (time at N >= 2k; held out = not in the fit):")
    fwd = {}
    for r in rs:
        if r["quantity"] == "time" and r["band"] is not None and r["n"] >= bm.MIN_N:
            fwd.setdefault((r["kernel"].split("{")[0].split("[")[0], "train" if r["train"] else "held-out"),
                           []).append(r)
    for (k, split), sel in sorted(fwd.items()):
        errs = sorted(abs(r["ratio"] - 1) for r in sel)
        _say(f"  {k:<15} forward  {split:<8} {sum(bool(r['in_band']) for r in sel)}/{len(sel)} in band, median "
             f"{errs[len(errs) // 2]:.1%}, worst {errs[-1]:.1%}")
    ok = True
    for t in bm.track_record(bm.rows()):
        ok &= t["split"] == "train" or t["within"] == t["cells"]
        _say(f"  {t['kernel']:<15} backward {t['split']:<8} {t['gpu']} {t['within']}/{t['cells']} within ±{t['band']:.0%}, median "
             f"{t['median']:.1%}, worst {t['worst']:.1%}")
    return heldout_track() and ok


def heldout_gpus() -> dict:
    """{gpu: the held-out record recomputed from its committed runs, or the reason there is none} for every GPU the
    model covers with another GPU's fit (gpumodel/coverage.py, gpumodel/heldout.py)."""
    from gpumodel import coverage, heldout

    out = {}
    for key in coverage.COVERED_GPUS:
        if coverage.footing(key) != coverage.CARRIED:
            continue
        runs = heldout.RUNS.get(key)
        if runs is None or not heldout.run_files(runs):
            out[key] = {"why": f"no held-out {key.upper()} runs committed (results/{key}_heldout)"}
            continue
        out[key] = heldout.build(key, runs)
    return out


def heldout_track(docs: dict | None = None) -> bool:
    """validate's lines for the GPUs the fit is carried over to: held-out runs only (none of them in any fit), one line
    per kernel and pass; False where a cell is out of band with no known-gap reason."""
    from gpumodel import heldout

    ok = True
    for key, doc in (heldout_gpus() if docs is None else docs).items():
        print()
        if "why" in doc:
            _say(f"{key.upper()} (the H200 fit carried over): {doc['why']}")
            continue
        from gpumodel import backward_model as bm

        own = [k for k in bm.KERNELS if bm.fit_gpu(k) == key]  # fitted on this GPU's runs (lines above), not these
        _say(f"{key.upper()} (its datasheet, the H200 fit carried over"
             + (f"; the backward's {', '.join(own)} fitted on its own runs, above" if own else ", nothing refitted")
             + f"), held-out runs {', '.join(doc['runs'].values())}:")
        for t in doc["track"]:
            _say(heldout.line(t, key))
        bad = heldout.unexplained(doc["cells"])
        for r in bad:
            _say(f"  out of band: {r['pass_name']} {r['kernel']} N={r['n']} d={r['d']} {r['dtype']}"
                 f"{' causal' if r['causal'] else ''}: model/measured {r['ratio']:.3f} (±{r['band']:.0%})")
        ok &= not bad
    return ok


def run(args, error) -> int:
    return cmd_predict(args, error) if args.command == "predict" else cmd_validate(args, error)
