"""The backward pass in the GPU model (issue 43): FA2 Algorithm 2 on four kernels, priced per (Q block, K/V block)
tile, scheduled over the SMs, fitted on a declared training split of results/bwd_kernels_vs_sdpa_grid (H200) and, for
the warp-specialised fa2_wgmma (v4, issue 42), of results/bwd_ws_v4 (H100).

    kernel        Br x Bc (d=64 / d=128)  CTAs/SM  products on   dQ accumulation                     source
    fa2_wgmma     128x128 / 64x128        1        wgmma         TMA bulk reduce-add, fp32 Br x d /   kernels/fa2_wgmma_bwd_ws.py
                                                                  tile, issued by the producer warp   CONFIGS (v4: two MMA warp-
                                                                  into an L2-resident accumulator     groups + a producer; the
                                                                                                      default at d = 64, 128)
    fa2_wgmma_v3  128x128 / 64x128        1        wgmma         TMA bulk reduce-add, fp32 Br x d /   kernels/fa2_wgmma_bwd.py
                                                                  tile (DQ_BULK=1), by the MMA        CONFIGS (NWG=2: Bc = 128;
                                                                  warpgroups themselves               impl="v3", deterministic)
    fa2         64x64 / 64x64           2 / 1    FP32 FFMA     float32 atomics, Br x d / tile         kernels/cuda/fa2_bwd.cu v1
                                                                                                       (the build the grid timed)
    sdpa_flash  128x128 / 64x128        1        mma.sync      float32 atomicAdd, Br x d / tile       FA2's Flash_bwd_kernel_traits
                                                                                                       in torch (sm80 path, 8 warps)
    sdpa_cudnn  128x128 / 128x128       1        wgmma         float32 reduce into an accumulator     ASSUMED (cuDNN is closed):
                                                                                                       FA3-like tiles, 1 CTA/SM

Every kernel has one CTA per (K/V block j, batch·head), K_j, V_j on chip, dK_j, dV_j accumulated in registers, and
walks the Q blocks i that see any of K_j (causal: bottom-right mask, i from the diagonal). Per visited tile:

    cycles = a · 10·Br·Bc·d / R      the five products (S again, dP, dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K), 2·Br·Bc·d
                                      each, at the path's peak R FLOP/clk/SM (wgmma / mma.sync 4096, FFMA 256)
           + b · Br·Bc / 16          the recomputed exponentials P = exp(S - L) at the MUFU rate (16/clk/SM)
           + Br·d·4 / (L2 B/clk/SM)  dQ's float32 accumulation traffic through the L2 (gpu_model.L2_BANDWIDTH
                                      shared by 132 SMs), unfitted
    a CTA adds L cycles (loading K_j, V_j, writing dK_j, dV_j, the pipeline's fill); the CTAs run in launch order on
    SMs·(CTAs/SM) slots (a slot's CTA at 1/(CTAs/SM) of the SM), the makespan is the kernel's time; plus the
    preprocess (D = rowsum(dO∘O)) and dQ's conversion (fp32 acc read, dQ written) at the measured HBM rate, plus t0.

a, b, L, t0 are fitted per kernel (FIT_FILE) on TRAIN (N ≤ 4k, every d, dtype, mask), held out: N ≥ 8k; the teaching fa2,
timed to 4k only, trains on fp16 and holds out bf16, and has a1, its product factor at one CTA per SM (d = 128).
Each kernel's constants are fitted on one GPU's runs (FIT_GPU; the H200 but for v4, fitted on the H100 A/B of issue 42,
N = 2k, 4k trains and 16k is held out) and carried over to the other covered GPU unrefitted (footing()): v4 on the H200
is carried over with no H200 timing of it to check it against (unvalidated). The committed grid and the H100 held-out
runs timed v3 under the name "fa2_wgmma" (they preceded issue 42's promotion): BUILD_OF reads those rows as fa2_wgmma_v3.
t0 is a fixed cost per token·hidden (B·H·N·d; the grid keeps it constant, so it cannot tell a launch constant from it). The bound printed
is the largest of the per-tile terms (tensor / exp / dQ L2) or "latency" when the per-CTA L dominates.
Torch-free: the report imports it.
"""
from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from counting.gpus import get_gpu
from gpumodel import coverage
from gpumodel.gpu_model import L2_BANDWIDTH  # the measured lower bound of the L2's rate, one figure for both passes
from gpumodel.gpu_model import _schedule

