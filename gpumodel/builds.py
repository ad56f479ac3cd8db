"""A kernel build as the GPU model sees it, as data: `KernelDescriptor` (its fields: gpumodel/descriptors.py's
docstring), the external kernels' descriptors (SDPA flash, cuDNN: read off their ncu kernel names and launch shapes),
and `build_data`, any kernel's descriptor data from its own describe() (this repo's launchers, the teaching tier's
kernels/teaching_model.py, the cluster kernel's gpumodel/cluster_model.py) priced with what is measured of the build
(gpumodel/resources.py: CTAs per SM from its registers, its launch overhead). Torch-free.

Below the model's measured per-build inputs (gpumodel/issue.py, gpumodel/local_memory.py), which key their tables
by this data; gpumodel/descriptors.py describe() adds those inputs and is what the model and its users call.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field

from counting.checks import EXTERNAL_NAMES
from gpumodel import cluster_model
from gpumodel.resources import ctas_per_sm, overhead, registers_of
from kernels import KERNELS, teaching_model

PATHS = ("wgmma", "mma_sync", "ffma")
STRUCTURES = ("warp_specialized", "fa2", "teaching")
GRIDS = ("q_blocks", "heads", "persistent", "clusters")
CAUSAL_ORDERS = ("ascending", "heaviest_first")


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
    # fwd_wgmma_fresh_lengths/n768_12288_run4, fwd_wgmma_fresh_lengths/n640_5120 and the d = 64 causal 576-960 lengths of
    # fwd_wgmma_fresh_lengths/d64_causal_n576_960), as a kernel that masks every key block would; this repo's kernels
    # time in proportion to the work there. ncu (results/ncu_fwd_wgmma_vs_cudnn/masked_n1000) has
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
    return tuple(dict.fromkeys(tuple(n for n, s in KERNELS.items() if not s.decode) + MODELLED)) + EXTERNAL_NAMES



def build_data(name: str, d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096,
               n_k: int | None = None, **options) -> dict:
    """A build's descriptor data (KernelDescriptor's fields) as its own describe() states it, priced with what is
    measured of it (_priced); gpumodel/descriptors.py describe() adds the model's measured per-build inputs."""
    n_k = n_q if n_k is None else n_k
    if name in EXTERNAL:
        data = EXTERNAL[name](d, dtype, causal, **options)
    elif name in MODELLED:
        data = cluster_model.describe(d, dtype, causal, n_q=n_q, n_k=n_k, **options)
    else:
        if name not in KERNELS:
            raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(kernel_names())}")
        if name in TEACHING:
            data = teaching_model.describe(name, d, dtype, causal, n_q=n_q, n_k=n_k, **options)
        else:
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
