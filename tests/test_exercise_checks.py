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
