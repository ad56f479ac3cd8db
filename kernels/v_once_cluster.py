""""Multiply V once" with the whole f row on chip across a thread-block cluster (issue 18; Hopper, sm_90a).

    o, lse = forward(q, k, v, causal=False, scale=None, placement="auto")

kernels/cuda/v_once_cluster.cu: one Q block of Br = 64 rows per cluster of CS CTAs; each CTA builds its slice
of the f row (Br x its keys, 16-bit) in its own shared memory, the row maxima and sums are reduced across the
cluster through distributed shared memory, every f block is scaled once by the final max as it becomes the A
operand of the one P V product (the reference's rescale="lazy"), and the partial O's are summed across the
cluster. wgmma + TMA, as kernels.fa2_wgmma. CS is the smallest cluster whose CTAs hold the row:
counting.cluster.plan() (cluster_plan() here, at this kernel's tiles).

Inputs as kernels.fa2_wgmma (TMA tensor maps): q (B, H, Nq, d), k and v (B, H_kv, Nk, d) views with any strides
and a unit last one, H_kv dividing H; fp16/bf16; d = 64 or 128; bottom-right causal; Nq != Nk. o (B, H, Nq, d)
contiguous, lse (B, H, Nq) float32 (natural log, scaled: lse = M·scale + ln ℓ; rows that see no key: o = 0,
lse = -inf).

placement: "cluster" runs the cluster kernel or raises ValueError naming the largest Nk the biggest cluster
holds; "auto" (the default) runs it where a cluster holds the row and otherwise falls back to the spilled
kernel, kernels.v_once_tc with placement="hbm", rescale="lazy" (contiguous, equal-head inputs only).
last_plan() says which ran for the last call.

The K/V ring: plan() sizes the cluster at 2 slots, then the ring deepens into whatever shared memory the f slice
leaves (ring_stages(), up to 7 slots); config {"STAGES": k} fixes it at k slots (plan() at k).
config: {"NWG": 2} runs two consumer warpgroups that split each CTA's key blocks (even / odd),
{"BLOCK_N": 128} doubles Bc (less room for f: plan() accounts for it),
{"MAX_CLUSTER": 16} lets plan() pick the non-portable cluster of 16 (launched with cuLaunchKernelEx and the
function's non-portable opt-in; not yet run on a GPU), {"RUNTIME_CLUSTER": 1} sets every cluster shape at launch
(cuLaunchKernelEx) instead of compiling it in (__cluster_dims__ with a plain cuLaunchKernel, the default); the
default is CONFIG. No speed measured yet.
"""
from __future__ import annotations

import numbers
from pathlib import Path

from counting import checks
from counting import cluster as _cluster
from counting.checks import check_grid_rows
from kernels import fa2_tc, layouts, loader, v_once_tc
from kernels.launch_args import ArgPlan
from kernels.tma import tensor_map

SOURCE = Path(__file__).resolve().parent / "cuda" / "v_once_cluster.cu"
KERNEL = "v_once_cluster_fwd"
HEAD_DIMS = (64, 128)
MAX_HEAD_DIM = max(HEAD_DIMS)
ARCH = "sm_90a"
LOG2E = 1.4426950408889634
PLACEMENTS = ("auto", "cluster")
OPTIONS = {"placement": PLACEMENTS}
BENCH_OPTIONS = ({"placement": "cluster"},)  # timed as itself: the fallback is v_once_tc's own entry
# Br, Bc, K/V ring slots, consumer warpgroups (with 2 they split the CTA's key blocks, even / odd: Br stays 64,
# so the f slice and plan() do not change), the largest cluster plan() may pick: the default build. config= may
# set what TUNABLE lists (Bc and the ring enter plan()'s budget; MAX_CLUSTER only the plan; RUNTIME_CLUSTER the
# launch path).
CONFIG = dict(BLOCK_M=64, BLOCK_N=64, STAGES=2, NWG=1, MAX_CLUSTER=8)
TUNABLE = {"NWG": (1, 2), "STAGES": (2, 3, 4, 5, 6, 7), "BLOCK_N": (64, 128), "MAX_CLUSTER": (8, 16),
           "RUNTIME_CLUSTER": (0, 1), "CLUSTER": (0, 1, 2, 4, 8)}
