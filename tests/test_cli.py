"""fa-traffic: formats parse back, numbers equal the closed forms and the references, errors exit 2."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, strategies as st

from counting import closed_forms as cf
from analysis.cli import main, parse_bytes, parse_count
from counting.gpus import GPUS
from counting.memory import Memory
from variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("variant", "batch", "heads", "seq_q", "seq_k", "head_dim", "causal", "dtype", "block_q",
            "block_k", "sram_bytes", "reads", "writes", "hbm_read_bytes", "hbm_write_bytes", "flops",
            "paper_flops", "sram_peak_bytes", "fits", "over_by_bytes", "roofline", "placement",
            "placement_resolved", "rescale")


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


def closed_for(rec) -> cf.Traffic:
    opts = {} if rec["variant"] != "v_once" else {"placement": rec["placement"], "rescale": rec["rescale"]}
    return cf.counts(rec["variant"], rec["batch"], rec["heads"], rec["seq_q"], rec["seq_k"],
                     rec["head_dim"], causal=rec["causal"], dtype=rec["dtype"], block_q=rec["block_q"],
                     block_k=rec["block_k"], sram_bytes=rec["sram_bytes"], **opts)


def test_default_report(capsys):
    rc, out, err = run(capsys, "report")
    assert rc == 0 and err == ""
    for label in ("naive", "fa1", "fa2", "v_once_auto(hbm)_eager", "v_once_auto(hbm)_lazy",
                  "v_once_sram_eager"):
        assert label in out
    for n in ("1024", "4096", "16384"):
        assert n in out
    assert "MiB" in out and "GFLOP" in out and "✗" in out  # v_once sram does not fit 227 KiB
    assert main([]) == 0  # bare fa-traffic is the report too
    capsys.readouterr()


def test_json_matches_the_closed_forms(capsys):
    recs = run_json(capsys, "report", "--seq-len", "1k,4k", "--causal", "--dtype", "bf16",
                    "--batch", "2", "--heads", "3", "--placement", "auto,sram,hbm", "--rescale", "eager",
                    "--rescale", "lazy")
    assert len(recs) == 2 * (4 + 6)  # naive, fa1, fa2, split_kv and six v_once configs
    for rec in recs:
        for key in REQUIRED:
            assert key in rec, key
        tr = closed_for(rec)
        assert rec["reads"] == tr.reads and rec["writes"] == tr.writes
        assert rec["read_bytes"] == tr.read_bytes and rec["write_bytes"] == tr.write_bytes
        assert rec["hbm_read_bytes"] == tr.hbm_read_bytes and rec["hbm_write_bytes"] == tr.hbm_write_bytes
        assert rec["flops"] == tr.flops and rec["sram_peak_bytes"] == tr.sram_peak_bytes
        assert rec["paper_flops"] == tr.paper_flops == 4 * 6 * rec["seq_q"] ** 2 * 64 / 2
        assert rec["fits"] == tr.fits and rec["over_by_bytes"] == tr.over_by_bytes
        assert rec["sram_bytes"] == GPUS["h200"].sram_bytes
        if "time_s" in rec["gpu_model"]:  # the default: the real kernel's blocks (issue 11)
            assert rec["block_rule"] == f"kernel {rec['gpu_model']['kernel']}"
        else:  # no kernel takes this row: FA1's rule, and the row says why
            assert (rec["block_q"], rec["block_k"]) == cf.fa1_blocks(rec["sram_bytes"], 64)
            assert rec["gpu_model"]["why"]
        rf = rec["roofline"]
        assert rf["t_s"] == max(rf["t_memory_s"], rf["t_matmul_s"], rf["t_nonmatmul_s"])
        assert rf["bound"] in ("memory", "matmul", "non-matmul")
    # the f row of 4k keys never fits on chip; at 1k it does at the kernel's 64-row blocks (v_once_tc runs it)
    v_sram = [r for r in recs if r["placement"] == "sram" and r["seq_q"] == 4096]
    assert v_sram and all(not r["fits"] and r["over_by_bytes"] > 0 for r in v_sram)
    assert all(r["placement_resolved"] == "hbm" for r in recs if r["placement"] == "auto" and r["seq_q"] == 4096)


def test_default_report_is_the_gpu_model_at_the_kernels_blocks(capsys):
    """Issue 11: the report's default blocks are the real kernels', its bound and TFLOP/s the GPU model's
    (not the papers' roofline), with the levels beside the papers' count; --blocks fa1-rule keeps FA1's."""
    from gpumodel import gpu_model as gm
    from gpumodel.descriptors import describe

    recs = run_json(capsys, "report", "--variant", "fa2,fa1", "--seq-len", "4k,16k")
    for r in recs:
        g = r["gpu_model"]
        desc = describe(g["kernel"], 64, "fp16", False, n_q=r["seq_q"])
        assert (r["block_q"], r["block_k"]) == (desc.block_q, desc.block_k)
        p = gm.predict(g["kernel"], g["model_batch"], g["model_heads"], r["seq_q"], None, 64)
        # as the benchmarks time it (do_bench: the host's launch work hidden), as `fa-traffic predict` prints it
        timed = gm.as_timed(p, "triton.testing.do_bench")
        assert g["bound"] == p.bound and g["time_s"] == pytest.approx(timed)
        assert g["tflops"] == pytest.approx(p.tflops * p.time_s / timed) and g["tflops"] > p.tflops
        assert g["requests_bytes"] == r["hbm_bytes"]  # the papers' count, per the row's B·H
        assert g["compulsory_bytes"] <= g["dram_bytes"] <= g["l2_bytes"] == g["requests_bytes"]
    fa2 = [r for r in recs if r["variant"] == "fa2"]
    assert all(r["gpu_model"]["kernel"] == "fa2_wgmma" and r["gpu_model"]["bound"] != "dram" for r in fa2)
    rc, out, _ = run(capsys, "report", "--variant", "fa2", "--seq-len", "16k")
    assert rc == 0 and "fa2_wgmma" in out and "DRAM" in out and "requests" in out and "memory-bound" not in out
    assert not any(row.split()[-2] in ("memory", "dram") for row in out.splitlines() if row.startswith("fa2"))
    old = run_json(capsys, "report", "--variant", "fa2", "--seq-len", "16k", "--blocks", "fa1-rule")
    assert (old[0]["block_q"], old[0]["block_k"]) == cf.fa1_blocks(old[0]["sram_bytes"], 64)
    assert old[0]["gpu_model"] == {"why": "--blocks fa1-rule"}
    rc, out, _ = run(capsys, "report", "--variant", "fa2", "--seq-len", "16k", "--blocks", "fa1-rule")
    assert "papers' count" in out
    # issue 11: the reference's working set (S, P on chip) rejected fa2_wgmma's 128x176 at d = 128; the
    # kernel keeps S and P in registers and allocates what fits
    (r,) = run_json(capsys, "report", "--variant", "fa2", "--seq-len", "16k", "--head-dim", "128")
    assert not r["fits"] and 0 < r["gpu_model"]["smem_bytes"] <= GPUS["h200"].sram_bytes


def test_json_equals_the_instrumented_counts(capsys):
    """A small problem, every variant and v_once config: the CLI's numbers are the references'."""
    recs = run_json(capsys, "report", "--seq-len", "37", "--seq-len-k", "29", "--head-dim", "8",
                    "--batch", "2", "--heads", "2", "--causal", "--dtype", "fp16", "--sram", "3KiB",
                    "--block-q", "8", "--block-k", "6", "--placement", "auto,sram,hbm")
    assert len(recs) == 4 + 6  # naive, fa1, fa2, split_kv and six v_once configs
    q = torch.empty(2, 2, 37, 8, dtype=torch.float16, device="meta")
    k = torch.empty(2, 2, 29, 8, dtype=torch.float16, device="meta")
    for rec in recs:
        opts = {} if rec["variant"] != "v_once" else {"placement": rec["placement"], "rescale": rec["rescale"]}
        # count on an unlimited chip; the resolved placement is what auto chose against 3 KiB
        if opts.get("placement") == "auto":
            opts["placement"] = rec["placement_resolved"]
        mem = Memory()
        VARIANTS[rec["variant"]].forward(q, k, k, causal=True, block_q=8, block_k=6, mem=mem, **opts)
        got = mem.counts.as_dict()
        for key in ("reads", "writes", "read_bytes", "write_bytes", "hbm_read_bytes",
                    "hbm_write_bytes", "flops", "sram_peak_bytes"):
            assert rec[key] == got[key], (rec["label"], key)
    assert any(r["placement_resolved"] == "hbm" for r in recs)  # 3 KiB: the f row spills


def test_csv_parses_back(capsys):
    rc, out, _ = run(capsys, "report", "--format", "csv", "--seq-len", "2k", "--variant", "fa1,naive")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["variant"] for r in rows] == ["fa1", "naive"]
    for r in rows:
        tr = cf.counts(r["variant"], int(r["batch"]), int(r["heads"]), 2048, 2048, 64, dtype="fp16",
                       block_q=int(r["block_q"]),
                       block_k=int(r["block_k"]), sram_bytes=int(r["sram_bytes"]))
        assert int(r["hbm_read_bytes"]) == tr.hbm_read_bytes
        assert int(r["flops_matmul"]) == tr.flops["matmul"] and int(r["flops_exp"]) == tr.flops["exp"]
        assert int(r["reads_Q"]) == tr.reads["Q"] and int(r["writes_O"]) == tr.writes["O"]
        assert float(r["roofline_t_s"]) > 0 and r["fits"] == "True"


