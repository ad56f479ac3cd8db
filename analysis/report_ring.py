"""`fa-traffic report --ranks P`: ring attention's traffic and overlap over P GPUs (issue 45), from counting/ring.py.

    fa-traffic report --ranks 8 --seq-len 512k --head-dim 128 --heads 16 --causal --dtype bf16 --gpu h100

One row per sequence length N (the whole sequence, sharded over the P ranks), head dim, layout and pass: tokens per
rank, the P steps, the bytes one rank sends per step (K/V; in the backward also the dK/dV accumulators, float32) and
in all, the busiest rank's FLOPs per step, a step's compute time at the GPU's tensor-core peak against its transfer
time over NVLink (one direction), whether every step hides its transfer, the tokens per rank from which it would
(`min_tokens_hidden`: d cancels), the causal load imbalance (contiguous ~2, zigzag 1), and the ring's time against
one GPU's at the same rate. The one-GPU report (without --ranks) prices each rank's local attention. The peak rate
is an upper bound: the kernels reach less, so a step computes longer and hides its transfer more easily than said
here (the verdict is conservative). B and H default to 1 (the counts scale with B·H, the threshold does not).
"""
from __future__ import annotations

from analysis.format import human_bytes, human_flops, human_time, render_markdown, render_table, write_csv, write_json
from analysis.report_common import CliError, _flatten
from counting import closed_forms as cf
from counting import ring as counts
from counting.gpus import get_gpu

RING_SEQ = (131072, 524288)  # 128k and 512k: what 8 GPUs hold at d = 128 (issue 45, item 4)
MAX_RANKS = 1024  # the step model walks P steps of P ranks per row
COLUMNS = ("layout", "pass", "N", "d", "per rank", "steps", "sent/step", "sent/rank", "FLOP/step", "t compute",
           "t link", "hidden", "tokens to hide", "imbalance", "t ring", "t 1 GPU", "speedup")
# flags of `report` that have no meaning for the ring's table: refused rather than ignored
NOT_FOR_RING = (("variant", "--variant"), ("placement", "--placement"), ("rescale", "--rescale"), ("sram", "--sram"),
                ("block_q", "--block-q"), ("block_k", "--block-k"), ("plot", "--plot"), ("seq_len_k", "--seq-len-k"))


def rate(gpu, dtype: str) -> float:
    """The local attention's FLOP rate: the tensor cores' dense peak for fp16/bf16, the CUDA cores' for fp32 (the
    teaching kernels)."""
    return gpu.value({"fp16": "fp16_tensor_flops", "bf16": "bf16_tensor_flops"}.get(dtype, "fp32_flops"))


def records(args) -> list[dict]:
    world, gpu = args.ranks, get_gpu(args.gpu)
    if world > MAX_RANKS:
        raise CliError(f"--ranks {world:,} is over the limit of {MAX_RANKS:,}")
    for dest, flag in NOT_FOR_RING:
        if getattr(args, dest, None):
            raise CliError(f"{flag} does not apply to --ranks: the ring's table counts one sequence (Nq = Nk) of "
                           "FlashAttention-2 blocks; drop --ranks for the one-GPU report")
    if "blocks" in getattr(args, "_given_once", {}):
        raise CliError("--blocks does not apply to --ranks: the ring's table has no tile sizes")
    if gpu.nvlink_bandwidth is None:
        raise CliError(f"GPU {gpu.key!r} has no NVLink figure in counting/gpus.py")
    batch, heads, itemsize = args.batch or 1, args.heads or 1, cf.DTYPES[args.dtype]
    flops, link = rate(gpu, args.dtype), gpu.nvlink_bandwidth.value
    passes = ("forward", "backward") if args.pass_name == "train" else (args.pass_name,)
    out = []
    for n in _flatten(args.seq_len) or list(RING_SEQ):
        for d in _flatten(args.head_dim) or [64]:
            for layout in counts.LAYOUTS:
                try:
                    counts.check_ring(n, world, layout)
                except ValueError as e:
                    raise CliError(str(e)) from None
                for pass_name in passes:
                    out.append(_record(n, d, world, layout, pass_name, args.causal, batch, heads, itemsize, flops,
                                       link, gpu, args.dtype))
    return out


