"""fa-traffic: HBM traffic, FLOPs, SRAM and a roofline for every variant, from the closed forms.

    fa-traffic report                      # all variants, N = 1k, 4k, 16k, d = 64, fp16, H200 SRAM, at the
                                           # benchmarks' full GPU (B = 16k/N, H = 2048/d), as predict
    fa-traffic report --seq-len 1k,4k,16k,64k --causal --format json
    fa-traffic sweep-sram --plot docs/theorem2.png   # FA1 Theorem 2: traffic against SRAM size M
    fa-traffic gpus                        # the GPU figures and their sources

Counts come from `counting.closed_forms` (held exactly equal to the instrumented references by the
tests). The report's blocks default to the ones each variant's real kernel runs, with the GPU model's
levels (L2 requests, DRAM bytes) beside the papers' count and its bound / TFLOP/s (analysis.report_gpu);
`--blocks fa1-rule` gives FA1's rule Bc = ⌈M/4d⌉, Br = min(Bc, d) with M = SRAM bytes / 4 (float32
elements: the on-chip compute type) and the papers' roofline, as sweep-sram always does;
--block-q/--block-k override. Rows whose working set does not fit the SRAM are reported with
fits = false and over_by_bytes, not dropped.

Limits (a one-line error past them, exit 2): at most MAX_ROWS = 50,000 output rows (problems x
SRAM sizes x variant configs), --points at most MAX_POINTS = 1,000, a --plot of a sweep at most
MAX_PLOT_PANELS = 8 problems, every tensor at most 2**63 - 1 elements, and the GPU model (it walks
every Q block) on rows of at most MAX_MODEL_Q_BLOCKS = 65,536 Q blocks, at any B*H (the papers' roofline past it,
said so in the row). Any size within them
answers in well under a second per row (the closed forms do not loop over blocks). json and csv are
written as the rows are computed (tables hold their rows); a progress bar shows on a terminal's stderr for long jobs.
Integers are parsed exactly (no float round trip); a flag that does not apply to the command or the
chosen variants is an error, never silently ignored. Output errors (stdout closed, a closed pipe, a full
disk) end with one line on stderr and exit status 1 (EXIT_OUTPUT); with stderr closed, errors are not
printed at all (never to stdout) and the exit status alone tells.

This module is the command line (parser, plan, commands); below it: analysis/report_common.py (the report's
rows, captions and output, shared with --pass backward|train in analysis/backward_report.py), analysis/format.py
(units, tables, CSV, JSON) and analysis/gpu_cli.py (predict, validate).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from fractions import Fraction

from analysis import backward_report, gpu_cli, report_ring
# the report's rows, captions and output (report_common) and the formatting (format) were defined here: their names
# stay importable from analysis.cli (F401 is off for this file)
from analysis.format import (is_tty, say, table_width, _rich_tables, flat_record, human_bytes, human_flops, human_time, render_csv,
                             render_markdown, render_table, write_csv, write_json)
from analysis.report_common import (DEFAULT_SEQ, PAPERS_BOUND, PAPERS_TFLOPS, REPORT_COLUMNS, REPORT_V_ONCE, SWEEP_V_ONCE, CliError, _blocks,
                                    _caption, _check_sram_can_hold_something, _configs, _emit, _flatten,
                                    _kernel_caption, _min_working_set, _plot, _problems, _report_row, record)
from analysis.report_gpu import MAX_MODEL_Q_BLOCKS
from gpumodel import gpu_model as gm
from counting import checks
from counting import closed_forms as cf
from counting.gpus import GPUS, get_gpu
from counting.headline import min_hbm_bytes

PROG = "fa-traffic"
FORMATS = ("table", "csv", "json", "markdown")
MAX_ROWS = 50_000  # output rows of one command
MAX_POINTS = 1_000  # SRAM sizes of one sweep
MAX_PLOT_PANELS = 8  # problems in one sweep plot (one panel each)
DEFAULT_POINTS = 33


class _StoreOnce(argparse._StoreAction):
    """A single-value flag given twice is an error: argparse would keep the last value silently, so
    `--head-dim 64 --head-dim 128` would answer for d = 128 alone (list flags append instead)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({given[self.dest]} and {option_string} "
                                               f"{_quote(values)}); it takes one value")
        given[self.dest] = f"{option_string} {_quote(values)}"
        super().__call__(parser, namespace, values, option_string)


