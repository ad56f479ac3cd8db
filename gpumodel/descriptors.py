"""What the GPU model needs to know about a kernel build: its tiling, instruction path, residency.

Every kernel states its own descriptor from its own config, so a new build is modelled without
editing the model:
    kernels/<name>.py        describe(d, dtype, causal=False, n_q=.., n_k=.., **options) -> dict
                             (the tensor-core launchers: torch-free modules)
    kernels/teaching_model   the teaching launchers' describe (those modules import torch at top level)
    EXTERNAL (builds.py)     SDPA flash and cuDNN, read off their ncu kernel names and launch shapes
`describe(name, ...)` here returns a KernelDescriptor for any of them; nothing on this path imports
torch or CuPy. The layers under it: gpumodel/builds.py (KernelDescriptor, the external kernels, each build's data
priced with gpumodel/resources.py's measured registers and launch overhead), then the measured per-build inputs
describe() adds (gpumodel/issue.py, gpumodel/local_memory.py), which key their tables by that data.

Fields (the papers' names: Br, Bc, Tr, Tc):
    variant      which closed form the kernel's traffic follows (naive | fa1 | fa2 | v_once)
    path         the matmul instruction: wgmma (sm_90a, operands from smem), mma_sync (m16n8k16, B
                 fragments through ldmatrix), ffma (float32 CUDA cores, the teaching tier)
    structure    the overlap rule: warp_specialized (producer warp + consumer warpgroups: tensor and
                 softmax overlap), fa2 (the same warps do both: they add, partly hidden by other CTAs),
                 teaching (FFMA, LDS and the softmax share the issue slots)
    grid         q_blocks (Tr x B·H CTAs, Q blocks fastest), heads (FA1: B·H CTAs), persistent (SMs CTAs),
                 clusters (Tr x B·H clusters of cluster_size CTAs: v_once_cluster, gpumodel/cluster_model.py)
    smem_bytes_per_tile  shared-memory bytes read per Br x Bc tile (ldmatrix / LDS / wgmma operands)
    smem_bytes   shared memory per CTA as the launcher allocates it (S and P in registers where the kernel
                 keeps them there: the reference's working set is not the kernel's)
    lds_per_tile warp-wide scalar shared loads per tile (teaching tier; 0 elsewhere)
    ffma_per_tile warp-wide FFMA instructions of the two products per tile (teaching tier)
    exp_alu      FP32 instructions per exponential beyond the MUFU op (accurate expf's range reduction)
    round_trips_per_tile  dependent global-memory round trips a CTA waits out per visited tile that
                 nothing in the CTA overlaps (teaching v_once, spilled f: phase 2 loads f_ij before its
                 barrier); each costs the fitted latency L_gmem
    issue_per_tile  FA2-style builds profiled by lab/ncu_levels.sh: warp instructions per tile other than
                 the MMAs (smsp__inst_executed / tiles - 4·Br·Bc·d / 4096 per m16n8k16), measured once per
                 build (gpumodel/issue.py); it replaces the closed-form estimate of the softmax's issue work
    local_step_bytes, local_masked_step_bytes, local_cta_bytes  register spills (gpumodel/local_memory.py):
                 stack-frame bytes a thread stores per unmasked step, per masked step (causal diagonal,
                 Nk tail) and once per CTA; every one crosses from L1 to the L2 (0: no spills known)
    row_sum_cols columns the P V product runs past d to compute the row sum l on the tensor cores
                 (fa2_wgmma ROW_SUM_MMA: 8, a panel of ones beside V); the softmax then has one add fewer
                 per score (0: l summed on the FP32 pipe)
    pv_pad_cols  columns the P V product runs past d on padding (fa2_wgmma at d = 96 with PV_N = 128: two whole
                 64-column panels, 32 columns of zeros): tensor work the count of useful FLOPs leaves out
    qk_pad_cols  columns the S = Q K^T product reduces over past d (cuDNN at d = 96: its d = 128 kernel, ncu
                 results/ncu_levels_d96.csv: 64x128x128); fa2_wgmma reduces over d itself (KD = d / 16)
    load_cols    columns each row of a Q, K or V tile load moves from the L2 (0: d): TMA boxes of whole 64-column
                 panels at d = 96 move 128 (ncu_levels_d96.csv: the SM-side L2 reads of fa2_wgmma and cuDNN are
                 1.33x the d = 96 count, SDPA flash's 1.00x); DRAM still reads each byte once
    rescale_round_trips   eager v_once with f spilled: dependent round trips per earlier f block at each
                 new block (the read-scale-write loop over k < j; teaching: one per row slot, Br/16;
                 v_once_tc: none, its 16-byte fragments keep enough bytes in flight to run at bandwidth)
    causal_order which causal Q block blockIdx.x runs: ascending (block i = blockIdx.x, the lightest first under
                 bottom-right causal: SDPA flash, and cuDNN, whose order is not known) or heaviest_first
                 (Tr - 1 - blockIdx.x: every kernel of this repo, HEAVIEST_FIRST below, read off its source);
                 the model list-schedules the CTAs in that order, so it sets the causal tail
    next_tile_prefetch  a persistent kernel whose CTAs load their next work tile's Q and K/V while this tile
                 finishes (cuDNN: assumed, its engine is closed; see builds.py _sdpa_cudnn): a work tile then pays its
                 pipeline's fill and drain, not the CTA's prologue latency (gpumodel/gpu_model.py). fa2_wgmma's
                 PERSISTENT builds with O_TILE do (v6: the Q tile goes back after the last S = Q K^T); without it
                 they load the next Q after the epilogue (persistent, no prefetch)
    kv_stages    K/V ring slots a producer fills ahead of its consumers (fa2_wgmma's TMA builds: STAGES); the model
                 charges the wait of a key block from DRAM that the ring could not issue early enough
                 (gpumodel/gpu_model.py ring_wait); 0: not stated (cuDNN's closed engine, the cp.async builds), no term
    causal_section_kb  a persistent kernel's causal tile order: the tiles of each section of heads whose K and V
                 fit in this many KB, longest first (fa2_wgmma_tma.cu tile_coords); 0: each head's Q blocks in the
                 kernel's causal_order
    ragged_section_first  with causal_section_kb: the section of the B*H % hs heads left over runs first (fa2_wgmma
                 SECTION_RAGGED_FIRST, stop 24); False: last
    idle_skip    the consumer warpgroups (64 rows each) of the last Q block whose rows all lie past Nq issue no
                 product and no softmax (fa2_wgmma WG_SKIP with two or three warpgroups): that block's tiles cost the
                 share of its warpgroups that hold a row (gpumodel/gpu_model.py prepare); False: the whole Br is
                 computed, padding included
    half_diag    fa2_wgmma HALF_DIAG (v14): a consumer warpgroup whose rows see only the first half of its first key
                 block (warpgroup 0 on the causal diagonal of Br = Bc = 128) runs that step at half width: the Q block's
                 tiles cost half a step less per such warpgroup (counting/tiling.py half_first_steps; gpu_model prepare)
    consumer_warpgroups  warp-specialised kernels: the consumer warpgroups of one CTA (fa2_wgmma NWG, cuDNN 2; 0: not
                 stated). Three of them (fa2_wgmma's Br = 192 at d = 64) keep a third softmax in flight while the
                 tensor cores run the other two's products, and the overlap rule takes its own fitted share σ_ws3
                 (gpumodel/gpu_model.py combine; stage 4 of gpumodel/fit_gpu_model.py)
    mask_every_step_if_ragged  non-causal: the kernel runs the mask (a compare and a select per score,
                 gpumodel/gpu_model.py MASK_OPS_PER_SCORE) on every key block when Bc does not divide Nk, not only on the
                 tail block (cuDNN: its timings, and ncu's instructions per tile, builds.py _sdpa_cudnn); its causal kernel masks the
                 diagonal's and the tail's only, as every kernel here does (this repo's need_mask, FA2's masking steps)
    rescale_skip the O accumulator is rescaled (FA2 Alg. 1 line 10's diag(e^(m_old - m_new)) O: Br x d multiplies per
                 tile, counted in the closed form's 'other') only when a row's max grows past a bound (fa2_wgmma
                 RESCALE_THRESHOLD, FA4's rule; exact in the result): the model drops those multiplies from the tile's
                 softmax work but on each Q block's first step (m moves from -inf there); the rare later move is left
                 out. False: every step (SDPA flash, whose measured issue_per_tile has them; cuDNN: +533 warp
                 instructions per key block at d = 128 over d = 64 in ncu_levels*.csv, as a rescale of its 64 x d O per
                 warpgroup every step would issue)
    causal_walk  causal: a consumer warpgroup whose rows end before its Q block's last row walks the key blocks
                 wholly past its own last row (fa2_wgmma WG_CAUSAL_SKIP, v11): that block's tiles cost the mean,
                 over its warpgroups, of the steps each runs (gpumodel/gpu_model.py prepare)
"""
from __future__ import annotations