ROOT = Path(__file__).resolve().parent.parent
GRID_FILE = ROOT / "results" / "bwd_kernels_vs_sdpa_grid" / "bwd_bench.json"
FIT_FILE = ROOT / "results" / "gpu_model_bwd_fit.json"
COVERED_GPUS = coverage.COVERED_GPUS  # the H200 (fitted) and the H100 (its constants carried over)
TRAIN_MAX_N = 4096  # the declared training split: N <= 4k; N >= 8k held out
BAND = {"fa2_wgmma": 0.15, "fa2_wgmma_v3": 0.15, "sdpa_flash": 0.15, "sdpa_cudnn": 0.15, "fa2": 0.25, "fa2_v1": 0.25}
# the teaching backward v5 against v1 on the H200 (lab/teach_bwd_ab.py; fp16, N = 2k-8k, d = 64 and 128, causal and
# not): v5's constants are fitted on its N <= 4k rows, N = 8k held out (fit_teaching below)
TEACHING_AB_FILE = ROOT / "results" / "bwd_teaching_ab" / "v5" / "teach_bwd_ab.json"
# v4 (the warp-specialised fa2_wgmma, issue 42) against v3, cuDNN and SDPA flash on the H100 (lab/bwd_ws_ab.py, two runs
# of one grid: fp16/bf16, d = 64/128, N = 2k/4k/16k, causal and not, B·N = 16k, H·d = 2048): its contender "v4" is the
# default build; N <= 4k trains v4's constants, N = 16k is held out
V4_AB_FILES = tuple(ROOT / "results" / "bwd_ws_v4" / run / "bwd_ws_ab.json" for run in ("first", "alternatives"))
# which KERNELS entry a file's row label timed (keyed by the path under results/; a label not listed is its own name
# in bench_bwd.py files, not read in the v4 A/B's). The grid ran before the teaching v2, so its "fa2" is v1. The grid
# and the H100 held-out runs preceded issue 42's promotion, so their "fa2_wgmma" is fa2_wgmma_v3: the H100 run timed v3
# itself, the grid (2026-12-03) v2, v3's tiles and dQ path before v3 added GQA, strides and the deterministic mode
# (v3 is 3.5-11% slower on the H100: docs/hopper-fa2-history.md). The v4 A/B names v4 "v4" (its "shipped", v3, is not
# read: v3's H100 check is results/gpu_model_h100_heldout.json).
BUILD_OF = {"bwd_kernels_vs_sdpa_grid/bwd_bench.json": {"fa2": "fa2_v1", "fa2_wgmma": "fa2_wgmma_v3"},
            "bwd_teaching_ab/v5/teach_bwd_ab.json": {"fa2": "fa2", "fa2_v1": "fa2_v1"},
            "h100_heldout/bwd_bench.json": {"fa2_wgmma": "fa2_wgmma_v3"},
            **{f"bwd_ws_v4/{run}/bwd_ws_ab.json": {"v4": "fa2_wgmma"} for run in ("first", "alternatives")}}
# the GPU whose runs fitted each kernel's constants (coverage.FIT_GPU, the H200, unless named here)
FIT_GPU = {"fa2_wgmma": "h100"}
# later bench/bench_bwd.py runs (paths under results/, any covered GPU) whose cells are all held out, never fitted:
# e.g. v4 at N = 1k and 8k on the H100, or v4's first H200 timings (the check its carried-over constants lack)
HELDOUT_RUNS: tuple[str, ...] = ()
MIN_N = 2048  # the targets' range (issue 43): N >= 2k
TOKENS_HIDDEN = 16384 * 2048  # t0 is the fixed cost at the grid's B·N = 16k tokens, H·d = 2048 (scaled by B·H·N·d)

PEAK = {"wgmma": 4096.0, "mma_sync": 4096.0, "ffma": 256.0}  # FLOP/clk/SM: 989.4e12 / (132 x 1.83e9); 128 FFMA lanes
MUFU_PER_CLK = 16.0


@dataclass(frozen=True)
class BwdKernel:
    name: str
    path: str
    br: dict
    bc: dict
    ctas_per_sm: dict
    dq: str
    source: str
    assumed: bool = False


