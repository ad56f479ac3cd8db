"""The GPU model of split-KV decoding (issue 44): the two kernels (`split_kv`, teaching; `split_kv_fast`, tensor
cores, contiguous or paged caches), checked against an H100 timing of them (results/decode_speed/, bench/decode_speed.py).

At decode each K/V byte of the cache is read once (GQA packing: once for the g query heads of its kv head), and
there are about 4·g·Nq FLOPs per 2·d bytes of K and V: g·Nq FLOP per byte in fp16/bf16, against the H200's ridge of
~180 FLOP/byte. So the fast kernel's time is the bytes over what the DRAM delivers, unless too few CTAs are in flight
to pull it; the teaching kernel's is its shared memory's.

    bytes        the closed form's HBM bytes (counting/decode.py): K, V once, Q per split, the partials written and
                 read back, O and lse, all priced at DRAM (the cache is far larger than the L2)
    t_dram       the CTAs in waves of the resident slots (SMs × ctas_per_sm); a wave of n CTAs, each per_cta bytes,
                 takes n · per_cta / min(BW_read, n · in_flight / (lat_dram + t_round))   (Little's law)
                 in_flight: the STAGES - 1 K/V tiles a CTA keeps loading while it computes one; lat_dram: the forward
                 fit's (results/gpu_model_fit.json) at the clock; t_round: the kernel's own time per round (fitted)
    BW_read      eta_read × the DRAM's copy rate (the run's device copy where `check` has one, else
                 coverage.hbm_rate): a read stream outruns a copy (fitted: 1.10 on the H100)
    t_writeback  min(L2, bytes) / BW_read: the timer's L2 flush (do_bench zeroes 256 MB before each call) leaves the
                 L2 dirty; the kernel's first reads write it back
    t_compute    fast: the products at the padded rows (16-row MMA tile) at the mma.sync rate (R_mma_sync / R_wgmma of
                 the fit) plus the exponentials (MUFU) and the rest (FP32), added; teaching: its shared-memory
                 wavefronts (smem_wavefronts_per_tile: S = Q K_j^T 32-way bank-conflicted at d = 64, 128), the busiest
                 SM's CTAs in turn, one wavefront a clock
    time         max(t_dram, t_compute, L2 bytes / L2 rate) + t_writeback + t_fixed + S · t_split
                 t_fixed: the call's fixed time (launch, the counters' memset, the first round trip, the merge's L2
                 round trips); t_split: the teaching merge kernel's time per split (fitted)
    bound        dram where t_dram is the largest, else l2 or the largest compute term (smem for the teaching kernel)

The constants (eta_read; t_round, t_fixed of split_kv_fast and split_kv_fast_paged; t_split of split_kv) are
results/decode_model_fit.json's, fitted on the H100 run's fp16 d = 128 cells (gpumodel/fit_decode_model.py) and
checked on its bf16 and d = 64 cells (gpumodel/decode_heldout.py, results/decode_model_h100.json): split_kv_fast 33/35
held-out cells within ±15%, paged 27/35, teaching 8/8; the misses are listed with their reasons in
results/gpu_model_known_gaps.json (docs/decoding.md). Without the file the model is the plain roofline (no fixed
time, the copy rate). Not yet checked on an H200.

The kernels' tiles (DECODE_KERNELS) are copies of the launchers' (kernels/split_kv.py BLOCK_K,
kernels/split_kv_fast.py block_k, smem_bytes, STAGES, kernels/_decode.py ROWS): gpumodel may not import kernels, so
tests/test_decode_model.py holds the copies equal to the launchers. Torch-free.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from counting import closed_forms as cf
from counting.gpus import get_gpu
from counting.tiling import cdiv
from gpumodel import coverage
from gpumodel import gpu_model as gm
from gpumodel.resources import overhead

FIT_FILE = Path(__file__).resolve().parent.parent / "results" / "decode_model_fit.json"
# no fit: the plain roofline (a copy's rate, no per-round, write-back-free fixed cost)
DEFAULT = {"eta_read": 1.0}


@dataclass(frozen=True)
class DecodeDescriptor:
    """What the decode model needs of a split-KV kernel (the fields as gpumodel/descriptors.py names them)."""

    kernel: str
    path: str  # mma_sync | ffma
    block_q: int  # packed query rows per CTA (g·Nq rows, head-major)
    block_k: int  # Bc: positions per K/V tile
    kv_stages: int  # K/V tiles in flight per CTA
    launches: int  # 1: the merge fused into the last CTA of a tile; 2: a merge kernel of its own
    smem_bytes: int
    source: str = ""
    options: dict = field(default_factory=dict)

    @property
    def build(self) -> str:
        return f"{self.kernel}[Br={self.block_q},Bc={self.block_k},stages={self.kv_stages}]"


ROWS = 16  # kernels/_decode.py ROWS: one m16 tile of packed rows per CTA


def _fast(d: int, dtype: str) -> DecodeDescriptor:
    bc = 128 if d == 64 else 64
    item = cf.DTYPES[dtype]
    return DecodeDescriptor("split_kv_fast", "mma_sync", ROWS, bc, 3, 1, ROWS * d * item + 3 * 2 * bc * d * item + 128,
                            "kernels/split_kv_fast.py (block_k, STAGES = 3, smem_bytes; merge fused: one launch)")


def _teaching(d: int, dtype: str) -> DecodeDescriptor:
    bc = 32
    return DecodeDescriptor("split_kv", "ffma", ROWS, bc, 1, 2, 4 * (2 * ROWS * d + 2 * bc * d + ROWS * bc + 4 * ROWS),
                            "kernels/split_kv.py (BLOCK_K = 32, shared_bytes; FFMA, then a merge kernel)")


DECODE_KERNELS = {"split_kv_fast": _fast, "split_kv": _teaching}
DECODE_KERNEL_OF = {"split_kv": "split_kv_fast"}  # the report's split_kv row: the Hopper kernel
HEAD_DIMS = {"split_kv_fast": (64, 128, 256), "split_kv": tuple(range(1, 257))}


def describe(kernel: str, d: int, dtype: str = "fp16") -> DecodeDescriptor:
    if kernel not in DECODE_KERNELS:
        raise ValueError(f"unknown decode kernel {kernel!r}; choose one of {', '.join(DECODE_KERNELS)}")
    dtype = cf.dtype_name(dtype)
    if d not in HEAD_DIMS[kernel]:
        raise ValueError(f"{kernel} supports head dims {HEAD_DIMS[kernel]}, got d={d}")
    if kernel == "split_kv_fast" and dtype == "fp32":
        raise ValueError("split_kv_fast takes fp16/bf16 inputs, not fp32")
    return DECODE_KERNELS[kernel](d, dtype)


def ctas_per_sm(desc: DecodeDescriptor, gpu) -> int:
    """Resident CTAs per SM by shared memory (1 KB reserved per CTA), at most 8 (128-thread CTAs)."""
    return max(1, min(8, int(gpu.smem_per_sm_bytes.value) // (desc.smem_bytes + 1024)))


def counts(desc: DecodeDescriptor, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, gpu="h200",
           **decode) -> cf.Traffic:
    """The closed form at the kernel's tiles and the GPU's SM count (the split rule fills that GPU)."""
    g = get_gpu(gpu)
    decode = {k: v for k, v in decode.items() if v is not None}
    decode.setdefault("num_sms", int(g.sms.value))
    return cf.counts("split_kv", batch, heads, n_q, n_k, d, causal=causal, dtype=dtype, block_q=desc.block_q,
                     block_k=desc.block_k, **decode)


def load_fit(path: Path = FIT_FILE) -> dict:
    """The decode constants (FIT_FILE, gpumodel/fit_decode_model.py); DEFAULT where no fit is committed."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return dict(DEFAULT)
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc["params"].items()}