def _quote(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)  # the default action of every flag with a value
        self.register("action", "store", _StoreOnce)

    def error(self, message):  # one line, no usage dump
        raise CliError(message)


# -- number parsing -------------------------------------------------------------------------------
_NUM = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_COUNT_SUFFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024 ** 2, "M": 1024 ** 2}
_BYTE_SUFFIX = {"": 1, "B": 1, "k": 1024, "K": 1024, "KiB": 1024, "kiB": 1024, "M": 1024 ** 2,
                "MiB": 1024 ** 2, "G": 1024 ** 3, "GiB": 1024 ** 3}


_MAX_INT = 2 ** 63 - 1


def _number(text: str, suffixes: dict, what: str) -> int:
    m = _NUM.match(str(text))
    if not m or m.group(2) not in suffixes:
        hint = ", ".join(s for s in suffixes if s)
        hint = f", optionally with a suffix: {hint}" if hint else ""
        raise argparse.ArgumentTypeError(f"malformed {what} {text!r} (a positive integer{hint})")
    digits = m.group(1)
    # exact: no float round trip above 2**53 (a plain integer skips the Fraction: a list of 100k lengths parsed in 2 s)
    value = (int(digits) if digits.isdigit() else Fraction(digits)) * suffixes[m.group(2)]
    if (not isinstance(value, int) and value.denominator != 1) or value <= 0:
        raise argparse.ArgumentTypeError(f"{what} must be a positive whole number, got {text!r}")
    if value > _MAX_INT:
        raise argparse.ArgumentTypeError(f"{what} {text!r} is over 2**63 - 1")
    return int(value)


def parse_count(text: str) -> int:
    """'1k' -> 1024, '16k' -> 16384, '65536' -> 65536."""
    return _number(text, _COUNT_SUFFIX, "length")


def parse_bytes(text: str) -> int:
    """'228KiB' -> 233472, '1MiB', '4096'. KB/MB are refused as ambiguous (use KiB/MiB)."""
    return _number(text, _BYTE_SUFFIX, "size")


def _positive_int(text: str) -> int:
    return _number(text, {"": 1}, "integer")


def _cache_len(text: str) -> int:
    """A cache length: 0 (an empty cache) or a length as parse_count takes it."""
    return 0 if str(text).strip() == "0" else parse_count(text)


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


