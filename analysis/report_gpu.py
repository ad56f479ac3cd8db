"""`fa-traffic report`'s GPU-model columns (issue 11): each variant at the blocks its real kernel runs,
with the three memory levels and the bound / time / TFLOP/s of `gpumodel.gpu_model`.

    variant  kernel (KERNELS)  why that one
    naive    naive             the teaching tier's three passes (S and P through HBM): the only naive kernel
    fa1      fa1               the teaching FA1 (Algorithm 1, K/V outer): the only FA1 kernel
    fa2      fa2_wgmma         the fastest FA2 here (wgmma + TMA, warp-specialised), the one to judge FA2 by
    v_once   v_once_tc         issue #941 on tensor cores (its placement and rescale from the row)
             v_once_cluster    placement "cluster": the f row over a thread-block cluster (issue 18)
    split_kv split_kv_fast     decoding (issue 44): Nq <= 64, priced by gpumodel/decode_model.py (DRAM, Little's law)

Levels (gpumodel.levels): `requests` is the papers' count (FA1 Theorem 2, FA2 section 3: every byte a
thread block asks global memory for, as if there were no cache) at the kernel's Br, Bc; `l2` what the
SMs send to the L2; `dram` what reaches DRAM after the L2 residency model. The model is fitted to the
H200 (results/gpu_model_fit.json) and carried over to the H100 (gpumodel/coverage.py), so the columns are filled for
--gpu h200 and h100; other GPUs, a
kernel that does not take the problem (d > 128 teaching, fp32 on tensor cores, an f row forced on chip
that does not fit), `--blocks fa1-rule` and explicit --block-q/--block-k fall back to the papers'
roofline, and the row says why (`gpu_model.why`).
Imports no torch (the report's path): descriptors come from torch-free modules.
"""
from __future__ import annotations

from gpumodel import decode_model
from gpumodel import gpu_model as gm
from gpumodel.descriptors import describe

DECODE_MAX_N_Q = 64  # kernels/split_kv_fast.py MAX_N_Q: decoding and speculative decoding

KERNEL_OF = {"naive": "naive", "fa1": "fa1", "fa2": "fa2_wgmma", "v_once": "v_once_tc"}
# the tier of each kernel KERNEL_OF names, as kernels.KERNELS registers it (a test holds the two equal; this
# module imports no torch, so it cannot ask the registry)
TIER_OF = {"naive": "teaching", "fa1": "teaching", "fa2_wgmma": "tensor-core", "v_once_tc": "tensor-core"}


def is_teaching(kernel: str) -> bool:
    return TIER_OF.get(kernel) == "teaching"
MAX_MODEL_Q_BLOCKS = 1 << 16  # past it a row shows the papers' roofline, not the GPU model (O(Tr)); predict refuses
BLOCK_RULES = ("kernel", "fa1-rule")


def kernel_descriptor(variant: str, opts: dict, n_q: int, n_k: int, d: int, dtype: str, causal: bool,
                      gpu_key: str):
    """(descriptor, None) of the kernel that runs `variant` here, or (None, why not)."""
    if gpu_key not in gm.COVERED_GPUS:
        return None, f"the GPU model covers the {', '.join(g.upper() for g in gm.COVERED_GPUS)} only"
    if variant in decode_model.DECODE_KERNEL_OF:  # issue 44: the decode kernel, priced by gpumodel/decode_model.py
        kernel = decode_model.DECODE_KERNEL_OF[variant]
        if n_q > DECODE_MAX_N_Q:
            return None, f"{kernel} takes Nq <= {DECODE_MAX_N_Q} query rows (decoding); longer Nq are prefills"
        try:
            return decode_model.describe(kernel, d, dtype), None
        except ValueError as e:
            return None, f"{kernel} cannot run it: {e}"
    kernel = KERNEL_OF.get(variant)
    if variant == "v_once" and opts.get("placement") == "cluster":  # issue 18: the cluster kernel
        kernel, opts = "v_once_cluster", {}
    if kernel is None:  # a registered variant with no kernel (tests/test_add_a_variant.py's toy)
        return None, f"no kernel runs variant {variant}"
    try:
        desc = describe(kernel, d, dtype, causal, n_q=n_q, n_k=n_k, **opts)
    except ValueError as e:
        msg = str(e).splitlines()[0]
        if "placement='sram'" in msg:  # v_once_tc's plan: the f row forced on chip does not fit
            msg = "its f row does not fit in shared memory"
        msg = msg.split(";")[0]
        if msg.startswith(f"{variant}: "):  # the descriptor names the variant; the row already does
            msg = msg[len(variant) + 2:]
        return None, f"{kernel} cannot run it: {msg}"
    if dtype == "fp32" and desc.path != "ffma":
        return None, f"{kernel} takes fp16/bf16 inputs, not fp32"
    return desc, None


