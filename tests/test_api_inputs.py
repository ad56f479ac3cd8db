"""Loose API edges, closed: one input check (analysis.checks) with the same messages in the
references, the closed forms and the CUDA launchers; Memory counts one run, never negative, shows
progress on long runs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis import checks
from analysis import closed_forms as cf
from analysis.memory import Counts, Memory
from kernels import loader
from variants import VARIANTS


def _message(fn):
    try:
        fn()
    except (ValueError, TypeError) as e:
        return type(e), str(e)
    return None


SIZES = dict(batch=1, heads=2, n_q=8, n_k=8, d=4, block_q=4, block_k=4)


@pytest.mark.parametrize("change", [
    {"block_q": 0}, {"block_k": -3}, {"block_q": 2.5}, {"block_k": True}, {"causal": 1},
    {"causal": "yes"}, {"causal": None},
])
def test_references_and_closed_forms_say_the_same(change):
    kw = {**SIZES, "causal": False, **change}
    q = torch.randn(kw["batch"], kw["heads"], kw["n_q"], kw["d"])
    k = torch.randn(kw["batch"], kw["heads"], kw["n_k"], kw["d"])
    ref = _message(lambda: VARIANTS["fa2"].forward(q, k, k, causal=kw["causal"], block_q=kw["block_q"],
                                                   block_k=kw["block_k"]))
    closed = _message(lambda: cf.counts("fa2", kw["batch"], kw["heads"], kw["n_q"], kw["n_k"], kw["d"],
                                        causal=kw["causal"], block_q=kw["block_q"], block_k=kw["block_k"]))
    assert ref is not None and ref == closed


@pytest.mark.parametrize("shapes,match", [
    (((2, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4)), "batch mismatch: q has 2, k has 1, v has 1"),
    (((1, 3, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4)), "heads mismatch"),
    (((1, 2, 8, 5), (1, 2, 8, 4), (1, 2, 8, 4)), "head dim d mismatch"),
    (((1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 9, 4)), "same sequence length"),
])
def test_kernel_launchers_use_the_same_check(monkeypatch, shapes, match):
    """kernels.loader.check_cuda_inputs gives the references' message (CUDA-ness aside)."""
    q, k, v = (torch.randn(s) for s in shapes)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with pytest.raises(ValueError) as kernel:
        loader.check_cuda_inputs(q, k, v, supported_dtypes=(torch.float32,))
    with pytest.raises(ValueError) as reference:
        VARIANTS["fa2"].forward(q, k, v)
    assert str(kernel.value) == str(reference.value) and match in str(kernel.value)


def test_closed_forms_refuse_negative_sram_and_truthy_causal():
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4, sram_bytes=-1)
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4, sram_bytes=float("nan"))
    with pytest.raises(TypeError, match="causal must be a bool"):
        cf.counts("fa2", 1, 1, 8, 8, 4, causal="no")
    with pytest.raises(ValueError, match="d must be a positive integer"):
        cf.counts("fa2", 1, 1, 8, 8, 4.0)
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer"):
        cf.fa1_blocks(0, 64)
    with pytest.raises(ValueError, match="q would have .* elements"):
        cf.counts("fa2", 2 ** 40, 1, 2 ** 20, 8, 64)
    # NumPy integers and bools are integers and bools
    a = cf.counts("v_once", np.int64(2), np.int32(3), np.int64(40), 30, 8, causal=np.bool_(True),
                  block_q=np.int64(8), block_k=16, sram_bytes=np.int64(4096))
    b = cf.counts("v_once", 2, 3, 40, 30, 8, causal=True, block_q=8, block_k=16, sram_bytes=4096)
    assert a.as_dict() == b.as_dict() and type(a.batch) is int


def test_numpy_scalars_as_scale():
    q, k, v = (torch.randn(1, 1, 9, 4) for _ in range(3))
    for name, var in VARIANTS.items():
        want, _ = var.forward(q, k, v, scale=0.25)
        for scale in (np.float32(0.25), np.float64(0.25), np.float16(0.25)):
            got, _ = var.forward(q, k, v, scale=scale)
            assert torch.equal(got, want), (name, type(scale))
    for bad in ("0.5", torch.tensor(0.5), float("inf"), np.float32("nan")):
        with pytest.raises(ValueError, match="scale must be a finite real number or None"):
            VARIANTS["fa2"].forward(q, k, v, scale=bad)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, 2.5])
def test_memory_capacity_is_checked_not_converted(bad):
    with pytest.raises(ValueError, match="sram_bytes must be a positive integer or None"):
        Memory(sram_bytes=bad)
    assert Memory(sram_bytes=1024.0).sram_bytes == 1024


def test_memory_counts_one_run_unless_reset():
    q, k, v = (torch.randn(1, 1, 16, 4) for _ in range(3))
    mem = Memory()
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    first = mem.counts.as_dict()
    with pytest.raises(RuntimeError, match="already holds the counts of a run"):
        VARIANTS["fa1"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert mem.counts.as_dict() == first  # refused before counting anything
    mem.reset()
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert mem.counts.as_dict() == first
    both = Memory(accumulate=True)
    for _ in range(2):
        VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=both)
    assert both.counts.hbm_bytes == 2 * mem.counts.hbm_bytes


def test_counts_cannot_go_negative():
    c = Counts()
    c.reads["Q"] += 5
    with pytest.raises(ValueError, match="cannot be negative"):
        c.reads["Q"] -= 6
    with pytest.raises(ValueError, match="cannot be negative"):
        c.flops["matmul"] = -1
    with pytest.raises(ValueError, match="cannot be negative"):
        Memory().require_sram("x", -4)


def test_progress_on_long_runs_only(capsys):
    q, k, v = (torch.randn(1, 1, 64, 4, device="meta") for _ in range(3))
    seen = []
    mem = Memory(progress=lambda s, counts: seen.append((s, counts.flops["matmul"])), progress_after_s=0)
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    assert seen and all(f > 0 for _, f in seen)  # called with the counts so far
    Memory(progress_after_s=0)  # the default printer: one line on stderr
    mem = Memory(progress_after_s=0)
    VARIANTS["fa1"].forward(q, k, v, block_q=8, block_k=8, mem=mem)
    err = capsys.readouterr().err
    assert err.startswith("[memory model]") and "matmul FLOPs" in err
    VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8, mem=Memory())  # short: silent
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="progress must be"):
        Memory(progress="yes")


def test_check_problem_element_limit():
    with pytest.raises(ValueError, match="S would have"):
        checks.check_problem(1, 1, 2 ** 32, 2 ** 32, 1, causal=False, block_q=1, block_k=1,
                             scores_in_hbm=True)
    assert checks.check_problem(1, 1, 2 ** 32, 2 ** 32, 1, causal=False, block_q=1, block_k=1)["n_q"] == 2 ** 32
