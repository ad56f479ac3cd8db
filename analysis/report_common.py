"""What `fa-traffic report` and its --pass backward|train (analysis/backward_report.py) share: the variant configs,
problems and blocks asked for, one record per count, its table row and caption, and the records written in the
chosen format (_emit). Below both: analysis/cli.py (the command line: parser, plan, commands) imports it and
re-exports its names, as they were defined there before.
"""
from __future__ import annotations

import itertools

from analysis import report_gpu
from analysis.format import human_bytes, human_flops, human_time, render_markdown, render_table, write_csv, write_json
from analysis.report_cluster import caption_line
from analysis.roofline import roofline
from counting import closed_forms as cf
from counting import cluster
from counting.headline import min_hbm_bytes
from counting.sram import v_once_valid
from gpumodel import coverage
from gpumodel import gpu_model as gm


DEFAULT_SEQ = (1024, 4096, 16384)


# v_once configs shown when neither --placement nor --rescale is given (see docs/report.md):
# auto resolves to what you would run (on chip if the f row fits, else spilled) for both rescale
# modes; sram/eager is the issue's own claim ("only one block in SRAM"), shown with its overflow.
REPORT_V_ONCE = (("auto", "eager"), ("auto", "lazy"), ("sram", "eager"))


SWEEP_V_ONCE = (("auto", "eager"), ("auto", "lazy"))


class CliError(Exception):
    """Bad input: one line on stderr, exit status 2."""


def _flatten(lists):
    """The items of a repeated list flag, in order, each once (linear: a list of 100k lengths is refused at once)."""
    return list(dict.fromkeys(x for item in lists or [] for x in item))


DECODE_DESTS = ("kv_heads", "page_size", "cache_lens", "num_splits")  # the report's decode flags (cli.DECODE_FLAGS)


def is_decode_ask(args, sweep: bool = False) -> bool:
    """The rule for split_kv in the default variant list (no --variant): a decode flag is given (--kv-heads,
    --page-size, --cache-lens, --num-splits), or some problem asked is a decode shape, Nq <= 64 against a longer
    Nk. Training and prefill shapes (the default 1k, 4k, 16k) leave it out; --variant split_kv always shows it."""
    if any(getattr(args, dest, None) is not None for dest in DECODE_DESTS):
        return True
    return any(n_q <= report_gpu.DECODE_MAX_N_Q and n_q < n_k for n_q, n_k, _ in _problems(args, (4096,) if sweep else DEFAULT_SEQ))


def default_variants(args, sweep: bool = False) -> list[str]:
    """--variant's names, else every variant, split_kv only for a decode ask (is_decode_ask)."""
    asked = _flatten(args.variant)
    if asked:
        return asked
    return [v for v in cf.VARIANT_NAMES if v != "split_kv" or is_decode_ask(args, sweep)]


def _configs(args, sweep: bool):
    variants = default_variants(args, sweep)
    placements, rescales = _flatten(args.placement), _flatten(args.rescale)
    if placements or rescales:
        pairs = list(itertools.product(placements or cf.PLACEMENTS, rescales or cf.RESCALES))
        v_once = [pr for pr in pairs if v_once_valid(*pr)]  # cluster is lazy only
        for place in placements:  # a placement asked for must give a row
            if not any(p == place for p, _ in v_once):
                raise CliError(f"--placement {place} with --rescale {','.join(rescales)}: placement cluster "
                               "rescales lazily by construction; add --rescale lazy")
    else:
        v_once = list(SWEEP_V_ONCE if sweep else REPORT_V_ONCE)
    out = []
    for name in variants:
        if name == "v_once":
            out += [(name, {"placement": p, "rescale": r}) for p, r in v_once]
        else:
            out.append((name, {}))
    return out


def _blocks(args, sram: int, d: int, rule: str = "fa1") -> tuple[int, int, str]:
    """(Br, Bc, rule): FA1's rule, or with Br and Bc swapped (FA2's Q-outer loop wants a tall Br)."""
    br, bc = cf.fa1_blocks(sram, d)
    if rule == "swapped":
        br, bc = bc, br
    if args.block_q or args.block_k:
        rule = "explicit" if (args.block_q and args.block_k) else f"{rule}+explicit"
    return (args.block_q or br), (args.block_k or bc), rule


def _min_working_set(name, opts, n_q, n_k, d, dtype) -> int:
    """The smallest working set a variant can have (Br = Bc = 1; v_once spilled unless sram)."""
    placement = opts.get("placement", "auto")
    placement = "hbm" if placement == "auto" else placement
    if placement == "cluster":  # one CTA of the largest cluster
        return cluster.at_size(cluster.CLUSTER_SIZES[-1], n_k, d, block_q=1, block_k=1,
                               itemsize=cf.DTYPES[cf.dtype_name(dtype)]).smem_bytes
    return cf.sram_working_set(name, n_q, n_k, d, 1, 1, dtype, placement=placement,
                               rescale=opts.get("rescale", "eager"))[0]


