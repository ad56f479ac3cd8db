"""The notebooks' exercise checks accept a right answer and reject a wrong one (so a failure is the
reader's, not the check's). Each check cell is taken from the notebook's jupytext source and run here."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

jupytext = pytest.importorskip("jupytext")

from analysis.nbtools import human  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _checks(stem):
    nb = jupytext.read(NOTEBOOKS / f"{stem}.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human}
    exec(compile(cell.source, f"{stem}:checks", "exec"), ns)
    return ns


def test_01():
    ns = _checks("01_why_io_matters")
    l2 = 60 * 2 ** 20
    n = math.isqrt(l2 // 4)
    n += 4 * n * n < l2
    ns["check_l2_fill"](n)
    with pytest.raises(AssertionError):
        ns["check_l2_fill"](n + 1)
    ns["check_intensity"](128, 64.0)
    with pytest.raises(AssertionError):
        ns["check_intensity"](128, 32.0)


def test_02():
    ns = _checks("02_online_softmax")
    ns["check_rescales"](lambda t: t * (t - 1) // 2, lambda t: t)
    with pytest.raises(AssertionError):
        ns["check_rescales"](lambda t: t * t, lambda t: t)
    fp16 = max(s.item() for s in torch.arange(10, 12, 1 / 128, dtype=torch.float16) if math.isfinite(math.exp(s.item()))
               and math.exp(s.item()) < 65520)
    ns["check_overflow_limits"](fp16, 88.5)
    with pytest.raises(AssertionError):
        ns["check_overflow_limits"](fp16, 89.0)


def test_03():
    ns = _checks("03_flashattention1")
    ns["check_divisions"](512)
    with pytest.raises(AssertionError):
        ns["check_divisions"](3552)


def test_04():
    ns = _checks("04_flashattention2")
    ns["check_slots"](3, 1024)
    with pytest.raises(AssertionError):
        ns["check_slots"](1, 2048)


def test_05():
    ns = _checks("05_multiply_v_once")

    def fp8_f(q, k, v):
        s = q @ k.T / math.sqrt(q.shape[-1])
        f = torch.exp(s - s.max(-1, keepdim=True).values)
        return (f.to(torch.float8_e4m3fn).float() / f.sum(-1, keepdim=True)) @ v

    ns["check_fp8_f"](fp8_f)
    with pytest.raises(AssertionError):
        ns["check_fp8_f"](lambda q, k, v: torch.softmax(q @ k.T / 8, -1) @ v)
    ns["check_spill_extra"](lambda n, d, br: 2 * n * n * 2)
    with pytest.raises(AssertionError):
        ns["check_spill_extra"](lambda n, d, br: 2 * n * n * d // br)


def test_07():
    from counting import backward_forms as bf
    from counting.gpus import GPUS

    nb = jupytext.read(NOTEBOOKS / "07_backward_recomputation.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "bf": bf, "GPUS": GPUS}
    exec(compile(cell.source, "07:checks", "exec"), ns)
    ns["check_softmax_backward_row"](lambda p, dp: p * (dp - (p * dp).sum()))
    with pytest.raises(AssertionError):
        ns["check_softmax_backward_row"](lambda p, dp: p * dp)
    ns["check_fa2_reads"](lambda n, blk, d: bf.backward_counts("fa2", 1, 1, n, n, d, dtype="fp16", block_q=blk,
                                                               block_k=blk).reads)
    with pytest.raises(AssertionError):
        ns["check_fa2_reads"](lambda n, blk, d: {"Q": n * d})
    first = next(m for m in range(1, 1 << 20)
                 if bf.saved_bytes("naive", 32, 16, m, m, "fp16") > GPUS["h200"].hbm_bytes.value)
    ns["check_naive_limit"](first)
    with pytest.raises(AssertionError):
        ns["check_naive_limit"](first + 1)


def test_10():
    from counting import ring as counts
    from counting.gpus import GPUS

    ns = _checks("10_across_gpus")
    ns.update(counts=counts, GPUS=GPUS)
    from variants import attention_reference
    ns["attention_reference"] = attention_reference

    def merge2(o_a, lse_a, o_b, lse_b):
        m = torch.maximum(lse_a, lse_b)
        wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
        return (wa.unsqueeze(-1) * o_a + wb.unsqueeze(-1) * o_b) / (wa + wb).unsqueeze(-1), m + torch.log(wa + wb)

    ns["check_merge"](merge2)
    with pytest.raises(AssertionError):  # the textbook formula without the max: right, until e^1000
        ns["check_merge"](lambda oa, la, ob, lb: ((la.exp().unsqueeze(-1) * oa + lb.exp().unsqueeze(-1) * ob)
                                                  / (la.exp() + lb.exp()).unsqueeze(-1),
                                                  torch.log(la.exp() + lb.exp())))
    with pytest.raises(AssertionError):
        ns["check_merge"](lambda oa, la, ob, lb: ((oa + ob) / 2, torch.maximum(la, lb)))

    def zigzag(n, p, r):
        c = [(i * n // (2 * p), (i + 1) * n // (2 * p)) for i in range(2 * p)]
        return list(range(*c[r])) + list(range(*c[2 * p - 1 - r]))

    ns["check_zigzag"](zigzag)
    with pytest.raises(AssertionError):
        ns["check_zigzag"](lambda n, p, r: range(r * n // p, (r + 1) * n // p))
    a100 = GPUS["a100"]
    ns["check_tokens"](round(2 * a100.fp16_tensor_flops.value / a100.nvlink_bandwidth.value))
    with pytest.raises(AssertionError):
        ns["check_tokens"](round(a100.fp16_tensor_flops.value / a100.nvlink_bandwidth.value))


def test_06():
    import json

    from analysis.results import RESULTS_DIR, load_records, one_per_shape

    nb = jupytext.read(NOTEBOOKS / "06_on_a_real_gpu.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    timed = one_per_shape([r for r in load_records("bench_kernels.json") if r["dtype"] in ("float16", "fp16")])
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR, "timed": timed}
    exec(compile(cell.source, "06:checks", "exec"), ns)
    rows = json.loads((RESULTS_DIR / "fwd_wgmma_vs_cudnn_grid" / "four_passes_run3" / "ab_wgmma_speed.json").read_text())
    cells = {(r["variant"].replace("[default]", ""), r["dtype"], r["d"], r["n"], r["causal"]): r for r in rows["rows"]}
    ahead = sum(cells[("sdpa_cudnn", *k[1:])]["median_ms"] >= r["median_ms"] for k, r in cells.items()
                if k[0] == "fa2_wgmma")
    ns["check_cells_ahead"](ahead)
    with pytest.raises(AssertionError):
        ns["check_cells_ahead"](len([k for k in cells if k[0] == "fa2_wgmma"]))  # "every cell": not so
    with pytest.raises(AssertionError):
        ns["check_absorbed"](0.5)
    t = {(r["kernel"], r["n"]): r["tflops"] for r in timed if r["d"] == 64 and not r["causal"]}
    first = min(n for n in {n for _, n in t} if t.get(("fa2", n), 0) > t.get(("naive", n), 0))
    ns["check_teaching_crossover"](first)
    with pytest.raises(AssertionError):
        ns["check_teaching_crossover"](first * 2)


def test_06_absorbed():
    from gpumodel import gpu_model as gm
    from gpumodel.fit_gpu_model import work_of
    from gpumodel.measured import ncu_cells

    ns = _checks_06_only()
    c = next(c for c in ncu_cells() if c["n_q"] == 4096 and not c["causal"] and c.get("lts_bytes")
             and (c["label"], c["d"]) == ("fa2_wgmma", 128))
    req = gm.prepare(work_of(c).desc, c["batch"], c["heads"], c["n_q"], c["n_k"], c["d"], c["dtype"],
                     c["causal"]).levels.requests_bytes
    ns["check_absorbed"](1 - c["dram_bytes"] / req)
    with pytest.raises(AssertionError):
        ns["check_absorbed"](c["dram_bytes"] / req)


def _checks_06_only():
    import json

    from analysis.results import RESULTS_DIR

    nb = jupytext.read(NOTEBOOKS / "06_on_a_real_gpu.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR, "timed": []}
    exec(compile(cell.source, "06:checks", "exec"), ns)
    return ns


def test_08():
    import json

    from analysis.results import RESULTS_DIR

    nb = jupytext.read(NOTEBOOKS / "08_flashattention_on_hopper.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Checks for the exercises"))
    ns = {"torch": torch, "math": math, "human": human, "json": json, "RESULTS": RESULTS_DIR}
    exec(compile(cell.source, "08:checks", "exec"), ns)
    rows = json.loads((RESULTS_DIR / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json").read_text())["rows"]
    r_tc = max(r["flop_per_clk_sm"] for r in rows if r["path"] == "wgmma")
    r_ex = max(r["per_clk_sm"] for r in rows if r["path"] == "mufu")
    ns["check_crossover"](r_tc / (4 * r_ex))
    with pytest.raises(AssertionError):
        ns["check_crossover"](128)
    ns["check_exp_share"](lambda d: (1 / r_ex) / (4 * d / r_tc))
    with pytest.raises(AssertionError):
        ns["check_exp_share"](lambda d: (4 * d / r_tc) / (1 / r_ex))

    def threshold(s, v, bc, tau):
        m, l, o, moves = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), 0
        for j in range(0, s.numel(), bc):
            mx = max(m, s[j:j + bc].max().item())
            if mx > m and mx - m > tau:
                alpha = 2.0 ** (m - mx) if m > -math.inf else 0.0
                o, l, m, moves = o * alpha, l * alpha, mx, moves + 1
            p = torch.exp2(s[j:j + bc] - m)
            o, l = o + p @ v[j:j + bc], l + p.sum().item()
        return o / l, moves

    ns["check_threshold"](threshold)
    with pytest.raises(AssertionError):  # forgets to rescale l with O
        def no_l(s, v, bc, tau):
            m, l, o, moves = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), 0
            for j in range(0, s.numel(), bc):
                mx = max(m, s[j:j + bc].max().item())
                if mx > m and mx - m > tau:
                    o, m, moves = o * (2.0 ** (m - mx) if m > -math.inf else 0.0), mx, moves + 1
                p = torch.exp2(s[j:j + bc] - m)
                o, l = o + p @ v[j:j + bc], l + p.sum().item()
            return o / l, moves
        ns["check_threshold"](no_l)
    with pytest.raises(AssertionError):  # exact, but rescales at every new max
        ns["check_threshold"](lambda s, v, bc, tau: threshold(s, v, bc, 0.0))