# CLUSTER=k (checks only): split the keys over k CTAs even where fewer hold the row, so compute-sanitizer's
# racecheck, slow per shared-memory access, sees every cluster size's reductions on short rows.
MAX_STAGES = 7  # the .cu's mbarrier block (MAX_STAGES there)
# candidates the GPU check tests and times beside the default (NVRTC: no spills; NWG=2 with Bc=128 at d=128
# spills 8-20 B, so it is not one)
SWEEP = [dict(NWG=2), dict(NWG=2, STAGES=4), dict(STAGES=2), dict(BLOCK_N=128)]  # STAGES=k: a fixed k-slot ring
CLUSTER_SIZES = (1, 2, 4, 8, 16)  # 16 is non-portable: config MAX_CLUSTER=16 opts in (cuLaunchKernelEx)
PORTABLE_SIZES = (1, 2, 4, 8)
MAX_CLUSTER = CONFIG["MAX_CLUSTER"]  # the default plan's largest cluster

_LAST: dict = {}


def build_config(config: dict | None = None) -> dict:
    """CONFIG with config's NWG / STAGES; anything else is a ValueError naming what it takes (not a dict: TypeError)."""
    cfg = dict(CONFIG)
    if config is not None and not isinstance(config, dict):  # a string was an AttributeError, [] the default build
        raise TypeError(f"v_once_cluster: config must be a dict of knobs (e.g. {{'NWG': 2}}) or None, "
                        f"got {type(config).__name__}")
    for key, value in (config or {}).items():
        # integers only (never bools, as counting.checks has them): True passed as NWG=1, 64.0 as BLOCK_N=64
        if (key not in TUNABLE or isinstance(value, bool) or not isinstance(value, numbers.Integral)
                or value not in TUNABLE[key]):
            raise ValueError(f"v_once_cluster config {key}={value!r}: it takes "
                             + ", ".join(f"{k} in {v}" for k, v in TUNABLE.items()))
        cfg[key] = int(value)
    return cfg


def _cluster_launch(kernel, grid, block, args, smem: int, cluster: int) -> None:
    """A launch with the cluster shape set at launch time (cuLaunchKernelEx): the CS = 16 build, over the
    portable 8, which also needs the function's non-portable-cluster-size opt-in. Same argument packing as
    kernels.loader (one ArgPlan per argument signature), on torch's current stream."""
    import torch
    from cuda.bindings import driver

    state = _EX.get(id(kernel))
    if state is None or state[0] is not kernel:
        f = driver.CUfunction(kernel.raw.kernel.ptr)
        for attr, value in ((driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),):
            _driver_ok(driver.cuFuncSetAttribute(f, attr, value), "cuFuncSetAttribute")
        state = _EX[id(kernel)] = [kernel, f, 0, {}]
    _, f, smem_set, plans = state
    if smem > smem_set:
        _driver_ok(driver.cuFuncSetAttribute(
            f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute")
        state[2] = smem
    signature = tuple(map(type, args))
    plan = plans.get(signature)
    if plan is None:
        plan = plans[signature] = ArgPlan(args, kernel.device_index, KERNEL)
    cfg = launch_config(grid, block, smem, torch.cuda.current_stream(kernel.device_index).cuda_stream, cluster)
    _driver_ok(driver.cuLaunchKernelEx(cfg, f, plan.fill(args), 0), f"cuLaunchKernelEx (grid {grid}, cluster {cluster})")


_EX: dict = {}


def launch_config(grid, block, smem: int, stream: int, cluster: int):
    """The CUlaunchConfig of a launch with a (cluster, 1, 1) cluster shape (no GPU needed to build it)."""
    from cuda.bindings import driver

    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(x) for x in grid)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(x) for x in block)
    cfg.sharedMemBytes = int(smem)
    cfg.hStream = driver.CUstream(int(stream))
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = int(cluster), 1, 1
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return cfg


def _driver_ok(result, what: str) -> None:
    from cuda.bindings import driver

    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"v_once_cluster: {what} failed: {result[0].name}")


def threads(config: dict | None = None) -> int:
    return 128 * (build_config(config)["NWG"] + 1)  # a producer warpgroup and the consumer warpgroups


def cluster_plan(n_k: int, d: int, *, itemsize: int = 2, max_cluster: int | None = None, config: dict | None = None):
    """counting.cluster.plan() at this kernel's tiles: the smallest cluster whose CTAs hold the f row of one
    Q block over n_k keys (None: no cluster up to max_cluster, default the config's MAX_CLUSTER, does)."""
    cfg = build_config(config)
    return _cluster.plan(n_k, d, block_q=cfg["BLOCK_M"], block_k=cfg["BLOCK_N"], stages=cfg["STAGES"],
                         itemsize=itemsize, max_cluster=cfg["MAX_CLUSTER"] if max_cluster is None else max_cluster)