# -- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="HBM traffic, FLOPs, SRAM working set and a roofline "
                     "for naive attention, FlashAttention-1/2 and issue #941's multiply-V-once.")
    sub = parser.add_subparsers(dest="command", metavar="{report,sweep-sram,predict,validate,gpus}")

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
                       help="v_once f-row placement(s): auto, sram, hbm, cluster (the row over a "
                            "thread-block cluster, lazy only)")
        p.add_argument("--rescale", action="append", type=_choice_list(cf.RESCALES, "rescale"),
                       help="v_once rescale mode(s): eager, lazy")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
        p.add_argument("--plot", metavar="FILE.png", help="also write a plot (matplotlib, PNG)")

    rep = sub.add_parser("report", help="compare the variants at a few sequence lengths")
    common(rep, seq_help="query lengths Nq, e.g. 1k,4k,16k (default) or 65536; repeatable")
    rep.add_argument("--pass", dest="pass_name", choices=("forward", "backward", "train"),
                     default="forward", help="forward (default), backward, or train = both "
                     "(adds memory saved for the backward and recompute FLOPs)")
    rep.add_argument("--blocks", choices=("kernel", "fa1-rule"), default="kernel",
                     help="kernel: each variant's real kernel's Br, Bc and the GPU model (default; H200 only, other GPUs: "
                          "the papers' roofline); "
                          "fa1-rule: FA1's rule and the papers' roofline (--pass forward only: backward and train "
                          "take FA1's rule on half the SRAM)")
    rep.add_argument("--ranks", type=_positive_int, help="ring attention over P GPUs instead (issue 45): bytes per "
                     "rank and step, the overlap with NVLink, load imbalance (analysis/report_ring.py)")
    dec = rep.add_argument_group("decoding (issue 44: split_kv over a KV cache; counting/decode.py)")
    dec.add_argument("--kv-heads", type=_positive_int, help="split_kv: kv heads H_kv, dividing H (grouped-query "
                     "attention: g = H/H_kv query heads share each K/V byte; default H)")
    dec.add_argument("--page-size", type=_positive_int, help="split_kv: a paged cache of pages of this many positions "
                     "(max_pages = ceil(Nk / page_size)); default a contiguous cache")
    dec.add_argument("--cache-lens", action="append", type=_list_of(_cache_len), help="split_kv: per-sequence cache "
                     "lengths L_b (one per sequence, B = --batch of them, each 0..Nk; default all Nk)")
    dec.add_argument("--num-splits", type=_positive_int, help="split_kv: splits S (default the rule of "
                     "counting/split_rule.py: enough CTAs to fill the GPU's SMs twice over)")
    rep.set_defaults(batch=None, heads=None)  # unset: counts per head, the GPU model on a full GPU
    sw = sub.add_parser("sweep-sram", help="FA1 Theorem 2: HBM traffic against SRAM size M")
    common(sw, seq_help="the fixed sequence length N (default 4k; a list gives one sweep each)")
    sw.add_argument("--sram-min", type=parse_bytes, default=16 * 1024, help="smallest M (default 16KiB)")
    sw.add_argument("--sram-max", type=parse_bytes, default=4 * 1024 ** 2, help="largest M (default 4MiB)")
    sw.add_argument("--points", type=_positive_int,
                    help=f"log-spaced sizes (default {DEFAULT_POINTS}, at most {MAX_POINTS})")
    gpu_cli.add_subcommands(sub, {"count": parse_count, "positive": _positive_int, "list": _list_of, "gpu": _gpu,
                                  "cache_len": _cache_len})
    g = sub.add_parser("gpus", help="the GPU figures and their sources")
    g.add_argument("--format", choices=("table", "json"), default="table")
    return parser


# -- building the rows ------------------------------------------------------------------------------


def _count_problems(args, default_seq) -> int:
    return (len(_flatten(args.head_dim)) or 1) * (len(_flatten(args.seq_len)) or len(default_seq)) \
        * (len(_flatten(args.seq_len_k)) or 1)


