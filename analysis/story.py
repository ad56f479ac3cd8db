"""The story's numbers in one place (issue 41, items 2 and 6): each kernel's measured TFLOP/s against its three
arithmetic intensities, the ceilings of an H200, and the five-way comparison table. Notebooks 1 and 5 draw them,
tests/test_notebook_story.py holds the story to them.

Three intensities per kernel (FLOPs / bytes, gpumodel.levels at the kernel's own blocks):
    papers' count  every byte a thread block asks global memory for, as if there were no cache (FA1 Theorem 2,
                   FA2 section 3): the count the papers prove their bounds on
    L2             what the SMs send to the L2
    DRAM           what reaches DRAM after the L2 (for FA2: about the compulsory Q, K, V, O, as ncu measures)
Ceilings: HBM bandwidth × intensity (the memory slope), the dense fp16 tensor-core rate, and the exponential
unit as a FLOP/s roof for attention: one exp per (query, key) pair, 4·d FLOPs per pair, so MUFU rate × 4d.
Measured TFLOP/s: one file per tier, non-causal fp16 (MEASURED_FILE), 4·B·H·N²·d FLOPs / median time.
The bound on the GPU: gpumodel.gpu_model's (its limiting term), as `fa-traffic predict` prints it.
Imports no torch.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from analysis.report_gpu import full_gpu_problem, model_record
from counting import closed_forms as cf
from counting.gpus import get_gpu
from counting.tiling import cdiv
from gpumodel import coverage
from gpumodel import gpu_model as gm
from gpumodel.descriptors import describe

# (label, kernel, its options, the closed form that counts it)
KERNELS = (
    ("naive", "naive", {}, "naive"),
    ("FA1", "fa1", {}, "fa1"),
    ("FA2", "fa2", {}, "fa2"),
    ("Hopper FA2", "fa2_wgmma", {}, "fa2"),
    ("v_once", "v_once_tc", {"placement": "hbm"}, "v_once"),
)
# the measurements: the teaching tier's one run, and the tensor-core tier's run that timed FA2 and v_once side by side
MEASURED_FILE = {"naive": "bench_kernels.json", "fa1": "bench_kernels.json", "fa2": "bench_kernels.json",
                 "fa2_wgmma": "cluster_bench.json", "v_once_tc": "cluster_bench.json"}
MEMORY_BOUNDS = ("l2", "dram")  # the model's verdicts that mean "waits for memory"

# what the comparison table says of each algorithm (the formulas are checked against counting.closed_forms below)
LOOP_ORDER = {"naive": "three kernels: S = QKᵀ, softmax, PV",
              "fa1": "K, V outside; Q inside",
              "fa2": "Q outside; K, V inside",
              "fa2_wgmma": "Q outside; K, V inside (TMA ring, warp-specialised)",
              "v_once_tc": "Q outside; the f row of each Q block, then V once"}
TRAFFIC_FORMULA = {"naive": "4N² + (T_c + 2T_r + 1)·Nd",
                   "fa1": "(3 + 3T_c)·Nd + ℓ, m in fp32: 4(T_c + 1)·N",
                   "fa2": "(2 + 2T_r)·Nd",
                   "fa2_wgmma": "(2 + 2T_r)·Nd",
                   "v_once_tc": "2N² + (2 + 2T_r)·Nd"}
EXTRA_MEMORY = {"naive": "S and P in HBM: 2N² per head", "fa1": "ℓ, m in HBM: 2N per head",
                "fa2": "L in HBM: N per head", "fa2_wgmma": "L in HBM: N per head",
                "v_once_tc": "the f row, Br×N per Q block: spilled to HBM (N² per head) past the SRAM"}
PARALLELISM = {"naive": "tiles of S, per kernel", "fa1": "B·H thread blocks", "fa2": "T_r·B·H thread blocks",
               "fa2_wgmma": "T_r·B·H tiles, persistent", "v_once_tc": "T_r·B·H thread blocks"}


def traffic_bytes(kernel: str, n: int, d: int, block_q: int, block_k: int, itemsize: int = 2) -> int:
    """TRAFFIC_FORMULA evaluated: HBM bytes per (batch, head) by the papers' count, lse left out (ℓ and m are
    float32, the rest `itemsize`)."""
    t_r, t_c = cdiv(n, block_q), cdiv(n, block_k)
    if kernel == "fa1":
        return (3 + 3 * t_c) * n * d * itemsize + 4 * (t_c + 1) * n * 4
    return itemsize * _traffic_elements(kernel, n, d, t_r, t_c)


def _traffic_elements(kernel: str, n: int, d: int, t_r: int, t_c: int) -> int:
    nd = n * d
    return {"naive": 4 * n * n + (t_c + 2 * t_r + 1) * nd,
            "fa2": (2 + 2 * t_r) * nd, "fa2_wgmma": (2 + 2 * t_r) * nd,
            "v_once_tc": 2 * n * n + (2 + 2 * t_r) * nd}[kernel]


@dataclass(frozen=True)
class Point:
    label: str
    kernel: str
    n: int
    d: int
    batch: int
    heads: int
    block_q: int
    block_k: int
    ctas: int
    flops: float  # 4·B·H·N²·d
    requests_bytes: int  # the papers' count, at the kernel's blocks
    l2_bytes: int
    dram_bytes: int
    compulsory_bytes: int  # Q, K, V read once, O written once
    bound: str  # the GPU model's
    model_tflops: float
    measured_tflops: float | None
    measured_file: str
    closed_form_bytes: int
    nonmatmul_share: float  # (exp + other) / matmul FLOPs, closed forms

    def intensity(self, level: str) -> float:
        return self.flops / getattr(self, f"{level}_bytes")

    @property
    def memory_bound(self) -> bool:
        return self.bound in MEMORY_BOUNDS


def measured_tflops(kernel: str, n: int, d: int, options: dict | None = None) -> float | None:
    """The median TFLOP/s of `kernel` at (N, d), non-causal fp16, in its MEASURED_FILE (None: not timed there)."""
    from gpumodel.measured import bench_cells, teaching_cells
    file = MEASURED_FILE[kernel]
    cells = teaching_cells() if file == "bench_kernels.json" else bench_cells(file)
    placement = (options or {}).get("placement")
    rates = [4 * c["batch"] * c["heads"] * c["n_q"] * c["n_k"] * c["d"] / c["time_s"] / 1e12 for c in cells
             if c["kernel"] == kernel and c["n_q"] == n and c["d"] == d and not c["causal"]
             and c["dtype"] == "fp16" and c["options"].get("placement") == placement]
    return statistics.median(rates) if rates else None


def points(n: int = 4096, d: int = 128) -> list[Point]:
    """Every kernel of KERNELS at the benchmarks' full GPU (B = 16k/N, H = 2048/d), fp16, non-causal."""
    batch, heads = full_gpu_problem(n, d)
    out = []
    for label, kernel, opts, variant in KERNELS:
        desc = describe(kernel, d, "fp16", False, n_q=n, n_k=n, **opts)
        rec = model_record(desc, batch, heads, n, n, d, "fp16", False)
        c = cf.counts(variant, batch, heads, n, n, d, dtype="fp16", block_q=desc.block_q, block_k=desc.block_k,
                      **({"placement": opts["placement"], "rescale": desc.rescale} if "placement" in opts else {}))
        out.append(Point(label=label, kernel=kernel, n=n, d=d, batch=batch, heads=heads, block_q=desc.block_q,
                         block_k=desc.block_k, ctas=gm.grid_ctas(desc, batch, heads, n),
                         flops=4 * batch * heads * n * n * d,
                         requests_bytes=rec["requests_bytes"], l2_bytes=rec["l2_bytes"], dram_bytes=rec["dram_bytes"],
                         compulsory_bytes=rec["compulsory_bytes"], bound=rec["bound"], model_tflops=rec["tflops"],
                         measured_tflops=measured_tflops(kernel, n, d, opts), measured_file=MEASURED_FILE[kernel],
                         closed_form_bytes=c.hbm_bytes,
                         nonmatmul_share=(c.flops["exp"] + c.flops["other"]) / c.flops["matmul"]))
    return out


