"""fa-traffic: HBM traffic, FLOPs, SRAM and a roofline for every variant, from the closed forms.

    fa-traffic report                      # all variants, N = 1k, 4k, 16k, d = 64, fp16, H200 SRAM
    fa-traffic report --seq-len 1k,4k,16k,64k --causal --format json
    fa-traffic sweep-sram --plot docs/theorem2.png   # FA1 Theorem 2: traffic against SRAM size M
    fa-traffic gpus                        # the GPU figures and their sources

Counts come from `analysis.closed_forms` (held exactly equal to the instrumented references by the
tests). Blocks default to FA1's rule Bc = ⌈M/4d⌉, Br = min(Bc, d) with M = SRAM bytes / 4 (float32
elements: the on-chip compute type); --block-q/--block-k override. Rows whose working set does not
fit the SRAM are reported with fits = false and over_by_bytes, not dropped.
"""
from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import math
import re
import sys

from analysis import closed_forms as cf
from analysis.gpus import GPUS, get_gpu
from analysis.headline import min_hbm_bytes
from analysis.roofline import roofline

PROG = "fa-traffic"
FORMATS = ("table", "csv", "json", "markdown")
DEFAULT_SEQ = (1024, 4096, 16384)
# v_once configs shown when neither --placement nor --rescale is given (see docs/report.md):
# auto resolves to what you would run (on chip if the f row fits, else spilled) for both rescale
# modes; sram/eager is the issue's own claim ("only one block in SRAM"), shown with its overflow.
REPORT_V_ONCE = (("auto", "eager"), ("auto", "lazy"), ("sram", "eager"))
SWEEP_V_ONCE = (("auto", "eager"), ("auto", "lazy"))


