"""Fuzz: every input ends in a right answer or one clear error, within a time bound.

CLI: random argument lists (valid values, edge values and junk, for every flag) through in-process
main(argv): exit 0 with output that parses back and equals the closed forms, or exit 2 with one line
on stderr; never a traceback, never slower than FUZZ_TIME_S. API: random shapes, dtypes, strides,
scales, block sizes, flags and value ranges through the references and the closed forms: a result
that matches the float64 oracle, or a ValueError/TypeError (naive in a half type may instead warn
ScoreRangeWarning, its documented behaviour).

Budget: FUZZ_EXAMPLES examples per test (default: twice the hypothesis profile's max_examples; the
"ci" profile makes that 50, derandomised). A long hunt: FUZZ_EXAMPLES=20000 HYPOTHESIS_PROFILE=dev.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import tempfile
import time
import warnings
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from counting import closed_forms as cf
from analysis.cli import main
from counting.gpus import GPUS
from analysis.roofline import matmul_rate
from variants import VARIANTS, attention_reference
from variants.naive import OUTPUT_TOLERANCE, ScoreRangeWarning

from tests.strategies import large_model_rows

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 2 * settings.default.max_examples)),
                deadline=None, suppress_health_check=list(HealthCheck))
FUZZ_TIME_S = 10.0  # a run without a plot (a few ms to ~1 s; the machine may be shared)
FUZZ_PLOT_TIME_S = 60.0  # matplotlib: up to 8 sweep panels
_PLOTS = tempfile.mkdtemp(prefix="fa-fuzz-")

# -- the CLI --------------------------------------------------------------------------------------
EDGE = ["", " ", "0", "-1", "1", "2", "3", "7", "1.5", "0.5k", "1e3", "nan", "inf", "-inf", "0x10",
        "9" * 25, "9007199254740993", "1k", "16k", "1M", "64KiB", "228KiB", "4MiB", "1G", "100",
        "1,2", ",", "1,,2", "fp16", "bf16", "fp32", "fp8", "h200", "a100", "h100", "b200", "auto",
        "sram", "hbm", "eager", "lazy", "naive", "fa1", "fa2", "v_once", "json", "csv", "table",
        "markdown", "xml", "--", "-", "ü", "1 k", "１"]
FLAGS = {  # flag -> plausible values (EDGE values are mixed in too)
    "--variant": ["naive", "fa1", "fa2", "v_once", "fa2,v_once", "naive,fa1"],
    "--seq-len": ["1", "7", "64", "1k", "3000,5", "1M", "1024M", "65536"],
    "--seq-len-k": ["1", "9", "1k", "2k,3"],
    "--head-dim": ["1", "8", "64", "128", "64,128", "3"],
    "--batch": ["1", "2", "9007199254740993"],
    "--heads": ["1", "16"],
    "--causal": None,
    "--dtype": ["fp16", "bf16", "fp32"],
    "--gpu": ["h200", "a100", "h100"],
    "--sram": ["1KiB", "64KiB", "228KiB", "4MiB", "100"],
    "--block-q": ["1", "16", "64", "100"],
    "--block-k": ["1", "16", "64", "227"],
    "--placement": ["auto", "sram", "hbm", "auto,hbm"],
    "--rescale": ["eager", "lazy"],
    "--format": ["json", "csv", "markdown", "table"],
    "--plot": ["x.pdf", ""],
    "--sram-min": ["16KiB", "1KiB", "64KiB", "300", "1000"],
    "--sram-max": ["64KiB", "4MiB", "1KiB", "400", "1300"],
    "--points": ["1", "2", "5", "33"],
    "--pass": ["forward", "backward", "train"],
    "--bogus": ["1"],
}


SWEEP_ONLY = ("--sram-min", "--sram-max", "--points")
REPORT_ONLY = ("--pass",)


@st.composite
def argv_lists(draw):
    """Half the lists are plausible (flags of the command, values of the flag), half anything; one in six
    of the plausible ones a matmul-bound report (issue 46: a backward priced at more FLOPs than it runs
    printed TFLOP/s above the peak there), in any pass, dtype, GPU and format."""
    plausible = draw(st.booleans())
    if plausible and draw(st.integers(0, 5)) == 0:
        return ["report", "--pass", draw(st.sampled_from(["forward", "backward", "train"])),
                "--dtype", draw(st.sampled_from(["fp32", "fp16", "bf16"])),
                "--gpu", draw(st.sampled_from(["a100", "h100", "h200"])),
                "--head-dim", draw(st.sampled_from(["64", "128", "256", "64,256"])),
                "--seq-len", draw(st.sampled_from(["1k", "4k", "16k", "4k,512"]))] + \
            (["--causal"] if draw(st.booleans()) else []) + \
            ["--format", draw(st.sampled_from(["json", "csv", "markdown", "table"]))]
    argv = []
    command = draw(st.sampled_from(["report", "sweep-sram"] if plausible else
                                   ["report", "sweep-sram", "gpus", "frobnicate", None]))
    if command:
        argv.append(command)
    flags = sorted(FLAGS)
    if plausible:
        flags = [f for f in flags if f not in ("--bogus", "--plot", "--sram")
                 and (command == "sweep-sram" or f not in SWEEP_ONLY)
                 and (command == "report" or f not in REPORT_ONLY)]
    for _ in range(draw(st.integers(0, 6))):
        flag = draw(st.sampled_from(flags))
        argv.append(flag)
        if FLAGS[flag] is None:
            continue
        kind = draw(st.integers(4, 9) if plausible else st.integers(0, 9))
        if kind == 0:
            continue  # the value missing
        if kind == 1:
            argv.append(draw(st.text(max_size=6)))
        elif kind <= 3:
            argv.append(draw(st.sampled_from(EDGE)))
        else:
            argv.append(draw(st.sampled_from(FLAGS[flag])))
    if draw(st.integers(0, 39)) == 0:  # now and then a real plot, into a scratch folder
        argv += ["--plot", os.path.join(_PLOTS, "p.png")]
    return argv


def _check_records(recs):
    from counting.backward_forms import pass_counts

    for rec in recs:
        # v_once's forward options; None on --pass backward's one v_once row (its backward is fa2's under every one)
        opts = {} if rec["variant"] != "v_once" or rec["placement"] is None else {
            "placement": rec["placement"], "rescale": rec["rescale"]}
        tr = pass_counts(rec.get("pass", "forward"), rec["variant"], rec["batch"], rec["heads"], rec["seq_q"],
                         rec["seq_k"], rec["head_dim"], causal=rec["causal"], dtype=rec["dtype"],
                         block_q=rec["block_q"], block_k=rec["block_k"], sram_bytes=rec["sram_bytes"], **opts)
        assert rec["hbm_bytes"] == tr.hbm_bytes and rec["flops"] == tr.flops
        peak = matmul_rate(GPUS[rec["gpu"]], rec["dtype"]) / 1e12
        assert rec["roofline"]["predicted_tflops"] <= peak * (1 + 1e-12), rec["label"]
        if "roofline_measured" in rec:
            measured = matmul_rate(GPUS[rec["gpu"]], rec["dtype"], "measured") / 1e12
            assert rec["roofline_measured"]["predicted_tflops"] <= measured * (1 + 1e-12), rec["label"]
        assert rec.get("gpu_model", {}).get("tflops", 0) <= peak * (1 + 1e-12), rec["label"]


def _printed_tflops(out: str, fmt: str) -> list[float]:
    """Every TFLOP/s a report printed: CSV's *tflops columns; in a table or markdown, the TFLOP/s column (the last
    cell of each row under a header that ends with it; "(papers')" dropped), every such table."""
    if fmt == "csv":
        import csv

        rows = list(csv.reader(io.StringIO(out)))
        cols = [i for i, name in enumerate(rows[0]) if name.endswith("tflops")] if rows else []
        return [float(r[i]) for r in rows[1:] for i in cols if i < len(r) and r[i]]
    values, lines = [], out.splitlines()
    for i, line in enumerate(lines):
        if not line.strip().strip("|").strip().endswith("TFLOP/s"):
            continue
        for row in lines[i + 2:]:  # past the header's rule
            m = re.search(r"(\S+)(?: \(papers'\))?$", row.strip().strip("|").strip())
            try:
                values.append(float(m.group(1)))
            except (AttributeError, ValueError):
                break  # the table's end: the caption or a blank line
    return values


def _check_printed_tflops(argv, out, fmt):
    """Issue 46: no printed TFLOP/s above the named GPU's matmul peak for the dtype."""
    from analysis.cli import build_parser
    from counting.gpus import get_gpu

    args = build_parser().parse_args(argv)
    gpus = args.gpu if isinstance(args.gpu, list) else [args.gpu]
    peak = max(matmul_rate(get_gpu(getattr(g, "key", g)), args.dtype) for g in gpus) / 1e12
    for value in _printed_tflops(out, fmt):
        assert value <= peak * (1 + 1e-3), (argv, value, peak)