def fit_key(desc: DecodeDescriptor, page_size) -> str:
    """The constants' key of a launch: split_kv_fast's contiguous and paged caches have their own (the paged gather
    reads block_table per row before its copies), the teaching kernel one."""
    return desc.kernel + ("_paged" if page_size and desc.kernel == "split_kv_fast" else "")


def _waves(ctas: int, slots: int) -> list[int]:
    return [min(slots, ctas - i) for i in range(0, ctas, slots)]


def smem_wavefronts_per_tile(d: int, block_q: int = ROWS, block_k: int = 32) -> int:
    """The teaching kernel's shared-memory wavefronts per K/V tile and CTA (kernels/cuda/split_kv.cu, fp32 on chip,
    one wavefront a clock per SM). S = Q K_j^T (FA2 Alg. 1 line 8): lane jj reads Ks[jj·d + c], a stride of d words,
    gcd(d, 32)-way conflicted (32-way at d = 64, 128), beside the broadcast Qs read, for each of d columns and
    Br·Bc / 32 warp-iterations; O += P V_j (line 10): per warp-iteration (Br·d / 32) Bc conflict-free Ss/Vs pairs plus
    the Os read and write; the tile's stores (line 7): 2 Bc·d / 32; the softmax (line 9): one thread per row, rows Bc
    words apart (16-way), a max pass and an exp pass (read and write) over Bc."""
    s_phase = block_q * block_k // 32 * d * (math.gcd(d, 32) + 1)
    pv_phase = block_q * d // 32 * (2 * block_k + 2)
    return s_phase + pv_phase + 2 * block_k * d // 32 + 3 * block_k * block_q