@dataclass(frozen=True)
class Ceilings:
    hbm_bandwidth: float  # B/s, the GPU model's DRAM rate (the H200: measured on this workplace)
    tensor_flops: float  # FLOP/s, dense fp16, measured
    tensor_flops_spec: float  # the datasheet's
    exp_per_s: float  # MUFU: 16 exp/clk/SM × SMs × clock
    d: int

    @property
    def exp_flops(self) -> float:
        """The exponential unit as an attention FLOP/s roof: 4·d FLOPs per exp."""
        return self.exp_per_s * 4 * self.d

    @property
    def ridge(self) -> float:
        """FLOP per byte where the memory slope meets the lower compute roof."""
        return min(self.tensor_flops, self.exp_flops) / self.hbm_bandwidth

    def roof(self, intensity: float) -> tuple[float, str]:
        """(attainable FLOP/s at this intensity, the ceiling that sets it)."""
        options = {"HBM": self.hbm_bandwidth * intensity, "tensor cores": self.tensor_flops,
                   "exponentials": self.exp_flops}
        name = min(options, key=options.get)
        return options[name], name


def ceilings(d: int, gpu: str = "h200") -> Ceilings:
    g = get_gpu(gpu)
    exp_rate = gm.MUFU_PER_CLK * g.sms.value * g.value("clock_hz")
    # the DRAM rate the GPU model prices bytes at (gpumodel/coverage.py: the H200's measured copy rate, the H100's
    # datasheet figure at the H200's attainable share), so the notebooks' roofline and the model draw one slope
    return Ceilings(hbm_bandwidth=coverage.hbm_rate(g) if coverage.covers(g) else g.value("hbm_bandwidth", "measured"),
                    tensor_flops=g.value("fp16_tensor_flops", "measured"),
                    tensor_flops_spec=g.value("fp16_tensor_flops"), exp_per_s=exp_rate, d=d)