KERNELS = {
    # v4, what kernels.fa2_wgmma_bwd.backward runs by default at d = 64, 128 (issue 42): v3's tiles and accumulator
    # layout (its pre and dq_bulk kernels are v3's), the loads and dQ's reduce-adds issued by a producer warpgroup
    "fa2_wgmma": BwdKernel("fa2_wgmma", "wgmma", {64: 128, 128: 64}, {64: 128, 128: 128}, {64: 1, 128: 1},
                           "TMA bulk reduce-add of an fp32 Br×d tile per step, issued by the producer warp",
                           "kernels/fa2_wgmma_bwd_ws.py CONFIGS (v4): d=64 BR=128 MERGED=1, d=128 BR=64 DQ_BUFS=2; "
                           "two MMA warpgroups (Bc = 128) + a producer warpgroup, 1 CTA/SM"),
    # v3, the main kernel before the promotion (impl="v3"; d = 96, 256 and deterministic=True still run it): the
    # build results/bwd_kernels_vs_sdpa_grid and results/h100_heldout timed as "fa2_wgmma"
    "fa2_wgmma_v3": BwdKernel("fa2_wgmma_v3", "wgmma", {64: 128, 128: 64}, {64: 128, 128: 128}, {64: 1, 128: 1},
                              "TMA bulk reduce-add of an fp32 Br×d tile per step (DQ_BULK=1)",
                              "kernels/fa2_wgmma_bwd.py CONFIGS (v3): d=64 NWG=2 BR=128, d=128 NWG=2 BR=64 STAGES=3"),
    "fa2": BwdKernel("fa2", "ffma", {64: 64, 128: 64}, {64: 64, 128: 64}, {64: 2, 128: 1},
                     "float32 atomicAdd into an HBM accumulator",
                     "kernels/cuda/fa2_bwd.cu v5 (the build kernels.fa2.backward runs): 64×64, 105 KB (2/SM) at d<=64; "
                     "at d=128 170 KB + Q_{i+1}, dO_{i+1} staged by cp.async (FA2_PREFETCH, 199 KB, 1/SM)"),
    # the build results/bwd_kernels_vs_sdpa_grid timed (its run preceded v2-v5): the same tiling, slower per tile
    "fa2_v1": BwdKernel("fa2_v1", "ffma", {64: 64, 128: 64}, {64: 64, 128: 64}, {64: 2, 128: 1},
                        "float32 atomicAdd into an HBM accumulator",
                        "lab/cuda/fa2_bwd_v1.cu (frozen; the build the grid timed): 64×64, 105 KB (2/SM) at d<=64, "
                        "170 KB (1/SM) at 128, synchronous loads"),
    "sdpa_flash": BwdKernel("sdpa_flash", "mma_sync", {64: 128, 128: 64}, {64: 128, 128: 128}, {64: 1, 128: 1},
                            "float32 atomicAdd into dq_accum, then a conversion kernel",
                            "torch flash_bwd_launch_template.h, sm80 traits: d=64 <64,128,128,8>, d=128 <128,64,128,8>"),
    "sdpa_cudnn": BwdKernel("sdpa_cudnn", "wgmma", {64: 128, 128: 128}, {64: 128, 128: 128}, {64: 1, 128: 1},
                            "float32 reduction into an accumulator (assumed)",
                            "cuDNN is closed: 128×128 tiles, wgmma, one CTA per SM ASSUMED", assumed=True),
}
PARAM_NAMES = ("a", "b", "L", "t0", "a1")
DEFAULT = {"a": 1.5, "b": 2.0, "L": 5000.0, "t0": 20e-6}


@dataclass
class BwdPrediction:
    kernel: str
    time_s: float
    tflops: float
    bound: str
    terms: dict = field(default_factory=dict)
    levels: dict = field(default_factory=dict)
    tiles: int = 0
    ctas: int = 0
    br: int = 0
    bc: int = 0


def load_params(path: Path = FIT_FILE) -> dict:
    try:
        return json.loads(path.read_text())["params"]
    except (OSError, KeyError, ValueError):
        return {k: dict(DEFAULT) for k in KERNELS}


