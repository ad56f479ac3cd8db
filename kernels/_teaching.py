"""What the four teaching launchers share: dtype -> STORAGE define, block-size rules, checks, and
the shared-memory sizes that match the carving at the top of each teaching .cu file."""
from __future__ import annotations

import torch

from counting import checks
from counting.checks import check_grid_rows
from counting.tiling import Tiling
from kernels import loader
from variants._common import Problem, check_inputs, check_score_range

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


def prepare(q, k, v, *, causal, scale, block_q, block_k, mem=None, gqa=False):
    """Validate a teaching-kernel call; return the references' Problem (shapes, scale, tiling).

    gqa (the launchers that take grouped-query K/V: kernels.fa2): k, v may have H_kv heads dividing H."""
    if mem is not None:
        raise ValueError("CUDA kernels move real bytes and count nothing: pass mem=None "
                         "(count traffic with variants.VARIANTS[...].forward(..., mem=Memory()))")
    loader.check_cuda_inputs(q, k, v, supported_dtypes=DTYPES, max_head_dim=MAX_HEAD_DIM, gqa=gqa)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value not in BLOCK_CHOICES:
            raise ValueError(f"{name}={value!r}: the teaching kernels take multiples of 16 up to "
                             f"128 (16 x 16 threads, each owning every 16th row and column)")
    p = (_check_grouped(q, k, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
         if k.shape[1] != q.shape[1] else
         check_inputs(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k))
    check_grid_rows("teaching", p.batch, p.heads)
    return p


def heads_per_kv(q, k) -> int:
    """The group size H / H_kv: query head h reads kv head h // group (1 without grouped-query K/V)."""
    return q.shape[1] // k.shape[1]


def _check_grouped(q, k, *, causal, scale, block_q, block_k) -> Problem:
    """variants' check_inputs for grouped-query K/V (the references take equal heads): the same problem checks,
    and the score-range check on q viewed as (B, H_kv, group, Nq, d) against k broadcast over the group (no copy)."""
    b, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    pr = checks.check_problem(b, h, n_q, n_k, d, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    check_score_range(q.unflatten(1, (h_kv, h // h_kv)), k.unsqueeze(2), pr["scale"], pr["causal"])
    return Problem(b, h, n_q, n_k, d, pr["scale"], q.dtype,
                   Tiling(n_q, n_k, pr["block_q"], pr["block_k"], pr["causal"]))


def compile_configs(source: str, kernel_names, *, extra_defines=({},), block_q=64, block_k=64):
    """(source, kernel, defines) for every dtype at the default block sizes: what CI compiles."""
    return [(source, name, defines(dtype, block_q, block_k, **extra))
            for dtype in DTYPES for extra in extra_defines for name in kernel_names]