def _check_sram_can_hold_something(configs, problems, sram, dtype):
    for n_q, n_k, d in problems:
        need = {f"{n}{'_' + '_'.join(o.values()) if o else ''}": _min_working_set(n, o, n_q, n_k, d, dtype)
                for n, o in configs}
        best = min(need, key=need.get)
        if need[best] > sram:
            raise CliError(f"SRAM of {sram:,} bytes is smaller than any block needs: the smallest "
                           f"working set (Br = Bc = 1, Nq={n_q}, Nk={n_k}, d={d}) is "
                           f"{need[best]:,} bytes ({best})")


ROOFLINE_BASIS = "papers' count, no cache (not the GPU model)"


def record(tr: cf.Traffic, gpu, block_rule: str = "fa1") -> dict:
    """One JSON record: problem, counts (whole problem), SRAM fit, roofline (spec and measured)."""
    rec = {
        "variant": tr.variant, "label": tr.label(),
        "batch": tr.batch, "heads": tr.heads, "seq_q": tr.n_q, "seq_k": tr.n_k, "head_dim": tr.d,
        "causal": tr.causal, "dtype": tr.dtype, "block_q": tr.block_q, "block_k": tr.block_k,
        "block_rule": block_rule,
        "sram_bytes": tr.sram_capacity, "gpu": gpu.key,
        "placement": tr.placement, "placement_resolved": tr.placement_resolved, "rescale": tr.rescale,
        "reads": dict(tr.reads), "writes": dict(tr.writes),
        "read_bytes": dict(tr.read_bytes), "write_bytes": dict(tr.write_bytes),
        "hbm_read_bytes": tr.hbm_read_bytes, "hbm_write_bytes": tr.hbm_write_bytes,
        "hbm_bytes": tr.hbm_bytes,
        "min_hbm_bytes": tr.decode.get("min_hbm_bytes") or min_hbm_bytes(tr.batch, tr.heads, tr.n_q, tr.n_k, tr.d,
                                                                      cf.DTYPES[tr.dtype], tr.causal),
        "flops": {k: tr.flops[k] for k in cf.FLOP_KINDS},
        "attention_flops": tr.attention_flops, "paper_flops": tr.paper_flops,
        "sram_peak_bytes": tr.sram_peak_bytes,
        "fits": tr.fits, "over_by_bytes": tr.over_by_bytes,
        "dsmem_bytes": dict(tr.dsmem_bytes), "cluster_size": tr.cluster_size,
        "roofline": roofline(tr, gpu, "spec").as_dict() | {"basis": ROOFLINE_BASIS},
        "gpu_model_covers": ",".join(gm.COVERED_GPUS),
    }
    if tr.decode:  # split_kv (issue 44): kv heads, splits, pages, cache lengths (counting/decode.py)
        rec["decode"] = dict(tr.decode)
    if gpu.measured:
        rec["roofline_measured"] = roofline(tr, gpu, "measured").as_dict() | {"basis": ROOFLINE_BASIS}
    return rec


def _problems(args, default_seq):
    seq_q = _flatten(args.seq_len) or list(default_seq)
    seq_k = _flatten(args.seq_len_k)
    dims = _flatten(args.head_dim) or [64]
    return [(n_q, n_k, d) for d in dims for n_q in seq_q for n_k in (seq_k or [n_q])]


# the papers' roofline (their count, no cache): its verdict columns say so in their names (issue 43), never a bare
# "bound" a kernel measured on the GPU would contradict
PAPERS_BOUND, PAPERS_TFLOPS = "papers' bound (no cache)", "papers' TFLOP/s"
REPORT_COLUMNS = ("variant", "N", "d", "Br×Bc", "HBM read", "HBM write", "× min", "SRAM", "matmul",
                  "exp", "other", "t mem", "t matmul", "t non-mm", PAPERS_BOUND, PAPERS_TFLOPS)


def _report_row(r: dict) -> list[str]:
    rf = r["roofline"]
    n = f"{r['seq_q']}" if r["seq_q"] == r["seq_k"] else f"{r['seq_q']}×{r['seq_k']}"
    sram = human_bytes(r["sram_peak_bytes"])
    if not r["fits"]:
        sram += " ✗"
    return [r["label"], n, str(r["head_dim"]), f"{r['block_q']}×{r['block_k']}",
            human_bytes(r["hbm_read_bytes"]), human_bytes(r["hbm_write_bytes"]),
            f"{r['hbm_bytes'] / r['min_hbm_bytes']:.3g}", sram,
            human_flops(r["flops"]["matmul"]), human_flops(r["flops"]["exp"]),
            human_flops(r["flops"]["other"]),
            human_time(rf["t_memory_s"]), human_time(rf["t_matmul_s"]), human_time(rf["t_nonmatmul_s"]),
            rf["bound"], f"{rf['predicted_tflops']:.4g}"]


