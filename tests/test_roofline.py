"""The roofline: three ceilings, the max wins, units and rates as documented."""
from __future__ import annotations

import pytest

from counting import closed_forms as cf
from counting.gpus import GPUS, get_gpu
from analysis.roofline import roofline


def test_ceilings_and_bound():
    tr = cf.counts("fa2", 4, 16, 8192, 8192, 64, dtype="bf16", block_q=128, block_k=64)
    g = GPUS["h100"]
    r = roofline(tr, g)
    assert r.t_memory_s == pytest.approx(tr.hbm_bytes / 3.35e12)
    assert r.t_matmul_s == pytest.approx(tr.flops["matmul"] / 989.4e12)
    assert r.t_nonmatmul_s == pytest.approx(tr.flops["exp"] / (16 * 132 * 1.83e9)
                                            + tr.flops["other"] / (66.9e12 / 2))
    assert r.t_s == max(r.t_memory_s, r.t_matmul_s, r.t_nonmatmul_s)
    assert {"memory": r.t_memory_s, "matmul": r.t_matmul_s, "non-matmul": r.t_nonmatmul_s}[r.bound] == r.t_s
    assert r.predicted_tflops == pytest.approx(tr.paper_flops / r.t_s / 1e12)
    assert r.intensity_flop_per_byte == pytest.approx(sum(tr.flops.values()) / tr.hbm_bytes)


def test_fp32_uses_cuda_core_rate_and_measured_basis():
    tr = cf.counts("fa2", 1, 1, 4096, 4096, 64, dtype="fp32", block_q=64, block_k=64)
    assert roofline(tr, GPUS["a100"]).matmul_rate == 19.5e12
    h200 = get_gpu("H200")
    assert roofline(tr, h200, "measured").hbm_bandwidth == 4.3e12
    assert roofline(tr, h200, "spec").hbm_bandwidth == 4.8e12
    naive = cf.counts("naive", 1, 1, 16384, 16384, 64, dtype="fp16", block_q=64, block_k=64)
    assert roofline(naive, h200).bound == "memory"


def test_every_figure_has_a_source():
    for g in GPUS.values():
        d = g.as_dict()
        for k, v in d.items():
            if isinstance(v, dict) and "source" in v:
                assert v["source"] and v["value"] > 0, (g.key, k)
    assert GPUS["h200"].measured["bf16_tensor_flops"].value == 788e12
    assert GPUS["h100"].sram_bytes == 227 * 1024 and GPUS["a100"].sram_bytes == 163 * 1024
    with pytest.raises(ValueError, match="h100, h200, a100"):
        get_gpu("v100")
