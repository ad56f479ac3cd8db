"""The limits of one H100/H200 SM (sm_90) that decide how many CTAs a build runs at once, named once.

CUDA C++ Programming Guide, compute capability 9.0: 228 KB of shared memory per SM, of which the runtime reserves
1 KB per resident CTA; a CTA may opt in to at most 227 KB of dynamic shared memory
(cudaDevAttrMaxSharedMemoryPerBlockOptin); 64K 32-bit registers per SM, allocated per warp in 256-register
granules; 64 resident warps. Torch-free, so the analysis package and every launcher can use it.
"""
from __future__ import annotations

SMEM_PER_SM = 228 * 1024
SMEM_PER_BLOCK = 227 * 1024  # 232,448 B: the most one CTA may opt in to
SMEM_RESERVED_PER_CTA = 1024
REGS_PER_SM = 65536
MAX_WARPS_PER_SM = 64


def ctas_by_smem(smem: int, smem_per_sm: int = SMEM_PER_SM) -> int:
    """CTAs of `smem` bytes of dynamic shared memory that fit one SM, each with the runtime's reserved 1 KB."""
    return smem_per_sm // (smem + SMEM_RESERVED_PER_CTA)


def ctas_by_registers(registers: int, warps: int, regs_per_sm: int = REGS_PER_SM) -> int:
    """CTAs of `warps` warps at `registers` per thread that the register file holds (256-register granules per warp)."""
    return regs_per_sm // max(((registers * 32 + 255) // 256) * 256 * warps, 1)


def occupancy_for(warps: int, smem: int, registers: int, smem_per_sm: int = SMEM_PER_SM,
                  regs_per_sm: int = REGS_PER_SM, max_warps: int = MAX_WARPS_PER_SM) -> dict:
    """CTAs and warps per SM that registers, shared memory and warp slots allow (H100/H200 limits), for a
    CTA of `warps` warps using `smem` bytes of dynamic shared memory (fa2_wgmma's builds use it too)."""
    ctas = min(ctas_by_registers(registers, warps, regs_per_sm), ctas_by_smem(smem, smem_per_sm), max_warps // warps)
    return dict(ctas_per_sm=ctas, warps_per_sm=ctas * warps, threads_per_cta=32 * warps, smem_per_cta=smem,
                occupancy=ctas * warps / max_warps)