def _kernel_caption(args, recs, gpu) -> str:
    why = sorted({r["gpu_model"]["why"] for r in recs if "why" in r.get("gpu_model", {})})
    teaching = [v for v, k in report_gpu.KERNEL_OF.items() if report_gpu.is_teaching(k)]
    kernels = ", ".join(f"{v} on {k}" for v, k in report_gpu.KERNEL_OF.items())
    # one short line per idea: the plain-text table is wide, a one-line caption of 800 characters is not read
    lines = [
        f"{gpu.name}, {_shape_text(args, recs)}, {args.dtype}{' causal' if args.causal else ''}.",
        f"each variant at its kernel's blocks: {kernels} (--blocks fa1-rule for FA1's rule).",
        f"{', '.join(teaching)} run on the teaching tier (float32 FFMA, readable, untuned), fa2 and v_once on "
        "tensor cores: compare the algorithms by the byte and FLOP columns; TFLOP/s says what each kernel reaches.",
        "requests: the papers' count (global-memory requests, no cache); L2: SM→L2 requests; DRAM: after the L2 "
        "residency model.",
        "× min, FLOP/B min: against Q (rows that see a key), K, V read once and O, lse written once.",
        f"bound, TFLOP/s: {_footing(gpu)} (as fa-traffic predict prints it); {_checked_on(gpu)}.",
        "smem: what the kernel allocates per thread block (S, P in registers), or, for a row no kernel runs, the "
        "reference's working set (✗ = over the SRAM).",
    ]
    dec = [r for r in recs if r["variant"] == "split_kv" and "time_s" in r.get("gpu_model", {})]
    if dec:
        lines.append("split_kv on split_kv_fast, priced by gpumodel/decode_model.py: its DRAM bytes in waves of CTAs, "
                     "each capped by Little's law on the K/V tiles in flight, plus the call's fixed time (checked on "
                     "one H100 run: results/decode_model_h100.json).")
    info = [r["decode"] for r in recs if r.get("decode")]
    if info:
        d = info[0]
        splits = sorted({i['num_splits'] for i in info})
        lines.append(f"split_kv: H_kv = {d['kv_heads']} (g = {d['group']}: {d['group']} query "
                     f"head{'s share' if d['group'] > 1 else ' reads'} each kv head), S = "
                     f"{', '.join(str(x) for x in splits)} split{'' if splits == [1] else 's'}, "
                     + (f"pages of {d['page_size']}" if d["page_size"] else "a contiguous cache")
                     + (f", cache lengths {d['cache_len_min']}..{d['cache_len_max']}" if d["cache_len_min"] !=
                        d["cache_len_max"] else "")
                     + "; its × min counts K, V once per kv head.")
        if any(r.get("note") for r in recs):
            lines.append("the other rows read K and V for all H heads of a full, contiguous cache (the decode flags "
                         "apply to split_kv only).")
    starved = sorted({(r["seq_q"], r["batch"] * r["heads"] * -(-r["seq_q"] // r["block_q"])) for r in recs
                      if r["variant"] != "split_kv" and r["seq_q"] <= report_gpu.DECODE_MAX_N_Q
                      and r["seq_q"] < r["seq_k"] and "time_s" in r.get("gpu_model", {})})
    if starved:  # docs/decoding.md "The report and the model"; notebook 09 section 1
        lines.append("at a decode shape (Nq <= 64) the rows other than split_kv are priced by the training-shape model: FA2's grid is "
                     "B·H·⌈Nq/Br⌉ CTAs (" + ", ".join(f"{c:,} at Nq = {n}" for n, c in starved) + f", on "
                     f"{int(gpu.value('sms', 'measured'))} SMs) and its DRAM time has no cap on what so few CTAs keep "
                     "in flight: an optimistic bound, not a prediction of the starved grid.")
    if why:
        lines.append(f"rows marked (papers'): {'; '.join(why)}.")
    return "\n".join(lines)


def _footing(gpu) -> str:
    return coverage.describe_footing(gpu)


def _checked_on(gpu) -> str:
    if coverage.footing(gpu) == coverage.CARRIED:
        return (f"checked on held-out {gpu.key.upper()} runs, results/gpu_model_{gpu.key}_heldout.json "
                "(fa-traffic validate prints its track record)")
    return "fa-traffic validate checks it against every committed measurement"


def _shape_text(args, recs) -> str:
    """The B, H the rows assumed, as the caption's first line says it."""
    shapes = {(r["seq_q"], r["head_dim"]): (r["batch"], r["heads"]) for r in recs}
    return report_gpu.shape_text(shapes or {(0, 0): (args.batch, args.heads)}, getattr(args, "full_gpu", False))


def model_coverage(gpu, pass_name: str = "forward") -> str:
    """Which GPU and pass the GPU model covers, as a table says it (issue 43; gpumodel/coverage.py)."""
    covered = coverage.names()
    if not coverage.covers(gpu):
        return (f"the GPU model covers the {covered} only: for the {gpu.name} this table is counts and the papers' "
                "roofline, no model verdict")
    if pass_name != "forward":
        return (f"the GPU model ({covered}) prices the backward of the kernels (fa-traffic predict --pass "
                f"{pass_name}; the kernel rows below); these rows are the algorithm at FA1's blocks")
    return f"the GPU model ({covered}) prices the default --blocks kernel's rows (and fa-traffic predict)"


def papers_roofline_line(gpu, pass_name: str = "forward") -> str:
    return (f"papers' bound / TFLOP/s: the papers' count on the {gpu.name} datasheet, no cache, so not what bounds "
            f"the GPU; {model_coverage(gpu, pass_name)}.")


def _caption(args, srams, dims, gpu, recs=()) -> str:
    """recs: the records (a table holds them) for the kernel report's caption."""
    if any("gpu_model" in r and "why" not in r["gpu_model"] for r in recs):
        return _kernel_caption(args, recs, gpu)
    srams = sorted(srams)
    whys = sorted({r["gpu_model"]["why"] for r in recs if "why" in r.get("gpu_model", {})
                   and r.get("block_rule", "").startswith("kernel")})
    sram = human_bytes(srams[0]) if len(srams) == 1 else f"{human_bytes(srams[0])} … {human_bytes(srams[-1])}"
    blocks = "explicit" if (args.block_q or args.block_k) else "FA1 rule Bc=⌈M/4d⌉, Br=min(Bc,d), M=SRAM/4"
    if whys:  # --blocks kernel, but no row has the GPU model
        blocks = f"each variant's kernel (no GPU model: {'; '.join(whys)})"
    return "\n".join([  # short lines, as the kernel report's caption
        f"{_shape_text(args, recs)} d={','.join(map(str, dims))} {args.dtype}{' causal' if args.causal else ''}; "
        f"SRAM {sram} per block ({gpu.name if not args.sram else '--sram'}); blocks: {blocks}.",
        papers_roofline_line(gpu, getattr(args, "pass_name", "forward")),
        "× min = HBM bytes / (Q (rows that see a key), K, V read once + O, lse written once); "
        "TFLOP/s = 4·d per visible (query, key) pair / roofline time.",
        "✗ = working set over the SRAM (by over_by_bytes in --format json)."])


def _emit(args, plan, records, *, table_rows, title):
    """Write the records (`records()` gives a fresh iterator) in args.format; tables hold only text."""
    if args.format == "json":
        write_json(records())
    elif args.format == "csv":
        write_csv(records)
    else:
        recs = list(records())  # a table holds its rows (bounded by MAX_ROWS)
        header, rows = table_rows(recs)
        if args.format == "markdown":
            render_markdown(header, rows)
            return
        groups = None
        if "matmul" in header:  # the report: traffic | FLOPs | roofline, packed to the terminal
            names = [("Br×Bc", "d", "HBM read", "HBM write", "× min", "SRAM"), ("matmul", "exp", "other"),
                     ("t mem", "t matmul", "t non-mm", PAPERS_BOUND, PAPERS_TFLOPS)]
            if "kernel" in header:  # issue 11's columns
                names = [("kernel", "Br×Bc", "d", "requests", "L2", "DRAM", "DRAM × min", "DSMEM", "smem"),
                         ("matmul", "exp", "other", "FLOP/B req", "FLOP/B min"), ("bound", "TFLOP/s")]
            groups = [[header.index(h) for h in g if h in header] for g in names]
        caption = _caption(args, plan.srams, plan.dims, plan.gpu, recs)
        if groups and any(r["variant"] == "v_once" for r in recs):  # the report: where each placement applies
            caption += "\n" + caption_line(plan.problems, args.causal, cf.DTYPES[args.dtype])
        render_table(header, rows, title=title, caption=caption, groups=groups, keep=2 if groups else 4)


def _plot(fn, recs, path):
    try:
        fn(recs, path)
    except OSError as e:
        raise CliError(f"cannot write the plot {path!r}: {e.strerror or e}") from None