def _visits(n_q: int, n_k: int, br: int, bc: int, causal: bool) -> list[int]:
    """Q blocks each K/V block j visits (bottom-right causal: query r sees keys c <= r + n_k - n_q)."""
    tr, tc = -(-n_q // br), -(-n_k // bc)
    if not causal:
        return [tr] * tc
    off = n_k - n_q
    if max(n_q, n_k, tc * bc) + abs(off) < 1 << 62:  # int64 holds every step: arrays, the loop's integers
        first_row = np.maximum(0, np.arange(tc, dtype=np.int64) * bc - off)  # the first query row that sees key j·Bc
        return np.where(first_row < n_q, np.maximum(0, tr - first_row // br), 0).tolist()
    out = []
    for j in range(tc):
        first_row = max(0, j * bc - off)
        out.append(max(0, tr - first_row // br) if first_row < n_q else 0)
    return out


def bwd_flops(batch, heads, n_q, n_k, d, causal) -> float:
    """The five products' FLOPs over visible pairs (10·d per pair): the TFLOP/s the report prints."""
    from counting.headline import visible_pairs

    return 10.0 * d * batch * heads * visible_pairs(n_q, n_k, causal)


def paper_bwd_flops(batch, heads, n_q, n_k, d, causal) -> float:
    """The grid's convention: 2.5 × the forward's 4·d per visible pair (= 10·d: the same number)."""
    return bwd_flops(batch, heads, n_q, n_k, d, causal)


def tile_terms(k: BwdKernel, d: int, p: dict, gpu) -> dict:
    br, bc = k.br[d], k.bc[d]
    clock = gpu.clock_hz.value
    l2_per_clk = L2_BANDWIDTH / (gpu.sms.value * clock)
    a = p.get("a1", p["a"]) if k.ctas_per_sm[d] == 1 and k.path == "ffma" else p["a"]  # teaching: one CTA/SM
    return {"tensor": a * 10.0 * br * bc * d / PEAK[k.path],
            "exp": p["b"] * br * bc / MUFU_PER_CLK,
            "dq_l2": 4.0 * br * d / l2_per_clk}


def _makespan_loop(durations: list[float], slots: int) -> float:
    """The list schedule of CTAs of these durations in launch order onto `slots`, one heap operation per CTA: the
    definition _makespan computes (tests/test_gpu_model_fast.py holds the two equal to float rounding)."""
    if len(durations) <= slots:
        return max(durations, default=0.0)
    heap = [0.0] * slots
    for t in durations:
        heapq.heapreplace(heap, heap[0] + t)
    return max(heap)


def _makespan(per_head: list[float], heads: int, slots: int) -> float:
    """_makespan_loop(per_head * heads, slots) through the forward's batched list schedule (gpu_model._schedule: the
    pattern of one head's CTAs repeated B·H times, its repeats closed past gpu_model.EXACT_CTAS): a heap operation per
    CTA took seconds and gigabytes at B·H = 65,535 (issue 46 item 5)."""
    if not per_head or not heads:
        return 0.0
    zeros = [0] * len(per_head)
    return _schedule(per_head, zeros, heads, slots, lambda nm: nm[0])[0]


def predict(kernel: str, batch: int, heads: int, n_q: int, n_k: int | None, d: int, dtype: str = "fp16",
            causal: bool = False, gpu: str = "h200", params: dict | None = None) -> BwdPrediction:
    n_k = n_q if n_k is None else n_k
    if gpu not in COVERED_GPUS:
        raise ValueError(f"the backward model covers the {coverage.names()} only, not {gpu!r}")
    k = KERNELS.get(kernel)
    if k is None:
        raise ValueError(f"no backward model of {kernel!r}: one of {', '.join(KERNELS)}")
    if d not in k.br:
        raise ValueError(f"{kernel}'s backward is modelled at d = 64 and 128 (the grid's), not {d}")
    if dtype not in ("fp16", "bf16"):
        raise ValueError(f"{kernel}'s backward takes fp16/bf16, not {dtype}")
    g = get_gpu(gpu)
    p = (params or load_params())[kernel]
    terms = tile_terms(k, d, p, g)
    tile = sum(terms.values())
    per_sm = k.ctas_per_sm[d]
    visits = _visits(n_q, n_k, k.br[d], k.bc[d], causal)
    per_head = [v * tile * per_sm + p["L"] * per_sm for v in visits if v]
    slots = int(g.sms.value) * per_sm
    cycles = _makespan(per_head, batch * heads, slots)
    item = 2
    aux_bytes = batch * heads * (n_q * d * (2 * item + 4 + item) + n_k * d * 0)
    hbm = coverage.hbm_rate(g)  # the H200's measured 4.3 TB/s; the H100's datasheet figure at that share
    t_aux = aux_bytes / hbm
    # DRAM: the pass's compulsory bytes (Q, K, V, O, dO, lse read, dQ, dK, dV written once) + dQ's fp32 accumulator
    # written back and read by the conversion; the accumulator of the heads in flight stays in the L2 meanwhile.
    # Not fitted: on the grid it is a few % of the time (DRAM nowhere near its limit), it bounds only if it outlasts
    # the SMs' time.
    from counting.backward_forms import min_backward_hbm_bytes

    dram_bytes = (min_backward_hbm_bytes(batch, heads, n_q, n_k, d, item, causal)
                  + 2 * 4 * batch * heads * n_q * d)
    t_dram = dram_bytes / hbm
    t_main = max(cycles / g.clock_hz.value, t_dram)
    t_fixed = p["t0"] * batch * heads * n_q * d / TOKENS_HIDDEN  # per token·hidden (the grid's B·N·H·d is constant)
    time_s = t_main + t_aux + t_fixed
    tiles = sum(visits) * batch * heads
    per_term = {name: v * tiles / slots * per_sm / g.clock_hz.value for name, v in terms.items()}
    per_term["latency"] = p["L"] * len(per_head) * batch * heads / slots * per_sm / g.clock_hz.value
    per_term["dram"] = t_dram
    bound = max(per_term, key=per_term.get)
    br, bc = k.br[d], k.bc[d]
    levels = {"dq_accum_bytes": 4.0 * br * d * tiles,  # what dQ's accumulation sends to the L2
              "kv_bytes": 2.0 * item * batch * heads * n_k * d,  # K, V read once, dK, dV written once
              "q_do_bytes": 2.0 * item * br * d * tiles,  # Q_i, dO_i loaded per visited tile (L2 requests)
              "aux_bytes": float(aux_bytes), "dram_bytes": float(dram_bytes)}
    flops = bwd_flops(batch, heads, n_q, n_k, d, causal)
    return BwdPrediction(kernel, time_s, flops / time_s / 1e12, bound, per_term | {"aux": t_aux, "fixed": t_fixed},
                         levels, tiles, len(per_head) * batch * heads, br, bc)


def predict_train(kernel: str, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, gpu="h200") -> dict:
    """Forward (gpu_model, fa2_wgmma's forward for fa2_wgmma; sdpa's for SDPA's) + backward (this model)."""
    from gpumodel import gpu_model as gm

    b = predict(kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu)
    # the teaching backward after the teaching forward; either Hopper backward after fa2_wgmma's forward
    fwd_kernel = {"fa2_v1": "fa2", "fa2_wgmma_v3": "fa2_wgmma"}.get(kernel, kernel)
    f = gm.as_benchmarked(gm.predict(fwd_kernel, batch, heads, n_q, n_k, d, dtype, causal, gpu=gpu))
    t = b.time_s + f["time_s"]
    flops = bwd_flops(batch, heads, n_q, n_k or n_q, d, causal) * 1.4  # + the forward's two products (4·d)
    return {"time_s": t, "tflops": flops / t / 1e12, "forward_s": f["time_s"], "backward_s": b.time_s,
            "bound": b.bound if b.time_s >= f["time_s"] else f["bound"]}


# -- the committed grid, the split, the fit, the track record --------------------------------------------------

DTYPE = {"float16": "fp16", "bfloat16": "bf16"}


def results_key(path: Path) -> str:
    """A runs file's key in BUILD_OF and its cells' source: its path under results/ (a file elsewhere: its name)."""
    path = Path(path).resolve()
    try:
        return path.relative_to(ROOT / "results").as_posix()
    except ValueError:
        return path.name


GRID_SOURCE = results_key(GRID_FILE)


def fit_gpu(kernel: str) -> str:
    """The GPU whose runs fitted this kernel's constants."""
    return FIT_GPU.get(kernel, coverage.FIT_GPU)


def footing(kernel: str, gpu) -> str:
    """coverage.FITTED where `kernel`'s constants were fitted on `gpu`'s runs, else coverage.CARRIED (the physics of
    `gpu`, the constants of fit_gpu(kernel)'s fit)."""
    return coverage.FITTED if coverage._key(gpu) == fit_gpu(kernel) else coverage.CARRIED


def _gpu_of(device: str, path: Path) -> str:
    """The covered GPU a runs file's device string names ("NVIDIA H100 80GB HBM3" -> "h100")."""
    for key in COVERED_GPUS:
        if key.upper() in str(device).upper():
            return key
    raise ValueError(f"{path} was run on {device!r}, not a GPU the backward model covers ({coverage.names()})")


def kernel_of(label: str, path: Path, meta: dict | None = None, d: int | None = None) -> str | None:
    """The KERNELS entry a bench/bench_bwd.py row labelled `label` timed (None: not one the model prices). BUILD_OF
    names the builds of the files it lists; a run that records which main kernel its fa2_wgmma ran (bench_bwd.py's
    meta fa2_wgmma_bwd_ws_head_dims, since issue 42: v4 at those d, v3 elsewhere) says it itself; a fa2_wgmma row of
    a run that does neither is refused (ValueError: it may have timed v3 or v4); other labels are what the package
    runs under that name now."""
    key = results_key(path)
    if key in BUILD_OF:
        return BUILD_OF[key].get(label, label)
    ws = (meta or {}).get("fa2_wgmma_bwd_ws_head_dims")
    if label == "fa2_wgmma" and ws is None:
        raise ValueError(f"{path}: its fa2_wgmma rows do not say which main kernel they timed (no meta "
                         "fa2_wgmma_bwd_ws_head_dims, as bench/bench_bwd.py records since issue 42): name its build in "
                         "gpumodel.backward_model.BUILD_OF (fa2_wgmma_v3 for a run before issue 42's promotion)")
    if label == "fa2_wgmma" and d not in ws:
        return "fa2_wgmma_v3"
    return label


def is_train(kernel: str, n: int, dtype: str, source: str = GRID_SOURCE) -> bool:
    """The declared split: N <= 4k trains, N >= 8k is held out; the teaching v1 on the grid (timed to 4k only): fp16
    trains, bf16 is held out, and its A/B rows (results/bwd_teaching_ab/v5) are all held out; v5 (its A/B, fp16 to 8k):
    N <= 4k trains."""
    if kernel == "fa2_v1":
        return dtype == "fp16" and source == GRID_SOURCE
    return n <= TRAIN_MAX_N


def grid_cells(path: Path = GRID_FILE) -> list[dict]:
    """The cells of a bench/bench_bwd.py file (or the teaching A/B, same rows), as BUILD_OF names their builds."""
    data = json.loads(Path(path).read_text())
    key = results_key(path)
    meta = data.get("meta", {})
    gpu = _gpu_of(meta.get("device"), path)
    out = []
    for r in data["rows"]:
        kernel = kernel_of(r["kernel"], path, meta, r["d"])
        if kernel not in KERNELS or not r.get("ok") or not r.get("bwd_ms") or r["dtype"] not in DTYPE:
            continue
        out.append(dict(kernel=kernel, batch=r["b"], heads=r["h"], n=r["n"], d=r["d"], causal=r["causal"],
                        dtype=DTYPE[r["dtype"]], time_s=r["bwd_ms"] * 1e-3, fwdbwd_s=(r.get("fwdbwd_ms") or 0) * 1e-3,
                        source=key, gpu=gpu, train=is_train(kernel, r["n"], DTYPE[r["dtype"]], key)))
    return out


def ab_cells(path: Path) -> list[dict]:
    """The cells of a lab/bwd_ws_ab.py file: its contenders BUILD_OF names (v4 -> fa2_wgmma), timed and checked."""
    data = json.loads(Path(path).read_text())
    key = results_key(path)
    builds = BUILD_OF.get(key, {})
    gpu = _gpu_of(data.get("device"), path)
    out = []
    for r in data["rows"]:
        kernel = builds.get(r["contender"])
        if kernel not in KERNELS or not r.get("ok") or not r.get("median_ms") or r["dtype"] not in DTYPE.values():
            continue
        out.append(dict(kernel=kernel, batch=r["batch"], heads=r["heads"], n=r["n"], d=r["d"], causal=r["causal"],
                        dtype=r["dtype"], time_s=r["median_ms"] * 1e-3, fwdbwd_s=0.0, source=key, gpu=gpu,
                        train=is_train(kernel, r["n"], r["dtype"], key)))
    return out


def all_cells(heldout_runs: tuple = HELDOUT_RUNS) -> list[dict]:
    """Every committed backward timing the model prices, each with the GPU it ran on: the grid and the teaching
    backward's v5 A/B (H200), v4's A/B (H100), and the held-out-only runs (HELDOUT_RUNS)."""
    later = [dict(c, train=False) for key in heldout_runs for c in grid_cells(ROOT / "results" / key)]
    return (grid_cells() + (grid_cells(TEACHING_AB_FILE) if TEACHING_AB_FILE.exists() else [])
            + [c for f in V4_AB_FILES if f.exists() for c in ab_cells(f)] + later)


def rows(params: dict | None = None, cells: list[dict] | None = None) -> list[dict]:
    """Each cell (all_cells() by default) priced on the GPU it ran on: the model's time and its error."""
    params = params or load_params()
    out = []
    for c in all_cells() if cells is None else cells:
        p = predict(c["kernel"], c["batch"], c["heads"], c["n"], c["n"], c["d"], c["dtype"], c["causal"],
                    gpu=c["gpu"], params=params)
        out.append(c | {"model_s": p.time_s, "err": p.time_s / c["time_s"] - 1, "bound": p.bound,
                        "band": BAND[c["kernel"]]})
    return out


def fit(cells: list[dict] | None = None, only: tuple | None = None) -> dict:
    """Every kernel's constants fitted on its training cells (each priced on the GPU it ran on, which must be
    fit_gpu(kernel)); with `only`, those kernels refitted and the others' constants kept as FIT_FILE has them."""
    import numpy as np

    try:  # the refit only (predict reads FIT_FILE): scipy is not a dependency of the package
        from scipy.optimize import least_squares
    except ImportError:
        raise SystemExit("python -m gpumodel.backward_model --fit needs scipy (pip install scipy)") from None

    unknown = set(only or ()) - set(KERNELS)
    if unknown:
        raise ValueError(f"no backward model of {', '.join(sorted(unknown))}: one of {', '.join(KERNELS)}")
    cells = [c for c in (cells or all_cells()) if c["train"]]
    out = dict(load_params()) if only else {}
    for name in (k for k in KERNELS if not only or k in only):
        if name == "fa2":  # after fa2_v1: v5 keeps its b, L, t0 (fit_teaching)
            continue
        cs = [c for c in cells if c["kernel"] == name]
        if {c["gpu"] for c in cs} != {fit_gpu(name)}:
            raise ValueError(f"{name}'s training cells ran on {sorted({c['gpu'] for c in cs})}, its fit is the "
                             f"{fit_gpu(name).upper()}'s (FIT_GPU)")

        def resid(x, cs=cs, name=name):
            p = {name: dict(zip(PARAM_NAMES, (x[0], x[1], x[2] * 1e3, x[3] * 1e-6, x[4])))}
            return [math.log(predict(name, c["batch"], c["heads"], c["n"], c["n"], c["d"], c["dtype"], c["causal"],
                                     gpu=c["gpu"], params=p).time_s / c["time_s"]) for c in cs]

        x0 = np.array([DEFAULT["a"], DEFAULT["b"], DEFAULT["L"] / 1e3, DEFAULT["t0"] * 1e6, DEFAULT["a"]])
        r = least_squares(resid, x0, bounds=([0.5, 0.0, 0.0, 0.0, 0.5], [200.0, 50.0, 1e4, 1e4, 200.0]),
                          diff_step=1e-3)
        x = [float(v) for v in r.x]
        out[name] = dict(zip(PARAM_NAMES, (x[0], x[1], x[2] * 1e3, x[3] * 1e-6)))
        if KERNELS[name].path == "ffma":  # a1: the one-CTA-per-SM teaching build's product rate (d = 128)
            out[name]["a1"] = x[4]
    if not only or "fa2" in only:
        out["fa2"] = fit_teaching(out["fa2_v1"], [c for c in cells if c["kernel"] == "fa2"])
    return {k: out[k] for k in KERNELS}


def fit_teaching(v1: dict, cells: list[dict]) -> dict:
    """v5's constants: v1's exponential, latency and fixed costs (b, L, t0: v2-v5 changed the loads and the blocks'
    staging, not the softmax or the launch), its product factors a (two CTAs per SM, d = 64) and a1 (one, d = 128)
    refitted on v5's training rows (8 cells, two unknowns)."""
    from scipy.optimize import least_squares

    def resid(x):
        p = {"fa2": dict(v1, a=x[0], a1=x[1])}
        return [math.log(predict("fa2", c["batch"], c["heads"], c["n"], c["n"], c["d"], c["dtype"], c["causal"],
                                 gpu=c["gpu"], params=p).time_s / c["time_s"]) for c in cells]

    r = least_squares(resid, [v1["a"], v1.get("a1", v1["a"])], bounds=([0.5, 0.5], [200.0, 200.0]), diff_step=1e-3)
    return dict(v1, a=float(r.x[0]), a1=float(r.x[1]))


def track_record(rs: list[dict]) -> list[dict]:
    """One line per kernel, split and GPU the cells ran on: the files, cells, within the band, median and worst
    |error| (N >= MIN_N)."""
    out = []
    for name in KERNELS:
        for split in ("train", "held-out"):
            for gpu in COVERED_GPUS:
                sel = [r for r in rs if r["kernel"] == name and r["train"] == (split == "train") and r["gpu"] == gpu
                       and r["n"] >= MIN_N]
                if not sel:
                    continue
                errs = sorted(abs(r["err"]) for r in sel)
                out.append(dict(kernel=name, split=split, gpu=gpu, source=", ".join(sorted({r["source"] for r in sel})),
                                cells=len(sel), band=BAND[name], within=sum(e <= BAND[name] for e in errs),
                                median=errs[len(errs) // 2], worst=errs[-1]))
    return out


def held_out_line(kernel: str, gpu, rs: list[dict] | None = None) -> dict | None:
    """The track line of `kernel`'s held-out cells on `gpu` (None: no committed timing of it there, the model's
    constants for it unchecked on that GPU, unless its held-out record, gpumodel/heldout.py, has it)."""
    key = coverage._key(gpu)
    return next((t for t in track_record(rows() if rs is None else rs)
                 if (t["kernel"], t["split"], t["gpu"]) == (kernel, "held-out", key)), None)


def write_fit_file(params: dict) -> None:
    """FIT_FILE: the constants, the GPU each kernel's were fitted on, the split, and the track record they give."""
    FIT_FILE.write_text(json.dumps({
        "what": "backward model constants (gpumodel/backward_model.py), fitted per kernel on the training split",
        "train": f"results/bwd_kernels_vs_sdpa_grid/bwd_bench.json, N <= {TRAIN_MAX_N} (held out: N >= 8k; its "
                 "fa2_wgmma rows are fa2_wgmma_v3's: the run timed v2, v3's tiles and dQ path; its teaching fa2 is v1: "
                 f"fp16 trains, bf16 held out); the teaching v5: results/bwd_teaching_ab/v5/teach_bwd_ab.json, "
                 f"N <= {TRAIN_MAX_N} (a, a1 only; 8k held out); fa2_wgmma (v4): the contender v4 of "
                 f"results/bwd_ws_v4/{{first,alternatives}}/bwd_ws_ab.json, N <= {TRAIN_MAX_N} (held out: N = 16k); "
                 f"held out only: {', '.join(HELDOUT_RUNS) or 'no later run'}",
        "fitted_on": {k: fit_gpu(k) for k in KERNELS},
        "params": params,
        "track_record": track_record(rows(params))}, indent=1) + "\n")


def main(argv=None) -> int:
    """python -m gpumodel.backward_model [--fit [KERNEL ...] | --record]: refit on TRAIN (writes FIT_FILE; with kernels
    named, only theirs, the others' constants kept as they are), or (--record) rewrite FIT_FILE's track record with
    its constants unchanged (a run added to HELDOUT_RUNS); print the track record."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if "--fit" in argv:
        only = tuple(a for a in argv[argv.index("--fit") + 1:] if not a.startswith("-"))
        try:
            write_fit_file(fit(only=only or None))
        except ValueError as e:
            raise SystemExit(str(e)) from None
    elif "--record" in argv:
        write_fit_file(load_params())
    for t in track_record(rows()):
        print(f"{t['kernel']:<12} {t['split']:<8} {t['gpu']:<4} {t['within']}/{t['cells']} within ±{t['band']:.0%}, "
              f"median {t['median']:.1%}, worst {t['worst']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