@FUZZ
@given(argv=argv_lists())
def test_cli_fuzz(argv):
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    elapsed = time.perf_counter() - t0
    out, err = out.getvalue(), err.getvalue()
    plot = any(a.endswith(".png") for a in argv)
    assert elapsed < (FUZZ_PLOT_TIME_S if plot else FUZZ_TIME_S), (argv, elapsed)
    assert "Traceback" not in err, (argv, err)
    if rc == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert err.startswith("fa-traffic: error: "), (argv, err)
        return
    assert rc == 0 and out and err == "", (argv, rc, err)
    fmts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--format"]  # one at most: twice is an error
    fmt = fmts[-1] if fmts else "table"
    if fmt == "json" and argv and argv[0] in ("report", "sweep-sram"):
        _check_records(json.loads(out))
        if argv[0] == "sweep-sram":  # issue 46: sizes inside --sram-min..--sram-max
            from analysis.cli import build_parser

            args = build_parser().parse_args(argv)
            assert all(args.sram_min <= r["sram_bytes"] <= args.sram_max for r in json.loads(out)), argv
    elif argv and argv[0] in ("report", "sweep-sram"):
        _check_printed_tflops(argv, out, fmt)


MODEL_ROW_TIME_S = 2.0  # per row of `predict` at any size (issue 46 item 5): ~0.1-0.6 s here; doubled for a shared machine