def full_gpu_problem(n_q: int, d: int, n_k: int | None = None) -> tuple[int, int]:
    """B, H of every committed benchmark (bench/bench_tc.py, bench_kernels.py): B·N = 16k tokens,
    hidden 2048 = H·d. The default shape of `fa-traffic report` (--pass forward) and `predict` alike: one head
    (B = H = 1) would be 1-32 CTAs on 132 SMs, a launch-latency figure, not the kernel's rate. B·H stays within the
    65,535 grid rows every launcher takes (N < 8 at d = 64 would pass them; no benchmark runs so short a sequence)."""
    heads = max(1, 2048 // d)
    tokens = max(n_q, n_k or n_q)  # decoding (Nq = 1 against a cache of Nk): B·Nk = 16k tokens of cache
    return max(1, min(16384 // tokens, 65535 // heads)), heads


FULL_GPU = "the benchmarks' full GPU: B = 16k/N, H = 2048/d; --batch/--heads to choose"


def shape_text(shapes: dict, full_gpu: bool) -> str:
    """The B, H a report or predict assumed, for its header: shapes maps (N, d) -> (B, H)."""
    pairs = dict.fromkeys(shapes.values())
    if len(pairs) == 1:
        (b, h), = pairs
        return f"B={b} H={h}" + (f" ({FULL_GPU})" if full_gpu else "")
    each = ", ".join(f"{b}×{h} at N={n}" + (f" d={d}" if len({d for _, d in shapes}) > 1 else "")
                     for (n, d), (b, h) in list(shapes.items())[:6])
    more = ", …" if len(shapes) > 6 else ""
    return f"B×H = {each}{more}" + (f" ({FULL_GPU})" if full_gpu else "")


def model_record(desc, batch: int, heads: int, n_q: int, n_k: int, d: int, dtype: str, causal: bool,
                 gpu: str = "h200", **decode) -> dict:
    """The GPU-model fields of one report row, at the row's B, H (as `fa-traffic predict` prices that shape;
    model_batch, model_heads: the shape modelled, the row's). decode: split_kv's kv_heads, page_size, ... ."""
    if isinstance(desc, decode_model.DecodeDescriptor):
        p = decode_model.predict(desc, batch, heads, n_q, n_k, d, dtype, causal, gpu, **decode)
        bench = gm.as_benchmarked(p)
        return dict(kernel=p.kernel, build=p.build, model_batch=batch, model_heads=heads, ctas_per_sm=p.ctas_per_sm,
                    time_s=bench["time_s"], tflops=bench["tflops"], bound=bench["bound"],
                    requests_bytes=p.requests_bytes, l2_bytes=p.l2_bytes, dram_bytes=p.dram_bytes,
                    compulsory_bytes=p.dram_bytes, dsmem_bytes=0, smem_bytes=desc.smem_bytes, terms=dict(p.terms),
                    model="gpumodel/decode_model.py (DRAM roofline with Little's law; to be checked against the "
                          "measured split_kv kernels)")
    work = gm.prepare(desc, batch, heads, n_q, n_k, d, dtype, causal, gpu=gpu)
    p = gm.predict_work(work, gpu=gpu)
    lv = work.levels
    bench = gm.as_benchmarked(p)  # the time the benchmarks measure, as `fa-traffic predict` prints it
    return dict(kernel=p.kernel, build=p.build, model_batch=batch, model_heads=heads, ctas_per_sm=p.ctas_per_sm,
                time_s=bench["time_s"], tflops=bench["tflops"], bound=bench["bound"],
                requests_bytes=round(lv.requests_bytes), l2_bytes=round(lv.l2_bytes),
                dram_bytes=round(lv.dram_bytes), compulsory_bytes=round(lv.compulsory_bytes),
                dsmem_bytes=round(lv.dsmem_bytes),
                smem_bytes=desc.smem_bytes,
                terms=dict(p.terms))


def v_once_options(opts: dict) -> dict:
    """The report's v_once options as v_once_tc takes them (placement and rescale pass through)."""
    return {k: opts[k] for k in ("placement", "rescale") if k in opts}
