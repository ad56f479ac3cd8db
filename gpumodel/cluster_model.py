"""The GPU model's view of the cluster v_once kernel (issue 18): its descriptor and the costs only clusters have.

kernels/cuda/v_once_cluster.cu (launcher kernels/v_once_cluster.py) runs one Q block of Br = 64 rows per
cluster of CS CTAs (counting.cluster.plan: the smallest cluster whose shared memories hold the f row).
The descriptor is stated here from counting.cluster's budget, so the model needs neither the launcher
module nor torch (`fa-traffic predict --kernel v_once_cluster` and the report's placement-cluster rows).
Below the time model (gpumodel/gpu_model.py and gpumodel/levels.py import it); the fit of its one constant and the
model's side of the verdict, which run the time model, are gpumodel/cluster_verdict.py.

Per Br x Bc tile of a CTA (the model's tile terms, gpumodel/gpu_model.py):
    tensor    S = Q K_j^T and O_c += P V_j on wgmma: 4·Br·Bc·d FLOPs, as FA2 (the model's R_wgmma)
    softmax   exp(S - m_ij) on MUFU and the lazy pass P = f_ij · e^{m_ij - M} / ℓ (an FMUL per element:
              the closed form's 'other' count), the block maxima and sums
    smem      wgmma operands Q_i, K_j, V_j from smem, f_ij written once (phase 1) and read once (phase 2):
              (Br·d + 2·Bc·d + 2·Br·Bc) · 2 bytes per tile at 128 B/clk
    overlap   one consumer warpgroup (Br = 64 = one wgmma M) and one CTA per SM: no second warpgroup or
              CTA runs products while this one does its softmax, so they add (the model's FA2 rule at one
              CTA per SM, σ = 1). fa2_wgmma's TMA builds ping-pong two consumer warpgroups and overlap them
              (FlashAttention-3, arXiv:2407.08608, section 3.1): that is the issue rate the cluster gives up.
Per cluster (once per Q block, not hidden: the phases wait for them):
    dsmem     the two reductions' bytes per CTA (counting.cluster.dsmem_bytes / CS) at DSMEM_BYTES_PER_CLK
    sync      SYNCS cluster barriers (stats published, partial O's published, no CTA exits while its smem is
              read) at BARRIER_CYCLES each
Occupancy: CTAs/SM from plan().smem_bytes; a cluster's CTAs are co-scheduled within one GPC, so only
Σ_GPC ⌊SMs_g · CTAs/SM / CS⌋ clusters are resident at once (what cudaOccupancyMaxActiveClusters answers on
the device: CUDA runtime API, "return the maximum number of clusters that could co-exist on the target
device ... the calculated occupancy is not guaranteed to be achievable"). With the GPC split below, CS = 16
leaves 8 clusters (128 of 132 SMs) and CS = 8 16 clusters: a full GPU's worth of Q blocks runs in waves of
8 or 16 Q blocks, against 132 (or 264) for fa2_wgmma.

Constants and where they come from:
    GPC_SMS           H100/H200 SXM: 132 SMs = 66 TPCs in 8 GPCs (NVIDIA, "NVIDIA Hopper Architecture In-Depth";
                      the split over GPCs is uneven: NVIDIA/cutlass issue #1921). The split 2 x 18 + 6 x 16 is an
                      assumption consistent with a 16-SM GPC observed on an H100 (accel-sim gpu-app-collection
                      PR #87, SM->GPC mapping tool) and at most 9 TPCs per GPC (GH100: 8 x 9 TPCs).
    DSMEM_BYTES_PER_CLK  32 B/clk/SM: an assumption, not a measurement. DSMEM traffic moves in 32-byte segments
                      like global memory (NVIDIA Hopper Tuning Guide, "Distributed Shared Memory": coalesce to
                      32-byte segments); Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU
                      Architecture" (arXiv:2402.13499) measure the SM-to-SM network and find its connections
                      compete for bandwidth as clusters grow. No H200 number is committed: the GPU probe
                      (lab/cluster_probe.py) measures it, and a committed results/cluster_probe.json
                      replaces these defaults (load_constants()).
    BARRIER_CYCLES    1000 cycles per barrier.cluster arrive+wait (with the remote reads it orders): an assumption, not
                      a measurement (Lühnen, Marschner, Lal, HPEC 2024, study the latencies of Hopper's thread block
                      clusters and find large clusters cost measurable overhead); replaced by the probe's measurement
                      when committed.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from counting import cluster
from counting import sm90
from gpumodel.resources import overhead

ROOT = Path(__file__).resolve().parent.parent
PROBE_FILE = ROOT / "results" / "cluster_probe.json"

KERNEL = "v_once_cluster"
HEAD_DIMS = (64, 128)
BLOCK_Q = 64  # Br: one consumer warpgroup, one wgmma M
BLOCK_K = 64  # Bc: counting.cluster.plan's default
WARPS = 8  # a producer warpgroup (TMA) and one consumer warpgroup
SYNCS = 3  # cluster barriers per Q block
SMEM_PER_SM = sm90.SMEM_PER_SM  # CUDA guide, CC 9.0: 228 KB of shared memory per SM (1 KB reserved per block)
MAX_CTAS_PER_SM = 2  # two 256-thread CTAs of >= 128 registers fill the 64K-register file

DEFAULTS = {
    "gpc_sms": [18, 18, 16, 16, 16, 16, 16, 16],
    "dsmem_bytes_per_clk": 32.0,
    "barrier_cycles": 1000.0,
    "source": "assumed (gpumodel/cluster_model.py docstring): no committed probe of the H200",
}


@lru_cache(maxsize=1)
def load_constants() -> dict:
    """DEFAULTS, with what a committed probe (results/cluster_probe.json) measured in their place."""
    out = dict(DEFAULTS)
    try:
        data = json.loads(PROBE_FILE.read_text())
    except (OSError, ValueError):
        return out
    for key in ("gpc_sms", "dsmem_bytes_per_clk", "barrier_cycles", "dsmem_bytes_per_clk_by_cs",
                "barrier_cycles_by_cs", "max_active_clusters_by_cs"):
        if data.get(key):
            out[key] = data[key]
    out["source"] = f"results/cluster_probe.json ({data.get('device', 'measured')})"
    return out


def ctas_per_sm(smem_bytes: int) -> int:
    """CTAs of `smem_bytes` an SM holds (CUDA guide: 1 KB of each block's smem is reserved), at most 2."""
    return max(1, min(MAX_CTAS_PER_SM, sm90.ctas_by_smem(smem_bytes)))


def _by_cs(k: dict, key: str, cluster_size: int):
    """A probe's per-cluster-size value (its '<key>_by_cs'), else the single one."""
    return float(k.get(f"{key}_by_cs", {}).get(str(cluster_size), k[key]))


def active_clusters(cluster_size: int, per_sm: int = 1, gpc_sms=None) -> int:
    """Clusters of `cluster_size` CTAs resident at once: each within one GPC (cudaOccupancyMaxActiveClusters);
    a probe's count where it measured this size at one CTA per SM."""
    k = load_constants()
    measured = k.get("max_active_clusters_by_cs", {}).get(str(cluster_size))
    if gpc_sms is None and per_sm == 1 and measured:
        return int(measured)
    gpcs = gpc_sms or k["gpc_sms"]
    return sum((sms * per_sm) // cluster_size for sms in gpcs)


def plan_for(n_k: int, d: int, dtype: str = "fp16") -> cluster.ClusterPlan:
    """The kernel's cluster for this Nk, or ValueError (one line) where none holds the f row."""
    if d not in HEAD_DIMS:
        raise ValueError(f"{KERNEL} takes d = {' or '.join(map(str, HEAD_DIMS))}, got d={d}")
    if dtype not in ("fp16", "bf16"):
        raise ValueError(f"{KERNEL} takes fp16/bf16 inputs, not {dtype}")
    p = cluster.plan(n_k, d, block_q=BLOCK_Q, block_k=BLOCK_K)
    if p is None:
        raise ValueError(f"{KERNEL}: no cluster of up to {cluster.CLUSTER_SIZES[-1]} CTAs holds the f row of Nk={n_k} "
                         f"keys at d={d} (at most {cluster.most_keys(d):,}); placement auto spills it (v_once_tc)")
    return p


def describe(d: int, dtype: str = "fp16", causal: bool = False, *, n_q: int = 4096, n_k: int | None = None,
             **_) -> dict:
    """The descriptor (gpumodel.builds.KernelDescriptor fields) of the build that runs this Nk."""
    n_k = n_q if n_k is None else n_k
    p = plan_for(n_k, d, dtype)
    per_sm = ctas_per_sm(p.smem_bytes)
    t, src = overhead("fa2_tc")  # the same CuPy driver launch (cluster launch attributes not timed apart)
    smem_tile = (BLOCK_Q * d + 2 * BLOCK_K * d + 2 * BLOCK_Q * BLOCK_K) * 2
    # warp-specialised (a TMA producer), but one consumer warpgroup: the overlap rule is the FA2 one (module docstring)
    return dict(kernel=KERNEL, build=f"Br={BLOCK_Q} Bc={BLOCK_K} cluster={p.cluster_size} "
                f"({p.keys_per_cta} keys/CTA, {p.smem_bytes:,} B smem; TMA producer + 1 consumer warpgroup)",
                variant="v_once", path="wgmma", structure="fa2", block_q=BLOCK_Q, block_k=BLOCK_K, warps=WARPS,
                ctas_per_sm=per_sm, loads="tma", s_p="smem", grid="clusters", smem_bytes_per_tile=smem_tile,
                smem_bytes=p.smem_bytes, f="cluster", rescale="lazy", cluster_size=p.cluster_size,
                launch_overhead_s=t, overhead_source=src,
                source="gpumodel/cluster_model.py from counting.cluster.plan (the kernel's budget)",
                options={})


# -- the one fitted constant: the latency a single consumer warpgroup leaves exposed per tile ---------------------
# The kernel's one consumer warpgroup waits for each S = Q K_j^T wgmma before its softmax and for each f slice to
# come back from shared memory, with no second warpgroup to fill the gap (ncu: tensor pipe 12.6% / 22% busy at
# d = 64 / 128). The terms above are throughputs; this is the time they leave on the table, in cycles per tile
# of a CTA, one constant for every shape. Fitted (gpumodel/cluster_verdict.py fit_exposed) on the training split only
# and read here from its file (the model imports no fit module); validate reports the rest as held out.
FIT_FILE = ROOT / "results" / "cluster_model_fit.json"


def is_train(cell: dict) -> bool:
    """The training split: fp16, d = 64, non-causal cells of the B·N = 16k grid at N >= 2k (the time band's
    domain) in cluster_bench.json. Held out: d = 128, causal, bf16, N < 2k and the B·H <= 16 cells."""
    return (cell.get("source") == "cluster_bench.json" and cell["kernel"] == KERNEL and cell["dtype"] == "fp16"
            and cell["d"] == 64 and not cell["causal"] and cell["batch"] * cell["heads"] > 16
            and cell["n_q"] >= 2048 and "time_s" in cell)


@lru_cache(maxsize=1)
def exposed_cycles_per_tile() -> float:
    """The committed fit (results/cluster_model_fit.json), 0 without one."""
    try:
        return float(json.loads(FIT_FILE.read_text())["exposed_cycles_per_tile"])
    except (OSError, ValueError, KeyError):
        return 0.0


def cluster_costs(desc, d: int, dsmem_bytes_per_q_block: float) -> dict:
    """Cycles one cluster spends outside its tiles: the DSMEM reductions (per CTA) and the barriers."""
    k = load_constants()
    cs = desc.cluster_size
    per_cta = dsmem_bytes_per_q_block / cs
    return {"dsmem": per_cta / _by_cs(k, "dsmem_bytes_per_clk", cs), "sync": SYNCS * _by_cs(k, "barrier_cycles", cs)}


def busiest_rank_tiles(n_visited: int, cluster_size: int) -> int:
    """Tiles of the cluster's busiest CTA: the kernel splits a Q block's visited key blocks evenly over the
    ranks (counting.cluster.rank_blocks), so rank 0 takes ceil(n_visited / CS) of them."""
    return -(-n_visited // cluster_size)