def predict(desc: DecodeDescriptor, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, gpu="h200",
            bandwidth: float | None = None, params: dict | None = None, **decode) -> gm.Prediction:
    """bandwidth: the DRAM's copy rate in B/s (default the GPU's measured figure, else its datasheet's; a run's own
    device copy where it measured one, as `check` passes it). params: the decode constants (default FIT_FILE's)."""
    g = get_gpu(gpu)
    params = load_fit() if params is None else params
    tr = counts(desc, batch, heads, n_q, n_k, d, dtype, causal, gpu, **decode)
    item, info = cf.DTYPES[tr.dtype], tr.decode
    fit = params.get(fit_key(desc, info.get("page_size")), {})
    clock, sms = g.value("clock_hz"), int(g.value("sms", "measured"))
    ctas, per_sm = info["ctas"], ctas_per_sm(desc, g)
    dram_bytes = tr.hbm_bytes
    bw = (bandwidth or coverage.hbm_rate(g)) * params.get("eta_read", 1.0)  # a read stream outruns a copy
    # memory: the CTAs run in waves of the resident slots; a wave of n CTAs pulls min(BW, n · per-CTA rate), the
    # per-CTA rate Little's law on what its ring keeps loading (STAGES - 1 tiles while one computes) over a round
    # trip of the fitted DRAM latency plus the kernel's own per-round time t_round (its compute and issue per tile;
    # paged: the block_table read before each row's copy)
    latency = gm.load_params()["lat_dram"] / clock + fit.get("t_round", 0.0)
    in_flight = max(1, desc.kv_stages - 1) * 2 * desc.block_k * d * item
    per_cta = dram_bytes / ctas
    t_dram = sum(n * per_cta / min(bw, n * in_flight / latency) for n in _waves(ctas, sms * per_sm))
    # the timer's L2 flush (triton.testing.do_bench zeroes 256 MB before each call) leaves the L2 full of dirty lines:
    # the kernel's first L2-capacity of reads evicts them, a write-back of min(L2, bytes) at the same rate
    t_writeback = min(g.l2_bytes.value, dram_bytes) / bw
    t_l2 = dram_bytes / gm.L2_BANDWIDTH
    # compute: the products at the padded rows, exponentials, the rest
    rows = info["group"] * n_q
    pad = cdiv(rows, desc.block_q) * desc.block_q / rows
    if desc.path == "ffma":
        mm_rate = g.value("fp32_flops")
    else:
        mm_rate = g.value(f"{tr.dtype}_tensor_flops", "measured") * gm.load_params()["R_mma_sync"] / \
            gm.load_params()["R_wgmma"]
    t_tensor = tr.flops["matmul"] * pad / mm_rate
    t_softmax = tr.flops["exp"] * pad / g.value("exp_rate") + tr.flops["other"] * pad / g.value("fp32_flops")
    t_smem = 0.0
    if desc.path == "ffma":  # the teaching kernel: its shared-memory wavefronts, the busiest SM's CTAs in turn
        tiles = cdiv(cf_chunk(info, n_k, desc), desc.block_k)
        t_smem = cdiv(ctas, sms) * tiles * smem_wavefronts_per_tile(d, desc.block_q, desc.block_k) / clock
    t_compute = max(t_tensor + t_softmax, t_smem)
    # fixed: what no byte count carries (the launches, the counters' memset, the first tile's round trip, the merge's
    # L2 round trips after the last split), one constant per kernel; the teaching merge walks the S partials in turn
    t_fixed = fit.get("t_fixed", 0.0) + info["num_splits"] * fit.get("t_split", 0.0)
    host = desc.launches * overhead(desc.kernel)[0]
    time = max(t_dram, t_compute, t_l2) + t_writeback + t_fixed + host
    terms = {"tensor": t_tensor, "softmax": t_softmax, "smem": t_smem, "latency": t_fixed, "compute": t_compute,
             "l2": t_l2, "dram": t_dram, "writeback": t_writeback, "overhead": host}
    if t_dram >= max(t_compute, t_l2):
        bound = "dram"
    elif t_l2 >= t_compute:
        bound = "l2"
    else:
        bound = max(("tensor", "softmax", "smem"), key=terms.get)
    return gm.Prediction(kernel=desc.kernel, build=f"{desc.build}[S={info['num_splits']}]", time_s=time,
                         tflops=tr.flops["matmul"] / time / 1e12,  # the closed form's products (unpadded)
                         bound=bound, terms=terms, l2_bytes=dram_bytes, dram_bytes=dram_bytes,
                         requests_bytes=tr.hbm_bytes, ctas=ctas, ctas_per_sm=per_sm,
                         waves=ctas / (sms * per_sm), block_q=desc.block_q, block_k=desc.block_k)