@settings(FUZZ, max_examples=max(5, FUZZ.max_examples // 4))  # ~0.2 s an example: 12 under "ci", 25 under "dev"
@given(case=large_model_rows())
def test_model_rows_at_large_counts_fuzz(case):
    """Large B·H, N and lists of lengths through `predict` (every pass): an answer or one clear error, each row within
    MODEL_ROW_TIME_S, never a traceback; the model's JSON rows are finite."""
    argv, rows = case
    with contextlib.redirect_stdout(io.StringIO()):  # warm: imports, the fits read once
        main(["predict", "--kernel", "fa2", "--seq-len", "1k", "--head-dim", "64", "--format", "json"])
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    elapsed = time.perf_counter() - t0
    assert elapsed < MODEL_ROW_TIME_S * rows, (argv, elapsed)
    assert "Traceback" not in err.getvalue(), (argv, err.getvalue())
    if rc == 2:
        assert out.getvalue() == "" and len(err.getvalue().strip().splitlines()) == 1, (argv, err.getvalue())
        return
    assert rc == 0, (argv, err.getvalue())
    recs = json.loads(out.getvalue())
    assert len(recs) <= rows and all(math.isfinite(r["time_s"]) and r["time_s"] > 0 for r in recs), argv


STREAMS = ("stdout closed", "stderr closed", "terminal")
COLUMNS = ("0", "1", "2", "7", "39", "-3", "abc", "", "80", "1000")  # what a terminal's COLUMNS may say


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@FUZZ
@given(argv=argv_lists(), stream=st.sampled_from(STREAMS), columns=st.sampled_from(COLUMNS))
def test_cli_fuzz_streams(argv, stream, columns):
    """Issue 46 item 6: the same argument lists with stdout closed (`>&-`), stderr closed (`2>&-`), or on a terminal
    whose COLUMNS is odd. stdout closed: one line on stderr and exit 1, or exit 2 for bad input; stderr closed: the
    output as ever, an error not printed to stdout; a terminal: output (COLUMNS=0 printed nothing), no first cell cut."""
    out, err = _Terminal(), io.StringIO()
    t0 = time.perf_counter()
    with mock.patch.dict(os.environ, {"COLUMNS": columns}), \
            contextlib.redirect_stdout(None if stream == "stdout closed" else out), \
            contextlib.redirect_stderr(None if stream == "stderr closed" else err):
        rc = main(argv)
    plot = any(a.endswith(".png") for a in argv)
    assert time.perf_counter() - t0 < (FUZZ_PLOT_TIME_S if plot else FUZZ_TIME_S), argv
    out, err = out.getvalue(), err.getvalue()
    assert "Traceback" not in err, (argv, err)
    if stream == "stdout closed":
        assert rc in (1, 2) and len(err.strip().splitlines()) == 1 and err.startswith("fa-traffic: error: "), (argv, err)
        assert rc == 2 or "standard output is closed" in err, (argv, err)
        return
    if stream == "stderr closed":
        assert rc in (0, 2) and (out == "") == (rc == 2), (argv, rc, out[:200])
        return
    if rc == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        return
    assert rc == 0 and out.strip(), (argv, columns, rc, err)
    body = [line for line in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out).splitlines() if line.startswith("│")]
    assert not [line for line in body if line.split("│")[1].strip().endswith("…")], (argv, columns)


# -- the API --------------------------------------------------------------------------------------
SHAPE_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool,
                torch.complex64]