def comparison_rows(n: int = 4096, d: int = 128) -> tuple[list[str], list[list]]:
    """Item 6's table: (headers, rows), one row per kernel of KERNELS, every number computed. Raises when a
    TRAFFIC_FORMULA disagrees with the closed forms (lse aside: 4 bytes a row)."""
    from analysis.nbtools import human
    headers = ["", "kernel", "loop order", "HBM traffic, papers' count (elements per head; T_r = N/B_r, T_c = N/B_c)", "at N, d here",
               "extra memory", "parallelism", "thread blocks here", "non-matmul / matmul FLOPs",
               "measured TFLOP/s", "model TFLOP/s", "bound on the H200 (GPU model)", "DRAM bytes / compulsory"]
    rows = []
    for p in points(n, d):
        formula = traffic_bytes(p.kernel, n, d, p.block_q, p.block_k) * p.batch * p.heads
        lse = p.batch * p.heads * n * 4
        if abs(formula - (p.closed_form_bytes - lse)) > 1e-9 * formula:
            raise AssertionError(f"{p.kernel}: {TRAFFIC_FORMULA[p.kernel]} gives {formula} bytes, the closed forms "
                                 f"{p.closed_form_bytes - lse}")
        rows.append([p.label, f"`{p.kernel}` ({p.block_q}×{p.block_k})", LOOP_ORDER[p.kernel],
                     TRAFFIC_FORMULA[p.kernel], human(p.closed_form_bytes), EXTRA_MEMORY[p.kernel],
                     PARALLELISM[p.kernel], f"{p.ctas:,}", f"{p.nonmatmul_share:.1%}",
                     f"{p.measured_tflops:.0f}" if p.measured_tflops else "not timed",
                     f"{p.model_tflops:.0f}", BOUND_WORDS.get(p.bound, p.bound),
                     f"{p.dram_bytes / p.compulsory_bytes:.2f}×"])
    return headers, rows


BOUND_WORDS = {"tensor": "tensor cores", "softmax": "softmax (exponentials + FP32)", "smem": "shared memory",
               "l2": "L2 (memory)", "dram": "DRAM (memory)", "latency": "latency", "exposed": "exposed latency",
               "host": "launch (host)"}
