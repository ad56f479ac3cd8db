"""The FMA-pipe 2^x of kernels/cuda/exp2_poly.cuh (FlashAttention-4's trick), on the CPU: its coefficients
read from the header, a float32 emulation of the device sequence, and the fit that made them.

    from kernels import exp2_poly
    exp2_poly.emulate(x, deg=4)        # float32, what ex2_poly() returns for float32 x
    exp2_poly.max_rel_error(deg=4)     # over x in [-126, 15] against numpy's exp2
    exp2_poly.fit(deg=4)               # minimax coefficients c1..c_deg (c0 = 1), Lawson's algorithm

tests/test_exp2_poly.py checks the emulation against numpy's exp2 (incl. -inf and very negative inputs -> 0)
and the error against the rounding of P to fp16/bf16. numpy only: no GPU, no torch.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

HEADER = Path(__file__).resolve().parent / "cuda" / "exp2_poly.cuh"
MAGIC = 12582912.0  # 1.5 * 2^23: adding it puts floor(x) in the low mantissa bits
DEGREES = (3, 4, 5)
DEFAULT_DEG = {"float16": 4, "bfloat16": 3}  # the header's EXP2_POLY_DEG default per IS_BF16
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # P is rounded to this before P V


def coefficients(deg: int) -> np.ndarray:
    """c1..c_deg of the header's EXP2_POLY_C<deg> as float32 (c0 = 1 is implicit)."""
    m = re.search(rf"#define EXP2_POLY_C{deg} (.+)", HEADER.read_text())
    if m is None:
        raise ValueError(f"{HEADER.name} has no EXP2_POLY_C{deg}")
    return np.array([float(c.strip().rstrip("f")) for c in m.group(1).split(",")], dtype=np.float32)


def _fma32(a, b, c):
    """fmaf in float32: the product of two float32 is exact in float64, one rounding of the sum (then a
    second one to float32, which can differ from a single rounding only on exact ties)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.asarray(c, dtype=np.float64)).astype(np.float32)


def emulate(x, deg: int = 4) -> np.ndarray:
    """ex2_poly() step by step in float32 (kernels/cuda/exp2_poly.cuh)."""
    x = np.fmax(np.asarray(x, dtype=np.float32), np.float32(-127.0))  # fmaxf: NaN -> -127, as on the GPU
    t = np.floor(x.astype(np.float64) + MAGIC).astype(np.float32)  # __fadd_rd: spacing 1 in [2^23, 2^24)
    f = (x - (t - np.float32(MAGIC))).astype(np.float32)  # both subtractions are exact
    c = coefficients(deg)
    p = np.full_like(f, c[-1])
    for ck in c[-2::-1]:
        p = _fma32(p, f, ck)
    p = _fma32(p, f, 1.0)
    bits = p.view(np.uint32).astype(np.uint64) + (t.view(np.uint32).astype(np.uint64) << np.uint64(23))
    return (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)  # mod 2^32, as on the GPU


def grid(lo: float = -126.0, hi: float = 15.0, per_unit: int = 4096) -> np.ndarray:
    """float32 points over [lo, hi]: a dense grid plus each integer and its float32 neighbours."""
    dense = np.linspace(lo, hi, int((hi - lo) * per_unit) + 1).astype(np.float32)
    ints = np.arange(np.ceil(lo), np.floor(hi) + 1, dtype=np.float32)
    near = np.concatenate([np.nextafter(ints, np.float32(-np.inf)), ints, np.nextafter(ints, np.float32(np.inf))])
    return np.unique(np.concatenate([dense, near[(near >= lo) & (near <= hi)]]))


def max_rel_error(deg: int = 4, x=None) -> float:
    """max |ex2_poly(x) - 2^x| / 2^x over x (default: grid() on [-126, 15], where 2^x is a normal float)."""
    x = grid() if x is None else np.asarray(x, dtype=np.float32)
    ref = np.exp2(x.astype(np.float64))
    return float(np.max(np.abs(emulate(x, deg).astype(np.float64) - ref) / ref))


def fit(deg: int, points: int = 4001, iters: int = 400) -> tuple[np.ndarray, float]:
    """Minimax relative-error fit of 1 + f*(c1 + ... + c_deg f^(deg-1)) to 2^f on [0, 1] (Lawson's iteratively
    reweighted least squares); returns (c1..c_deg in float64, its max relative error on the points)."""
    f = np.linspace(0.0, 1.0, points)[1:]
    y = np.exp2(f)
    a = np.stack([f ** k for k in range(1, deg + 1)], axis=1) / y[:, None]
    b = (y - 1.0) / y
    w = np.full_like(f, 1.0 / len(f))
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        e = np.abs(a @ c - b)
        w = w * e
        w /= w.sum()
    return c, float(np.abs(a @ c - b).max())