def _record(n, d, world, layout, pass_name, causal, batch, heads, itemsize, flops, link, gpu, dtype) -> dict:
    back = pass_name == "backward"
    m = counts.overlap(n, world, layout, causal, batch=batch, heads=heads, kv_heads=heads, d=d, itemsize=itemsize,
                       rate=flops, link=link, backward=back)
    sent = [counts.bytes_per_rank(n, world, layout, r, batch=batch, kv_heads=heads, d=d, itemsize=itemsize)[pass_name]
            for r in range(world)]
    busiest = max(s["compute_s"] for s in m["steps"]) * flops
    return {"layout": layout, "pass": pass_name, "seq_len": n, "head_dim": d, "ranks": world, "batch": batch,
            "heads": heads, "causal": causal, "dtype": dtype, "gpu": gpu.key,
            "tokens_per_rank": max(counts.sizes(n, world, layout)), "steps": world,
            "bytes_per_step": max(s["bytes"] for s in m["steps"]), "bytes_per_rank": max(sent),
            "flops_per_step": busiest, "compute_s_per_step": max(s["compute_s"] for s in m["steps"]),
            "transfer_s_per_step": max(s["transfer_s"] for s in m["steps"]), "hidden": m["hidden"],
            "tail_s": m["tail_s"],
            "tokens_to_hide": counts.min_tokens_hidden(layout, causal, itemsize=itemsize, rate=flops, link=link,
                                                       heads=heads, kv_heads=heads, backward=back, world=world),
            "imbalance": m["imbalance"], "ring_s": m["ring_s"], "one_gpu_s": m["one_gpu_s"], "speedup": m["speedup"],
            "rate_flops": flops, "rate_source": "spec peak", "link_bytes_per_s": link,
            "link_source": gpu.nvlink_bandwidth.source}


def _row(r: dict) -> list[str]:
    return [r["layout"], r["pass"], f"{r['seq_len']:,}", str(r["head_dim"]), f"{r['tokens_per_rank']:,}",
            str(r["steps"]), human_bytes(r["bytes_per_step"]), human_bytes(r["bytes_per_rank"]),
            human_flops(r["flops_per_step"]), human_time(r["compute_s_per_step"]),
            human_time(r["transfer_s_per_step"]), "yes" if r["hidden"] else "no", f"{r['tokens_to_hide']:,.0f}",
            f"{r['imbalance']:.3f}", human_time(r["ring_s"]), human_time(r["one_gpu_s"]), f"{r['speedup']:.2f}"]


def cmd_report(args) -> int:
    recs = records(args)
    if args.format == "json":
        write_json(recs)
    elif args.format == "csv":
        write_csv(lambda: iter(recs))
    elif args.format == "markdown":
        render_markdown(list(COLUMNS), [_row(r) for r in recs])
    else:
        r0 = recs[0]
        caption = (f"B={r0['batch']}, H={r0['heads']}, {args.dtype}, {'causal' if args.causal else 'no mask'}, "
                   f"{r0['gpu']}: compute at {r0['rate_flops'] / 1e12:,.1f} TFLOP/s (peak; the kernels reach less, "
                   f"so hiding is easier than shown), NVLink {r0['link_bytes_per_s'] / 1e9:,.0f} GB/s each way "
                   f"({r0['link_source']}). Per step: the busiest rank and the largest transfer in flight; sent/rank: "
                   "the most any rank sends in the pass. Backward: K/V again and dK/dV in float32; the last dK/dV "
                   "send follows the last compute (t ring includes it).")
        render_table(list(COLUMNS), [_row(r) for r in recs], caption=caption, keep=2,
                     title=f"fa-traffic report --ranks {args.ranks}: ring attention over {args.ranks} GPUs "
                           "(counting/ring.py)")
    return 0
