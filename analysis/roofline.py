"""A three-ceiling roofline for one variant on one problem and one GPU.

    t_memory     = HBM bytes (read + write) / HBM bandwidth
    t_matmul     = matmul FLOPs / matmul rate
                   (fp16/bf16 inputs: the dense tensor-core rate of that type; fp32 inputs: the plain
                   FP32 CUDA-core rate - the references compute in IEEE float32, not TF32)
    t_nonmatmul  = exp / SFU rate  +  other / FP32 instruction rate
                   SFU rate = 16 exponentials/clk/SM x SMs x clock (MUFU.EX2; FA3 paper's bottleneck);
                   FP32 instruction rate = FP32 peak / 2: the peak counts an FMA as two FLOPs, while a
                   max, add, multiply or divide step of `other` is one instruction per lane per clock.
                   The two units are modelled as serialised (they share issue slots), so times add.
    t            = max(t_memory, t_matmul, t_nonmatmul): perfect overlap of the three; `bound` names
                   the ceiling that wins. Real kernels sit above this (no overlap is perfect).
    intensity    = all counted FLOPs / HBM bytes (matmul_intensity: matmul FLOPs only)
    predicted_tflops = the attention work (4·d per visible (query, key) pair: counting.headline.
                   attention_flops) / t. It can never exceed the matmul roof (the executed matmul
                   FLOPs cover every visible pair); the papers' 4·Nq·Nk·d/2 could (causal, Nq > Nk).

basis="spec" uses datasheet figures; basis="measured" uses this workplace's measurements where the
GPU has them (H200: copy bandwidth, bf16 matmul rate), datasheet figures otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from counting.gpus import GPU

BOUNDS = ("memory", "matmul", "non-matmul")


@dataclass(frozen=True)
class Roofline:
    gpu: str
    basis: str
    t_memory_s: float
    t_matmul_s: float
    t_nonmatmul_s: float
    t_s: float
    bound: str
    intensity_flop_per_byte: float
    matmul_intensity_flop_per_byte: float
    ridge_flop_per_byte: float  # matmul rate / bandwidth: intensity where matmul and memory meet
    predicted_tflops: float
    hbm_bandwidth: float
    matmul_rate: float
    exp_rate: float
    other_rate: float

    def as_dict(self) -> dict:
        return asdict(self)


def matmul_rate(gpu: GPU, dtype: str, basis: str = "spec") -> float:
    name = {"fp16": "fp16_tensor_flops", "bf16": "bf16_tensor_flops", "fp32": "fp32_flops"}[dtype]
    return gpu.value(name, basis)


def roofline(traffic, gpu: GPU, basis: str = "spec") -> Roofline:
    """The roofline of a `closed_forms.Traffic` (or anything with the same attributes) on `gpu`."""
    if basis not in ("spec", "measured"):
        raise ValueError(f"unknown basis {basis!r}; choose spec or measured")
    bw = gpu.value("hbm_bandwidth", basis)
    mm_rate = matmul_rate(gpu, traffic.dtype, basis)
    exp_rate = gpu.value("exp_rate", basis)
    other_rate = gpu.value("fp32_flops", basis) / 2
    hbm = traffic.hbm_bytes
    flops = traffic.flops
    times = {
        "memory": hbm / bw,
        "matmul": flops.get("matmul", 0) / mm_rate,
        "non-matmul": flops.get("exp", 0) / exp_rate + flops.get("other", 0) / other_rate,
    }
    bound = max(BOUNDS, key=lambda b: times[b])  # ties: the first listed
    t = times[bound]
    total = sum(flops.values())
    return Roofline(
        gpu=gpu.key, basis=basis,
        t_memory_s=times["memory"], t_matmul_s=times["matmul"], t_nonmatmul_s=times["non-matmul"],
        t_s=t, bound=bound,
        intensity_flop_per_byte=total / hbm if hbm else float("inf"),
        matmul_intensity_flop_per_byte=flops.get("matmul", 0) / hbm if hbm else float("inf"),
        ridge_flop_per_byte=mm_rate / bw,
        predicted_tflops=traffic.attention_flops / t / 1e12 if t else float("inf"),
        hbm_bandwidth=bw, matmul_rate=mm_rate, exp_rate=exp_rate, other_rate=other_rate,
    )
