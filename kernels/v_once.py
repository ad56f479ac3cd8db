""""Multiply V once" (issue #941), teaching tier: launcher for kernels/cuda/v_once.cu (mirrors
variants/v_once.py).

One launch: grid (Tr, B*H), 256 threads. Dynamic shared memory (bytes):
    4·(Br·max(ld, Bc+1) + Bc·ld)          Q_i (reused for the f tile of the product), K_j / V_j
  + 4·Br·Tc                               lazy: each block's row max m_ij
  + Br·(Tc·Bc + 4/itemsize)·itemsize      sram: the whole f row in the input dtype
placement "auto" takes "sram" when that fits the device's opt-in limit (227 KB on an H200), else
"hbm", whose f scratch is a (B, H, Nq, Nk) tensor in the input dtype.
"""
from __future__ import annotations

import torch

from counting.memory import SramOverflow
from counting.tiling import cdiv
from kernels import _teaching, loader
from variants.v_once import RESCALES

# one thread block per Q block: placement "cluster" is kernels/v_once_cluster.py's (issue 18)
PLACEMENTS = ("auto", "sram", "hbm")


def _check_options(placement, rescale):
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)} (the "
                         "teaching kernel runs one thread block per Q block; the cluster kernel is v_once_cluster)")
    if rescale not in RESCALES:
        raise ValueError(f"unknown rescale {rescale!r}; choose one of {', '.join(RESCALES)}")

SOURCE = "v_once.cu"
KERNEL = "v_once_forward"
DTYPES = _teaching.DTYPES
MAX_HEAD_DIM = _teaching.MAX_HEAD_DIM
OPTIONS = {"placement": PLACEMENTS, "rescale": RESCALES}
BENCH_OPTIONS = ({"placement": "auto", "rescale": "lazy"}, {"placement": "auto", "rescale": "eager"})


def knob_defines(placement: str, rescale: str) -> dict:
    return {"V_ONCE_SRAM": int(placement == "sram"), "V_ONCE_LAZY": int(rescale == "lazy")}


def shared_bytes(d: int, n_k: int, itemsize: int, *, placement: str, rescale: str,
                 block_q: int = 64, block_k: int = 64) -> int:
    ld, t_c = _teaching.tile_ld(d), cdiv(n_k, block_k)
    size = _teaching.F32 * (block_q * max(ld, block_k + 1) + block_k * ld)
    if rescale == "lazy":
        size += _teaching.F32 * block_q * t_c
    if placement == "sram":
        size += block_q * (t_c * block_k + 4 // itemsize) * itemsize
    return size


def resolve_placement(d, n_k, itemsize, *, placement, rescale, block_q=64, block_k=64,
                      capacity=None) -> str:
    """"sram" when the f row fits the device's shared memory, else "hbm" (for placement="auto")."""
    if placement != "auto":
        return placement
    need = shared_bytes(d, n_k, itemsize, placement="sram", rescale=rescale, block_q=block_q,
                        block_k=block_k)
    return "sram" if need <= (loader.max_dynamic_smem() if capacity is None else capacity) else "hbm"


def compile_configs():
    knobs = [knob_defines(p, r) for p in ("sram", "hbm") for r in RESCALES]
    return _teaching.compile_configs(SOURCE, [KERNEL], extra_defines=knobs)


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, placement="auto",
            rescale="eager", mem=None):
    _check_options(placement, rescale)
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem)
    capacity = loader.max_dynamic_smem(q.device.index)
    placement = resolve_placement(p.d, p.n_k, p.itemsize, placement=placement, rescale=rescale,
                                  block_q=block_q, block_k=block_k, capacity=capacity)
    smem = shared_bytes(p.d, p.n_k, p.itemsize, placement=placement, rescale=rescale,
                        block_q=block_q, block_k=block_k)
    if smem > capacity:
        raise SramOverflow(f"v_once kernel (placement={placement}, rescale={rescale}, Br={block_q}, "
                           f"Bc={block_k}, d={p.d}, Nk={p.n_k})", smem, capacity)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    if placement == "hbm":  # the spilled f row of every Q block: (B, H, Nq, Nk), input dtype
        f_hbm = torch.empty(p.batch, p.heads, p.n_q, p.n_k, dtype=q.dtype, device=q.device)
    else:  # unused by the sram kernel; any valid pointer will do
        f_hbm = o
    defines = _teaching.defines(q.dtype, block_q, block_k, **knob_defines(placement, rescale))
    fn = loader.get_function(SOURCE, KERNEL, defines=defines, device=q.device.index)
    fn.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
              (q, k, v, o, lse, f_hbm, p.n_q, p.n_k, p.d, p.scale, int(causal)),
              shared_mem=smem)
    return o, lse