def _strided(draw, t):
    """The same values, laid out contiguously, transposed in memory, or as a slice of a larger tensor."""
    how = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    if how == "transposed":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "sliced":
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype)
        big[..., 1::2] = t
        return big[..., 1::2]
    return t


@st.composite
def api_calls(draw):
    """Half the calls valid (shapes, dtypes, scales, blocks of every accepted kind), half with
    something off."""
    valid = draw(st.booleans())
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_q, n_k, d = draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.integers(1, 16))
    shapes = [(b, h, n_q, d), (b, h, n_k, d), (b, h, n_k, d)]
    if not valid and draw(st.integers(0, 2)) == 0:  # one shape off
        which, axis = draw(st.integers(0, 2)), draw(st.integers(0, 3))
        s = list(shapes[which])
        s[axis] = draw(st.sampled_from([0, s[axis] + 1]))
        shapes[which] = tuple(s)
    if not valid and draw(st.integers(0, 5)) == 0:
        shapes[0] = shapes[0][1:]  # rank 3
    dtype = draw(st.sampled_from(SHAPE_DTYPES[:4] if valid else SHAPE_DTYPES))
    # scales of every kind, and near the float limits (1e308 with unit q, k overflows float64: issue 46)
    good_scales = [None, 0.5, 1.0, 0.0, -0.3, 3, np.float32(0.25), np.float64(0.7)]
    limit_scales = [1e38, -3e38, 1e308, -1.7e308, 1e-308, 5e-324, 2 ** 100]
    scale = draw(st.sampled_from(good_scales + limit_scales if valid else
                                 good_scales + limit_scales + [float("nan"), float("inf"), True, "0.5",
                                                               torch.tensor(0.5), 10 ** 400, -(2 ** 1024)]))
    # magnitudes of q and k, or "band": q, k scaled so max|S| lands in [8, 8192] (log-uniform), the scores
    # where naive's half-type S rounds by 1/64 to 4 (issue 46: its warning must cover what it cannot hold)
    magnitude = draw(st.sampled_from([1.0, 1.0, 1.0, 30.0, 300.0, 1e-20, 0.0, 1e19, "band", "band"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    q, k, v = (torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes)
    if magnitude != "band":  # 1e19: scores past float32 in bf16/fp32 (fp16 stops at 65504: 1e4 there)
        magnitude = 1e4 if magnitude == 1e19 and dtype == torch.float16 else magnitude
        q, k = q * magnitude, k * magnitude
    else:
        with contextlib.suppress(TypeError, ValueError, OverflowError, RuntimeError):  # scale or shapes off: as drawn
            eff = 1 / math.sqrt(q.shape[-1]) if scale is None else abs(float(scale))
            top = (q @ k.transpose(-1, -2)).abs().max().item() * eff
            grow = math.sqrt(2.0 ** draw(st.floats(3.0, 13.0)) / top) if 0 < top < math.inf else 1.0
            if max(q.abs().max().item(), k.abs().max().item()) * grow < 1e30:  # finite in every float type drawn
                q, k = q * grow, k * grow
    q, k, v = (t.float().to(dtype) for t in (q, k, v))
    q, k, v = (_strided(draw, t) for t in (q, k, v))
    if not valid and k.dtype.is_floating_point and draw(st.integers(0, 3)) == 0:
        k = k.to(draw(st.sampled_from(SHAPE_DTYPES[:3])))  # mixed dtypes
    good_flags = [False, True, np.bool_(True), np.bool_(False)]
    causal = draw(st.sampled_from(good_flags if valid else good_flags + [1, None, "yes"]))
    good_blocks = [1, 4, 7, 16, 64, np.int64(8), np.int32(5)]
    block_q = draw(st.sampled_from(good_blocks if valid else good_blocks + [0, -4, 2.5, True, 3.0]))
    block_k = draw(st.sampled_from(good_blocks if valid else good_blocks + [0, -1, 3.0, False]))
    config = draw(st.sampled_from([(n, o) for n, v in VARIANTS.items() for o in v.configs()]))
    return dict(q=q, k=k, v=v, scale=scale, causal=causal, block_q=block_q, block_k=block_k,
                config=config)


@FUZZ
@given(call=api_calls())
def test_api_fuzz(call):
    name, opts = call["config"]
    q, k, v = call["q"], call["k"], call["v"]
    kw = dict(causal=call["causal"], scale=call["scale"], block_q=call["block_q"], block_k=call["block_k"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            o, lse = VARIANTS[name].forward(q, k, v, **kw, **opts)
        except (ValueError, TypeError) as e:
            assert str(e) and "\n" not in str(e), repr(e)
            return
    # accepted: then the inputs were valid, and the answer must be right
    assert q.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    assert isinstance(kw["causal"], (bool, np.bool_)) and not isinstance(kw["block_q"], (bool, float))
    if any(issubclass(w.category, ScoreRangeWarning) for w in caught):
        assert name == "naive" and q.dtype in (torch.float16, torch.bfloat16)  # the documented exception
        return
    ref_o, ref_lse = attention_reference(q, k, v, causal=bool(kw["causal"]), scale=kw["scale"])
    assert o.shape == q.shape and lse.shape == q.shape[:-1]
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen) and (o[~seen] == 0).all()
    # half types: the tolerance naive answers for unwarned (variants.naive.OUTPUT_TOLERANCE); the fused variants too
    tol = {torch.float64: 1e-4, torch.float32: 1e-4, **OUTPUT_TOLERANCE}[q.dtype]
    err_o = (o.double() - ref_o).abs().max().item() / max(1.0, v.double().abs().max().item())
    assert not math.isnan(err_o) and err_o <= tol, (name, opts, err_o)
    if seen.any():
        rel = ((lse.double() - ref_lse).abs()[seen] / ref_lse.abs()[seen].clamp(min=1)).max().item()
        assert rel <= tol, (name, opts, rel)


@FUZZ
@given(variant=st.sampled_from(list(cf.VARIANT_NAMES) + ["fa3", 3]),
       sizes=st.lists(st.one_of(st.integers(-3, 2 ** 64), st.sampled_from([0, 1, 2, 64, 2 ** 62, 2 ** 63])),
                      min_size=7, max_size=7),
       odd=st.sampled_from([None, "float", "bool", "numpy", "str"]), which=st.integers(0, 6),
       causal=st.sampled_from([False, True, 1, "yes", None, np.bool_(False)]),
       sram=st.sampled_from([None, 1, 1024, 232448, -5, 0, 1.5, 1024.0, float("inf"), float("nan"), True, 2 ** 70]),
       dtype=st.sampled_from(["fp16", "bf16", "fp32", "float16", torch.bfloat16, "fp8", None]),
       placement=st.sampled_from(["auto", "sram", "hbm", "l2", None]), rescale=st.sampled_from(["eager", "lazy", 1]))
def test_closed_forms_fuzz(variant, sizes, odd, which, causal, sram, dtype, placement, rescale):
    sizes = list(sizes)
    if odd:
        sizes[which] = {"float": float(sizes[which]), "bool": True, "numpy": np.int64(min(sizes[which], 2 ** 62)),
                        "str": str(sizes[which])}[odd]
    b, h, n_q, n_k, d, br, bc = sizes
    t0 = time.perf_counter()
    try:
        tr = cf.counts(variant, b, h, n_q, n_k, d, causal=causal, dtype=dtype, block_q=br, block_k=bc,
                       sram_bytes=sram, placement=placement, rescale=rescale)
    except (ValueError, TypeError) as e:
        assert str(e) and "\n" not in str(e)
        return
    finally:
        assert time.perf_counter() - t0 < 0.5
    assert tr.hbm_bytes > 0 and all(x >= 0 for x in tr.flops.values())
    assert tr.attention_flops <= tr.flops["matmul"]
    assert isinstance(causal, (bool, np.bool_))


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1, 0, 1.5, True, "1k"])
def test_memory_capacity_edges(bad):
    from counting.memory import Memory

    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        Memory(sram_bytes=bad)
