"""Which GPUs the GPU model covers, and on what footing (issue 43): the one place `report`, `predict`, `validate`, the
backward model and the notebooks' helpers ask.

    GPU   footing      physics (counting/gpus.py)                    fitted constants             checked on
    h200  fitted       datasheet + this workplace's measurements     fitted on its own runs       its held-out runs
                       (4.3 TB/s copy, 60 MB L2 as torch reports)    (gpu_model_fit.json,         (validate)
                                                                      gpu_model_bwd_fit.json)
    h100  carried      H100 SXM datasheet: 132 SMs, 50 MB L2,        the H200's, unchanged: the   held-out H100 runs
          over         3.35 TB/s HBM3, 1.83 GHz tensor clock; the    same GH100 die and SM, the   (results/h100_heldout,
                       DRAM rate at the H200's attainable share of   same clocks; nothing         gpumodel/heldout.py)
                       its datasheet figure (hbm_rate)               refitted on H100 data

One exception, per kernel: the backward model's fa2_wgmma (v4, issue 42) has no H200 timing; its constants are fitted
on the H100's runs (results/bwd_ws_v4, N = 16k held out) and carried over to the H200 unvalidated
(gpumodel.backward_model FIT_GPU, footing(kernel, gpu)); v3 keeps the H200 fit as fa2_wgmma_v3.

Covering a GPU is data: its key and footing here, its figures in counting/gpus.py. A GPU not listed (the A100: another
SM, no fit, no run) gets counts and the papers' roofline under that name, never a model verdict.
Torch-free; imports counting only.
"""
from __future__ import annotations

from counting.gpus import GPUS, get_gpu

FITTED, CARRIED = "fitted", "carried over"
# key -> (footing, where its check lives)
COVERAGE = {
    "h200": (FITTED, "results/gpu_model_accuracy.json (fa-traffic validate; held out = not in the fit)"),
    "h100": (CARRIED, "results/gpu_model_h100_heldout.json (python -m gpumodel.heldout --gpu h100)"),
}
COVERED_GPUS = tuple(COVERAGE)
FIT_GPU = "h200"  # the GPU whose runs the constants were fitted on; every other covered GPU carries them over


def covers(gpu) -> bool:
    return _key(gpu) in COVERAGE


def footing(gpu) -> str | None:
    """"fitted", "carried over" or None (not covered)."""
    return COVERAGE.get(_key(gpu), (None, None))[0]


def names(sep: str = ", ") -> str:
    """The covered GPUs as a table says them: "H200, H100"."""
    return sep.join(g.upper() for g in COVERED_GPUS)


def describe_footing(gpu) -> str:
    """One clause for a caption: how the model stands on this GPU."""
    key = _key(gpu)
    if key not in COVERAGE:
        return f"the GPU model covers the {names()} only"
    if COVERAGE[key][0] == FITTED:
        return f"the GPU model, fitted on the {GPUS[key].name}'s runs"
    return (f"the GPU model: the {GPUS[key].name}'s datasheet physics, the {FIT_GPU.upper()} fit's constants carried "
            f"over (not refitted), checked on held-out {key.upper()} runs")


def hbm_rate(gpu) -> float:
    """The DRAM rate the model prices bytes at (B/s): this workplace's measured copy rate where there is one (the
    H200: 4.3 TB/s), else the datasheet figure at the fitted GPU's attainable share of its own datasheet figure (the
    H200 copies at 4.3 of 4.8 TB/s, 0.896: on the H100's 3.35 TB/s, 3.0 TB/s). The share is a property of the memory
    controller and the copy kernel more than of the HBM generation; it is carried over, as the kernels' constants are."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if "hbm_bandwidth" in g.measured:
        return g.measured["hbm_bandwidth"].value
    fit = GPUS[FIT_GPU]
    return g.hbm_bandwidth.value * fit.value("hbm_bandwidth", "measured") / fit.value("hbm_bandwidth")


def _key(gpu) -> str:
    return gpu.key if hasattr(gpu, "key") else str(gpu).lower()