def test_markdown(capsys):
    rc, out, _ = run(capsys, "report", "--format", "markdown", "--seq-len", "1k", "--variant", "fa2")
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == 3 and all(line.startswith("|") for line in lines)
    assert lines[1].startswith("|---")


def test_options(capsys):
    recs = run_json(capsys, "report", "--variant", "fa2", "--variant", "naive", "--seq-len", "1k",
                    "--seq-len", "65536", "--head-dim", "128", "--gpu", "a100", "--dtype", "fp32")
    assert [(r["variant"], r["seq_q"]) for r in recs] == [("fa2", 1024), ("naive", 1024),
                                                         ("fa2", 65536), ("naive", 65536)]
    assert all(r["sram_bytes"] == 163 * 1024 and r["gpu"] == "a100" for r in recs)
    assert all("roofline_measured" not in r for r in recs)  # measured figures are the H200's
    recs = run_json(capsys, "report", "--variant", "fa2", "--seq-len", "4k", "--sram", "100KiB",
                    "--block-q", "128")
    assert recs[0]["sram_bytes"] == 102400 and recs[0]["block_q"] == 128
    assert recs[0]["block_k"] == cf.fa1_blocks(102400, 64)[1]
    assert recs[0]["roofline_measured"]["hbm_bandwidth"] == 4.3e12