class CliError(Exception):
    """Bad input: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise CliError(message)


# -- number parsing -------------------------------------------------------------------------------
_NUM = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_COUNT_SUFFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024 ** 2, "M": 1024 ** 2}
_BYTE_SUFFIX = {"": 1, "B": 1, "k": 1024, "K": 1024, "KiB": 1024, "kiB": 1024, "M": 1024 ** 2,
                "MiB": 1024 ** 2, "G": 1024 ** 3, "GiB": 1024 ** 3}


def _number(text: str, suffixes: dict, what: str) -> int:
    m = _NUM.match(str(text))
    if not m or m.group(2) not in suffixes:
        hint = ", ".join(s for s in suffixes if s)
        hint = f", optionally with a suffix: {hint}" if hint else ""
        raise argparse.ArgumentTypeError(f"malformed {what} {text!r} (a positive integer{hint})")
    value = float(m.group(1)) * suffixes[m.group(2)]
    if value != int(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{what} must be a positive whole number, got {text!r}")
    return int(value)


def parse_count(text: str) -> int:
    """'1k' -> 1024, '16k' -> 16384, '65536' -> 65536."""
    return _number(text, _COUNT_SUFFIX, "length")


def parse_bytes(text: str) -> int:
    """'228KiB' -> 233472, '1MiB', '4096'. KB/MB are refused as ambiguous (use KiB/MiB)."""
    return _number(text, _BYTE_SUFFIX, "size")


def _positive_int(text: str) -> int:
    return _number(text, {"": 1}, "integer")


def _list_of(parse):
    def inner(text):
        items = [s for s in str(text).split(",") if s.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty list {text!r}")
        return [parse(s.strip()) for s in items]
    return inner


def _choice_list(choices, what):
    def parse(text):
        if text not in choices:
            raise argparse.ArgumentTypeError(f"unknown {what} {text!r}; choose from {', '.join(choices)}")
        return text
    return _list_of(parse)


def _gpu(text: str) -> str:
    try:
        return get_gpu(text).key
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _flatten(lists):
    out = []
    for item in lists or []:
        for x in item:
            if x not in out:
                out.append(x)
    return out


# -- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="HBM traffic, FLOPs, SRAM working set and a roofline "
                     "for naive attention, FlashAttention-1/2 and issue #941's multiply-V-once.")
    sub = parser.add_subparsers(dest="command", metavar="{report,sweep-sram,gpus}")

    def common(p, *, seq_help):
        p.add_argument("--variant", action="append", type=_choice_list(cf.VARIANT_NAMES, "variant"),
                       help=f"variants (repeatable or comma list) of: {', '.join(cf.VARIANT_NAMES)}")
        p.add_argument("--seq-len", action="append", type=_list_of(parse_count), help=seq_help)
        p.add_argument("--seq-len-k", action="append", type=_list_of(parse_count),
                       help="key/value lengths Nk (default: = Nq; a list gives every Nq x Nk)")
        p.add_argument("--head-dim", action="append", type=_list_of(_positive_int),
                       help="head dimension d (default 64; a list is allowed)")
        p.add_argument("--batch", type=_positive_int, default=1, help="batch B (default 1)")
        p.add_argument("--heads", type=_positive_int, default=1, help="heads H (default 1)")
        p.add_argument("--causal", action="store_true", help="bottom-right causal mask")
        p.add_argument("--dtype", choices=list(cf.DTYPES), default="fp16", help="input dtype (default fp16)")
        p.add_argument("--gpu", type=_gpu, default="h200",
                       help=f"GPU for the SRAM size (max per block) and the roofline: {', '.join(GPUS)} "
                            "(default h200)")
        p.add_argument("--sram", type=parse_bytes,
                       help="SRAM capacity per thread block, bytes with k/KiB/M/MiB suffixes "
                            "(default: the GPU's max per block; overrides --gpu's)")
        p.add_argument("--block-q", type=_positive_int, help="Br (default: FA1 rule min(Bc, d))")
        p.add_argument("--block-k", type=_positive_int, help="Bc (default: FA1 rule ceil(M/4d), M = SRAM/4)")
        p.add_argument("--placement", action="append", type=_choice_list(cf.PLACEMENTS, "placement"),
                       help="v_once f-row placement(s): auto, sram, hbm")
        p.add_argument("--rescale", action="append", type=_choice_list(cf.RESCALES, "rescale"),
                       help="v_once rescale mode(s): eager, lazy")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
        p.add_argument("--plot", metavar="FILE.png", help="also write a plot (matplotlib, PNG)")

    rep = sub.add_parser("report", help="compare the variants at a few sequence lengths")
    common(rep, seq_help="query lengths Nq, e.g. 1k,4k,16k (default) or 65536; repeatable")
    rep.add_argument("--pass", dest="pass_name", choices=("forward", "backward", "train"),
                     default="forward", help="forward (default), backward, or train = both "
                     "(adds memory saved for the backward and recompute FLOPs)")
    sw = sub.add_parser("sweep-sram", help="FA1 Theorem 2: HBM traffic against SRAM size M")
    common(sw, seq_help="the fixed sequence length N (default 4k; a list gives one sweep each)")
    sw.add_argument("--sram-min", type=parse_bytes, default=16 * 1024, help="smallest M (default 16KiB)")
    sw.add_argument("--sram-max", type=parse_bytes, default=4 * 1024 ** 2, help="largest M (default 4MiB)")
    sw.add_argument("--points", type=_positive_int, default=33, help="log-spaced sizes (default 33)")
    g = sub.add_parser("gpus", help="the GPU figures and their sources")
    g.add_argument("--format", choices=("table", "json"), default="table")
    return parser


# -- building the rows ------------------------------------------------------------------------------
def _configs(args, sweep: bool):
    variants = _flatten(args.variant) or list(cf.VARIANT_NAMES)
    placements, rescales = _flatten(args.placement), _flatten(args.rescale)
    if placements or rescales:
        v_once = list(itertools.product(placements or cf.PLACEMENTS, rescales or cf.RESCALES))
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
        "min_hbm_bytes": min_hbm_bytes(tr.batch, tr.heads, tr.n_q, tr.n_k, tr.d, cf.DTYPES[tr.dtype]),
        "flops": {k: tr.flops[k] for k in cf.FLOP_KINDS},
        "paper_flops": tr.paper_flops,
        "sram_peak_bytes": tr.sram_peak_bytes,
        "fits": tr.fits, "over_by_bytes": tr.over_by_bytes,
        "roofline": roofline(tr, gpu, "spec").as_dict(),
    }
    if gpu.measured:
        rec["roofline_measured"] = roofline(tr, gpu, "measured").as_dict()
    return rec


def _problems(args, default_seq):
    seq_q = _flatten(args.seq_len) or list(default_seq)
    seq_k = _flatten(args.seq_len_k)
    dims = _flatten(args.head_dim) or [64]
    out = []
    for d in dims:
        for n_q in seq_q:
            for n_k in (seq_k or [n_q]):
                out.append((n_q, n_k, d))
    return out


def build_records(args, *, sweep=False, progress=None) -> list[dict]:
    gpu = get_gpu(args.gpu)
    configs = _configs(args, sweep)
    problems = _problems(args, (4096,) if sweep else DEFAULT_SEQ)
    if sweep:
        if args.sram_min > args.sram_max:
            raise CliError(f"--sram-min ({args.sram_min:,}) is larger than --sram-max ({args.sram_max:,})")
        srams = sweep_sizes(args.sram_min, args.sram_max, args.points)
    else:
        srams = [args.sram or gpu.sram_bytes]
    # an error only if nothing at all can fit the smallest SRAM asked for
    _check_sram_can_hold_something(configs, problems, min(srams), args.dtype)
    series = [(name, opts, "fa1") for name, opts in configs]
    if sweep and not (args.block_q or args.block_k) and ("fa2", {}) in configs:
        series.insert(series.index(("fa2", {}, "fa1")) + 1, ("fa2", {}, "swapped"))
    jobs = [(s, p, c) for p in problems for s in srams for c in series]
    recs = []
    for n, (sram, (n_q, n_k, d), (name, opts, rule)) in enumerate(jobs):
        br, bc, rule = _blocks(args, sram, d, rule)
        tr = cf.counts(name, args.batch, args.heads, n_q, n_k, d, causal=args.causal,
                       dtype=args.dtype, block_q=br, block_k=bc, sram_bytes=sram, **opts)
        recs.append(record(tr, gpu, rule))
        if progress:
            progress(n + 1, len(jobs))
    return recs


def sweep_sizes(lo: int, hi: int, points: int) -> list[int]:
    """`points` log-spaced SRAM sizes from lo to hi, rounded to 256 bytes (lo, hi kept exact)."""
    if points == 1 or lo == hi:
        return [lo]
    out = []
    for i in range(points):
        x = lo * (hi / lo) ** (i / (points - 1))
        x = lo if i == 0 else hi if i == points - 1 else max(256, int(round(x / 256)) * 256)
        if x not in out:
            out.append(x)
    return out


# -- formatting ---------------------------------------------------------------------------------------
def human_bytes(n) -> str:
    n = float(n)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.4g} {unit}" if n / size < 1000 else f"{n / size:,.0f} {unit}"
    return f"{n:.0f} B"


def human_flops(n) -> str:
    n = float(n)
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} FLOP"


def human_time(s) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= size:
            return f"{s / size:.4g} {unit}"
    return f"{s / 1e-9:.3g} ns"


REPORT_COLUMNS = ("variant", "N", "d", "Br×Bc", "HBM read", "HBM write", "× min", "SRAM", "matmul",
                  "exp", "other", "t mem", "t matmul", "t non-mm", "bound", "TFLOP/s")


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


SWEEP_COLUMNS = ("SRAM", "Br×Bc")


def _sweep_table(recs):
    labels = []
    for r in recs:
        key = _sweep_key(r)
        if key not in labels:
            labels.append(key)
    rows, index = [], {}
    for r in recs:
        k = (r["seq_q"], r["seq_k"], r["head_dim"], r["sram_bytes"])
        if k not in index:
            index[k] = len(rows)
            n = f"{r['seq_q']}" if r["seq_q"] == r["seq_k"] else f"{r['seq_q']}×{r['seq_k']}"
            rows.append([n, str(r["head_dim"]), human_bytes(r["sram_bytes"]),
                         f"{r['block_q']}×{r['block_k']}"] + [""] * len(labels))
        if r["block_rule"] == "swapped":
            cell = f"{human_bytes(r['hbm_bytes'])} ({r['block_q']}×{r['block_k']})"
            rows[index[k]][4 + labels.index(_sweep_key(r))] = cell
            continue
        cell = human_bytes(r["hbm_bytes"])
        if r["variant"] == "v_once" and r["placement"] == "auto":
            cell += f" ({r['placement_resolved']})"
        if not r["fits"]:
            cell += " ✗"
        rows[index[k]][4 + labels.index(_sweep_key(r))] = cell
    return ["N", "d", "SRAM", "Br×Bc"] + [f"{lab} HBM" for lab in labels], rows


def _sweep_key(r):
    if r.get("block_rule") == "swapped":
        return f"{r['variant']}_swapped"
    if r["variant"] != "v_once":
        return r["variant"]
    return f"v_once_{r['placement']}_{r['rescale']}"


def _rich_tables(header, rows, width, title, caption, groups=None, keep=2):
    """One rich table, or several (the first `keep` columns repeated; column `groups` packed
    greedily) when one would not fit `width` characters."""
    from rich.table import Table

    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def need(cols):
        return sum(widths[i] + 3 for i in cols) + 1

    def table(cols, title_, caption_):
        t = Table(title=title_, caption=caption_, header_style="bold", caption_justify="left")
        for i in cols:
            t.add_column(header[i], justify="left" if i == 0 else "right", no_wrap=i != 0,
                         min_width=None if i == 0 else widths[i])
        for row in rows:
            t.add_row(*(row[i] for i in cols))
        return t

    everything = list(range(len(header)))
    if not groups or need(everything) <= width:
        return [table(everything, title, caption)]
    lead, packs = list(range(keep)), [[]]
    for group in groups:
        if packs[-1] and need(lead + packs[-1] + group) > width:
            packs.append([])
        packs[-1] += group
    return [table(lead + cols, title if n == 0 else None, caption if n == len(packs) - 1 else None)
            for n, cols in enumerate(packs)]


def render_table(header, rows, *, title=None, caption=None, file=None, groups=None) -> None:
    """rich tables on a terminal (split in two if too wide), else plain fixed-width text."""
    file = file or sys.stdout
    if file.isatty():
        from rich.console import Console

        console = Console(file=file)
        for t in _rich_tables(header, rows, console.width, title, caption, groups=groups):
            console.print(t)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    if title:
        print(title, file=file)
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in rows:
        print(line(r), file=file)
    if caption:
        print(caption, file=file)


def render_markdown(header, rows, file=None) -> None:
    file = file or sys.stdout
    print("| " + " | ".join(header) + " |", file=file)
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|", file=file)
    for r in rows:
        print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |", file=file)


def flat_record(r: dict) -> dict:
    """A CSV row: nested objects flattened to reads_Q, flops_matmul, roofline_t_s, ..."""
    out = {}
    for k, v in r.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                out[f"{k}_{kk}"] = vv
        else:
            out[k] = v
    return out


def render_csv(recs, file=None) -> None:
    file = file or sys.stdout
    flat = [flat_record(r) for r in recs]
    fields = []
    for f in flat:
        for k in f:
            if k not in fields:
                fields.append(k)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, restval="0", lineterminator="\n")
    w.writeheader()
    for f in flat:
        w.writerow({k: ("" if v is None else v) for k, v in f.items()})
    file.write(buf.getvalue())


def _caption(args, recs, gpu) -> str:
    srams = sorted({r["sram_bytes"] for r in recs})
    sram = human_bytes(srams[0]) if len(srams) == 1 else f"{human_bytes(srams[0])} … {human_bytes(srams[-1])}"
    blocks = "explicit" if (args.block_q or args.block_k) else "FA1 rule Bc=⌈M/4d⌉, Br=min(Bc,d), M=SRAM/4"
    dims = sorted({r["head_dim"] for r in recs})
    return (f"B={args.batch} H={args.heads} d={','.join(map(str, dims))} {args.dtype}"
            f"{' causal' if args.causal else ''}; "
            f"SRAM {sram} per block ({gpu.name if not args.sram else '--sram'}); blocks: {blocks}; "
            f"roofline: {gpu.name} datasheet; × min = HBM bytes / (Q,K,V read once + O,lse written once); "
            "✗ = working set over the SRAM (by over_by_bytes in --format json)")


def _emit(args, header, rows, recs, title):
    if args.format == "json":
        json.dump(recs, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.format == "csv":
        render_csv(recs)
    elif args.format == "markdown":
        render_markdown(header, rows)
    else:
        groups = None
        if "matmul" in header:  # the report: traffic | FLOPs | roofline, packed to the terminal
            names = [("Br×Bc", "d", "HBM read", "HBM write", "× min", "SRAM"), ("matmul", "exp", "other"),
                     ("t mem", "t matmul", "t non-mm", "bound", "TFLOP/s")]
            groups = [[header.index(h) for h in g if h in header] for g in names]
        render_table(header, rows, title=title, caption=_caption(args, recs, get_gpu(args.gpu)),
                     groups=groups)


def _progress_bar(total_hint: int):
    """A rich progress bar on stderr when it is a terminal and the job is long; else None."""
    if not sys.stderr.isatty() or total_hint < 50:
        return None, None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(file=sys.stderr), transient=True)
    task = bar.add_task("sweeping SRAM sizes", total=total_hint)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


def _plot(fn, recs, path):
    try:
        fn(recs, path)
    except OSError as e:
        raise CliError(f"cannot write the plot {path!r}: {e.strerror or e}") from None


def cmd_report(args) -> int:
    if args.pass_name != "forward":  # the backward's counts and columns (analysis.backward_report)
        from analysis import backward_report

        return backward_report.cmd_report(args)
    recs = build_records(args)
    if args.plot:  # before the output, so a closed pipe (| head) still gets its plot
        from analysis import plots

        _plot(plots.plot_report, recs, args.plot)
    header, rows = list(REPORT_COLUMNS), [_report_row(r) for r in recs]
    if len({r["head_dim"] for r in recs}) == 1:  # one d: say it in the caption, not in every row
        i = header.index("d")
        header.pop(i)
        for row in rows:
            row.pop(i)
    _emit(args, header, rows, recs, "fa-traffic report: HBM traffic, FLOPs, SRAM, roofline (whole problem)")
    return 0


def cmd_sweep(args) -> int:
    n_jobs = len(sweep_sizes(args.sram_min, args.sram_max, args.points)) * len(_configs(args, True)) \
        * len(_problems(args, (4096,)))
    bar, update = _progress_bar(n_jobs)
    if bar:
        with bar:
            recs = build_records(args, sweep=True, progress=update)
    else:
        recs = build_records(args, sweep=True)
    if args.plot:
        from analysis import plots

        _plot(plots.plot_sweep, recs, args.plot)
    header, rows = _sweep_table(recs)
    _emit(args, header, rows, recs, "fa-traffic sweep-sram: HBM traffic against SRAM size (FA1 Theorem 2)")
    return 0


def cmd_gpus(args) -> int:
    if args.format == "json":
        json.dump([g.as_dict() for g in GPUS.values()], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for g in GPUS.values():
        d = g.as_dict()
        print(f"{g.name} ({g.key}, compute capability {g.compute_capability})")
        for k, v in d.items():
            if isinstance(v, dict) and "value" in v:
                print(f"  {k:22s} {v['value']:<14,.6g} {v['unit']:<11s} {v['source']}"
                      + (f" [{v['note']}]" if v["note"] else ""))
        for k, v in d["measured"].items():
            print(f"  measured {k:13s} {v['value']:<14,.6g} {v['unit']:<11s} {v['note']}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        if not argv:
            argv = ["report"]
        args = parser.parse_args(argv)
        if args.command is None:
            raise CliError("choose a command: report, sweep-sram, gpus")
        if args.command == "gpus":
            return cmd_gpus(args)
        if args.plot and not args.plot.lower().endswith(".png"):
            raise CliError(f"--plot writes a PNG: give a FILE.png, got {args.plot!r}")
        return cmd_report(args) if args.command == "report" else cmd_sweep(args)
    except CliError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
