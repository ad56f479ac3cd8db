"""Tensor-core FlashAttention-2 forward (kernels/cuda/fa2_tc.cu): fp16/bf16 in, fp32 accumulation.

    o, lse = forward(q, k, v, causal=False, scale=None)

q: (B, H, Nq, d), k/v: (B, H, Nk, d), contiguous CUDA tensors of one dtype (float16 or bfloat16),
d in {64, 128}. o has q's dtype; lse is float32 (B, H, Nq). Causal is bottom-right (query i sees key j
iff j <= i + Nk - Nq); a row that sees no key gives o = 0 and lse = -inf. Key blocks hidden by the mask
are skipped, not computed.

Block shapes are tuned per head dim (CONFIGS; the measurements behind them are in lab/NOTES-tc.md).
`config=` overrides them (a dict of the .cu file's defines) for experiments and the tuning sweep.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks, sm90
from counting.checks import checked_once  # torch-free: the launch path's config cache
from counting.checks import check_grid_rows
from kernels import layouts, loader

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_tc.cu"
KERNEL = "fa2_tc_fwd"
HEAD_DIMS = (64, 128)
LOG2E = 1.4426950408889634

# Per head dim: BLOCK_M (Br), BLOCK_N (Bc), NWARPS, Q_IN_REGS, MIN_BLOCKS (CTAs/SM the register cap aims at).
# Each warp owns 32 rows (two m16 tiles) so every K/V fragment read from smem feeds two mma's.
CONFIGS = {
    64: dict(BLOCK_M=128, BLOCK_N=128, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
    128: dict(BLOCK_M=128, BLOCK_N=64, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
}

# At 255 registers (the cap that 2 CTAs x 128 threads/SM imposes) ptxas spills a little: measured with
# NVRTC 13.0 for sm_90, d=64: 104 B stores / 52 B loads / 56 B stack; d=128: 64 / 48 / 16 (per thread).
# The spill-free candidates (d=64 Bc=96/80, d=128 Bc=32) measured 3-14% slower (lab/NOTES-tc.md v2);
# the compile test holds the kernel to this budget so a change that spills more fails in CI.
MAX_SPILL_BYTES = 128

# Candidates the tuning sweep (bench/bench_tc.py sweep) times; CONFIGS holds the winners. Earlier
# candidates measured and dropped (lab/NOTES-tc.md): 8 warps x 16 rows, Br = 64.
SWEEP = {
    64: [
        dict(BLOCK_M=128, BLOCK_N=128, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=128, BLOCK_N=96, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=128, BLOCK_N=80, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=128, BLOCK_N=64, NWARPS=4, Q_IN_REGS=1, MIN_BLOCKS=2),
        dict(BLOCK_M=256, BLOCK_N=128, NWARPS=8, Q_IN_REGS=0, MIN_BLOCKS=1),  # v3: 8 warps share K/V
        dict(BLOCK_M=256, BLOCK_N=64, NWARPS=8, Q_IN_REGS=0, MIN_BLOCKS=1),
    ],
    128: [
        dict(BLOCK_M=128, BLOCK_N=64, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=128, BLOCK_N=48, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=128, BLOCK_N=32, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2),
        dict(BLOCK_M=256, BLOCK_N=64, NWARPS=8, Q_IN_REGS=0, MIN_BLOCKS=1),  # v3: 8 warps share K/V
        dict(BLOCK_M=256, BLOCK_N=32, NWARPS=8, Q_IN_REGS=0, MIN_BLOCKS=1),  # (spill-free at 255 regs)
    ],
}


# the .cu's compile-time knobs (a config's keys); CTA_TRACE records when each CTA ran (lab/cta_trace.py)
KNOBS = {"BLOCK_M", "BLOCK_N", "NWARPS", "Q_IN_REGS", "MIN_BLOCKS", "CTA_TRACE"}
REQUIRED = ("BLOCK_M", "BLOCK_N", "NWARPS")  # what the launch reads; Q_IN_REGS and MIN_BLOCKS default to the .cu's 0, 1


def tile_errors(defines: dict) -> list[str]:
    """Why tc_fa2.cuh (shared by fa2_tc.cu and v_once_tc.cu) cannot build these defines: its static_asserts (lines
    45-48) and a switch that is not 0 or 1. Empty: it builds. defines_for refuses a config= with these reasons."""
    g = defines.get
    d, bm, bn, nw = g("HEAD_DIM", 128), g("BLOCK_M", 128), g("BLOCK_N", 64), g("NWARPS", 4)
    rules = [
        (nw >= 1, f"NWARPS={nw}: at least one warp"),
        (bm > 0 and nw >= 1 and bm % (16 * nw) == 0,
         f"BLOCK_M={bm}: a positive multiple of 16 * NWARPS (each warp owns whole 16-row m tiles)"),
        (bn > 0 and bn % 16 == 0, f"BLOCK_N={bn}: a positive multiple of 16"),
        (nw < 1 or (bm * (d // 8)) % (32 * nw) == 0 and (bn * (d // 8)) % (32 * nw) == 0,
         f"BLOCK_M={bm}, BLOCK_N={bn}: each tile's 16-byte chunks must split evenly over the {32 * nw} threads"),
        (g("Q_IN_REGS", 0) in (0, 1), f"Q_IN_REGS={g('Q_IN_REGS')}: a switch, 0 or 1"),
        (g("CTA_TRACE", 0) in (0, 1), f"CTA_TRACE={g('CTA_TRACE')}: a switch, 0 or 1"),
        (g("MIN_BLOCKS", 1) >= 1, f"MIN_BLOCKS={g('MIN_BLOCKS')}: at least one CTA per SM"),
    ]
    return [why for holds, why in rules if not holds]


_CHECKED: dict = {}  # (d, bf16, config_key) -> defines: the launch path is timed per call, the checks cost ~8 us


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"fa2_tc supports head dims {HEAD_DIMS}, got d={d}")
    if config is None:
        return dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **CONFIGS[d])
    return dict(checked_once(_CHECKED, (d, bool(is_bf16)), config, lambda c: _checked_defines(d, is_bf16, c)))


def _checked_defines(d: int, is_bf16: bool, config: dict) -> dict:
    # a config= is checked: unknown knobs, non-integers, missing tiles and what the header refuses were KeyErrors,
    # compile errors or, for a misspelt knob, the default build timed under another name
    cfg = checks.knob_config("fa2_tc", config, KNOBS, REQUIRED, CONFIGS[d])
    cfg.setdefault("Q_IN_REGS", 0)
    cfg.setdefault("MIN_BLOCKS", 1)
    defines = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **cfg)
    errors = tile_errors(defines)
    if not errors and smem_bytes(defines) > SMEM_PER_BLOCK:
        errors = [f"BLOCK_M={cfg['BLOCK_M']}, BLOCK_N={cfg['BLOCK_N']} need {smem_bytes(defines)} B of shared memory "
                  f"per CTA; the SM gives at most {SMEM_PER_BLOCK}"]
    if errors:
        raise ValueError(f"fa2_tc: {'; '.join(errors)}")
    return defines


def smem_bytes(defines: dict) -> int:
    """Q tile + 2-stage K ring + 2-stage V ring (fp16/bf16)."""
    d, bm, bn = defines["HEAD_DIM"], defines["BLOCK_M"], defines["BLOCK_N"]
    return bm * d * 2 + 4 * bn * d * 2


def compile_configs() -> list[tuple[str, str, dict]]:
    """(source path, kernel name, defines) of every build forward() can ask for (CI compiles them)."""
    out = []
    for d in HEAD_DIMS:
        for bf16 in (0, 1):
            out.append((str(SOURCE), KERNEL, defines_for(d, bf16)))
    return out


def sweep_configs() -> list[tuple[str, str, dict]]:
    out = []
    for d in HEAD_DIMS:
        for cfg in SWEEP[d]:
            for bf16 in (0, 1):
                defs = defines_for(d, bf16, cfg)
                if (str(SOURCE), KERNEL, defs) not in out:
                    out.append((str(SOURCE), KERNEL, defs))
    return out


# the SM's limits (counting/sm90.py), under the names fa2_wgmma and the tests use
SMEM_PER_SM, SMEM_PER_BLOCK, ctas_by_smem = sm90.SMEM_PER_SM, sm90.SMEM_PER_BLOCK, sm90.ctas_by_smem
occupancy_for = sm90.occupancy_for


def occupancy(defines: dict, registers: int, **limits) -> dict:
    return occupancy_for(defines["NWARPS"], smem_bytes(defines), registers, **limits)


_DTYPES = None


def _check(q, k, v):
    """Fast path for valid inputs (a few attribute reads); anything off goes to the loader's checks,
    which name the problem."""
    import torch

    global _DTYPES
    if _DTYPES is None:
        _DTYPES = (torch.float16, torch.bfloat16)
    T = torch.Tensor
    ok = (isinstance(q, T) and isinstance(k, T) and isinstance(v, T) and q.is_cuda and q.dim() == 4
          and k.dim() == 4 and v.dim() == 4 and q.dtype in _DTYPES and q.dtype == k.dtype == v.dtype
          and q.device == k.device == v.device and q.shape[3] in HEAD_DIMS
          and q.shape[0] == k.shape[0] == v.shape[0] and q.shape[1] == k.shape[1] == v.shape[1]
          and k.shape[2] == v.shape[2] and q.shape[3] == k.shape[3] == v.shape[3]
          and q.numel() > 0 and k.numel() > 0 and q.is_contiguous() and k.is_contiguous()
          and v.is_contiguous() and not (q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16))
    if not ok:  # (cp.async loads q, k, v in 16-byte pieces: a view at an element offset would fault on the GPU)
        loader.check_cuda_inputs(q, k, v, supported_dtypes=_DTYPES, head_dims=HEAD_DIMS, aligned=True)
        raise ValueError("fa2_tc: unsupported inputs")  # not reached: the loader names the problem
    b, h = q.shape[0], q.shape[1]
    check_grid_rows("fa2_tc", b, h)


def launch(source, kernel, defines: dict, grid, block, args, shared_mem: int, device_index: int):
    """Launch through kernels.loader (memoised lookup, cuLaunchKernel after the first launch): host
    time inside a CUDA-event-timed call counts as kernel time, so the per-call work is kept small."""
    loader.get_function(source, kernel, defines=defines, device=device_index).launch(
        grid, block, args, shared_mem=shared_mem)


def check_out(out, names) -> None:
    """out= must be a tuple (or list) of len(names) tensors, e.g. (o, lse): TypeError naming what it got (a string or
    a short tuple was an unpacking ValueError, (None, None) an AttributeError)."""
    import torch

    if not (isinstance(out, (tuple, list)) and len(out) == len(names)
            and all(isinstance(t, torch.Tensor) for t in out)):
        got = (f"{type(out).__name__} ({', '.join(type(t).__name__ for t in out)})" if isinstance(out, (tuple, list))
               else type(out).__name__)
        raise TypeError(f"out must be a tuple ({', '.join(names)}) of {len(names)} tensors, got {got}")


def _outputs(q, out):
    import torch

    b, h, n_q, _ = q.shape
    if out is None:
        return torch.empty_like(q), torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    check_out(out, ("o", "lse"))
    o, lse = out
    if o.shape != q.shape or o.dtype != q.dtype or not o.is_contiguous() or o.device != q.device:
        raise ValueError(f"out[0] must be a contiguous {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    loader.check_aligned("out[0]", o)  # the epilogues store O in 16-byte vectors (uint4, TMA, O_DIRECT=2): a fault
    if lse.shape != (b, h, n_q) or lse.dtype != torch.float32 or not lse.is_contiguous() or lse.device != q.device:
        raise ValueError(f"out[1] must be a contiguous float32 tensor of shape {(b, h, n_q)} on {q.device}")
    return o, lse


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
            out=None):
    """FlashAttention-2 forward on tensor cores; returns (o, lse). out=(o, lse) writes into given tensors
    (the tests poison them first)."""
    import torch

    _check(q, k, v)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # the references' rules
    q, scale = layouts.positive_scale(q, scale)  # the kernel masks S before scaling it
    defs = defines_for(d, q.dtype == torch.bfloat16, config)
    o, lse = _outputs(q, out)
    grid = (-(-n_q // defs["BLOCK_M"]), b * h, 1)
    launch(SOURCE, KERNEL, defs, grid, (32 * defs["NWARPS"], 1, 1),
           (q, k, v, o, lse, int(n_q), int(n_k), float(scale * LOG2E), float(scale), int(bool(causal))),
           smem_bytes(defs), q.device.index)
    return o, lse


# -- what the GPU model needs (gpumodel.descriptors; torch-free) ------------------------------------------
def describe(d: int, dtype: str = "fp16", causal: bool = False, *, config: dict | None = None, **_) -> dict:
    """This build's descriptor: mma.sync with S/P in registers, Q and K/V staged in smem by cp.async;
    every warp re-reads its Q fragments (unless Q_IN_REGS) and all of K_j, V_j through ldmatrix."""
    defs = defines_for(d, dtype == "bf16", config)
    br, bc, warps = defs["BLOCK_M"], defs["BLOCK_N"], defs["NWARPS"]
    rows = br // warps
    smem_tile = warps * (rows * d * 2 * (1 - defs["Q_IN_REGS"]) + 2 * bc * d * 2)
    return dict(kernel="fa2_tc", build=f"Br={br} Bc={bc} {warps} warps", variant="fa2", path="mma_sync",
                structure="fa2", block_q=br, block_k=bc, warps=warps,
                occupancy_from=dict(defines=defs, min_blocks=defs["MIN_BLOCKS"]),
                loads="cp.async", s_p="registers", grid="q_blocks", smem_bytes_per_tile=smem_tile,
                smem_bytes=smem_bytes(defs), launch_overhead_of="fa2_tc", source="kernels/fa2_tc.py CONFIGS",
                options={k: v for k, v in defs.items() if k not in ("HEAD_DIM", "IS_BF16")})