def test_number_parsing():
    assert parse_count("1k") == 1024 and parse_count("16k") == 16384 and parse_count("65536") == 65536
    assert parse_bytes("228KiB") == 233472 and parse_bytes("1MiB") == 2 ** 20 and parse_bytes("4096") == 4096


@pytest.mark.parametrize("argv", [
    ["report", "--variant", "fa3"],
    ["report", "--gpu", "b200"],
    ["report", "--seq-len", "0"],
    ["report", "--seq-len", "1x"],
    ["report", "--head-dim", "-3"],
    ["report", "--batch", "1.5"],
    ["report", "--block-k", "0"],
    ["report", "--format", "xml"],
    ["report", "--sram", "100"],
    ["report", "--sram", "10KB"],
    ["report", "--dtype", "fp8"],
    ["report", "--placement", "l2"],
    ["report", "--plot", "out.pdf"],
    ["sweep-sram", "--sram-min", "1MiB", "--sram-max", "64KiB"],
    ["frobnicate"],
])
def test_bad_input_exits_2_with_one_line(capsys, argv):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("fa-traffic: error:"), err
    assert "Traceback" not in err


def test_error_messages_list_the_valid_choices(capsys):
    assert "naive, fa1, fa2, v_once" in run(capsys, "report", "--variant", "x")[2]
    assert "h100, h200, a100" in run(capsys, "report", "--gpu", "x")[2]
    assert "smaller than any block needs" in run(capsys, "report", "--sram", "100")[2]


@given(lo=st.integers(1, 1 << 22), span=st.integers(0, 1 << 22), points=st.integers(1, 1000))
def test_sweep_sizes_stay_in_range_and_in_order(lo, span, points):
    """Issue 46: rounding to 256 bytes put sizes outside --sram-min..--sram-max and out of order
    (300..400 in 3 points gave 300, 256, 400)."""
    from analysis.cli import sweep_sizes

    hi = lo + span
    sizes = sweep_sizes(lo, hi, points)
    assert sizes[0] == lo and (sizes[-1] == hi or points == 1)
    assert all(a < b for a, b in zip(sizes, sizes[1:])) and lo <= min(sizes) and max(sizes) <= hi
    assert len(sizes) <= points