def max_keys(d: int, cluster_size: int | None = None, config: dict | None = None) -> int:
    """The largest Nk a cluster of `cluster_size` CTAs (default: the config's MAX_CLUSTER) holds on chip."""
    cfg = build_config(config)
    return _cluster.max_keys(d, cfg["MAX_CLUSTER"] if cluster_size is None else cluster_size, block_q=cfg["BLOCK_M"],
                             block_k=cfg["BLOCK_N"], stages=cfg["STAGES"])


def smem_bytes(d: int, tc_alloc: int, config: dict | None = None, stages: int | None = None) -> int:
    """The .cu's layout: 1 KB alignment slack, Q, the ring (stages slots; default the config's STAGES), 128 B of
    mbarriers, the 6 x 64 float32 reduction arrays, tc_alloc block maxima (64 float32 each) and tc_alloc f
    blocks (64 x Bc, 16-bit). At the config's STAGES, counting.cluster.smem_bytes (tests check it)."""
    cfg = build_config(config)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    st = cfg["STAGES"] if stages is None else stages
    return 1024 + bm * d * 2 + st * bn * d * 2 + 128 + 6 * bm * 4 + tc_alloc * (bm * 4 + bm * bn * 2)


def ring_stages(d: int, tc_alloc: int, config: dict | None = None, capacity: int = _cluster.SMEM_PER_CTA) -> int:
    """The ring depth a launch gets: config STAGES fixes it; by default (no STAGES in config) plan()'s 2 slots
    deepen into the shared memory the f slice leaves, up to MAX_STAGES (more K/V tiles in flight: the TMA round
    trip is the CTA's main exposed latency)."""
    if config and "STAGES" in config:
        return build_config(config)["STAGES"]
    st = build_config(config)["STAGES"]
    while st < MAX_STAGES and smem_bytes(d, tc_alloc, config, st + 1) <= capacity:
        st += 1
    return st


def defines_for(d: int, is_bf16: bool, cluster_size: int, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"v_once_cluster supports head dims {HEAD_DIMS}, got d={d}")
    if cluster_size not in CLUSTER_SIZES:
        raise ValueError(f"v_once_cluster: cluster size {cluster_size} not built; sizes {CLUSTER_SIZES}")
    cfg = build_config(config)
    if cluster_size > cfg["MAX_CLUSTER"]:
        raise ValueError(f"v_once_cluster: cluster size {cluster_size} needs config MAX_CLUSTER=16 (non-portable)")
    defs = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), CS=int(cluster_size), BLOCK_N=cfg["BLOCK_N"],
                NWG=cfg["NWG"])  # the ring depth is an argument (ring_stages), not a build
    if cfg.get("RUNTIME_CLUSTER"):  # the cluster shape set at launch (cuLaunchKernelEx), not compiled in
        defs["RUNTIME_CLUSTER"] = 1
    return defs


def compile_configs() -> list[tuple[str, str, dict]]:
    """The default build at every portable cluster size, head dim and dtype: 16 builds (CI compiles each; the
    candidates' builds are sweep_configs(), a few checked in tests/test_kernels_cluster.py)."""
    return [(str(SOURCE), KERNEL, defines_for(d, bf16, cs)) for cs in PORTABLE_SIZES for d in HEAD_DIMS
            for bf16 in (0, 1)]


def sweep_configs() -> list[tuple[str, str, dict]]:
    """Every SWEEP candidate at every cluster size, head dim and dtype (the GPU check precompiles them)."""
    out = [(str(SOURCE), KERNEL, defines_for(d, bf16, cs, cfg)) for cfg in SWEEP for cs in PORTABLE_SIZES
           for d in HEAD_DIMS for bf16 in (0, 1)]
    out += [(str(SOURCE), KERNEL, defines_for(d, bf16, 16, dict(MAX_CLUSTER=16))) for d in HEAD_DIMS
            for bf16 in (0, 1)]
    unique = {}
    for item in out:  # a ring depth is an argument, not a build: STAGES candidates share the others' builds
        unique.setdefault((item[1], tuple(sorted(item[2].items()))), item)
    return list(unique.values())


