"""The GPU model of split-KV decoding (issue 44): a simple DRAM roofline with Little's law, to be checked against a
GPU timing of the two kernels (bench/decode_speed.py, not yet run) (`split_kv`, teaching; `split_kv_fast`, tensor cores) before it is trusted.

At decode each K/V byte of the cache is read once (GQA packing: once for the g query heads of its kv head), and
there are about 4·g·Nq FLOPs per 2·d bytes of K and V (4·d per query row and position against 2·d·itemsize bytes):
g·Nq FLOP per byte in fp16/bf16, against the H200's ridge of ~180 FLOP/byte (788 TFLOP/s / 4.3 TB/s). So the time
is the bytes over what the DRAM delivers, unless too few CTAs are in flight to pull it: FA2's grid at Nq = 1 is
B·H_kv CTAs, each streaming its whole cache, and a CTA keeps only its K/V ring in flight.

    bytes      the closed form's HBM bytes (counting/decode.py): K, V once, Q per split, the partials written and
               read back, O and lse. All are priced at DRAM: the cache is far larger than the L2 (an upper bound for
               the partials, which may stay in the L2)
    t_dram     bytes / min(BW, resident CTAs · in-flight bytes per CTA / DRAM latency)   (Little's law)
               BW: the GPU's measured DRAM bandwidth where there is one (H200: 4.3 TB/s, a device copy), else its
               datasheet figure at the H200's attainable share (gpumodel/coverage.py hbm_rate: H100 3.0 TB/s); DRAM latency: the fitted lat_dram (results/gpu_model_fit.json) at the clock;
               in-flight per CTA: its K/V ring, stages · 2 · Bc · d · itemsize
    t_compute  the products at the padded rows (the MMA tile is 16 rows: g·Nq = 8 rows run as 16) at the path's
               rate (mma.sync: the dense peak × R_mma_sync / R_wgmma of the fit; ffma: the FP32 peak), plus the
               exponentials at the MUFU rate and the other operations at the FP32 rate, added (no overlap assumed)
    time       max(t_dram, t_compute) + launches × the launcher's measured overhead (0 where not measured)
    bound      dram where t_dram >= t_compute, else the largest compute term

The kernels' tiles (DECODE_KERNELS) are copies of the launchers' (kernels/split_kv.py BLOCK_K,
kernels/split_kv_fast.py block_k, smem_bytes, STAGES, kernels/_decode.py ROWS): gpumodel may not import kernels, so
tests/test_decode_model.py holds the copies equal to the launchers. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from counting import closed_forms as cf
from counting.gpus import get_gpu
from counting.tiling import cdiv
from gpumodel import coverage
from gpumodel import gpu_model as gm
from gpumodel.resources import overhead


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


def predict(desc: DecodeDescriptor, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, gpu="h200",
            bandwidth: float | None = None, **decode) -> gm.Prediction:
    """bandwidth: the DRAM's B/s (default the GPU's measured figure, else its datasheet's; a run's own device copy
    where it measured one, as `check` passes it)."""
    g = get_gpu(gpu)
    tr = counts(desc, batch, heads, n_q, n_k, d, dtype, causal, gpu, **decode)
    item, info = cf.DTYPES[tr.dtype], tr.decode
    params = gm.load_params()
    clock, sms = g.value("clock_hz"), int(g.value("sms", "measured"))
    # memory: every byte at DRAM, at most what the resident CTAs keep in flight over the DRAM latency
    ctas, per_sm = info["ctas"], ctas_per_sm(desc, g)
    resident = min(ctas, sms * per_sm)
    in_flight = resident * desc.kv_stages * 2 * desc.block_k * d * item
    latency = params["lat_dram"] / clock
    bw = bandwidth or coverage.hbm_rate(g)  # the prefill model's DRAM rate (gpumodel/coverage.py): one story
    rate = min(bw, in_flight / latency)
    dram_bytes = tr.hbm_bytes
    t_dram = dram_bytes / rate
    t_l2 = dram_bytes / gm.L2_BANDWIDTH
    # compute: the products at the padded rows, exponentials, the rest
    rows = info["group"] * n_q
    pad = cdiv(rows, desc.block_q) * desc.block_q / rows
    if desc.path == "ffma":
        mm_rate = g.value("fp32_flops")
    else:
        peak = g.value(f"{tr.dtype}_tensor_flops", "measured")
        mm_rate = peak * params["R_mma_sync"] / params["R_wgmma"]
    t_tensor = tr.flops["matmul"] * pad / mm_rate
    t_softmax = tr.flops["exp"] * pad / g.value("exp_rate") + tr.flops["other"] * pad / g.value("fp32_flops")
    t_compute = t_tensor + t_softmax
    host = desc.launches * overhead(desc.kernel)[0]
    time = max(t_dram, t_compute, t_l2) + host
    terms = {"tensor": t_tensor, "softmax": t_softmax, "smem": 0.0, "latency": 0.0, "compute": t_compute,
             "l2": t_l2, "dram": t_dram, "overhead": host}
    bound = "dram" if t_dram >= max(t_compute, t_l2) else ("l2" if t_l2 >= t_compute else
                                                           max(("tensor", "softmax"), key=terms.get))
    return gm.Prediction(kernel=desc.kernel, build=f"{desc.build}[S={info['num_splits']}]", time_s=time,
                         tflops=tr.flops["matmul"] / time / 1e12,  # the closed form's products (unpadded)
                         bound=bound, terms=terms, l2_bytes=dram_bytes, dram_bytes=dram_bytes,
                         requests_bytes=tr.hbm_bytes, ctas=ctas, ctas_per_sm=per_sm,
                         waves=ctas / (sms * per_sm), block_q=desc.block_q, block_k=desc.block_k)


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


def check(result: dict) -> list[dict]:
    """Model against measured for every timed decode-kernel cell of a decode_speed.json (loaded): model_ms at the
    run's own copy bandwidth, measured_ms, their ratio, and the model's bound and split count."""
    gpu = gpu_of(result["device"])
    bw = result.get("copy", {}).get("gbps")
    bw = bw * 1e9 if bw else None
    out = []
    for row in result.get("rows", []):
        for name, ms in (row.get("ms") or {}).items():
            if name not in CHECKED or not ms:
                continue
            kernel, page = CHECKED[name]
            dtype = cf.dtype_name(row["dtype"])
            desc = describe(kernel, row["d"], dtype)
            p = predict(desc, row["batch"], row.get("H", 32), row.get("Nq", 1), row["cache"], row["d"], dtype,
                        gpu=gpu, bandwidth=bw, kv_heads=row.get("H_kv", 8), page_size=page)
            out.append(dict(kernel=name, dtype=dtype, d=row["d"], batch=row["batch"], cache=row["cache"],
                            measured_ms=ms, model_ms=p.time_s * 1e3, ratio=p.time_s * 1e3 / ms, bound=p.bound,
                            build=p.build, ok=row.get("ok")))
    return out


def main(argv=None) -> int:
    """python -m gpumodel.decode_model results/<run>/decode_speed.json: the model against that run, one line a cell,
    then the median and range of model / measured per kernel."""
    import json
    import statistics
    import sys
    from pathlib import Path

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
