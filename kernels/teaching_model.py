"""The teaching launchers' descriptors for the GPU model (gpumodel.descriptors), kept torch-free.

The launcher modules (kernels/naive.py, fa1.py, fa2.py, v_once.py) import torch at top level, so the
model reads their configuration from here; the shared-memory formulas are theirs (tests hold them
equal). Every teaching kernel is float32 FFMA on the CUDA cores with teaching.cuh's register
micro-tiles: 16 x 16 threads, thread (ty, tx) owns rows ty + 16a and columns tx + 16b, so per step kk
of a product each warp issues RA + CB scalar shared loads (LDS) and RA·CB FFMA (RA = Br/16, CB = Bc/16
for S = Q Kᵀ over kk < d; CB = d_pad/16 for O += P V over kk < Bc). The softmax uses accurate expf.

Registers per thread (NVRTC 13.0, sm_90; results/kernels_notes.md "Resources"): naive 40/32/64,
fa1 168 (__launch_bounds__(256, 1)), fa2 126-128 (__launch_bounds__(256, 2)), v_once 96-119 (256, 2).
"""
from __future__ import annotations

from counting import sm90

NTHREADS = 256
WARPS = NTHREADS // 32
F32 = 4
SMEM_PER_SM, SMEM_PER_BLOCK = sm90.SMEM_PER_SM, sm90.SMEM_PER_BLOCK
# expf = ex2.approx plus range reduction: 9 FP32/integer instructions around the MUFU op (PTX of
# expf from nvcc 13.0 -arch=sm_90 -O3: fma, cvt.sat, fma.rm, add, fma, fma, shl, mul, + the ex2)
EXPF_ALU = 9
REGISTERS = {"naive": 64, "fa1": 168, "fa2": 128, "v_once": 119}
BLOCKS_BOUND = {"naive": 8, "fa1": 1, "fa2": 2, "v_once": 2}  # __launch_bounds__ min blocks (naive: none)


def _cdiv(a, b):
    return -(-a // b)


def d_padded(d: int) -> int:
    return 64 if d <= 64 else 128


def shared_bytes(name: str, d: int, n_k: int, itemsize: int, block_q: int, block_k: int, *,
                 placement: str = "hbm", rescale: str = "lazy") -> int:
    """Dynamic shared memory of the launch (the launchers' shared_bytes; naive: its scores pass)."""
    ld = d_padded(d) + 1
    if name == "naive":
        return F32 * (block_q * ld + block_k * ld + block_q * (block_k + 1))
    if name == "fa1":
        return F32 * (2 * block_k * ld + block_q * ld + block_q * (block_k + 1))
    if name == "fa2":
        own_v = int(d_padded(d) <= 64)
        return F32 * (block_q * ld + block_k * ld * (1 + own_v) + block_q * (block_k + 1))
    size = F32 * (block_q * max(ld, block_k + 1) + block_k * ld)
    if rescale == "lazy":
        size += F32 * block_q * _cdiv(n_k, block_k)
    if placement == "sram":
        size += block_q * (_cdiv(n_k, block_k) * block_k + 4 // itemsize) * itemsize
    return size


def micro_tile(d: int, block_q: int, block_k: int) -> tuple[float, float]:
    """(LDS, FFMA) warp instructions per Br x Bc tile for S = Q Kᵀ and O += P V (teaching.cuh)."""
    ra, cb, ns = block_q / 16, block_k / 16, d_padded(d) / 16
    lds = WARPS * (d * (ra + cb) + block_k * (ra + ns))
    ffma = WARPS * (d * ra * cb + block_k * ra * ns)
    return lds, ffma


def describe(name: str, d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096,
             n_k: int | None = None, block_q: int = 64, block_k: int = 64, placement: str = "auto",
             rescale: str = "eager", **_) -> dict:
    if d > 128:
        raise ValueError(f"the teaching kernels take head dims up to 128, got d={d}")
    n_k = n_q if n_k is None else n_k
    itemsize = 4 if dtype == "fp32" else 2
    f = None
    if name == "v_once":
        f = placement
        if f == "auto":
            need = shared_bytes(name, d, n_k, itemsize, block_q, block_k, placement="sram", rescale=rescale)
            f = "sram" if need <= SMEM_PER_BLOCK else "hbm"
    smem = shared_bytes(name, d, n_k, itemsize, block_q, block_k, placement=f or "hbm", rescale=rescale)
    if smem > SMEM_PER_BLOCK:  # the launcher raises SramOverflow here (kernels/v_once.py forward): nothing to price
        raise ValueError(f"{name} kernel (placement={f}, rescale={rescale}, Br={block_q}, Bc={block_k}, d={d}, Nk={n_k}) "
                         f"needs {smem:,} bytes of SRAM but the capacity is {SMEM_PER_BLOCK:,} bytes (over by "
                         f"{smem - SMEM_PER_BLOCK:,} bytes)" + ("; use placement='hbm' or 'auto'" if f == "sram" else ""))
    regs = REGISTERS[name]
    by_regs = 65536 // (((regs * 32 + 255) // 256) * 256 * WARPS)
    ctas = max(1, min(BLOCKS_BOUND[name], by_regs, sm90.ctas_by_smem(smem), 64 // WARPS))
    lds, ffma = micro_tile(d, block_q, block_k)
    # v_once.cu with f spilled: phase 2 loads f_ij then waits at the barrier (one round trip per tile);
    # eager's rescale loop (k < j) reads-scales-writes each earlier block for one row slot a at a time
    spilled = name == "v_once" and f == "hbm"
    rt_tile = 1.0 if spilled else 0.0
    rt_rescale = block_q / 16 if spilled and rescale == "eager" else 0.0
    return dict(kernel=name, build=f"teaching Br={block_q} Bc={block_k}" + (f" f in {f}, {rescale}" if f else ""),
                variant=name, path="ffma", structure="teaching", block_q=block_q, block_k=block_k,
                warps=WARPS, ctas_per_sm=ctas, loads="ld.global", s_p="hbm" if name == "naive" else "smem",
                grid="heads" if name == "fa1" else "q_blocks", smem_bytes_per_tile=128.0 * lds, smem_bytes=smem,
                lds_per_tile=lds, ffma_per_tile=ffma, exp_alu=EXPF_ALU, f=f,
                round_trips_per_tile=rt_tile, rescale_round_trips=rt_rescale,
                rescale=rescale if name == "v_once" else None, launches=3 if name == "naive" else 1,
                launch_overhead_of="fa2",  # the teaching launchers share one CuPy driver path
                source=f"kernels/{name}.py, kernels/cuda/teaching.cuh",
                options=dict(block_q=block_q, block_k=block_k,
                             **(dict(placement=placement, rescale=rescale) if name == "v_once" else {})))