def supported(device=None) -> bool:
    """True on a compute capability 9.x GPU (wgmma, clusters, DSMEM)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] == 9


def last_plan() -> dict:
    """What the last forward() ran: placement ("cluster" or "hbm": the v_once_tc fallback), and for the
    cluster kernel its cluster size, keys and f bytes per CTA and shared memory per CTA."""
    return dict(_LAST)


def _resolve(n_k: int, d: int, placement: str, config: dict | None = None):
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    p = cluster_plan(n_k, d, config=config)
    cfg = build_config(config)
    if p is not None and cfg.get("CLUSTER", 0) > p.cluster_size:
        p = _cluster.at_size(cfg["CLUSTER"], n_k, d, block_q=cfg["BLOCK_M"], block_k=cfg["BLOCK_N"], stages=cfg["STAGES"])
    if p is None and placement == "cluster":
        raise ValueError(
            f"v_once_cluster placement='cluster': the f row of a {CONFIG['BLOCK_M']}-row Q block over Nk={n_k} keys "
            f"does not fit in the shared memory of a cluster of {build_config(config)['MAX_CLUSTER']} CTAs; the "
            f"largest Nk it holds at "
            f"d={d} is {max_keys(d, config=config)}; use placement='auto' (spills f to HBM through v_once_tc)")
    return p


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, placement: str = "auto",
            config: dict | None = None, out=None):
    """The cluster "multiply V once" forward; returns (o, lse). out=(o, lse) writes into given tensors."""
    import torch

    b, h, h_kv, n_q, n_k, d = layouts.check_strided_gqa(q, k, v, head_dims=HEAD_DIMS)
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)
    q, scale = layouts.positive_scale(q, scale)  # the kernel masks S before scaling it
    p = _resolve(n_k, d, placement, config)
    if p is None:  # auto, and no cluster holds the row: the spilled kernel
        _LAST.clear()
        _LAST.update(placement="hbm", kernel="v_once_tc", rescale="lazy",
                     reason=f"Nk={n_k} is over the {max_keys(d, config=config)} keys a cluster of "
                            f"{build_config(config)['MAX_CLUSTER']} "
                            f"holds at d={d}")
        return v_once_tc.forward(q, k, v, causal=causal, scale=scale, placement="hbm", rescale="lazy", out=out)
    check_grid_rows("v_once_cluster", b, h)
    dev = q.device.index
    loader.require_hopper(q.device, "v_once_cluster needs a compute capability 9.x GPU (wgmma, clusters)", "v_once_tc")
    tc_alloc = p.key_blocks_per_cta
    stages = ring_stages(d, tc_alloc, config)
    smem = smem_bytes(d, tc_alloc, config, stages)
    defs = defines_for(d, q.dtype == torch.bfloat16, p.cluster_size, config)
    if out is None:
        o = torch.empty((b, h, n_q, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    else:
        o, lse = fa2_tc._outputs(q, out)
    cfg = build_config(config)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]  # the TMA boxes: Q_i and K_j / V_j tiles of this build
    args = (tensor_map(q, bm, name="q"), tensor_map(k, bn, name="k"), tensor_map(v, bn, name="v"), o, lse,
            int(n_q), int(n_k), float(scale * LOG2E), float(scale), int(bool(causal)), int(h), int(h // h_kv),
            int(tc_alloc), int(stages))
    t_r = -(-n_q // bm)
    _LAST.clear()
    _LAST.update(placement="cluster", kernel="v_once_cluster", cluster_size=p.cluster_size,
                 keys_per_cta=p.keys_per_cta, f_bytes_per_cta=p.f_bytes, smem_bytes=smem,
                 grid=(t_r * p.cluster_size, b * h), nwg=defs["NWG"], stages=stages)
    kernel = loader.get_function(SOURCE, KERNEL, defines=defs, arch=ARCH, device=dev)
    grid, block = (t_r * p.cluster_size, b * h, 1), (128 * (defs["NWG"] + 1), 1, 1)
    if p.cluster_size in PORTABLE_SIZES and not defs.get("RUNTIME_CLUSTER"):  # __cluster_dims__: a plain launch
        kernel.launch(grid, block, args, shared_mem=smem)
    else:
        _cluster_launch(kernel, grid, block, args, smem, p.cluster_size)
    return o, lse


# What the GPU model needs (tiles, cluster size, shared memory, terms) is gpumodel/cluster_model.py's
# descriptor, built from the same counting.cluster.plan as cluster_plan() here.
