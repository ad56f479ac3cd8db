"""What the GPU model needs to know about a kernel build: its tiling, instruction path, residency.

Every kernel states its own descriptor from its own config, so a new build is modelled without
editing the model:
    kernels/<name>.py        describe(d, dtype, causal=False, n_q=.., n_k=.., **options) -> dict
                             (the tensor-core launchers: torch-free modules)
    kernels/teaching_model   the teaching launchers' describe (those modules import torch at top level)
    EXTERNAL below           SDPA flash and cuDNN, read off their ncu kernel names and launch shapes
`describe(name, ...)` here returns a KernelDescriptor for any of them; nothing on this path imports
torch or CuPy.

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
                 finishes (cuDNN: assumed, its engine is closed; see _sdpa_cudnn): a work tile then pays its
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
                 tail block (cuDNN: its timings, and ncu's instructions per tile, _sdpa_cudnn); its causal kernel masks the
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

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from counting.checks import EXTERNAL_NAMES, MAX_GRID_ROWS, check_grid_rows  # noqa: F401  (re-exported)

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "results" / "tc_resources.json"

PATHS = ("wgmma", "mma_sync", "ffma")
STRUCTURES = ("warp_specialized", "fa2", "teaching")
GRIDS = ("q_blocks", "heads", "persistent", "clusters")
CAUSAL_ORDERS = ("ascending", "heaviest_first")
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


@dataclass(frozen=True)
class KernelDescriptor:
    kernel: str
    build: str
    variant: str
    path: str
    structure: str
    block_q: int
    block_k: int
    warps: int
    ctas_per_sm: int
    loads: str  # tma | cp.async | ld.global
    s_p: str  # where S and P live: registers | smem | hbm
    grid: str = "q_blocks"
    smem_bytes_per_tile: float = 0.0
    lds_per_tile: float = 0.0
    ffma_per_tile: float = 0.0
    exp_alu: int = 0
    smem_bytes: int = 0  # dynamic shared memory per CTA as launched (0: not known, external kernels)
    round_trips_per_tile: float = 0.0
    rescale_round_trips: float = 0.0
    f: str | None = None  # v_once: where the f row lives (sram | hbm)
    rescale: str | None = None
    issue_per_tile: float = 0.0  # measured warp instructions per tile other than the MMAs (0: not measured)
    cluster_size: int = 1  # CTAs per Q block (grid "clusters")
    row_sum_cols: int = 0  # P V columns past d that compute l (ROW_SUM_MMA); one add per score fewer
    pv_pad_cols: int = 0  # P V columns past d that are padding (fa2_wgmma PV_N = 128 at d = 96): products, no use
    qk_pad_cols: int = 0  # S = Q K^T reduction columns past d (cuDNN at d = 96 runs its d = 128 kernel)
    load_cols: int = 0  # columns a Q / K / V tile row load moves (TMA boxes of whole 64-column panels); 0: d
    issue_source: str = ""
    causal_order: str = "ascending"  # ascending | heaviest_first: the causal Q block each blockIdx.x runs
    next_tile_prefetch: bool = False  # persistent CTAs load the next work tile while this one finishes
    kv_stages: int = 0  # K/V ring slots the producer loads ahead (fa2_wgmma TMA: STAGES); 0: not stated
    causal_section_kb: int = 0  # persistent causal order: longest first within sections of heads whose K/V fit
    ragged_section_first: bool = False  # the section of the heads left over goes first (fa2_wgmma SECTION_RAGGED_FIRST)
    idle_skip: bool = False  # warpgroups of the last Q block with no row compute nothing (fa2_wgmma WG_SKIP)
    consumer_warpgroups: int = 0  # warp-specialised: consumer warpgroups per CTA (3: the overlap share sigma_ws3)
    causal_walk: bool = False  # causal: each warpgroup runs only the key blocks its own rows see (WG_CAUSAL_SKIP)
    half_diag: bool = False  # a warpgroup whose rows see its first key block's first half only runs it at half width
    mask_every_step_if_ragged: bool = False  # non-causal: every key block masked when Bc does not divide Nk (cuDNN)
    rescale_skip: bool = False  # O rescaled only when the row max grows past a bound (fa2_wgmma RESCALE_THRESHOLD)
    local_step_bytes: float = 0.0  # spill stores per thread per unmasked step (gpumodel/local_memory.py)
    local_masked_step_bytes: float = 0.0
    local_cta_bytes: float = 0.0
    local_source: str = ""
    launches: int = 1
    launch_overhead_s: float = 0.0
    overhead_source: str = ""
    source: str = ""
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, value, allowed in (("path", self.path, PATHS), ("structure", self.structure, STRUCTURES),
                                     ("grid", self.grid, GRIDS)):
            if value not in allowed:
                raise ValueError(f"{self.kernel}: {name} {value!r} not one of {allowed}")
        if self.causal_order not in CAUSAL_ORDERS:
            raise ValueError(f"{self.kernel}: causal_order {self.causal_order!r} not one of {CAUSAL_ORDERS}")
        if self.block_q <= 0 or self.block_k <= 0 or self.ctas_per_sm <= 0:
            raise ValueError(f"{self.kernel}: Br, Bc and CTAs/SM must be positive")

    def as_dict(self) -> dict:
        return asdict(self)


# -- measured per-build resources (registers from NVRTC: bench/bench_tc.py resources) ------------------
@lru_cache(maxsize=1)
def _resources() -> list:
    try:
        return json.loads(RESOURCES.read_text())
    except OSError:
        return []


# fa2_wgmma knobs that forward()'s own builds carry (kernels.fa2_wgmma.DEFAULT_KNOBS) and that change no register count:
# v9's descriptor stepping, v10's idle warpgroups, v11's causal walk, v12's carried ping-pong turn, v13's direct O store,
# stop 22's tree row max and half-width diagonal step (d = 128), stop 24's ragged causal section first
REGISTER_NEUTRAL = ("DESC_STEP", "WG_SKIP", "WG_CAUSAL_SKIP", "TURN_CARRY", "O_DIRECT", "MAX_TREE", "HALF_DIAG",
                    "SECTION_RAGGED_FIRST")


def registers_of(kernel: str, defines: dict) -> int | None:
    """Registers per thread of a build, from results/tc_resources.json (None: not measured). REGISTER_NEUTRAL
    knobs are left out of the match: they change no build's register count (ptxas -v, every SIZE_RULES build and
    CONFIGS; tests/test_kernels_wgmma_speed.py checks it)."""
    defines = {k: v for k, v in defines.items() if k not in REGISTER_NEUTRAL}
    for row in _resources():
        if row["kernel"] == kernel and row["defines"] == defines:
            return int(row["registers"])
    # the bf16 build has the fp16 build's registers to within a few (same code, other converts)
    other = dict(defines, IS_BF16=1 - int(defines.get("IS_BF16", 0)))
    for row in _resources():
        if row["kernel"] == kernel and row["defines"] == other:
            return int(row["registers"])
    return None


def ctas_per_sm(warps: int, smem: int, registers: int | None, fallback: int) -> int:
    """CTAs per SM from registers, shared memory and warp slots (kernels.fa2_tc.occupancy_for);
    `fallback` (the build's MIN_BLOCKS) when its registers were never measured."""
    if registers is None:
        return fallback
    from counting.sm90 import occupancy_for

    return max(1, occupancy_for(warps, smem, registers)["ctas_per_sm"])


# -- launch overhead: results/launch_overhead.json (CUDA-event time of a tiny launch) -----------
LAUNCH_OVERHEAD_FILE = ROOT / "results" / "launch_overhead.json"


@lru_cache(maxsize=1)
def launch_overheads() -> dict:
    """kernel -> event-timed seconds of one tiny launch (host work inside a timed call counts)."""
    out = {}
    try:
        rows = json.loads(LAUNCH_OVERHEAD_FILE.read_text())["rows"]
    except (OSError, KeyError, ValueError):
        return out
    for r in rows:
        if "event_ms" in r and r.get("path") in ("driver", "torch"):
            out[r["kernel"]] = r["event_ms"] * 1e-3
    return out


def overhead(kernel_like: str) -> tuple[float, str]:
    t = launch_overheads().get(kernel_like)
    if t is None:
        return 0.0, "not measured"
    return t, f"results/launch_overhead.json ({kernel_like}, event time of a 1x2x128x64 call)"


# -- external kernels: torch SDPA's flash (FA2, mma.sync) and cuDNN (wgmma, warp-specialised) --------
def _sdpa_flash(d: int, dtype: str, causal: bool, **_) -> dict:
    # ncu kernel name (results/tc_ncu*.csv): Flash_fwd_kernel_traits<d, Br, Bc, 4 warps, Is_Q_in_regs=0,
    # Share_Q_K_smem=0>: d=64 -> <64, 128, 128, 4>, d=128 -> <128, 128, 64, 4>; 255 registers, 2 CTAs/SM
    # (launch__occupancy_limit_registers), grid (Tr, B, H).
    if d > 256:
        raise ValueError(f"sdpa_flash takes head dims up to 256, got d={d}")
    # torch's FA2 (aten/src/ATen/native/transformers/cuda/flash_attn/flash_fwd_launch_template.h, run_mha_fwd_hdim*):
    # the head dim rounds up to its bucket, each bucket's traits on sm90 (228 KB of smem per SM). hdim256 runs 64 x 64
    # with 4 warps there ("For H100 we want to run with 64 x 64 (96KB smem) since then we can get 2 CTAs per SM"), not
    # the 128 x 64 the model had priced before stop 25; 192 and 224 run 128 x 64 with 8 warps (one CTA per SM at 255
    # registers)
    br, bc, warps = next(t for lim, t in ((64, (128, 128, 4)), (128, (128, 64, 4)), (160, (128, 32, 4)),
                                          (224, (128, 64, 8)), (256, (64, 64, 4))) if d <= lim)
    ctas = 2 if warps == 4 else 1  # 255 registers per thread (launch__occupancy_limit_registers at d = 64 / 128)
    rows_per_warp = br // warps
    smem = warps * (rows_per_warp * d * 2 + 2 * bc * d * 2)  # Q fragments re-read each tile, K and V
    t, src = overhead("sdpa_flash")
    return dict(kernel="sdpa_flash", build=f"FA2 Flash_fwd_kernel_traits<{d},{br},{bc},{warps}>", variant="fa2",
                path="mma_sync", structure="fa2", block_q=br, block_k=bc, warps=warps, ctas_per_sm=ctas,
                loads="cp.async", s_p="registers", grid="q_blocks", smem_bytes_per_tile=smem,
                launch_overhead_s=t, overhead_source=src,
                source="ncu kernel names and launch stats in results/tc_ncu_wgmma_tma_d{64,128}.csv")


def _sdpa_cudnn(d: int, dtype: str, causal: bool, **_) -> dict:
    # ncu: cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x{d}_4x1x1: 384 threads
    # (a producer and two consumer warpgroups of 64 rows: Br = 128, Bc = 128), grid = 132 CTAs (persistent),
    # 1 CTA/SM (232 KB of smem at d = 128), 168 registers. next_tile_prefetch: assumed (closed engine): its
    # producer loads the next work tile while the consumers finish this one, as its timings say: against
    # fa2_wgmma's one-tile CTAs (same Br, Bc, warpgroups) it is 0.84x at N = 2048 and 0.92x at 8192 (d = 64, the
    # fit's training cells, tc_bench_wgmma_tma.json): a per-tile latency that shrinks with the tile count.
    # Its causal order is not known: ascending (the list schedule's). mask_every_step_if_ragged: at lengths Bc = 128
    # does not divide it runs 9-15% slower per unit of work than at the multiples beside them (d = 64 non-causal
    # N = 1000: 359 us against 1024's 321-331 us; causal 960 (B = 17) 227-232 us against 1024 (B = 16) 206-220 us;
    # fwd_wgmma_fresh_lengths/n768_12288_run4, fwd_wgmma_fresh_lengths/n640_5120 and the d = 64 causal 576-960 lengths of fwd_wgmma_fresh_lengths/d64_causal_n576_960), as a kernel that masks every
    # key block would; this repo's kernels time in proportion to the work there. ncu (results/ncu_fwd_wgmma_vs_cudnn/masked_n1000) has
    # its non-causal kernel issue 28-30% more warp instructions per tile at N = 1000 than at 1024 (d = 64 and 128; 2 per
    # score over a 128 x 128 tile is ~25%), its causal one 3.4% (the diagonal's and the tail's blocks only): so the
    # flag is the non-causal kernel's. Its causal timings at ragged N are slower per FLOP too (ncu: 9% at d = 64
    # N = 1000), for a reason the instruction count does not show.
    if d > 256:
        raise ValueError(f"sdpa_cudnn takes head dims up to 256, got d={d}")
    br, bc = 128, 128
    # its kernels' head dims: d = 96 runs 64x128x128 (ncu_levels_d96.csv), the one padded d profiled; other d between
    # 64, 128 and 256 are assumed to pad the same way (its kernel names seen: 64x128x{64, 128, 256})
    kd = next(x for x in (64, 128, 256) if x >= d)
    smem = 2 * (64 * kd * 2 + 2 * bc * kd * 2)
    t, src = overhead("sdpa_flash")  # the same torch dispatch; cuDNN's own was not timed
    return dict(kernel="sdpa_cudnn", build=f"cuDNN sm90 flash fprop wgmma 64x128x{kd}", variant="fa2",
                path="wgmma", structure="warp_specialized", block_q=br, block_k=bc, warps=12, ctas_per_sm=1,
                consumer_warpgroups=2,
                qk_pad_cols=kd - d, pv_pad_cols=kd - d, load_cols=kd,
                loads="tma", s_p="registers", grid="persistent", next_tile_prefetch=True, smem_bytes_per_tile=smem,
                mask_every_step_if_ragged=True,
                launch_overhead_s=t, overhead_source=src + "; cuDNN assumed as SDPA flash",
                source="ncu kernel names and launch stats in results/tc_ncu_wgmma_tma_d{64,128}.csv, "
                       "ncu_levels_d256.csv, ncu_levels_d96.csv")


EXTERNAL = {"sdpa_flash": _sdpa_flash, "sdpa_cudnn": _sdpa_cudnn}
# kernels whose descriptor the model states itself (no launcher import): the cluster v_once (issue 18)
MODELLED = ("v_once_cluster",)
TEACHING = ("naive", "fa1", "fa2", "v_once")


def kernel_names() -> tuple:
    """Every name `describe` takes: the KERNELS registry, then the external kernels."""
    from kernels import KERNELS

    return tuple(dict.fromkeys(tuple(KERNELS) + MODELLED)) + EXTERNAL_NAMES


def describe(name: str, d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096,
             n_k: int | None = None, **options) -> KernelDescriptor:
    """The descriptor of kernel `name` (KERNELS or EXTERNAL) for this head dim, dtype and options.
    n_q, n_k matter only where the build depends on them (v_once_tc's f placement and smem)."""
    data = _describe_data(name, d, dtype, causal, n_q=n_q, n_k=n_k, **options)
    if data["structure"] == "fa2" and data["variant"] == "fa2" and not data.get("issue_per_tile"):
        from gpumodel.issue import measured_issue

        issue, src = measured_issue(data["kernel"], d, data["build"], data.get("options", {}))
        if issue:
            data = dict(data, issue_per_tile=issue, issue_source=src)
    if "causal_order" not in data and data["kernel"] in HEAVIEST_FIRST:
        data = dict(data, causal_order="heaviest_first")
    if "local_source" not in data:
        from gpumodel.local_memory import for_descriptor

        data = dict(data, **for_descriptor(data, d, dtype))
    return KernelDescriptor(**data)


def _describe_data(name: str, d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096,
                   n_k: int | None = None, **options) -> dict:
    n_k = n_q if n_k is None else n_k
    if name in EXTERNAL:
        data = EXTERNAL[name](d, dtype, causal, **options)
    elif name in MODELLED:
        from gpumodel import cluster_model

        data = cluster_model.describe(d, dtype, causal, n_q=n_q, n_k=n_k, **options)
    else:
        from kernels import KERNELS

        if name not in KERNELS:
            raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(kernel_names())}")
        if name in TEACHING:
            from kernels import teaching_model as mod
            data = mod.describe(name, d, dtype, causal, n_q=n_q, n_k=n_k, **options)
        else:
            import importlib

            mod = importlib.import_module(f"kernels.{name}")
            data = mod.describe(d, dtype, causal, n_q=n_q, n_k=n_k, **options)
    return _priced(data)


def _priced(data: dict) -> dict:
    """A launcher's describe() states its build as data; the model adds what it knows of the build on a GPU:
    CTAs per SM from the measured registers (`occupancy_from`), and the launch overhead (`launch_overhead_of`)."""
    data = dict(data)
    occ = data.pop("occupancy_from", None)
    if occ is not None:
        regs = registers_of(data["kernel"], occ["defines"])
        data["ctas_per_sm"] = ctas_per_sm(data["warps"], data["smem_bytes"], regs, occ["min_blocks"])
    of = data.pop("launch_overhead_of", None)
    if of is not None:
        data["launch_overhead_s"], data["overhead_source"] = overhead(of)
    return data
