"""What the four teaching launchers share: dtype -> STORAGE define, block-size rules, checks, and
the shared-memory sizes that match the carving at the top of each teaching .cu file."""
from __future__ import annotations

import torch

from counting.checks import check_grid_rows
from kernels import loader
from variants._common import check_inputs

STORAGE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}
DTYPES = tuple(STORAGE)
MAX_HEAD_DIM = 128
NTHREADS = 256  # 16 x 16, teaching.cuh
F32 = 4
BLOCK_CHOICES = (16, 32, 48, 64, 80, 96, 112, 128)  # multiples of 16 up to 128 (teaching.cuh)


def defines(dtype: torch.dtype, block_q: int, block_k: int, **extra) -> dict:
    return {"STORAGE": STORAGE[dtype], "BR": block_q, "BC": block_k, **extra}


def d_padded(d: int) -> int:
    """Shared tiles pad the head dim to 64 or 128 (teaching.cuh d_padded)."""
    return 64 if d <= 64 else 128


def tile_ld(d: int) -> int:
    return d_padded(d) + 1


def prepare(q, k, v, *, causal, scale, block_q, block_k, mem=None):
    """Validate a teaching-kernel call; return the references' Problem (shapes, scale, tiling)."""
    if mem is not None:
        raise ValueError("CUDA kernels move real bytes and count nothing: pass mem=None "
                         "(count traffic with variants.VARIANTS[...].forward(..., mem=Memory()))")
    loader.check_cuda_inputs(q, k, v, supported_dtypes=DTYPES, max_head_dim=MAX_HEAD_DIM)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value not in BLOCK_CHOICES:
            raise ValueError(f"{name}={value!r}: the teaching kernels take multiples of 16 up to "
                             f"128 (16 x 16 threads, each owning every 16th row and column)")
    p = check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    check_grid_rows("teaching", p.batch, p.heads)
    return p


def compile_configs(source: str, kernel_names, *, extra_defines=({},), block_q=64, block_k=64):
    """(source, kernel, defines) for every dtype at the default block sizes: what CI compiles."""
    return [(source, name, defines(dtype, block_q, block_k, **extra))
            for dtype in DTYPES for extra in extra_defines for name in kernel_names]
