"""Tensor-core "multiply V once" (issue #941; kernels/cuda/v_once_tc.cu): fp16/bf16 in, fp32 accumulation.

    o, lse = forward(q, k, v, causal=False, scale=None, placement="auto", rescale="lazy")

Same inputs, outputs and causal convention as kernels.fa2_tc. For each Q block the whole row of
un-normalised probabilities f (Br x Nk_visible, fp16/bf16) is built first, then multiplied by V once,
V streamed block by block.

placement: "sram" keeps the f row in shared memory (ValueError with the numbers when it does not
fit), "hbm" spills it to a global scratch buffer and reads it back, "auto" picks sram when it fits.
rescale: "eager" (the issue's code: every new block max rescales every earlier f block; spilled blocks
are read and written back each time) or "lazy" (each block keeps its own row max; each f block is
rescaled once, inside the final product).
"""
from __future__ import annotations

from pathlib import Path

from counting import checks, sm90
from counting.checks import checked_once  # torch-free: the launch path's config cache
from kernels import fa2_tc, layouts, loader

SOURCE = Path(__file__).resolve().parent / "cuda" / "v_once_tc.cu"
KERNEL = "v_once_tc_fwd"
HEAD_DIMS = (64, 128)
LOG2E = 1.4426950408889634
PLACEMENTS = ("auto", "sram", "hbm")
RESCALES = ("eager", "lazy")
OPTIONS = {"placement": PLACEMENTS, "rescale": ("lazy", "eager")}  # as kernels.v_once's; first = forward's default
BENCH_OPTIONS = tuple(dict(placement=p, rescale=r) for p in ("sram", "hbm") for r in ("lazy", "eager"))
CONFIG = dict(BLOCK_M=64, BLOCK_N=64, NWARPS=4)  # BLOCK_M = Br, BLOCK_N = Bc (names: docs/design.md)
SMEM_LIMIT_H100 = sm90.SMEM_PER_BLOCK  # opt-in per-block limit of an H100/H200 (counting/sm90.py)