def test_sweep_sram_range_is_kept(capsys):
    recs = run_json(capsys, "sweep-sram", "--sram-min", "300", "--sram-max", "400", "--points", "3",
                    "--variant", "fa2", "--seq-len", "64", "--head-dim", "1")
    # the middle point (346) rounds to 256, below the range: clamped to 300, a repeat, dropped
    assert list(dict.fromkeys(r["sram_bytes"] for r in recs)) == [300, 400]


def test_sweep_sram(capsys, tmp_path):
    plot = tmp_path / "theorem2.png"
    recs = run_json(capsys, "sweep-sram", "--seq-len", "2k", "--points", "9", "--plot", str(plot))
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    srams = sorted({r["sram_bytes"] for r in recs})
    assert srams[0] == 16 * 1024 and srams[-1] == 4 * 1024 ** 2 and len(srams) == 9
    by = {}
    for r in recs:
        key = r["variant"] + ("_swapped" if r["block_rule"] == "swapped" else "") + \
            (f"_{r['placement']}_{r['rescale']}" if r["variant"] == "v_once" else "")
        by.setdefault(key, []).append(r)
    fa1 = [r["hbm_bytes"] for r in sorted(by["fa1"], key=lambda r: r["sram_bytes"])]
    assert all(a >= b for a, b in zip(fa1, fa1[1:])) and fa1[0] > 20 * fa1[-1]  # falls as 1/M
    naive = [r["hbm_bytes"] for r in by["naive"]]
    assert max(naive) < 3 * min(naive)  # about flat
    auto = sorted(by["v_once_auto_eager"], key=lambda r: r["sram_bytes"])
    assert auto[0]["placement_resolved"] == "hbm" and auto[-1]["placement_resolved"] == "sram"
    for r in recs:
        assert r["hbm_bytes"] == closed_for(r).hbm_bytes
    rc, out, _ = run(capsys, "sweep-sram", "--points", "5", "--format", "csv")
    assert rc == 0 and len(list(csv.DictReader(io.StringIO(out)))) == 5 * 7
    rc, out, _ = run(capsys, "sweep-sram", "--points", "5")
    assert rc == 0 and "fa1 HBM" in out and "(sram)" in out


def test_report_plot(capsys, tmp_path):
    plot = tmp_path / "report.png"
    rc, _, err = run(capsys, "report", "--seq-len", "1k,4k", "--plot", str(plot))
    assert rc == 0 and err == "" and plot.read_bytes()[:4] == b"\x89PNG"


def test_gpus(capsys):
    rc, out, _ = run(capsys, "gpus", "--format", "json")
    gpus = json.loads(out)
    assert rc == 0 and {g["key"] for g in gpus} >= {"h100", "h200", "a100"}
    for g in gpus:
        for name in ("sms", "smem_per_sm_bytes", "smem_per_block_bytes", "l2_bytes", "hbm_bytes",
                     "hbm_bandwidth", "fp16_tensor_flops", "bf16_tensor_flops", "tf32_tensor_flops",
                     "fp32_flops", "exp_rate", "clock_hz"):
            assert g[name]["value"] > 0 and g[name]["source"], (g["key"], name)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_python_dash_m_analysis():
    p = subprocess.run([sys.executable, "-m", "analysis", "report", "--seq-len", "1k", "--variant",
                        "fa2", "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                       env=_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)[0]
    assert rec["hbm_bytes"] == closed_for(rec).hbm_bytes
    p = subprocess.run([sys.executable, "-m", "analysis", "report", "--gpu", "nope"],
                       capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""


def test_report_says_which_rows_run_on_the_teaching_tier(capsys):
    """The caption names the tier each variant's kernel is on (a newcomer otherwise reads naive's FFMA TFLOP/s
    against fa1's as an algorithm's), in short lines; report_gpu.TIER_OF agrees with kernels.KERNELS."""
    from analysis import report_gpu
    from kernels import KERNELS

    for kernel in report_gpu.KERNEL_OF.values():
        assert report_gpu.TIER_OF[kernel] == KERNELS[kernel].tier, kernel
    rc, out, _ = run(capsys, "report", "--seq-len", "4k")
    assert rc == 0 and "naive, fa1 run on the teaching tier" in out
    caption = out[out.index("NVIDIA H200 SXM 141GB, B=4 H=32"):]  # the GPU and the B, H assumed (report's default)
    assert max(len(line) for line in caption.splitlines()) < 250