from counting.checks import EXTERNAL_NAMES, MAX_GRID_ROWS, check_grid_rows  # noqa: F401  (re-exported)
from gpumodel.builds import (CAUSAL_ORDERS, EXTERNAL, GRIDS, MODELLED, PATHS, STRUCTURES,  # noqa: F401  (re-exported)
                             TEACHING, KernelDescriptor, build_data, kernel_names)
from gpumodel.issue import measured_issue
from gpumodel.local_memory import for_descriptor
from gpumodel.resources import (LAUNCH_OVERHEAD_FILE, REGISTER_NEUTRAL, RESOURCES,  # noqa: F401  (re-exported)
                                ctas_per_sm, launch_overheads, overhead, registers_of)

# Kernels whose causal grid launches the longest Q blocks first (the line that maps blockIdx.x to the Q block);
# their launchers' describe() does not state it (yet), so describe() below adds it.
HEAVIEST_FIRST = {
    "fa2_wgmma": "kernels/cuda/fa2_wgmma_tma.cu and fa2_wgmma.cu: m_block = causal ? gridDim.x - 1 - blockIdx.x",
    "fa2_tc": "kernels/cuda/tc_fa2.cuh: qb.i = causal ? gridDim.x - 1 - blockIdx.x",
    "v_once_tc": "kernels/cuda/tc_fa2.cuh (shared with fa2_tc): qb.i = causal ? gridDim.x - 1 - blockIdx.x",
    "fa2": "kernels/cuda/fa2.cu: i = t_r - 1 - blockIdx.x",
    "v_once": "kernels/cuda/v_once.cu: i = t_r - 1 - blockIdx.x (heaviest causal blocks first)",
    "naive": "kernels/cuda/naive.cu, the P V pass: i = t_r - 1 - blockIdx.x (heaviest causal blocks first)",
    "v_once_cluster": "kernels/cuda/v_once_cluster.cu: m_block = causal ? n_qblocks - 1 - q_blk",
}


def describe(name: str, d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096,
             n_k: int | None = None, **options) -> KernelDescriptor:
    """The descriptor of kernel `name` (KERNELS or EXTERNAL) for this head dim, dtype and options.
    n_q, n_k matter only where the build depends on them (v_once_tc's f placement and smem)."""
    data = build_data(name, d, dtype, causal, n_q=n_q, n_k=n_k, **options)
    if data["structure"] == "fa2" and data["variant"] == "fa2" and not data.get("issue_per_tile"):
        issue, src = measured_issue(data["kernel"], d, data["build"], data.get("options", {}))
        if issue:
            data = dict(data, issue_per_tile=issue, issue_source=src)
    if "causal_order" not in data and data["kernel"] in HEAVIEST_FIRST:
        data = dict(data, causal_order="heaviest_first")
    if "local_source" not in data:
        data = dict(data, **for_descriptor(data, d, dtype))
    return KernelDescriptor(**data)