def cf_chunk(info: dict, n_k: int, desc: DecodeDescriptor) -> int:
    """Positions per split of the longest sequence (counting/split_rule.py chunk_len at the launch's S)."""
    from counting.split_rule import chunk_len

    return chunk_len(info["cache_len_max"], info["num_splits"], desc.block_k, info.get("page_size"))


# -- the check against a measurement ---------------------------------------------------------------
# bench/decode_speed.py (the decode kernels' benchmark) writes decode_speed.json: per shape (dtype, d, batch, cache;
# H = 32, H_kv = 8, Nq = 1, full caches) the medians in ms of split_kv_fast (contiguous), split_kv_fast_paged (pages
# of 256), split_kv (the teaching kernel, small caches), and the run's device-copy bandwidth.
CHECKED = {"split_kv_fast": ("split_kv_fast", None), "split_kv_fast_paged": ("split_kv_fast", 256),
           "split_kv": ("split_kv", None)}


def gpu_of(device: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> h100; the model's key of a device name (ValueError for another GPU)."""
    for key in ("h200", "h100"):
        if key in device.lower().replace(" ", ""):
            return key
    raise ValueError(f"the decode model prices H100 and H200, not {device!r}")


def cells(result: dict) -> list[dict]:
    """Every timed decode-kernel cell of a decode_speed.json (loaded): the shape, the run's GPU and copy rate, and
    the measured median (ms)."""
    gpu = gpu_of(result["device"])
    bw = result.get("copy", {}).get("gbps")
    out = []
    for row in result.get("rows", []):
        for name, ms in (row.get("ms") or {}).items():
            if name not in CHECKED or not ms:
                continue
            out.append(dict(kernel=name, dtype=cf.dtype_name(row["dtype"]), d=row["d"], batch=row["batch"],
                            heads=row.get("H", 32), kv_heads=row.get("H_kv", 8), n_q=row.get("Nq", 1),
                            cache=row["cache"], measured_ms=ms, gpu=gpu, bandwidth=bw * 1e9 if bw else None,
                            ok=row.get("ok")))
    return out


def predict_cell(cell: dict, params: dict | None = None) -> gm.Prediction:
    kernel, page = CHECKED[cell["kernel"]]
    desc = describe(kernel, cell["d"], cell["dtype"])
    return predict(desc, cell["batch"], cell["heads"], cell["n_q"], cell["cache"], cell["d"], cell["dtype"],
                   gpu=cell["gpu"], bandwidth=cell["bandwidth"], params=params, kv_heads=cell["kv_heads"],
                   page_size=page)


def price(cell: dict, params: dict | None = None) -> float:
    """The model's ms for one cell of `cells`."""
    return predict_cell(cell, params).time_s * 1e3


def check(result: dict, params: dict | None = None) -> list[dict]:
    """Model against measured for every timed decode-kernel cell of a decode_speed.json (loaded): model_ms at the
    run's own copy bandwidth, measured_ms, their ratio, and the model's bound and split count."""
    out = []
    for c in cells(result):
        p = predict_cell(c, params)
        out.append(dict(kernel=c["kernel"], dtype=c["dtype"], d=c["d"], batch=c["batch"], cache=c["cache"],
                        measured_ms=c["measured_ms"], model_ms=p.time_s * 1e3, ratio=p.time_s * 1e3 / c["measured_ms"],
                        bound=p.bound, build=p.build, ok=c["ok"]))
    return out


def main(argv=None) -> int:
    """python -m gpumodel.decode_model results/<run>/decode_speed.json: the model against that run, one line a cell,
    then the median and range of model / measured per kernel (the held-out record and its check:
    python -m gpumodel.decode_heldout)."""
    import statistics
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gpumodel.decode_model results/<run>/decode_speed.json", file=sys.stderr)
        return 2
    rows = check(json.loads(Path(args[0]).read_text()))
    for r in rows:
        print(f"{r['kernel']:20s} {r['dtype']} d={r['d']:<3d} B={r['batch']:<3d} L={r['cache']:<7d} measured "
              f"{r['measured_ms']:9.4f} ms  model {r['model_ms']:9.4f} ms  model/measured {r['ratio']:.2f}  "
              f"{r['bound']}  {r['build']}")
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["kernel"] == kernel]
        print(f"{kernel}: {len(ratios)} cells, model/measured median {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