def _cdiv(a, b):
    return -(-a // b)


KNOBS = {"BLOCK_M", "BLOCK_N", "NWARPS", "MIN_BLOCKS"}  # the .cu's compile-time knobs (a config's keys)


_CHECKED: dict = {}  # (d, config_key) -> checked config: plan() and defines_for() both ask, per timed call


def build_config(config: dict | None, d: int) -> dict:
    """CONFIG, or config= checked: known integer knobs, the tiles present, what tc_fa2.cuh builds (fa2_tc.tile_errors).
    A bad one was a KeyError, a division by zero in plan(), or a compile error."""
    if config is None:
        return dict(CONFIG)
    return dict(checked_once(_CHECKED, (d,), config, lambda c: _checked_config(c, d)))


def _checked_config(config, d: int) -> dict:
    cfg = checks.knob_config("v_once_tc", config, KNOBS, ("BLOCK_M", "BLOCK_N", "NWARPS"), CONFIG)
    errors = fa2_tc.tile_errors(dict(HEAD_DIM=d, **cfg))
    if errors:
        raise ValueError(f"v_once_tc: {'; '.join(errors)}")
    return cfg


def plan(n_q: int, n_k: int, d: int, *, causal: bool = False, placement: str = "auto",
         rescale: str = "lazy", smem_limit: int = SMEM_LIMIT_H100, config: dict | None = None) -> dict:
    """Where the f row goes and what the launch needs: placement (resolved), smem bytes, T (most key
    blocks a Q block visits), tc_alloc (key blocks per scratch row), f bytes per Q block."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if rescale not in RESCALES:
        raise ValueError(f"rescale must be one of {RESCALES}, got {rescale!r}")
    cfg = build_config(config, d)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tc = _cdiv(n_k, bn)
    # the most-seeing Q block (the last one) sees every key, causal or not (bottom-right alignment)
    t_max = tc
    ring = 2 * bn * d * 2
    mb = ((t_max * bm * 4 + 127) // 128) * 128 if rescale == "lazy" else 0
    f_bytes = t_max * bm * bn * 2
    q_stage = bm * d * 2
    smem_sram = ring + max(q_stage, mb + f_bytes)
    smem_hbm = ring + max(q_stage, mb)
    fits = smem_sram <= smem_limit
    if placement == "sram" and not fits:
        raise ValueError(
            f"v_once placement='sram': the f row of a {bm}-row Q block over {t_max * bn} keys needs "
            f"{f_bytes:,} B (+{ring:,} B K/V ring{f' +{mb:,} B row maxima' if mb else ''}) = {smem_sram:,} B "
            f"of shared memory, over the {smem_limit:,} B a block may have; use placement='hbm' or 'auto'")
    resolved = placement if placement != "auto" else ("sram" if fits else "hbm")
    if resolved == "hbm" and smem_hbm > smem_limit:
        raise ValueError(f"v_once: even spilled, {smem_hbm:,} B of shared memory (row maxima of {t_max} "
                         f"blocks) is over {smem_limit:,} B")
    return dict(placement=resolved, rescale=rescale, smem=smem_sram if resolved == "sram" else smem_hbm,
                t_max=t_max, tc_alloc=tc, f_bytes_per_q_block=f_bytes, config=cfg,
                fits_sram=fits, smem_sram=smem_sram)


def defines_for(d: int, is_bf16: bool, placement: str, rescale: str, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"v_once_tc supports head dims {HEAD_DIMS}, got d={d}")
    if placement not in ("sram", "hbm"):
        raise ValueError(f"resolved placement must be 'sram' or 'hbm', got {placement!r}")
    cfg = build_config(config, d)
    cfg.setdefault("MIN_BLOCKS", 1)
    return dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), PLACEMENT_SRAM=int(placement == "sram"),
                RESCALE_LAZY=int(rescale == "lazy"), **cfg)


def compile_configs() -> list[tuple[str, str, dict]]:
    out = []
    for d in HEAD_DIMS:
        for bf16 in (0, 1):
            for placement in ("sram", "hbm"):
                for rescale in RESCALES:
                    out.append((str(SOURCE), KERNEL, defines_for(d, bf16, placement, rescale)))
    return out


def scratch_bytes(b: int, h: int, n_q: int, n_k: int, config: dict | None = None) -> int:
    cfg = dict(CONFIG if config is None else config)
    return b * h * _cdiv(n_q, cfg["BLOCK_M"]) * cfg["BLOCK_M"] * _cdiv(n_k, cfg["BLOCK_N"]) * cfg["BLOCK_N"] * 2


_SMEM_LIMITS: dict = {}


def _smem_limit(device_index):
    if device_index not in _SMEM_LIMITS:
        _SMEM_LIMITS[device_index] = loader.max_dynamic_smem(device_index)
    return _SMEM_LIMITS[device_index]


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, placement: str = "auto",
            rescale: str = "lazy", config: dict | None = None, out=None):
    """'Multiply V once' forward on tensor cores; returns (o, lse). out=(o, lse) as in fa2_tc.forward."""
    import torch

    fa2_tc._check(q, k, v)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # the references' rules
    q, scale = layouts.positive_scale(q, scale)  # the kernel masks S before scaling it
    p = plan(n_q, n_k, d, causal=causal, placement=placement, rescale=rescale,
             smem_limit=_smem_limit(q.device.index), config=config)
    defs = defines_for(d, q.dtype == torch.bfloat16, p["placement"], rescale, config)
    o, lse = fa2_tc._outputs(q, out)
    if p["placement"] == "hbm":
        scratch = torch.empty(scratch_bytes(b, h, n_q, n_k, config), dtype=torch.uint8, device=q.device)
    else:
        scratch = o  # unused by the sram build; any valid pointer
    grid = (_cdiv(n_q, defs["BLOCK_M"]), b * h, 1)
    fa2_tc.launch(SOURCE, KERNEL, defs, grid, (32 * defs["NWARPS"], 1, 1),
                  (q, k, v, o, lse, scratch, int(n_q), int(n_k), float(scale * LOG2E), float(scale),
                   int(bool(causal)), int(p["tc_alloc"])),
                  p["smem"], q.device.index)
    return o, lse


# -- what the GPU model needs (gpumodel.descriptors; torch-free) ------------------------------------------
def describe(d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096, n_k: int | None = None,
             placement: str = "auto", rescale: str = "lazy", config: dict | None = None, **_) -> dict:
    """This build's descriptor: mma.sync, 4 warps of 16 rows; the f row (input dtype) is written to smem
    or to a global scratch and read back for the one (f/l) V product; plan() says which and the smem."""
    n_k = n_q if n_k is None else n_k
    p = plan(n_q, n_k, d, causal=causal, placement=placement, rescale=rescale, config=config)
    defs = defines_for(d, dtype == "bf16", p["placement"], rescale, config)
    br, bc, warps = defs["BLOCK_M"], defs["BLOCK_N"], defs["NWARPS"]
    # per tile: Q fragments + K_j per warp (S), V_j per warp (the product), f written and read back
    smem_tile = warps * (br // warps * d * 2 + 2 * bc * d * 2) + 2 * br * bc * 2
    return dict(kernel="v_once_tc", build=f"Br={br} Bc={bc} f in {p['placement']}, {rescale}", variant="v_once",
                path="mma_sync", structure="fa2", block_q=br, block_k=bc, warps=warps,
                occupancy_from=dict(defines=defs, min_blocks=defs["MIN_BLOCKS"]),
                loads="cp.async", s_p="registers", grid="q_blocks", smem_bytes_per_tile=smem_tile,
                f=p["placement"], rescale=rescale, smem_bytes=p["smem"], launch_overhead_of="fa2_tc",
                # eager, spilled: no latency term (rescale_round_trips 0): each thread has KN 16-byte
                # fragments of an earlier block in flight at once (teaching: one 2-byte element per load),
                # so the rescale runs at the L2/DRAM rate the levels give (results/tc_bench.json)
                source="kernels/v_once_tc.py CONFIG and plan()",
                options=dict(placement=placement, rescale=rescale))