def check_plot_path(path) -> None:
    """--plot FILE.png, refused before anything is computed: a name, a PNG, in a folder that exists and can be
    written, and not itself a folder (matplotlib would fail only after every row was counted)."""
    if path is None:
        return
    if not path.strip():
        raise CliError("--plot needs a file name (FILE.png)")
    if not path.lower().endswith(".png"):
        raise CliError(f"--plot writes a PNG: give a FILE.png, got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(f"cannot write the plot {path!r}: it is a folder")
    if not os.path.isdir(folder):
        raise CliError(f"cannot write the plot {path!r}: no folder {folder!r} to write it in")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise CliError(f"cannot write the plot {path!r}: permission denied")


def check_applicable(args, sweep: bool) -> None:
    """Every flag given must change the output: one that would be ignored is an error."""
    check_plot_path(args.plot)
    variants = _flatten(args.variant) or list(cf.VARIANT_NAMES)
    for flag, value in (("--placement", args.placement), ("--rescale", args.rescale)):
        if value and "v_once" not in variants:
            raise CliError(f"{flag} applies to v_once only, which --variant leaves out")
    given = [flag for flag, dest in DECODE_FLAGS if getattr(args, dest, None) is not None]
    if given and "split_kv" not in variants:
        raise CliError(f"{given[0]} applies to split_kv only, which --variant leaves out")
    if getattr(args, "cache_lens", None) and args.batch is None:
        raise CliError("--cache-lens gives one length per sequence: give --batch B too (the default B depends on N)")
    if sweep:
        if args.sram is not None:
            raise CliError("--sram does not apply to sweep-sram: it sweeps --sram-min .. --sram-max")
        if args.points is not None and args.points > MAX_POINTS:
            raise CliError(f"--points {args.points:,} is over the limit of {MAX_POINTS:,}")
        if args.sram_min > args.sram_max:
            raise CliError(f"--sram-min ({args.sram_min:,}) is larger than --sram-max ({args.sram_max:,})")
        if args.points is not None and args.points > 1 and args.sram_min == args.sram_max:
            raise CliError(f"--points {args.points} needs --sram-min < --sram-max (both are "
                           f"{args.sram_min:,})")


DECODE_FLAGS = (("--kv-heads", "kv_heads"), ("--page-size", "page_size"), ("--cache-lens", "cache_lens"),
                ("--num-splits", "num_splits"))


def decode_options(args) -> dict:
    """split_kv's keywords of counting.closed_forms.counts from the decode flags (those given)."""
    out = {"kv_heads": getattr(args, "kv_heads", None), "page_size": getattr(args, "page_size", None),
           "num_splits": getattr(args, "num_splits", None)}
    lens = _flatten_all(getattr(args, "cache_lens", None))
    if lens:
        out["cache_seqlens"] = lens
    return {k: v for k, v in out.items() if v is not None}


def _flatten_all(lists):
    """The items of a repeated list flag in order, repeats kept (cache lengths of several sequences may be equal)."""
    return [x for item in lists or [] for x in item]


class _Plan:
    """What one report or sweep computes: jobs in output order, counted before any is run."""

    def __init__(self, args, sweep: bool):
        check_applicable(args, sweep)
        if getattr(args, "full_gpu", None) is None:  # report's forward without --batch/--heads: the bench's B, H
            args.full_gpu = (not sweep and args.batch is None and args.heads is None)  # every pass (issue 43)
        args.batch, args.heads = args.batch or 1, args.heads or 1
        self.args, self.sweep = args, sweep
        self.by_kernel = (not sweep and getattr(args, "blocks", "fa1-rule") == "kernel"
                          and not (args.block_q or args.block_k))
        self.gpu = get_gpu(args.gpu)
        default_seq = (4096,) if sweep else DEFAULT_SEQ
        configs = _configs(args, sweep)
        n_problems = _count_problems(args, default_seq)
        self.srams = (sweep_sizes(args.sram_min, args.sram_max, args.points or DEFAULT_POINTS) if sweep
                      else [args.sram or self.gpu.sram_bytes])
        n_srams = len(self.srams)
        series = [(name, opts, "fa1") for name, opts in configs]
        if sweep and not (args.block_q or args.block_k) and ("fa2", {}) in configs:
            series.insert(series.index(("fa2", {}, "fa1")) + 1, ("fa2", {}, "swapped"))
        rows = n_problems * n_srams * len(series)
        if rows > MAX_ROWS:
            raise CliError(f"{rows:,} rows asked for ({n_problems:,} problems x {n_srams:,} SRAM sizes x "
                           f"{len(series)} variant configs); the limit is {MAX_ROWS:,}")
        if sweep and args.plot is not None and n_problems > MAX_PLOT_PANELS:
            raise CliError(f"a sweep plot draws one panel per problem: {n_problems} asked for, the "
                           f"limit is {MAX_PLOT_PANELS}")
        self.problems = _problems(args, default_seq)
        naive = any(name == "naive" for name, _ in configs)
        for n_q, n_k, d in self.problems:  # sizes past int64 indexing: before any output
            try:
                checks.check_problem(*self.shape(n_q, d), n_q, n_k, d, causal=args.causal,
                                     block_q=args.block_q or 1, block_k=args.block_k or 1,
                                     scores_in_hbm=naive)
            except ValueError as e:
                batch, heads = self.shape(n_q, d)
                shape = (f" (at B={batch} H={heads}, the default: the benchmarks' full GPU; --batch 1 --heads 1 for "
                         "one head)" if args.full_gpu else "")
                raise CliError(f"Nq={n_q}, Nk={n_k}, d={d}: {e}{shape}") from None
        self.decode = decode_options(args)
        if any(name == "split_kv" for name, _ in configs):  # the decode flags, checked on every problem up front
            for n_q, n_k, d in self.problems:
                batch, heads = self.shape(n_q, d)
                try:
                    cf.counts("split_kv", batch, heads, n_q, n_k, d, causal=args.causal, dtype=args.dtype,
                              block_q=args.block_q or 64, block_k=args.block_k or 64, **self.decode)
                except ValueError as e:
                    shape = f" (B={batch} H={heads}{', the default: --batch/--heads to choose' if args.full_gpu else ''})"
                    raise CliError(f"split_kv at Nq={n_q}, Nk={n_k}, d={d}{shape}: {e}") from None
        # an error only if nothing at all can fit the smallest SRAM asked for
        _check_sram_can_hold_something(configs, self.problems, min(self.srams), args.dtype)
        if not sweep and any(o.get("placement") == "cluster" for _, o in configs):  # asked for: it must exist
            from counting.cluster import check_cluster_holds

            for n_q, n_k, d in self.problems:
                for sram in self.srams:
                    br, bc = (64, 64) if self.by_kernel else _blocks(args, sram, d)[:2]
                    try:
                        check_cluster_holds(n_k, d, br, bc, cf.DTYPES[args.dtype], sram)
                    except ValueError as e:
                        raise CliError(str(e)) from None
        self.series = series
        self.total = rows
        self.dims = sorted({d for _, _, d in self.problems})

    @property
    def _n_k(self) -> dict:
        """Nq -> the longest Nk asked with it: the full GPU's B counts the longer side's tokens (decode: the cache)."""
        out: dict = {}
        for n_q, n_k, _ in getattr(self, "problems", None) or _problems(self.args, DEFAULT_SEQ):
            out[n_q] = max(out.get(n_q, 0), n_k)
        return out

    def shape(self, n_q: int, d: int) -> tuple[int, int]:
        """(B, H) of a row: --batch/--heads (1 where one is left out), else on report's forward the benchmarks' full
        GPU (report_gpu.full_gpu_problem), the shape `fa-traffic predict` defaults to, so the two agree."""
        if self.args.full_gpu:
            from analysis.report_gpu import full_gpu_problem

            return full_gpu_problem(n_q, d, self._n_k.get(n_q))
        return self.args.batch, self.args.heads

    def sweep_labels(self) -> list[str]:
        """The sweep table's value columns, in series order (as _sweep_key names a record)."""
        return [f"{name}_swapped" if rule == "swapped" else
                f"v_once_{opts['placement']}_{opts['rescale']}" if name == "v_once" else name
                for name, opts, rule in self.series]

    def __iter__(self):
        args = self.args
        for n_q, n_k, d in self.problems:
            batch, heads = self.shape(n_q, d)
            for sram in self.srams:
                for name, opts, rule in self.series:
                    br, bc, rule_ = _blocks(args, sram, d, rule)
                    desc, why = None, None if self.by_kernel else (
                        "explicit --block-q/--block-k" if (args.block_q or args.block_k) else "--blocks fa1-rule")
                    if self.by_kernel:  # issue 11: the real kernel's blocks and the GPU model
                        from analysis import report_gpu

                        desc, why = report_gpu.kernel_descriptor(name, opts, n_q, n_k, d, args.dtype,
                                                                 args.causal, self.gpu.key)
                        if desc is not None:
                            br, bc, rule_ = desc.block_q, desc.block_k, f"kernel {desc.kernel}"
                            if -(-n_q // br) > MAX_MODEL_Q_BLOCKS:  # the model walks every Q block
                                desc, why = None, (f"the GPU model walks each of the {-(-n_q // br):,} Q "
                                                   f"blocks; over its limit of {MAX_MODEL_Q_BLOCKS:,}")
                    dec = self.decode if name == "split_kv" else {}
                    if dec and desc is not None:  # the split rule fills the priced GPU's SMs
                        dec = dict(dec, num_sms=int(self.gpu.value("sms", "measured")))
                    try:
                        tr = cf.counts(name, batch, heads, n_q, n_k, d, causal=args.causal,
                                       dtype=args.dtype, block_q=br, block_k=bc, sram_bytes=sram, **opts, **dec)
                    except ValueError as e:
                        raise CliError(f"{name} at Nq={n_q}, Nk={n_k}, d={d}: {e}") from None
                    rec = record(tr, self.gpu, rule_)
                    if self.decode and name != "split_kv":
                        rec["note"] = ("the decode flags apply to split_kv only: this row reads K and V for all H "
                                       "heads of a full, contiguous cache of Nk positions")
                    if not self.sweep and name == "v_once":  # where each placement applies (issue 18)
                        from analysis.report_cluster import applies

                        kind, cs = applies(n_q, n_k, d, args.causal, cf.DTYPES[args.dtype])
                        rec["f_row"] = {"placement": kind, "cluster_size": cs}
                    if not self.sweep:
                        from analysis import report_gpu

                        try:
                            rec["gpu_model"] = (report_gpu.model_record(desc, batch, heads, n_q, n_k, d, args.dtype,
                                                                        args.causal, self.gpu.key,
                                                                        **(self.decode if name == "split_kv" else {}))
                                                if desc is not None else {"why": why})
                        except ValueError as e:  # e.g. a B·H past the model's work tiles at this N
                            rec["gpu_model"] = {"why": f"no GPU model here ({e})"}
                    yield rec


def iter_records(args, *, sweep=False, progress=None):
    """The records, one at a time, in output order (validated and counted up front)."""
    plan = _Plan(args, sweep)
    for n, rec in enumerate(plan):
        if progress:
            progress(n + 1, plan.total)
        yield rec


def build_records(args, *, sweep=False, progress=None) -> list[dict]:
    return list(iter_records(args, sweep=sweep, progress=progress))


def sweep_sizes(lo: int, hi: int, points: int) -> list[int]:
    """`points` log-spaced SRAM sizes from lo to hi, rounded to 256 bytes (lo, hi kept exact), never outside
    lo..hi (a size rounded past an end is that end) and in increasing order, repeats dropped."""
    if points > MAX_POINTS:
        raise ValueError(f"points={points} is over the limit of {MAX_POINTS}")
    if points == 1 or lo == hi:
        return [lo]
    out = []
    for i in range(points):
        x = lo * (hi / lo) ** (i / (points - 1))
        x = lo if i == 0 else hi if i == points - 1 else min(hi, max(lo, int(round(x / 256)) * 256))
        if not out or x > out[-1]:  # x never decreases (monotone rounding and clamping): > drops repeats
            out.append(x)
    return out


# -- formatting ---------------------------------------------------------------------------------------


# the default report (issue 11): the papers' count beside the levels the GPU model gives, at each
# variant's real kernel's blocks; bound and TFLOP/s from the GPU model (analysis.report_gpu)
KERNEL_REPORT_COLUMNS = ("variant", "kernel", "N", "d", "Br×Bc", "requests", "L2", "DRAM", "DRAM × min", "smem",
                         "matmul", "exp", "other", "FLOP/B req", "FLOP/B min", "bound", "TFLOP/s")


def _kernel_report_row(r: dict) -> list[str]:
    g, rf = r.get("gpu_model", {}), r["roofline"]
    n = f"{r['seq_q']}" if r["seq_q"] == r["seq_k"] else f"{r['seq_q']}×{r['seq_k']}"
    sram = human_bytes(r["sram_peak_bytes"]) + ("" if r["fits"] else " ✗")
    if g.get("smem_bytes"):  # what the kernel allocates (S, P in registers), not the reference's working set
        sram = human_bytes(g["smem_bytes"])
    flops = sum(r["flops"].values())
    if "time_s" in g:
        levels = [human_bytes(g["l2_bytes"]), human_bytes(g["dram_bytes"]),
                  f"{g['dram_bytes'] / r['min_hbm_bytes']:.3g}"]
        verdict = [g["bound"], f"{g['tflops']:.4g}"]
    else:  # no kernel or no model for this row: the papers' roofline, said so
        levels = ["—", "—", "—"]
        verdict = [f"{rf['bound']} (papers')", f"{rf['predicted_tflops']:.4g} (papers')"]
    return ([r["label"], g.get("kernel", "—"), n, str(r["head_dim"]), f"{r['block_q']}×{r['block_k']}",
             human_bytes(r["hbm_bytes"])] + levels
            + [sram, human_flops(r["flops"]["matmul"]), human_flops(r["flops"]["exp"]),
               human_flops(r["flops"]["other"]), f"{flops / r['hbm_bytes']:.4g}",
               f"{flops / r['min_hbm_bytes']:.4g}"] + verdict)


SWEEP_COLUMNS = ("SRAM", "Br×Bc")


def _sweep_table(recs, labels):
    """Rows of text (one per problem and SRAM size), filled as the records stream by."""
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


class _Progress:
    """A rich progress bar on stderr when it is a terminal and the job is long; else nothing."""

    MIN_ROWS = 2_000  # about a second of rows

    def __init__(self, total: int, what: str):
        self.bar = None
        if total >= self.MIN_ROWS and is_tty(sys.stderr):
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(file=sys.stderr), transient=True, redirect_stdout=False,
                                redirect_stderr=False)  # the output stays on stdout
            self.task = self.bar.add_task(what, total=total)

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def wrap(self, plan):
        """plan's records, advancing the bar (restarted on each pass)."""
        if self.bar:
            self.bar.reset(self.task)
        for rec in plan:
            if self.bar:
                self.bar.advance(self.task)
            yield rec


def _run(args, *, sweep: bool, table_rows, title) -> int:
    plan = _Plan(args, sweep)
    with _Progress(plan.total, "sweeping SRAM sizes" if sweep else "counting") as progress:
        if args.plot is not None:  # the plot needs every record (bounded by MAX_ROWS); before the
            from analysis import plots  # output, so a closed pipe (| head) still gets its plot

            recs = list(progress.wrap(plan))
            _plot(plots.plot_sweep if sweep else plots.plot_report, recs, args.plot)
            records = lambda: iter(recs)  # noqa: E731
        else:
            records = lambda: progress.wrap(plan)  # noqa: E731
        _emit(args, plan, records, table_rows=table_rows, title=title)
    return 0


def _given(args, dest: str) -> bool:
    """Whether a single-value flag was on the command line (not its default): _StoreOnce records each."""
    return dest in getattr(args, "_given_once", {})


def cmd_report(args) -> int:
    if args.ranks is not None:  # the ring's table (issue 45)
        return report_ring.cmd_report(args)
    if args.pass_name != "forward":  # the backward's counts and columns (analysis.backward_report)
        if _given(args, "blocks"):  # backward_report.blocks: one rule for both passes of train
            raise CliError(f"--blocks applies to --pass forward: --pass {args.pass_name} takes FA1's rule on half "
                           "the SRAM (two score tiles; --block-q/--block-k to choose)")
        if args.pass_name == "backward" and (args.placement or args.rescale):  # they change train's forward half
            raise CliError("--placement/--rescale do not apply to --pass backward: v_once's backward is fa2's "
                           "(counting/backward_forms.py), the same counts for every placement and rescale; they "
                           "apply to --pass forward and train")

        _Plan(args, False)  # the forward's checks and limits, before anything is counted
        return backward_report.cmd_report(args)
    if _given(args, "blocks") and args.blocks == "kernel" and get_gpu(args.gpu).key not in gm.COVERED_GPUS:
        raise CliError(f"--blocks kernel prices each kernel with the GPU model, which covers the "
                       f"{', '.join(g.upper() for g in gm.COVERED_GPUS)} only: --gpu {args.gpu} gives counts and "
                       "the papers' roofline (no cache)")
    one_d = len(_flatten(args.head_dim) or [64]) == 1  # one d: say it in the caption, not every row

    def table_rows(recs):
        header, rows = list(REPORT_COLUMNS), [_report_row(r) for r in recs]
        if any("why" not in r.get("gpu_model", {"why": 1}) for r in recs):  # --blocks kernel (issue 11)
            header, rows = list(KERNEL_REPORT_COLUMNS), [_kernel_report_row(r) for r in recs]
            if any(r["dsmem_bytes"] for r in recs):  # placement cluster (issue 18): its DSMEM beside the levels
                i = header.index("DRAM × min") + 1
                header.insert(i, "DSMEM")
                for row, r in zip(rows, recs):
                    row.insert(i, human_bytes(sum(r["dsmem_bytes"].values())) if r["dsmem_bytes"] else "—")
        if one_d:
            i = header.index("d")
            header.pop(i)
            for row in rows:
                row.pop(i)
        return header, rows

    kernel = (getattr(args, "blocks", "fa1-rule") == "kernel" and not (args.block_q or args.block_k)
              and get_gpu(args.gpu).key in gm.COVERED_GPUS)  # else no row has the model: the title says so
    return _run(args, sweep=False, table_rows=table_rows,
                title="fa-traffic report: the papers' count, L2 and DRAM, FLOPs, the GPU model's bound "
                      "(whole problem)" if kernel else
                      "fa-traffic report: HBM traffic, FLOPs, SRAM, the papers' roofline (no cache; whole problem)")


def cmd_sweep(args) -> int:
    labels = _Plan(args, True).sweep_labels()
    return _run(args, sweep=True, table_rows=lambda recs: _sweep_table(recs, labels),
                title="fa-traffic sweep-sram: HBM traffic against SRAM size (FA1 Theorem 2)")


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


def _one_line(text) -> str:
    """An error message as one printable line (arguments may hold newlines or control characters)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


EXIT_USAGE = 2  # bad input (CliError): nothing computed, nothing written
EXIT_OUTPUT = 1  # the output cannot be written: stdout closed (`>&-`), a closed pipe (`| head`), a full disk


def _stdout_closed() -> bool:
    out = sys.stdout
    return out is None or getattr(out, "closed", False)


class OutputClosed(Exception):
    """Standard output is closed (`fa-traffic gpus >&-`): nothing to write the output to."""


def _quiet_stdout() -> None:
    """After an output error: point fd 1 at /dev/null so the interpreter's final flush cannot raise
    again (only for the process's real stdout, not one a caller swapped in)."""
    try:
        if sys.stdout is sys.__stdout__ and sys.stdout is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv=None) -> int:
    """fa-traffic. Exit status: 0 done; 2 bad input (one line on stderr, before anything is computed); 1 the output
    could not be written (stdout closed, a broken pipe, a full disk: one line on stderr) or validate's misses."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        if not argv:
            argv = ["report"]
        args = parser.parse_args(argv)
        if args.command is None:
            raise CliError("choose a command: report, sweep-sram, predict, validate, gpus")
        if _stdout_closed():  # before any work: every command's output goes to stdout
            raise OutputClosed
        if args.command == "gpus":
            rc = cmd_gpus(args)
        elif args.command in ("predict", "validate"):  # the GPU model (issue 11): analysis.gpu_cli
            check_plot_path(getattr(args, "plot", None))
            rc = gpu_cli.run(args, CliError)
        else:
            rc = cmd_report(args) if args.command == "report" else cmd_sweep(args)
        sys.stdout.flush()  # an output error must surface here, not at interpreter exit
        return rc
    except CliError as e:
        say(f"{PROG}: error: {_one_line(e)}")
        return EXIT_USAGE
    except OutputClosed:
        say(f"{PROG}: error: standard output is closed: nothing to write the output to")
        return EXIT_OUTPUT
    except BrokenPipeError:  # e.g. piped into head, which has all it wanted
        _quiet_stdout()
        say(f"{PROG}: error: output closed before the end (broken pipe)")
        return EXIT_OUTPUT
    except OSError as e:  # e.g. a full disk
        _quiet_stdout()
        say(f"{PROG}: error: cannot write the output: {_one_line(e.strerror or e)}")
        return EXIT_OUTPUT
    except (AttributeError, ValueError):  # stdout closed while running (None, or a closed file object)
        if not _stdout_closed():
            raise
        say(f"{PROG}: error: standard output was closed before the end")
        return EXIT_OUTPUT
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
