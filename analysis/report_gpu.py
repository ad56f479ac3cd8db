"""`fa-traffic report`'s GPU-model columns (issue 11): each variant at the blocks its real kernel runs,
with the three memory levels and the bound / time / TFLOP/s of `gpumodel.gpu_model`.

    variant  kernel (KERNELS)  why that one
    naive    naive             the teaching tier's three passes (S and P through HBM): the only naive kernel
    fa1      fa1               the teaching FA1 (Algorithm 1, K/V outer): the only FA1 kernel
    fa2      fa2_wgmma         the fastest FA2 here (wgmma + TMA, warp-specialised), the one to judge FA2 by
    v_once   v_once_tc         issue #941 on tensor cores (its placement and rescale from the row)
             v_once_cluster    placement "cluster": the f row over a thread-block cluster (issue 18)

Levels (gpumodel.levels): `requests` is the papers' count (FA1 Theorem 2, FA2 section 3: every byte a
thread block asks global memory for, as if there were no cache) at the kernel's Br, Bc; `l2` what the
SMs send to the L2; `dram` what reaches DRAM after the L2 residency model. The model is fitted to the
H200 (results/gpu_model_fit.json), so the columns are filled for --gpu h200 only; other GPUs, a
kernel that does not take the problem (d > 128 teaching, fp32 on tensor cores, an f row forced on chip
that does not fit), `--blocks fa1-rule` and explicit --block-q/--block-k fall back to the papers'
roofline, and the row says why (`gpu_model.why`).
Imports no torch (the report's path): descriptors come from torch-free modules.
"""
from __future__ import annotations

from gpumodel import gpu_model as gm
from gpumodel.descriptors import describe

KERNEL_OF = {"naive": "naive", "fa1": "fa1", "fa2": "fa2_wgmma", "v_once": "v_once_tc"}
# the tier of each kernel KERNEL_OF names, as kernels.KERNELS registers it (a test holds the two equal; this
# module imports no torch, so it cannot ask the registry)
TIER_OF = {"naive": "teaching", "fa1": "teaching", "fa2_wgmma": "tensor-core", "v_once_tc": "tensor-core"}


def is_teaching(kernel: str) -> bool:
    return TIER_OF.get(kernel) == "teaching"
MODELLED_GPUS = ("h200",)
MAX_MODEL_Q_BLOCKS = 1 << 16  # past it a row shows the papers' roofline, not the GPU model (O(Tr)); predict refuses
BLOCK_RULES = ("kernel", "fa1-rule")


def kernel_descriptor(variant: str, opts: dict, n_q: int, n_k: int, d: int, dtype: str, causal: bool,
                      gpu_key: str):
    """(descriptor, None) of the kernel that runs `variant` here, or (None, why not)."""
    if gpu_key not in MODELLED_GPUS:
        return None, f"the GPU model is fitted to the {', '.join(g.upper() for g in MODELLED_GPUS)} only"
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
        return None, f"{kernel} cannot run it: {msg}"
    if dtype == "fp32" and desc.path != "ffma":
        return None, f"{kernel} takes fp16/bf16 inputs, not fp32"
    return desc, None


def full_gpu_problem(n_q: int, d: int) -> tuple[int, int]:
    """B, H of every committed benchmark (bench/bench_tc.py, bench_kernels.py): B·N = 16k tokens,
    hidden 2048 = H·d. The report's per-head default (B = H = 1) would be 1-32 CTAs on 132 SMs: a
    launch-latency figure, not the kernel's rate."""
    return max(1, 16384 // n_q), max(1, 2048 // d)


def model_record(desc, batch: int, heads: int, n_q: int, n_k: int, d: int, dtype: str, causal: bool,
                 full_gpu: bool = False) -> dict:
    """The GPU-model fields of one report row. full_gpu: model the bench's B, H (full_gpu_problem) and
    give the bytes per the row's B·H (the levels' residency is that of the full run); time_s stays the
    modelled problem's (model_batch x model_heads)."""
    mb, mh = full_gpu_problem(n_q, d) if full_gpu else (batch, heads)
    work = gm.prepare(desc, mb, mh, n_q, n_k, d, dtype, causal)
    p = gm.predict_work(work)
    lv = work.levels
    share = batch * heads / (mb * mh)
    bench = gm.as_benchmarked(p)  # the time the benchmarks measure, as `fa-traffic predict` prints it
    return dict(kernel=p.kernel, build=p.build, model_batch=mb, model_heads=mh, ctas_per_sm=p.ctas_per_sm,
                time_s=bench["time_s"], tflops=bench["tflops"], bound=bench["bound"],
                requests_bytes=round(lv.requests_bytes * share), l2_bytes=round(lv.l2_bytes * share),
                dram_bytes=round(lv.dram_bytes * share), compulsory_bytes=round(lv.compulsory_bytes * share),
                dsmem_bytes=round(lv.dsmem_bytes * share),
                smem_bytes=desc.smem_bytes,
                terms=dict(p.terms))


def v_once_options(opts: dict) -> dict:
    """The report's v_once options as v_once_tc takes them (placement and rescale pass through)."""
    return {k: opts[k] for k in ("placement", "rescale") if k in opts}
